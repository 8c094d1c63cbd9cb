"""The table a sweep fills: its grid of points, the row each run becomes, and the CSV file that holds them.

A grid (``blocks=1,2,4``) and fixed parameters (``--set``) are coerced exactly like ``podsim run --set``;
the points are their Cartesian product in grid order (the last grid key varies fastest). A run becomes
one row: the point's parameters, the result's scalars flattened (``end_to_end_s``, ``busy_s.hbm``;
lists skipped), ``error`` (empty when the point ran) and ``seconds`` (its wall time).

The ``--out`` file is a valid CSV of the finished rows at every moment (`LiveCsv`); ``--resume`` reads
it back (`read_resume`) only when it is recognisably a sweep's own CSV, and otherwise refuses without
touching it: a sweep never rewrites rows it did not write.
"""
from __future__ import annotations

import contextlib
import csv
import functools
import io
import itertools
import math
import os
import time
import types
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO, overload

from simulator.engine.memory_budget import check_memory
from simulator.errors import PodsimError, one_line
from simulator.frontend.scenario import _short, coerce_value, load_scenario, scenario_params
from simulator.report.result import Result, jsonable

Row = dict[str, Any]
TAIL = ("error", "seconds")  #: the last two columns of every sweep CSV
_NOT_METRICS = ("scenario", "params")  #: keys of ``Result.to_json`` that are not metrics
MAX_POINTS = 1_000_000  #: the most points one sweep runs (a bigger grid is refused with its size, up front)
ROW_BYTES = 2048  #: rough memory of one point's row (a dict of a few dozen cells) kept until the sweep ends
_PLAIN = (int, float, str, bool, type(None))  #: cell values taken as they are (finite floats)
_MODULES: dict[str, tuple[int, types.ModuleType]] = {}  #: scenario modules by reference, with their file's mtime


class SweepError(PodsimError):
    """Bad sweep input (grid, workers, output file) or a Dask scheduler that cannot be used."""


@dataclass(frozen=True)
class SweepPlan:
    """A checked sweep: what to load, the parameter columns and every point in grid order."""

    scenario: str  #: a built-in scenario name or an absolute path: what each worker loads
    params: tuple[str, ...]  #: parameter columns: the grid keys in order, then the fixed keys
    points: Sequence[Row]  #: coerced keyword arguments of each run, in grid order (`GridPoints`: made lazily)
    run_kwargs: dict[str, Any]  #: added to every run but not a column (``trace=False``)
    accepted: tuple[str, ...] = ()  #: every parameter the scenario takes (metric names avoid these)

    def key(self, point: Row) -> tuple[str, ...]:
        """The point's parameter cells as written to CSV: how ``resume`` recognises a finished point."""
        return tuple(cell(point.get(name)) for name in self.params)


class GridPoints(Sequence[Row]):
    """The points of a Cartesian grid in grid order (the last axis fastest, as `itertools.product`), each
    made when asked for: memory for the axes' values, not for the product."""

    def __init__(self, axes: dict[str, list[Any]], fixed: dict[str, Any]) -> None:
        self.axes, self.fixed = axes, fixed
        self._size = math.prod(len(values) for values in axes.values())

    def __len__(self) -> int:
        return self._size

    @overload
    def __getitem__(self, index: int) -> Row: ...
    @overload
    def __getitem__(self, index: slice) -> list[Row]: ...

    def __getitem__(self, index: int | slice) -> Row | list[Row]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._size))]
        if index < 0:
            index += self._size
        if not 0 <= index < self._size:
            raise IndexError(index)
        point: Row = {}
        for key, values in reversed(self.axes.items()):
            index, at = divmod(index, len(values))
            point[key] = values[at]
        return {**{key: point[key] for key in self.axes}, **self.fixed}

    def __iter__(self) -> Iterator[Row]:
        for combo in itertools.product(*self.axes.values()):
            yield {**dict(zip(self.axes, combo, strict=True)), **self.fixed}


# --- the grid --------------------------------------------------------------------------------------


def grid_values(key: str, text: str) -> list[str]:
    """``"1,2,4"`` -> ``["1", "2", "4"]``; values that contain commas are separated by ``;`` instead."""
    parts = [part.strip() for part in text.split(";" if ";" in text else ",")]
    if not text.strip():
        raise SweepError(f"--grid {key}= has no values; give {key}=V1,V2,...")
    if "" in parts:
        raise SweepError(f"--grid {key}={text!r} has an empty value; give {key}=V1,V2,...")
    return parts


def parse_grid(pairs: list[str]) -> dict[str, list[str]]:
    """``["blocks=1,2", "buffers=1,2"]`` -> ``{"blocks": ["1", "2"], "buffers": ["1", "2"]}``."""
    grid: dict[str, list[str]] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise SweepError(f"--grid {pair!r} must look like KEY=V1,V2,...")
        if key in grid:
            raise SweepError(f"--grid {key} is given twice; list all its values in one --grid {key}=V1,V2,...")
        grid[key] = grid_values(key, text)
    return grid


def make_plan(module: types.ModuleType, grid: dict[str, Any], fixed: dict[str, Any] | None = None) -> SweepPlan:
    """Check ``grid`` and ``fixed`` against the scenario's parameters and list the points in grid order."""
    fixed = dict(fixed or {})
    if not grid:
        raise SweepError("a sweep needs at least one --grid KEY=V1,V2,...")
    accepted = scenario_params(module)
    for key in [*grid, *fixed]:
        if key not in accepted:
            raise SweepError(f"unknown parameter {key!r} for scenario {_short(module)}; valid: {', '.join(accepted)}")
    both = sorted(set(grid) & set(fixed))
    if both:
        raise SweepError(f"parameter {both[0]!r} is given twice: as a --grid and as a --set")
    axes = {key: _axis(module, key, values, accepted[key].default) for key, values in grid.items()}
    fixed = {key: _coerce(module, key, value, accepted[key].default, "--set") for key, value in fixed.items()}
    points = GridPoints(axes, fixed)
    size = len(points)
    if size > MAX_POINTS:
        shape = " x ".join(f"{len(values):,}" for values in axes.values())
        raise SweepError(f"the grid has {size:,} points ({shape}), more than the {MAX_POINTS:,} one sweep runs; "
                         "use fewer values per --grid or split the sweep")
    check_memory(size * ROW_BYTES, f"a sweep of {size:,} points (their rows)", "use fewer values per --grid")
    extra = {"trace": False} if "trace" in accepted and "trace" not in grid and "trace" not in fixed else {}
    return SweepPlan(_reference(module), (*axes, *fixed), points, extra, tuple(accepted))


def _axis(module: types.ModuleType, key: str, values: Any, default: Any) -> list[Any]:
    values = list(grid_values(key, values) if isinstance(values, str) else values)
    if not values:
        raise SweepError(f"--grid {key}= has no values; give {key}=V1,V2,...")
    coerced = [_coerce(module, key, value, default, "--grid") for value in values]
    texts = [cell(value) for value in coerced]
    twice = next((text for n, text in enumerate(texts) if text in texts[:n]), None)
    if twice is not None:
        raise SweepError(f"--grid {key} lists {twice!r} twice; each value once")
    return coerced


def _coerce(module: types.ModuleType, key: str, value: Any, default: Any, flag: str) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return coerce_value(module, key, value.strip(), default)
    except PodsimError as err:
        raise SweepError(f"{flag} {key}: {err}") from None


def _reference(module: types.ModuleType) -> str:
    """What a worker passes to `module_for`: the built-in name, or the file's absolute path."""
    name = module.__name__
    ref = _short(module) if name.startswith("scenarios.") else str(Path(module.__file__ or name).resolve())
    _MODULES.setdefault(ref, (_mtime(ref), module))
    return ref


def module_for(ref: str) -> types.ModuleType:
    """The scenario ``ref`` names, loaded once per process (again if its file changed: workers outlive sweeps)."""
    stamp, module = _MODULES.get(ref, (None, None))
    if module is None or stamp != _mtime(ref):
        _MODULES[ref] = (_mtime(ref), module := load_scenario(ref))
    return module


def _mtime(ref: str) -> int:
    with contextlib.suppress(OSError):
        return os.stat(ref).st_mtime_ns if os.path.isabs(ref) else 0
    return -1


# --- rows --------------------------------------------------------------------------------------------


def run_point(module: types.ModuleType, point: Row, run_kwargs: dict[str, Any] | None = None) -> Row:
    """One row: the point's parameters, the result's flattened scalars, ``error`` and ``seconds`` (wall s)."""
    start = time.perf_counter()
    try:
        result = module.run(**(run_kwargs or {}), **point)
        metrics, error = flatten(_as_dict(result), _reserved(module)), ""
    except (Exception, SystemExit) as err:  # a failing point is recorded in its row; the sweep goes on
        metrics, error = {}, one_line(err, typed=True)
    return {**point, **metrics, "error": error, "seconds": round(time.perf_counter() - start, 6)}


@functools.lru_cache(maxsize=16)
def _reserved(module: types.ModuleType) -> frozenset[str]:
    """Column names a metric may not take: the scenario's parameters, error and seconds."""
    return frozenset(scenario_params(module)) | frozenset(TAIL)


def _as_dict(result: Any) -> dict[str, Any]:
    if isinstance(result, Result):  # what to_json holds, without its deep copy (a sweep flattens anyway)
        return {**result.metrics, **result.extra}
    data = jsonable(result)
    if not isinstance(data, dict):
        raise TypeError(f"run() returned {type(result).__name__}, not a Result")
    return data


def flatten(data: dict[str, Any], reserved: Collection[str] = (), prefix: str = "") -> Row:
    """Scalars of a result's JSON: nested dicts as ``busy_s.hbm``, lists skipped, ``scenario``/``params``
    dropped, values made JSON-safe like `jsonable` (inf -> None); a name in ``reserved`` (a parameter
    of the scenario, error, seconds) is prefixed ``result.``."""
    out: Row = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if not prefix and key in _NOT_METRICS:
            continue
        if isinstance(value, dict):
            out.update(flatten(value, reserved, f"{name}."))
        elif not isinstance(value, (list, tuple)):
            plain = type(value) in _PLAIN and (type(value) is not float or math.isfinite(value))
            out[f"result.{name}" if name in reserved else name] = value if plain else jsonable(value)
    return out


def ordered_columns(params: Iterable[str], rows: Iterable[Row]) -> list[str]:
    """Parameters first, then every other key in order of first appearance, then error and seconds."""
    columns = dict.fromkeys(params)
    for row in rows:
        columns.update(dict.fromkeys(row))
    return [c for c in columns if c not in TAIL] + list(TAIL)


def in_grid_order(params: Iterable[str], indexed: Iterable[tuple[int, Row]]) -> list[Row]:
    """Rows sorted by their place in the grid, every row with every column (None where it has none)."""
    ordered = [row for _, row in sorted(indexed, key=lambda pair: pair[0])]
    columns = ordered_columns(params, ordered)
    return [{c: row.get(c) for c in columns} for row in ordered]


# --- CSV cells and files ----------------------------------------------------------------------------


def cell(value: Any) -> str:
    """The CSV text of a value: None as empty, floats round-trip exactly, tuples comma-joined."""
    value = jsonable(value)
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, list):
        return ",".join(cell(v) for v in value)
    return str(value)


def parse_cell(text: str) -> Any:
    """A CSV cell back to a value: empty -> None, then an int or float whose `cell` is ``text`` exactly,
    else the text itself (so ``"007"`` and ``"nan"`` stay text and rewriting a row changes no byte)."""
    if text == "":
        return None
    for kind in (int, float):
        with contextlib.suppress(ValueError):
            if cell(value := kind(text)) == text:
                return value
    return text


def write_csv(rows: list[Row], stream: TextIO, columns: list[str] | None = None) -> None:
    """Write ``rows`` as CSV to ``stream`` (columns: the first row's keys unless given)."""
    columns = columns if columns is not None else list(rows[0]) if rows else []
    stream.write(csv_line(columns) + "".join(csv_line([cell(row.get(c)) for c in columns]) for row in rows))


def csv_line(cells: list[str]) -> str:
    """One CSV line ending in ``\n``, with any cell holding ``\r`` or ``\n`` quoted (a writer told to end
    lines with ``\n`` alone would leave a ``\r`` bare, and a reader would split the row there)."""
    text = io.StringIO()
    csv.writer(text, lineterminator="\r\n").writerow(cells)
    return text.getvalue()[:-2] + "\n"


class LiveCsv:
    """The ``--out`` file, a valid CSV of the finished rows at every moment: rows are appended and flushed
    as they finish; a row that brings a new column rewrites it (atomically) with the wider header."""

    def __init__(self, path: Path, rows: list[Row], params: tuple[str, ...]) -> None:
        self.path = path
        self.stream: TextIO | None = None
        self.rewrite(rows, ordered_columns(params, rows))

    def append(self, row: Row) -> None:
        """Add a finished row to the file (flushed, so an interrupted sweep keeps it)."""
        self.rows.append(row)
        if any(key not in self.columns for key in row):
            self.rewrite(self.rows, ordered_columns(self.columns, [row]))
            return
        assert self.stream is not None  # open from `rewrite` on (the table starts with one)
        self.stream.write(csv_line([cell(row.get(c)) for c in self.columns]))
        self.stream.flush()

    def rewrite(self, rows: list[Row], columns: list[str]) -> None:
        """Replace the file's content with ``rows`` under ``columns`` (a temporary file moved into place)."""
        self.close()
        self.rows, self.columns = list(rows), columns
        tmp = self.path.with_name(f".{self.path.name}.partial")
        try:
            with open(tmp, "w", newline="") as stream:
                write_csv(self.rows, stream, self.columns)
            os.replace(tmp, self.path)
            self.stream = open(self.path, "a", newline="")  # noqa: SIM115 -- kept open for the whole sweep
        except OSError as err:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise SweepError(f"cannot write --out {str(self.path)!r}: {err.strerror or err}") from None

    def close(self) -> None:
        """Close the file (the rows are already on disk)."""
        if self.stream:
            self.stream.close()
            self.stream = None


def read_resume(path: Path, plan: SweepPlan) -> list[tuple[int, Row]]:
    """Rows already in ``path`` with their place: a grid index, or after the grid for rows not in it.
    Raises `SweepError`, leaving the file as it was, unless it is a sweep CSV with this sweep's keys."""
    if not path.is_file() or path.stat().st_size == 0:
        return []
    header, records = _sweep_csv(path, plan)
    where = {plan.key(point): i for i, point in enumerate(plan.points)}
    out, seen = [], set()
    for n, record in enumerate(records):
        text = dict(zip(header, record, strict=True))
        key = tuple(text[p] for p in plan.params)
        if key in seen:
            continue  # a point written twice (files concatenated by hand): keep the first
        seen.add(key)
        index = where.get(key, len(plan.points) + n)
        row = {k: v if k == "error" else parse_cell(v) for k, v in text.items()}
        out.append((index, {**row, **plan.points[index]} if index < len(plan.points) else row))
    return out


def _sweep_csv(path: Path, plan: SweepPlan) -> tuple[list[str], list[list[str]]]:
    """The header and complete records of a CSV a sweep with ``plan``'s keys wrote (a last line cut short
    by a sweep killed mid-write is dropped: that point runs again)."""
    try:
        text = path.read_bytes().decode("utf-8")
        table = list(csv.reader(io.StringIO(text, newline="")))
    except OSError as err:
        raise SweepError(f"cannot read --out {str(path)!r}: {err.strerror or err}") from None
    except UnicodeDecodeError:
        raise _not_a_sweep(path, "not UTF-8 text") from None
    except csv.Error as err:
        raise _not_a_sweep(path, f"unreadable as CSV: {one_line(err)}") from None
    header, records = (table[0], table[1:]) if table else ([], [])
    if len(header) < 2 or header[-2:] != list(TAIL):
        raise _not_a_sweep(path, "its header does not end with the columns error,seconds")
    twice = next((c for n, c in enumerate(header) if c in header[:n] or not c.strip()), None)
    if twice is not None:
        raise _not_a_sweep(path, f"its header has {'an empty column' if not twice.strip() else f'{twice!r} twice'}")
    missing = [p for p in plan.params if p not in header]
    extra = [c for c in header if c in plan.accepted and c not in plan.params]
    if missing or extra:
        what = f"has no column {missing[0]!r}" if missing else f"has a column {extra[0]!r} this sweep does not set"
        raise SweepError(f"--resume: {str(path)!r} {what}; resume with the same --grid and --set keys, "
                         "or write to another --out")
    if records and not text.endswith("\n"):  # a sweep writes whole lines: the last one was cut short
        records.pop()
    for n, record in enumerate(records, 2):
        if len(record) != len(header):
            raise _not_a_sweep(path, f"row {n} has {len(record)} cells under a header of {len(header)}")
        try:
            seconds = float(record[-1])
        except ValueError:
            seconds = math.nan
        if not 0 <= seconds < math.inf:
            raise _not_a_sweep(path, f"row {n} has seconds={record[-1]!r}, not a wall time")
    return header, records


def _not_a_sweep(path: Path, why: str) -> SweepError:
    return SweepError(f"--resume: {str(path)!r} is not a sweep CSV ({why}); it is left as it was: "
                      "resume from the --out of an earlier sweep, or write to another --out")
