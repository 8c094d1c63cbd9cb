"""Fair sharing under contention (issues 16, 21): AllReduce on GPU fabrics whose links carry many flows at once.

Each case runs in its own process: the lean bare-SimPy pipeline of benchmarks/engine.py (10,000 blocks) first,
then planning and running the collective in full mode, and prints CPU seconds of each with the ratio to lean.
``--tree DIR`` runs the cases against another copy of the source (a before/after comparison: copy the tree,
put the old module in, run both).

    python benchmarks/contention.py                    # every case
    python benchmarks/contention.py --case 0 --tree /tmp/before
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

CASES = [("superpod:1", 1e6, "auto"), ("superpod:1", 1e9, "auto"), ("superpod:4", 1e9, "auto"),
         ("nodes:128:8", 1e9, "hierarchical_pipelined")]


def one(index: int) -> None:
    """Run one case in this process and print its line."""
    sys.path.insert(0, os.path.join(os.getcwd(), "benchmarks"))
    from engine import lean

    from simulator.collectives import plan_collective
    from simulator.collectives.api import _execute_calibrated
    from simulator.collectives.schedule import check_arrived, gc_paused
    from simulator.engine.system import System

    topology, nbytes, algorithm = CASES[index]
    cpu = time.process_time()
    lean(10_000)
    lean_cpu = time.process_time() - cpu
    cpu = time.process_time()
    system = System("h100", topology=topology, trace=False)
    with gc_paused():
        plan = plan_collective("all_reduce", system, nbytes, algorithm=algorithm)
        plan_cpu = time.process_time() - cpu
        done = _execute_calibrated(system, plan, None)
        system.run()
        check_arrived(done, system.env.now)
    total = time.process_time() - cpu
    print(f"{topology:12s} {nbytes:8.0e} B {plan.algorithm.name:24s} transfers {len(plan.schedule.transfers):>9,} "
          f"events {system.events_processed:>9,} simulated {system.env.now:.9e} s | cpu plan {plan_cpu:6.2f} s "
          f"run {total - plan_cpu:6.2f} s total {total:6.2f} s; lean {lean_cpu * 1e3:.0f} ms -> "
          f"{total / lean_cpu:.0f}x lean", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", type=int, action="append", help=f"case index (0-{len(CASES) - 1}); repeatable")
    parser.add_argument("--tree", default=".", help="source tree to run (default: this one)")
    parser.add_argument("--limit", type=float, default=600.0, help="seconds per case")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        one(args.one)
        return
    tree = os.path.abspath(args.tree)
    env = {**os.environ, "PYTHONPATH": tree}
    for index in args.case or range(len(CASES)):
        try:
            subprocess.run([sys.executable, os.path.abspath(__file__), "--one", str(index)], timeout=args.limit,
                           check=False, cwd=tree, env=env)
        except subprocess.TimeoutExpired:
            print(f"{CASES[index]}: not finished in {args.limit:g} s", flush=True)


if __name__ == "__main__":
    main()
