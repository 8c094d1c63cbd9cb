"""At what batch does decoding stop being memory-bound?

Sweeps the batch of one decode step (default: llama-3-8b on a tpu-v5p chip, 128 cached positions per
request). Weights are read once per step whatever the batch, so small batches are bound by HBM
bandwidth and the time per token falls as the batch grows; once the MXU work outgrows the bytes the
step turns compute-bound and the time per token levels off. Each point is simulated beside its
closed-form bounds; the crossover is found from the simulated busy times (bisection over the
batch), beside the closed-form critical batch. The simulated crossover sits a few requests lower:
the MXU pads the batch to a multiple of 8 rows, so a batch just below the closed form already
computes like the next multiple of 8.
"""
from __future__ import annotations

from typing import Any

from simulator.engine.system import resolve_chip
from simulator.errors import PodsimError
from simulator.hardware.specs import ChipSpec
from simulator.report.result import Result
from simulator.workloads.budget import Parallelism, decode_budget, parse_parallelism
from simulator.workloads.simulate import simulate_decode
from simulator.workloads.transformer import get_model


def _point(cfg: Any, spec: ChipSpec, batch: int, context: int, par: Parallelism) -> dict:
    sim = simulate_decode(cfg, spec, batch, context, par, trace=True)
    busy = sim.system.metrics()["busy_s"]
    budget = decode_budget(cfg, spec, batch, context, par)
    return {"batch": batch, "step_time_s": sim.env.now, "time_per_token_s": sim.env.now / batch,
            "hbm_busy_s": busy["hbm"], "mxu_busy_s": busy["mxu"],
            "bound": "compute" if busy["mxu"] >= busy["hbm"] else "memory",
            "analytic_lower_bound_s": budget["lower_bound_s"], "analytic_bound": budget["bound"],
            "fits": budget["fits"], "_sim": sim}


def run(*, model: str = "llama-3-8b", context: int = 128, batches: tuple = (1, 4, 16, 64, 128, 256, 512, 1024),
        mesh: str = "", chip: str | ChipSpec = "tpu-v5p", trace: bool = True) -> Result:
    """Simulate a decode step at every batch size; report the move from memory- to compute-bound."""
    spec = resolve_chip(chip)
    cfg = get_model(model)
    par = parse_parallelism(mesh)
    if not batches or any(b < 1 or b % par.data for b in batches):
        raise PodsimError(f"batches={batches!r} must be whole numbers >= 1 divisible by data={par.data}")
    points = [_point(cfg, spec, b, context, par) for b in sorted(batches)]
    crossover = _crossover(cfg, spec, context, par, points)
    closed = decode_budget(cfg, spec, par.data, context, par)["critical_batch"]
    last = points[-1].pop("_sim")
    for p in points:
        p.pop("_sim", None)
    return Result(
        scenario="decode_batch_sweep",
        params=dict(model=model, context=context, batches=list(batches), mesh=mesh, chip=spec.name),
        metrics=last.system.metrics(),
        extra={"points": points, "crossover_batch": crossover,
               "analytic_critical_batch": closed},  # None: no batch ever
        trace=last.system.trace if trace else None,
        headline=(f"{model} on {spec.name}: "
                  + (f"memory-bound below batch {crossover}" if crossover else
                     f"memory-bound at every batch up to {max(batches)}")
                  + f" (simulated; closed form {'never compute-bound' if closed is None else f'{closed:.1f}'}"
                  f"); time per token falls from {points[0]['time_per_token_s'] * 1e3:.3g} ms to "
                  f"{points[-1]['time_per_token_s'] * 1e3:.3g} ms"),
    )


def _crossover(cfg: Any, spec: ChipSpec, context: int, par: Parallelism, points: list[dict]) -> int | None:
    """Smallest batch (a multiple of data) whose simulated MXU busy time reaches its HBM busy time."""
    bound = [p for p in points if p["bound"] == "compute"]
    if not bound:
        return None
    hi = bound[0]["batch"] // par.data
    lower = [p["batch"] for p in points if p["bound"] == "memory" and p["batch"] < hi * par.data]
    lo = max(lower, default=0) // par.data
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _point(cfg, spec, mid * par.data, context, par)["bound"] == "compute":
            hi = mid
        else:
            lo = mid
    return hi * par.data
