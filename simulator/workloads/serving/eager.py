"""vLLM 0.6's prefill step kernel by kernel, as its V0 engine runs it: eagerly, outside CUDA graphs (forecast).

vLLM 0.6's model runner captures CUDA graphs for decode batches only: a step with a prefill in it runs the
model eagerly (``ModelRunner.execute_model`` replays a graph only when ``prefill_metadata`` is None and the
decode batch ``use_cuda_graph``), so every layer's kernels are launched one by one on every tensor-parallel
worker, and the layer's replicated kernels -- the RMSNorms and residual adds over the whole ``[tokens,
d_model]`` activation, which every worker of a tensor-parallel group runs in full -- are separate kernels
with their own HBM round trips. The fitted serving factors (`simulator.workloads.served`) price a prefill as
its matmul FLOPs at one share of peak and its weights streamed, which holds neither.

This module prices the step as Vidur does (its execution-time predictor: the sum of one layer's profiled
operators, times the layers, plus the AllReduces): per layer, the kernels of a Llama-style decoder layer in
vLLM's order, each at the GPU kernel model's device time (`simulator.hardware.gpu_kernels`, fitted to XLA's
H100 table, mamf-finder and Vidur's operator profiles; no constant fitted to any serving run)::

    input RMSNorm (norm, read + write [T, D])      QKV GEMM [T, D] x [D, (N_Q + 2 N_KV) H / t]
    rotary embedding (element-wise, Q and K)       KV-cache write (element-wise, K and V)
    FlashAttention forward (n prompts, causal)     output GEMM [T, N_Q H / t] x [N_Q H / t, D]
    residual add (element-wise, [T, D] x 3)        post-attention RMSNorm (norm)
    gate-up GEMM [T, D] x [D, 2F / t]              SiLU-and-multiply (activation, 6 bytes per output)
    down GEMM [T, F / t] x [F / t, D]              residual add

(Vidur's profiled operator list, with its byte counts: ``add`` moves 6 bytes per element, the norm 4, the
activation 6 per output element), each kernel at least one eager launch (``launch_s``: the host cannot issue
kernels faster than that), the step's two AllReduces per layer priced as the served model prices them
(`simulator.workloads.served_tp.allreduce_cost`: NCCL's ring for prefill-sized messages), the embedding
gather, the final norm, and the head on the prompts' last tokens only (vLLM's logits processor prunes the
hidden states to the sampled positions before the LM head)::

    prefill = L x (sum of the layer's kernels + 2 AllReduces) + embedding + final norm + LM head (n rows)

Dense models with 16-bit weights on a GPU with a kernel model only; anything else returns None (the caller
keeps the fitted serving factors).
"""
from __future__ import annotations

import math

from simulator.hardware.gpu_kernels import GpuKernels, gpu_kernels
from simulator.hardware.specs import ChipSpec
from simulator.workloads.transformer import TransformerConfig


def layer_kernels(cfg: TransformerConfig, kernels: GpuKernels, tp: int, n: int, tokens: int,
                  context: int = 0) -> list[tuple[str, float]]:
    """(name, device seconds) of one decoder layer's kernels on one of ``tp`` workers: ``n`` prompts of
    ``tokens`` new tokens each after ``context`` cached ones (AllReduces not included)."""
    big_t = n * tokens
    d, hd, e = cfg.d_model, cfg.head_dim, cfg.act_elem_bytes
    q, kv = cfg.q_width // tp, cfg.kv_width // tp
    f = cfg.d_ff // tp
    up = 2 * f if cfg.gated_mlp else f

    def gemm(name: str, k: int, n_out: int) -> tuple[str, float]:
        return name, kernels.matmul_kernel_s(big_t, k, n_out, "bf16")

    def mem(name: str, nbytes: float, kind: str) -> tuple[str, float]:
        return name, kernels.memory_kernel_time_s(nbytes, kind)

    heads, kv_heads = max(cfg.n_heads // tp, 1), max(cfg.n_kv_heads // tp, 1)
    attention = kernels.attention_kernel_s(n, tokens, context + tokens, heads, kv_heads, hd, True)
    act_bytes = big_t * f * 3 * e if cfg.gated_mlp else big_t * f * 2 * e
    return [mem("input_layernorm", big_t * d * 2 * e, "norm"), gemm("qkv_proj", d, q + 2 * kv),
            mem("rotary", big_t * (q + kv) * 2 * e, "elementwise"), mem("kv_cache_write", big_t * 2 * kv * 2 * e,
                                                                        "elementwise"),
            ("attention", attention), gemm("o_proj", q, d), mem("residual_add", big_t * d * 3 * e, "elementwise"),
            mem("post_attention_layernorm", big_t * d * 2 * e, "norm"), gemm("gate_up_proj", d, up),
            mem("mlp_act", act_bytes, "activation"), gemm("down_proj", f, d),
            mem("residual_add", big_t * d * 3 * e, "elementwise")]


def applies(cfg: TransformerConfig, chip: ChipSpec) -> bool:
    """Whether `eager_prefill_s` prices ``cfg`` on ``chip``: a dense model with 16-bit weights and activations on a
    GPU with a kernel model."""
    return (gpu_kernels(chip.name) is not None and not cfg.n_experts and cfg.weight_elem_bytes == 2
            and cfg.act_elem_bytes == 2)


def eager_prefill_s(cfg: TransformerConfig, chip: ChipSpec, tp: int, n: int, tokens: int, context: int = 0,
                    engine: str = "vllm") -> float | None:
    """Seconds of one eager prefill step of ``n`` prompts of ``tokens`` new tokens after ``context`` cached ones on
    ``tp`` tensor-parallel GPUs of ``chip`` (forecast); None where it does not apply (`applies`)."""
    from simulator.hardware.decode_calibration import get_decode_calibration
    from simulator.workloads.served import _kernel
    from simulator.workloads.served_tp import allreduce_cost

    kernels = gpu_kernels(chip.name)
    if kernels is None or not applies(cfg, chip):
        return None
    for value, name in ((tp, "tp"), (n, "n"), (tokens, "tokens")):
        if not (isinstance(value, int) and value >= 1):
            raise ValueError(f"{name}={value!r} must be a whole number >= 1")
    launch = kernels.launch_s
    layer = sum(max(t, launch) for _, t in layer_kernels(cfg, kernels, tp, n, tokens, context))
    if tp > 1:
        cal = get_decode_calibration(chip.name, engine)
        nbytes = n * tokens * cfg.d_model * cfg.act_elem_bytes
        layer += 2 * allreduce_cost(cal.engine, chip, tp, nbytes, cal.allreduce_sync_s or 0.0, _kernel(cal))["seconds"]
    d, e = cfg.d_model, cfg.act_elem_bytes
    vocab = math.ceil(cfg.vocab_size / tp)
    outside = [kernels.memory_kernel_time_s(n * tokens * d * 2 * e, "elementwise"),  # embedding gather
               kernels.memory_kernel_time_s(n * tokens * d * 2 * e, "norm"),  # final norm (every token)
               kernels.matmul_kernel_s(n, d, vocab, "bf16")]  # LM head on the prompts' last tokens
    return cfg.n_layers * layer + sum(max(t, launch) for t in outside)
