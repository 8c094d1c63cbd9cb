"""The calibrated whole training step (issue 20, training half): factors against hand-worked oracles,
the remat policy ``minimal``, the published-runs validation, and its bad inputs."""
from __future__ import annotations

import math

import pytest
from conftest import load_script

from simulator.errors import PodsimError
from simulator.hardware.specs import get_chip
from simulator.hardware.train_calibration import IDEAL, StepConstants, step_constants
from simulator.workloads.plans.calibrated import (
    adamw_bytes_per_param,
    axis_bandwidths,
    calibrated_train_step,
    flash_pairs,
    overlapped_layers_s,
    ring_time_s,
)
from simulator.workloads.plans.layout import MeshPlan, PlanError, TrainOptions
from simulator.workloads.plans.memory import recompute_fraction, saved_elements
from simulator.workloads.transformer import TransformerConfig

TINY = TransformerConfig(name="tiny", d_model=1024, d_ff=4096, n_layers=4, n_heads=8, n_kv_heads=8, head_dim=128,
                         vocab_size=32768)


def test_adamw_bytes_by_hand():
    # bf16 weights + fp32 master: read m, v (8) + master (4) + bf16 grad (2); write m, v, master, bf16 copy (14)
    assert adamw_bytes_per_param(2, True) == 8 + 4 + 2 + 8 + 4 + 2
    # fp32 weights are their own master: read m, v, w, grad (16), write m, v, w (12)
    assert adamw_bytes_per_param(4, False) == 16 + 12
    assert adamw_bytes_per_param(2, False) == 8 + 2 + 2 + 8 + 2


def test_optimizer_factor_is_the_shard_streamed_through_hbm():
    chip = get_chip("tpu-v5e")
    c = StepConstants(hbm_fraction=0.5)
    out = calibrated_train_step(TINY, chip, MeshPlan({"fsdp": 4, "model": 2}), TrainOptions(), 8, 512, constants=c)
    shard = TINY.params() / 8
    assert out["factors"]["optimizer_s"] == pytest.approx(shard * 28 / (0.5 * chip.hbm_bandwidth_bytes_per_s))


def test_overlap_rule_by_hand():
    # three layers of 1 s compute, 0.5 s of fsdp collectives each: hidden but the first (0.5 s exposed)
    assert overlapped_layers_s(3, 1.0, 0.5, 0.0) == pytest.approx((3.5, 0.5))
    # collectives slower than compute: 3 x 2 s + the first 2 s; 8 - 3 exposed
    assert overlapped_layers_s(3, 1.0, 2.0, 0.0) == pytest.approx((8.0, 5.0))
    # tensor-parallel collectives wait on the layer: added, unless overlapped (collective matmul)
    assert overlapped_layers_s(3, 1.0, 0.5, 0.3) == pytest.approx((3 * 1.3 + 0.5, 3 * 0.3 + 0.5))
    assert overlapped_layers_s(3, 1.0, 0.5, 0.3, tp_overlapped=True) == pytest.approx((3.5, 0.5))
    # overlapping is not free: each layer pays interference x the shorter side (0.2 x 0.5 s)
    assert overlapped_layers_s(3, 1.0, 0.5, 0.0, interference=0.2) == pytest.approx((3 * 1.1 + 0.5, 3 * 0.1 + 0.5))


def test_ring_times_by_hand():
    assert ring_time_s("all_gather", 1e9, 4, 1e9, 0, 0.0) == pytest.approx(0.75)
    assert ring_time_s("all_reduce", 1e9, 4, 1e9, 3, 1e-6) == pytest.approx(2 * (0.75 + 3e-6))
    assert ring_time_s("all_reduce", 1e9, 1, 1e9, 0, 0.0) == 0.0


def test_flash_pairs_count_whole_diagonal_blocks():
    assert flash_pairs(1024, 512) == 512 * 512 * 3  # two blocks each way: three on or below the diagonal
    assert flash_pairs(100, 512) == 100 * 100  # one block: the whole square
    assert flash_pairs(4096, 512) >= 4096 * 4097 / 2


def test_axis_bandwidths_from_the_torus():
    v5e, v5p = get_chip("tpu-v5e"), get_chip("tpu-v5p")
    link_e, link_p = v5e.ici_bandwidth_bytes_per_s, v5p.ici_bandwidth_bytes_per_s
    # 16x16 v5e: each 16-long dimension wraps; model=16 takes one ring, fsdp=16 the other
    bws = axis_bandwidths(v5e, (16, 16), 16, 16)
    assert bws["model"] == (2 * link_e, 15) and bws["fsdp"] == (2 * link_e, 15)
    assert axis_bandwidths(v5e, (16, 16), 1, 256)["fsdp"] == (4 * link_e, 30)
    # an 8x4 v5e slice does not wrap: lines of one link each way
    assert axis_bandwidths(v5e, (8, 4), 1, 32)["fsdp"] == (2 * link_e, 10)
    # 4x4x4 v5p: every dimension wraps (multiple of 4); model=4 one ring, fsdp=16 two
    bws = axis_bandwidths(v5p, (4, 4, 4), 4, 16)
    assert bws["model"] == (2 * link_p, 3) and bws["fsdp"] == (4 * link_p, 6)


def test_one_chip_step_is_the_sum_of_its_factors():
    out = calibrated_train_step(TINY, get_chip("tpu-v5e"), MeshPlan(), TrainOptions(checkpoint="full"), 4, 1024,
                                constants=IDEAL)
    assert out["factors"]["exposed_ici_s"] == 0 and out["factors"]["dcn_s"] == 0
    assert sum(out["factors"].values()) == pytest.approx(out["step_time_s"])
    # full remat recomputes the forward: a third of matmul time again
    assert out["factors"]["recompute_s"] > out["factors"]["matmul_s"] / 3 * 0.9


def test_dcn_factor_by_hand():
    chip = get_chip("tpu-v5e")
    c = StepConstants(dcn_fraction=0.5, dcn_step_s=0.01)
    out = calibrated_train_step(TINY, chip, MeshPlan({"data": 4, "fsdp": 8}), TrainOptions(), 64, 512, constants=c,
                                slice_shape=(2, 4))
    grads = TINY.params() / 8 * 2  # the bf16 gradient shard of one chip
    want = 2 * 3 / 4 * grads / (0.5 * chip.dcn_bandwidth_bytes_per_s) + 2 * 3 * 0.01
    assert out["factors"]["dcn_s"] == pytest.approx(want)
    assert out["ideal"]["step_time_s"] < out["step_time_s"]


def test_mfu_falls_with_slices():
    chip = get_chip("tpu-v5e")
    mfus = [calibrated_train_step(TINY, chip, MeshPlan({"data": n, "fsdp": 16}), TrainOptions(), 32 * n, 1024,
                                  slice_shape=(4, 4))["mfu"] for n in (1, 2, 8, 32)]
    assert all(a > b for a, b in zip(mfus, mfus[1:], strict=False))
    assert 0 < mfus[-1] < mfus[0] < 1


def test_minimal_policy_keeps_matmul_outputs():
    d, q, kv, f = TINY.d_model, TINY.q_width, TINY.kv_width, TINY.d_ff
    assert saved_elements(TINY, "minimal") == 3 * d + q + 2 * kv + 2 * f  # input, QKV, O, gate and up, down
    assert saved_elements(TINY, "full") < saved_elements(TINY, "minimal") <= saved_elements(TINY, "none")
    assert recompute_fraction(TINY, "minimal") == 0.0
    chip = get_chip("tpu-v5p")
    steps = {p: calibrated_train_step(TINY, chip, MeshPlan({"fsdp": 4}), TrainOptions(checkpoint=p), 8, 1024,
                                      slice_shape=(2, 2))["factors"]["recompute_s"]
             for p in ("none", "minimal", "full")}
    assert steps["none"] == 0 < steps["minimal"] < steps["full"]


def test_validation_family_meets_the_target():
    from simulator.frontend.validate import summarize
    from simulator.frontend.validate_train import FAMILY, training_cases

    cases = training_cases()
    assert {c.held_out for c in cases} == {True, False}
    family = summarize(cases)[FAMILY]
    assert family["fit"]["geomean_error"] < 0.05
    assert family["held_out"]["geomean_error"] <= 0.10


def test_bad_remat_policy_names_the_valid_ones():
    with pytest.raises(PlanError, match="minimal") as err:
        calibrated_train_step(TINY, get_chip("tpu-v5e"), MeshPlan(), TrainOptions(checkpoint="sometimes"), 4, 512)
    assert "'sometimes'" in str(err.value) and "\n" not in str(err.value)


def test_uncalibrated_chip_names_the_calibrated_ones():
    with pytest.raises(PodsimError, match="no calibrated training-step model for chip 'h100'.*tpu-v5e"):
        step_constants("h100")


def test_state_that_does_not_fit_gives_its_numbers():
    big = TransformerConfig(name="big", d_model=8192, d_ff=28672, n_layers=64, n_heads=64, vocab_size=32000)
    with pytest.raises(PlanError) as err:
        calibrated_train_step(big, get_chip("tpu-v5e"), MeshPlan({"fsdp": 16}), TrainOptions(), 16, 2048,
                              slice_shape=(4, 4))
    text = str(err.value)
    gib = big.params() * 16 / 16 / 2**30  # weights, grads, moments and master: 16 B per parameter over 16 chips
    assert "16.0 GiB" in text and "fsdp" in text and "\n" not in text
    assert math.floor(gib) <= float(text.split(" needs ")[1].split(" GiB")[0])


def test_mfu_vs_slices_scenario(tmp_path):
    from scenarios import mfu_vs_slices

    r = mfu_vs_slices.run(models=("maxtext-16b", "maxtext-128b"), slices=(1, 4, 32), plot=str(tmp_path / "m.png"))
    for points in r.extra["curves"].values():
        mfus = [p["mfu_published_convention"] for p in points]
        assert mfus[0] > mfus[1] > mfus[2] and points[0]["dcn_s"] == 0 < points[1]["dcn_s"] < points[2]["dcn_s"]
    published = r.extra["published"]
    assert len(published) == 12 and {p["set"] for p in published} == {"fit", "held out"}
    assert (tmp_path / "m.png").stat().st_size > 1000 and r.extra["calibrated"]
    ideal = mfu_vs_slices.run(chip="h100", models=("maxtext-16b",), slices=(1, 2))
    assert not ideal.extra["calibrated"] and "IDEAL" in ideal.headline and ideal.extra["published"] == []
    with pytest.raises(PodsimError, match="maxtext-16b"):
        mfu_vs_slices.run(models=("gpt-5",))



def test_fitting_script_reproduces_the_committed_constants():
    import json

    from simulator.hardware.train_calibration import TRAIN_JSON

    module = load_script("fit_train_calibration")
    table = {**module.build(), "gpu": module.build_gpu()}
    assert json.loads(json.dumps(table)) == json.loads(TRAIN_JSON.read_text())


def test_transformer_step_scenario_carries_the_calibrated_breakdown():
    from scenarios import transformer_step

    r = transformer_step.run(model="gpt2", mode="train", mesh="fsdp=4", batch=8, seq=512, calibrated=True, trace=False)
    cal = r.extra["calibrated_step"]
    assert cal["step_time_s"] > cal["ideal"]["step_time_s"] and cal["slice_shape"] == [2, 2]
    plain = transformer_step.run(model="gpt2", mode="train", mesh="fsdp=4", batch=8, seq=512, trace=False)
    assert "calibrated_step" not in plain.extra


def test_zero_stages_by_hand():
    """fsdp=4 on a 2x2 v5e slice (lines of one link each way, two dimensions): ZeRO-0 AllReduces the whole bf16
    gradient once (2 x 3/4 V / W, plus a hop per ring step), ZeRO-1 reduce-scatters and re-gathers it (the same),
    ZeRO-2 re-gathers once and reduce-scatters per layer behind the backward pass."""
    chip = get_chip("tpu-v5e")
    c = StepConstants(ici_fraction=0.5)
    w = 2 * chip.ici_bandwidth_bytes_per_s * 0.5  # two line dimensions
    whole = TINY.params() * 2
    ring = 2 * (3 / 4 * whole / w + 2 * chip.hop_latency_s)

    def exposed(zero: int) -> float:
        return calibrated_train_step(TINY, chip, MeshPlan({"fsdp": 4}), TrainOptions(zero=zero), 8, 512, constants=c,
                                     slice_shape=(2, 2))["factors"]["exposed_ici_s"]

    assert exposed(0) == pytest.approx(ring)
    assert exposed(1) == pytest.approx(ring)
    assert ring / 2 < exposed(2) < ring / 2 * 1.2  # the one re-gather, and the last layer's reduce-scatter
