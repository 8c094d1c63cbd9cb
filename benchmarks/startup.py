"""Start-up: `podsim --help`, `podsim chips` and a one-block run, each against ``python -c "import simpy, numpy"``.

Issue 29's start-up targets: ``podsim run double_buffer --set blocks=1`` at most 3x the yardstick's wall time
and ``podsim --help`` at most 2x, both measured in the same run. Every command runs as a whole fresh process
(start-up is the point), in turn with the yardstick (A B A B ...) after one warm-up round, so load from other
processes on the machine falls on both alike; the ratio is taken pair by pair and its median printed, with
each command's median wall and CPU time (children's user + system, from `os.wait4`'s accounting). Ends with
one ``ratio[NAME]: X (target <= T)`` line per command.

    python benchmarks/startup.py [--repeat 7] [--podsim PATH]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

YARDSTICK = [sys.executable, "-c", "import simpy, numpy"]
COMMANDS = {  #: name: (arguments, target ratio to the yardstick's wall; None: reported only)
    "help": (["--help"], 2.0),
    "chips": (["chips"], None),
    "one_block_run": (["run", "double_buffer", "--set", "blocks=1"], 3.0),
}


def timed(argv: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds (user + system) of one run of ``argv`` as a fresh process, its output discarded."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}")
    return wall, usage.ru_utime + usage.ru_stime


def pairs(argv: list[str], repeat: int) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """``repeat`` interleaved runs of ``argv`` and of the yardstick, after one warm-up of each."""
    timed(argv), timed(YARDSTICK)
    mine, yard = [], []
    for _ in range(repeat):
        mine.append(timed(argv))
        yard.append(timed(YARDSTICK))
    return mine, yard


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--podsim", default=shutil.which("podsim") or "podsim",
                        help="the podsim script to time (another checkout's, for a before/after)")
    args = parser.parse_args()
    lines = []
    for name, (argv, target) in COMMANDS.items():
        mine, yard = pairs([args.podsim, *argv], args.repeat)
        ratio = statistics.median(m[0] / y[0] for m, y in zip(mine, yard, strict=True))
        cpu_ratio = statistics.median(m[1] / y[1] for m, y in zip(mine, yard, strict=True))
        wall_ms, cpu_ms = (statistics.median(m[i] for m in mine) * 1e3 for i in (0, 1))
        yard_wall_ms, yard_cpu_ms = (statistics.median(y[i] for y in yard) * 1e3 for i in (0, 1))
        print(f"{name:<14} wall {wall_ms:6.0f} ms, cpu {cpu_ms:6.0f} ms; yardstick wall {yard_wall_ms:5.0f} ms, "
              f"cpu {yard_cpu_ms:5.0f} ms; cpu ratio {cpu_ratio:.2f}")
        lines.append(f"ratio[{name}]: {ratio:.2f}" + (f" (target <= {target:g})" if target else ""))
    print(f"yardstick: {' '.join(YARDSTICK[1:])!s}")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
