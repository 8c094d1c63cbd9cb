"""The files a command writes besides its printed result: ``--trace`` (Perfetto JSON), ``--csv`` (spans)
and ``--gantt`` (a picture in any format matplotlib draws).

`check_outputs` runs before a command simulates anything, so a path that cannot be written (a folder, a
missing or read-only folder, a suffix that is no picture format) or two outputs naming one file fail at
once; `write_outputs` writes them after the run. ``-`` for --trace or --csv means stdout: the command's
own printed result then goes to stderr (`stdout_for`), so the two never mix.
"""
from __future__ import annotations

import argparse
import contextlib
import contextvars
import os
import sys
from collections.abc import Iterator
from typing import Any

from simulator.errors import PodsimError
from simulator.report.result import Result

STDOUT = "-"  #: the output path that means stdout (text outputs only: --trace, --csv)
_FLAGS = (("--trace", "trace"), ("--csv", "csv"), ("--gantt", "gantt"))


def _given(args: argparse.Namespace) -> list[tuple[str, str]]:
    return [(flag, getattr(args, attr)) for flag, attr in _FLAGS if getattr(args, attr, None)]


def check_outputs(args: argparse.Namespace) -> None:
    """Refuse --trace, --csv and --gantt paths that cannot be written, or that collide, before anything runs."""
    from simulator.report import export

    given = _given(args)
    _check_stdout(args, [flag for flag, path in given if path == STDOUT])
    seen: dict[str, str] = {}
    for flag, path in given:
        if path == STDOUT:
            continue
        key = os.path.realpath(path)
        if key in seen:
            raise PodsimError(f"{seen[key]} and {flag} both name {path!r}, so one would overwrite the other; give "
                              "each its own file")
        seen[key] = flag
        if flag == "--gantt":
            from simulator.report import plots

            plots.check_picture_path(path)
        else:
            export.open_for_write(path)


def _check_stdout(args: argparse.Namespace, flags: list[str]) -> None:
    if "--gantt" in flags:
        raise PodsimError("--gantt - : a picture is not written to stdout; give a file name such as step.png")
    if len(flags) > 1:
        raise PodsimError(f"{flags[0]} - and {flags[1]} - would both write to stdout; give one of them a file name")
    if flags and getattr(args, "json", False):
        raise PodsimError(f"{flags[0]} - and --json would both write to stdout; give {flags[0]} a file name, or "
                          "drop --json")


_STDOUT_STREAM: contextvars.ContextVar[Any] = contextvars.ContextVar("podsim_stdout", default=None)


@contextlib.contextmanager
def stdout_for(args: argparse.Namespace) -> Iterator[None]:
    """While a command runs: where an output goes to stdout (``-``), keep stdout for it and send everything
    else the command prints to stderr."""
    if not any(path == STDOUT for _, path in _given(args)):
        yield
        return
    token = _STDOUT_STREAM.set(sys.stdout)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        _STDOUT_STREAM.reset(token)


def _stream() -> Any:
    return _STDOUT_STREAM.get() or sys.stdout


def write_outputs(result: Result, args: argparse.Namespace) -> None:
    """Write the --trace, --gantt and --csv files a command asked for."""
    from simulator.report import export

    if not (args.trace or args.gantt or args.csv):
        return
    if result.trace is None or not result.trace.spans:
        raise PodsimError(f"{result.scenario} recorded no spans to export (was trace=False?)")
    trace = result.trace.unfolded()  # a fast run's spans on every chip and link they stood for
    if trace is None:
        trace = result.trace
        links = len({(s.chip, s.unit) for s in trace.spans if s.unit.startswith("link ")})
        print(f"podsim: note: the exported spans are the quotient's {links:,} representative links' "
              "only (every link's would be too many); --mode full records every link", file=sys.stderr)
    if args.trace == STDOUT:
        _stream().write(export.chrome_trace_text(trace) + "\n")
    elif args.trace:
        export.write_chrome_trace(trace, args.trace)
    if args.csv == STDOUT:
        export.write_csv_rows(trace, _stream())
    elif args.csv:
        export.write_csv(trace, args.csv)
    if args.gantt:
        from simulator.report import plots

        plots.save_gantt(trace, args.gantt, title=result.headline or result.scenario)
