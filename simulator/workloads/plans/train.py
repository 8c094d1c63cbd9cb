"""One training step under a plan, as the numbers a user asks for: memory, closed form, simulation, cost.

`train_plan` returns a flat dict (the `podsim model --mode train` JSON): the whole model's state
(``params_bytes`` ... ``train_state_bytes``), the busiest chip's memory (``memory_per_chip_bytes``,
``fits``, ``min_chips``), the step time (simulated when asked, else the closed form) with the closed
form beside it, ``mfu`` (model FLOPs without recomputation or padding / chips x peak x step),
``tokens_per_s``, ``bubble_fraction``, ``exposed_comm_s`` per mesh axis, the book's critical per-chip
batches for this mesh (``critical_batch_per_chip``: 0.0 / None where the batch cancels, with
``critical_batch_notes``, and the book's alpha, M_X and M_Y behind them in ``critical_batch_axes``), and
the cost when a price per chip-hour is given.
A simulated step adds the busiest chip's HBM peak and timeline (``simulated_memory_peak_bytes``,
``memory_timeline``: [seconds, bytes]) beside the closed-form ``memory_per_chip_bytes``. The verdict
(``memory_peak_bytes``, ``fits``, ``hbm_spare_bytes``; `memory_verdict`) reads the simulated peak where there
is one, the closed form otherwise.
"""
from __future__ import annotations

import math
from typing import Any

from simulator.engine.faults import current_plan
from simulator.hardware.specs import ChipSpec
from simulator.workloads import critical
from simulator.workloads.plans.estimate import train_estimate
from simulator.workloads.plans.layout import MeshPlan, PlanError, TrainOptions, check_train_plan
from simulator.workloads.plans.links import AxisLink, axis_links, build_layout, build_system, p2p_s
from simulator.workloads.plans.memory import book_fsdp_model, book_memory, stage_params, train_memory
from simulator.workloads.plans.ops import head_work, layer_work
from simulator.workloads.projection import step_cost
from simulator.workloads.transformer import TransformerConfig


def model_flops(cfg: TransformerConfig, batch: int, seq: int) -> float:
    """Useful FLOPs of one step: 3 x the forward's (matmuls and causal attention), no recomputation."""
    pairs = batch * seq * (seq + 1) / 2
    forward = 2 * cfg.matmul_params_per_token() * batch * seq + 4 * cfg.n_layers * cfg.q_width * pairs
    return 3 * forward


def palm_flops(cfg: TransformerConfig, batch: int, seq: int) -> float:
    """PaLM's model FLOPs of one step (Chowdhery et al. 2022, appendix B, where MFU is defined): (6 N + 12 L H Q T)
    per token, N every parameter, H heads of Q dims (``q_width`` = H Q), T the sequence -- attention counted without
    the causal half, so long sequences count more than `model_flops` does."""
    return (6 * cfg.params() + 12 * cfg.n_layers * cfg.q_width * seq) * batch * seq


def critical_batches(chip: ChipSpec, links: dict[str, AxisLink], d_ff: int, d_model: int = 0,
                     model_ways: int = 1) -> tuple[dict[str, float | None], dict[str, str]]:
    """The book's per-chip batch (tokens) above which each strategy on this mesh is compute-bound, and notes
    (`simulator.workloads.critical`): data parallelism and FSDP at C / W (W: what a chip moves per second
    along the axis, both ways, over every physical axis under it), tensor parallelism at any batch or none
    (F / Y against C / W), FSDP + tensor parallelism at (C / W_fsdp)(C / W_model) / F (the book's current
    alpha^2 / (M_X M_Y F); its older edition's 4x that is in the note),
    and 2-D weight-stationary inference over the model axis at any batch or none."""
    c = chip.peak_flops_per_s()
    out: dict[str, float | None] = {axis: critical.weight_traffic(c, links[axis].bandwidth_bytes_per_s)
                                    for axis in ("data", "fsdp") if axis in links}
    notes: dict[str, str] = {}
    if "model" in links:
        w_model = links["model"].bandwidth_bytes_per_s
        out["model"], notes["model"] = critical.tensor(c, w_model, d_ff, model_ways)
        if "fsdp" in links:
            w_fsdp = links["fsdp"].bandwidth_bytes_per_s
            out["fsdp+model"] = critical.fsdp_tensor(c, w_fsdp, w_model, d_ff)
            older = critical.fsdp_tensor_older_edition(c, w_fsdp, w_model, d_ff)
            notes["fsdp+model"] = (f"the book's current edition: alpha^2 / (M_X M_Y F) = {out['fsdp+model']:,.0f} "
                                   "tokens per chip (T_math above the larger of the FSDP and tensor-parallel "
                                   f"terms); its older edition summed the two terms: 4 alpha^2 / (F M_X M_Y) = "
                                   f"{older:,.0f}")
        if d_model:
            out["2d_weight_stationary"], notes["2d_weight_stationary"], _ = critical.weight_stationary_2d(
                c, w_model, d_model, d_ff, model_ways)
    return out, notes


def book_bubble_fraction(stages: int, microbatches: int, chunks: int = 1) -> float:
    """The book's pipeline bubble with equal stages: (p - 1) / (M + p - 1) of the step idle (3/19 for p = 4,
    M = 16); with ``chunks`` layer chunks per device (interleaved), (p - 1) / (v M + p - 1). podsim's
    ``bubble_fraction`` prices the real, uneven stages (the embedding and head on the end stages)."""
    return (stages - 1) / (chunks * microbatches + stages - 1)


def book_gpu_critical_batches(chip: ChipSpec, links: dict[str, AxisLink]) -> dict[str, float]:
    """The book's GPU rule (ch. gpus, "Data Parallelism") for the data and FSDP axes of a GPU mesh: C /
    W_collective tokens per GPU, W_collective the GPU's NVLink egress inside a node and the node's egress
    (GPUs of the node under the axis x one NIC each) across nodes: 990e12 / 450e9 = 2,200 and 990e12 / 400e9
    = 2,475 on H100; ``data_small_x`` (``fsdp_small_x``) is the book's refinement for few nodes, alpha (X - 1) /
    X over X nodes (1,237 for 2 H100 nodes). podsim's ``critical_batch_per_chip`` is C / W with W what a large
    AllGather over both levels achieves (the node and network rings one after the other): higher than the
    book's. Pure data parallelism and FSDP only (the book's case): nothing where the mesh has other axes."""
    if chip.wraparound != "switch" or set(links) - {"data", "fsdp"}:
        return {}
    out: dict[str, float] = {}
    for axis in ("data", "fsdp"):
        if axis in links:
            stages = sorted(links[axis].stages, key=lambda st: st.bandwidth_bytes_per_s)
            slow, inner = stages[0], stages[1:]
            w = slow.bandwidth_bytes_per_s * math.prod(st.length for st in inner)  # the node's egress
            if inner:
                w = min(w, min(st.bandwidth_bytes_per_s for st in inner))
            out[axis] = chip.peak_flops_per_s() / w
            if inner and slow.length > 1:  # "What happens when X is small?": the ring's (X - 1) / X over X nodes
                out[f"{axis}_small_x"] = out[axis] * (slow.length - 1) / slow.length
    return out


def book_gpu_outer_data_critical_batch(chip: ChipSpec, mesh: dict[str, int]) -> dict[str, float]:
    """The book's GPU rule for data parallelism OUTSIDE model sharding (ch. gpus, "Reductions when array is
    sharded over a separate axis" and quiz 5, Q2.3 and Q3): with data (and fsdp) the outermost axis over m =
    chips / (data x fsdp) GPUs of model sharding (model, pipeline, expert, sequence), the outer reduction's cost
    falls by the k = max(1, m / 8) nodes one model group spans, so the per-GPU batch that keeps it compute-bound
    is C / (W_node k): 990e12 / (400e9 x 2) = 1,237 for 16-way model sharding (Megatron's 70B), 309 for 64-way
    (its 314B; 8-way TP x 8-way PP). ``data_outside_model`` and ``model_nodes_spanned``; empty unless a GPU
    (switch) mesh with data or fsdp > 1 and model sharding > 1. A bound: the book's rule, perfect overlap."""
    from simulator.hardware.facts import GPUS_PER_NODE

    outer = mesh.get("data", 1) * mesh.get("fsdp", 1)
    chips = math.prod(mesh.values()) if mesh else 1
    inner = chips // outer
    if chip.wraparound != "switch" or outer == 1 or inner == 1:
        return {}
    nodes = max(1.0, inner / GPUS_PER_NODE)
    return {"data_outside_model": chip.peak_flops_per_s() / (GPUS_PER_NODE * chip.dcn_bandwidth_bytes_per_s * nodes),
            "model_nodes_spanned": nodes}


def train_plan(cfg: TransformerConfig, chip: ChipSpec, batch: int, seq: int, plan: MeshPlan,
               opts: TrainOptions | None = None, topology: str | None = None, simulate: bool = True,
               trace: bool = True, calibrated: bool = False,
               price_per_chip_hour: float | None = None, fast: bool = True) -> dict[str, Any]:
    """Every number of one training step (see the module docstring); ``simulate=False`` skips the run.
    ``fast`` simulates a symmetric step through one chip per pipeline stage (the same figures; False:
    every chip, `simulator.acceleration.step_symmetry`)."""
    from simulator.workloads.plans.step import simulate_step

    opts = opts or TrainOptions()
    check_train_plan(cfg, plan, opts, batch, seq, even_stages=simulate)  # the closed form takes uneven stages
    if simulate and not opts.reshard_after_forward:
        raise PlanError("--no-reshard-after-forward is priced by the closed forms only (the simulated step gathers "
                        "each layer's weights again for its backward); add --no-simulate")
    reuse = simulate and current_plan() is None  # (under a fault plan each system draws its own seed)
    system = None
    if simulate or current_plan() is not None:  # (a fault plan's system prepares the graph the closed forms read)
        system, mesh = build_system(chip, plan, topology, trace=trace if reuse else False,
                                    calibrated=reuse and calibrated)
        graph = system.graph
    else:  # the closed forms read the topology graph and the mesh only: no chips, channels or routing built
        graph, mesh = build_layout(chip, plan, topology)
    # the system's own network where there is one: the estimate's closed forms then share their phase profiles
    # with the simulated step's plans (`Network.priced`)
    links = axis_links(mesh, graph, chip, net=system.network if system is not None else None)
    layer = layer_work(cfg, chip, plan, opts, batch, seq)
    head_f, head_b, head_grad = head_work(cfg, chip, plan, opts, batch, seq)
    hop = _p2p(graph, mesh, plan, cfg, batch, seq, opts)
    dense, expert, _ = stage_params(cfg, plan, plan.size("pipeline") - 1)
    closed = train_estimate(chip, plan, opts, layer, cfg.n_layers, (head_f, head_b), links, hop, dense + expert,
                            head_grad, cfg.weight_elem_bytes)
    out: dict[str, Any] = {"model": cfg.name, "chip": chip.name, "mode": "train", "batch": batch, "seq": seq,
                           "mesh": {a: plan.size(a) for a in plan.used}, "chips": plan.chips,
                           **(mesh.describe() if mesh is not None else {"topology": None, "placement": {}}),  # one chip
                           "microbatches": opts.microbatches, "schedule": opts.schedule, "zero": opts.zero,
                           "checkpoint": opts.checkpoint, "tp_overlap": opts.tp_overlap}
    out.update(train_memory(cfg, chip, plan, opts, batch, seq))
    out["book_bubble_fraction"] = book_bubble_fraction(plan.size("pipeline"), opts.microbatches, opts.chunks)
    past = cfg.position_note(seq, f"seq={seq:,}")
    if past:
        out["notes"] = [past]
    out.update(closed_form_s=closed["step_time_s"], closed_form=closed, step_time_s=closed["step_time_s"],
               bubble_fraction=closed["bubble_fraction"], exposed_comm_s=closed["exposed_comm_s"],
               simulated=False, tokens_per_chip=batch * seq / plan.chips)
    out["critical_batch_per_chip"], notes = critical_batches(chip, links, cfg.d_ff, cfg.d_model, plan.size("model"))
    out["critical_batch_axes"] = critical.axis_terms(chip.peak_flops_per_s(), chip.ici_bandwidth_bytes_per_s,
                                                     {a: links[a].bandwidth_bytes_per_s for a in links})
    if notes:
        out["critical_batch_notes"] = notes
    book = {**book_gpu_critical_batches(chip, links),
            **book_gpu_outer_data_critical_batch(chip, {a: plan.size(a) for a in plan.used})}
    if book:
        out["critical_batch_per_chip_book"] = book
    if out["critical_batch_per_chip"].get("fsdp+model") is not None:  # the older edition's, beside the current one
        out["critical_batch_per_chip_older_edition"] = {"fsdp+model": 4 * out["critical_batch_per_chip"]["fsdp+model"]}
    out.update(book_train_figures(cfg, chip, opts.checkpoint, batch * seq, plan.chips))
    # the book's state per chip when only the model axes shard it (data replicates it; gpus quiz 5 Q2.3.1: 8-way
    # TP and pure DP keep 700 GB / 8 = 87.5 GB a GPU): bf16 weights and fp32 Adam over model x pipeline x expert
    model_ways = plan.chips // (plan.size("data") * plan.size("fsdp"))
    out["book_memory"]["state_per_chip_model_sharded_bytes"] = out["book_memory"]["state_bytes"] / model_ways
    if simulate:
        sim, measured = simulate_step(cfg, chip, plan, opts, batch, seq, topology, trace, calibrated, fast,
                                      (system, mesh) if reuse and system is not None else None)
        out.update(measured, simulated=True)
        out["_system"] = sim.system
        sim.system.step_metrics = sim.metrics  # the finished run's metrics, for callers that report them
    out.update(memory_verdict(out))
    flops = model_flops(cfg, batch, seq)
    step = out["step_time_s"]
    out.update(model_flops_per_step=flops, model_flops_per_token=flops / (batch * seq),  # ~6 N (+ attention)
               mfu=flops / (plan.chips * chip.peak_flops_per_s() * step),
               tokens_per_s=batch * seq / step)
    if price_per_chip_hour is not None:
        out.update(price_per_chip_hour_usd=price_per_chip_hour,
                   **step_cost(price_per_chip_hour, plan.chips, step, batch * seq))
    return out


def book_train_figures(cfg: TransformerConfig, chip: ChipSpec, checkpoint: str | int, tokens: float,
                       chips: int) -> dict[str, Any]:
    """The book's own accounting of a step of ``tokens`` tokens on ``chips`` chips, beside podsim's:
    ``book_memory`` (parameters, Adam state and checkpoints, no gradients or temporaries: `book_memory`) and
    ``book_fsdp_model`` (X_opt = sqrt(2 B N / F) and B / N: `book_fsdp_model`)."""
    return {"book_memory": book_memory(cfg, chip, checkpoint, tokens, chips),
            "book_fsdp_model": book_fsdp_model(cfg, tokens, chips)}


def memory_verdict(out: dict[str, Any]) -> dict[str, Any]:
    """The one memory verdict of a step: ``memory_peak_bytes`` -- the simulated peak where the step was simulated
    (the static state, ``memory_state_bytes``, plus the transient peak of activations, gathered weights and
    unreduced gradients), else the closed-form ``memory_per_chip_bytes`` -- and ``fits`` and ``hbm_spare_bytes``
    from it, so a "fits" never sits beside a simulated peak over capacity."""
    state = out["memory_per_chip"]
    static = state["params_bytes"] + state["grads_bytes"] + state["optimizer_bytes"]
    simulated = bool(out.get("simulated")) and out.get("simulated_memory_peak_bytes", 0.0) > 0
    peak = out["simulated_memory_peak_bytes"] if simulated else out["memory_per_chip_bytes"]
    cap = out["hbm_capacity_bytes"]
    return {"memory_peak_bytes": peak, "memory_peak_source": "simulated" if simulated else "closed form",
            "memory_state_bytes": static, "memory_transient_peak_bytes": peak - static,
            "fits": peak <= cap, "hbm_spare_bytes": cap - peak}


def _p2p(graph: Any, mesh: Any, plan: MeshPlan, cfg: TransformerConfig, batch: int, seq: int,
         opts: TrainOptions) -> float:
    """Closed form of one stage-to-stage activation transfer (the slowest neighbouring pair)."""
    p = plan.size("pipeline")
    if p == 1:
        return 0.0
    nbytes = batch / (plan.batch_ways * opts.microbatches) * seq / plan.size("sequence") * cfg.d_model * \
        cfg.act_elem_bytes
    i = mesh.index("pipeline")
    origin = [0] * len(mesh.sizes)

    def at(stage: int) -> Any:
        coords = list(origin)
        coords[i] = stage
        return mesh.device(tuple(coords))

    return max(p2p_s(graph, at(s), at((s + 1) % p), nbytes) for s in range(p))
