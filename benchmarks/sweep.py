"""Sweep runner overhead and scaling: a 1,000-point double_buffer sweep, measured against a plain loop.

(a) the baseline: ``scenarios.double_buffer.run`` called directly in a loop over the same points;
(b) `simulator.frontend.sweep.sweep` with one worker (joblib runs the points in this process);
(c) the same with ``--workers`` loky processes, already started (joblib keeps its pool between sweeps);
(d) the direct loop split over bare forked processes (no runner): what this machine gives at that moment.
Once each, from a stopped pool: (e) a 12-point sweep like the README's, in this process and (f) on a
fresh pool, whose difference is what starting the workers costs a one-off ``podsim sweep``. With
``--dask``, (g) the 1,000 points on a local Dask cluster of ``--workers`` single-thread processes.

Each point is a small pipeline (6..42 blocks x 1..4 buffers x 25 load times, tracing off: about 1 ms
a point here). Prints the wall times (best of ``--repeat``), the runner's overhead (b - a) / a, the
speed-up b / c beside a / d, and ends with ``ratio: X`` where X = b / c. The rows of (b), (c) and (g)
are checked equal apart from their ``seconds`` column.

    python benchmarks/sweep.py [--repeat 7] [--workers 2] [--dask]
"""
from __future__ import annotations

import argparse
import itertools
import os
import time
from collections.abc import Callable
from typing import Any

from joblib.externals.loky import get_reusable_executor

from scenarios import double_buffer
from simulator.frontend.sweep import sweep

GRID = {"blocks": list(range(6, 46, 4)), "buffers": [1, 2, 3, 4], "load_s": [i * 20e-6 for i in range(1, 26)]}
SMALL = {"blocks": [1, 2, 4, 8], "buffers": [1, 2, 3]}  #: the README's example sweep


def direct() -> list[Any]:
    """Every point through ``double_buffer.run`` in a plain loop: the baseline."""
    keys = list(GRID)
    return [double_buffer.run(**dict(zip(keys, combo, strict=True)), trace=False)
            for combo in itertools.product(*GRID.values())]


def forked(workers: int) -> None:
    """The direct loop split over ``workers`` bare forked processes: what the machine allows, no runner."""
    keys, combos = list(GRID), list(itertools.product(*GRID.values()))
    children = []
    for k in range(workers):
        pid = os.fork()
        if pid == 0:
            for combo in combos[k::workers]:
                double_buffer.run(**dict(zip(keys, combo, strict=True)), trace=False)
            os._exit(0)
        children.append(pid)
    for pid in children:
        os.waitpid(pid, 0)


def best_of(repeat: int, runs: dict[str, Callable[[], Any]]) -> dict[str, tuple[float, Any]]:
    """Each run's shortest wall time (s) over ``repeat`` rounds, and its last value. The runs take turns
    within a round, so a burst of load from another process slows all of them rather than one."""
    best: dict[str, tuple[float, Any]] = {name: (float("inf"), None) for name in runs}
    for _ in range(repeat):
        for name, fn in runs.items():
            start = time.perf_counter()
            value = fn()
            best[name] = (min(best[name][0], time.perf_counter() - start), value)
    return best


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def strip(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in row.items() if k != "seconds"} for row in rows]


def on_dask(workers: int) -> tuple[float, list[dict[str, Any]]]:
    """The sweep on a local Dask cluster (started before the clock runs), best of two."""
    import distributed

    with distributed.LocalCluster(n_workers=workers, threads_per_worker=1, dashboard_address=None) as cluster:
        runs = [timed(lambda: sweep("double_buffer", GRID, scheduler=cluster.scheduler_address)) for _ in range(2)]
    return min(r[0] for r in runs), runs[-1][1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--dask", action="store_true", help="also time a local Dask cluster")
    args = parser.parse_args()
    points = len(list(itertools.product(*GRID.values())))
    direct()  # warm-up: imports and first-call caches out of the timings
    get_reusable_executor().shutdown(wait=True)  # (e) and (f) start from no pool
    e, _ = timed(lambda: sweep("double_buffer", SMALL, workers=1))
    f, _ = timed(lambda: sweep("double_buffer", SMALL, workers=args.workers))
    best = best_of(args.repeat, {"a": direct, "b": lambda: sweep("double_buffer", GRID, workers=1),
                                 "c": lambda: sweep("double_buffer", GRID, workers=args.workers),
                                 "d": lambda: forked(args.workers)})
    (a, _), (b, one), (c, many), (d, _) = best["a"], best["b"], best["c"], best["d"]
    assert strip(one) == strip(many), "rows differ"
    print(f"{points} points, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    print(f"(a) direct loop          {a:.3f} s  ({a / points * 1e3:.3f} ms per point)  <- baseline")
    print(f"(b) sweep, 1 worker      {b:.3f} s  runner overhead (b - a) / a = {100 * (b - a) / a:.1f}%")
    print(f"(c) sweep, {args.workers} workers     {c:.3f} s  speed-up b / c = {b / c:.2f}, a / c = {a / c:.2f}")
    print(f"(d) {args.workers} bare forked loops {d:.3f} s  (no runner: what this machine allows, a / d = {a / d:.2f})")
    print(f"(e) {len(list(itertools.product(*SMALL.values())))}-point sweep, in process   {e:.3f} s")
    print(f"(f) the same, fresh pool   {f:.3f} s  (starting {args.workers} workers costs about {f - e:.2f} s)")
    if args.dask:
        g, rows = on_dask(args.workers)
        assert strip(rows) == strip(one), "Dask rows differ"
        print(f"(g) sweep on Dask, {args.workers} x 1 thread {g:.3f} s  speed-up b / g = {b / g:.2f}")
    print(f"ratio: {b / c:.3f}")


if __name__ == "__main__":
    main()
