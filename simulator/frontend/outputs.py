"""The files a command writes besides its printed result: ``--trace`` (Perfetto JSON), ``--csv`` (spans)
and ``--gantt`` (a picture in any format matplotlib draws).

`check_outputs` runs before a command simulates anything, so a path that cannot be written (a folder, a
missing or read-only folder, a suffix that is no picture format) fails at once; `write_outputs` writes
them after the run.
"""
from __future__ import annotations

import argparse
import sys

from simulator.errors import PodsimError
from simulator.report.result import Result


def check_outputs(args: argparse.Namespace) -> None:
    """Refuse --trace, --csv and --gantt paths that cannot be written before anything runs."""
    from simulator.report import export

    for path in (args.trace, args.csv):
        if path:
            export.open_for_write(path)
    if args.gantt:
        from simulator.report import plots

        plots.check_picture_path(args.gantt)


def write_outputs(result: Result, args: argparse.Namespace) -> None:
    """Write the --trace, --gantt and --csv files a command asked for."""
    from simulator.report import export

    if not (args.trace or args.gantt or args.csv):
        return
    if result.trace is None or not result.trace.spans:
        raise PodsimError(f"{result.scenario} recorded no spans to export (was trace=False?)")
    trace = result.trace.unfolded()  # a quotient run's spans on every link they stood for
    if trace is None:
        trace = result.trace
        print(f"podsim: note: the exported spans are the quotient's {len(trace.images):,} representative links' "
              "only (every link's would be too many); --mode full records every link", file=sys.stderr)
    if args.trace:
        export.write_chrome_trace(trace, args.trace)
    if args.csv:
        export.write_csv(trace, args.csv)
    if args.gantt:
        from simulator.report import plots

        plots.save_gantt(trace, args.gantt, title=result.headline or result.scenario)
