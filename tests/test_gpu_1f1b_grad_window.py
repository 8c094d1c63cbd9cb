"""1F1B on GPUs: the data-parallel gradient reduce-scatter hides behind the last microbatch's backward only.

Oracle: Megatron-Core 0.8's own schedule (``megatron/core/pipeline_parallel/schedules.py``,
``forward_backward_pipelining_without_interleaving``, tag core_v0.8.0), read for issue 27's size trend:
- every microbatch but the last runs under ``no_sync`` (``disable_grad_sync``); the first pipeline stage calls
  ``enable_grad_sync`` just before its last backward (``if config.grad_sync_func is None or rank == 0``), so each
  bucket's reduce-scatter is launched as that backward fills it (``param_and_grad_buffer.register_grad_ready``
  counts grads only when ``is_last_microbatch``); later stages launch theirs after their last backward
  (``grad_sync_func``, "during pipeline bubble");
- with ``--overlap-param-gather`` the first bucket's all-gather starts in ``optimizer.zero_grad`` and each next one
  when the forward reaches the previous bucket (``distrib_optimizer._finish_param_sync_helper``): the first
  microbatch's forward only.

So the window is one microbatch's backward (after its first bucket) and one microbatch's forward (after its first
layer's gather), whatever the number of microbatches: a longer pipeline of the same microbatches exposes the
same seconds. With ``L`` layers on the stage, per-layer forward ``f`` and backward ``b`` seconds, a reduce-scatter
of ``R`` and a gather of ``G`` seconds, no interference: exposed = max(R - (L - 1) b, R / L) + max(G - (L - 1) f,
G / L).
"""
from __future__ import annotations

import math
from dataclasses import replace

import pytest

from simulator.hardware.specs import get_chip
from simulator.hardware.train_calibration import gpu_step_constants
from simulator.workloads.plans.calibrated_gpu import calibrated_gpu_step
from simulator.workloads.plans.layout import MeshPlan, TrainOptions
from simulator.workloads.transformer import get_model

PLAN = MeshPlan({"fsdp": 48, "model": 8, "pipeline": 2})  #: Megatron-Core's distributed optimizer over 48 replicas


def _step(microbatches: int, interference: float | None = None) -> dict:
    cfg, h100 = get_model("llama-3-8b"), get_chip("h100")
    c = gpu_step_constants("h100", "megatron-core")
    if interference is not None:
        c = replace(c, sm_interference=interference)
    opts = TrainOptions(microbatches=microbatches, schedule="1f1b", checkpoint="none", zero=1, tp_overlap=True)
    return calibrated_gpu_step(cfg, h100, PLAN, opts, 48 * microbatches, 4096, constants=c,
                               framework="megatron-core")


@pytest.mark.parametrize("interference", [0.0, None])
def test_more_microbatches_of_the_same_size_expose_the_same_gradient_traffic(interference: float | None) -> None:
    exposed = [_step(mb, interference)["factors"]["exposed_grads_s"] for mb in (1, 2, 4, 8, 16)]
    assert exposed[0] > 0
    assert all(math.isclose(e, exposed[0], rel_tol=1e-9) for e in exposed), exposed


def test_exposed_gradient_traffic_is_what_one_microbatch_does_not_cover() -> None:
    out = _step(8, interference=0.0)
    per = out["per_layer_s"]
    layers = max(out["layers_per_stage"])
    f = sum(v for k, v in per["forward"].items() if k != "launch")
    b = sum(v for k, v in per["backward"].items() if k != "launch")
    reduce_s, gather_s = per["zero_after_backward"] + per["dp_all_reduce"], per["zero_before_forward"]
    assert reduce_s > (layers - 1) * b > 0  # the case that matters: the reduction outlasts its window
    by_hand = max(reduce_s - (layers - 1) * b, reduce_s / layers) + max(gather_s - (layers - 1) * f, gather_s / layers)
    assert math.isclose(out["factors"]["exposed_grads_s"], by_hand, rel_tol=1e-9)
