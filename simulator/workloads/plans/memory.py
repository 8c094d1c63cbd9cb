"""Memory of a training step, for the whole model and per chip, under a parallelism plan.

Mixed-precision state per parameter: weights and gradients in the model's weight dtype (bf16, 2 B),
Adam's two moments in fp32 (8 B) and, when ``master_copy`` is kept (the default, as in
mixed-precision training), an fp32 master copy of the weights (4 B). Activations: the tensors each
layer saves for its backward pass, per token, by checkpoint policy -- ``none`` keeps everything the
layer computes (`saved_activation_elements`), ``full`` keeps only the layer input (one [tokens,
d_model] tensor; the backward recomputes the forward), ``selective`` drops the MLP's wide hidden
tensors (recomputing the up-projections), ``minimal`` keeps every weight matmul's output (the
layer input, QKV, O, gate and up, down; only element-wise work is recomputed), and a number K
keeps K [tokens, d_model] tensors.

Per chip: tensor parallelism divides weights and saved activations by ``model`` (norm inputs are
sequence-parallel, Megatron-style); pipeline stages hold their layers (the first also the embedding,
the last the output projection); the fsdp axis shards optimizer state (ZeRO-1), gradients (ZeRO-2)
and weights (ZeRO-3); the expert axis splits the routed experts. Activations are held for the
microbatches a stage has in flight (the pipeline stash: GPipe M, 1F1B min(M, p), interleaved
Megatron's warm-up count); temporaries are the gathered weights of two layers (FSDP prefetch) and one
layer's unreduced gradients, the tensors a checkpointed layer rebuilds for its backward beyond those its
policy kept, and fp32 logits.

Assumptions, held against MaxText's published runs (tests/test_train_memory_published.py):
- Gathered weights and per-layer gradients are in the compute dtype, min(weight, activation) bytes: with
  fp32 weights (MaxText's ``weight_dtype: float32``) the layer casts each weight to bf16, an element-wise
  op XLA's sharding propagation applies to the shard, so the FSDP all-gather and the unreduced gradient
  matmuls move bf16 (MaxText PR #1350 cast the one path that did not, pipeline ``fsdp_ag_once``, whose fp32
  copy of the gathered weights and gradients had run llama-405B out of memory).
  Counting them at 4 B made v5e 32B and 64B (full remat, fsdp=256) "not fit" by 3.8 and 4.0 GiB though they ran.
- Fp32 weights are their own master copy (``published.py`` sets ``master_copy=False``): 4 + 4 + 8 B of
  state per parameter; bf16 weights keep a 4 B master copy unless ``master_copy`` is off.
- A policy's saved tensors are MaxText's: ``minimal`` is ``checkpoint_dots_with_no_batch_dims`` (every
  weight matmul's output, the layer input as the scan carry), ``full`` keeps the layer input. The policy is
  a bound XLA can beat: its rematerialization pass recomputes past the policy when HBM is short, so a
  published run may fit where this count says it does not (v5p 32B, ``minimal`` at 7 sequences a chip:
  the kept matmul outputs alone are 91 GiB of the chip's 96).
"""
from __future__ import annotations

import math
from typing import Any

from simulator.hardware.facts import nominal_hbm_bytes
from simulator.hardware.specs import ChipSpec
from simulator.workloads.budget import saved_activation_elements
from simulator.workloads.plans.layout import MeshPlan, TrainOptions
from simulator.workloads.transformer import TransformerConfig

ADAM_BYTES = 8  #: two fp32 moments per parameter
MASTER_BYTES = 4  #: fp32 master weights per parameter, when kept
LOGIT_BYTES = 4  #: fp32 logits for the loss


def layer_split(cfg: TransformerConfig) -> tuple[int, int]:
    """(dense, routed-expert) parameters of one layer: attention, norms, router and shared experts (or the
    dense MLP) against the routed experts, which an expert axis splits."""
    if not cfg.n_experts:
        return cfg.layer_params(), 0
    routed = cfg.n_experts * cfg.expert_params()
    return cfg.layer_params() - routed, routed


def saved_elements(cfg: TransformerConfig, checkpoint: str | int) -> float:
    """Elements per token per layer saved for the backward pass under a checkpoint policy."""
    full = saved_activation_elements(cfg)
    if checkpoint == "none":
        return full
    if checkpoint == "full":
        return cfg.d_model
    if checkpoint == "selective":
        return full - (3 if cfg.gated_mlp else 2) * cfg.d_ff * max(1, cfg.experts_per_token)
    if checkpoint == "minimal":  # the layer input and every weight matmul's output: QKV, O, gate/up, down
        mats = 3 if cfg.gated_mlp else 2
        return min(full, 3 * cfg.d_model + cfg.q_width + 2 * cfg.kv_width
                   + (mats - 1) * cfg.d_ff * max(1, cfg.experts_per_token))
    return min(full, int(checkpoint) * cfg.d_model)


def recompute_fraction(cfg: TransformerConfig, checkpoint: str | int) -> float:
    """Share of each layer's forward the backward pass recomputes: 0 (none) to 1 (full); selective
    recomputes the MLP's up-projections; K tensors interpolate linearly between 1 (K = 1) and 0 (all kept)."""
    if checkpoint in ("none", "minimal"):  # minimal keeps every matmul output: only element-wise work is redone
        return 0.0
    if checkpoint == "full":
        return 1.0
    full = saved_activation_elements(cfg) / cfg.d_model
    if checkpoint == "selective":
        mats = 3 if cfg.gated_mlp else 2
        mlp = mats * cfg.d_ff * cfg.d_model * max(1, cfg.experts_per_token)
        return (mats - 1) / mats * mlp / (cfg.matmul_params_per_token() / cfg.n_layers)
    k = int(checkpoint)
    return 0.0 if k >= full else max(0.0, (full - k) / (full - 1))


def in_flight_layers(cfg: TransformerConfig, plan: MeshPlan, opts: TrainOptions) -> float:
    """Layer-microbatches of saved activations stage 0 holds at its peak."""
    p, m, v = plan.size("pipeline"), opts.microbatches, opts.chunks
    per_stage = cfg.n_layers / p
    if opts.schedule == "gpipe":  # every forward before any backward (`schedules.tasks`), a pipeline or none
        return m * per_stage
    if p == 1:  # gradient accumulation: one microbatch's forward, then its backward
        return per_stage
    if opts.schedule == "1f1b" or v == 1:
        return min(m, p) * per_stage
    return min(m * v, 2 * (p - 1) + (v - 1) * p + 1) * per_stage / v


def stage_params(cfg: TransformerConfig, plan: MeshPlan, stage: int) -> tuple[float, float, float]:
    """(dense, expert, one layer's dense + expert) parameters one chip of ``stage`` holds before fsdp sharding."""
    p, mdl, e = plan.size("pipeline"), plan.size("model"), plan.size("expert")
    dense, routed = layer_split(cfg)
    layers = cfg.n_layers // p
    table = cfg.vocab_size * cfg.d_model
    extra = 0.0
    if stage == 0:
        extra += table + (cfg.max_positions * cfg.d_model if cfg.learned_positions else 0)
    if stage == p - 1:
        extra += (0 if cfg.tied_embeddings and p == 1 else table) + cfg.norm_params()
    layer = dense / mdl + routed / (mdl * e)
    return layers * dense / mdl + extra / mdl, layers * routed / (mdl * e), layer


def train_memory(cfg: TransformerConfig, chip: ChipSpec, plan: MeshPlan, opts: TrainOptions, batch: int,
                 seq: int) -> dict[str, Any]:
    """Whole-model state (``params_bytes`` ... ``train_state_bytes``) and the busiest chip's peak."""
    n = cfg.params()
    opt_per_param = ADAM_BYTES + (MASTER_BYTES if opts.master_copy else 0)
    saved = saved_elements(cfg, opts.checkpoint)
    whole = {"params_bytes": n * cfg.weight_elem_bytes, "grads_bytes": n * cfg.weight_elem_bytes,
             "optimizer_bytes": n * opt_per_param,
             "activations_bytes": saved * cfg.act_elem_bytes * batch * seq * cfg.n_layers}
    whole["train_state_bytes"] = sum(whole.values())
    stages = [per_chip_memory(cfg, plan, opts, batch, seq, s) for s in {0, plan.size("pipeline") - 1}]
    chip_mem = max(stages, key=lambda d: d["peak_bytes"])
    cap = chip.hbm_capacity_bytes
    return {**whole, "memory_per_chip": chip_mem, "memory_per_chip_bytes": chip_mem["peak_bytes"],
            "hbm_capacity_bytes": cap, "hbm_spare_bytes": cap - chip_mem["peak_bytes"],
            "fits": chip_mem["peak_bytes"] <= cap, "min_chips": max(1, math.ceil(whole["train_state_bytes"] / cap)),
            "master_copy": opts.master_copy, "optimizer_bytes_per_param": opt_per_param}


def per_chip_memory(cfg: TransformerConfig, plan: MeshPlan, opts: TrainOptions, batch: int, seq: int,
                    stage: int) -> dict[str, float]:
    """Bytes one chip of pipeline ``stage`` holds at its peak, by kind."""
    f, z, mdl = plan.size("fsdp"), opts.zero, plan.size("model")
    dense, expert, layer = stage_params(cfg, plan, stage)
    held = dense + expert
    e_w, e_a = cfg.weight_elem_bytes, cfg.act_elem_bytes
    tokens = batch / (plan.batch_ways * opts.microbatches) * seq / plan.size("sequence")  # per microbatch
    per_layer_act = tokens * e_a / mdl
    acts = saved_elements(cfg, opts.checkpoint) * per_layer_act * in_flight_layers(cfg, plan, opts)
    one_mb = saved_elements(cfg, opts.checkpoint) * per_layer_act * cfg.n_layers / plan.size("pipeline")
    temp = 0.0
    if z >= 3 and f > 1:  # two gathered layers (prefetch) and one layer's unreduced gradients, in the compute dtype
        temp += 3 * layer * min(e_w, e_a)
        if not opts.reshard_after_forward:  # every layer's gathered weights kept from its forward to its backward
            temp += held * e_w * (1 - 1 / f)
    if opts.checkpoint != "none":  # one layer rebuilt for its backward: what the policy did not keep
        temp += (saved_activation_elements(cfg) - saved_elements(cfg, opts.checkpoint)) * per_layer_act
    if stage == plan.size("pipeline") - 1:
        temp += tokens * cfg.vocab_size / mdl * LOGIT_BYTES
    opt_per_param = ADAM_BYTES + (MASTER_BYTES if opts.master_copy else 0)
    out = {"params_bytes": held * e_w / (f if z >= 3 else 1), "grads_bytes": held * e_w / (f if z >= 2 else 1),
           "optimizer_bytes": held * opt_per_param / (f if z >= 1 else 1), "activations_bytes": acts,
           "pipeline_stash_bytes": acts - one_mb if plan.size("pipeline") > 1 else 0.0, "temporary_bytes": temp}
    out["peak_bytes"] = sum(v for k, v in out.items() if k != "pipeline_stash_bytes")
    out["stage"] = stage
    return out


def book_memory(cfg: TransformerConfig, chip: ChipSpec, checkpoint: str | int, tokens: float,
                chips: int) -> dict[str, Any]:
    """A training step's memory as the book counts it (ch. training question 2, ch. applied-training "How many
    TPUs do we need at minimum"): parameters in the weight dtype (bf16: 2 B each), a float32 Adam state (two
    moments, 8 B each; no master copy, no gradients), and the checkpointed activations of ``tokens`` tokens --
    ``checkpoint_bytes`` under the run's ``--checkpoints-per-layer`` (K [tokens, d_model] tensors a layer, the
    book's count in applied-training), and ``ffw_outputs`` the book's training-chapter policy, the outputs of
    the three big FFW matmuls ([tokens, D] + 2 [tokens, F] a layer; [tokens, D] + [tokens, F] for an ungated
    MLP). Totals, the share of ``chips`` chips, and the fewest chips whose HBM (decimal GB, as the book divides:
    `nominal_hbm_bytes`) holds the total (``min_chips``) or the parameters and optimizer alone
    (``min_chips_for_state``). Bytes; a bound (no temporaries, fragmentation or framework overhead)."""
    n = cfg.params()
    params = n * cfg.weight_elem_bytes
    optimizer = n * ADAM_BYTES
    state = params + optimizer
    per_layer = saved_elements(cfg, checkpoint)
    ckpt = per_layer * cfg.act_elem_bytes * tokens * cfg.n_layers
    ffw = (cfg.d_model + (2 if cfg.gated_mlp else 1) * cfg.d_ff) * cfg.act_elem_bytes * tokens * cfg.n_layers
    hbm = nominal_hbm_bytes(chip)
    per = "per_chip_bytes"
    return {"params_bytes": params, "optimizer_bytes": optimizer, "state_bytes": state,
            "checkpoints_per_layer": per_layer / cfg.d_model, "checkpoint_bytes": ckpt, "total_bytes": state + ckpt,
            "chips": chips, "per_chip_bytes": (state + ckpt) / chips, "hbm_bytes_book": hbm,
            "min_chips": max(1, math.ceil((state + ckpt) / hbm)), "min_chips_for_state": max(1, math.ceil(state / hbm)),
            "ffw_outputs": {"checkpoint_bytes": ffw, "total_bytes": state + ffw, per: (state + ffw) / chips,
                            "min_chips": max(1, math.ceil((state + ffw) / hbm))}}


def book_fsdp_model(cfg: TransformerConfig, tokens: float, chips: int) -> dict[str, float]:
    """The book's mixed FSDP + tensor-parallel split of ``chips`` chips for a batch of ``tokens`` tokens (ch.
    training, "FSDP + model parallelism"; applied-training: sqrt(2 x 4.19e6 x 8960 / 28672) = 1618): the
    FSDP degree minimising the communication, X_opt = sqrt(2 B N / F), and the tensor-parallel degree N / X_opt
    beside it; and ``tokens_per_chip`` = B / N, what pure FSDP over every chip leaves each (468 for 4M tokens
    on 8960 chips). Counts and tokens."""
    x = math.sqrt(2 * tokens * chips / cfg.d_ff)
    return {"tokens_per_chip": tokens / chips, "x_opt": x, "model_ways_at_x_opt": chips / x}
