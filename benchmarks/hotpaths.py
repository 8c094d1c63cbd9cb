"""Hot paths of the largest scenarios, timed now and at a baseline commit in the same run.

    python benchmarks/hotpaths.py [--baseline REV]

Each workload runs in a fresh subprocess, once against this working tree and once against a
temporary `git worktree` of REV (default: the commit before the hot-path work), and must reach the
same simulated time in both; the script prints both wall times (best of ``--repeat``) and the speed-up.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = "71cd78e"  # before route caching and the single-flow channel fast path

# The public API moved to `simulator` itself with the layered packages; older baselines had flat modules.
IMPORTS = ("try:\n    from simulator import Parallelism, System, get_chip, get_model, run_collective, sharded_matmul,"
           " simulate_train\nexcept ImportError:\n    from simulator.system import System\n"
           "    from simulator.collectives import run_collective\n    from simulator.workload import simulate_train\n"
           "    from simulator.transformer import get_model\n    from simulator.budget import Parallelism\n"
           "    from simulator.specs import get_chip\n    from simulator.sharding import sharded_matmul\n")
WORKLOADS = {
    "AllReduce 1 GB, torus:8x8x8, full event simulation": (
        "r = run_collective('all_reduce', System('tpu-v5p', topology='torus:8x8x8', trace=False), 1e9, mode='full')\n"
        "sim = r.time_s"),
    "training step, llama-2-7b, data=4 x model=4": (
        "sim = simulate_train(get_model('llama-2-7b'), get_chip('tpu-v5p'), 16, 1024, Parallelism(4, 4)).env.now"),
    "sharded matmul strategies, X=4,Y=2": (
        "r = sharded_matmul('A[I,J_X]@B[J_X,K]->C[I,K]', {'I': 1024, 'J': 2048, 'K': 4096}, 'X=4,Y=2')\n"
        "sim = sum(s['time_s'] for s in r['strategies'])"),
}
TIMER = IMPORTS + "import time\nt = time.perf_counter()\n{body}\nprint(time.perf_counter() - t, repr(sim))\n"


def measure(tree: Path, body: str, repeat: int) -> tuple[float, str]:
    """Best wall time of ``body`` run against the sources in ``tree``, and its simulated result."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    best, sim = float("inf"), ""
    for _ in range(repeat):
        out = subprocess.run([sys.executable, "-c", TIMER.format(body=body)], cwd=tree, env=env, check=True,
                             capture_output=True, text=True).stdout.split()
        best, sim = min(best, float(out[0])), out[1]
    return best, sim


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=BASELINE)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "baseline"
        subprocess.run(["git", "worktree", "add", "--detach", str(base), args.baseline], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            for name, body in WORKLOADS.items():
                before, sim_before = measure(base, body, args.repeat)
                after, sim_after = measure(ROOT, body, args.repeat)
                same = "same simulated result" if sim_before == sim_after else f"DIFFERENT: {sim_before} vs {sim_after}"
                print(f"{name}: before {before:.3f} s, after {after:.3f} s, speed-up {before / after:.2f}x ({same})")
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, capture_output=True)


if __name__ == "__main__":
    main()
