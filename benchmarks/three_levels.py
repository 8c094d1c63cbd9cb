"""Three-level AllReduce of 1 GB: simulated time beside its closed form, the hierarchical optimum and the bound.

Cases: H100 fat trees (NVLink in a node, the unit's leaf per rail, the spine) and v5e pods (ICI in a slice,
DCN in a pod, the core between pods at a quarter of a DCN port per chip). The hierarchical optimum is
stated from first principles, bandwidth terms only: the level terms are each level's bytes per chip over
its bandwidth per chip -- inside 2 (m-1)/m V over the chip's fast egress, the unit / pod tier
2 (Q-1)/Q V/m over its NIC or DCN port, the top tier 2 (P-1)/P V/(mQ) over its share of the spine or core.
The sequential algorithms are held to their SUM, the pipelined ones to the MAX of the fast term and the
uplink terms that share one port (and, separately, the core). Each case runs in its own process.

    python benchmarks/three_levels.py            # every case, 900 s each at most
    python benchmarks/three_levels.py --limit 120
"""
from __future__ import annotations

import subprocess
import sys
import time

V = 1e9
NV_B, IB_B = 4.5e11, 5e10  # h100 NVLink egress per GPU, one NIC per GPU (bytes/s each way)
ICI_EGRESS, DCN_B = 4 * 4.5e10, 3.125e9  # tpu-v5e: four ICI links (a wrapped 16x16 slice), one DCN port
#: topology, chip, algorithm, (m, Q, P), fast bandwidth, tier bandwidth, top-tier bandwidth per chip
CASES = [("superpod:2", "h100", (8, 32, 2), NV_B, IB_B, IB_B),
         ("multipod:2:2:16x16", "tpu-v5e", (256, 2, 2), ICI_EGRESS, DCN_B, DCN_B / 4)]
ALGORITHMS = ("hierarchical3", "hierarchical3_pipelined", "hierarchical_pipelined")


def optimum(shape: tuple[int, int, int], fast: float, tier: float, top: float) -> tuple[float, float]:
    """(sum, max) of the level terms (see the module docstring)."""
    m, q, p = shape
    inner = 2 * (m - 1) / m * V / fast
    mid = 2 * (q - 1) / q * V / m / tier
    up = 2 * (p - 1) / p * V / (m * q)
    port = mid + up / tier  # the chip's NIC / DCN port carries both tiers
    return inner + mid + up / top, max(inner, port, up / top)


def one(index: int, algorithm: str) -> None:
    """Run one case in this process and print its line."""
    from simulator.collectives import run_collective
    from simulator.engine.system import System

    topology, chip, shape, fast, tier, top = CASES[index]
    total, most = optimum(shape, fast, tier, top)
    start = time.perf_counter()
    r = run_collective("all_reduce", System(chip, topology=topology, trace=False), V, algorithm=algorithm)
    form = total if algorithm == "hierarchical3" else most
    print(f"{topology:<19} {algorithm:<24} simulated {r.time_s * 1e3:7.3f} ms  closed form {r.analytic_s * 1e3:7.3f} ms"
          f" ({r.time_s / r.analytic_s:.3f})  optimum {'sum' if form == total else 'max'} {form * 1e3:7.3f} ms "
          f"({r.time_s / form:.2f}x)  bound {r.topology_bound_s * 1e3:7.3f} ms  "
          f"wall {time.perf_counter() - start:6.1f} s",
          flush=True)


def main(argv: list[str]) -> None:
    limit = float(argv[argv.index("--limit") + 1]) if "--limit" in argv else 900.0
    for index in range(len(CASES)):
        for algorithm in ALGORITHMS:
            try:
                subprocess.run([sys.executable, __file__, "--one", str(index), algorithm], timeout=limit, check=False)
            except subprocess.TimeoutExpired:
                print(f"{CASES[index][0]:<19} {algorithm:<24} did not finish in {limit:.0f} s", flush=True)


if __name__ == "__main__":
    if "--one" in sys.argv:
        at = sys.argv.index("--one")
        one(int(sys.argv[at + 1]), sys.argv[at + 2])
    else:
        main(sys.argv[1:])
