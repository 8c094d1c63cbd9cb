"""Serving: one hour of traffic at 10 requests/s through `podsim serve`'s simulator, against the lean yardstick.

Issue 33's target: an hour of Poisson arrivals at 10 req/s (Llama-3-8B on one H100, prompts lognormal around
512 tokens, outputs around 200, chunked prefill of 8,192 tokens, 256 sequences) simulated in at most 30 s on
two cores -- both timings, the bound and the forecast, as ``podsim serve --calibrated`` runs them. Prints the
wall time of each (best of ``--repeat``), the iterations and distinct step shapes priced, the wall time of
benchmarks/engine.py's lean plain-SimPy pipeline of 10,000 blocks in the same process, and ends with
``ratio: X`` where X = serve wall (bound + forecast) / lean wall.

    python benchmarks/serve.py [--duration 3600] [--rate 10] [--repeat 1]
"""
from __future__ import annotations

import argparse
import time

from engine import lean

from simulator.hardware.specs import get_chip
from simulator.workloads.serving.arrivals import parse_length, poisson_arrivals
from simulator.workloads.serving.simulate import ServeSetup, report, run_stream
from simulator.workloads.transformer import get_model

SETUP = {"model": "llama-3-8b", "chip": "h100", "prompt": "lognormal:512:0.8", "output": "lognormal:200:0.8"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=3600.0)
    parser.add_argument("--rate", type=float, default=10.0)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    setup = ServeSetup(get_model(SETUP["model"]), get_chip(SETUP["chip"]))
    arrivals = poisson_arrivals(args.rate, args.duration, parse_length(SETUP["prompt"]),
                                parse_length(SETUP["output"]), seed=0)
    lean_s, walls = float("inf"), {"bound": float("inf"), "forecast": float("inf")}
    reports = {}
    for _ in range(args.repeat):
        start = time.perf_counter()
        lean(10_000)
        lean_s = min(lean_s, time.perf_counter() - start)
        for kind in walls:
            start = time.perf_counter()
            run = run_stream(setup, arrivals, kind)
            walls[kind] = min(walls[kind], time.perf_counter() - start)
            reports[kind] = report(run, None, None)
    print(f"serve: {SETUP['model']} on one {SETUP['chip']}, {len(arrivals):,} requests over {args.duration:g} s "
          f"at {args.rate:g} req/s (Poisson, seed 0)")
    for kind, r in reports.items():
        print(f"  {kind:<9} wall {walls[kind]:6.2f} s  iterations {r['iterations']:,}  step shapes priced "
              f"{r['step_shapes_priced']:,}  TTFT p50 {r['ttft_s']['p50'] * 1e3:.1f} ms  TPOT p50 "
              f"{r['tpot_s']['p50'] * 1e3:.2f} ms  {r['output_tokens_per_s']:,.0f} output tokens/s")
    total = sum(walls.values())
    print(f"bound + forecast wall: {total:.2f} s (target <= 30 s)")
    print(f"lean simpy pipeline (10,000 blocks) wall: {lean_s * 1e3:.1f} ms")
    print(f"ratio: {total / lean_s:.1f}")


if __name__ == "__main__":
    main()
