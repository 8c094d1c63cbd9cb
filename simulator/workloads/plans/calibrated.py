"""A calibrated whole training step on TPU slices: the MFU a real run gets, factor by factor.

Closed form, per chip, for a mesh of ``data`` (slices, over DCN) x ``fsdp`` x ``model`` (both over
ICI inside a slice), MaxText-style. Every factor is a named number of seconds in the breakdown:

- ``matmul_s``: the layers' and the output head's matmuls, forward and backward (2x), each at the
  MXU's calibrated share of peak ``mxu_fraction x w / (w + mxu_half_dim)`` (w: the smaller of its
  per-chip widths k, n -- fixed per-tile costs weigh on narrow matmuls, e.g. under tensor
  parallelism), on padded FLOPs (k, n to the MXU side, rows to sublanes), or HBM-bound when the
  operands stream slower (roofline at ``hbm_fraction`` of HBM);
- ``attention_s``: flash attention, causal blocks of ``FLASH_BLOCK`` (the diagonal blocks computed
  whole), forward 4 h d FLOPs per computed pair, backward 2.5x (it recomputes the scores), at
  ``flash_fraction`` of the MXU peak, or its softmax on the VPU when slower (they run concurrently);
- ``vector_s``: element-wise and normalisation traffic XLA does not fuse into the matmuls -- per
  token and layer ``ELEMENTWISE_D`` [d]-wide, ``ELEMENTWISE_F`` [d_ff]-wide and 2 [q + kv]-wide tensors
  through HBM forward, twice that backward, or the VPU's ``VECTOR_OPS_PER_ELEMENT`` per [d]- and
  [d_ff]-wide element when slower (on these chips HBM binds);
- ``recompute_s``: what the checkpoint policy recomputes in the backward pass: ``full`` the whole
  forward, ``selective`` the MLP up-projections (and their element-wise work), ``minimal`` (weight
  matmul outputs kept) the element-wise work and flash attention (a kernel, not a weight matmul),
  ``none`` nothing, K saved tensors a share of the forward;
- ``exposed_ici_s``: FSDP AllGathers (forward, and again backward) and gradient ReduceScatters, and
  tensor-parallel AllReduces of [tokens, d] (2 forward, 2 backward, 2 more when the forward is
  recomputed). FSDP collectives overlap compute as XLA's async collective fusion does: a layer takes
  max(compute, fsdp collectives of the next layer) plus ``overlap_interference`` x the smaller of the
  two (an overlapped collective still slows the compute: they share HBM), and the first gather and
  the last reduce-scatter are exposed. Tensor-parallel AllReduces wait on the layer's own outputs,
  so they add to it, unless ``tp_overlap`` (collective matmuls) puts them beside the compute too
  (fsdp and model use different torus axes);
- ``optimizer_s``: AdamW over the local shard, HBM-bound (`adamw_bytes_per_param`);
- ``dcn_s``: the gradient shard AllReduced across slices, a ring over DCN at ``dcn_fraction`` of the
  chip's DCN rate plus ``dcn_step_s`` per ring step, after the backward pass (not hidden). The ideal
  simulated step (`simulator.workloads.plans.step`) instead starts each layer's AllReduce as its backward
  ends and hides what the later layers' backward covers: that is the bound. MaxText's published multislice
  runs pay it: from 1 to 32 v5e-256 slices their MFU falls (16B 0.611 -> 0.547, +1.18 s a step), 7.7x
  the whole AllReduce at the full DCN rate (0.15 s, under a 7 s backward), which a hidden AllReduce could
  not cost (why is not published; scanned layers hand back their gradients stacked after the loop, which
  would leave the reduction little to hide under); tests/test_dcn_overlap.py;
- ``overhead_s``: ``step_overhead_s`` per step.

ICI bandwidth per mesh axis comes from the slice's torus: ``model`` takes the innermost dimensions,
``fsdp`` the rest; a dimension that wraps gives a ring (two links), one that does not, or that an
axis only partly spans, a line (one). The ideal step (every efficiency 1, no fixed costs) is
reported beside the calibrated one. The constants come from `simulator.hardware.train_calibration`.
"""
from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

from simulator import analytic
from simulator.analytic import exposed_s
from simulator.hardware.specs import ChipSpec
from simulator.hardware.train_calibration import IDEAL, StepConstants, step_constants
from simulator.workloads.budget import kv_heads_per_chip
from simulator.workloads.plans.layout import MeshPlan, PlanError, TrainOptions, check_train_plan
from simulator.workloads.plans.memory import recompute_fraction, train_memory
from simulator.workloads.plans.ops import VECTOR_OPS_PER_ELEMENT
from simulator.workloads.plans.train import model_flops
from simulator.workloads.transformer import TransformerConfig

FLASH_BLOCK = 512  #: flash attention's query and key block (MaxText's default block sizes)
FLASH_BACKWARD = 2.5  #: flash backward FLOPs over forward: five block matmuls against two
SOFTMAX_VPU_OPS = 5  #: VPU operations per score: max, subtract, exp, sum, scale
ELEMENTWISE_D = 10  #: [d]-wide tensors through HBM per token and layer forward: 2 norms, 2 residual adds
ELEMENTWISE_F = 3  #: [d_ff]-wide: the gated activation reads gate and up, writes their product
ADAM_VPU_FLOPS = 12  #: per parameter: moments, bias correction, decay, update
AXES_MODELLED = ("data", "pipeline", "fsdp", "sequence", "model")
GiB = 2.0**30


def adamw_bytes_per_param(weight_bytes: float, master_copy: bool) -> float:
    """HBM bytes AdamW moves per parameter: reads the two fp32 moments, the master copy (or the weights) and
    the gradient; writes the moments, the master copy and the weights' own copy (or the weights)."""
    read = 8 + (4 if master_copy else weight_bytes) + weight_bytes
    write = 8 + (4 + weight_bytes if master_copy else weight_bytes)
    return read + write


def _dim_bandwidth(length: int, used: int, wraps: bool, link: float) -> float:
    """One-way-equivalent bandwidth an axis gets from one torus dimension it spans ``used`` of ``length``."""
    return (2 if wraps and used == length else 1) * link


def axis_bandwidths(chip: ChipSpec, shape: tuple[int, ...], model: int, fsdp: int, sequence: int = 1,
                    pipeline: int = 1) -> dict[str, tuple[float, int]]:
    """(bytes/s, ring hops) of the ``model``, ``sequence``, ``fsdp`` and ``pipeline`` axes on a slice of
    ``shape``: innermost first (model takes the last dimensions, then sequence, fsdp, pipeline); an axis that
    needs part of a dimension runs a line on it."""
    link = chip.ici_bandwidth_bytes_per_s
    dims = list(shape)
    out: dict[str, tuple[float, int]] = {}
    for axis, need in (("model", model), ("sequence", sequence), ("fsdp", fsdp), ("pipeline", pipeline)):
        bw, hops = 0.0, 0
        while need > 1 and dims:
            length = dims.pop()
            used = math.gcd(length, need) if need % length else length
            if used == 1:  # no common factor: the axis strides over this dimension as a line
                used = min(length, need)
            wraps = chip.wraparound == "length16" and length == 16 or chip.wraparound == "multiple4" and \
                length % 4 == 0
            bw += _dim_bandwidth(length, used, wraps, link)
            hops += used - 1
            if used < length:
                dims.append(length // used)  # the rest of the dimension is left to the next axis
            need = max(1, need // used)
        if axis in ("model", "fsdp") or bw:
            out[axis] = (bw, hops)
    return out


def default_slice_shape(chip: ChipSpec, chips: int) -> tuple[int, ...]:
    """The most cube-like real slice of ``chips`` chips, or a line where none exists."""
    from topologies.shapes import slice_shapes

    try:
        shapes = slice_shapes(chips, chip.wraparound)
    except Exception:  # noqa: BLE001 - switch-connected chips have no torus shapes
        shapes = []
    return tuple(shapes[0]) if shapes else (chips,)


def _mxu_eff(k: float, n: float, c: StepConstants) -> float:
    width = min(k, n)
    return c.mxu_fraction * width / (width + c.mxu_half_dim)


def matmul_time_s(chip: ChipSpec, rows: float, k: float, n: float, c: StepConstants, elem: float = 2) -> float:
    """One [rows, k] @ [k, n] matmul: padded FLOPs at the shape's MXU efficiency, or its HBM stream if slower."""
    r, kk, nn = (max(1, round(x)) for x in (rows, k, n))
    flops = analytic.padded_matmul_flops(r, kk, nn, chip.mxu_dim, chip.sublanes)
    compute = flops / (chip.peak_flops_per_s() * _mxu_eff(kk, nn, c))
    stream = analytic.matmul_bytes(r, kk, nn, elem) / (chip.hbm_bandwidth_bytes_per_s * c.hbm_fraction)
    return max(compute, stream)


def flash_pairs(seq: int, block: int = FLASH_BLOCK) -> float:
    """(query, key) pairs flash attention computes for one causal sequence: whole blocks on and below the diagonal."""
    b = min(block, seq)
    nb = math.ceil(seq / b)
    return b * b * nb * (nb + 1) / 2


def ring_time_s(kind: str, nbytes: float, n: int, bandwidth: float, hops: int, hop_s: float) -> float:
    """A ring collective over ``n`` chips of a V = ``nbytes`` array at ``bandwidth``: AllGather and
    ReduceScatter move (n-1)/n V, AllReduce twice that; each ring step pays a hop."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    factor = 2 if kind == "all_reduce" else 1
    return factor * ((n - 1) / n * nbytes / bandwidth + hops * hop_s)


def overlapped_layers_s(n_layers: int, compute: float, fsdp_comm: float, tp_comm: float,
                        tp_overlapped: bool = False, interference: float = 0.0) -> tuple[float, float]:
    """(total, exposed) seconds of ``n_layers`` alike layers whose fsdp collectives (for the next layer)
    run beside ``compute``; the fsdp collectives of the first layer are not hidden (the first gather, or
    the last reduce-scatter); overlapping costs ``interference`` x the shorter of compute and collectives.
    Tensor-parallel collectives wait on the layer's own results: exposed, or beside the compute as well
    when ``tp_overlapped`` (collective matmuls)."""
    hidden = [fsdp_comm, tp_comm] if tp_overlapped else [fsdp_comm]
    per = max(compute, *hidden) + interference * min(compute, max(hidden)) + (0.0 if tp_overlapped else tp_comm)
    total = n_layers * per + fsdp_comm
    return total, exposed_s(total, n_layers * compute)


def _check(cfg: TransformerConfig, chip: ChipSpec, plan: MeshPlan, opts: TrainOptions, batch: int, seq: int,
           check_memory: bool) -> dict[str, Any]:
    others = [a for a in plan.used if a not in AXES_MODELLED]
    if others:
        raise PlanError(f"the calibrated TPU training step models the data (slices over DCN), pipeline, fsdp, "
                        f"sequence and model axes; {others[0]}={plan.size(others[0])} is not calibrated on TPUs "
                        "(drop --calibrated for the ideal step)")
    if cfg.n_experts:
        raise PlanError(f"the calibrated training step models dense decoders; {cfg.name} has {cfg.n_experts} experts "
                        "(drop --calibrated for the ideal step)")
    check_train_plan(cfg, plan, opts, batch, seq, even_stages=False)
    mem = train_memory(cfg, chip, plan, opts, batch, seq)
    if check_memory and not mem["fits"]:
        per = mem["memory_per_chip"]
        parts = ", ".join(f"{k.removesuffix('_bytes')} {per[k] / GiB:.1f}" for k in
                          ("params_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes", "temporary_bytes"))
        chips = f"{plan.chips} {chip.name} chip{'s' if plan.chips > 1 else ''}"
        raise PlanError(f"{cfg.name} on {chips} ({plan.text}, batch {batch} x {seq}, checkpoint "
                        f"{opts.checkpoint}) needs {mem['memory_per_chip_bytes'] / GiB:.1f} GiB per chip ({parts} GiB) "
                        f"but a chip holds {mem['hbm_capacity_bytes'] / GiB:.1f} GiB; what would fit: more fsdp chips "
                        f"(the whole state needs the HBM of at least {mem['min_chips']}), a smaller batch"
                        + (", or --checkpoints-per-layer full" if opts.checkpoint != "full" else ""))
    return mem


def step_factors(cfg: TransformerConfig, chip: ChipSpec, plan: MeshPlan, opts: TrainOptions, batch: int, seq: int,
                 c: StepConstants, shape: tuple[int, ...]) -> dict[str, Any]:
    """Seconds of each factor of one step under constants ``c`` on slices of ``shape`` (see the module docstring)."""
    n, f, m, mb = plan.size("data"), plan.size("fsdp"), plan.size("model"), opts.microbatches
    sp, pp = plan.size("sequence"), plan.size("pipeline")
    seqs = batch / (n * f * mb)  # sequences one chip (one model group) processes per microbatch
    t = seqs * seq / sp
    d, e_w, e_a = cfg.d_model, cfg.weight_elem_bytes, cfg.act_elem_bytes
    q, kv = cfg.q_width / m, kv_heads_per_chip(cfg, m) * cfg.head_dim
    ff = cfg.d_ff / m
    mats = 3 if cfg.gated_mlp else 2
    mm = (matmul_time_s(chip, t, d, q + 2 * kv, c) + matmul_time_s(chip, t, q, d, c)
          + (mats - 1) * matmul_time_s(chip, t, d, ff, c) + matmul_time_s(chip, t, ff, d, c))
    heads = cfg.n_heads / m
    pairs = seqs * flash_pairs(seq) / sp  # context parallelism balances the causal pairs over the sequence axis
    attn_mxu = 4 * heads * cfg.head_dim * pairs / (chip.peak_flops_per_s() * c.flash_fraction)
    attn_vpu = SOFTMAX_VPU_OPS * heads * pairs / chip.vpu_flops_per_s
    attn = max(attn_mxu, attn_vpu)
    hbm = chip.hbm_bandwidth_bytes_per_s * c.hbm_fraction
    vec = max(e_a * t * (ELEMENTWISE_D * d / m + ELEMENTWISE_F * ff + 2 * (q + kv)) / hbm,
              VECTOR_OPS_PER_ELEMENT * t * (d / m + ff) / chip.vpu_flops_per_s)
    policy = opts.checkpoint
    if policy == "full":
        redo = mm + attn + vec
    elif policy == "minimal":  # matmul outputs kept; flash attention's output is not a matmul's, so it is redone
        redo = vec + attn
    elif policy == "none":
        redo = 0.0
    else:  # selective, or K saved tensors: the recomputed share of the forward's matmuls, with their element-wise work
        redo = recompute_fraction(cfg, policy) * (mm + vec) + (attn if policy != "selective" and
                                                                recompute_fraction(cfg, policy) >= 1 else 0.0)
    fwd = mm + attn + vec
    bwd = 2 * mm + FLASH_BACKWARD * attn + 2 * vec + redo
    head = 3 * matmul_time_s(chip, t, d, cfg.vocab_size / m, c)
    bws = axis_bandwidths(chip, shape, m, f, sp, pp)
    hop = chip.hop_latency_s

    def ici(kind: str, axis: str, nbytes: float, size: int) -> float:
        bw, hops = bws[axis]
        return ring_time_s(kind, nbytes, size, bw * c.ici_fraction, hops, hop) if bw else 0.0

    layer_w = cfg.layer_params() / m * e_w
    if sp > 1:  # ring attention: K and V go round the sequence axis beside the attention (backward: and their grads)
        cp_one = ici("all_gather", "sequence", seqs * seq * 2 * kv * e_a, sp)
        cp_f, cp_b = max(0.0, cp_one - attn), max(0.0, 2 * cp_one - FLASH_BACKWARD * attn)
        fwd, bwd = fwd + cp_f, bwd + cp_b
    zero3 = opts.zero >= 3 and f > 1
    ag = ici("all_gather", "fsdp", layer_w, f) if zero3 else 0.0
    rs = ici("reduce_scatter", "fsdp", layer_w, f) if f > 1 and opts.zero >= 2 else 0.0
    tp_one = ici("all_reduce", "model", t * d * e_a, m)
    recomputes_tp = policy == "full"
    extra: dict[str, float] = {}
    if pp == 1:
        total_f, exp_f = overlapped_layers_s(cfg.n_layers, fwd, ag, 2 * tp_one, opts.tp_overlap,
                                             c.overlap_interference)
        total_b, exp_b = overlapped_layers_s(cfg.n_layers, bwd, ag + rs, (4 if recomputes_tp else 2) * tp_one,
                                             opts.tp_overlap, c.overlap_interference)
        per_micro = total_f + total_b + head
        body = mb * per_micro
    else:
        body, exp_f, exp_b, extra = _pipelined(cfg.n_layers, pp, opts, fwd, bwd, ag, rs, tp_one, recomputes_tp,
                                               head, c.overlap_interference)
        p2p_bw, p2p_hops = bws.get("pipeline", (0.0, 0))
        hop_s = hop if p2p_hops else 0.0
        extra["p2p_s"] = 2 * (pp * opts.chunks - 1) * (t * d * e_a / (p2p_bw * c.ici_fraction) + hop_s) if \
            p2p_bw else 0.0
        body += extra["p2p_s"]
    if sp > 1:
        extra["exposed_cp_s"] = mb * cfg.n_layers / pp * (cp_f + cp_b)
    shard = cfg.params() / (m * (f if opts.zero >= 1 else 1) * pp)
    once = 0.0  # ZeRO-1/2: reduce-scatter (1) once and re-gather the updated weights once; 0: AllReduce; exposed
    whole = cfg.params() / (m * pp) * e_w
    if f > 1 and opts.zero in (1, 2):
        once = ici("all_gather", "fsdp", whole, f) + (ici("reduce_scatter", "fsdp", whole, f) if opts.zero == 1
                                                      else 0.0)
    elif f > 1 and opts.zero == 0:
        once = ici("all_reduce", "fsdp", whole, f)
    optimizer = max(shard * adamw_bytes_per_param(e_w, opts.master_copy) / hbm,
                    ADAM_VPU_FLOPS * shard / chip.vpu_flops_per_s)
    grads = shard * e_w
    dcn_bw = chip.dcn_bandwidth_bytes_per_s * c.dcn_fraction
    dcn = (2 * (n - 1) / n * grads / dcn_bw + 2 * (n - 1) * c.dcn_step_s) if n > 1 else 0.0
    step = body + once + optimizer + dcn + c.step_overhead_s
    layers = cfg.n_layers * mb / pp
    factors = {"matmul_s": layers * 3 * mm + mb * head, "attention_s": layers * (1 + FLASH_BACKWARD) * attn,
               "vector_s": layers * 3 * vec, "recompute_s": layers * redo,
               "exposed_ici_s": mb * (exp_f + exp_b) + once, "optimizer_s": optimizer, "dcn_s": dcn,
               "overhead_s": c.step_overhead_s, **extra}
    flops = model_flops(cfg, batch, seq)
    return {"step_time_s": step, "mfu": flops / (plan.chips * chip.peak_flops_per_s() * step), "factors": factors,
            "tokens_per_s": batch * seq / step,
            "per_layer_s": {"forward_compute": fwd, "backward_compute": bwd, "fsdp_all_gather": ag,
                            "fsdp_reduce_scatter": rs, "tp_all_reduce": tp_one},
            "attention_bound": "vpu" if attn_vpu > attn_mxu else "mxu",
            "axis_bandwidth_bytes_per_s": {a: b for a, (b, _) in bws.items() if b}}


def _pipelined(n_layers: int, p: int, opts: TrainOptions, fwd: float, bwd: float, ag: float, rs: float,
               tp_one: float, recomputes_tp: bool, head: float, interference: float) -> tuple[float, float, float,
                                                                                             dict[str, float]]:
    """(seconds, one microbatch's exposed forward and backward collectives on the first stage, bubble) of the
    pipelined microbatches: p stages of v chunks (the extra layers of an uneven split on the earliest), the head
    on the last; (M - 1/v) x the slowest stage's microbatch plus every stage's once over v."""
    v, m = opts.chunks, opts.microbatches
    base, more = divmod(n_layers, p * v)
    per_stage, exp_f, exp_b = [], 0.0, 0.0
    for stage in range(p):
        total = head if stage == p - 1 else 0.0
        for chunk in range(v):
            n_l = base + (1 if chunk * p + stage < more else 0)
            tf, xf = overlapped_layers_s(n_l, fwd, ag, 2 * tp_one, opts.tp_overlap, interference)
            tb, xb = overlapped_layers_s(n_l, bwd, ag + rs, (4 if recomputes_tp else 2) * tp_one, opts.tp_overlap,
                                         interference)
            total += tf + tb
            if stage == 0:
                exp_f, exp_b = exp_f + xf, exp_b + xb
        per_stage.append(total)
    slowest, everyone = max(per_stage), sum(per_stage)
    pipelined = (m - 1 / v) * slowest + everyone / v
    return pipelined, exp_f, exp_b, {"bubble_s": max(0.0, pipelined - m * everyone / p)}


def calibrated_train_step(cfg: TransformerConfig, chip: ChipSpec, plan: MeshPlan, opts: TrainOptions | None = None,
                          batch: int = 1, seq: int = 2048, slice_shape: tuple[int, ...] | None = None,
                          constants: StepConstants | None = None, check_memory: bool = True,
                          gpu: dict[str, Any] | None = None) -> dict[str, Any]:
    """The calibrated step of ``cfg`` on ``plan`` (data = slices over DCN) beside the ideal one; on a GPU chip
    the GPU step (`simulator.workloads.plans.calibrated_gpu`, every mesh axis; ``gpu``: its keyword options
    ``constants``, ``attention``, ``dtype``), unless ``constants`` are slice constants (`StepConstants`), which
    price the slice model on any chip (e.g. `IDEAL`, as `scenarios.mfu_vs_slices` does).

    Returns ``step_time_s``, ``mfu`` (model FLOPs without recomputation / chips x peak x step),
    ``factors`` (seconds per named factor), ``ideal`` (the same at every efficiency 1), the constants
    used and their source, and the memory check. Raises `PlanError` when the state does not fit (with
    its numbers) and `PodsimError` for a chip with no calibrated training model.
    """
    opts = opts or TrainOptions()
    if is_gpu(chip) and not isinstance(constants, StepConstants):  # explicit TPU constants: the slice model
        return _gpu_step(cfg, chip, plan, opts, batch, seq, check_memory, **(gpu or {}))
    c = constants or step_constants(chip.name)
    mem = _check(cfg, chip, plan, opts, batch, seq, check_memory)
    per_slice = plan.chips // plan.size("data")
    shape = tuple(slice_shape) if slice_shape else default_slice_shape(chip, per_slice)
    if math.prod(shape) != per_slice:
        raise PlanError(f"slice shape {'x'.join(map(str, shape))} holds {math.prod(shape)} chips but fsdp x model = "
                        f"{per_slice}; give a slice of {per_slice} chips (e.g. "
                        f"{'x'.join(map(str, default_slice_shape(chip, per_slice)))})")
    cal = step_factors(cfg, chip, plan, opts, batch, seq, c, shape)
    ideal = step_factors(cfg, chip, plan, opts, batch, seq, IDEAL, shape)
    return {**cal, "ideal": {k: ideal[k] for k in ("step_time_s", "mfu", "factors")},
            "uncalibrated": _tpu_uncalibrated(chip, plan, opts) if constants is None else [],
            "slices": plan.size("data"), "slice_shape": list(shape), "chips": plan.chips,
            "checkpoint": opts.checkpoint, "constants": asdict(c),
            "memory_per_chip_bytes": mem["memory_per_chip_bytes"], "fits": mem["fits"]}


FITTED_TPUS = ("tpu-v5e", "tpu-v5p")  #: chips with fitted training rows (tpu-v4: one held-out check, PaLM)
FITTED_TPU_AXES = ("data", "fsdp", "model")  #: axes the published TPU runs use


def _tpu_uncalibrated(chip: ChipSpec, plan: MeshPlan, opts: TrainOptions) -> list[str]:
    """What of a TPU forecast no published run pinned."""
    out = []
    if chip.name not in FITTED_TPUS:
        out.append(f"{chip.name} training-step constants (no fitted runs: the {' and '.join(FITTED_TPUS)} constants, "
                   "with its own peaks and links)")
    out += [f"{a} axis (no published TPU run uses it: priced with the fitted constants)" for a in plan.used
            if a not in FITTED_TPU_AXES]
    if opts.tp_overlap:
        out.append("tp_overlap (no published TPU run in the set overlaps tensor-parallel collectives)")
    return out


def is_gpu(chip: ChipSpec) -> bool:
    """GPUs sit on NVLink switches (no torus)."""
    return chip.wraparound == "switch"


def _gpu_step(cfg: TransformerConfig, chip: ChipSpec, plan: MeshPlan, opts: TrainOptions, batch: int, seq: int,
              check_memory: bool, **options: Any) -> dict[str, Any]:
    from simulator.workloads.plans.calibrated_gpu import calibrated_gpu_step

    check_train_plan(cfg, plan, opts, batch, seq, even_stages=False)
    mem = train_memory(cfg, chip, plan, opts, batch, seq)
    if check_memory and not mem["fits"]:
        raise PlanError(f"{cfg.name} on {plan.chips} {chip.name} GPUs ({plan.text}, batch {batch} x {seq}) needs "
                        f"{mem['memory_per_chip_bytes'] / GiB:.1f} GiB per GPU but one holds "
                        f"{mem['hbm_capacity_bytes'] / GiB:.1f} GiB; more fsdp, model or pipeline ways, a smaller "
                        "batch or more activation checkpointing would fit")
    out = calibrated_gpu_step(cfg, chip, plan, opts, batch, seq, **options)
    return {**out, "slices": 1, "slice_shape": [plan.chips], "memory_per_chip_bytes": mem["memory_per_chip_bytes"],
            "fits": mem["fits"]}


def slice_shape_for(topology: str | None, plan: MeshPlan) -> tuple[int, ...] | None:
    """The slice shape ``--topology`` names (``multislice:K:AxB`` with K = data, ``slice:AxB``), or None."""
    if not topology:
        return None
    parts = topology.split(":")
    if parts[0] == "multislice" and len(parts) == 3 and parts[1].isdigit() and int(parts[1]) != plan.size("data"):
        raise PlanError(f"--topology {topology} has {parts[1]} slices but the mesh has data={plan.size('data')}; the "
                        f"calibrated step puts the data axis across slices: use multislice:{plan.size('data')}:"
                        f"{parts[-1]}")
    try:
        return tuple(int(x) for x in parts[-1].split("x"))
    except ValueError:
        return None


def breakdown_lines(cal: dict[str, Any]) -> list[str]:
    """The calibrated step as text: step, MFU, each factor beside its ideal seconds."""
    ideal = cal["ideal"]
    where = (f"{cal['chips']} GPUs, {cal['nodes']} node(s) of {cal['gpus_per_node']}" if "gpus_per_node" in cal else
             f"{cal['slices']} slice(s) of {'x'.join(map(str, cal['slice_shape']))}")
    source = "published GPU runs" if "gpus_per_node" in cal else "published TPU runs"
    lines = [f"calibrated whole step ({source}): {cal['step_time_s']:.4g} s, MFU {cal['mfu']:.1%} "
             f"(ideal {ideal['step_time_s']:.4g} s, MFU {ideal['mfu']:.1%}); {where}"]
    lines += [f"  {name.removesuffix('_s'):<12} {sec:>10.4g} s   ideal {ideal['factors'][name]:>10.4g} s"
              for name, sec in cal["factors"].items()]
    if "grad_reduce" in cal:
        g = cal["grad_reduce"]
        lines.append(f"  gradient reductions at {g['bytes_per_element']:g} bytes per element: {g['total_s']:.4g} s of "
                     "collectives (in the factors above where exposed)")
    return lines


__all__ = ["adamw_bytes_per_param", "axis_bandwidths", "breakdown_lines", "calibrated_train_step", "flash_pairs",
           "is_gpu",
           "overlapped_layers_s", "ring_time_s", "slice_shape_for", "step_factors"]
