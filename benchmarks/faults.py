"""What faults and jitter cost the engine: the same runs plain, with an empty fault set, and disturbed.

    python benchmarks/faults.py [--repeat 5]

Runs a 10,000-block double-buffered pipeline (benchmarks/engine.py's) and a full AllReduce of 256 MB over
a torus:8x8 of tpu-v5p chips, each as a plain System, as a System with ``faults=[]`` and zero jitter (which
must be the plain path: no disturbed unit is built), with 5% jitter on every unit, with one link at half
speed and with one chip paused. Prints the CPU time of each (best of ``--repeat``) and its ratio to the
plain run; the empty fault set should read 1.00 within the noise.
"""
from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from simulator.collectives import run_collective
from simulator.engine.faults import ChipPause, Jitter, LinkDegraded
from simulator.engine.system import System
from simulator.workloads.pipeline import run_steps, uniform_steps

LOAD_S, COMPUTE_S, BLOCKS = 2e-6, 1e-6, 10_000
CASES: dict[str, dict] = {
    "plain": {},
    "faults=[], zero jitter": {"faults": [], "jitter": Jitter(cv=0.0), "seed": 1},
    "5% jitter on every unit": {"jitter": Jitter(cv=0.05), "seed": 1},
    "one link at half speed": {"faults": [LinkDegraded(0, 1, 0.5)]},
    "one chip paused 100 us": {"faults": [ChipPause(0, 1e-5, 1e-4)]},
}


def pipeline(**disturb: object) -> float:
    """The benchmark pipeline on one chip (a link fault has no link to act on: it runs plain)."""
    if any(isinstance(f, LinkDegraded) for f in disturb.get("faults", [])):
        disturb = {}
    system = System("tpu-v5e", trace=True, **disturb)
    spec = system.spec
    run_steps(system, uniform_steps(BLOCKS, LOAD_S * spec.hbm_bandwidth_bytes_per_s,
                                    COMPUTE_S * spec.peak_flops_per_s()), buffers=2)
    return system.run()


def all_reduce(**disturb: object) -> float:
    """A full AllReduce of 256 MB over every axis of torus:8x8."""
    system = System("tpu-v5p", topology="torus:8x8", trace=False, **disturb)
    return run_collective("all_reduce", system, 256e6, mode="full").time_s


def best_cpu(fn: Callable[[], float], repeat: int) -> float:
    """Least CPU time (s) of ``repeat`` calls."""
    times = []
    for _ in range(repeat):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    for name, work in (("pipeline, 10,000 blocks", pipeline), ("AllReduce 256 MB, torus:8x8, full", all_reduce)):
        plain = best_cpu(work, args.repeat)
        print(name)
        for case, disturb in CASES.items():
            t = plain if case == "plain" else best_cpu(lambda d=disturb, w=work: w(**d), args.repeat)
            print(f"  {case:<26} {t * 1e3:8.1f} ms CPU  ratio {t / plain:5.2f}")


if __name__ == "__main__":
    main()
