"""Calibrated serving (issue 20, decode / prefill): the served model against hand-computed bytes, FLOPs and
overheads; the fitted factors against the published measurements; chips without data refused in one line."""
import csv
import json
import math

import numpy as np
import pytest
from conftest import load_script

from simulator.errors import PodsimError
from simulator.frontend.validate_decode import decode_rows, predict
from simulator.hardware.calibration import DATA
from simulator.hardware.decode_calibration import DecodeCalibration, decode_calibrated_chips, get_decode_calibration
from simulator.workloads.served import served_concurrent, served_request, served_step
from simulator.workloads.transformer import get_model

LLAMA2_7B_PARAMS = 6_738_415_616  # published count (Hugging Face meta-llama/Llama-2-7b-hf)
D, F, LAYERS, VOCAB, HEADS, HEAD_DIM = 4096, 11008, 32, 32000, 32, 128
H100_HBM, A100_PEAK, H100_PEAK = 3.35e12, 3.12e14, 989.4e12  # bytes/s, bf16 FLOP/s (datasheets)


def _unit(**kw) -> DecodeCalibration:
    """Ideal factors: full bandwidth and peak, no overhead, no batch slowdown (then changed one at a time)."""
    base = {"hbm_fraction": 1.0, "layer_overhead_s": 0.0, "batch_slowdown": 0.0,
            "matmul_fraction": {"bf16": 1.0, "int8": 1.0}}
    return DecodeCalibration("h100", **{**base, **kw})


def test_batch_one_decode_is_the_weights_over_bandwidth_by_hand():
    # every weight but the input embedding table (a lookup reads one row) crosses HBM once per token
    streamed = (LLAMA2_7B_PARAMS - VOCAB * D) * 2
    step = served_step(get_model("llama-2-7b"), "h100", 1, 0, calibration=_unit(), simulate=False)
    assert step["step_time_s"] == pytest.approx(streamed / H100_HBM, rel=1e-3)
    assert step["breakdown"]["weights"]["calibrated_s"] == pytest.approx(streamed / H100_HBM, rel=1e-3)
    half = served_step(get_model("llama-2-7b"), "h100", 1, 0, calibration=_unit(hbm_fraction=0.5), simulate=False)
    assert half["breakdown"]["weights"]["calibrated_s"] == pytest.approx(2 * streamed / H100_HBM, rel=1e-3)
    assert half["breakdown"]["weights"]["ideal_s"] == pytest.approx(streamed / H100_HBM, rel=1e-3)


def test_layer_overhead_adds_layers_times_tau_and_batch_slows_weights_by_log2_rows():
    cfg = get_model("llama-2-7b")
    plain = served_step(cfg, "h100", 8, 100, calibration=_unit(), simulate=False)
    tau = served_step(cfg, "h100", 8, 100, calibration=_unit(layer_overhead_s=3e-5), simulate=False)
    assert tau["step_time_s"] - plain["step_time_s"] == pytest.approx(LAYERS * 3e-5, rel=1e-9)
    assert tau["breakdown"]["launch_sync"] == {"ideal_s": 0.0, "calibrated_s": pytest.approx(LAYERS * 3e-5)}
    one = served_step(cfg, "h100", 1, 100, calibration=_unit(batch_slowdown=0.1), simulate=False)
    for batch, doublings in ((8, 3), (128, 6)):  # rows past 64 slow no further
        many = served_step(cfg, "h100", batch, 100, calibration=_unit(batch_slowdown=0.1), simulate=False)
        ratio = many["breakdown"]["weights"]["calibrated_s"] / one["breakdown"]["weights"]["calibrated_s"]
        assert ratio == pytest.approx(1 + 0.1 * doublings, rel=1e-9)


def test_prefill_matmul_time_is_the_flops_by_hand_over_the_fitted_peak():
    tokens = 2048
    per_layer = 2 * tokens * (4 * D * D + 3 * D * F) + 4 * HEADS * HEAD_DIM * tokens * (tokens + 1) / 2  # causal
    flops = LAYERS * per_layer + 2 * tokens * D * VOCAB
    cal = DecodeCalibration("a100", 1.0, 0.0, matmul_fraction={"bf16": 0.5})
    step = served_step(get_model("llama-2-7b"), "a100", 1, 0, new_tokens=tokens, calibration=cal, simulate=False)
    assert step["breakdown"]["matmul"]["calibrated_s"] == pytest.approx(flops / (A100_PEAK * 0.5), rel=1e-6)
    assert step["step_time_s"] == pytest.approx(flops / (A100_PEAK * 0.5), rel=1e-3)  # compute-bound
    assert step["breakdown"]["overlap"]["calibrated_s"] < 0  # the weights stream under the matmuls


def test_request_is_prefill_then_decode_steps_and_the_fitted_step_is_slower_than_ideal():
    cfg = get_model("llama-3-8b")
    req = served_request(cfg, "h100", 2, 64, 5)
    first = served_step(cfg, "h100", 2, 0, new_tokens=64, simulate=False)
    steps = [served_step(cfg, "h100", 2, 64 + t, simulate=False)["step_time_s"] for t in range(1, 5)]
    assert req["ttft_s"] == pytest.approx(first["step_time_s"], rel=1e-12)
    assert req["request_s"] == pytest.approx(first["step_time_s"] + sum(steps), rel=1e-12)
    assert req["output_tokens_per_s"] == pytest.approx(2 * 5 / req["request_s"])
    step = served_step(cfg, "h100", 1, 512)
    weights_by_hand = (8_030_261_248 - 128_256 * 4096) * 2 / H100_HBM  # published Llama-3-8B parameter count
    assert step["ideal_step_time_s"] >= weights_by_hand * 0.999  # the simulated ideal step
    assert step["step_time_s"] > step["ideal_step_time_s"]  # fitted kernels reach less than the spec bandwidth


def test_closed_loop_clients_fold_the_other_prompts_into_the_decode_steps_by_hand():
    # ideal factors: a decode step streams the weights and each request's KV cache at full bandwidth; a 512-token
    # prompt is compute-bound (512 rows > peak / bandwidth = 295), so it costs its FLOPs at peak
    c, prompt, out = 4, 512, 9
    weights = (LLAMA2_7B_PARAMS - VOCAB * D) * 2
    kv = 2 * D * 2 * LAYERS  # bytes per cached position (K and V, bf16, every layer)
    steps = [(weights + c * kv * (prompt + t + 1)) / H100_HBM for t in range(1, out)]  # read + write one position
    step = sum(steps) / len(steps)
    per_layer = 2 * prompt * (4 * D * D + 3 * D * F) + 4 * HEADS * HEAD_DIM * prompt * (prompt + 1) / 2
    prefill = (LAYERS * per_layer + 2 * prompt * D * VOCAB) / H100_PEAK
    extra = prefill - (weights + kv * (prompt + 1)) / H100_HBM  # what the prompt adds to a running step
    got = served_concurrent(get_model("llama-2-7b"), "h100", c, prompt, out, calibration=_unit())
    assert got["decode_step_s"] == pytest.approx(step, rel=1e-3)
    assert got["extra_s"] == pytest.approx(extra, rel=1e-2)
    assert got["tpot_s"] == pytest.approx(step + (c - 1) * extra / (out - 1), rel=1e-2)
    assert got["output_tokens_per_s"] == pytest.approx(c * out / (out * step + c * extra), rel=1e-2)
    alone = served_concurrent(get_model("llama-2-7b"), "h100", 1, prompt, out, calibration=_unit())
    assert alone["tpot_s"] == pytest.approx(alone["decode_step_s"], rel=1e-12)  # one client: nothing folded in
    with pytest.raises(PodsimError, match="output_len"):
        served_concurrent(get_model("llama-2-7b"), "h100", 2, prompt, 1)  # no decode step to fold into


def test_engine_batch_slowdown_is_its_own_or_the_chips_whichever_engine_came_before():
    table = json.loads((DATA / "decode_calibration.json").read_text())["chips"]["h100"]
    assert get_decode_calibration("h100", "vllm").batch_slowdown == table["engines"]["vllm"]["batch_slowdown"]
    for engine in ("tensorrt-llm", "gpt-fast"):
        own = table["engines"][engine].get("batch_slowdown", table["batch_slowdown"])
        assert get_decode_calibration("h100").for_engine(engine).batch_slowdown == own  # not vLLM's, carried over
    rows = decode_rows()
    assert {r["arrival"] for r in rows} == {"static", "closed_loop"}
    assert all("vllm" in r["engine"].lower() for r in rows if r["arrival"] == "closed_loop")


def test_chip_or_engine_without_decode_data_is_one_line_naming_what_has_it():
    with pytest.raises(PodsimError) as err:
        get_decode_calibration("tpu-v5e")
    text = str(err.value)
    assert "\n" not in text and "'tpu-v5e'" in text and "a100, h100, h200" in text
    with pytest.raises(PodsimError) as err:
        served_step(get_model("llama-2-7b"), "tpu-v6e")
    assert "tpu-v6e" in str(err.value) and "h100" in str(err.value)
    with pytest.raises(PodsimError, match="engines: gpt-fast, tensorrt-llm, vllm"):
        get_decode_calibration("h100", "sglang")
    assert decode_calibrated_chips() == ["a100", "h100", "h200"]


def test_measurement_file_names_its_sources_and_the_fit_reproduces_its_rows():
    rows = decode_rows()
    assert {r["set"] for r in rows} == {"fit", "held_out"}
    assert all(r["source"].startswith("https://") and r["published"] for r in rows)
    with (DATA / "calibration" / "decode_latency.csv").open() as f:
        assert len(list(csv.DictReader(f))) == len(rows)
    fit = [r for r in rows if r["set"] == "fit" and r["gpus"] == "1"]  # multi-GPU rows: tests/test_served_tp.py
    ratios = np.array([predict(r) / float(r["measured_ms"]) for r in fit])
    assert math.exp(np.mean(np.abs(np.log(ratios)))) - 1 <= 0.05  # the fitted rows, within 5% on average
    assert np.all(np.abs(np.log(ratios)) <= math.log(1.10))


def test_podsim_model_calibrated_adds_the_served_step_and_refuses_chips_without_data(capsys):
    from simulator.frontend.cli import main

    assert main(["model", "llama-2-7b", "--chip", "h100", "--calibrated", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    streamed = (LLAMA2_7B_PARAMS - VOCAB * D) * 2
    assert out["served"]["engine"] == "vllm"
    assert out["served"]["breakdown"]["weights"]["ideal_s"] == pytest.approx(streamed / H100_HBM, rel=1e-3)
    assert out["served_step_time_s"] > out["step_time_s"]  # the fitted step is slower than the ideal simulated one
    assert main(["model", "llama-2-7b", "--chip", "tpu-v5e", "--weight-dtype", "int8", "--calibrated",
                 "--engine", "vllm"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'tpu-v5e'" in err and "a100, h100, h200" in err
    assert main(["model", "llama-2-7b", "--chip", "tpu-v5e", "--weight-dtype", "int8", "--calibrated"]) == 0
    assert "served" not in capsys.readouterr().out  # no --engine: the TPU step keeps its calibrated mode alone


@pytest.mark.benchmark
def test_fit_script_reproduces_the_committed_serving_constants():
    """``scripts/fit_decode.py`` rebuilds decode_calibration.json exactly (about 40 s: pytest -m benchmark)."""

    from simulator.hardware.calibration import DATA as data

    module = load_script(data.parents[2] / "scripts" / "fit_decode.py")
    assert json.loads(json.dumps(module.build())) == json.loads((data / "decode_calibration.json").read_text())
