"""Sequence parallelism's backward in the calibrated GPU step: the inputs of the column-parallel GEMMs gathered again.

Oracle from Megatron-Core 0.8's structure (``tensor_parallel/layers.py``,
``LinearWithGradAccumulationAndAsyncCommunication``), not from podsim's output. Under sequence parallelism a layer's
forward runs 2 AllGathers (before QKV and before the MLP's first GEMM) and 2 ReduceScatters (after the attention's
output GEMM and after the MLP's second). Its backward runs the same 2 + 2 in reverse (the row-parallel GEMMs'
output gradients gathered, the column-parallel GEMMs' input gradients reduce-scattered) and 2 AllGathers more: each
column-parallel GEMM kept only its sequence shard of its input and gathers it again for the weight gradient. So a
layer moves 6 AllGathers and 4 ReduceScatters. Megatron's ``--tp-comm-overlap`` (the step's ``tp_overlap``)
requires ``--sequence-parallel`` (``training/arguments.py``); without it the tensor-parallel layer runs 2
AllReduces each way.

The collectives are stubbed at fixed, large times (an AllGather or ReduceScatter 1 s, an AllReduce 2 s: one of
each), so each layer's tensor-parallel time dwarfs its compute and the step's exposed tensor-parallel seconds count
the collectives.
"""
from __future__ import annotations

import pytest

import simulator.workloads.plans.calibrated_gpu as cg
from simulator.hardware.specs import get_chip
from simulator.hardware.train_calibration import GpuStepConstants
from simulator.workloads.plans.layout import MeshPlan, TrainOptions
from simulator.workloads.transformer import TransformerConfig

CFG = TransformerConfig(name="t", d_model=4096, d_ff=16384, n_layers=8, n_heads=32, n_kv_heads=32, head_dim=128,
                        vocab_size=32000, gated_mlp=False, tied_embeddings=False, norm="layernorm")
CHIP = get_chip("h100")
PLAN = MeshPlan({"model": 8})  # one tensor-parallel group: its collectives are the only ones
SECONDS = {"all_gather": 1.0, "reduce_scatter": 1.0, "all_reduce": 2.0}


def _exposed_tp_per_layer(monkeypatch: pytest.MonkeyPatch, tp_overlap: bool) -> tuple[float, float]:
    monkeypatch.setattr(cg, "nccl_s", lambda kind, nbytes, net, *a, **k: SECONDS.get(kind, 0.0) if net else 0.0)
    c = GpuStepConstants(framework="megatron-core", sm_interference=0.0)
    opts = TrainOptions(microbatches=1, zero=0, checkpoint="none", tp_overlap=tp_overlap)
    out = cg.gpu_step_factors(CFG, CHIP, PLAN, opts, 1, 4096, c, cg.require_kernels(CHIP))
    layer = out["per_layer_s"]
    compute = sum(v for part in ("forward", "backward") for k, v in layer[part].items() if k != "launch")
    return out["factors"]["exposed_tp_s"] / CFG.n_layers, compute


def test_sequence_parallel_backward_gathers_the_weight_gradient_inputs_again(monkeypatch):
    exposed, compute = _exposed_tp_per_layer(monkeypatch, tp_overlap=True)
    collectives = 6 * SECONDS["all_gather"] + 4 * SECONDS["reduce_scatter"]  # 2 AG + 2 RS forward, 4 AG + 2 RS back
    assert compute < 0.1  # the stubbed collectives dwarf the layer's kernels
    # overlapped with the layer's compute (no interference): the collectives less the compute they hide
    assert collectives - compute <= exposed <= collectives + 1e-9


def test_without_sequence_parallel_two_all_reduces_each_way(monkeypatch):
    exposed, compute = _exposed_tp_per_layer(monkeypatch, tp_overlap=False)
    assert exposed == pytest.approx(4 * SECONDS["all_reduce"], rel=1e-9)  # waited on: all of it exposed
