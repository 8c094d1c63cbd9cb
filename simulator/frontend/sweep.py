"""Parameter sweeps: one scenario run per point of a Cartesian grid, in parallel, as flat CSV rows.

`sweep` checks the grid (`sweep_table.make_plan`), skips the points an earlier run left in ``--out``
(``resume``), runs the rest and returns one row per point in grid order, whatever order they finished
in, so the rows are the same for any number of workers. A failing point records its error in its row
and the sweep goes on; Ctrl-C keeps the finished rows and raises `SweepInterrupted`.

Local points run through joblib: in this process (``workers=1``) or on its loky process pool (the
default, one process per CPU), which batches points by their measured time (so short points do not pay a
round trip each) and, on an error or Ctrl-C, cancels what is queued and ends its workers. With
``scheduler=ADDRESS`` they run on an existing Dask cluster through distributed's futures (``pip install
'podsim[dask]'``). tqdm draws the progress bar (the CLI shows it when stderr is a terminal).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import types
from collections.abc import Generator
from pathlib import Path
from typing import Any

from simulator.errors import PodsimError, one_line
from simulator.frontend.command_help import HELP
from simulator.frontend.scenario import load_scenario, parse_sets
from simulator.frontend.sweep_table import (
    LiveCsv,
    Row,
    SweepError,
    SweepPlan,
    cell,
    grid_values,
    in_grid_order,
    make_plan,
    module_for,
    parse_cell,
    parse_grid,
    read_resume,
    run_point,
    write_csv,
)
from simulator.report.result import dumps_json
from simulator.units import check_int

__all__ = ["SweepError", "SweepInterrupted", "cell", "dask_client", "grid_values", "parse_cell", "sweep",
           "sweep_frame", "write_csv"]

_STDOUT = (None, "-", "/dev/stdout")


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C (or a scenario raising KeyboardInterrupt) stopped a sweep; ``rows`` holds the finished rows."""

    def __init__(self, rows: list[Row], done: int, total: int, out: str | None) -> None:
        where = f"; rows kept in {out}, rerun with --resume to finish" if out else ""
        super().__init__(f"sweep interrupted after {done} of {total} points{where}")
        self.rows = rows


def sweep(scenario: str | types.ModuleType, grid: dict[str, Any], fixed: dict[str, Any] | None = None,
          workers: int | None = None, scheduler: str | None = None, *, out: str | Path | None = None,
          resume: bool = False, progress: bool = False, chunk_size: int | None = None,
          connect_timeout_s: float = 3.0) -> list[Row]:
    """Run ``scenario`` at every point of the Cartesian product of ``grid``; one flat row per point.

    ``grid`` maps parameter names to lists of values (strings are coerced like ``--set``; other values
    are used as they are; a string ``"1,2,4"`` is split like ``--grid``). ``fixed`` holds parameters
    shared by every point. ``workers``: local processes (default ``os.cpu_count()``; 1 runs in this
    process); ``scheduler``: a Dask scheduler address instead. ``out``: a CSV file kept up to date as
    rows finish; ``resume`` skips the points already in it. ``chunk_size``: points per task (default:
    joblib sizes batches from the measured time per point; on Dask, four chunks per thread). Rows are in
    grid order and all have the same keys (missing values are None). Ctrl-C raises `SweepInterrupted`
    after saving finished rows.
    """
    module = scenario if isinstance(scenario, types.ModuleType) else load_scenario(scenario)
    plan = make_plan(module, grid, fixed)
    workers = _check_workers(workers, scheduler)
    path = _check_out(out, resume)
    old = read_resume(path, plan) if resume and path else []
    done = {index for index, _ in old}
    todo = [i for i in range(len(plan.points)) if i not in done]
    client = None if scheduler is None else dask_client(scheduler, connect_timeout_s)  # before any file is written
    try:
        return _collect(plan, old, todo, _execute(plan, todo, workers, client, chunk_size), path, progress)
    finally:
        if client is not None:
            client.close()


def sweep_frame(*args: Any, **kwargs: Any) -> Any:
    """`sweep` as a pandas DataFrame (one row per point, same columns and order)."""
    try:
        import pandas as pd
    except ImportError:
        raise SweepError("sweep_frame needs pandas (pip install pandas); sweep() returns plain rows") from None
    rows = sweep(*args, **kwargs)
    return pd.DataFrame(rows, columns=list(rows[0]) if rows else None)


def _check_workers(workers: int | None, scheduler: str | None) -> int:
    if scheduler is not None and workers is not None:
        raise SweepError("give workers (local processes) or scheduler (a Dask cluster), not both")
    if workers is None:
        return os.cpu_count() or 1
    return check_int(workers, name="--workers", error=SweepError, hint="1 runs in this process")


def _check_out(out: str | Path | None, resume: bool) -> Path | None:
    text = None if out is None else str(out)
    if resume and text in _STDOUT:
        raise SweepError("--resume needs --out FILE.csv: the file whose finished points are skipped")
    path = None if text is None or text in _STDOUT else Path(text)
    if path is not None and path.exists() and not path.is_file():  # a file is replaced whole: never a device
        raise SweepError(f"--out {text!r} is not a regular file (a folder or a device); give a FILE.csv path, "
                         "or '-' for stdout")
    return path


# --- running: joblib in this process, on loky workers or on Dask -------------------------------------


def _run_points(scenario: str, run_kwargs: dict[str, Any],
                items: list[tuple[int, Row]]) -> list[tuple[int, Row | None]]:
    """Points wherever they run, as ``(index, row)``; a run stopped by Ctrl-C (a KeyboardInterrupt) ends
    the list with ``(index, None)``."""
    module, rows = module_for(scenario), list[tuple[int, Row | None]]()
    for index, point in items:
        try:
            rows.append((index, run_point(module, point, run_kwargs)))
        except KeyboardInterrupt:
            return [*rows, (index, None)]
    return rows


def _execute(plan: SweepPlan, todo: list[int], workers: int, client: Any,
             chunk_size: int | None) -> Generator[tuple[int, Row], None, None]:
    """``(index, row)`` for each point of ``todo`` as it finishes; Ctrl-C here or in a worker stops it."""
    if client is not None:
        runs = _on_dask(plan, todo, client, chunk_size)
    else:
        runs = _on_joblib(plan, todo, workers, chunk_size)
    try:
        with contextlib.closing(runs):
            for index, row in runs:
                if row is None:
                    raise KeyboardInterrupt  # a point was stopped in a worker: stop the sweep
                yield index, row
    except (PodsimError, KeyboardInterrupt, GeneratorExit):
        raise
    except Exception as err:  # a worker died, the cluster went away, a task could not be pickled...
        where = "the Dask cluster" if client is not None else "a worker process"
        raise SweepError(f"{where} failed: {one_line(err, typed=True)}; finished rows are kept, "
                         "--resume runs the rest") from None


def _on_joblib(plan: SweepPlan, todo: list[int], workers: int,
               chunk_size: int | None) -> Generator[tuple[int, Row | None], None, None]:
    """In this process (one worker or one point) or on joblib's loky processes, which it batches by the
    measured time per point and ends (cancelling what is queued) when the sweep stops early."""
    import joblib  # here, not at the top: every podsim command imports this module

    tasks = (joblib.delayed(_run_points)(plan.scenario, plan.run_kwargs, [(i, plan.points[i])]) for i in todo)
    with joblib.parallel_config(backend="loky"):
        results = joblib.Parallel(n_jobs=min(workers, max(len(todo), 1)), return_as="generator_unordered",
                                  batch_size=chunk_size or "auto")(tasks)
    try:
        for rows in results:
            yield from rows
    except BaseException:  # Ctrl-C, an error, or closed early: joblib aborts quietly on an exception thrown in
        with contextlib.suppress(BaseException):  # (closing it instead warns about results left unread)
            results.throw(KeyboardInterrupt())
        raise


def _on_dask(plan: SweepPlan, todo: list[int], client: Any,
             chunk_size: int | None) -> Generator[tuple[int, Row | None], None, None]:
    """Points in chunks (about four per Dask thread) as tasks on the cluster behind ``client``, through
    distributed's futures: a task whose worker died raises here (joblib 1.6's Dask backend waits forever)."""
    from distributed import as_completed

    threads = sum(client.nthreads().values())
    if not threads:
        raise SweepError(f"the Dask cluster at {client.scheduler.address!r} has no workers")
    size = chunk_size or max(1, -(-len(todo) // (4 * threads)))
    chunks = [[(i, plan.points[i]) for i in todo[k:k + size]] for k in range(0, len(todo), size)]
    futures = client.map(_run_points, [plan.scenario] * len(chunks), [plan.run_kwargs] * len(chunks), chunks,
                         pure=False)
    try:
        for future in as_completed(futures, loop=client.loop):
            yield from future.result()
    finally:
        client.cancel(futures)


#: the comm schemes `distributed` registers (distributed.comm.registry; ucx needs its extra package)
DASK_SCHEMES = ("tcp", "tls", "inproc", "ws", "wss", "ucx")


def dask_client(address: str, timeout_s: float = 3.0) -> Any:
    """A `distributed.Client` connected to ``address``, or a one-line `SweepError` within ``timeout_s``."""
    scheme = address.split("://", 1)[0] if "://" in address else "tcp"
    if scheme not in DASK_SCHEMES:  # before importing distributed (seconds on a loaded box): a prompt refusal
        raise SweepError(f"--scheduler {address!r}: unknown scheme {scheme!r}; Dask takes "
                         f"{', '.join(s + '://' for s in DASK_SCHEMES)} (e.g. tcp://host:8786)")
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


def _collect(plan: SweepPlan, old: list[tuple[int, Row]], todo: list[int],
             results: Generator[tuple[int, Row], None, None], path: Path | None, progress: bool) -> list[Row]:
    """Take rows as they finish, keep the file current, and return every row in grid order (rows from
    the file that are not in this grid last); the file is rewritten in that order however the sweep ends."""
    live = LiveCsv(path, [row for _, row in old], plan.params) if path else None
    finished: dict[int, Row] = {}

    def finish() -> list[Row]:
        rows = in_grid_order(plan.params, [*old, *finished.items()])
        if live:
            live.rewrite(rows, list(rows[0]) if rows else live.columns)
            live.close()
        return rows

    from tqdm import tqdm

    bar = tqdm(total=len(todo), desc="sweep", unit="point", disable=not progress or not todo, file=sys.stderr)
    try:
        with contextlib.closing(results):
            for index, row in results:
                finished[index] = row
                bar.update()
                if live:
                    live.append(row)
    except KeyboardInterrupt:
        bar.close()
        raise SweepInterrupted(finish(), len(finished), len(todo), str(path) if path else None) from None
    except BaseException:
        bar.close()
        finish()
        raise
    bar.close()
    return finish()


# --- the command line ----------------------------------------------------------------------------


def add_sweep_parser(sub: Any) -> None:
    """Add ``podsim sweep`` to the CLI's subparsers."""
    p = sub.add_parser("sweep", help=HELP["sweep"])
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
    p.add_argument("--resume", action="store_true",
                   help="skip the points already in --out FILE (a sweep's CSV; any other file is refused, untouched)")
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
        print(dumps_json(out))  # strict: a sweep's cells are finite or None already (see `flatten`)
    elif to_stdout:
        write_csv(rows, sys.stdout)
        sys.stdout.flush()
    else:
        print(f"{args.scenario}: {len(rows)} rows ({failed} failed) in {args.out}")
