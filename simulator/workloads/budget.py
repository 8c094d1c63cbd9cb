"""Closed-form budgets of a Transformer step: parameters, bytes, KV cache, FLOPs, bounds, fit.

A decode step has ``batch`` requests, request r with ``context[r]`` cached positions, each adding one
new token (so it attends over context + 1 sources). The mesh is ``data`` x ``model`` chips: requests
split over data, heads / MLP columns / KV heads over model (tensor parallelism, Megatron-style);
weights are replicated over data. REFERENCE.md's seed example (llama-like 7B, 4 x 8192 positions)
gives 14.807 GiB of weights + KV, 63.596 GFLOPs and 15.899 GB of HBM reads per step
(``hbm_read_bytes_per_step``; ``hbm_bytes_per_step`` adds the new tokens' KV writes).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from simulator.errors import PodsimError
from simulator.hardware.specs import ChipSpec, check_dtype, check_storage_dtype
from simulator.units import check_int, parse_int, show
from simulator.workloads.transformer import ModelError, TransformerConfig

GiB = 2.0**30
MAX_REQUESTS = 1_000_000  #: requests in one step; more is almost surely a units mistake
NEVER_COMPUTE_BOUND = ("no batch makes this step compute-bound at this context: each request adds more KV-cache "
                       "reading time than compute time")
MAX_CHIPS = 65_536  #: data x model chips (as many as the largest topology podsim builds)


@dataclass(frozen=True)
class Parallelism:
    """``data`` x ``model`` chips: requests split over data, heads and MLP columns over model."""

    data: int = 1
    model: int = 1

    @property
    def chips(self) -> int:
        return self.data * self.model


def parse_parallelism(text: str | None) -> Parallelism:
    """``"data=2,model=4"`` (either optional) -> `Parallelism`."""
    if not text:
        return Parallelism()
    sizes = {"data": 1, "model": 1}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in sizes:
            raise PodsimError(f"--mesh {show(text)}: {show(part.strip())} must be data=D or model=M with a whole "
                              "number >= 1")
        sizes[key] = parse_int(value, name=key, maximum=MAX_CHIPS, error=PodsimError, where=f"--mesh {show(text)}: ")
    return Parallelism(**sizes)


def check_layout(cfg: TransformerConfig, par: Parallelism, batch: int) -> None:
    """Raise `ModelError` when the batch is not a whole number >= 1 or the mesh does not divide the
    model's dimensions or the batch."""
    check_int(batch, name="batch", maximum=MAX_REQUESTS, error=ModelError)
    m = par.model
    for field, value in (("n_heads", cfg.n_heads), ("d_ff", cfg.d_ff)):
        if value % m:
            raise ModelError(f"mesh model={m} does not divide {field}={value} of {cfg.name}; use a divisor")
    if cfg.n_kv_heads % m and m % cfg.n_kv_heads:
        raise ModelError(f"mesh model={m} and n_kv_heads={cfg.n_kv_heads} of {cfg.name}: one must divide the other "
                         "(KV heads are split over model chips, or replicated when there are fewer)")
    if batch % par.data:
        raise ModelError(f"mesh data={par.data} does not divide batch={batch}; use a multiple of {par.data}")


def kv_heads_per_chip(cfg: TransformerConfig, model: int) -> float:
    """KV heads each model-parallel chip holds: a share, or one replicated head when there are fewer."""
    return cfg.n_kv_heads / model if cfg.n_kv_heads >= model else 1.0


KV_SHARDINGS = ("heads", "batch", "sequence", "auto")


def kv_share_per_chip(cfg: TransformerConfig, par: Parallelism, batch: int, how: str = "heads") -> tuple[float, str]:
    """Share of the whole KV cache one chip holds, and the layout: ``heads`` splits KV heads over the model
    axis (replicating them when it has more chips than heads); ``batch`` splits requests and ``sequence``
    positions over it (each chip then holds 1 / (data x model)); ``auto`` uses heads while they last and
    splits the rest of the model axis by batch when the requests divide, else by sequence."""
    if how not in KV_SHARDINGS:
        raise PodsimError(f"--kv-sharding {show(how)}; valid: {', '.join(KV_SHARDINGS)}")
    m, per_group = par.model, batch // par.data
    full = 1 / (m * par.data)
    if how == "heads" or (how == "auto" and cfg.n_kv_heads % m == 0):
        return kv_heads_per_chip(cfg, m) / cfg.n_kv_heads / par.data, "heads"
    if how == "auto":
        rest = m // math.gcd(m, cfg.n_kv_heads)
        return full, "heads x batch" if per_group % rest == 0 else "heads x sequence"
    if how == "batch" and per_group % m:
        raise PodsimError(f"--kv-sharding batch splits the {per_group} requests of each data group over model={m} "
                          f"chips; use a batch that is a multiple of {m * par.data}, or --kv-sharding sequence")
    return full, how


def kv_bytes_per_position(cfg: TransformerConfig) -> float:
    """K and V of one position over all layers: 2 L N_KV H bytes_per_element."""
    return 2 * cfg.n_layers * cfg.kv_width * cfg.kv_elem_bytes


def experts_touched(cfg: TransformerConfig, tokens: float) -> float:
    """Expected distinct experts per layer that ``tokens`` tokens route to (uniform top-k routing)."""
    if not cfg.n_experts:
        return 0.0
    e, k = cfg.n_experts, cfg.experts_per_token
    return float(e * (1 - (1 - k / e) ** tokens) + cfg.n_shared_experts)


def weight_bytes_read(cfg: TransformerConfig, tokens: float) -> float:
    """Weights a step streams from HBM: all of them, except lookup tables (the input embedding when it is
    not tied to the output projection, learned positions), of which only the tokens' rows are read, and
    MoE experts no token routes to."""
    e = cfg.weight_elem_bytes
    total = cfg.params() * e
    tables = (0 if cfg.tied_embeddings else cfg.vocab_size) + (cfg.max_positions if cfg.learned_positions else 0)
    rows = (1 if not cfg.tied_embeddings else 0) + (1 if cfg.learned_positions else 0)
    total -= (tables - rows * tokens) * cfg.d_model * e
    if not cfg.n_experts:
        return total
    idle = cfg.n_experts + cfg.n_shared_experts - experts_touched(cfg, tokens)
    return total - cfg.n_layers * idle * cfg.expert_params() * cfg.weight_elem_bytes


def decode_flops(cfg: TransformerConfig, contexts: Sequence[int], new_tokens: int = 1) -> dict[str, float]:
    """FLOPs of one step: 2 x matmul parameters per token, plus QK^T and AV per (query, source) pair.

    Request r adds ``new_tokens`` tokens after ``contexts[r]`` cached ones; its t-th new token attends
    causally to context + t sources (decode: new_tokens = 1, context + 1 sources).
    """
    weights = 2.0 * cfg.matmul_params_per_token() * len(contexts) * new_tokens
    per_source = 2.0 * cfg.n_layers * cfg.q_width  # one of QK^T or AV, per source position
    sources = sum(new_tokens * c + new_tokens * (new_tokens + 1) // 2 for c in contexts)
    return {"weight_matmul_flops": weights, "attention_qk_flops": per_source * sources,
            "attention_av_flops": per_source * sources, "flops": weights + 2 * per_source * sources}


def params_by_part(cfg: TransformerConfig) -> dict[str, float]:
    """Parameters by part (counts): every layer's attention (Q, K, V, O), MLPs (or experts, with the router),
    norms, the embeddings; ``attention_fraction`` is attention over attention + MLP, the book's 4DNH / (4DNH +
    3DF) (transformers, question 1: 1/4 for F = 4D and N H = D)."""
    attention = cfg.n_layers * cfg.attention_params()
    mlp = cfg.n_layers * (cfg.layer_params() - cfg.attention_params() - 2 * cfg.norm_params())
    return {"attention": attention, "mlp": mlp, "norms": cfg.n_layers * 2 * cfg.norm_params() + cfg.norm_params(),
            "embeddings": cfg.embedding_params(), "attention_fraction": attention / (attention + mlp)}


def attention_equals_projections_context(cfg: TransformerConfig) -> float:
    """Positions a token attends to where its attention FLOPs (QK^T and AV, 4 q S per layer) equal its Q, K, V
    and O projections' (2 (2 D q + 2 D kv) per layer): S = D (1 + kv / q), the book's T = 2D for multi-head
    attention (transformers, question 5: 8,192 for D = 4096)."""
    return cfg.d_model * (1 + cfg.kv_width / cfg.q_width)


def per_op_bound(flops: dict[str, float], par: Parallelism, weight_bytes: float, kv_bytes: float,
                 peak_flops_per_s: float, hbm_bytes_per_s: float) -> dict[str, Any]:
    """The step priced as the book (and a real kernel) does: each operation by its own roofline, then added.

    Per chip: the weight matmuls (every projection, MLP and head: their FLOPs against the weights they stream)
    and attention (QK^T and AV against the KV cache they read and the step's new K and V) each take
    max(T_math, T_mem); ``lower_bound_per_op_s`` is their sum, never below ``lower_bound_s`` = max(total
    compute, total memory), which lets the MLP's compute hide under attention's reads. A bound, like it."""
    chips = par.chips
    ops = {"weight_matmuls": (flops["weight_matmul_flops"] / chips, weight_bytes),
           "attention": ((flops["attention_qk_flops"] + flops["attention_av_flops"]) / chips, kv_bytes)}
    per_op = {}
    for name, (f, b) in ops.items():
        t_c, t_m = f / peak_flops_per_s, b / hbm_bytes_per_s
        per_op[name] = {"flops": f, "hbm_bytes": b, "t_compute_s": t_c, "t_memory_s": t_m, "bound_s": max(t_c, t_m),
                        "bound": "compute" if t_c >= t_m else "memory"}
    return {"per_op": per_op, "lower_bound_per_op_s": sum(op["bound_s"] for op in per_op.values())}


def request_contexts(batch: int, context: int | Sequence[int]) -> list[int]:
    check_int(batch, name="batch", maximum=MAX_REQUESTS, error=PodsimError,
              hint=f"podsim accounts for at most {MAX_REQUESTS:,} requests in one step")
    if isinstance(context, int):
        contexts = [context] * batch
    else:
        contexts = list(context)
        if len(contexts) != batch:
            raise PodsimError(f"got {len(contexts)} context lengths for batch={batch}; give one per request")
    for c in contexts:
        check_int(c, name="context", minimum=0, error=PodsimError)
    return contexts


def decode_budget(cfg: TransformerConfig, chip: ChipSpec, batch: int = 1, context: int | Sequence[int] = 0,
                  par: Parallelism | None = None, weight_dtype: str | None = None,
                  kv_dtype: str | None = None, new_tokens: int = 1, kv_sharding: str = "heads",
                  compute_dtype: str | None = None) -> dict[str, Any]:
    """Every closed-form number of one decode step (per step totals, and per chip on the mesh).

    With ``new_tokens`` > 1 the step is a prefill of that many tokens per request. ``kv_sharding``
    splits the KV cache over the model axis by heads, batch, sequence or auto (`kv_share_per_chip`).
    ``compute_dtype`` sets the MXU rate (default: 8-bit for 8-bit weights, else bf16); bf16 with int8
    weights is weight-only quantization: half the weight bytes at the bf16 FLOP rate.
    """
    par = par or Parallelism()
    cfg = with_dtypes(cfg, weight_dtype, kv_dtype)
    contexts = request_contexts(batch, context)
    check_layout(cfg, par, batch)
    check_int(new_tokens, name="new_tokens", error=PodsimError)
    last = max(contexts) + new_tokens  # positions the step's last new token reaches
    past = cfg.position_note(last, f"context {max(contexts):,} + {new_tokens:,} new "
                                   f"token{'s' if new_tokens > 1 else ''}")
    kv_pos = kv_bytes_per_position(cfg)
    weights = cfg.params() * cfg.weight_elem_bytes
    history, growth = kv_pos * sum(contexts), kv_pos * batch * new_tokens
    flops = decode_flops(cfg, contexts, new_tokens)
    read = weight_bytes_read(cfg, batch * new_tokens)
    kv_share, kv_layout = kv_share_per_chip(cfg, par, batch, kv_sharding)
    dtype = compute_dtype or _compute_dtype(cfg)
    check_dtype(dtype)
    read_per_group = weight_bytes_read(cfg, batch // par.data * new_tokens)  # MoE: experts one group's tokens hit
    per_chip = {"weight_bytes": weights / par.model, "kv_cache_bytes": history * kv_share,
                "hbm_bytes_per_step": read_per_group / par.model + (history + growth) * kv_share,
                "flops_per_step": flops["flops"] / par.chips}
    peak = chip.peak_flops_per_s(dtype)
    t_compute = per_chip["flops_per_step"] / peak
    t_memory = per_chip["hbm_bytes_per_step"] / chip.hbm_bandwidth_bytes_per_s
    out: dict[str, Any] = {
        "model": cfg.name, "chip": chip.name, "batch": batch, "context": contexts if len(set(contexts)) > 1 else
        contexts[0], "data": par.data, "model_parallel": par.model,
        "params_total": cfg.params(), "params_active": cfg.params(active=True),
        "params_by_part": params_by_part(cfg),
        "context_attention_equals_projections": attention_equals_projections_context(cfg),
        "weight_bytes": weights, "kv_cache_bytes": history, "kv_bytes_per_position": kv_pos,
        "kv_growth_bytes_per_step": growth,
        "weights_plus_kv_bytes": weights + history, "new_tokens": new_tokens,
        "flops_per_token": flops["flops"] / (batch * new_tokens), **flops,
        "flops_per_step": flops["flops"], "hbm_bytes_per_step": read + history + growth,
        "hbm_read_bytes_per_step": read + history, "hbm_write_bytes_per_step": growth,
        "weight_bytes_read_per_step": read, "per_chip": per_chip, "t_compute_s": t_compute, "t_memory_s": t_memory,
        "lower_bound_s": max(t_compute, t_memory), "upper_bound_s": t_compute + t_memory,
        "bound": "compute" if t_compute >= t_memory else "memory",
        "critical_batch": _critical_batch(cfg, chip, contexts, par, kv_share, dtype),
        "kv_sharding": kv_layout, "compute_dtype": dtype,
    }
    out.update(per_op_bound(flops, par, read_per_group / par.model, (history + growth) * kv_share, peak,
                            chip.hbm_bandwidth_bytes_per_s))
    if cfg.n_experts:  # the book's rule beside the bisection: the dense C w / (2 W) times E / k (all E experts read)
        out["critical_batch_book"] = (peak * cfg.weight_elem_bytes / (2 * chip.hbm_bandwidth_bytes_per_s)
                                      * cfg.n_experts / max(1, cfg.experts_per_token))
    if out["critical_batch"] == math.inf:  # a report holds no inf: None, and why
        out.update(critical_batch=None, critical_batch_note=NEVER_COMPUTE_BOUND)
    out.update(_fit(cfg, chip, contexts, par, kv_share, new_tokens))
    if past:
        out["notes"] = [past]
    return out


def with_dtypes(cfg: TransformerConfig, weight_dtype: str | None, kv_dtype: str | None) -> TransformerConfig:
    changes = {}
    for field, dtype in (("weight_elem_bytes", weight_dtype), ("kv_elem_bytes", kv_dtype)):
        if dtype is not None:
            changes[field] = check_storage_dtype(dtype)
    return cfg.replace(**changes) if changes else cfg


def _compute_dtype(cfg: TransformerConfig) -> str:
    """8-bit weights run at the 8-bit MXU rate, everything else at the bf16 rate."""
    return "int8" if cfg.weight_elem_bytes == 1 else "bf16"


def _critical_batch(cfg: TransformerConfig, chip: ChipSpec, contexts: list[int], par: Parallelism,
                    kv_share: float, dtype: str | None = None) -> float:
    """Batch (whole mesh, at the mean context) where per-chip compute time reaches per-chip memory time.

    Per chip, compute grows linearly with the batch B; memory is the weights a data group's B / data tokens
    read (``weight_bytes_read``) plus B requests' KV. For a dense model the weights read do not depend on B
    and the crossing is linear. For mixture-of-experts the weights read grow with the experts the batch
    touches, all E of them once B is large, so the crossing sits near (total / active parameters) times
    the dense value, about E/k times it, as the book says; using the k experts one token reads instead
    would come out E/k times too small. The memory side is concave in B, so compute - memory is convex
    and negative at B = 0: one crossing, found by bisection.
    """
    ctx = sum(contexts) / len(contexts)
    per_request_flops = decode_flops(cfg, [round(ctx)])["flops"] / par.chips
    per_request_kv = kv_bytes_per_position(cfg) * (ctx + 1) * kv_share  # on each chip, per request of the mesh
    peak, bw = chip.peak_flops_per_s(dtype or _compute_dtype(cfg)), chip.hbm_bandwidth_bytes_per_s
    slope = per_request_flops / peak - per_request_kv / bw
    if slope <= 0:
        return math.inf

    def weights_s(batch: float) -> float:
        return weight_bytes_read(cfg, batch / par.data) / par.model / bw

    if not cfg.n_experts:
        return weights_s(par.data) / slope
    lo, hi = 0.0, weights_s(par.data) / slope  # the crossing if one token's experts were all a step read
    while hi * slope < weights_s(hi):
        lo, hi = hi, 2 * hi
        if hi > 1e18:  # no crossing at any batch a step could hold
            return math.inf
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if mid * slope >= weights_s(mid) else (mid, hi)
    return hi


def fewer_bytes_advice(weight_elem_bytes: float) -> str:
    """The tail of a does-not-fit note: narrower weights as a remedy only when there are narrower ones (8-bit for
    16-bit weights, int4 for 8-bit ones)."""
    if weight_elem_bytes > 1:
        return " or 8-bit weights"
    if weight_elem_bytes > 0.5:
        return " or int4 weights (--weight-dtype int4; the weights are already 8-bit)"
    return " (the weights are already int4)"


def smallest_model_axis(cfg: TransformerConfig, at_least: float) -> int:
    """The smallest valid model-parallel size >= ``at_least`` (dividing heads and MLP width)."""
    for m in range(max(1, math.ceil(at_least)), cfg.n_heads + 1):
        if cfg.n_heads % m == 0 and cfg.d_ff % m == 0 and (cfg.n_kv_heads % m == 0 or m % cfg.n_kv_heads == 0):
            return m
    return cfg.n_heads


#: The context (cached positions per request) at which a decode budget also states its largest batch when the
#: step's own context is short (``max_batch_reference``): at context 0 each request holds one position, the token
#: the step writes, so the batch HBM holds there (1.67 M for Llama-3-70B on 8 H100s) says nothing about serving.
REFERENCE_CONTEXT = 4096


def _fit(cfg: TransformerConfig, chip: ChipSpec, contexts: list[int], par: Parallelism,
         kv_share: float, new_tokens: int = 1) -> dict[str, Any]:
    """Whether weights + KV (after this step: each request's context plus its ``new_tokens``) fit in each chip's
    HBM, by how much, and the largest batch (at this context, and at `REFERENCE_CONTEXT` + 1 positions)."""
    cap = chip.hbm_capacity_bytes
    weights = cfg.params() * cfg.weight_elem_bytes / par.model
    kv = kv_bytes_per_position(cfg) * sum(c + new_tokens for c in contexts) * kv_share
    need = weights + kv
    positions = max(contexts) + new_tokens
    per_position = kv_bytes_per_position(cfg) * kv_share  # each chip's share of one cached position
    per_request = per_position * positions  # each chip's share of one more request
    max_batch = math.floor((cap - weights) / per_request) if cap > weights else 0  # requests on the whole mesh
    max_batch -= max_batch % par.data
    at_ref = math.floor((cap - weights) / (per_position * (REFERENCE_CONTEXT + 1))) if cap > weights else 0
    fits = need <= cap
    if fits:
        note = f"fits: {need / GiB:.3f} GiB of {cap / GiB:.3f} GiB per chip, {(cap - need) / GiB:.3f} GiB spare"
    elif weights > cap:
        least = smallest_model_axis(cfg, cfg.params() * cfg.weight_elem_bytes / cap)
        note = (f"does not fit: the weights alone need {weights / GiB:.3f} GiB per chip, {(weights - cap) / GiB:.3f} "
                f"GiB more than the {cap / GiB:.3f} GiB of HBM; use at least model={least} chips"
                f"{fewer_bytes_advice(cfg.weight_elem_bytes)}")
    else:
        note = (f"does not fit: {need / GiB:.3f} GiB per chip is {(need - cap) / GiB:.3f} GiB over the "
                f"{cap / GiB:.3f} GiB of HBM; at this context a batch of {max_batch} fits")
    return {"fits": fits, "hbm_needed_per_chip_bytes": need, "hbm_capacity_bytes": cap,
            "hbm_spare_bytes": cap - need, "max_batch": max_batch, "fit_note": note,
            "max_batch_positions": positions, "max_batch_reference": {"context": REFERENCE_CONTEXT,
                                                                      "max_batch": at_ref - at_ref % par.data},
            "book_hbm": _book_hbm(cfg, chip, contexts, weights, per_request, par)}


def _book_hbm(cfg: TransformerConfig, chip: ChipSpec, contexts: list[int], weights: float, per_request: float,
              par: Parallelism) -> dict[str, float | int]:
    """The fit as the book counts it (applied-inference, "smallest slice"), HBM in decimal GB (16e9 on v5e:
    `simulator.hardware.facts.nominal_hbm_bytes`): the chips whose HBM the weights alone fill (70e9 x 2 B /
    16e9 = 8.75 in bf16), the chips the weights and this step's KV cache fill (112e9 / 16e9 = 7), unrounded as
    the book writes them, the HBM the mesh's chips have left beside the weights (``kv_room_bytes``: 16 x 16e9 -
    140e9 = 116e9 on a 4x4 in bf16), each chip's HBM beside its share of the weights (``spare_per_chip_bytes``:
    16e9 - 140e9 / 16 = 7.25e9), and the largest batch the HBM left beside each chip's weights holds at this context
    (43 at 8k in bf16 on a 4x4). Counts; no working memory (the book's own caveat)."""
    from simulator.hardware.facts import nominal_hbm_bytes

    hbm = nominal_hbm_bytes(chip)
    whole = cfg.params() * cfg.weight_elem_bytes
    kv = kv_bytes_per_position(cfg) * sum(contexts)  # the cached positions, once (160e3 x 8192 x 32)
    biggest = math.floor((hbm - weights) / per_request) if hbm > weights and per_request > 0 else 0
    return {"chips_for_weights": whole / hbm, "chips_for_weights_plus_kv": (whole + kv) / hbm,
            "kv_room_bytes": max(0.0, par.chips * hbm - whole), "spare_per_chip_bytes": hbm - weights,
            "max_batch": biggest - biggest % par.data}


#: Activations a layer saves for its backward pass, per token, in elements: the residual and norm
#: outputs (2D), attention input and output (2D), Q, K, V, and the MLP's hidden tensors (gate, up and
#: their product when gated; hidden and activation otherwise). Block checkpointing keeps only D.
def saved_activation_elements(cfg: TransformerConfig, recompute: bool = False) -> float:
    """Elements per token per layer kept for the backward pass."""
    if recompute:
        return cfg.d_model
    mlp = (3 if cfg.gated_mlp else 2) * cfg.d_ff * max(1, cfg.experts_per_token)
    return 4 * cfg.d_model + cfg.q_width + 2 * cfg.kv_width + mlp


ADAM_BYTES_PER_PARAM = 8  #: two fp32 moments; the master weights are counted as the weights themselves


def train_budget(cfg: TransformerConfig, chip: ChipSpec, batch: int, seq: int, par: Parallelism | None = None,
                 recompute: bool = False) -> dict[str, Any]:
    """Closed forms of one training step: forward + backward (each backward matmul costs as much as
    its forward one, twice per forward matmul: 3 units; recomputing the forward makes 4), gradient
    AllReduce over the data axis, and the memory each chip holds."""
    par = par or Parallelism()
    check_layout(cfg, par, batch)
    check_int(seq, name="seq", error=PodsimError)
    forward = decode_flops(cfg, [0] * batch, seq)["flops"]
    units = 4 if recompute else 3
    tokens_per_chip = batch * seq / par.data
    act = saved_activation_elements(cfg, recompute) * cfg.act_elem_bytes * cfg.n_layers * tokens_per_chip / par.model
    if recompute:  # one layer's full activations live while it is recomputed
        act += saved_activation_elements(cfg) * cfg.act_elem_bytes * tokens_per_chip / par.model
    weights = cfg.params() * cfg.weight_elem_bytes / par.model
    memory = {"weight_bytes": weights, "gradient_bytes": weights,
              "optimizer_bytes": cfg.params() * ADAM_BYTES_PER_PARAM / par.model, "activation_bytes": act}
    flops = units * forward / par.chips
    hbm = weights * (units - 1) + weights + 2 * act  # weights read per pass, gradients written, activations out/in
    peak = chip.peak_flops_per_s(_compute_dtype(cfg))
    t_compute, t_memory = flops / peak, hbm / chip.hbm_bandwidth_bytes_per_s
    need = sum(memory.values())
    comm = _train_comm(cfg, chip, par, tokens_per_chip)
    return {**comm, "model": cfg.name, "chip": chip.name, "batch": batch, "seq": seq, "data": par.data,
            "model_parallel": par.model, "recompute": recompute, "flops_per_step": units * forward,
            "forward_flops": forward, "flop_units": units, "per_chip_flops": flops, "per_chip_hbm_bytes": hbm,
            "memory_per_chip": memory, "memory_per_chip_bytes": need, "fits": need <= chip.hbm_capacity_bytes,
            "gradient_allreduce_bytes": weights if par.data > 1 else 0.0, "t_compute_s": t_compute,
            "t_memory_s": t_memory, "lower_bound_s": max(t_compute, t_memory), "upper_bound_s": t_compute + t_memory}


def _ring_params(chip: ChipSpec, position: int, shape: tuple[int, ...]) -> tuple[float, float, bool]:
    """(one-way bandwidth, hop latency, wraparound) of mesh axis ``position`` on the chip's slice of
    ``shape`` (size-1 axes take no slice axis, as in `simulator.workloads.mesh.default_topology_for`)."""
    import topologies

    if chip.wraparound == "switch":
        return chip.ici_egress_bytes_per_s, 2 * chip.hop_latency_s, True
    kept = [p for p, size in enumerate(shape) if size > 1]
    if position not in kept:
        return chip.ici_bandwidth_bytes_per_s, chip.hop_latency_s, True  # one chip: nothing to cross
    wrap = topologies.slice_wrap(tuple(shape[p] for p in kept), chip.wraparound)[kept.index(position)]
    return chip.ici_bandwidth_bytes_per_s, chip.hop_latency_s, wrap


def _train_comm(cfg: TransformerConfig, chip: ChipSpec, par: Parallelism, tokens_per_chip: float) -> dict[str, float]:
    """Closed forms of a training step's collectives: 4 activation AllReduces per layer over the model
    axis (2 forward, 2 backward; on the critical path) and the gradient AllReduce over the data axis
    (can overlap the backward pass)."""
    from simulator import analytic

    shape = (par.data, par.model)
    tp, grad = 0.0, 0.0
    if par.model > 1:
        bw, lat, wrap = _ring_params(chip, 1, shape)
        tp = 4 * cfg.n_layers * analytic.all_reduce_time(tokens_per_chip * cfg.d_model * cfg.act_elem_bytes,
                                                         par.model, bw, lat, wrap)
    if par.data > 1:
        bw, lat, wrap = _ring_params(chip, 0, shape)
        grad = analytic.all_reduce_time(cfg.params() * cfg.weight_elem_bytes / par.model, par.data, bw, lat, wrap)
    return {"t_model_allreduce_s": tp, "t_gradient_allreduce_s": grad}
