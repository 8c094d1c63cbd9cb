"""A calibrated whole training step on GPUs: the forecast a real Megatron-, FSDP- or torchtitan-style run gets.

Closed form, per GPU, for a mesh of every axis -- ``data``, ``pipeline``, ``fsdp``, ``expert``, ``sequence``,
``model`` -- laid innermost-fastest (`simulator.workloads.plans.layout.AXES`: ``model`` inside a node first) on
nodes of ``gpus_per_node`` GPUs joined by NVLink switches, nodes over one InfiniBand NIC per GPU. Every factor
is a named number of seconds in the breakdown:

- ``matmul_s``: every GEMM of the layers and the output head as the GPU kernel model prices it by shape
  (`simulator.hardware.gpu_kernels`: tile and wave quantization, per dtype, launch); the backward pass
  runs two GEMMs per forward GEMM (data and weight gradients, their own shapes);
- ``attention_s``: the attention kernel -- FlashAttention by head dim and sequence (``attention="flash"``), or,
  for runs before it (``"unfused"``, Megatron-LM 2021), two batched score GEMMs and the softmax's passes over
  the [heads, seq, seq] scores through HBM;
- ``vector_s``: norms, residual adds, activations, rotary and dropout as memory-bound kernels at the kernel
  model's share of HBM (the TPU model's per-token tensor counts, `calibrated.ELEMENTWISE_D` ...); under FP8
  (``dtype="fp8"``) the casts are priced as Transformer Engine runs them (`FP8_CAST_TRANSPOSE_BYTES`, booked with
  the GEMMs): each layer GEMM's input activation forward and its output gradient backward go through one fused
  cast-transpose kernel (the transposed copy feeds the weight-gradient GEMM), and each weight is cast once per
  step where the framework caches it across microbatches (`FP8_WEIGHT_CACHE`: Megatron-Core's
  ``is_first_microbatch``), else once per microbatch; the output head runs in 16 bits (`FP8_HEAD`);
- ``launch_s``: eager frameworks launch every kernel from the host: a kernel takes at least the host's
  ``dispatch_s`` (what its GPU time does not hide; small models on many GPUs are launch-bound);
- ``recompute_s``: what the checkpoint policy recomputes (``full``: the forward again, collectives included;
  ``selective``: the attention kernel; ``none``);
- overlap is not free: a collective beside the compute holds SMs -- NCCL one per channel of the algorithm its tuner
  picks (`collective_sm_share`: 2 for a ring across nodes with one member per node, 8-12 inside an H100 node),
  Transformer Engine's userbuffers `TE_UB_SMS` -- and the compute pays ``sm_interference`` x that share of the
  SMs x the time they overlap (fitted: HBM and L2 contention ride on the same kernels);
- ``exposed_tp_s``: tensor-parallel AllReduces of [tokens, d] (2 forward, 2 backward, 2 more under full
  recompute), exposed unless ``tp_overlap`` (then beside the GEMMs, paying their interference; it implies sequence
  parallelism, whose backward gathers the two column-parallel inputs again, `SP_WGRAD_GATHERS`);
- ``exposed_fsdp_s``: ZeRO-3 gathers one layer ahead (forward, and backward again unless
  ``reshard_after_forward`` is off: FSDP's SHARD_GRAD_OP) and reduce-scatters behind, beside the compute
  (max of the two, plus the longer's interference x the shorter); the first gather and the last reduce-scatter
  exposed;
- ``exposed_grads_s``: the gradient reductions after the last microbatch (the data axis's AllReduce, ZeRO-1's
  reduce-scatter, ZeRO-0's AllReduce over fsdp), bucketed behind that microbatch's backward pass as DDP and
  Megatron's ``--overlap-grad-reduce`` run them, and ZeRO-1/2's gather of the updated weights behind the next
  step's first forward (``--overlap-param-gather``): what a window does not cover is exposed, and the covered
  part slows the compute by its interference;
- ``exposed_cp_s``: context parallelism's ring attention passing K and V (and their gradients backward)
  beside the attention kernel; what the kernel does not cover is exposed;
- ``exposed_ep_s``: expert parallelism's two AllToAlls (dispatch, combine) forward and backward;
- ``bubble_s`` and ``p2p_s``: the pipeline: stages hold ceil or floor of n_layers / (p v) layers, the
  embedding on the first and the head on the last; the step takes (M - 1/v) x the slowest stage's
  microbatch plus every stage's once over v (GPipe, 1F1B; interleaved v > 1), and 2 (p v - 1) activation
  transfers on the fill-and-drain path, each tensor-parallel rank sending its 1/m of them (Megatron's
  scatter-gather); in the steady state, 1F1B waits on each microbatch's two exchanges (2 v (M - 1) more
  transfers), while the interleaved schedule overlaps them (``overlap_p2p_comm``): `P2P_KERNELS` send/recv
  kernels per microbatch and chunk beside the compute, paying their SMs' interference;
- the loss (``vector_s`` of the last stage): `LOSS_BYTES_PER_LOGIT` bytes per logit through HBM;
- ``grad_reduce``: gradient reductions (FSDP's per-layer reduce-scatter, ZeRO-1's after the backward, the data
  axis's AllReduce) move ``grad_reduce_bytes`` per element -- 4 where the framework reduces in fp32 (Megatron-LM
  and Megatron-Core under bf16, PyTorch FSDP with an fp32 ``reduce_dtype``), else the weights' bytes;
- ``optimizer_s``: AdamW over the local shard (memory-bound kernel);
- ``overhead_s``: ``step_overhead_s`` per step (host, data loader, logging).

The factors describe the pipeline's slowest stage (the last on ties: it holds the head), whose pace the schedule
keeps: its layers, the head or embedding it holds, its exposed collectives, and ``bubble_s``, the time the schedule
leaves it idle; with the per-step terms they add up to the step (``launch_s`` is the part of the kernels' seconds
the host's dispatch floor adds, already inside them).

Collectives run as NCCL chooses them, over the mesh's axes laid on GPU nodes (`gpu_network`: NCCL's own
tuner for AllGather, ReduceScatter and AllReduce; rings at the fastest protocol for AllToAll and pipeline sends).
Difference by design from the ideal simulated step (the bound): that runs podsim's own collectives at line
rate and every kernel at peak; this one is what the fitted kernels and NCCL reach, so it is always slower.
"""
from __future__ import annotations

import math
from dataclasses import asdict, replace
from typing import Any

from simulator import analytic
from simulator.hardware.calibration import calibrated_chips, get_calibration
from simulator.hardware.gpu_kernels import GpuKernels, gpu_kernels
from simulator.hardware.specs import DTYPE_BYTES, ChipSpec
from simulator.hardware.train_calibration import GPU_IDEAL, GpuStepConstants, gpu_step_constants
from simulator.workloads.budget import kv_heads_per_chip
from simulator.workloads.plans.calibrated import (
    ELEMENTWISE_D,
    ELEMENTWISE_F,
    adamw_bytes_per_param,
    overlapped_layers_s,
)
from simulator.workloads.plans.gpu_network import GPUS_PER_NODE, AxisNet, axis_nets, nccl_s, p2p_s
from simulator.workloads.plans.layout import MeshPlan, PlanError, TrainOptions
from simulator.workloads.plans.memory import layer_split, recompute_fraction
from simulator.workloads.plans.train import model_flops, palm_flops
from simulator.workloads.transformer import TransformerConfig

ATTENTION = ("flash", "flash2", "unfused")  #: the chip's FlashAttention, FlashAttention-2, or scores through HBM
SOFTMAX_PASSES = 4  #: unfused attention: scale + mask + softmax (1 read, 1 write), dropout (1 read, 1 write)
FP8_CAST_TRANSPOSE_BYTES = 4
"""HBM bytes per element of Transformer Engine's fused FP8 cast-transpose (``nvte_cast_transpose``,
``fp8_cast_transpose_fused``): 2 read in 16 bits, 1 written as FP8 and 1 as its FP8 transpose (amax fused in). Hopper's
FP8 tensor cores take only the TN layout, so a GEMM's input X feeds the forward as X and the weight gradient as X^T,
the output gradient dY the data gradient as dY and the weight gradient as dY^T, the weight W the forward as W and the
data gradient as W^T: each is cast once, with its transpose, and read by both of its GEMMs."""
FP8_WEIGHT_CACHE = ("megatron-core",)
"""Frameworks that cast each weight to FP8 once per step, not once per microbatch: Megatron-Core passes
``is_first_microbatch`` to Transformer Engine's modules (``transformer/transformer_block.py``, TE's "FP8 weight
caching": the FP8 weight and its transpose are cached after the first microbatch of a gradient-accumulation step).
PyTorch FSDP / torchao (llm-foundry, torchtitan) cast in every forward. The bound casts once per step."""
FP8_HEAD = "bf16"
"""The output head's dtype under FP8 training: Megatron-Core's ``output_layer`` is a plain ``ColumnParallelLinear``
(not a Transformer Engine module, so outside ``fp8_autocast``'s FP8 GEMMs), and torchtitan's float8 converter skips
the ``output`` layer: 16 bits."""
VECTOR_KERNELS = 9  #: memory-bound kernels per layer forward (2 norms, 2 residual adds, activation, rotary, ...)
LOSS_BYTES_PER_LOGIT = 52
"""HBM bytes the loss moves per logit (one token x one vocabulary entry of the GPU's shard), from first principles:
Megatron's vocab-parallel cross-entropy (and PyTorch's ``F.cross_entropy`` on upcast logits) runs unfused, fp32
kernels over the [tokens, vocab] logits the head GEMM wrote in 16 bits:

- upcast 16 -> 32 bits: read 2, write 4 (6);
- row max (numerical stability): read 4 (4);
- subtract the max: read 4, write 4 (8);
- exp: read 4, write 4 (8);
- row sum: read 4 (4);
- divide by the sum, the softmax kept for the backward: read 4, write 4 (8);
- backward, softmax minus the one-hot times the loss gradient: read 4, write 4 (8);
- downcast the gradient to 16 bits for the head's backward GEMMs: read 4, write 2 (6).

6 + 4 + 8 + 8 + 4 + 8 + 8 + 6 = 52 bytes, priced as memory-bound kernels at the kernel model's share of HBM (not
fitted). At a 128k vocabulary this is 6.7 MB per token on one GPU: as much time as a few layers' norms."""
TE_UB_SMS = (1 + 16) / 2
"""SMs Transformer Engine's userbuffers hold while a tensor-parallel collective runs beside a GEMM
(``--tp-comm-overlap``), by its default configuration (``transformer_engine/pytorch/module/base.py``,
``initialize_ub``): the AllGathers beside the forward GEMMs and the data-gradient GEMMs (qkv_fprop, fc1_fprop,
proj_dgrad, fc2_dgrad) run as ``ring_exchange`` on 1 SM with copy engines moving the data; the ReduceScatters
(proj_fprop, fc2_fprop: ``pipeline``) and the bulk overlaps beside the weight-gradient GEMMs on 16 SMs, which
the GEMM leaves free (``set_sm_margin``). Half the overlapped bytes each way: 8.5 SMs on average."""
SP_WGRAD_GATHERS = 2
"""AllGathers of [tokens, d] a layer's backward adds under sequence parallelism: each column-parallel GEMM (QKV and
the MLP's first) keeps only its sequence shard of the input from the forward and gathers it again for the weight
gradient (Megatron-Core 0.8 ``tensor_parallel/layers.py``, ``LinearWithGradAccumulationAndAsyncCommunication.backward``:
``_all_gather_base`` of the saved input "scheduled before the input gradient computation"; Transformer Engine's
``bulk`` dgrad overlap runs the same AllGather beside the data-gradient GEMM, ``--disable-tp-comm-bulk-dgrad``:
"the All-Gather overlap with bprop activation gradient GEMM"). So the backward runs 4 AllGathers and 2
ReduceScatters where the forward runs 2 and 2: 3 AllReduces' worth, not 2. Priced where ``tp_overlap`` is on:
Megatron's ``--tp-comm-overlap`` requires ``--sequence-parallel`` (``training/arguments.py``: "Tensor parallel
communication/GEMM overlap can happen only when sequence parallelism is enabled")."""
P2P_BLOCKING = ("megatron-lm",)  #: frameworks whose interleaved schedule waits on every exchange (no overlap_p2p_comm)
P2P_KERNELS = 4
"""NCCL send/recv kernels a middle pipeline stage runs per microbatch and model chunk in the steady state: it
receives its input and sends its output forward, receives the output gradient and sends the input gradient
backward (Megatron-Core's ``_p2p_ops``: one ``isend`` / ``irecv`` each under ``overlap_p2p_comm``)."""
NCCL_FALLBACK_CHANNELS = 16  #: channels where NCCL's tuner model has no view of the group (an uneven split)
GRAD_REDUCE_DTYPES = {"fp32": 4, "bf16": 2, "fp16": 2}  #: dtypes a framework reduces gradients in -> bytes
#: what each framework reduces 16-bit gradients in by default (the forecast's default; a published row names its own):
#: Megatron-LM / Megatron-Core force fp32 under bf16 (arguments.py: "bfloat16 requires gradient accumulation and
#: all-reduce to be done in fp32"), NeMo's recipes set grad_reduce_in_fp32=True, torchtitan's mixed_precision_reduce
#: is float32, PyTorch FSDP's DEFAULT mixed precision (llm-foundry's default MP mode) reduces in fp32, Llama 3's FSDP
#: reduce-scatters in FP32
FRAMEWORK_GRAD_REDUCE = {"megatron-lm": "fp32", "megatron-core": "fp32", "llm-foundry": "fp32", "torchtitan": "fp32",
                         "llama3-meta": "fp32"}


class IdealKernels:
    """The bound's kernels: every GEMM and attention kernel at the padded tensor-core peak or its operands' HBM
    stream, whichever is slower; memory-bound kernels at the spec HBM rate; no launch cost."""

    def __init__(self, chip: ChipSpec) -> None:
        self.chip = chip

    def matmul_s(self, m: int, k: int, n: int, dtype: str = "bf16", batch: int = 1) -> float:
        flops = batch * analytic.padded_matmul_flops(m, k, n, self.chip.mxu_dim, self.chip.sublanes)
        elem = DTYPE_BYTES.get(dtype, 2)
        return max(flops / self.chip.peak_flops_per_s(dtype),
                   batch * analytic.matmul_bytes(m, k, n, elem) / self.chip.hbm_bandwidth_bytes_per_s)

    def attention_s(self, batch: int, q_len: int, kv_len: int, heads: int, kv_heads: int, head_dim: int,
                    causal: bool = True, backward: bool = False, dtype: str = "bf16", impl: str | None = None) -> float:
        pairs = q_len * kv_len / (2 if causal else 1)
        return (2.5 if backward else 1.0) * 4 * batch * heads * head_dim * pairs / self.chip.peak_flops_per_s(dtype)

    def memory_bound_s(self, nbytes: float, kind: str = "elementwise") -> float:
        return nbytes / self.chip.hbm_bandwidth_bytes_per_s


class _Kernels:
    """The kernel model as a framework runs it: GEMMs and attention at its ``compute_fraction`` of the model's
    throughput, and the host's dispatch floor (a kernel takes max(GPU time, dispatch); the excess over the GPU
    time is booked as launch time)."""

    def __init__(self, k: GpuKernels | IdealKernels, dtype: str, c: GpuStepConstants) -> None:
        self.k, self.dtype, self.dispatch_s, self.compute = k, dtype, c.dispatch_s, c.compute_fraction
        self.launch = 0.0

    def _floor(self, seconds: float) -> float:
        extra = max(0.0, self.dispatch_s - seconds)
        self.launch += extra
        return seconds + extra

    def gemm(self, m: float, k: float, n: float, batch: int = 1, dtype: str | None = None) -> float:
        """Seconds of one GEMM [m, k] @ [k, n] (``batch`` of them) in ``dtype`` (None: the step's), casts apart."""
        r, kk, nn = (max(1, round(x)) for x in (m, k, n))
        return self._floor(self.k.matmul_s(r, kk, nn, dtype or self.dtype, batch) / self.compute)

    def cast(self, elements: float) -> float:
        """Seconds of the FP8 cast-transpose of ``elements`` 16-bit values (0 unless the GEMMs run in FP8)."""
        return self.vector(FP8_CAST_TRANSPOSE_BYTES * elements) if self.dtype == "fp8" and elements > 0 else 0.0

    def vector(self, nbytes: float, kind: str = "elementwise") -> float:
        return self._floor(self.k.memory_bound_s(nbytes, kind))


def _gemms_s(kern: _Kernels, shapes: list[tuple[float, float, float]], backward: bool) -> float:
    """Forward GEMMs [m, k] @ [k, n], or their backward: data gradient [m, n] @ [n, k], weight [k, m] @ [m, n];
    under FP8 each with the cast-transpose of its activation input X [m, k] (forward) or output gradient dY [m, n]
    (backward), the weights' casts apart (`_weight_casts_s`)."""
    if not backward:
        return sum(kern.gemm(m, k, n) + kern.cast(m * k) for m, k, n in shapes)
    return sum(kern.gemm(m, n, k) + kern.gemm(k, m, n) + kern.cast(m * n) for m, k, n in shapes)


def _weight_casts_s(kern: _Kernels, shapes: list[tuple[float, float, float]]) -> float:
    """Seconds of casting the weights [k, n] of ``shapes`` to FP8 with their transposes (0 outside FP8)."""
    return sum(kern.cast(k * n) for _, k, n in shapes)


def _attention_s(kern: _Kernels, cfg: TransformerConfig, m: int, seqs: float, q_len: int, kv_len: int,
                 attention: str, backward: bool) -> float:
    heads = max(1, round(cfg.n_heads / m))
    kv = max(1, round(kv_heads_per_chip(cfg, m)))
    b = max(1, round(seqs))
    if attention in ("flash", "flash2"):  # training runs attention in 16 bits (fp8 GEMMs beside it)
        impl = {"flash": None, "flash2": "fa2"}[attention]
        seconds = kern.k.attention_s(b, q_len, kv_len, heads, kv, cfg.head_dim, causal=True, backward=backward,
                                     dtype="bf16", **({"impl": impl} if impl else {}))
        return kern._floor(seconds / kern.compute)
    scores = b * heads * q_len * kv_len * 2  # bytes of the [heads, q, kv] scores in 16 bits
    passes = 2 if backward else 1
    bmm = passes * (kern.gemm(q_len, cfg.head_dim, kv_len, b * heads, "bf16")
                    + kern.gemm(q_len, kv_len, cfg.head_dim, b * heads, "bf16"))
    return bmm + passes * kern.vector(SOFTMAX_PASSES * scores)


def _layer_s(cfg: TransformerConfig, kern: _Kernels, plan: MeshPlan, t: float, seqs: float, seq: int,
             attention: str) -> dict[str, dict[str, float]]:
    """Forward and backward seconds of one layer's kernels on one GPU for one microbatch (``t`` tokens): ``forward``
    and ``backward``, each gemm, attention, vector and launch seconds."""
    m, s, e = plan.size("model"), plan.size("sequence"), plan.size("expert")
    d, e_a = cfg.d_model, cfg.act_elem_bytes
    q, kv = cfg.q_width / m, kv_heads_per_chip(cfg, m) * cfg.head_dim
    ff = cfg.d_ff / m
    up = (2 if cfg.gated_mlp else 1) * ff
    attn_gemms = [(t, d, q + 2 * kv), (t, q, d)]
    if cfg.n_experts:
        local = cfg.n_experts / e
        rows = t * cfg.experts_per_token * e / cfg.n_experts  # token copies per local expert (balanced routing)
        mlp = [(rows, d, up), (rows, ff, d)] * round(local) + [(t, d, up), (t, ff, d)] * cfg.n_shared_experts
        mlp.append((t, d, cfg.n_experts))
    else:
        mlp = [(t, d, up), (t, ff, d)]
    out = {}
    for name, bwd in (("forward", False), ("backward", True)):
        start = kern.launch
        gemm = _gemms_s(kern, attn_gemms + mlp, bwd)
        attn = _attention_s(kern, cfg, m, seqs, seq // s, seq, attention, bwd)
        vec_bytes = e_a * t * (ELEMENTWISE_D * d / m + ELEMENTWISE_F * ff + 2 * (q + kv))
        vec = VECTOR_KERNELS * kern.vector(vec_bytes / VECTOR_KERNELS * (2 if bwd else 1))
        out[name] = {"gemm": gemm, "attention": attn, "vector": vec, "launch": kern.launch - start}
    out["weight_cast"] = {"gemm": _weight_casts_s(kern, attn_gemms + mlp)}
    return out


def collective_sm_share(kind: str, nbytes: float, net: AxisNet | None, sms: int) -> float:
    """Share of a GPU's ``sms`` SMs one NCCL collective's kernel holds while it runs: one thread block (one SM) per
    channel of the algorithm NCCL's tuner picks (`simulator.collectives.nccl_tuner`: the ring graph's channels for
    Ring and Tree, the NVLS graph's for NVLS and NVLSTree; AllToAll and sends on the ring's). A GEMM beside it
    runs on the rest, so an overlapped collective costs the compute about this share of the time they overlap
    (`GpuStepConstants.sm_interference` scales it: other contention, HBM and L2, rides on the same kernels).
    A ring across nodes with one member per node runs 2 channels (1.5% of an H100), one inside a node 12 (9%)."""
    if net is None or net.n <= 1 or nbytes <= 0:
        return 0.0
    if net.nccl is None:
        return min(1.0, NCCL_FALLBACK_CHANNELS / sms)
    graph = net.nccl.ring
    if kind in ("all_gather", "reduce_scatter", "all_reduce"):
        from simulator.collectives.nccl_tuner import pick, table

        algo, _ = pick(table(net.nccl, kind, nbytes)[0])
        graph = net.nccl.nvls if algo.startswith("NVLS") and net.nccl.nvls is not None else net.nccl.ring
    return min(1.0, graph.channels / sms)


def _excess(with_s: float, without_s: float) -> float:
    """Seconds ``with_s`` adds over ``without_s``, never negative; rounding noise (below 1e-12 of the sum, the
    difference of two equal sums taken in another order) is none."""
    extra = with_s - without_s
    return extra if extra > 1e-12 * abs(with_s) else 0.0


def _mean_share(parts: list[tuple[float, float]]) -> float:
    """Time-weighted SM share of collectives run back to back: ``parts`` (seconds, share)."""
    total = sum(t for t, _ in parts)
    return sum(t * s for t, s in parts) / total if total > 0 else 0.0


def chunked_grad_sync_exposed_s(total_s: float, chunks: int, group_bwd_s: float) -> float:
    """Seconds of gradient reduction left after the first pipeline stage's last backward pass under an interleaved
    schedule of ``chunks`` model chunks (Megatron-Core ``forward_backward_pipelining_with_interleaving``, its
    ``grad_sync_func``: a chunk's reduce-scatter is launched right after that chunk's last microbatch's backward).

    The last round runs the chunks' backwards in reverse order, ``group_bwd_s`` seconds each (a group of
    microbatches through one chunk), so chunk ``c`` launches ``c x group_bwd_s`` before the end; the chunks'
    reductions (``total_s / chunks`` each, the whole stage's ``total_s``) queue on one NIC. Chunk 0 launches at
    the end, so at least its share is exposed. The first stage idles in the drain as well, which this leaves
    out: a bound from below on the cover."""
    if total_s <= 0:
        return 0.0
    finish = -math.inf
    for c in range(chunks - 1, -1, -1):
        finish = max(finish, -c * group_bwd_s) + total_s / chunks
    return finish


def chunked_param_gather_exposed_s(total_s: float, chunks: int, group_fwd_s: float, in_pass_s: float,
                                   first_buckets: int | None = None) -> float:
    """Seconds the first stage's forward passes wait for the updated weights under an interleaved schedule
    (Megatron-Core's ``param_sync_func`` with ``--overlap-param-gather``): chunks 0 and 1 are gathered from the
    step's start, chunk ``c`` >= 2 from the start of chunk ``c - 1``'s first microbatch; the first stage runs its
    warm-up forwards back to back, ``group_fwd_s`` per chunk, each chunk's gather covered by its own first
    forward up to ``in_pass_s`` (its buckets gathered one ahead). The gathers (``total_s / chunks`` each) queue
    on one NIC; a late chunk delays every later pass. ``first_buckets``: the buckets of the stage's layers (None:
    no floor), the first of which, ``total_s / first_buckets``, no pass covers."""
    if total_s <= 0:
        return 0.0
    finish = delay = 0.0
    for c in range(chunks):
        start = 0.0 if c < 2 else (c - 1) * group_fwd_s + delay
        finish = max(finish, start) + total_s / chunks
        delay += max(0.0, finish - (c * group_fwd_s + in_pass_s + delay))
    return max(delay, total_s / first_buckets if first_buckets else 0.0)


def _stage_layers(n_layers: int, stages: int) -> list[int]:
    """Layers per virtual stage: as even as whole layers allow, the extra ones on the earliest stages."""
    base, extra = divmod(n_layers, stages)
    return [base + (1 if i < extra else 0) for i in range(stages)]


def gpu_step_factors(cfg: TransformerConfig, chip: ChipSpec, plan: MeshPlan, opts: TrainOptions, batch: int,
                     seq: int, c: GpuStepConstants | None, kernels: GpuKernels | IdealKernels,
                     attention: str = "flash", dtype: str = "bf16", grad_reduce_bytes: float | None = None
                     ) -> dict[str, Any]:
    """Seconds of each factor of one step on GPUs under constants ``c`` (see the module docstring); ``c`` None
    with `IdealKernels`: the bound (no fixed costs, collectives at line rate). ``grad_reduce_bytes``: bytes per
    gradient element the reductions move (None: the weights' bytes; 4 for frameworks that reduce in fp32)."""
    if attention not in ATTENTION:
        raise PlanError(f"attention {attention!r}; valid: {', '.join(ATTENTION)}")
    if grad_reduce_bytes is not None and not grad_reduce_bytes > 0:
        raise PlanError(f"grad_reduce_bytes {grad_reduce_bytes!r}; valid: a positive number of bytes per element "
                        f"(e.g. {GRAD_REDUCE_DTYPES})")
    p, mb, v = plan.size("pipeline"), opts.microbatches, opts.chunks if plan.size("pipeline") > 1 else 1
    seqs = batch / (plan.batch_ways * mb)  # sequences one GPU's model replica takes per microbatch
    t = seqs * seq / plan.size("sequence")
    d, e_w, e_a = cfg.d_model, cfg.weight_elem_bytes, cfg.act_elem_bytes
    e_g = e_w if grad_reduce_bytes is None else float(grad_reduce_bytes)  # bytes per gradient element reduced
    nets = axis_nets(chip, plan, c)
    c = c or GPU_IDEAL
    kern = _Kernels(kernels, dtype, c)
    layer = _layer_s(cfg, kern, plan, t, seqs, seq, attention)
    # FP8 weight casts: once per step where the framework caches them (and in the bound), else in every forward
    cast_once = c is GPU_IDEAL or c.framework in FP8_WEIGHT_CACHE
    w_cast = layer.pop("weight_cast")["gemm"]
    if not cast_once:
        layer["forward"]["gemm"] += w_cast
    fwd = sum(x for k, x in layer["forward"].items() if k != "launch")
    bwd = sum(x for k, x in layer["backward"].items() if k != "launch")
    policy = opts.checkpoint
    r = recompute_fraction(cfg, policy) if policy not in ("full", "none", "selective") else 0.0
    named = {"full": fwd, "none": 0.0, "selective": layer["forward"]["attention"]}
    redo = named.get(policy, r * fwd) if isinstance(policy, str) else r * fwd  # an int: every k-th layer
    m = plan.size("model")
    tp_one = nccl_s("all_reduce", t * d * e_a, nets.get("model"))
    tp_fwd, tp_bwd = 2 * tp_one, (4 if policy == "full" else 2) * tp_one
    # sequence parallel (`SP_WGRAD_GATHERS`): the backward gathers the weight-gradient GEMMs' inputs again
    tp_regather = nccl_s("all_gather", t * d * e_a, nets.get("model")) if opts.tp_overlap and m > 1 else 0.0
    tp_bwd += SP_WGRAD_GATHERS * tp_regather
    kv_bytes = seqs * seq * 2 * kv_heads_per_chip(cfg, m) * cfg.head_dim * e_a
    cp_one = nccl_s("all_gather", kv_bytes, nets.get("sequence"))
    cp_f = max(0.0, cp_one - layer["forward"]["attention"])
    cp_b = max(0.0, 2 * cp_one - layer["backward"]["attention"])
    ep_one = nccl_s("all_to_all", t * cfg.experts_per_token * d * e_a, nets.get("expert")) if cfg.n_experts else 0.0
    dense, routed = layer_split(cfg)
    layer_w = (dense / m + routed / (m * plan.size("expert"))) * e_w
    f = plan.size("fsdp")
    ag = nccl_s("all_gather", layer_w, nets.get("fsdp")) if opts.zero >= 3 and f > 1 else 0.0
    rs = nccl_s("reduce_scatter", layer_w * e_g / e_w, nets.get("fsdp")) if opts.zero >= 2 and f > 1 else 0.0
    ag_b = ag if opts.reshard_after_forward else 0.0  # weights kept from the forward: no second gather
    # what overlapping costs the compute beside it: the SM share each collective's kernels hold, x sm_interference
    sms = kernels.sms if isinstance(kernels, GpuKernels) else chip.tensor_cores
    fsdp_net = nets.get("fsdp")
    ag_share = collective_sm_share("all_gather", layer_w, fsdp_net, sms) if ag else 0.0
    rs_share = collective_sm_share("reduce_scatter", layer_w * e_g / e_w, fsdp_net, sms) if rs else 0.0
    tp_share = min(1.0, TE_UB_SMS / sms) if opts.tp_overlap and m > 1 else 0.0
    k_i = c.sm_interference

    def beside(fsdp_s: float, fsdp_share: float, tp_s: float) -> float:
        """Interference of one layer's overlapped collectives: the longer one's SM share x sm_interference."""
        if opts.tp_overlap and tp_s > fsdp_s:
            return k_i * tp_share
        return k_i * fsdp_share
    seq_f, seq_b = cp_f + 2 * ep_one, cp_b + 2 * ep_one  # these wait on the layer's own work: added to it
    chunks = _stage_layers(cfg.n_layers, p * v)
    per_stage: list[float] = []
    exposed_at: list[dict[str, float]] = []  # per stage: what each collective adds to its layers' compute
    for stage in range(p):
        total = 0.0
        exposed = {"tp": 0.0, "fsdp": 0.0, "cp": 0.0, "ep": 0.0}
        for chunk in range(v):
            n_l = chunks[chunk * p + stage]
            b_share = _mean_share([(ag_b, ag_share), (rs, rs_share)])
            tf, _ = overlapped_layers_s(n_l, fwd + seq_f, ag, tp_fwd, opts.tp_overlap, beside(ag, ag_share, tp_fwd))
            tb, _ = overlapped_layers_s(n_l, bwd + redo + seq_b, ag_b + rs, tp_bwd, opts.tp_overlap,
                                        beside(ag_b + rs, b_share, tp_bwd))
            total += tf + tb
            nf, _ = overlapped_layers_s(n_l, fwd + seq_f, ag, 0.0, False, k_i * ag_share)
            nb, _ = overlapped_layers_s(n_l, bwd + redo + seq_b, ag_b + rs, 0.0, False, k_i * b_share)
            exposed["tp"] += _excess(tf + tb, nf + nb)
            exposed["fsdp"] += _excess(nf + nb, n_l * (fwd + seq_f + bwd + redo + seq_b))
            exposed["cp"] += n_l * (cp_f + cp_b)
            exposed["ep"] += n_l * 4 * ep_one
        per_stage.append(total)
        exposed_at.append(exposed)
    head = [(t, d, cfg.vocab_size / m)]  # in 16 bits under FP8 too (`FP8_HEAD`): no casts
    head_gemm = kern.gemm(*head[0], dtype=FP8_HEAD) + kern.gemm(d, t, cfg.vocab_size / m, dtype=FP8_HEAD) + \
        kern.gemm(t, cfg.vocab_size / m, d, dtype=FP8_HEAD)
    head_vec = kern.vector(LOSS_BYTES_PER_LOGIT * t * cfg.vocab_size / m)  # the fp32 loss over the logits
    per_stage[-1] += head_gemm + head_vec
    per_stage[0] += kern.vector(2 * t * d * e_a)  # the embedding lookup (and its gradient scatter)
    slowest, sum_s = max(per_stage), sum(per_stage)
    pipelined = (mb - 1 / v) * slowest + sum_s / v if p > 1 else mb * per_stage[0]
    # each tensor-parallel rank sends its 1/m of the activations (Megatron's scatter-gather: the next stage's ranks
    # AllGather them over NVLink; with sequence parallelism they are sharded anyway)
    send = p2p_s(t * d * e_a / m, nets.get("pipeline")) if p > 1 else 0.0
    p2p = 2 * (p * v - 1) * send
    # the steady state's exchanges (Megatron-Core 0.8 p2p_communication._communicate): under the interleaved schedule
    # they run beside the compute (overlap_p2p_comm, on by default there; the 2021-22 Megatron-LM code had none) and
    # slow it by their SMs' share; otherwise each microbatch's two exchanges are waited on (wait_on_reqs, then
    # torch.cuda.synchronize under batch_p2p_sync), so every microbatch after the first adds them to the step
    if p > 1 and v > 1 and c.framework not in P2P_BLOCKING:
        p2p_share = collective_sm_share("send", t * d * e_a / m, nets.get("pipeline"), sms)
        p2p += k_i * p2p_share * P2P_KERNELS * mb * v * send
    elif p > 1:
        p2p += 2 * v * (mb - 1) * send
    stage_layers = max(sum(chunks[k * p + s] for k in range(v)) for s in range(p))
    tables = (1 if cfg.tied_embeddings or p > 1 else 2) * cfg.vocab_size * d / m
    held = stage_layers * (dense / m + routed / (m * plan.size("expert"))) + tables
    # gradients after the last microbatch: ZeRO-1 reduce-scatters them over fsdp, ZeRO-0 AllReduces them, and the
    # replicas (data) AllReduce the shard -- bucketed behind that microbatch's backward (DDP, Megatron's
    # --overlap-grad-reduce); ZeRO-1/2 gather the updated weights behind the next step's first forward
    # (--overlap-param-gather, FSDP's prefetch). What a window does not cover is exposed; what it covers slows the
    # compute beside it by its interference (SM share x sm_interference).
    whole, grads = held * e_w, held * e_g
    kind_b = "reduce_scatter" if opts.zero == 1 else "all_reduce"
    after_b = nccl_s(kind_b, grads, fsdp_net) if f > 1 and opts.zero in (0, 1) else 0.0
    before_f = nccl_s("all_gather", whole, fsdp_net) if f > 1 and opts.zero in (1, 2) else 0.0
    shard = held / (f if opts.zero >= 1 else 1)
    dp_ar = nccl_s("all_reduce", shard * e_g, nets.get("data"))
    share_b = _mean_share([(after_b, collective_sm_share(kind_b, grads, fsdp_net, sms)),
                           (dp_ar, collective_sm_share("all_reduce", shard * e_g, nets.get("data"), sms))])
    share_f = collective_sm_share("all_gather", whole, fsdp_net, sms)
    last = max(1, stage_layers)
    window_b = stage_layers / v * (bwd + redo) * (1 - 1 / last)  # the last backward after its first bucket
    window_f = stage_layers / v * fwd * (1 - 1 / last)  # the first forward after its first layer's gather
    if v == 1:  # one chunk: its reductions bucketed inside the last backward, its gathers inside the first forward
        hidden = [(after_b + dp_ar, window_b, share_b), (before_f, window_f, share_f)]
        exposed_grads = sum(max(t - w, t / last) for t, w, _ in hidden if t)
        slowed = k_i * sum(share * min(t, w) for t, w, share in hidden)
    else:  # interleaved: each chunk's reductions and gathers behind the other chunks' passes
        group = min(p, mb)  # microbatches a chunk runs back to back (Megatron: the pipeline size)
        ex_b = chunked_grad_sync_exposed_s(after_b + dp_ar, v, group * stage_layers / v * (bwd + redo))
        ex_f = chunked_param_gather_exposed_s(before_f, v, group * stage_layers / v * fwd, window_f, last)
        exposed_grads = ex_b + ex_f
        slowed = k_i * (share_b * (after_b + dp_ar - ex_b) + share_f * (before_f - ex_f))
    optimizer = kern.vector(shard * adamw_bytes_per_param(e_w, opts.master_copy), "optimizer")
    weight_casts = stage_layers * w_cast if cast_once else 0.0  # the busiest stage's, once per step
    step = pipelined + p2p + exposed_grads + slowed + optimizer + weight_casts + c.step_overhead_s
    # the factors describe the slowest stage (the last on ties: it holds the head), which sets the pipeline's pace;
    # its bubble is what the schedule adds over its own microbatches, so the factors add up to the step
    crit = max(range(p), key=lambda i: (per_stage[i], i))
    layers = mb * sum(chunks[k * p + crit] for k in range(v))  # layer passes of that stage per step
    last, first = (mb if crit == p - 1 else 0), (mb if crit == 0 else 0)
    embed = kern.vector(2 * t * d * e_a)
    lf, lb = layer["forward"], layer["backward"]
    exposed = exposed_at[crit]
    factors = {
        "matmul_s": layers * (lf["gemm"] + lb["gemm"]) + last * head_gemm + weight_casts,
        "attention_s": layers * (lf["attention"] + lb["attention"]),
        "vector_s": layers * (lf["vector"] + lb["vector"]) + last * head_vec + first * embed,
        "launch_s": layers * (lf["launch"] + lb["launch"]),
        "recompute_s": layers * redo,
        "exposed_tp_s": mb * exposed["tp"], "exposed_fsdp_s": mb * exposed["fsdp"],
        "exposed_grads_s": exposed_grads + slowed, "exposed_cp_s": mb * exposed["cp"],
        "exposed_ep_s": mb * exposed["ep"],
        "bubble_s": max(0.0, pipelined - mb * per_stage[crit]), "p2p_s": p2p, "optimizer_s": optimizer,
        "overhead_s": c.step_overhead_s,
    }
    flops = model_flops(cfg, batch, seq)
    peak = plan.chips * chip.peak_flops_per_s() * step
    return {"step_time_s": step, "mfu": flops / peak, "factors": factors,
            "mfu_by_convention": {"podsim": flops / peak, "palm": palm_flops(cfg, batch, seq) / peak},
            "tokens_per_s": batch * seq / step, "stage_microbatch_s": per_stage, "layers_per_stage": chunks,
            "per_layer_s": {"forward": lf, "backward": lb, "tp_all_reduce": tp_one, "tp_wgrad_all_gather": tp_regather,
                            "fsdp_all_gather": ag,
                            "fsdp_reduce_scatter": rs, "cp_kv_pass": cp_one, "ep_all_to_all": ep_one,
                            "dp_all_reduce": dp_ar, "zero_after_backward": after_b, "zero_before_forward": before_f},
            "grad_reduce": {"bytes_per_element": e_g, "per_layer_reduce_scatter_s": rs,
                            "after_backward_s": after_b + dp_ar,
                            "total_s": layers * rs + after_b + dp_ar},
            "axis_bus_bytes_per_s": {a: n.bus_bytes_per_s for a, n in nets.items()},
            "axis_links": {a: n.kind for a, n in nets.items()}}


def require_kernels(chip: ChipSpec) -> GpuKernels:
    """The chip's GPU kernel model, or `PlanError` naming the chips that have one."""
    from simulator.hardware.gpu_kernels import kernel_chips

    k = gpu_kernels(chip.name)
    if k is None:
        raise PlanError(f"no GPU kernel model for chip {chip.name!r}; GPU chips with one: {', '.join(kernel_chips())}")
    if k.hbm_bytes_per_s != chip.hbm_bandwidth_bytes_per_s:  # a part with other HBM (a chip file, a 96GB H100)
        k = replace(k, hbm_bytes_per_s=chip.hbm_bandwidth_bytes_per_s)
    return k


def uncalibrated_parts(chip: ChipSpec, plan: MeshPlan, opts: TrainOptions, cfg: TransformerConfig,
                       framework: str = "") -> list[str]:
    """What of this step's forecast no published GPU run pinned: the chip (its step constants fitted on other
    GPUs), and each mesh axis or option no fit row used."""
    from simulator.hardware.train_calibration import gpu_fit_summary

    fitted = gpu_fit_summary()
    out = []
    if chip.name not in fitted.get("fit_chips", []):
        out.append(f"{chip.name} training-step constants (fitted on {', '.join(fitted.get('fit_chips', [])) or 'no'} "
                   "runs; its kernels are its own)")
    if chip.name not in calibrated_chips() or "nvlink" not in get_calibration(chip.name).links:
        out.append(f"{chip.name} NVLink efficiency (no measurement: collectives at line rate)")
    alias = fitted.get("aliases", {}).get(framework)
    if alias:
        out.append(f"framework {framework} (no fitted runs: takes {alias}'s constants)")
    axes = set(fitted.get("fit_axes", []))
    out += [f"{a} axis (no fitted GPU run uses it: priced from the kernel and NCCL models alone)"
            for a in plan.used if a not in axes]
    if cfg.n_experts and "moe" not in fitted.get("fit_features", []):
        out.append("mixture-of-experts layers (no fitted GPU run)")
    if opts.tp_overlap and "tp_overlap" not in fitted.get("fit_features", []):
        out.append("tp_overlap (no fitted GPU run overlaps tensor-parallel collectives)")
    return out


def calibrated_gpu_step(cfg: TransformerConfig, chip: ChipSpec, plan: MeshPlan, opts: TrainOptions, batch: int,
                        seq: int, constants: GpuStepConstants | None = None, framework: str | None = None,
                        attention: str | None = None, dtype: str = "bf16", grad_reduce_bytes: float | None = None
                        ) -> dict[str, Any]:
    """The forecast of one GPU training step as ``framework`` runs it (None: the default framework) beside its
    bound (``ideal``: peak kernels, line-rate links, no fixed costs), with ``uncalibrated`` naming what no fit
    pinned. ``attention`` (None: the framework's kernel) is one of `ATTENTION`; ``grad_reduce_bytes`` as in
    `gpu_step_factors` (None: the framework's default, `FRAMEWORK_GRAD_REDUCE`, for 16-bit weights)."""
    c = constants or gpu_step_constants(chip.name, framework)
    attention = attention or c.attention
    if grad_reduce_bytes is None and cfg.weight_elem_bytes < 4:  # 16-bit weights: the framework's reduce dtype
        grad_reduce_bytes = GRAD_REDUCE_DTYPES[FRAMEWORK_GRAD_REDUCE.get(framework or c.framework, "fp32")]
    cal = gpu_step_factors(cfg, chip, plan, opts, batch, seq, c, require_kernels(chip), attention, dtype,
                           grad_reduce_bytes)
    ideal = gpu_step_factors(cfg, chip, plan, opts, batch, seq, None, IdealKernels(chip), attention, dtype,
                             grad_reduce_bytes)
    return {**cal, "ideal": {k: ideal[k] for k in ("step_time_s", "mfu", "factors")}, "chips": plan.chips,
            "gpus_per_node": GPUS_PER_NODE, "nodes": max(1, plan.chips // GPUS_PER_NODE), "attention": attention,
            "framework": c.framework, "compute_dtype": dtype, "checkpoint": opts.checkpoint, "constants": asdict(c),
            "uncalibrated": uncalibrated_parts(chip, plan, opts, cfg, c.framework)}


__all__ = ["ATTENTION", "FRAMEWORK_GRAD_REDUCE", "GRAD_REDUCE_DTYPES", "LOSS_BYTES_PER_LOGIT", "TE_UB_SMS",
           "IdealKernels", "calibrated_gpu_step", "chunked_grad_sync_exposed_s", "chunked_param_gather_exposed_s",
           "collective_sm_share", "gpu_step_factors", "require_kernels",
           "uncalibrated_parts"]
