"""Collectives on large GPU fabrics (issues 16, 21): AllReduce over a thousand GPUs end to end, and under heavy
contention (links carrying many flows at once, where fair sharing does the work).

Cases: 1 GB on superpod:4 (1,024 H100s under a leaf per rail and a spine), on nodes:128:8 (1,024 H100s, one
NIC per GPU; auto and hierarchical_pipelined), nodes:64:8 and nodes:32:8; 1 MB and 1 GB on superpod:1; cases
marked ``/full`` run mode="full" (every transfer: the check of the quotient's numbers, minutes on a thousand
GPUs). Each case runs as `run_collective` does in mode auto: on the quotient by the fabric's node, unit and
rail rotations where it applies (`simulator.acceleration.quotient`, `ring_quotient` for flat rings, built
without their schedule). It prints its algorithm, transfers in the schedule, which quotient ran (the group,
|G|, transfers run), SimPy events processed, the work units the executor reported to the watch beside the
estimate made while planning, and CPU and wall seconds of planning (tuner and schedule, or a ring's quotient),
of taking the quotient of a built schedule, and of running, with the ratio of the whole to the lean
bare-SimPy pipeline of benchmarks/engine.py (10,000 blocks) measured in the same process just before. Each
case runs in its own process (``--limit`` seconds at most); ``--tree DIR`` runs the cases against another
copy of the source (a before/after comparison; a tree without the quotient runs every transfer).

    python benchmarks/thousand_gpus.py                    # the default cases
    python benchmarks/thousand_gpus.py --case 2            # nodes:128:8 with auto (flat NIC rings, on the quotient)
    python benchmarks/thousand_gpus.py --case 6            # the same in full: 16.7 M transfers, minutes, ~6 GB
    python benchmarks/thousand_gpus.py --case 3 --tree /tmp/before
"""
from __future__ import annotations

import argparse
import inspect
import os
import subprocess
import sys
import time

CASES = [("superpod:4", 1e9, "auto"), ("nodes:128:8", 1e9, "hierarchical_pipelined"), ("nodes:128:8", 1e9, "auto"),
         ("superpod:1", 1e6, "auto"), ("superpod:1", 1e9, "auto"), ("nodes:32:8", 1e9, "auto"),
         ("nodes:128:8", 1e9, "auto/full"), ("nodes:64:8", 1e9, "auto"), ("nodes:64:8", 1e9, "auto/full"),
         ("superpod:4", 1e9, "auto/full")]  # "/full": mode="full", every transfer (the quotient's check)
DEFAULT = (0, 1, 2, 3, 4, 5)


def one(index: int) -> None:
    """Run one case in this process and print its lines."""
    sys.path.insert(0, os.path.join(os.getcwd(), "benchmarks"))
    from engine import lean

    from simulator.collectives import api, plan_collective
    from simulator.collectives.api import _execute_calibrated
    try:
        from simulator.acceleration.ring_quotient import run_quotient
    except ImportError:  # a tree from before the acceleration layer (--tree), or before the quotient
        try:
            from simulator.collectives.ring_quotient import run_quotient
        except ImportError:
            run_quotient = None
    from simulator.collectives.schedule import check_arrived, gc_paused
    from simulator.engine.system import System
    from simulator.engine.watch import RunWatch, watching

    topology, nbytes, algorithm = CASES[index]
    mode = "full" if algorithm.endswith("/full") else "auto"
    algorithm = algorithm.removesuffix("/full")
    wall, cpu = time.perf_counter(), time.process_time()
    lean(10_000)
    lean_wall, lean_cpu = time.perf_counter() - wall, time.process_time() - cpu
    watch = RunWatch()
    wall, cpu = time.perf_counter(), time.process_time()
    system = System("h100", topology=topology, trace=False)
    with watching(watch), gc_paused():
        if run_quotient is not None and "direct_quotient" in inspect.signature(getattr(api, "_plan", len)).parameters:
            plan = api._plan("all_reduce", system, nbytes, algorithm=algorithm, mode=mode,
                             direct_quotient=True)  # what run_collective asks
        else:  # older trees: the private flag plan_collective had, or no quotient at all
            quotient = {} if run_quotient is None else {"_quotient": True}
            plan = plan_collective("all_reduce", system, nbytes, algorithm=algorithm, mode=mode, **quotient)
        plan_wall, plan_cpu = time.perf_counter() - wall, time.process_time() - cpu
        estimate = watch.estimate
        on_quotient = None if run_quotient is None else run_quotient(system, plan, mode, True)
        q_wall, q_cpu = time.perf_counter() - wall - plan_wall, time.process_time() - cpu - plan_cpu
        q = None if on_quotient is None else on_quotient[0]
        done = _execute_calibrated(system, plan, None, quotient=q) if q is not None else \
            _execute_calibrated(system, plan, None)
        system.run()
        check_arrived(done, system.env.now)
    total_wall, total_cpu = time.perf_counter() - wall, time.process_time() - cpu
    ran = "full" if q is None else f"quotient by {on_quotient[1].name} (|G| {q.order}, {len(q.transfers):,} run)"
    transfers = len(plan.schedule.transfers) if q is None else q.represented
    print(f"{topology:12s} {nbytes:8.0e} B {plan.algorithm.name:24s} transfers {transfers:>9,} "
          f"{ran}  SimPy events {system.events_processed:>7,}  units {watch.events:>9,} (estimated {estimate or 0:,})  "
          f"simulated {system.env.now:.9e} s")
    run_cpu, run_wall = total_cpu - plan_cpu - q_cpu, total_wall - plan_wall - q_wall
    print(f"{'':12s} plan cpu {plan_cpu:.2f} s wall {plan_wall:.2f} s; quotient cpu {q_cpu:.2f} s wall {q_wall:.2f} s; "
          f"run cpu {run_cpu:.2f} s wall {run_wall:.2f} s; total cpu {total_cpu:.2f} s wall {total_wall:.2f} s; "
          f"lean 10,000 blocks cpu {lean_cpu * 1e3:.0f} ms wall {lean_wall * 1e3:.0f} ms -> "
          f"{total_cpu / lean_cpu:.0f}x lean (cpu), {total_wall / lean_wall:.0f}x (wall)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", type=int, action="append", help=f"case index (0-{len(CASES) - 1}); repeatable")
    parser.add_argument("--tree", default=".", help="source tree to run (default: this one)")
    parser.add_argument("--limit", type=float, default=900.0, help="seconds per case")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        one(args.one)
        return
    tree = os.path.abspath(args.tree)
    env = {**os.environ, "PYTHONPATH": tree}
    for index in args.case or DEFAULT:
        try:
            subprocess.run([sys.executable, os.path.abspath(__file__), "--one", str(index)], timeout=args.limit,
                           check=False, cwd=tree, env=env)
        except subprocess.TimeoutExpired:
            print(f"{CASES[index]}: not finished in {args.limit:g} s", flush=True)


if __name__ == "__main__":
    main()
