"""FP8 casts in the calibrated GPU step (simulator.workloads.plans.calibrated_gpu), priced as Transformer Engine runs
them, against a hand count of the bytes each cast-transpose moves at the HBM rate.

The oracle: kernels whose GEMMs and attention cost nothing and whose memory-bound kernels stream their bytes at the
chip's HBM rate. An FP8 step then differs from the same step in bf16 by its casts alone, whose bytes are counted
here from the layer's GEMM shapes: a fused cast-transpose reads 2 bytes and writes 1 + 1 per element; the input X
[t, k] of every layer GEMM is cast in each forward, the output gradient dY [t, n] in each backward, each weight
[k, n] once a step under Megatron-Core (``is_first_microbatch``) and in each forward otherwise; the output head
stays in 16 bits (no cast).
"""
from __future__ import annotations

import pytest

from simulator.hardware.specs import get_chip
from simulator.hardware.train_calibration import GpuStepConstants
from simulator.workloads.plans.calibrated_gpu import IdealKernels, gpu_step_factors
from simulator.workloads.plans.layout import MeshPlan, TrainOptions
from simulator.workloads.transformer import TransformerConfig


class MemoryOnlyKernels(IdealKernels):
    """GEMMs and attention free; memory-bound kernels at the spec HBM rate (the inherited `memory_bound_s`)."""

    def matmul_s(self, m: int, k: int, n: int, dtype: str = "bf16", batch: int = 1) -> float:
        return 0.0

    def attention_s(self, *args: object, **kwargs: object) -> float:
        return 0.0


CFG = TransformerConfig(name="t", d_model=1024, d_ff=3584, n_layers=6, n_heads=16, n_kv_heads=4, head_dim=64,
                        vocab_size=32000, gated_mlp=True, tied_embeddings=False, norm="rmsnorm")
CHIP = get_chip("h100")
SEQ, BATCH = 2048, 8


def _cast_seconds(framework: str, microbatches: int) -> float:
    kern = MemoryOnlyKernels(CHIP)
    c = GpuStepConstants(framework=framework)
    opts = TrainOptions(microbatches=microbatches, zero=0, checkpoint="none")
    steps = {dtype: gpu_step_factors(CFG, CHIP, MeshPlan({}), opts, BATCH, SEQ, c, kern, "flash", dtype)
             for dtype in ("bf16", "fp8")}
    return steps["fp8"]["step_time_s"] - steps["bf16"]["step_time_s"]


def _hand_count(microbatches: int, weights_per_step: int) -> float:
    d, ff, layers = 1024, 3584, 6
    q, kv = 16 * 64, 4 * 64
    t = BATCH * SEQ / microbatches  # tokens a microbatch
    gemms = [(d, q + 2 * kv), (q, d), (d, 2 * ff), (ff, d)]  # (k, n) of QKV, output projection, gate+up, down
    x = sum(t * k for k, _ in gemms)  # forward inputs
    dy = sum(t * n for _, n in gemms)  # backward output gradients
    w = sum(k * n for k, n in gemms)
    elements = layers * (microbatches * (x + dy) + weights_per_step * w)
    return (2 + 1 + 1) * elements / CHIP.hbm_bandwidth_bytes_per_s


@pytest.mark.parametrize("microbatches", [1, 4])
def test_megatron_core_casts_weights_once_per_step(microbatches):
    assert _cast_seconds("megatron-core", microbatches) == pytest.approx(_hand_count(microbatches, 1), rel=1e-9)


@pytest.mark.parametrize("microbatches", [1, 4])
def test_other_frameworks_cast_weights_every_microbatch(microbatches):
    got = _cast_seconds("llm-foundry", microbatches)
    assert got == pytest.approx(_hand_count(microbatches, microbatches), rel=1e-9)


def test_weight_caching_saves_exactly_the_repeated_weight_casts():
    """4 microbatches: the cached framework saves 3 of the 4 casts of every weight, nothing else."""
    saved = _cast_seconds("llm-foundry", 4) - _cast_seconds("megatron-core", 4)
    one_pass = _hand_count(1, 1) - _hand_count(1, 0)  # every weight cast once
    assert saved == pytest.approx(3 * one_pass, rel=1e-9) and saved > 0


def test_head_stays_in_16_bits():
    """The head's GEMMs cost the same under FP8 as under bf16 with real kernels (16 bits, no casts)."""
    from simulator.workloads.plans.calibrated_gpu import require_kernels

    kern = require_kernels(CHIP)
    opts = TrainOptions(microbatches=1, zero=0, checkpoint="none")
    c = GpuStepConstants(framework="megatron-core")
    v = {}
    for vocab in (32000, 64000):
        cfg = TransformerConfig(name="t", d_model=1024, d_ff=3584, n_layers=6, n_heads=16, n_kv_heads=4,
                                head_dim=64, vocab_size=vocab, gated_mlp=True, tied_embeddings=False, norm="rmsnorm")
        v[vocab] = {dt: gpu_step_factors(cfg, CHIP, MeshPlan({}), opts, BATCH, SEQ, c, kern, "flash", dt)
                    ["factors"]["matmul_s"] for dt in ("bf16", "fp8")}
    head_bf16 = v[64000]["bf16"] - v[32000]["bf16"]  # what 32k more vocabulary entries add
    head_fp8 = v[64000]["fp8"] - v[32000]["fp8"]
    assert head_fp8 == pytest.approx(head_bf16, rel=1e-9) and head_bf16 > 0
