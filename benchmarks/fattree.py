"""Scale on GPU fat trees: AllReduce of 1 GB over fattree:K:8 and superpod:N (64 to 1,024 H100s).

Each case runs in its own process under a time limit and prints wall seconds for planning (every
applicable algorithm priced by its closed form, as ``auto`` does) and for the simulation of the
algorithm asked for, with the simulated time beside the closed form and the book's estimate. Planning
``auto`` on 1,024 GPUs costs seconds (ring phases priced as arrays, routes from one search per source);
an algorithm asked for is priced alone, so the ``alone`` rows show what the simulation itself costs.

    python benchmarks/fattree.py            # every case, 600 s each at most
    python benchmarks/fattree.py --limit 60
"""
from __future__ import annotations

import subprocess
import sys
import time

CASES = [("fattree:8:8", "auto", False), ("superpod:1", "hierarchical", True), ("superpod:1", "auto", False),
         ("superpod:2", "hierarchical", True), ("superpod:4", "hierarchical", True), ("superpod:4", "auto", False)]


def one(topology: str, algorithm: str, only: bool) -> None:
    """Run one case in this process and print its line."""
    from simulator.collectives import plan_collective, run_collective, tuner
    from simulator.engine.system import System
    from simulator.hardware.specs import get_chip

    if only:  # price the asked-for algorithm alone (the tuner otherwise prices every applicable one)
        tuner.applicable = lambda kind, net, groups: [algorithm]
    start = time.perf_counter()
    plan_collective("all_reduce", System(get_chip("h100"), topology=topology), 1e9, algorithm=algorithm)
    planned = time.perf_counter()
    r = run_collective("all_reduce", System(get_chip("h100"), topology=topology), 1e9, algorithm=algorithm)
    ran = time.perf_counter()
    print(f"{topology:<12} {algorithm:<13} {'alone' if only else 'all':<6} plan {planned - start:7.1f} s  "
          f"plan+run {ran - planned:7.1f} s  {r.algorithm:<22} simulated {r.time_s * 1e3:7.3f} ms  "
          f"closed form {r.analytic_s * 1e3:7.3f} ms  book {r.book_s * 1e3:7.3f} ms  transfers {r.n_transfers}",
          flush=True)


def main(limit_s: float) -> None:
    for topology, algorithm, only in CASES:
        args = [sys.executable, __file__, "--one", topology, algorithm, str(only)]
        try:
            subprocess.run(args, timeout=limit_s, check=True)
        except subprocess.TimeoutExpired:
            print(f"{topology:<12} {algorithm:<13} {'alone' if only else 'all':<6} did not finish in {limit_s:g} s",
                  flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--one"]:
        one(sys.argv[2], sys.argv[3], sys.argv[4] == "True")
    else:
        main(float(sys.argv[sys.argv.index("--limit") + 1]) if "--limit" in sys.argv else 600.0)
