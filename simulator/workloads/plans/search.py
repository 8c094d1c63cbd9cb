"""Plan search (`podsim plan`): every legal layout of a model on N chips, priced, ranked, the best simulated.

Training candidates are the ways to write N as data x pipeline x fsdp x expert x sequence x model whose
sizes divide the model (heads, MLP width, layers, experts), the batch and the sequence; each runs the
1F1B schedule with 4 microbatches per stage where the batch allows it, ZeRO-3 on fsdp, and no activation
checkpointing -- or full checkpointing when that is what it takes to fit. Decode and prefill candidates
are data x model with the KV cache sharded automatically (`budget.kv_share_per_chip`). Every candidate is
priced by closed form; those that fit are ranked by step time, and the best K are simulated (on
``workers`` processes with joblib; one runs them in turn).
"""
from __future__ import annotations

from typing import Any

from simulator.errors import PodsimError
from simulator.hardware.specs import ChipSpec
from simulator.workloads.plans.layout import AXES, MeshPlan, PlanError, TrainOptions, check_train_plan, divisors
from topologies import TopologyError

MAX_CANDIDATES = 5000  #: layouts priced per search; more is a chip count no topology podsim builds has


def factorizations(n: int, k: int) -> list[tuple[int, ...]]:
    """Ordered k-tuples of positive integers whose product is n."""
    if k == 1:
        return [(n,)]
    return [(d, *rest) for d in divisors(n) for rest in factorizations(n // d, k - 1)]


def train_candidates(cfg: Any, chips: int, batch: int, seq: int) -> list[tuple[MeshPlan, TrainOptions]]:
    """Legal training layouts of ``chips`` chips, with their default options."""
    out = []
    for sizes in factorizations(chips, len(AXES)):
        plan = MeshPlan({a: s for a, s in zip(AXES, sizes, strict=True) if s > 1})
        opts = _options(plan, batch)
        try:
            check_train_plan(cfg, plan, opts, batch, seq)
        except PlanError:
            continue
        out.append((plan, opts))
        if len(out) > MAX_CANDIDATES:
            raise PodsimError(f"more than {MAX_CANDIDATES} layouts of {chips} chips; use fewer chips")
    return out


def _options(plan: MeshPlan, batch: int) -> TrainOptions:
    p = plan.size("pipeline")
    per_group = max(1, batch // plan.batch_ways)
    m = max((d for d in divisors(per_group) if d <= 4 * p), default=1) if p > 1 else 1
    return TrainOptions(microbatches=m, schedule="1f1b")


def price_train(cfg: Any, chip: ChipSpec, batch: int, seq: int, plan: MeshPlan, opts: TrainOptions,
                topology: str | None) -> tuple[dict[str, Any], TrainOptions] | None:
    """Closed-form row of one layout and its options (full checkpointing if that is what fits); None if the
    mesh cannot be laid on the topology."""
    from dataclasses import replace

    from simulator.workloads.plans.train import train_plan

    try:
        out = train_plan(cfg, chip, batch, seq, plan, opts, topology, simulate=False, trace=False)
        if not out["fits"]:
            opts = replace(opts, checkpoint="full")
            out = train_plan(cfg, chip, batch, seq, plan, opts, topology, simulate=False, trace=False)
    except (PodsimError, TopologyError):  # the mesh cannot be laid on the topology's axes
        return None
    return _row(out, plan, opts, simulated=False), opts


def _row(out: dict[str, Any], plan: MeshPlan, opts: Any, simulated: bool) -> dict[str, Any]:
    row = {"mesh": {a: plan.size(a) for a in plan.used} or {"data": 1}, "step_time_s": out["step_time_s"],
           "closed_form_s": out.get("closed_form_s", out["step_time_s"]), "mfu": out["mfu"],
           "memory_per_chip_bytes": out["memory_per_chip_bytes"], "fits": out["fits"], "simulated": simulated,
           "exposed_comm_s": out.get("exposed_comm_s", {}), "tokens_per_s": out["tokens_per_s"]}
    if isinstance(opts, TrainOptions):
        row["options"] = {"microbatches": opts.microbatches, "schedule": opts.schedule, "zero": opts.zero,
                          "checkpoint": opts.checkpoint}
    else:
        row["options"] = {"kv_sharding": opts}
    return row


def serve_candidates(cfg: Any, chips: int, batch: int) -> list[MeshPlan]:
    """data x model layouts for decode and prefill (model dividing the heads, data the batch)."""
    from simulator.workloads.plans.layout import check_model_axes

    out = []
    for data, model in factorizations(chips, 2):
        plan = MeshPlan({a: s for a, s in (("data", data), ("model", model)) if s > 1})
        try:
            check_model_axes(cfg, plan)
        except PlanError:
            continue
        if batch % data == 0:
            out.append(plan)
    return out


def price_serve(cfg: Any, chip: ChipSpec, batch: int, seq: int, plan: MeshPlan, mode: str,
                simulate: bool) -> dict[str, Any]:
    """One decode (``seq`` cached positions) or prefill (``seq`` new tokens) layout, KV sharded automatically."""
    from simulator.workloads.budget import Parallelism, decode_budget
    from simulator.workloads.simulate import simulate_decode

    par = Parallelism(plan.size("data"), plan.size("model"))
    context, new = (seq, 1) if mode == "decode" else (0, seq)
    b = decode_budget(cfg, chip, batch, context, par, new_tokens=new, kv_sharding="auto")
    step = b["lower_bound_s"]
    if simulate:
        step = simulate_decode(cfg, chip, batch, context, par, new_tokens=new, trace=False, kv_sharding="auto").env.now
    out = {"step_time_s": step, "closed_form_s": b["lower_bound_s"], "memory_per_chip_bytes":
           b["hbm_needed_per_chip_bytes"], "fits": b["fits"], "tokens_per_s": batch * new / step,
           "mfu": b["flops_per_step"] / (par.chips * chip.peak_flops_per_s(b["compute_dtype"]) * step)}
    return _row(out, plan, b["kv_sharding"], simulated=simulate)


def search(cfg: Any, chip: ChipSpec, chips: int, mode: str, batch: int, seq: int, top: int = 3,
           workers: int = 1, topology: str | None = None) -> dict[str, Any]:
    """Every candidate priced; the fitting ones ranked by step time, the best ``top`` simulated."""
    if mode == "train":
        rows = [(r, p, o) for p, opts in train_candidates(cfg, chips, batch, seq)
                for r, o in [price_train(cfg, chip, batch, seq, p, opts, topology) or (None, None)] if r is not None]
    else:
        rows = [(price_serve(cfg, chip, batch, seq, p, mode, False), p, None)
                for p in serve_candidates(cfg, chips, batch)]
    if not rows:
        raise PodsimError(f"no layout of {chips} chips divides {cfg.name}, batch {batch} and seq {seq}; try a batch "
                          "that is a multiple of the chip count")
    rows.sort(key=lambda t: (not t[0]["fits"], t[0]["step_time_s"]))
    best = [t for t in rows[:top] if t[0]["fits"]]
    simulated = _simulate(cfg, chip, mode, batch, seq, best, workers, topology)
    plans = simulated + [r for r, _, _ in rows[len(simulated):]]
    plans[:len(simulated)] = sorted(plans[:len(simulated)], key=lambda r: r["step_time_s"])
    return {"model": cfg.name, "chip": chip.name, "chips": chips, "mode": mode, "batch": batch, "seq": seq,
            "candidates": len(plans), "fitting": sum(r["fits"] for r in plans), "plans": plans}


def _simulate(cfg: Any, chip: ChipSpec, mode: str, batch: int, seq: int, best: list, workers: int,
              topology: str | None) -> list[dict[str, Any]]:
    jobs = [(cfg, chip, mode, batch, seq, plan, opts, topology) for _, plan, opts in best]
    if workers <= 1 or len(jobs) <= 1:
        return [simulate_one(*job) for job in jobs]
    from joblib import Parallel, delayed

    return Parallel(n_jobs=workers)(delayed(simulate_one)(*job) for job in jobs)


def simulate_one(cfg: Any, chip: ChipSpec, mode: str, batch: int, seq: int, plan: MeshPlan, opts: Any,
                 topology: str | None) -> dict[str, Any]:
    """The simulated row of one layout (run in a worker process when there are several)."""
    if mode != "train":
        return price_serve(cfg, chip, batch, seq, plan, mode, True)
    from simulator.workloads.plans.train import train_plan

    out = train_plan(cfg, chip, batch, seq, plan, opts, topology, simulate=True, trace=False)
    out.pop("_system", None)
    return _row(out, plan, opts, simulated=True)

