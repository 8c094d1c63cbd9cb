"""The calibrated TPU step on pipeline and sequence axes: the book's bubble, ring attention beside the kernel."""
from __future__ import annotations

import pytest

from simulator.hardware.specs import get_chip
from simulator.hardware.train_calibration import IDEAL
from simulator.workloads.plans.calibrated import axis_bandwidths, calibrated_train_step
from simulator.workloads.plans.layout import MeshPlan, PlanError, TrainOptions
from simulator.workloads.transformer import TransformerConfig

V5P = get_chip("tpu-v5p")
CFG = TransformerConfig(name="t", d_model=2048, d_ff=8192, n_layers=16, n_heads=16, vocab_size=8)


def test_sequence_and_pipeline_take_their_own_torus_dimensions() -> None:
    bws = axis_bandwidths(V5P, (4, 4, 4), model=4, fsdp=4, sequence=2, pipeline=2)
    link = V5P.ici_bandwidth_bytes_per_s
    assert bws["model"] == (2 * link, 3)  # the last dimension, whole and wrapped: a ring
    assert bws["sequence"] == (link, 1)  # half of the middle dimension: a line of 2, one hop
    # fsdp = 4: the middle dimension's other half (a line of 2) times half of the first (a line of 2): two links
    assert bws["fsdp"] == (2 * link, 2)
    assert bws["pipeline"] == (link, 1)  # the first dimension's other half


def test_equal_stages_give_the_books_bubble() -> None:
    m, p = 12, 4
    out = calibrated_train_step(CFG, V5P, MeshPlan({"pipeline": p}), TrainOptions(microbatches=m), m, 2048,
                                slice_shape=(4,), constants=IDEAL)
    body = out["factors"]["bubble_s"] / ((p - 1) / (m + p - 1))  # the pipelined time if the bubble is the book's
    assert out["factors"]["bubble_s"] > 0
    assert body == pytest.approx(out["step_time_s"] - out["factors"]["p2p_s"] - out["factors"]["optimizer_s"],
                                 rel=0.01)


def test_ring_attention_costs_only_what_the_kernel_does_not_hide() -> None:
    plan = MeshPlan({"sequence": 4})
    short = calibrated_train_step(CFG, V5P, plan, TrainOptions(), 4, 2048, slice_shape=(4,))
    assert short["factors"]["exposed_cp_s"] >= 0
    one = calibrated_train_step(CFG, V5P, MeshPlan(), TrainOptions(), 1, 2048, slice_shape=(1,))
    assert short["step_time_s"] < 4 * one["step_time_s"]  # 4 chips share the sequences' work


def test_expert_axis_is_refused_on_tpu_with_the_axes_it_models() -> None:
    moe = CFG.replace(n_experts=8, experts_per_token=2)
    with pytest.raises(PlanError, match="pipeline, fsdp, sequence and model"):
        calibrated_train_step(moe, V5P, MeshPlan({"expert": 4}), TrainOptions(), 4, 2048, slice_shape=(4,))
