"""Plan search (`podsim plan`): every legal layout of a model on N chips and every way to run it, priced,
ranked, the best simulated.

Training: a layout is a way to write N as data x pipeline x fsdp x expert x sequence x model whose
sizes divide the model (heads, MLP width, layers, experts), the batch and the sequence. Each layout is
tried under every option set that changes something on it -- the pipeline schedule (GPipe, 1F1B, and
interleaved with v virtual stages, v > 1 dividing the stage's layers, up to `MAX_VIRTUAL_STAGES`),
microbatches (every divisor of the sequences a data-parallel group holds; a multiple of the stages
when interleaved), the ZeRO stage on fsdp (1, 2, 3), tensor-parallel overlap (collective matmul) on a
model axis -- and, for each, the fastest checkpoint policy that fits (none, then minimal, which keeps every
matmul output and recomputes only element-wise work, then selective, then full: each recomputes at least as
much as the one before; when none fits the row is full's). Options that cannot matter are not varied (a
schedule without a pipeline axis, ZeRO without fsdp, overlap without a model axis), and a row reports
``zero: null`` where the plan has no fsdp axis (the stage shards nothing there). Every
option set is priced by closed form (`price.Pricer`: the mesh laid out once); a layout's row is its
fastest fitting option set (or, when none fits, the one needing least memory). Decode and prefill
candidates are data x model, each as the 1-D layout with the KV cache sharded automatically
(`budget.kv_share_per_chip`) and as every 2-D weight-stationary grid of the model axis (`layout2d`).

The layouts are ranked by closed-form step time (fitting ones first; among those, layouts laid on a real
slice shape of the chip before those only the mesh's own shape holds, ``real_slice``: no such slice is
built, and simulating one, e.g. slice:128x2 on 256 v5p, is the slowest) and the best K simulated (on
``workers`` processes with joblib; one runs them in turn). What is kept off the critical path: one
graph per topology spec, one placement per mesh, and each row's closed form; the simulations are the
cost (seconds each at pod scale), so only the K best run.
"""
from __future__ import annotations

from dataclasses import fields, replace
from typing import TYPE_CHECKING, Any

from simulator.engine.watch import count_steps
from simulator.errors import PodsimError
from simulator.hardware.specs import ChipSpec
from simulator.workloads.plans.layout import AXES, MeshPlan, PlanError, TrainOptions, check_model_axes, divisors
from topologies import TopologyError

if TYPE_CHECKING:  # annotations only
    from simulator.workloads.budget import Parallelism
    from simulator.workloads.transformer import TransformerConfig

MAX_CANDIDATES = 5000  #: layouts priced per search; more is a chip count no topology podsim builds has
MAX_VIRTUAL_STAGES = 8  #: interleaved schedules tried with 2..8 layer chunks per device
CHECKPOINTS = ("none", "minimal", "selective", "full")  #: by recomputation, least first; full saves the most


def factorizations(n: int, k: int) -> list[tuple[int, ...]]:
    """Ordered k-tuples of positive integers whose product is n."""
    if k == 1:
        return [(n,)]
    return [(d, *rest) for d in divisors(n) for rest in factorizations(n // d, k - 1)]


def train_meshes(cfg: TransformerConfig, chips: int, batch: int, seq: int) -> list[MeshPlan]:
    """Training layouts of ``chips`` chips that divide the model, the batch and the sequence."""
    out = []
    for sizes in factorizations(chips, len(AXES)):
        plan = MeshPlan({a: s for a, s in zip(AXES, sizes, strict=True) if s > 1})
        try:
            check_model_axes(cfg, plan)
        except PlanError:
            continue
        if batch % plan.batch_ways or seq % plan.size("sequence"):
            continue
        out.append(plan)
        if len(out) > MAX_CANDIDATES:
            raise PodsimError(f"more than {MAX_CANDIDATES} layouts of {chips} chips; use fewer chips")
    return out


def option_sets(cfg: TransformerConfig, plan: MeshPlan, batch: int) -> list[TrainOptions]:
    """Every option set that changes something on ``plan`` (checkpoint policy left at none)."""
    p, per_group = plan.size("pipeline"), batch // plan.batch_ways
    schedules = [("1f1b", 2)]
    if p > 1:
        schedules = [("gpipe", 2), ("1f1b", 2)] + [("interleaved", v) for v in divisors(cfg.n_layers // p)
                                                   if 1 < v <= MAX_VIRTUAL_STAGES]
    zeros = (1, 2, 3) if plan.size("fsdp") > 1 else (3,)
    overlaps = (False, True) if plan.size("model") > 1 else (False,)
    out = []
    for schedule, v in schedules:
        for m in divisors(per_group):
            if schedule == "interleaved" and m % p:
                continue
            out += [TrainOptions(microbatches=m, schedule=schedule, virtual_stages=v, zero=z, tp_overlap=o)
                    for z in zeros for o in overlaps]
    return out


def best_options(pricer: Any, plan: MeshPlan) -> tuple[dict[str, Any], TrainOptions, int] | None:
    """(closed-form row, options, option sets priced) of the layout's fastest fitting option set -- or the
    one needing least memory when none fits; None when the mesh cannot be laid on the topology."""
    layout = pricer.layout(plan)
    if layout is None:
        return None
    best: tuple[tuple, dict[str, Any], TrainOptions] | None = None
    priced = 0
    for opts in option_sets(pricer.cfg, plan, pricer.batch):
        for checkpoint in CHECKPOINTS:
            trial = replace(opts, checkpoint=checkpoint)
            try:
                row = pricer.price(plan, trial, layout)
            except PlanError:
                break
            priced += 1
            if row["fits"]:
                break
        else:
            pass
        key = (0, row["step_time_s"], row["memory_per_chip_bytes"]) if row["fits"] else \
            (1, row["memory_per_chip_bytes"], row["step_time_s"])
        if best is None or key < best[0]:
            best = (key, row, trial)
    if best is None:
        return None
    return best[1], best[2], priced


def options_of(opts: TrainOptions, plan: MeshPlan | None = None) -> dict[str, Any]:
    """The options a plan row reports; ``zero`` is None (not applicable) when ``plan`` has no fsdp axis."""
    zero = opts.zero if plan is None or plan.size("fsdp") > 1 else None
    out = {"microbatches": opts.microbatches, "schedule": opts.schedule, "zero": zero,
           "checkpoint": opts.checkpoint, "tp_overlap": opts.tp_overlap}
    if opts.schedule == "interleaved":
        out["virtual_stages"] = opts.virtual_stages
    return out


def train_options(options: TrainOptions | dict[str, Any]) -> TrainOptions:
    """A row's ``options`` (`options_of`) as the `TrainOptions` it reports; ``zero: null`` (no fsdp axis, where
    the stage shards nothing) reads as the default. A `TrainOptions` is returned as is; an unknown key raises."""
    if isinstance(options, TrainOptions):
        return options
    known = {f.name for f in fields(TrainOptions)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise PlanError(f"options: unknown key(s) {', '.join(map(repr, unknown))}; valid: {', '.join(sorted(known))}")
    return TrainOptions(**{k: v for k, v in options.items() if v is not None})


def _row(out: dict[str, Any], plan: MeshPlan, opts: Any, simulated: bool) -> dict[str, Any]:
    row = {"mesh": {a: plan.size(a) for a in plan.used} or {"data": 1}, "step_time_s": out["step_time_s"],
           "closed_form_s": out.get("closed_form_s", out["step_time_s"]), "mfu": out["mfu"],
           "memory_per_chip_bytes": out["memory_per_chip_bytes"], "fits": out["fits"], "simulated": simulated,
           "memory_peak_bytes": out.get("memory_peak_bytes", out["memory_per_chip_bytes"]),
           "exposed_comm_s": out.get("exposed_comm_s", {}), "tokens_per_s": out["tokens_per_s"]}
    row["options"] = options_of(opts, plan) if isinstance(opts, TrainOptions) else dict(opts)
    if "topology" in out:
        row["topology"] = out["topology"]
    return row


def real_slice(topology: str | None, chip: ChipSpec) -> bool:
    """False only for a TPU ``slice:AxB..`` that is no real slice shape of the chip (`topologies.shapes`): the
    fallback a mesh gets when no real slice holds its axes. Anything else (a given spec, a GPU's switch) is True."""
    from topologies.shapes import slice_shapes

    if not topology or not topology.startswith("slice:") or chip.wraparound not in ("length16", "multiple4"):
        return True
    sides = [int(v) for v in topology.removeprefix("slice:").split("x") if v.isdigit()]
    n = 1
    for v in sides:
        n *= v
    shapes = {tuple(sorted(v for v in s if v > 1)) for s in slice_shapes(n, chip.wraparound)}
    return tuple(sorted(v for v in sides if v > 1)) in shapes or n == 1


def serve_candidates(cfg: TransformerConfig, chips: int, batch: int) -> list[tuple[MeshPlan, str]]:
    """data x model layouts for decode and prefill: the 1-D layout (model dividing the heads, data the batch)
    and every 2-D weight-stationary grid of the model axis (`layout2d.valid_grids`; X = 1 is Pope's 1-D
    weight-stationary layout)."""
    from simulator.workloads.layout2d import valid_grids

    out = []
    for data, model in factorizations(chips, 2):
        if batch % data:
            continue
        plan = MeshPlan({a: s for a, s in (("data", data), ("model", model)) if s > 1})
        try:
            check_model_axes(cfg, plan)
            out.append((plan, "1d"))
        except PlanError:
            pass
        if model > 1 and not cfg.n_experts:
            out += [(plan, f"2d:{x}x{y}") for x, y in valid_grids(cfg, model, batch // data)]
    return out


def price_serve(cfg: TransformerConfig, chip: ChipSpec, batch: int, seq: int, plan: MeshPlan, mode: str,
                simulate: bool, topology: str | None = None, layout: str = "1d") -> dict[str, Any] | None:
    """One decode (``seq`` cached positions) or prefill (``seq`` new tokens) layout: 1-D with the KV cache
    sharded automatically, or a 2-D grid. The closed form is compute-or-memory plus the collectives (which
    the simulated step runs between ops); None when a 2-D grid cannot be laid on the topology."""
    from simulator.workloads.budget import Parallelism, decode_budget

    par = Parallelism(plan.size("data"), plan.size("model"))
    context, new = (seq, 1) if mode == "decode" else (0, seq)
    if layout != "1d":
        return _price_2d(cfg, chip, batch, context, new, plan, par, simulate, topology, layout)
    from simulator.workloads.layout2d import comm_1d_s
    from simulator.workloads.simulate import simulate_decode

    b = decode_budget(cfg, chip, batch, context, par, new_tokens=new, kv_sharding="auto")
    try:
        comm = comm_1d_s(cfg, chip, par.data, par.model, batch // par.data * new, topology)[0]
    except (PodsimError, TopologyError):
        return None
    closed = b["lower_bound_s"] + comm
    step = closed
    if simulate:
        step = simulate_decode(cfg, chip, batch, context, par, new_tokens=new, trace=False, kv_sharding="auto",
                               topology=topology).env.now
    out = {"step_time_s": step, "closed_form_s": closed, "memory_per_chip_bytes": b["hbm_needed_per_chip_bytes"],
           "fits": b["fits"], "tokens_per_s": batch * new / step, "exposed_comm_s": {"model": comm} if comm else {},
           "mfu": b["flops_per_step"] / (par.chips * chip.peak_flops_per_s(b["compute_dtype"]) * step)}
    return _row(out, plan, {"layout": "1d", "kv_sharding": b["kv_sharding"]}, simulated=simulate)


def _price_2d(cfg: TransformerConfig, chip: ChipSpec, batch: int, context: int, new: int, plan: MeshPlan,
              par: Parallelism,
              simulate: bool, topology: str | None, layout: str) -> dict[str, Any] | None:
    from simulator.workloads.layout2d import budget_2d
    from simulator.workloads.simulate2d import simulate_2d
    from simulator.workloads.transformer import ModelError

    try:
        b = budget_2d(cfg, chip, batch, context, par, layout, new, topology=topology)
    except (ModelError, TopologyError):
        return None
    step = b["upper_bound_s"]
    if simulate:
        step = simulate_2d(cfg, chip, batch, context, par, layout, new_tokens=new, trace=False,
                           topology=topology).env.now
    out = {"step_time_s": step, "closed_form_s": b["upper_bound_s"], "memory_per_chip_bytes":
           b["hbm_needed_per_chip_bytes"], "fits": b["fits"], "tokens_per_s": batch * new / step,
           "exposed_comm_s": {"x+y": b["t_comm_s"]},
           "mfu": b["flops_per_step"] / (par.chips * chip.peak_flops_per_s(b["compute_dtype"]) * step)}
    return _row(out, plan, {"layout": b["layout"], "kv_sharding": b["kv_sharding"]}, simulated=simulate)


def search(cfg: TransformerConfig, chip: ChipSpec, chips: int, mode: str, batch: int, seq: int, top: int = 3,
           workers: int = 1, topology: str | None = None, calibrated: bool = False,
           client: Any = None) -> dict[str, Any]:
    """Every layout and option set priced; the layouts ranked by step time (fitting first), the best ``top``
    simulated. ``candidates`` counts the (layout, options) pairs priced, ``layouts`` the rows.

    ``calibrated`` (training): every row also carries its calibrated forecast (`forecast.forecast`), and the
    layouts rank by it, the bound beside it. ``client``: a `distributed.Client` whose cluster simulates the
    finalists (in place of ``workers`` local processes)."""
    if calibrated:
        from simulator.workloads.plans.forecast import check_calibrated_chip

        if mode != "train":
            raise PodsimError(f"--calibrated ranks training layouts by the calibrated step; --mode {mode} has no "
                              "calibrated plan search (drop --calibrated)")
        check_calibrated_chip(chip)
    priced = 0
    if mode == "train":
        from simulator.workloads.plans.price import Pricer

        pricer = Pricer(cfg, chip, batch, seq, topology)
        rows: list[tuple[dict[str, Any], MeshPlan, Any]] = []
        meshes = train_meshes(cfg, chips, batch, seq)
        for i, plan in enumerate(meshes, 1):
            found = best_options(pricer, plan)
            count_steps("layouts priced", i, len(meshes))
            if found is not None:
                out, opts, n = found
                priced += n
                rows.append((_row(out, plan, opts, simulated=False), plan, opts))
                rows[-1][0]["options_priced"] = n
                if topology is None:
                    rows[-1][0]["real_slice"] = real_slice(out.get("topology"), chip)
    else:
        priced_rows = [(price_serve(cfg, chip, batch, seq, p, mode, False, topology, lay), p, lay)
                       for p, lay in serve_candidates(cfg, chips, batch)]
        rows = [(r, p, lay) for r, p, lay in priced_rows if r is not None]
        priced = len(priced_rows)
    if not rows:
        raise PodsimError(f"no layout of {chips} chips divides {cfg.name}, batch {batch} and seq {seq}; try a batch "
                          "that is a multiple of the chip count")
    if calibrated:
        from simulator.workloads.plans.forecast import forecast, rank_key

        for row, plan, opts in rows:
            row.update(forecast(cfg, chip, batch, seq, plan, opts, topology) if row["fits"] else
                       {"calibrated_step_time_s": None, "calibrated_mfu": None})
        rows.sort(key=lambda t: rank_key(t[0]))
    else:
        rows.sort(key=lambda t: (not t[0]["fits"], not t[0].get("real_slice", True), t[0]["step_time_s"]))
    best = [t for t in rows[:top] if t[0]["fits"]]
    simulated = _simulate(cfg, chip, mode, batch, seq, best, workers, topology, client)
    for row, (closed, _, _) in zip(simulated, best, strict=True):
        for key in ("options_priced", "real_slice", "calibrated_step_time_s", "calibrated_mfu", "calibrated_note"):
            if key in closed:
                row[key] = closed[key]
    plans = simulated + [r for r, _, _ in rows[len(simulated):]]
    plans[:len(simulated)] = sorted(plans[:len(simulated)], key=rank_key if calibrated else
                                    lambda r: (not r["fits"], r["step_time_s"]))
    return {"model": cfg.name, "chip": chip.name, "chips": chips, "mode": mode, "batch": batch, "seq": seq,
            "candidates": priced, "layouts": len(plans), "fitting": sum(r["fits"] for r in plans),
            "finalists_simulated": len(simulated), "ranked_by": "calibrated forecast" if calibrated else "bound",
            "plans": plans}


def _simulate(cfg: TransformerConfig, chip: ChipSpec, mode: str, batch: int, seq: int, best: list, workers: int,
              topology: str | None, client: Any = None) -> list[dict[str, Any]]:
    jobs = [(cfg, chip, mode, batch, seq, plan, opts, topology) for _, plan, opts in best]
    count_steps("finalists simulated", 0, len(jobs))
    if client is not None and jobs:
        from simulator.workloads.plans.on_dask import simulate_on_dask

        return simulate_on_dask(client, simulate_one, jobs)
    if workers <= 1 or len(jobs) <= 1:
        done: Any = (simulate_one(*job) for job in jobs)
    else:
        from joblib import Parallel, delayed

        done = Parallel(n_jobs=min(workers, len(jobs)), return_as="generator")(
            delayed(simulate_one)(*job) for job in jobs)
    rows = []
    for row in done:  # (in the jobs' order)
        rows.append(row)
        count_steps("finalists simulated", len(rows), len(jobs))
    return rows


def simulate_one(cfg: TransformerConfig, chip: ChipSpec, mode: str, batch: int, seq: int, plan: MeshPlan | dict[str,
                 int],
                 opts: Any, topology: str | None) -> dict[str, Any]:
    """The simulated row of one layout (run in a worker process when there are several); ``simulation_cpu_s``
    is the CPU time the simulation took in its process. A search row's own ``mesh`` and ``options`` dicts may
    stand for ``plan`` and ``opts`` (`train_options`; a serving row's options name its ``layout``)."""
    import time

    start = time.process_time()
    plan = plan if isinstance(plan, MeshPlan) else MeshPlan({a: int(s) for a, s in plan.items() if s > 1})
    if isinstance(opts, dict):
        opts = train_options(opts) if mode == "train" else opts.get("layout", "1d")
    if mode != "train":
        row = price_serve(cfg, chip, batch, seq, plan, mode, True, topology, opts)
    else:
        from simulator.workloads.plans.train import train_plan

        out = train_plan(cfg, chip, batch, seq, plan, opts, topology, simulate=True, trace=False)
        out.pop("_system", None)
        row = _row(out, plan, opts, simulated=True)
    assert row is not None  # a layout the search priced prices again
    row["simulation_cpu_s"] = time.process_time() - start
    return row
