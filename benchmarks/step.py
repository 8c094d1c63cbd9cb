"""Whole step: one llama-3-70b training step on 64 tpu-v5p chips (data=8, model=8) against the lean pipeline.

Issue 16's whole-step target, kept by issue 29 at 2x: the step's wall time at most 2x that of
benchmarks/engine.py's lean plain-SimPy pipeline of 10,000 blocks, measured in the same run (process start-up
excluded). Prints both wall times
(best of ``--repeat``, interleaved so machine load falls on both), the step's simulated time and event
count, and ends with ``ratio: X`` where X = step wall / lean wall (the target is X <= 2). The step runs by
symmetry (one chip per pipeline stage, `simulator.acceleration.step_symmetry`), its collectives on the quotient
of the 4x4x4 torus by the translations that map the groups onto groups (y is split between data and model:
translations by (1, 2, 1), 32 of them; `simulator.acceleration.quotient`), its repeated collectives
replayed where they are alone on their links (`simulator.acceleration.replay`); ``--exact`` also times
the full simulation of every chip once, checks that both report the same step, and prints its ratio too.

    python benchmarks/step.py [--repeat 1] [--no-trace] [--exact]
"""
from __future__ import annotations

import argparse
import time

from engine import count_events, lean

from scenarios import transformer_step

STEP = {"model": "llama-3-70b", "mode": "train", "chip": "tpu-v5p", "mesh": "data=8,model=8", "batch": 8,
        "seq": 2048, "require_fit": False}  # 136 GiB a chip without FSDP: timed anyway, as in the issue
TARGET = 2.0  #: issue 29's keep-target: step wall / lean wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--no-trace", action="store_true", help="run the step with tracing off")
    parser.add_argument("--exact", action="store_true", help="also time the full simulation (every chip) once")
    args = parser.parse_args()
    events = count_events()  # events of every System the step builds
    lean_s = step_s = float("inf")
    result = None
    for _ in range(args.repeat):
        start = time.perf_counter()
        lean(10_000)
        lean_s = min(lean_s, time.perf_counter() - start)
        events[0] = 0
        start = time.perf_counter()
        result = transformer_step.run(**STEP, trace=not args.no_trace)
        step_s = min(step_s, time.perf_counter() - start)
    assert result is not None
    print(f"step: {STEP['model']} train, {STEP['mesh']} on {STEP['chip']}, tracing {'off' if args.no_trace else 'on'}")
    print(f"simulated step: {result.extra['step_time_s']!r} s  events: {events[0]:,}")
    print(f"lean simpy pipeline (10,000 blocks) wall: {lean_s * 1e3:.1f} ms")
    print(f"step wall: {step_s * 1e3:.1f} ms  ({events[0] / step_s:,.0f} events/s)")
    if args.exact:
        events[0] = 0
        start = time.perf_counter()
        full = transformer_step.run(**STEP, trace=not args.no_trace, exact=True)
        exact_s = time.perf_counter() - start
        same = abs(full.extra["step_time_s"] - result.extra["step_time_s"]) <= 1e-9 * full.extra["step_time_s"]
        print(f"exact (every chip) wall: {exact_s * 1e3:.1f} ms  events: {events[0]:,}  same step: {same}  "
              f"exact ratio: {exact_s / lean_s:.2f}")
    print(f"ratio: {step_s / lean_s:.2f} (target <= {TARGET:g})")


if __name__ == "__main__":
    main()
