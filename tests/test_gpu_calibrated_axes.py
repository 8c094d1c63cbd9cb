"""`podsim model ... --calibrated` on every GPU mesh axis: no refusal, and what no fit pinned is named.

The oracle for "named" is the fit table itself (`gpu_fit_summary`: the axes and chips its fit rows used), not the
code under test: an axis or chip outside it must appear in ``uncalibrated``, one inside it must not.
"""
from __future__ import annotations

import json

import pytest

from simulator.frontend.cli import main
from simulator.hardware.train_calibration import gpu_fit_summary

#: one layout per axis (with the model axis where the model needs it to fit in memory), on 8-64 GPUs
TRAIN_MESHES = [("llama-2-7b", "data=2,model=4", 8), ("llama-2-7b", "fsdp=8", 8), ("llama-2-7b", "model=8", 8),
                ("llama-2-7b", "pipeline=2,model=4", 8), ("llama-2-7b", "sequence=2,model=4", 8),
                ("mixtral-8x7b", "fsdp=8,expert=8", 64)]


@pytest.mark.parametrize(("model", "mesh", "batch"), TRAIN_MESHES)
@pytest.mark.parametrize("chip", ["h100", "h200"])
def test_calibrated_training_runs_on_every_axis_and_names_what_no_fit_pinned(
        model: str, mesh: str, batch: int, chip: str, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["model", model, "--mode", "train", "--chip", chip, "--mesh", mesh, "--batch", str(batch), "--seq", "4096",
            "--checkpoints-per-layer", "full", "--calibrated", "--no-simulate", "--json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    step = out["calibrated_step"]
    assert step["step_time_s"] >= step["ideal"]["step_time_s"] > 0
    named = " ".join(out["uncalibrated"])
    fitted = gpu_fit_summary()
    for axis in (a.split("=")[0] for a in mesh.split(",")):
        assert (f"{axis} axis" in named) == (axis not in fitted["fit_axes"]), (axis, named)
    assert (f"{chip} training-step constants" in named) == (chip not in fitted["fit_chips"]), named
    assert main(args[:-1]) == 0  # the text report: one line names them, when there are any
    text = capsys.readouterr().out
    assert ("uncalibrated" in text) == bool(out["uncalibrated"])


@pytest.mark.parametrize("mode", ["decode", "prefill"])
@pytest.mark.parametrize(("mesh", "engine"), [("model=8", "vllm"), ("data=2,model=4", "tensorrt-llm")])
def test_calibrated_serving_runs_on_a_gpu_mesh_with_an_engine(mode: str, mesh: str, engine: str,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    args = ["model", "llama-3-8b", "--mode", mode, "--chip", "h100", "--mesh", mesh, "--batch", "8", "--context",
            "1024", "--calibrated", "--engine", engine]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert f"served, forecast ({engine}" in text


def test_an_axis_that_is_not_there_exposes_exactly_nothing() -> None:
    """No model axis, no tensor-parallel collective: its exposed time is 0, not a difference of two equal sums
    (which printed 5.6e-17 s); the same for fsdp with no fsdp axis."""
    from simulator.hardware.specs import get_chip
    from simulator.workloads.plans.calibrated_gpu import calibrated_gpu_step
    from simulator.workloads.plans.layout import MeshPlan, TrainOptions
    from simulator.workloads.transformer import get_model

    cfg, h100 = get_model("llama-3-8b"), get_chip("h100")
    for chip, fsdp, seq in (("h100", 8, 4096), ("h100", 16, 4096), ("a100", 4, 2048)):  # printed 5.6e-17 or 1.1e-16
        no_tp = calibrated_gpu_step(cfg, get_chip(chip), MeshPlan({"fsdp": fsdp}), TrainOptions(), 2 * fsdp, seq)
        assert no_tp["factors"]["exposed_tp_s"] == 0.0 and no_tp["factors"]["exposed_fsdp_s"] > 0
    no_fsdp = calibrated_gpu_step(cfg, h100, MeshPlan({"model": 8}), TrainOptions(microbatches=2), 16, 4096)
    assert no_fsdp["factors"]["exposed_fsdp_s"] == 0.0 and no_fsdp["factors"]["exposed_tp_s"] > 0
