"""Parameter sweeps: one scenario run per point of a Cartesian grid, in parallel, as flat CSV rows.

A sweep takes grids (``blocks=1,2,4``) and fixed parameters (``--set``), coerces every value exactly
like ``podsim run --set`` does, and runs ``module.run(**point)`` once per point (with ``trace=False``
when the scenario takes ``trace`` and the user did not set it: sweeps need numbers, not spans, so
span-based metrics such as ``overlap_s`` stay empty unless ``--set trace=true``).

One row per point: its parameters, then the result's scalars flattened (``end_to_end_s``, ``flops``,
``analytic_s``, nested dicts as ``busy_s.hbm``; lists skipped), then ``error`` (empty when the point
ran) and ``seconds`` (wall time of the point). Rows come back in grid order (the last grid key varies
fastest) whatever the order they finished in, so the rows are the same for any number of workers.

Where the work runs: in this process (``workers=1``), a local process pool (the default, one process
per CPU), or an existing Dask cluster (``scheduler=ADDRESS``; ``pip install 'podsim[dask]'``). Points
travel in chunks sized from the measured time per point (about 50 ms of work each locally, 200 ms on
Dask; single points at first), so the per-point cost of the runner stays small.

The output file is always a valid CSV of the finished rows: each row is appended and flushed as it
finishes (a row bringing a new column rewrites the file, atomically, with the wider header), and when
the sweep ends -- or is interrupted -- the file is rewritten once in grid order. ``resume`` skips the
points whose parameter cells (the coerced values' string forms) are already in the file.
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import functools
import itertools
import json
import math
import os
import sys
import time
import types
from collections import deque
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from simulator.errors import PodsimError, one_line
from simulator.frontend.scenario import _short, coerce_value, load_scenario, parse_sets, scenario_params
from simulator.report.result import Result, jsonable

#: Keys of ``Result.to_json`` that are not metrics: the scenario name and the echoed parameters.
_NOT_METRICS = ("scenario", "params")
_TAIL = ("error", "seconds")
_STDOUT = (None, "-", "/dev/stdout")
_PLAIN = (int, float, str, bool, type(None))  #: cell values taken as they are (finite floats)
_LOCAL_CHUNK_S = 0.05  #: seconds of work per chunk sent to a local process (IPC costs ~0.2 ms a chunk)
_DASK_CHUNK_S = 0.2  #: seconds of work per Dask task (a task costs ~1 ms of scheduling)
_MODULES: dict[str, types.ModuleType] = {}  #: scenario modules by reference, loaded once per process

Row = dict[str, Any]


class SweepError(PodsimError):
    """Bad sweep input (grid, workers, output file) or a Dask scheduler that cannot be used."""


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C (or a scenario raising KeyboardInterrupt) stopped a sweep; ``rows`` holds the finished rows."""

    def __init__(self, rows: list[Row], done: int, total: int, out: str | None) -> None:
        where = f"; rows kept in {out}, rerun with --resume to finish" if out else ""
        super().__init__(f"sweep interrupted after {done} of {total} points{where}")
        self.rows = rows


@dataclass(frozen=True)
class Plan:
    """A checked sweep: what to load, the parameter columns and every point in grid order."""

    scenario: str  #: a built-in scenario name or an absolute path: what each worker loads
    params: tuple[str, ...]  #: parameter columns: the grid keys in order, then the fixed keys
    points: tuple[Row, ...]  #: coerced keyword arguments of each run, in grid order
    run_kwargs: dict[str, Any]  #: added to every run but not a column (``trace=False``)
    accepted: tuple[str, ...] = ()  #: every parameter the scenario takes (metric names avoid these)

    def key(self, point: Row) -> tuple[str, ...]:
        """The point's parameter cells as written to CSV: how ``resume`` recognises a finished point."""
        return tuple(cell(point.get(name)) for name in self.params)


# --- the public API -------------------------------------------------------------------------------


def sweep(scenario: str | types.ModuleType, grid: dict[str, Any], fixed: dict[str, Any] | None = None,
          workers: int | None = None, scheduler: str | None = None, *, out: str | Path | None = None,
          resume: bool = False, progress: bool = False, chunk_size: int | None = None,
          connect_timeout_s: float = 3.0) -> list[Row]:
    """Run ``scenario`` at every point of the Cartesian product of ``grid``; one flat row per point.

    ``grid`` maps parameter names to lists of values (strings are coerced like ``--set``; other values
    are used as they are; a string ``"1,2,4"`` is split like ``--grid``). ``fixed`` holds parameters
    shared by every point. ``workers``: local processes (default ``os.cpu_count()``; 1 runs in this
    process); ``scheduler``: a Dask scheduler address instead. ``out``: a CSV file kept up to date as
    rows finish; ``resume`` skips the points already in it. Rows are in grid order and all have the
    same keys (missing values are None). Ctrl-C raises `SweepInterrupted` after saving finished rows.
    """
    module = scenario if isinstance(scenario, types.ModuleType) else load_scenario(scenario)
    plan = make_plan(module, grid, fixed)
    workers = _check_workers(workers, scheduler)
    path = _check_out(out, resume)
    old = _read_resume(path, plan) if resume and path else []
    done = {index for index, _ in old}
    todo = [i for i in range(len(plan.points)) if i not in done]
    with _backend(plan, workers, scheduler, chunk_size, connect_timeout_s) as backend:
        return _collect(plan, old, todo, backend, path, Progress(len(todo), progress))


def sweep_frame(*args: Any, **kwargs: Any) -> Any:
    """`sweep` as a pandas DataFrame (one row per point, same columns and order)."""
    try:
        import pandas as pd
    except ImportError:
        raise SweepError("sweep_frame needs pandas (pip install pandas); sweep() returns plain rows") from None
    rows = sweep(*args, **kwargs)
    return pd.DataFrame(rows, columns=list(rows[0]) if rows else None)


def write_csv(rows: list[Row], stream: TextIO, columns: list[str] | None = None) -> None:
    """Write ``rows`` as CSV to ``stream`` (columns: the first row's keys unless given)."""
    columns = columns if columns is not None else list(rows[0]) if rows else []
    writer = csv.writer(stream, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows([cell(row.get(c)) for c in columns] for row in rows)


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


# --- planning: grids, coercion, checks ------------------------------------------------------------


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


def make_plan(module: types.ModuleType, grid: dict[str, Any], fixed: dict[str, Any] | None = None) -> Plan:
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
    points = tuple({**dict(zip(axes, combo, strict=True)), **fixed} for combo in itertools.product(*axes.values()))
    extra = {"trace": False} if "trace" in accepted and "trace" not in grid and "trace" not in fixed else {}
    return Plan(_reference(module), (*axes, *fixed), points, extra, tuple(accepted))


def _axis(module: types.ModuleType, key: str, values: Any, default: Any) -> list[Any]:
    if isinstance(values, str):
        values = grid_values(key, values)
    values = list(values)
    if not values:
        raise SweepError(f"--grid {key}= has no values; give {key}=V1,V2,...")
    coerced = [_coerce(module, key, value, default, "--grid") for value in values]
    seen: set[str] = set()
    for text in map(cell, coerced):
        if text in seen:
            raise SweepError(f"--grid {key} lists {text!r} twice; each value once")
        seen.add(text)
    return coerced


def _coerce(module: types.ModuleType, key: str, value: Any, default: Any, flag: str) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return coerce_value(module, key, value.strip(), default)
    except PodsimError as err:
        raise SweepError(f"{flag} {key}: {err}") from None


def _reference(module: types.ModuleType) -> str:
    """What a worker passes to `load_scenario`: the built-in name, or the file's absolute path."""
    name = module.__name__
    ref = _short(module) if name.startswith("scenarios.") else str(Path(module.__file__ or name).resolve())
    _MODULES.setdefault(ref, module)
    return ref


def _check_workers(workers: int | None, scheduler: str | None) -> int:
    if scheduler is not None and workers is not None:
        raise SweepError("give workers (local processes) or scheduler (a Dask cluster), not both")
    if workers is None:
        return os.cpu_count() or 1
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise SweepError(f"--workers {workers!r} must be a whole number >= 1 (1 runs in this process)")
    return workers


def _check_out(out: str | Path | None, resume: bool) -> Path | None:
    text = None if out is None else str(out)
    if resume and text in _STDOUT:
        raise SweepError("--resume needs --out FILE.csv: the file whose finished points are skipped")
    return None if text in _STDOUT else Path(text)  # type: ignore[arg-type]


# --- running points (in this process, in pool workers and on Dask workers) -------------------------


def _module(ref: str) -> types.ModuleType:
    if ref not in _MODULES:
        _MODULES[ref] = load_scenario(ref)
    return _MODULES[ref]


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
    return frozenset(scenario_params(module)) | frozenset(_TAIL)


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


def run_chunk(scenario: str, run_kwargs: dict[str, Any],
              items: list[tuple[int, Row]]) -> tuple[list[tuple[int, Row]], bool]:
    """Run a chunk of ``(index, point)`` in a worker; the flag says a run raised KeyboardInterrupt there."""
    module, rows = _module(scenario), []
    for index, point in items:
        try:
            rows.append((index, run_point(module, point, run_kwargs)))
        except KeyboardInterrupt:
            return rows, True
    return rows, False


def _quiet_worker() -> None:
    """Pool workers ignore Ctrl-C: the parent handles it and stops them."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


# --- backends: in process, local pool, Dask ----------------------------------------------------------

Backend = Callable[[list[int]], Iterator[tuple[int, Row]]]  #: point indices -> (index, row) as they finish


@contextlib.contextmanager
def _backend(plan: Plan, workers: int, scheduler: str | None, chunk_size: int | None,
             timeout_s: float) -> Iterator[Backend]:
    """Where the points run; a Dask client is connected here, before any file is written, and closed after."""
    if scheduler is None:
        yield lambda todo: _run_local(plan, todo, workers, chunk_size)
        return
    client = dask_client(scheduler, timeout_s)
    try:
        yield lambda todo: _run_dask(plan, todo, client, chunk_size)
    finally:
        client.close()


def _run_local(plan: Plan, todo: list[int], workers: int, chunk_size: int | None) -> Iterator[tuple[int, Row]]:
    """A process pool for two points or more and two workers or more; otherwise this process."""
    return _run_pool(plan, todo, workers, chunk_size) if workers > 1 and len(todo) > 1 else _run_inline(plan, todo)


def _run_inline(plan: Plan, todo: list[int]) -> Iterator[tuple[int, Row]]:
    """Every point in this process, one after the other (a KeyboardInterrupt ends it; earlier rows are kept)."""
    module = _module(plan.scenario)
    for index in todo:
        yield index, run_point(module, plan.points[index], plan.run_kwargs)


class _Chunker:
    """Cuts the points still to run into chunks of about ``target_s`` of work each: single points at
    first, then sized from the mean point time so far, and smaller near the end so workers finish together."""

    def __init__(self, todo: list[int], workers: int, target_s: float, size: int | None) -> None:
        self.rest, self.workers, self.target_s, self.size = deque(todo), workers, target_s, size
        self.seen, self.seconds = 0, 0.0

    def take(self) -> list[int]:
        """The next chunk of point indices (empty when none is left)."""
        size = self.size or self._size()
        return [self.rest.popleft() for _ in range(min(size, len(self.rest)))]

    def _size(self) -> int:
        if not self.seen:
            return 1
        by_time = int(self.target_s / max(self.seconds / self.seen, 1e-6))
        return max(1, min(by_time, len(self.rest) // (2 * self.workers)))

    def observe(self, rows: list[tuple[int, Row]]) -> None:
        """Learn the time per point (s) from finished rows."""
        self.seen += len(rows)
        self.seconds += sum(row["seconds"] for _, row in rows)


def _feed(plan: Plan, chunker: _Chunker, submit: Callable[[list[tuple[int, Row]]], Any],
          wait_first: Callable[[set[Any]], Iterable[Any]], slots: int) -> Iterator[tuple[int, Row]]:
    """Keep ``slots`` chunks in flight and yield rows as chunks finish; on Ctrl-C (here or in a worker)
    yield the rows of chunks that had already finished, then stop."""
    pending: set[Any] = set()
    try:
        while chunker.rest or pending:
            while len(pending) < slots and chunker.rest:
                pending.add(submit([(i, plan.points[i]) for i in chunker.take()]))
            for future in wait_first(pending):
                pending.discard(future)
                rows, interrupted = future.result()
                chunker.observe(rows)
                yield from rows
                if interrupted:
                    raise KeyboardInterrupt
    except KeyboardInterrupt:
        for future in [f for f in pending if f.done() and not f.cancelled() and f.exception() is None]:
            yield from future.result()[0]
        raise


def _run_pool(plan: Plan, todo: list[int], workers: int, chunk_size: int | None) -> Iterator[tuple[int, Row]]:
    """Chunks of points in a local process pool (forked when this process has one thread: fast start)."""
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    pool = ProcessPoolExecutor(min(workers, len(todo)), mp_context=_mp_context(), initializer=_quiet_worker)
    chunker = _Chunker(todo, workers, _LOCAL_CHUNK_S, chunk_size)
    try:
        yield from _feed(plan, chunker, lambda items: pool.submit(run_chunk, plan.scenario, plan.run_kwargs, items),
                         lambda pending: wait(pending, return_when=FIRST_COMPLETED).done, 2 * workers)
    except BrokenProcessPool as err:
        raise SweepError(f"a worker process died ({err}); finished rows are kept, --resume runs the rest") from None
    finally:
        _stop_pool(pool)


def _mp_context() -> Any:
    import multiprocessing
    import threading

    if "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1:
        return multiprocessing.get_context("fork")  # safe with one thread; workers inherit loaded modules
    return multiprocessing.get_context()


def _stop_pool(pool: Any) -> None:
    """Cancel queued chunks and end the workers now, rather than after their current chunk."""
    if hasattr(pool, "terminate_workers"):  # Python >= 3.14
        pool.terminate_workers()
        return
    processes = list((getattr(pool, "_processes", None) or {}).values())  # no public handle before 3.14
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.terminate()
    for process in processes:
        process.join()


def _run_dask(plan: Plan, todo: list[int], client: Any, chunk_size: int | None) -> Iterator[tuple[int, Row]]:
    """Chunks of points as tasks on the Dask cluster behind ``client``."""
    import distributed

    threads = sum(client.nthreads().values())
    if not threads:
        raise SweepError(f"the Dask cluster at {client.scheduler.address!r} has no workers")
    chunker, pending = _Chunker(todo, threads, _DASK_CHUNK_S, chunk_size), set()
    finished = distributed.as_completed(loop=client.loop)  # not distributed.wait: that needs a default client

    def submit(items: list[tuple[int, Row]]) -> Any:
        future = client.submit(run_chunk, plan.scenario, plan.run_kwargs, items, pure=False)
        pending.add(future)
        finished.add(future)
        return future

    try:
        yield from _feed(plan, chunker, submit, lambda _: [next(finished)], 2 * threads)
    except (PodsimError, KeyboardInterrupt):
        raise
    except Exception as err:  # a worker lost, a task that cannot be unpickled there...
        raise SweepError(f"the Dask cluster failed: {one_line(err, typed=True)}; finished rows are kept") from None
    finally:
        client.cancel(list(pending))


def dask_client(address: str, timeout_s: float = 3.0) -> Any:
    """A `distributed.Client` connected to ``address``, or a one-line `SweepError` within ``timeout_s``."""
    try:
        from distributed import Client
    except ImportError:
        raise SweepError("--scheduler needs Dask, which is not installed: pip install 'podsim[dask]' "
                         "(or pip install 'dask[distributed]')") from None
    _check_address(address)
    try:
        return Client(address, timeout=timeout_s, set_as_default=False)
    except Exception as err:  # refused, timed out, unknown host: all one clear line
        raise SweepError(f"cannot connect to the Dask scheduler at {address!r} (waited {timeout_s:g} s): "
                         f"{' '.join(str(err).split()) or type(err).__name__}") from None


def _check_address(address: str) -> None:
    """Reject an address Dask cannot parse before a Client is made (a half-made one hangs on cleanup)."""
    from distributed.comm import parse_address
    from distributed.comm.registry import get_backend

    try:
        scheme, location = parse_address(address)
        get_backend(scheme)
    except ValueError as err:
        raise SweepError(f"--scheduler {address!r} is not a Dask address ({err}); e.g. tcp://host:8786") from None
    if not location.strip(":/"):
        raise SweepError(f"--scheduler {address!r} names no host; e.g. tcp://host:8786")


# --- collecting rows: order, columns, the live CSV file, resume -----------------------------------


def _collect(plan: Plan, old: list[tuple[int, Row]], todo: list[int], backend: Backend, path: Path | None,
             bar: Progress) -> list[Row]:
    """Run ``todo`` through ``backend``, keep the file current, and return every row in grid order."""
    live = _LiveCsv(path, [row for _, row in old], plan.params) if path else None
    finished: dict[int, Row] = {}
    try:
        with contextlib.closing(backend(todo)) as results:
            for index, row in results:
                finished[index] = row
                bar.advance()
                if live:
                    live.append(row)
    except KeyboardInterrupt:
        bar.close()
        rows = _finish(plan, old, finished, live)
        raise SweepInterrupted(rows, len(finished), len(todo), str(path) if path else None) from None
    except BaseException:
        bar.close()
        _finish(plan, old, finished, live)
        raise
    bar.close()
    return _finish(plan, old, finished, live)


def _finish(plan: Plan, old: list[tuple[int, Row]], finished: dict[int, Row], live: _LiveCsv | None) -> list[Row]:
    """All rows in grid order (rows from the file that are not in this grid last), file rewritten."""
    ordered = sorted([*old, *finished.items()], key=lambda pair: pair[0])
    columns = ordered_columns(plan.params, [row for _, row in ordered])
    rows = [{c: row.get(c) for c in columns} for _, row in ordered]
    if live:
        live.rewrite(rows, columns)
        live.close()
    return rows


def ordered_columns(params: Iterable[str], rows: Iterable[Row]) -> list[str]:
    """Parameters first, then every other key in order of first appearance, then error and seconds."""
    columns = dict.fromkeys(params)
    for row in rows:
        columns.update(dict.fromkeys(row))
    return [c for c in columns if c not in _TAIL] + list(_TAIL)


class _LiveCsv:
    """The ``--out`` file, a valid CSV of the finished rows at every moment: rows are appended and flushed
    as they finish; a row that brings a new column rewrites it (atomically) with the wider header."""

    def __init__(self, path: Path, rows: list[Row], params: tuple[str, ...]) -> None:
        self.path, self.stream = path, None
        self.rows, self.columns = list(rows), ordered_columns(params, rows)
        try:
            self._write()
        except OSError as err:
            raise SweepError(f"cannot write --out {str(path)!r}: {err.strerror or err}") from None

    def append(self, row: Row) -> None:
        """Add a finished row to the file (flushed, so an interrupted sweep keeps it)."""
        self.rows.append(row)
        if any(key not in self.columns for key in row):
            self.rewrite(self.rows, ordered_columns(self.columns, [row]))
            return
        csv.writer(self.stream, lineterminator="\n").writerow([cell(row.get(c)) for c in self.columns])
        self.stream.flush()  # type: ignore[union-attr]

    def rewrite(self, rows: list[Row], columns: list[str]) -> None:
        """Replace the file's content with ``rows`` under ``columns``."""
        self.rows, self.columns = list(rows), columns
        self._write()

    def _write(self) -> None:
        self.close()
        tmp = self.path.with_name(f".{self.path.name}.partial")
        with open(tmp, "w", newline="") as stream:
            write_csv(self.rows, stream, self.columns)
        os.replace(tmp, self.path)
        self.stream = open(self.path, "a", newline="")  # noqa: SIM115 -- kept open for the whole sweep

    def close(self) -> None:
        """Close the file (the rows are already on disk)."""
        if self.stream:
            self.stream.close()
            self.stream = None


def _read_resume(path: Path, plan: Plan) -> list[tuple[int, Row]]:
    """Rows already in ``path`` with their place: a grid index, or after the grid for rows not in it."""
    if not path.is_file() or path.stat().st_size == 0:
        return []
    with open(path, newline="") as stream:
        reader = csv.DictReader(stream)
        missing = [p for p in plan.params if p not in (reader.fieldnames or [])]
        extra = [c for c in reader.fieldnames or [] if c in plan.accepted and c not in plan.params]
        if missing or extra:
            what = f"has no column {missing[0]!r}" if missing else f"has a column {extra[0]!r} this sweep does not set"
            raise SweepError(f"--resume: {str(path)!r} {what}; resume with the same --grid and --set keys, "
                             "or write to another --out")
        complete = [row for row in reader if None not in row.values() and None not in row]
    where = {plan.key(point): i for i, point in enumerate(plan.points)}
    out, seen = [], set()
    for n, text in enumerate(complete):
        key = tuple(text[p] for p in plan.params)
        if key in seen:
            continue  # a point written twice (files concatenated by hand): keep the first
        seen.add(key)
        index = where.get(key, len(plan.points) + n)
        row = {k: v if k == "error" else parse_cell(v) for k, v in text.items()}
        out.append((index, {**row, **plan.points[index]} if index < len(plan.points) else row))
    return out


def parse_cell(text: str) -> Any:
    """A CSV cell back to a value: empty -> None, then int, float, or the text itself."""
    if text == "":
        return None
    for kind in (int, float):
        with contextlib.suppress(ValueError):
            return kind(text)
    return text


# --- progress ------------------------------------------------------------------------------------


class Progress:
    """A one-line progress bar on stderr (points done of total, elapsed and remaining seconds); silent
    unless enabled (the CLI enables it when stderr is a terminal)."""

    def __init__(self, total: int, enabled: bool, stream: TextIO | None = None) -> None:
        self.total, self.enabled, self.stream = total, enabled and total > 0, stream or sys.stderr
        self.done, self.start_s, self.drawn_s = 0, time.monotonic(), -math.inf

    def advance(self) -> None:
        """One more point finished; redraw at most ten times a second."""
        self.done += 1
        now = time.monotonic()
        if self.enabled and (now - self.drawn_s >= 0.1 or self.done == self.total):
            self.drawn_s = now
            elapsed = now - self.start_s
            left = elapsed * (self.total - self.done) / self.done
            bar = "#" * (30 * self.done // self.total)
            self.stream.write(f"\rsweep [{bar:<30}] {self.done}/{self.total}  {elapsed:.1f} s, ~{left:.0f} s left"
                              "\x1b[K")
            self.stream.flush()

    def close(self) -> None:
        """End the bar's line so later messages start on their own line."""
        if self.enabled and self.done:
            self.stream.write("\n")
            self.stream.flush()
            self.enabled = False


# --- the command line ----------------------------------------------------------------------------


def add_sweep_parser(sub: Any) -> None:
    """Add ``podsim sweep`` to the CLI's subparsers."""
    p = sub.add_parser("sweep", help="run a scenario over a grid of parameters, one CSV row per point")
    p.add_argument("scenario", help="name from `podsim list`, or a path to a scenario .py file")
    p.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2,...",
                   help="values of one parameter (separate with ';' when values contain commas); "
                        "the sweep runs the Cartesian product of all grids")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a parameter fixed for every point (trace=true keeps spans for overlap_s, busy_s...)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--workers", type=int, metavar="N",
                       help="local processes (default: CPU count; 1 runs in this process)")
    where.add_argument("--scheduler", metavar="ADDRESS",
                       help="run on an existing Dask cluster, e.g. tcp://host:8786 (pip install 'podsim[dask]')")
    p.add_argument("--out", metavar="FILE.csv", help="write the rows here as they finish (default: stdout)")
    p.add_argument("--resume", action="store_true", help="skip the points already in --out FILE and add the rest")
    p.add_argument("--json", action="store_true", help="print one JSON object (summary and rows) on stdout")


def cmd_sweep(args: argparse.Namespace) -> None:
    """``podsim sweep``: CSV on stdout (or --out FILE plus a one-line summary), or one JSON object."""
    module = load_scenario(args.scenario)
    grid, fixed = parse_grid(args.grid), parse_sets(module, args.set)
    to_stdout = args.out in _STDOUT
    if args.json and args.out is not None and to_stdout:
        raise SweepError(f"--json and --out {args.out} would both write to stdout; give --out FILE.csv or drop it")
    try:
        rows = sweep(module, grid, fixed, workers=args.workers, scheduler=args.scheduler,
                     out=None if to_stdout else args.out, resume=args.resume, progress=sys.stderr.isatty())
    except SweepInterrupted as stop:
        if to_stdout or args.json:  # the finished rows, where they were to go; a file already holds them
            _print_rows(args, stop.rows, to_stdout)
        raise
    _print_rows(args, rows, to_stdout)


def _print_rows(args: argparse.Namespace, rows: list[Row], to_stdout: bool) -> None:
    failed = sum(1 for row in rows if row.get("error"))
    if args.json:
        out = {"scenario": args.scenario, "rows_count": len(rows), "failed": failed,
               "out": None if to_stdout else args.out, "columns": list(rows[0]) if rows else [], "rows": rows}
        print(json.dumps(jsonable(out), indent=2))
    elif to_stdout:
        write_csv(rows, sys.stdout)
        sys.stdout.flush()
    else:
        print(f"{args.scenario}: {len(rows)} rows ({failed} failed) in {args.out}")
