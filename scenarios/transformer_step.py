"""How long is one decode, prefill or training step of a whole model, and where does the time go?

Simulates the step on one chip or a mesh (``--set mesh=data=2,model=4``): per layer the chips
stream their share of the weights (and KV history, sharded by ``kv_sharding``) from HBM, run the
matmuls and attention on the MXU and element-wise work on the VPU, and AllReduce activations over
the model axis; training runs any parallelism plan (`simulator.workloads.plans`: data, pipeline,
fsdp, expert, sequence and model axes, microbatches through a pipeline schedule, checkpointing),
adding the backward pass, gradient reductions, FSDP gathers and pipeline transfers. The result puts
the simulated step beside the closed-form budget (FLOPs, bytes, bounds, fit) and reports the busy
fraction of every unit and the busiest link.
"""
from __future__ import annotations

from typing import Any

from simulator.engine.system import resolve_chip
from simulator.errors import CapacityError, PodsimError
from simulator.hardware.specs import ChipSpec
from simulator.hardware.train_calibration import train_calibrated_chips
from simulator.report.result import Result
from simulator.workloads.budget import Parallelism, decode_budget
from simulator.workloads.layout2d import parse_layout
from simulator.workloads.plans import POLICIES, TrainOptions, check_train_plan, parse_plan_mesh, train_plan
from simulator.workloads.plans.calibrated import calibrated_train_step, slice_shape_for
from simulator.workloads.plans.memory import train_memory
from simulator.workloads.projection import step_cost
from simulator.workloads.simulate import simulate_decode
from simulator.workloads.transformer import get_model, load_config_file, load_hf_config

MODES = ("decode", "prefill", "train")


def run(*, model: str = "llama-2-7b", mode: str = "decode", batch: int = 8, context: int = 1024,
        prompt: int = 512, seq: int = 2048, mesh: str = "model=4", recompute: bool = False,
        require_fit: bool = True, calibrated: bool = False, chip: str | ChipSpec = "tpu-v5e",
        microbatches: int = 1, schedule: str = "1f1b", checkpoints_per_layer: str = "", kv_sharding: str = "heads",
        compute_dtype: str = "", topology: str = "", price_per_chip_hour: float = 0.0, trace: bool = True,
        config: str = "", exact: bool = False, layout: str = "1d") -> Result:
    """One step of ``model``: decode (one new token per request after ``context`` cached ones),
    prefill (``prompt`` new tokens per request) or train (``seq`` tokens per sequence; any of the six mesh
    axes, ``microbatches`` through a ``schedule``, ``checkpoints_per_layer`` K or a policy; ``recompute``
    is the ``full`` policy). With ``calibrated`` the step also runs at the chip's fitted efficiencies, and
    a training step on a TPU adds ``calibrated_step``: the whole step fitted to published runs, factor by
    factor (`simulator.workloads.plans.calibrated`).
    ``topology`` (a spec) chooses the hardware; by default the mesh lies on the chip's real slice of that
    many chips, and the result says where (``topology``, ``placement``: each mesh axis's physical axes).
    ``config`` (a path) replaces the preset ``model``: a TOML file of TransformerConfig fields, or a Hugging
    Face ``config.json`` (by its ``.json`` suffix), as ``podsim model --config`` / ``--hf-config`` read.
    A symmetric training step is simulated through one chip per pipeline stage (the same figures, far
    faster; `simulator.workloads.plans.symmetry`); ``exact`` simulates every chip (its trace then holds
    every chip's spans). ``layout`` (decode/prefill) is ``podsim model --layout``: 1d (the model axis splits heads
    and d_ff), 2d (the weight-stationary X x Y grid with the fewest collective seconds) or 2d:XxY
    (`simulator.frontend.serve_layout`)."""
    if mode not in MODES:
        raise PodsimError(f"mode={mode!r}; valid modes: {', '.join(MODES)}")
    spec, cfg = resolve_chip(chip), _model(model, config)
    model = cfg.name
    layout = parse_layout(layout)
    if mode == "train" and layout != "1d":
        raise PodsimError(f"layout={layout} is for decode and prefill; a training step lays its plan with mesh= "
                          "(drop layout)")
    if mode == "train":
        return _train(cfg, spec, batch, seq, mesh, recompute, require_fit, calibrated, microbatches, schedule,
                      checkpoints_per_layer, topology, price_per_chip_hour, trace, exact)
    plan = parse_plan_mesh(mesh)
    others = [a for a in plan.used if a not in ("data", "model")]
    if others:
        raise PodsimError(f"mesh axis {others[0]} is for training; decode and prefill use data and model "
                          "(shard the KV cache with kv_sharding=batch or sequence)")
    par = Parallelism(plan.size("data"), plan.size("model"))
    new = 1 if mode == "decode" else prompt
    if layout != "1d":
        return _run_2d(cfg, spec, par, batch, context, new, layout, kv_sharding, compute_dtype, topology, require_fit,
                       calibrated, price_per_chip_hour, trace, dict(model=model, config=config, mode=mode, batch=batch,
                       context=context, prompt=prompt, mesh=mesh, calibrated=calibrated, chip=spec.name,
                       compute_dtype=compute_dtype, topology=topology, layout=layout))

    def simulate(cal: bool) -> Any:
        return simulate_decode(cfg, spec, batch, context, par, new_tokens=new, trace=trace, calibrated=cal,
                               kv_sharding=kv_sharding, topology=topology or None)

    budget = decode_budget(cfg, spec, batch, context, par, new_tokens=new, kv_sharding=kv_sharding,
                           compute_dtype=compute_dtype or None)
    need = budget["hbm_needed_per_chip_bytes"]
    if require_fit and need > spec.hbm_capacity_bytes:
        raise CapacityError(_fit_message(budget, need, spec))
    sim = simulate(False)
    summary = sim.summary()
    extra: dict[str, Any] = {"budget": budget, **summary,
                             "vs_lower_bound": summary["step_time_s"] / budget["lower_bound_s"]}
    if price_per_chip_hour:
        extra.update(step_cost(price_per_chip_hour, par.chips, summary["step_time_s"], batch * new,
                               "price_per_chip_hour"))
    if calibrated:
        extra["calibrated_step_time_s"] = simulate(True).env.now
    return Result(
        scenario="transformer_step",
        params=dict(model=model, config=config, mode=mode, batch=batch, context=context, prompt=prompt, seq=seq,
                    mesh=mesh, recompute=recompute, calibrated=calibrated, chip=spec.name, kv_sharding=kv_sharding,
                    compute_dtype=compute_dtype, topology=topology),
        metrics=sim.system.metrics(), extra=extra, trace=sim.system.trace,
        headline=_headline(mode, model, summary, budget),
    )


def _run_2d(cfg: Any, spec: ChipSpec, par: Parallelism, batch: int, context: int, new: int, layout: str,
            kv_sharding: str, compute_dtype: str, topology: str, require_fit: bool, calibrated: bool, price: float,
            trace: bool, params: dict[str, Any]) -> Result:
    """A decode or prefill step under a 2-D weight-stationary ``layout`` (`simulator.frontend.serve_layout`)."""
    from simulator.frontend.serve_layout import check_2d_flags
    from simulator.workloads.layout2d import budget_2d
    from simulator.workloads.simulate2d import simulate_2d

    check_2d_flags(layout, kv_sharding, cli=False)
    budget = budget_2d(cfg, spec, batch, context, par, layout, new, compute_dtype=compute_dtype or None,
                       topology=topology or None)
    need = budget["hbm_needed_per_chip_bytes"]
    if require_fit and need > spec.hbm_capacity_bytes:
        raise CapacityError(_fit_message(budget, need, spec))

    def simulate(cal: bool) -> Any:
        return simulate_2d(cfg, spec, batch, context, par, budget["layout"], new_tokens=new, trace=trace and not cal,
                           calibrated=cal, topology=topology or None)

    sim = simulate(False)
    summary = sim.summary()
    extra: dict[str, Any] = {"budget": budget, **summary, "vs_lower_bound": summary["step_time_s"] /
                             budget["lower_bound_s"], "t_comm_1d_s": budget["t_comm_1d_s"]}
    if price:
        extra.update(step_cost(price, par.chips, summary["step_time_s"], batch * new, "price_per_chip_hour"))
    if calibrated:
        extra["calibrated_step_time_s"] = simulate(True).env.now
    return Result(scenario="transformer_step", params=params, metrics=sim.system.metrics(), extra=extra,
                  trace=sim.system.trace, headline=_headline(params["mode"], cfg.name, summary, budget))


def _model(model: str, config: str) -> Any:
    """The preset ``model``, or the config file ``config`` (.json: Hugging Face; else TOML) when given."""
    if not config:
        return get_model(model)
    return load_hf_config(config) if str(config).endswith(".json") else load_config_file(config)


def _train(cfg: Any, spec: ChipSpec, batch: int, seq: int, mesh: str, recompute: bool, require_fit: bool,
           calibrated: bool, microbatches: int, schedule: str, checkpoints: str, topology: str, price: float,
           trace: bool, exact: bool = False) -> Result:
    """A training step on any plan (`simulator.workloads.plans`)."""
    checkpoint: str | int = checkpoints or ("full" if recompute else "none")
    if checkpoint not in POLICIES:
        checkpoint = int(checkpoint) if str(checkpoint).isdigit() else checkpoint
    opts = TrainOptions(microbatches=microbatches, schedule=schedule, checkpoint=checkpoint)
    plan = parse_plan_mesh(mesh)
    check_train_plan(cfg, plan, opts, batch, seq)
    closed = train_memory(cfg, spec, plan, opts, batch, seq)  # the fit, before building anything
    need = closed["memory_per_chip_bytes"]
    if require_fit and not closed["fits"]:
        gib = 2**30
        raise CapacityError(f"{cfg.name} needs {need / gib:.2f} GiB per chip but {spec.name} has "
                            f"{spec.hbm_capacity_bytes / gib:.2f} GiB ({(need - spec.hbm_capacity_bytes) / gib:.2f} "
                            f"GiB over); shard with fsdp, add chips, or checkpoint (set checkpoints_per_layer=full), "
                            "or set require_fit=false to time it anyway")
    out = train_plan(cfg, spec, batch, seq, plan, opts, topology or None, trace=trace, calibrated=calibrated,
                     price_per_chip_hour=price or None, fast=not exact)
    system = out.pop("_system")
    metrics = getattr(system, "step_metrics", None) or system.metrics()  # computed once, by the step
    lower = out["model_flops_per_step"] / (plan.chips * spec.peak_flops_per_s())  # every chip at peak, no waste
    budget = {**{k: v for k, v in out.items() if k not in ("step_time_s",)}, "lower_bound_s": lower,
              "memory_per_chip_bytes": need}
    summary = {k: out[k] for k in ("step_time_s", "busy_fraction", "busiest_link_fraction", "simulated_bytes",
                                    "overlap_s", "bubble_fraction", "exposed_comm_s", "mfu", "tokens_per_s")}
    extra: dict[str, Any] = {"budget": budget, **summary, "closed_form_s": out["closed_form_s"],
                             "vs_lower_bound": out["step_time_s"] / lower, "topology": out["topology"],
                             "placement": out["placement"]}
    for key in ("cost_per_step_usd", "cost_per_million_tokens_usd"):
        if key in out:
            extra[key] = out[key]
    if calibrated and spec.name in train_calibrated_chips():  # issue 20: the whole step fitted to published TPU runs
        extra["calibrated_step"] = calibrated_train_step(cfg, spec, plan, opts, batch, seq,
                                                         slice_shape_for(topology or None, plan), check_memory=False)
    return Result(
        scenario="transformer_step",
        params=dict(model=cfg.name, mode="train", batch=batch, seq=seq, mesh=mesh, recompute=recompute,
                    calibrated=calibrated, chip=spec.name, microbatches=microbatches, schedule=schedule,
                    checkpoints_per_layer=str(checkpoint), topology=topology, exact=exact),
        metrics=metrics, extra=extra, trace=system.trace,
        headline=_headline("train", cfg.name, summary, budget),
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
