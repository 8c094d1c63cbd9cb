"""What one chip does for one layer and one microbatch of a training step, and what it communicates.

Shared by the closed form (`estimate`) and the simulation (`step`), so both price the same work. An
`Op` is MXU work with its HBM traffic and VPU work, plus collectives by how they relate to it:
``before`` (the op waits for them: an expert dispatch), ``overlapped`` (run with the work; the op ends
when both have: ring attention, collective matmul), ``after`` (the next op waits: a tensor-parallel
AllReduce) and ``background`` (gradient reductions, awaited at the end of the step).

Per layer, forward: attention (QKV, scores, output projection) then the MLP (or router, dispatch,
experts, combine); each ends with an AllReduce of its [tokens, d_model] output over ``model``. The
backward pass costs twice the forward's matmul FLOPs plus the recomputed share, re-reads the weights
and saved activations, writes gradients, and repeats the collectives (each TP AllReduce once, the
AllToAlls twice; recomputation redoes the forward's). Timing assumption: an op's HBM streaming and
its MXU work overlap fully (deep prefetch); its VPU work follows them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from simulator import analytic
from simulator.hardware.specs import ChipSpec
from simulator.workloads.budget import kv_heads_per_chip
from simulator.workloads.plans.layout import MeshPlan, TrainOptions
from simulator.workloads.plans.memory import layer_split, recompute_fraction, saved_elements
from simulator.workloads.transformer import TransformerConfig

VECTOR_OPS_PER_ELEMENT = 10  #: norms, residual adds, softmax, activation: a rough element-wise budget


@dataclass(frozen=True)
class Comm:
    """A collective over mesh ``axes`` of a V = ``nbytes`` array; ``axis`` is where its exposed time is booked."""

    kind: str
    axes: tuple[str, ...]
    nbytes: float
    axis: str


IN_TURN = ("all_reduce", "reduce_scatter", "all_gather")  #: kinds `in_turn` runs axis by axis


def in_turn(kind: str, nbytes: float, axes: list[str] | tuple[str, ...], size: Any) -> list[tuple[str, float, str]]:
    """A collective ``kind`` (one of `IN_TURN`) of V = ``nbytes`` over ``axes``, axis by axis with the same result:
    ReduceScatter over the later axes in turn (the array shrinking by each one's ``size(axis)``), the collective
    over the first, AllGather back over the later ones (an AllReduce); a ReduceScatter stops after the first, an
    AllGather starts there. Each chip sends what one ring over all of ``axes`` would. (kind, V, axis) in order."""
    first, rest = axes[0], list(axes[1:])
    steps: list[tuple[str, float, str]] = []
    v = nbytes
    if kind in ("all_reduce", "reduce_scatter"):
        for a in reversed(rest):
            steps.append(("reduce_scatter", v, a))
            v /= size(a)
    else:
        v /= math.prod(size(a) for a in rest)
    steps.append((kind, v, first))
    if kind in ("all_reduce", "all_gather"):
        for a in rest:
            v *= size(a)
            steps.append(("all_gather", v, a))
    return steps


@dataclass(frozen=True)
class Work:
    """Per-chip work: padded MXU FLOPs (``useful_flops`` unpadded), VPU FLOPs, HBM bytes read and written."""

    flops: float
    useful_flops: float
    vector_flops: float
    read_bytes: float
    write_bytes: float

    def time_s(self, chip: ChipSpec) -> float:
        """max(MXU, HBM) + VPU: streaming and matmuls overlap, element-wise work follows."""
        return max(self.flops / chip.peak_flops_per_s(), (self.read_bytes + self.write_bytes) /
                   chip.hbm_bandwidth_bytes_per_s) + self.vector_flops / chip.vpu_flops_per_s


@dataclass(frozen=True)
class Op:
    name: str
    work: Work
    before: tuple[Comm, ...] = ()
    overlapped: tuple[Comm, ...] = ()
    after: tuple[Comm, ...] = ()


@dataclass(frozen=True)
class LayerWork:
    """One layer on one chip for one microbatch: forward and backward ops, the weights FSDP gathers
    (V of the AllGather over fsdp, 0 without ZeRO-3) and the gradient bytes it reduces (dense, expert)."""

    forward: tuple[Op, ...]
    backward: tuple[Op, ...]
    gather_bytes: float
    grad_bytes: tuple[float, float]


def _mm(chip: ChipSpec, m: float, k: float, n: float) -> float:
    return analytic.padded_matmul_flops(max(1, round(m)), max(1, round(k)), max(1, round(n)), chip.mxu_dim,
                                        chip.sublanes)


def tokens_per_chip(plan: MeshPlan, opts: TrainOptions, batch: int, seq: int) -> float:
    """Tokens one chip processes per microbatch."""
    return batch / (plan.batch_ways * opts.microbatches) * seq / plan.size("sequence")


def layer_work(cfg: TransformerConfig, chip: ChipSpec, plan: MeshPlan, opts: TrainOptions, batch: int,
               seq: int) -> LayerWork:
    """The ops of one layer (all layers are alike) on one chip for one microbatch."""
    m, sp, ep = plan.size("model"), plan.size("sequence"), plan.size("expert")
    t = tokens_per_chip(plan, opts, batch, seq)
    d, e_w, e_a = cfg.d_model, cfg.weight_elem_bytes, cfg.act_elem_bytes
    q, kvw = cfg.q_width / m, kv_heads_per_chip(cfg, m) * cfg.head_dim
    saved = saved_elements(cfg, opts.checkpoint) * t * e_a / m
    sequences = batch / (plan.batch_ways * opts.microbatches)
    pairs = sequences * seq * (seq + 1) / 2 / sp  # causal (query, source) pairs per chip
    scores = 4 * (cfg.n_heads / m) * cfg.head_dim * pairs
    w_attn = (cfg.attention_params() / m + 2 * cfg.norm_params()) * e_w
    attn = Work(_mm(chip, t, d, q + 2 * kvw) + _mm(chip, t, q, d) + scores,
                2 * t * (d * (q + 2 * kvw) + q * d) + scores, VECTOR_OPS_PER_ELEMENT * t * (d + q),
                w_attn, saved / 2)
    tp = (Comm("all_reduce", ("model",), t * d * e_a, "model"),) if m > 1 else ()
    seq_comm = _sequence_comms(plan, opts, sp * t * 2 * kvw * e_a)
    attn_op = _op("attention", attn, tp, opts, seq_comm, forward=True)
    mlp_op, w_mlp = _mlp(cfg, chip, plan, opts, t, saved / 2, tp)
    dense, routed = layer_split(cfg)
    gather = (dense / m + routed / (m * ep)) * e_w if opts.zero >= 3 and plan.size("fsdp") > 1 else 0.0
    r = recompute_fraction(cfg, opts.checkpoint)
    redo = r > 0 and opts.checkpoint != "selective"  # recomputing whole ops repeats their collectives
    backward = (_backward(mlp_op, w_mlp, r, redo), _backward(attn_op, w_attn, r, redo, seq_comm))
    return LayerWork((attn_op, mlp_op), backward, gather, (dense / m * e_w, routed / (m * ep) * e_w))


def _sequence_comms(plan: MeshPlan, opts: TrainOptions, kv_bytes: float) -> dict[str, tuple[Comm, ...]]:
    """Context parallelism: ring attention passes K and V round the sequence axis while computing
    (backward: K, V again and their gradients); all-gather mode gathers them first and reduce-scatters
    their gradients after."""
    if plan.size("sequence") == 1:
        return {}
    ag = Comm("all_gather", ("sequence",), kv_bytes, "sequence")
    rs = Comm("reduce_scatter", ("sequence",), kv_bytes, "sequence")
    if opts.sequence_attention == "ring":
        return {"f_overlapped": (ag,), "b_overlapped": (ag, rs)}
    return {"f_before": (ag,), "b_before": (ag,), "b_after": (rs,)}


def _op(name: str, work: Work, tp: tuple[Comm, ...], opts: TrainOptions, extra: dict[str, tuple[Comm, ...]],
        forward: bool, before: tuple[Comm, ...] = (), after: tuple[Comm, ...] = ()) -> Op:
    key = "f" if forward else "b"
    overlapped = extra.get(f"{key}_overlapped", ()) + (tp if opts.tp_overlap else ())
    return Op(name, work, before + extra.get(f"{key}_before", ()), overlapped,
              (() if opts.tp_overlap else tp) + after + extra.get(f"{key}_after", ()))


def _mlp(cfg: TransformerConfig, chip: ChipSpec, plan: MeshPlan, opts: TrainOptions, t: float, saved: float,
         tp: tuple[Comm, ...]) -> tuple[Op, float]:
    m, ep = plan.size("model"), plan.size("expert")
    d, f, e_w = cfg.d_model, cfg.d_ff / m, cfg.weight_elem_bytes
    mats = 3 if cfg.gated_mlp else 2
    if not cfg.n_experts:
        w = cfg.expert_params() / m * e_w
        work = Work(mats * _mm(chip, t, d, f), 2 * mats * t * d * f, VECTOR_OPS_PER_ELEMENT * t * f, w, saved)
        return _op("mlp", work, tp, opts, {}, forward=True), w
    k, shared = cfg.experts_per_token, cfg.n_shared_experts
    routed = t * k  # token copies this chip's experts receive (balanced routing)
    local = cfg.n_experts / ep
    w = (local * cfg.expert_params() / m + shared * cfg.expert_params() / m + d * cfg.n_experts) * e_w
    router = 2 * t * d * cfg.n_experts
    per_expert = max(1.0, routed / local)
    flops = local * mats * _mm(chip, per_expert, d, f) + shared * mats * _mm(chip, t, d, f) + router
    useful = 2 * mats * (routed + shared * t) * d * f + router
    work = Work(flops, useful, VECTOR_OPS_PER_ELEMENT * (routed + shared * t) * f, w, saved)
    a2a = (Comm("all_to_all", ("expert",), ep * routed * d * cfg.act_elem_bytes, "expert"),) if ep > 1 else ()
    return _op("moe", work, tp, opts, {}, forward=True, before=a2a, after=a2a), w


def _backward(op: Op, weights: float, r: float, redo: bool, extra: dict[str, tuple[Comm, ...]] | None = None) -> Op:
    """Twice the forward's MXU and VPU work plus the recomputed share; weights and saved activations
    read, gradients written; each collective once more (and the forward's again when recomputed)."""
    w = op.work
    passes = 2 + r
    work = Work(passes * w.flops, 2 * w.useful_flops, passes * w.vector_flops, weights + w.write_bytes, weights)
    extra = extra or {}
    seq = {"before": extra.get("b_before", ()), "overlapped": extra.get("b_overlapped", ()),
           "after": extra.get("b_after", ())}
    tp_over = tuple(c for c in op.overlapped if c.axis == "model")
    tp_after = tuple(c for c in op.after if c.axis == "model")
    a2a = tuple(c for c in op.before if c.kind == "all_to_all")  # the dispatch; the combine is its twin
    again = 2 if redo else 1
    return replace(op, name=f"{op.name} backward", work=work, before=a2a * (2 * again - 1) + seq["before"],
                   overlapped=tp_over * again + seq["overlapped"], after=tp_after * again + a2a + seq["after"])


def head_work(cfg: TransformerConfig, chip: ChipSpec, plan: MeshPlan, opts: TrainOptions, batch: int,
              seq: int) -> tuple[Op, Op, float]:
    """Final norm, output projection and loss on the last stage (vocabulary split over model):
    forward op, backward op, and the gradient bytes of the output projection."""
    m, t = plan.size("model"), tokens_per_chip(plan, opts, batch, seq)
    w = (cfg.vocab_size * cfg.d_model / m + cfg.norm_params()) * cfg.weight_elem_bytes
    logits = t * cfg.vocab_size / m * cfg.act_elem_bytes
    f = Work(_mm(chip, t, cfg.d_model, cfg.vocab_size / m), 2 * t * cfg.d_model * cfg.vocab_size / m,
             VECTOR_OPS_PER_ELEMENT * t * cfg.vocab_size / m, w, logits)
    b = Work(2 * f.flops, 2 * f.useful_flops, 2 * f.vector_flops, w + logits, w)
    return Op("lm head", f), Op("lm head backward", b), w
