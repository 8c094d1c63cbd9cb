"""Pipeline sends in the calibrated GPU step's steady state, as Megatron-Core 0.8's schedules run them
(``pipeline_parallel/p2p_communication._communicate``; oracles from that code's structure, not from podsim's output):

- 1F1B waits on each microbatch's two exchanges (``wait_on_reqs``, then ``torch.cuda.synchronize`` under
  ``batch_p2p_sync``): with microbatches of a fixed size, each microbatch after the first adds two transfers to the
  2 (p - 1) of the fill and drain, so the pipeline's send time is (2 (p - 1) + 2 (M - 1)) x one transfer;
- the interleaved schedule overlaps them (``overlap_p2p_comm``): nothing more is exposed, and the compute beside
  them pays the fitted interference, so that part is linear in M and vanishes with ``sm_interference`` 0;
- Megatron-LM's 2021-22 code (no overlap) waits on every exchange under interleaving too: 2 v (M - 1) more.
"""
from __future__ import annotations

import pytest

from simulator.hardware.specs import get_chip
from simulator.hardware.train_calibration import GpuStepConstants
from simulator.workloads.plans.calibrated_gpu import gpu_step_factors, require_kernels
from simulator.workloads.plans.layout import MeshPlan, TrainOptions
from simulator.workloads.transformer import TransformerConfig

CFG = TransformerConfig(name="t", d_model=4096, d_ff=16384, n_layers=16, n_heads=32, n_kv_heads=32, head_dim=128,
                        vocab_size=32000, gated_mlp=False, tied_embeddings=False, norm="layernorm")
CHIP = get_chip("h100")
PLAN = MeshPlan({"model": 8, "pipeline": 4})  # stages on separate nodes: sends over InfiniBand
SEQ = 4096


def _p2p(microbatches: int, c: GpuStepConstants, chunks: int = 1) -> float:
    opts = TrainOptions(microbatches=microbatches, zero=0, checkpoint="none",
                        schedule="interleaved" if chunks > 1 else "1f1b", virtual_stages=max(2, chunks))
    out = gpu_step_factors(CFG, CHIP, PLAN, opts, microbatches, SEQ, c, require_kernels(CHIP))  # 1 sequence each
    return out["factors"]["p2p_s"]


@pytest.mark.parametrize("framework", ["megatron-core", "megatron-lm"])
def test_1f1b_waits_on_every_microbatch_exchange(framework):
    c = GpuStepConstants(framework=framework, sm_interference=5.0)
    p = 4
    one = _p2p(1, c) / (2 * (p - 1))  # one microbatch: the fill and drain alone
    for m in (2, 8, 32):
        assert _p2p(m, c) == pytest.approx((2 * (p - 1) + 2 * (m - 1)) * one, rel=1e-9)


def test_interleaved_exchanges_overlap_and_pay_only_interference():
    v = 2
    quiet = GpuStepConstants(framework="megatron-core", sm_interference=0.0)
    busy = GpuStepConstants(framework="megatron-core", sm_interference=5.0)
    fill = {m: _p2p(m, quiet, v) for m in (4, 8, 16)}
    assert fill[4] == pytest.approx(fill[8], rel=1e-12) == pytest.approx(fill[16], rel=1e-12)  # fill and drain only
    beside = {m: _p2p(m, busy, v) - fill[m] for m in (4, 8, 16)}
    assert beside[4] > 0
    assert beside[8] == pytest.approx(2 * beside[4], rel=1e-9) and beside[16] == pytest.approx(4 * beside[4], rel=1e-9)


def test_megatron_lm_interleaved_waits_on_every_exchange():
    v, p = 2, 4
    c = GpuStepConstants(framework="megatron-lm", sm_interference=5.0)
    one = _p2p(1, c, v) / (2 * (p * v - 1))
    for m in (4, 8):
        assert _p2p(m, c, v) == pytest.approx((2 * (p * v - 1) + 2 * v * (m - 1)) * one, rel=1e-9)
