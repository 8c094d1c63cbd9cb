"""What does expert parallelism cost a mixture-of-experts layer, and how much does load imbalance hurt?

One MoE layer with its experts spread over the chips of an expert axis (default: mixtral-8x7b's 8
experts, top-2, on 8 tpu-v5p chips). Every chip routes its tokens to their top-k experts with an
AllToAll (dispatch), each chip runs its experts on the tokens it received, and a second AllToAll
brings the results back (combine). ``imbalance`` gives the busiest chip (1 + imbalance) times the
average number of tokens, the others correspondingly fewer; the step waits for the busiest chip.
Reports total vs active parameters and FLOPs, and the simulated time beside the closed form.
"""
from __future__ import annotations

from typing import Any

from simulator.collectives import run_collective
from simulator.engine.system import System, resolve_chip
from simulator.errors import PodsimError
from simulator.hardware.specs import ChipSpec
from simulator.report.result import Result
from simulator.units import positive, positive_int
from simulator.workloads.transformer import get_model


def run(*, model: str = "mixtral-8x7b", chips: int = 8, tokens_per_chip: int = 4096, imbalance: float = 0.0,
        topology: str | None = None, chip: str | ChipSpec = "tpu-v5p", trace: bool = True) -> Result:
    """Dispatch, expert compute and combine of one MoE layer on ``chips`` chips."""
    spec, cfg = resolve_chip(chip), get_model(model)
    positive_int(chips, name="chips")
    positive_int(tokens_per_chip, name="tokens_per_chip")
    positive(imbalance, name="imbalance", allow_zero=True)
    if not cfg.n_experts:
        raise PodsimError(f"model {model!r} has no experts; use an MoE model such as mixtral-8x7b")
    if cfg.n_experts % chips:
        raise PodsimError(f"chips={chips} must divide the {cfg.n_experts} experts of {model}")
    if chips > 1 and imbalance > chips - 1:
        raise PodsimError(f"imbalance={imbalance} is more than chips - 1 = {chips - 1} (all tokens on one chip)")
    if chips == 1 and imbalance:
        raise PodsimError(f"imbalance={imbalance} needs chips > 1: one chip holds every expert")
    system = System(spec, topology=topology or f"ring:{chips}", trace=trace) if chips > 1 else System(spec)
    if len(system.chips) != chips:
        raise PodsimError(f"topology {topology!r} has {len(system.chips)} chips but chips={chips}; give one with "
                          f"{chips} chips or leave it out")
    k, d, e = cfg.experts_per_token, cfg.d_model, cfg.act_elem_bytes
    routed = tokens_per_chip * k  # token copies each chip sends out, and on average receives
    a2a_bytes = chips * routed * d * e  # the whole dispatched array over all chips
    dispatch = run_collective("all_to_all", system, a2a_bytes) if chips > 1 else None
    flops_per_copy = 2 * (3 if cfg.gated_mlp else 2) * d * cfg.d_ff
    loads = _loads(routed, chips, imbalance)
    start = system.env.now
    for c, load in zip(system.chips, loads, strict=True):
        c.compute(load * flops_per_copy, "experts")
    system.run()
    expert_s = system.env.now - start
    combine = run_collective("all_to_all", system, a2a_bytes) if chips > 1 else None
    t_expert = max(loads) * flops_per_copy / spec.peak_flops_per_s()
    t_a2a = dispatch.analytic_s if dispatch else 0.0
    extra: dict[str, Any] = {
        "params_total": cfg.params(), "params_active": cfg.params(active=True),
        "expert_flops_per_token": k * flops_per_copy,
        "dense_equivalent_flops_per_token": cfg.n_experts * flops_per_copy,
        "dispatch_s": dispatch.time_s if dispatch else 0.0, "expert_s": expert_s,
        "combine_s": combine.time_s if combine else 0.0, "time_s": system.env.now,
        "analytic_s": 2 * t_a2a + t_expert, "balanced_expert_s": routed * flops_per_copy / spec.peak_flops_per_s(),
        "tokens_on_busiest_chip": max(loads), "imbalance_slowdown": max(loads) / routed,
        "all_to_all_algorithm": dispatch.algorithm if dispatch else None,  # auto's choice (both AllToAlls alike)
    }
    return Result(
        scenario="moe_layer",
        params=dict(model=model, chips=chips, tokens_per_chip=tokens_per_chip, imbalance=imbalance,
                    topology=topology or f"ring:{chips}", chip=spec.name),
        metrics=system.metrics(), extra=extra, trace=system.trace,
        headline=(f"{model}: {extra['params_active'] / 1e9:.1f}B of {extra['params_total'] / 1e9:.1f}B parameters "
                  f"active; layer {system.env.now * 1e6:.4g} us = 2 AllToAlls of {t_a2a * 1e6:.4g} us + experts "
                  f"{expert_s * 1e6:.4g} us ({max(loads) / routed:.2f}x the balanced load)"),
    )


def _loads(routed: int, chips: int, imbalance: float) -> list[float]:
    """Token copies per chip: the busiest gets (1 + imbalance) x average, the rest share what is left."""
    if chips == 1:
        return [float(routed)]
    hot = routed * (1 + imbalance)
    rest = (routed * chips - hot) / (chips - 1)
    return [hot] + [rest] * (chips - 1)

