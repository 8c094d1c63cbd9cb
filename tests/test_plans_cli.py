"""`podsim model --mode train|prefill|decode`, `podsim plan`, and the plan scenarios, through their public faces."""
import json
import math

import pytest

from scenarios import fsdp_vs_tp, long_context_decode, pipeline_bubble, transformer_step
from simulator.frontend.cli import main

TRAIN_KEYS = ["params_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes", "train_state_bytes",
              "memory_per_chip_bytes", "fits", "min_chips", "step_time_s", "mfu", "tokens_per_s", "exposed_comm_s",
              "bubble_fraction", "critical_batch_per_chip"]


def _json(capsys, *argv):
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_model_train_reports_state_memory_time_and_cost(capsys):
    out = _json(capsys, "model", "gpt2", "--mode", "train", "--batch", "8", "--seq", "1024", "--mesh",
                "fsdp=2,model=2", "--price-per-chip-hour", "1.5")
    assert all(k in out for k in TRAIN_KEYS)
    assert out["train_state_bytes"] == sum(out[k] for k in ("params_bytes", "grads_bytes", "optimizer_bytes",
                                                             "activations_bytes"))
    assert out["params_bytes"] == 124_439_808 * 2  # gpt2's published count, bf16
    assert set(out["exposed_comm_s"]) == {"fsdp", "model"} and out["simulated"]
    assert out["cost_per_step_usd"] == pytest.approx(1.5 * 4 * out["step_time_s"] / 3600)
    assert out["cost_per_million_tokens_usd"] == pytest.approx(out["cost_per_step_usd"] / (8 * 1024) * 1e6)
    assert out["tokens_per_s"] == pytest.approx(8 * 1024 / out["step_time_s"])
    # MFU: 6 x matmul parameters per token (12 D^2 a layer, the tied output projection) plus causal attention
    attention = 3 * 4 * 12 * 768 * 8 * 1024 * 1025 / 2
    flops = 6 * (12 * 12 * 768**2 + 50257 * 768) * 8 * 1024 + attention
    assert out["mfu"] == pytest.approx(flops / (4 * 1.97e14 * out["step_time_s"]), rel=1e-6)


def test_model_pipeline_train_has_a_bubble_and_transfers(capsys):
    out = _json(capsys, "model", "gpt2", "--mode", "train", "--batch", "8", "--seq", "1024", "--mesh",
                "pipeline=2,data=2", "--microbatches", "4", "--schedule", "1f1b")
    assert 0.15 < out["bubble_fraction"] < 0.35  # book: 1 / 5, the output layer makes stage 2 heavier
    assert out["exposed_comm_s"]["pipeline"] > 0 and out["microbatches"] == 4


def test_model_decode_kv_sharding_and_weight_only_quantization(capsys):
    heads = _json(capsys, "model", "llama-3-70b", "--batch", "8", "--context", "8192", "--mesh", "model=16",
                  "--no-simulate")
    auto = _json(capsys, "model", "llama-3-70b", "--batch", "8", "--context", "8192", "--mesh", "model=16",
                 "--kv-sharding", "auto", "--no-simulate")
    assert auto["kv_sharding"] == "heads x batch" and auto["max_batch"] >= 2 * heads["max_batch"]
    w8 = _json(capsys, "model", "llama-3-70b", "--batch", "8", "--context", "8192", "--mesh", "model=16",
               "--weight-dtype", "int8", "--compute-dtype", "bf16", "--no-simulate")
    assert w8["per_chip"]["flops_per_step"] == heads["per_chip"]["flops_per_step"]
    assert w8["t_compute_s"] == pytest.approx(heads["t_compute_s"])  # same FLOP rate
    halved = heads["weight_bytes_read_per_step"] / 2 / 16  # int8 weights: half the bytes, per chip
    assert heads["t_memory_s"] - w8["t_memory_s"] == pytest.approx(halved / 8.2e11)


def test_model_prefill_uses_seq_as_the_prompt(capsys):
    out = _json(capsys, "model", "gpt2", "--mode", "prefill", "--batch", "2", "--seq", "256", "--mesh", "model=2",
                "--price-per-chip-hour", "2")
    assert out["new_tokens"] == 256 and out["step_time_s"] > 0
    assert out["cost_per_step_usd"] == pytest.approx(2 * 2 * out["step_time_s"] / 3600)


def test_plan_ranks_layouts_and_simulates_the_best(capsys, tmp_path):
    picture = tmp_path / "plans.png"
    out = _json(capsys, "plan", "gpt2", "--chip", "tpu-v5e", "--chips", "8", "--mode", "train", "--batch", "16",
                "--seq", "1024", "--top", "2", "--plot", str(picture))
    plans = out["plans"]
    assert [p["simulated"] for p in plans[:3]] == [True, True, False]
    assert plans[0]["step_time_s"] <= plans[1]["step_time_s"]
    assert all(math.prod(p["mesh"].values()) == 8 for p in plans)
    closed = [p["step_time_s"] for p in plans[2:] if p["fits"]]
    assert closed == sorted(closed)
    assert all(k in plans[0] for k in ("mesh", "step_time_s", "mfu", "memory_per_chip_bytes", "fits", "simulated"))
    assert picture.stat().st_size > 1000


def test_plan_decode_on_a_topology(capsys):
    out = _json(capsys, "plan", "llama-2-7b", "--chip", "tpu-v5e", "--topology", "torus:2x4", "--mode", "decode",
                "--batch", "8", "--seq", "2048", "--top", "1")
    assert out["chips"] == 8 and out["plans"][0]["simulated"]
    assert {tuple(p["mesh"]) for p in out["plans"]} <= {("data",), ("model",), ("data", "model")}


def test_plan_text_table(capsys):
    assert main(["plan", "gpt2", "--chips", "4", "--batch", "8", "--seq", "512", "--top", "1"]) == 0
    text = capsys.readouterr().out
    assert "layouts fit" in text and " sim " in text and "mesh" in text


def test_transformer_step_trains_on_a_pipeline():
    r = transformer_step.run(model="gpt2", mode="train", batch=8, seq=512, mesh="pipeline=2,data=2", microbatches=4,
                             schedule="gpipe", price_per_chip_hour=1.0)
    assert r.extra["bubble_fraction"] > 0.1 and r.extra["cost_per_step_usd"] > 0
    assert r.extra["step_time_s"] >= r.extra["budget"]["lower_bound_s"]


def test_fsdp_vs_tp_scenario_reports_each_layout():
    r = fsdp_vs_tp.run(layers=1, batch=16, seq=512)
    assert [row["mesh"] for row in r.extra["layouts"]] == [{"fsdp": 16}, {"model": 16}, {"fsdp": 4, "model": 4}]
    assert r.extra["layouts"][0]["critical_batch_per_chip"]["fsdp"] == pytest.approx(4.59e14 / (2 * 2 * 9e10))
    assert r.extra["best"] in r.headline


def test_pipeline_bubble_scenario_tracks_the_book():
    r = pipeline_bubble.run(model="gpt2", stages=2, microbatches=(2, 8), schedules=("gpipe", "interleaved"),
                            virtual_stages=2, seq=256)
    points = r.extra["points"]
    assert [p["book_bubble_fraction"] for p in points] == pytest.approx([1 / 3, 1 / 9, 1 / 5, 1 / 17])
    assert points[0]["bubble_fraction"] > points[1]["bubble_fraction"]  # more microbatches, less bubble


def test_long_context_decode_scenario_doubles_the_batch_past_the_kv_heads():
    r = long_context_decode.run(model="llama-3-8b", model_axis=16, context=32768, simulate=False)
    heads, sequence, auto = r.extra["shardings"]
    assert sequence["max_batch"] >= 2 * heads["max_batch"] and auto["max_batch"] == sequence["max_batch"]
    assert sequence["kv_per_chip_bytes"] == pytest.approx(heads["kv_per_chip_bytes"] / 2)
