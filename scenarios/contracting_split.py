"""When does splitting a matmul's contraction over two chips stop being communication-bound?

``[B, D] @ [D, F]`` with D split over two chips: each multiplies its half (B·D·F FLOPs) and sends its
bf16 ``[B, F]`` partial sum to the other, F-chunk by F-chunk so sending overlaps computing. Compute
grows with D, communication does not, so the pair turns compute-bound at D = 2 · FLOP/s / one-way
link bandwidth (about 8755 on tpu-v5e) -- the two-chip network roofline of the book.

A point's ``bound`` comes from end-to-end simulated time alone: the point is run again with a 0.1%
faster MXU and with 0.1% faster links, and it is compute-bound when the faster MXU shortens the run
more. ``crossover_d`` is the smallest such even D, found by bisection over those simulated runs,
beside the closed form ``analytic_crossover_d`` (chunk by chunk the MXU races the link, so the two
agree to the bisection's step of 2). Compute here is the unpadded FLOP count over the MXU peak, as in
the book.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import simpy

from simulator.engine.system import System, resolve_chip
from simulator.engine.watch import expect_events
from simulator.errors import PodsimError
from simulator.hardware.specs import ChipSpec
from simulator.report.result import Result
from simulator.units import positive_int

ELEM = 2  # bf16 bytes


def simulate(spec: ChipSpec, b: int, d: int, f: int, chunks: int) -> System:
    """Both chips compute their half of D in ``chunks`` F-chunks, sending each partial as it is done.

    Tracing stays on: the busy times that decide the bound come from the spans.
    """
    system = System(spec, topology="line:2")
    net = system.network

    def worker(me: int) -> Any:
        sends = []
        for c in range(chunks):
            yield system.chips[me].compute(b * d * f / chunks, f"partial {c}")  # 2 * B * (D/2) * F / chunks
            sends.append(net.message(me, 1 - me, ELEM * b * f / chunks, f"partial {c}"))
        yield simpy.AllOf(system.env, sends)

    for me in (0, 1):
        system.process(worker(me), f"chip {me}")
    system.run()
    return system


def _busy(system: System) -> tuple[float, float]:
    busy = system.metrics()["busy_s"]
    return busy["mxu"], busy["link 0->1"]


SPEEDUP = 1.001  #: the 0.1% faster unit of the end-to-end sensitivity test


def _bound(spec: ChipSpec, b: int, d: int, f: int, chunks: int) -> str:
    """"compute" when a 0.1% faster MXU shortens the simulated run more than 0.1% faster links do."""
    mxu = replace(spec, peak_bf16_flops_per_s=spec.peak_bf16_flops_per_s * SPEEDUP,
                  peak_int8_flops_per_s=spec.peak_int8_flops_per_s * SPEEDUP)
    link = replace(spec, ici_bandwidth_bytes_per_s=spec.ici_bandwidth_bytes_per_s * SPEEDUP)
    faster_mxu_s = simulate(mxu, b, d, f, chunks).env.now
    faster_link_s = simulate(link, b, d, f, chunks).env.now
    return "compute" if faster_mxu_s < faster_link_s else "communication"


def _crossover(spec: ChipSpec, b: int, f: int, chunks: int, hi: int) -> int | None:
    """Smallest even D in [2, hi] that is compute-bound by end-to-end simulated time (bisection)."""
    def compute_bound(d: int) -> bool:
        return _bound(spec, b, d, f, chunks) == "compute"

    if not compute_bound(hi):
        return None
    lo = 0
    while hi - lo > 2:
        mid = (lo + hi) // 4 * 2
        if mid in (lo, hi):
            break
        lo, hi = (lo, mid) if compute_bound(mid) else (mid, hi)
    return hi


def run(*, B: int = 1024, F: int = 4096, d_values: tuple = (1024, 2048, 4096, 8192, 16384, 32768, 65536),  # noqa: N803
        chunks: int = 8, chip: str | ChipSpec = "tpu-v5e") -> Result:
    """Sweep D; report each point and the crossover D, simulated beside the closed form."""
    spec = resolve_chip(chip)
    positive_int(B, name="B")
    positive_int(F, name="F")
    positive_int(chunks, name="chunks")
    if chunks > 10_000:
        raise PodsimError(f"chunks={chunks} is more than the 10,000 pieces this scenario simulates per chip")
    if not d_values or any(d < 2 or d % 2 for d in d_values):
        raise PodsimError(f"d_values={d_values!r} must be even integers >= 2 (D is split over two chips)")
    # about 8 events per chunk per simulation: three per D, and two per step of a bisection of ~16 steps
    expect_events(8 * chunks * (3 * len(d_values) + 32), "use fewer chunks")
    points = []
    for d in sorted(d_values):
        system = simulate(spec, B, d, F, chunks)
        mxu, link = _busy(system)
        points.append({"D": d, "time_s": system.env.now, "compute_s": mxu, "communication_s": link,
                       "bound": _bound(spec, B, d, F, chunks)})
    analytic_d = 2 * spec.peak_flops_per_s() / spec.ici_bandwidth_bytes_per_s
    crossover = _crossover(spec, B, F, chunks, hi=max(int(2 * analytic_d) // 2 * 2, max(d_values)))
    return Result(
        scenario="contracting_split",
        params=dict(B=B, F=F, d_values=list(d_values), chunks=chunks, chip=spec.name),
        metrics=system.metrics(),
        extra={"points": points, "crossover_d": crossover, "analytic_crossover_d": analytic_d},
        trace=system.trace,
        headline=(f"compute-bound from D = {crossover} (simulated end to end) vs 2 x FLOP/s / link = {analytic_d:.1f} "
                  f"(closed form) on {spec.name}"),
    )
