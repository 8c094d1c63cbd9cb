"""Plan search: llama-3-70b training on 256 tpu-v5p chips, every layout and option set priced, the best 10
simulated on 2 worker processes, against benchmarks/engine.py's lean pipeline in the same run.

Issue 16's plan-search target: 100 candidate plans for a 70B model on 256 chips (closed form for all,
simulation for the best 10) in at most 60 s with 2 workers. Prints the lean model's wall time (10,000
blocks, best of three), the closed-form part alone (every (layout, options) pair priced, counted; wall
and CPU), the whole search (the best ``--top`` layouts simulated on ``--workers`` processes; wall), each
simulation's CPU time in its worker, and the search's time on an idle machine estimated from CPU times:
the closed form's CPU plus the busiest worker's simulations (longest first onto the least-loaded
worker), and what the search's wall leaves beyond the closed form's wall and the busiest worker's CPU.
A shared, loaded machine inflates wall times, CPU times much less. Ends with
``ratio: X`` where X = search wall / lean wall (the target, 60 s against a 0.15 s lean model, is 400).

    python benchmarks/plan.py [--model llama-3-70b] [--chip tpu-v5p] [--chips 256] [--batch 256]
                              [--seq 4096] [--top 10] [--workers 2]
"""
from __future__ import annotations

import argparse
import time

from engine import lean

from simulator.hardware.specs import get_chip
from simulator.workloads.plans import search as plan_search
from simulator.workloads.transformer import get_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama-3-70b")
    parser.add_argument("--chip", default="tpu-v5p")
    parser.add_argument("--chips", type=int, default=256)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    lean_s = min(_timed(lean, 10_000) for _ in range(3))
    cfg, chip = get_model(args.model), get_chip(args.chip)
    start, cpu = time.perf_counter(), time.process_time()
    closed = plan_search.search(cfg, chip, args.chips, "train", args.batch, args.seq, top=0)
    closed_s, closed_cpu = time.perf_counter() - start, time.process_time() - cpu
    start = time.perf_counter()
    out = plan_search.search(cfg, chip, args.chips, "train", args.batch, args.seq, top=args.top,
                             workers=args.workers)
    search_s = time.perf_counter() - start
    sims = [r for r in out["plans"] if r["simulated"]]
    loads = [0.0] * max(1, args.workers)
    for cpu_s in sorted((r["simulation_cpu_s"] for r in sims), reverse=True):
        loads[loads.index(min(loads))] += cpu_s
    print(f"lean simpy pipeline (10,000 blocks): {lean_s * 1e3:.1f} ms")
    print(f"{args.model} train on {args.chips} x {args.chip}, batch {args.batch} x seq {args.seq}: "
          f"{closed['candidates']:,} (layout, options) candidates priced over {closed['layouts']} layouts "
          f"({closed['fitting']} fit)")
    print(f"closed form alone: {closed_s:.2f} s wall, {closed_cpu:.2f} s cpu "
          f"({closed_cpu / max(1, closed['candidates']) * 1e6:.0f} us cpu a candidate)")
    print(f"search with the best {len(sims)} simulated on {args.workers} workers: {search_s:.2f} s wall (target: 60 s)")
    for row in sims:
        mesh = ",".join(f"{k}={v}" for k, v in row["mesh"].items())
        print(f"  {mesh:<28} sim {row['step_time_s']:.4f} s (closed form {row['closed_form_s']:.4f} s), "
              f"{row['simulation_cpu_s']:.2f} s cpu, {row['options']}")
    print(f"simulations: {sum(r['simulation_cpu_s'] for r in sims):.2f} s cpu in all; idle-machine estimate: "
          f"{closed_cpu:.2f} + {max(loads):.2f} (busiest worker) = {closed_cpu + max(loads):.2f} s")
    print(f"rest of the search's wall (worker start-up and imports, transfers, machine load): "
          f"{search_s - closed_s - max(loads):.2f} s")
    print(f"ratio: {search_s / lean_s:.1f}")


def _timed(fn, *args) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
