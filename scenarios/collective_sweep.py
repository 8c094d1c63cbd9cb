"""Where does a collective stop being latency-bound and start being bandwidth-bound?

Sweeps the array size V of one collective (default: AllReduce over every axis of a 16x16 tpu-v5e slice;
on other chips their own unit, see `default_topology`) from bytes to gigabytes, simulating each point
beside its closed form and the book's estimate. Small arrays pay the per-hop latency at every ring step;
large ones are limited by link bandwidth, where bus bandwidth (nccl-tests convention) approaches its
ceiling. The crossover is where the bandwidth term equals the latency term: found from the simulated
times (the intercept of time against size -- the latency floor -- over its slope, both read off the two
largest sizes) and in the same way from the closed form.
"""
from __future__ import annotations

from typing import Any

from simulator.collectives import KINDS, run_collective
from simulator.engine.system import System, resolve_chip
from simulator.errors import PodsimError
from simulator.hardware.specs import ChipSpec
from simulator.report.result import Result

DEFAULT_SIZES = tuple(4**i for i in range(0, 17))  # 1 B .. 4 GiB


def default_topology(spec: ChipSpec) -> str:
    """The chip's own topology for the sweep: a 16x16 slice (a tpu-v5e / v6e pod), a 4x4x4 cube (tpu-v4,
    v5p, tpu7x: the smallest slice whose three axes wrap), or an 8-GPU NVLink node."""
    return {"length16": "slice:16x16", "multiple4": "slice:4x4x4"}.get(spec.wraparound, "switch:8")


def _point(kind: str, spec: ChipSpec, topology: str, nbytes: float, axes: Any, trace: bool) -> tuple[System, Any]:
    system = System(spec, topology=topology, trace=trace)
    return system, run_collective(kind, system, nbytes, axes=axes)


def _affine(sizes: list[float], times: list[float]) -> tuple[float, float] | None:
    """(latency floor s, seconds per byte) of time = floor + slope x V, read off the two largest sizes
    (large arrays are bandwidth-bound, where time is affine in V); None with fewer than two sizes. Where
    the line meets zero above V = 0 (an algorithm that cuts large arrays into more pieces runs a little
    slower per byte at the top), the smallest size's time stands in as the floor."""
    if len(sizes) < 2 or sizes[-1] == sizes[-2]:
        return None
    slope = (times[-1] - times[-2]) / (sizes[-1] - sizes[-2])
    floor = times[-1] - slope * sizes[-1]
    return (floor if floor > 0 else times[0]), slope


def _crossover(fit: tuple[float, float] | None) -> float | None:
    """Size at which the bandwidth term (slope x V) equals the latency floor."""
    return fit[0] / fit[1] if fit and fit[1] > 0 else None


def run(*, kind: str = "all_reduce", topology: str | None = None, axes: tuple = (), sizes: tuple = DEFAULT_SIZES,
        chip: str | ChipSpec = "tpu-v5e", trace: bool = True) -> Result:
    """Simulate ``kind`` at every size in ``sizes`` (bytes) on ``topology`` (None: `default_topology` of the
    chip); ``axes`` empty = all axes."""
    spec = resolve_chip(chip)
    topology = default_topology(spec) if topology is None else topology
    if kind not in KINDS:
        raise PodsimError(f"unknown collective {kind!r}; valid kinds: {', '.join(KINDS)}")
    if not sizes or any(v <= 0 for v in sizes):
        raise PodsimError(f"sizes={sizes!r} must be a non-empty list of positive byte counts")
    axes_arg = list(axes) if axes else None
    points, last = [], None
    for v in sorted(sizes):
        last, r = _point(kind, spec, topology, v, axes_arg, trace and v == max(sizes))
        points.append({"bytes": v, "time_s": r.time_s, "analytic_s": r.analytic_s, "book_s": r.book_s,
                       "busbw_bytes_per_s": r.busbw_bytes_per_s, "algbw_bytes_per_s": r.algbw_bytes_per_s})
    sizes_sorted = [p["bytes"] for p in points]
    sim_fit = _affine(sizes_sorted, [p["time_s"] for p in points])
    sim_x, an_x = _crossover(sim_fit), _crossover(_affine(sizes_sorted, [p["analytic_s"] for p in points]))
    floor = sim_fit[0] if sim_fit else points[0]["time_s"]
    busbw = max((p["busbw_bytes_per_s"] for p in points if p["busbw_bytes_per_s"] is not None), default=None)
    for p in points:
        p["regime"] = "latency" if p["time_s"] < 2 * floor else "bandwidth"
    return Result(
        scenario="collective_sweep",
        params=dict(kind=kind, topology=topology, axes=list(axes), sizes=list(sizes), chip=spec.name),
        metrics=last.metrics(),
        extra={"points": points, "latency_floor_s": floor,
               "crossover_bytes": sim_x, "analytic_crossover_bytes": an_x,
               "max_busbw_bytes_per_s": busbw},
        trace=last.trace,
        headline=(f"{kind} on {topology}: latency-bound below about {_fmt(sim_x)} (closed form {_fmt(an_x)}); "
                  + (f"bus bandwidth peaks at {busbw / 1e9:.4g} GB/s" if busbw else "one chip: no bus bandwidth")),
    )


def _fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v / 1e3:.4g} kB"
