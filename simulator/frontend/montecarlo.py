"""Commands under faults and jitter: one disturbed run, or Monte Carlo draws of many.

`dispatch` runs a command (``run``, ``collective``, ``send``, ``model``) inside a
`simulator.engine.faults.FaultPlan`, so every `System` it builds -- whatever scenario, collective,
sharded matmul or Transformer step -- takes the faults and jitter. The command itself is untouched: its
JSON is read back and extended with ``faults`` (as applied: chips and links resolved, effects named),
``jitter`` and ``seed``.

With ``--samples N`` it runs N draws. Draw i seeds its systems from ``SeedSequence(seed, spawn_key=(i, k))``,
so the draws are the same in any order, in this process or in joblib's worker processes (used when the
first draw suggests the rest would take more than `PARALLEL_AFTER_S`). The result: ``samples``,
``mean_s``, ``p50_s``, ``p90_s``, ``p99_s``, ``max_s`` of the command's time (``end_to_end_s``, ``time_s``
or ``step_time_s``), ``critical`` (how often each chip or link was the critical element,
`simulator.report.tails`), and the worst draw run again in this process: its JSON keys, its ``--trace``
and ``--csv``, and ``--gantt`` as the distribution above the worst draw's Gantt, the straggler marked.

A failed chip that leaves work undone ends the command with its report and exit status `EXIT_INCOMPLETE`.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from simulator.engine.faults import FaultPlan, applying
from simulator.engine.watch import count_steps
from simulator.errors import IncompleteRunError, PodsimError, one_line
from simulator.frontend.fault_args import FaultOptions, add_fault_args, fault_options
from simulator.report.result import dumps_json
from simulator.units import format_quantity

__all__ = ["EXIT_INCOMPLETE", "TIME_KEY", "add_fault_args", "applied", "dispatch", "run_draw"]

EXIT_INCOMPLETE = 3  #: the run finished, but a failed chip left work that can never complete
TIME_KEY = {"run": "end_to_end_s", "collective": "time_s", "send": "time_s", "model": "step_time_s"}
PARALLEL_AFTER_S = 2.0  #: estimated serial time of the remaining draws past which they go to worker processes
Command = Callable[[argparse.Namespace], None]


def dispatch(args: argparse.Namespace, command: Command) -> int:
    """Run ``command`` with the fault flags of ``args`` (plainly when there are none); the exit status."""
    opts = fault_options(args)
    if opts is None:
        command(args)
        return 0
    try:
        if opts.samples is None:
            _single(args, command, opts)
        else:
            _monte_carlo(args, command, opts)
    except IncompleteRunError as err:
        _incomplete(args, opts, err)
        return EXIT_INCOMPLETE
    return 0


def _plan(opts: FaultOptions, index: int) -> FaultPlan:
    return FaultPlan(opts.faults, opts.jitter, opts.seed, spawn_key=(index,))


def _capture(command: Command, args: argparse.Namespace) -> dict[str, Any]:
    """The command's printed JSON, as a dict."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        command(args)
    return json.loads(out.getvalue())


def _quiet(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` for one draw: JSON out, no files."""
    draw = copy.copy(args)
    draw.json = True
    for name in ("gantt", "trace", "csv"):
        if hasattr(draw, name):
            setattr(draw, name, None)
    return draw


def applied(plan: FaultPlan, opts: FaultOptions) -> dict[str, Any]:
    """``faults`` as applied by the plan's first system (the specs themselves if none was built), ``jitter``
    and ``seed``."""
    model = next((s.faults for s in plan.systems if s.faults is not None), None)
    faults = model.applied if model is not None else [{"spec": s} for s in opts.specs]
    for record, spec in zip(faults, opts.specs, strict=False):
        record.setdefault("spec", spec)
    jitter = None if opts.jitter is None else {"distribution": opts.jitter.distribution, "cv": opts.jitter.cv,
                                               "units": list(opts.jitter.units)}
    return {"faults": faults, "jitter": jitter, "seed": opts.seed}


def _single(args: argparse.Namespace, command: Command, opts: FaultOptions) -> None:
    plan = _plan(opts, 0)
    with applying(plan):
        if args.json:
            out = _capture(command, args)
            print(dumps_json({**out, **applied(plan, opts)}))
            return
        command(args)
    print(_fault_lines(applied(plan, opts)))


def _fault_lines(info: dict[str, Any]) -> str:
    lines = ["faults:" if info["faults"] else "faults: none"]
    for f in info["faults"]:
        detail = {k: v for k, v in f.items() if k not in ("fault", "spec", "directions")}
        lines.append(f"  {f.get('spec', f['fault'])}: {f['fault']} " + ", ".join(f"{k}={v}" for k, v in detail.items()))
    if info["jitter"]:
        j = info["jitter"]
        lines.append(f"jitter: {j['distribution']}, cv {j['cv']:g} on {'+'.join(j['units'])} (seed {info['seed']})")
    return "\n".join(lines)


def run_draw(args: argparse.Namespace, opts: FaultOptions, index: int) -> tuple[float, str | None]:
    """Draw ``index``: the command's time (seconds) and its critical chip or link (runs in worker processes)."""
    from simulator.frontend.cli import COMMANDS

    plan = _plan(opts, index)
    with applying(plan):
        out = _capture(COMMANDS[args.command], args)
    value = out.get(TIME_KEY[args.command])
    if not isinstance(value, (int, float)):
        raise PodsimError(f"--samples needs the simulated time ({TIME_KEY[args.command]}); this {args.command} "
                          "has none (for model: drop --no-simulate)")
    return float(value), _critical(plan)


def _critical(plan: FaultPlan) -> str | None:
    """The critical element of the draw's longest-running traced system."""
    from simulator.report.tails import critical_element  # NumPy and Matplotlib: only when draws ran

    traced = [s for s in plan.systems if s.trace.enabled and s.trace.spans]
    return critical_element(max(traced, key=lambda s: s.env.now).trace) if traced else None


def _draws(args: argparse.Namespace, opts: FaultOptions) -> list[tuple[float, str | None]]:
    """Every draw: the first here, timed; the rest here or on joblib's process pool."""
    draw = _quiet(args)
    total = opts.samples or 1
    start = time.perf_counter()
    results = [run_draw(draw, opts, 0)]
    count_steps("draws", 1, total)  # the progress line counts the draws as they finish
    rest = range(1, total)
    workers = min(os.cpu_count() or 1, len(rest))
    if workers > 1 and (time.perf_counter() - start) * len(rest) > PARALLEL_AFTER_S:
        from joblib import Parallel, delayed

        done = Parallel(n_jobs=workers, backend="loky", return_as="generator")(
            delayed(run_draw)(draw, opts, i) for i in rest)
    else:
        done = (run_draw(draw, opts, i) for i in rest)
    for result in done:
        results.append(result)
        count_steps("draws", len(results), total)
    return results


def _monte_carlo(args: argparse.Namespace, command: Command, opts: FaultOptions) -> None:
    from simulator.frontend.outputs import check_outputs
    from simulator.report.tails import critical_shares, save_tail_figure, tail_stats  # NumPy: only after draws

    if hasattr(args, "gantt"):
        check_outputs(args)
    results = _draws(args, opts)
    times = [t for t, _ in results]
    worst = max(range(len(times)), key=lambda i: (times[i], -i))
    again = copy.copy(args)
    again.json = True
    if hasattr(again, "gantt"):
        again.gantt = None
    plan = _plan(opts, worst)
    with applying(plan):
        base = _capture(command, again)
    stats = {**tail_stats(times), "critical": critical_shares([c for _, c in results]), "worst_sample": worst,
             "sample_times_s": times, **applied(plan, opts)}
    if getattr(args, "gantt", None):
        traced = [s for s in plan.systems if s.trace.enabled and s.trace.spans]
        if traced:
            system = max(traced, key=lambda s: s.env.now)
            save_tail_figure(times, system.trace, results[worst][1], args.gantt,
                             title=f"{args.command} over {len(times)} draws")
    if args.json:
        print(dumps_json({**base, **stats}))
        return
    print(_summary(args, stats))


def _summary(args: argparse.Namespace, stats: dict[str, Any]) -> str:
    q = {k: format_quantity(stats[k], "s") for k in ("mean_s", "p50_s", "p90_s", "p99_s", "max_s")}
    lines = [f"{args.command} over {stats['samples']} draws (seed {stats['seed']}): mean {q['mean_s']}, "
             f"p50 {q['p50_s']}, p90 {q['p90_s']}, p99 {q['p99_s']}, max {q['max_s']} (draw {stats['worst_sample']})"]
    shares = ", ".join(f"{c['element']} {100 * c['share']:.0f}%" for c in stats["critical"][:5])
    lines.append(f"  critical: {shares or 'no spans traced'}")
    return "\n".join([*lines, _fault_lines(stats)])


def _incomplete(args: argparse.Namespace, opts: FaultOptions, err: IncompleteRunError) -> None:
    """Report what a failed chip made impossible: JSON on stdout with --json, one line on stderr otherwise."""
    failed = [{"chip": c, "at_s": t} for c, t in err.failed.items()]
    if getattr(args, "json", False):
        print(dumps_json({"completed": False, "incomplete": [{"operation": k, "lost": n} for k, n in
                                                              err.incomplete.items()],
                          "failed_chips": failed, "stopped_at_s": err.stopped_at_s, "faults": list(opts.specs)}))
    print(f"podsim: incomplete: {one_line(err)}", file=sys.stderr)
