"""The calibrated GPU training step (`simulator.workloads.plans.calibrated_gpu`): layout on nodes, NCCL rings
against hand-derived closed forms, pipeline stages and bubble, forecast never below the bound, the CLI."""
from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.collectives.protocol import PROTOCOLS
from simulator.hardware.specs import get_chip
from simulator.hardware.train_calibration import gpu_step_constants
from simulator.workloads.plans.calibrated_gpu import IdealKernels, _stage_layers, calibrated_gpu_step, gpu_step_factors
from simulator.workloads.plans.gpu_network import AxisNet, axis_nets, nccl_s
from simulator.workloads.plans.layout import MeshPlan, TrainOptions
from simulator.workloads.transformer import TransformerConfig, get_model

A100 = get_chip("a100")
H100 = get_chip("h100")
SMALL = TransformerConfig(name="small", d_model=1024, d_ff=4096, n_layers=16, n_heads=16, vocab_size=32000)


def test_axes_fill_a_node_innermost_first_and_cross_nodes_over_one_nic_per_member() -> None:
    c = gpu_step_constants("a100")
    nets = axis_nets(A100, MeshPlan({"data": 4, "model": 8}), c)
    assert nets["model"].kind == "nvlink" and nets["model"].bus_bytes_per_s == 12 * 25e9  # 12 NVLink 3 links
    assert nets["data"].kind == "ib" and nets["data"].bus_bytes_per_s == 25e9  # one member per node: its own NIC
    fsdp = axis_nets(A100, MeshPlan({"fsdp": 16}), c)["fsdp"]
    assert fsdp.kind == "ib" and fsdp.bus_bytes_per_s == min(300e9, 8 * 25e9)  # 8 members, 8 NICs per node
    mixed = axis_nets(H100, MeshPlan({"fsdp": 8, "model": 2}), c)["fsdp"]
    assert mixed.bus_bytes_per_s == 4 * 50e9  # 4 of the group's members in each node


def test_nccl_ring_matches_its_closed_form_by_hand() -> None:
    net = AxisNet(8, 300e9, "nvlink", lambda v: 0.5)
    v = 64e6
    bus = 300e9 * 0.5
    # AllReduce: 2 (n - 1) steps of two hops (GPU -> switch -> GPU), 2 (n - 1) / n V over the bus, per protocol
    by_hand = min(p.launch_s + 14 * 2 * p.hop_latency_s["nvlink"] + 2 * 7 / 8 * v / (bus * p.efficiency)
                  for p in PROTOCOLS.values())
    assert nccl_s("all_reduce", v, net) == pytest.approx(by_hand, rel=1e-12)
    # a tiny message: LL wins (lowest latency); a large one: Simple (full bandwidth)
    tiny = {p.name: p.launch_s + 7 * 2 * p.hop_latency_s["nvlink"] + 7 / 8 * 1e3 / (bus * p.efficiency)
            for p in PROTOCOLS.values()}
    assert nccl_s("all_gather", 1e3, net) == pytest.approx(min(tiny.values())) == pytest.approx(tiny["LL"])
    ideal = AxisNet(8, 300e9, "nvlink", lambda v: 1.0, 2e-6)
    assert nccl_s("reduce_scatter", v, ideal) == pytest.approx(7 * 2e-6 + 7 / 8 * v / 300e9)
    assert nccl_s("all_reduce", v, None) == 0.0


def test_the_steps_collectives_run_as_nccl_picks_them() -> None:
    """8 H100 in one node, tensor parallel: at 1 KiB NCCL's tuner runs Ring/LL, 6.6 us base + 14 steps x 0.6 us
    and 1 KiB at min(141, 0.5 x 12 channels x 30 GB/s) x 8/14 GB/s (tuning.cc's tables, derived by hand in
    tests/test_nccl_tuner.py); at 1 GiB NVLS (Simple): 8 channels x 50 GB/s (the NVLS graph's per-channel figure,
    below its 0.85 x 7/8 x 2 reduction term) x 8/14 after its 25 us, faster than any ring (12 x 30 GB/s x 8/14)."""
    net = axis_nets(H100, MeshPlan({"model": 8}), gpu_step_constants("h100"))["model"]
    assert nccl_s("all_reduce", 1024, net) == pytest.approx((15.0 + 1024 / (1000 * 141 * 8 / 14)) * 1e-6)
    v = 2.0**30
    nvls_bw = 8 * 50 * 8 / 14  # GB/s of algorithm bandwidth
    assert nccl_s("all_reduce", v, net) < v / (12 * 30e9 * 8 / 14)  # the best ring NCCL's model allows
    assert nccl_s("all_reduce", v, net) == pytest.approx((25.0 + v / (1000 * nvls_bw)) * 1e-6, rel=1e-9)


def test_uneven_stages_put_the_extra_layers_first() -> None:
    stages = _stage_layers(126, 16)
    assert sum(stages) == 126 and stages == [8] * 14 + [7] * 2
    assert _stage_layers(4, 8) == [1] * 4 + [0] * 4


def test_pipeline_bubble_is_the_books_fraction_for_equal_stages() -> None:
    cfg = SMALL.replace(vocab_size=8)  # a negligible head: stages equal
    plan, m = MeshPlan({"pipeline": 4}), 16
    out = gpu_step_factors(cfg, A100, plan, TrainOptions(microbatches=m), 16, 1024, None, IdealKernels(A100))
    t_stage = out["stage_microbatch_s"][1]
    pipelined = out["factors"]["bubble_s"] + m * sum(out["stage_microbatch_s"]) / 4
    assert pipelined == pytest.approx((m + 3) * t_stage, rel=0.02)  # (M + p - 1) T
    assert out["factors"]["bubble_s"] / pipelined == pytest.approx(3 / 19, rel=0.05)


def test_interleaving_shrinks_the_bubble() -> None:
    plan = MeshPlan({"pipeline": 4})
    one = gpu_step_factors(SMALL, A100, plan, TrainOptions(microbatches=8), 8, 1024, None, IdealKernels(A100))
    two = gpu_step_factors(SMALL, A100, plan, TrainOptions(microbatches=8, schedule="interleaved", virtual_stages=2),
                           8, 1024, None, IdealKernels(A100))
    assert two["factors"]["bubble_s"] < one["factors"]["bubble_s"]


LAYOUTS = [{"data": 8}, {"fsdp": 16}, {"model": 8}, {"data": 2, "model": 4}, {"pipeline": 4, "model": 2},
           {"sequence": 2, "model": 4}, {"fsdp": 4, "sequence": 2}, {"data": 2, "pipeline": 2, "fsdp": 2, "model": 2}]


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(LAYOUTS), st.sampled_from(["a100", "h100"]), st.sampled_from(["none", "selective", "full"]),
       st.sampled_from([0, 1, 2, 3]), st.booleans())
def test_the_forecast_is_never_faster_than_its_bound_and_nothing_is_negative(layout: dict[str, int], chip: str,
                                                                             ckpt: str, zero: int,
                                                                             overlap: bool) -> None:
    plan = MeshPlan(layout)
    opts = TrainOptions(microbatches=2, checkpoint=ckpt, zero=zero, tp_overlap=overlap)
    batch = 2 * plan.batch_ways * 2
    out = calibrated_gpu_step(SMALL, get_chip(chip), plan, opts, batch, 2048)
    assert out["step_time_s"] >= out["ideal"]["step_time_s"] > 0
    assert all(v >= 0 for v in out["factors"].values()), out["factors"]
    assert all(v >= 0 for v in out["ideal"]["factors"].values())
    assert 0 < out["mfu"] <= out["ideal"]["mfu"] <= 1


def test_an_axis_no_fit_row_used_is_named_uncalibrated() -> None:
    out = calibrated_gpu_step(SMALL, H100, MeshPlan({"sequence": 2, "model": 4}), TrainOptions(), 4, 4096)
    named = " ".join(out["uncalibrated"])
    assert ("sequence axis" in named) == ("sequence" not in _fit_axes())


def _fit_axes() -> list[str]:
    from simulator.hardware.train_calibration import gpu_fit_summary

    return gpu_fit_summary().get("fit_axes", [])


def test_cli_gpu_forecast_on_every_axis(capsys: pytest.CaptureFixture[str]) -> None:
    from simulator.frontend.cli import main

    args = ["model", "llama-3-8b", "--mode", "train", "--chip", "h100", "--mesh", "fsdp=2,sequence=2,model=2",
            "--batch", "4", "--seq", "8192", "--calibrated", "--no-simulate", "--json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    step = out["calibrated_step"]
    assert out["calibrated_step_time_s"] == step["step_time_s"] >= step["ideal"]["step_time_s"]
    assert "uncalibrated" in out and set(step["factors"]) >= {"matmul_s", "exposed_cp_s", "exposed_tp_s"}
    assert math.isclose(out["calibrated_mfu"], step["mfu"])
    assert main(args[:-1]) == 0
    text = capsys.readouterr().out
    assert "forecast (calibrated)" in text and "bound (ideal peak)" in text and "published GPU runs" in text


def test_uneven_pipeline_stages_price_the_slowest_stage() -> None:
    cfg = get_model("llama-3-8b")  # 32 layers over 3 stages: 11, 11, 10
    plan = MeshPlan({"pipeline": 3, "model": 8})
    out = calibrated_gpu_step(cfg, A100, plan, TrainOptions(microbatches=12), 12, 2048)
    assert out["layers_per_stage"] == [11, 11, 10]
    first, second, last = out["stage_microbatch_s"]
    assert first == pytest.approx(second, rel=1e-3) and last != first  # the last holds the head, one layer fewer
