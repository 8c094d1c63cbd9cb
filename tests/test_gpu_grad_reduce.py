"""The GPU step's loss traffic and gradient-reduction dtype (simulator.workloads.plans.calibrated_gpu), and the
PaLM FLOP convention of the published GPU rows: oracles from the kernels' byte counts and the papers' formulas."""
from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.hardware.train_calibration import gpu_fit_summary
from simulator.workloads.plans.calibrated_gpu import (
    FRAMEWORK_GRAD_REDUCE,
    LOSS_BYTES_PER_LOGIT,
    IdealKernels,
    gpu_step_factors,
)
from simulator.workloads.plans.layout import PlanError
from simulator.workloads.plans.published_gpu import predict_run, published_gpu_runs
from simulator.workloads.plans.train import palm_flops


def _run(name: str):
    return next(r for r in published_gpu_runs() if r.run == name)


def test_loss_bytes_are_the_fp32_kernels_passes():
    """upcast (2 + 4), max (4), subtract (4 + 4), exp (4 + 4), sum (4), divide (4 + 4), gradient (4 + 4),
    downcast (4 + 2)."""
    assert LOSS_BYTES_PER_LOGIT == (2 + 4) + 4 + (4 + 4) + (4 + 4) + 4 + (4 + 4) + (4 + 4) + (4 + 2)


def test_fp32_gradient_reduction_moves_twice_the_bytes():
    """Megatron's distributed optimizer (ZeRO-1 over the data ranks): its gradient reduce-scatter after the backward
    at 4 bytes per element against 2 -- at these sizes (hundreds of MB,
    bandwidth-bound) between 1.8x and 2x the time; the step is slower, never faster."""
    run = _run("mcore2024 gpt-1.7b 48xh100")
    assert run.grad_reduce_bytes == 4
    fp32 = predict_run(run)
    bf16 = predict_run(replace(run, grad_reduce_bytes=2.0))
    ar32, ar16 = fp32["per_layer_s"]["zero_after_backward"], bf16["per_layer_s"]["zero_after_backward"]
    assert 1.8 < ar32 / ar16 <= 2.0 + 1e-9
    assert fp32["grad_reduce"]["bytes_per_element"] == 4 and fp32["step_time_s"] >= bf16["step_time_s"]


def test_bad_gradient_reduce_bytes_named():
    run = _run("mcore2024 gpt-1.7b 48xh100")
    with pytest.raises(PlanError, match="grad_reduce_bytes -2"):
        gpu_step_factors(run.cfg, run.chip, run.plan, run.opts, run.batch, run.seq, None,
                         IdealKernels(run.chip), grad_reduce_bytes=-2)


def test_palm_flops_by_hand():
    """PaLM appendix B: 6 N + 12 L H Q T per token; Llama 3.1 405B at 131,072 tokens, 128 sequences."""
    run = _run("llama3 llama3.1-405b s131072 16384xh100")
    cfg = run.cfg
    per_token = 6 * cfg.params() + 12 * 126 * 128 * 128 * 131072
    assert palm_flops(cfg, 128, 131072) == pytest.approx(per_token * 128 * 131072, rel=1e-12)
    assert 400e9 < cfg.params() < 410e9


def test_every_calibrated_framework_has_a_gradient_reduce_dtype():
    fitted = gpu_fit_summary()
    assert set(FRAMEWORK_GRAD_REDUCE) == set(fitted["frameworks"]) | set(fitted["aliases"])


def test_palm_mfu_beside_the_default_count():
    """The step reports MFU in PaLM's count too: at 131k tokens its non-causal attention counts more FLOPs, so a
    higher MFU for the same step, by exactly the ratio of the two counts."""
    run = _run("llama3 llama3.1-405b s131072 16384xh100")
    out = predict_run(run)
    by = out["mfu_by_convention"]
    ratio = palm_flops(run.cfg, run.batch, run.seq) / (by["podsim"] * run.plan.chips
                                                       * run.chip.peak_flops_per_s() * out["step_time_s"])
    assert by["palm"] / by["podsim"] == pytest.approx(ratio, rel=1e-9) and by["palm"] > 1.3 * by["podsim"]
