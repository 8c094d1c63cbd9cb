"""How long is one decode, prefill or training step of a whole model, and where does the time go?

Simulates the step on one chip or a data x model mesh (``--set mesh=data=2,model=4``): per layer the
chips stream their share of the weights (and KV history) from HBM, run the matmuls and attention on
the MXU and element-wise work on the VPU, and AllReduce activations over the model axis; training
adds the backward pass (two matmuls per forward matmul, three with block checkpointing) and the
gradient AllReduce over the data axis. The result puts the simulated step beside the closed-form
budget (FLOPs, bytes, bounds, fit) and reports the busy fraction of every unit and the busiest link.
"""
from __future__ import annotations

from typing import Any

from simulator.engine.system import resolve_chip
from simulator.errors import CapacityError, PodsimError
from simulator.hardware.specs import ChipSpec
from simulator.report.result import Result
from simulator.workloads.budget import decode_budget, parse_parallelism, train_budget
from simulator.workloads.simulate import simulate_decode, simulate_train
from simulator.workloads.transformer import get_model

MODES = ("decode", "prefill", "train")


def run(*, model: str = "llama-2-7b", mode: str = "decode", batch: int = 8, context: int = 1024,
        prompt: int = 512, seq: int = 2048, mesh: str = "model=4", recompute: bool = False,
        require_fit: bool = True, calibrated: bool = False, chip: str | ChipSpec = "tpu-v5e",
        trace: bool = True) -> Result:
    """One step of ``model``: decode (one new token per request after ``context`` cached ones),
    prefill (``prompt`` new tokens per request) or train (``seq`` tokens per sequence). With
    ``calibrated`` the step also runs at the chip's fitted efficiencies, reported beside the ideal one."""
    if mode not in MODES:
        raise PodsimError(f"mode={mode!r}; valid modes: {', '.join(MODES)}")
    spec, cfg, par = resolve_chip(chip), get_model(model), parse_parallelism(mesh)
    def simulate(cal: bool) -> Any:
        if mode == "train":
            return simulate_train(cfg, spec, batch, seq, par, recompute, trace, calibrated=cal)
        return simulate_decode(cfg, spec, batch, context, par, new_tokens=1 if mode == "decode" else prompt,
                               trace=trace, calibrated=cal)

    if mode == "train":
        budget = train_budget(cfg, spec, batch, seq, par, recompute)
        need = budget["memory_per_chip_bytes"]
    else:
        budget = decode_budget(cfg, spec, batch, context, par, new_tokens=1 if mode == "decode" else prompt)
        need = budget["hbm_needed_per_chip_bytes"]
    if require_fit and need > spec.hbm_capacity_bytes:
        raise CapacityError(_fit_message(budget, need, spec))
    sim = simulate(False)
    summary = sim.summary()
    extra: dict[str, Any] = {"budget": budget, **summary,
                             "vs_lower_bound": summary["step_time_s"] / budget["lower_bound_s"]}
    if calibrated:
        extra["calibrated_step_time_s"] = simulate(True).env.now
    return Result(
        scenario="transformer_step",
        params=dict(model=model, mode=mode, batch=batch, context=context, prompt=prompt, seq=seq, mesh=mesh,
                    recompute=recompute, calibrated=calibrated, chip=spec.name),
        metrics=sim.system.metrics(), extra=extra, trace=sim.system.trace,
        headline=_headline(mode, model, summary, budget),
    )


def _fit_message(budget: dict[str, Any], need: float, spec: ChipSpec) -> str:
    gib = 2**30
    hint = budget.get("fit_note", "add chips on the model axis, or set recompute=true")
    return (f"{budget['model']} needs {need / gib:.2f} GiB per chip but {spec.name} has "
            f"{spec.hbm_capacity_bytes / gib:.2f} GiB ({(need - spec.hbm_capacity_bytes) / gib:.2f} GiB over); "
            f"{hint} (or set require_fit=false to time it anyway)")


def _headline(mode: str, model: str, summary: dict[str, Any], budget: dict[str, Any]) -> str:
    busiest = max(summary["busy_fraction"].items(), key=lambda kv: kv[1], default=("none", 0.0))
    return (f"{mode} step of {model}: {summary['step_time_s'] * 1e3:.4g} ms simulated, "
            f"{budget['lower_bound_s'] * 1e3:.4g} ms roofline bound; {busiest[0]} busy "
            f"{busiest[1] * 100:.0f}% of the step, busiest link {summary['busiest_link_fraction'] * 100:.0f}%")
