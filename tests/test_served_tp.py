"""Tensor-parallel serving (issue 27, item 5): each layer's two Megatron AllReduces against closed forms from NCCL's
own latency table, the 1 -> N speed-up sub-linear and monotone, ``--engine`` on a mesh through the CLI, what is
uncalibrated named, and the multi-GPU validation family's fit report recomputed from the CSV with numpy."""
import csv
import dataclasses
import json
import math

import numpy as np
import pytest

from simulator.errors import PodsimError
from simulator.frontend.validate_decode import MULTI_GPU, SPEEDUP, decode_rows, predict
from simulator.hardware.calibration import DATA
from simulator.hardware.decode_calibration import DecodeCalibration, get_decode_calibration
from simulator.workloads.served import served_request, served_step
from simulator.workloads.served_tp import allreduce_cost, check_gpus
from simulator.workloads.transformer import get_model

D, LAYERS = 4096, 32  # Llama-2-7B
A100_NVLINK = 12 * 25e9  # bytes/s one way: NVLink 3, 12 links x 25 GB/s (A100 datasheet)
# NCCL src/graph/tuning.cc (ring, NVLink): base latency and per-step latency, microseconds
NCCL_BASE_US = {"LL": 6.6, "LL128": 14.0, "Simple": 8.4}
NCCL_STEP_US = {"LL": 0.6, "LL128": 1.9, "Simple": 3.4}
NCCL_EFFICIENCY = {"LL": 0.5, "LL128": 120 / 128, "Simple": 1.0}  # payload bytes per wire byte


def _ring_by_hand(n: int, nbytes: float, protocol: str) -> float:
    """NCCL's ring AllReduce: base + 2 (n - 1) steps + the ring's bytes at the protocol's share of the link."""
    return (NCCL_BASE_US[protocol] + 2 * (n - 1) * NCCL_STEP_US[protocol]) * 1e-6 \
        + 2 * (n - 1) / n * nbytes / (A100_NVLINK * NCCL_EFFICIENCY[protocol])


def _cal(engine: str, sync_s: float | None) -> DecodeCalibration:
    return DecodeCalibration("a100", hbm_fraction=0.7, layer_overhead_s=1e-5, engine=engine, allreduce_sync_s=sync_s,
                             sync_fitted_to=engine, matmul_fraction={"bf16": 0.7})


@pytest.mark.parametrize("batch", [1, 8])
def test_nccl_allreduce_per_layer_is_the_ll_ring_by_hand(batch):
    """tensorrt-llm (NCCL): 2 AllReduces a layer of batch x d_model x 2 bytes, each NCCL's LL ring + sync log2(n)."""
    cfg, n, sync = get_model("llama-2-7b"), 8, 10e-6
    nbytes = batch * D * 2
    step = served_step(cfg, "a100", batch, 100, calibration=_cal("tensorrt-llm", sync), simulate=False, model=n)
    assert step["allreduce"]["bytes"] == nbytes and step["allreduce"]["per_step"] == 2 * LAYERS
    assert step["allreduce"]["algorithm"] == "nccl-ring" and step["allreduce"]["protocol"] == "LL"
    by_hand = min(_ring_by_hand(n, nbytes, p) for p in NCCL_BASE_US) + sync * 3  # log2(8) = 3
    assert by_hand == pytest.approx((6.6 + 14 * 0.6) * 1e-6 + 7 / 4 * nbytes / (A100_NVLINK / 2) + 30e-6)
    assert step["allreduce"]["seconds"] == pytest.approx(by_hand, rel=1e-12)
    assert step["breakdown"]["allreduce"]["calibrated_s"] == pytest.approx(2 * LAYERS * by_hand, rel=1e-12)
    assert step["breakdown"]["allreduce"]["ideal_s"] == pytest.approx(2 * LAYERS * 7 / 4 * nbytes / A100_NVLINK)


def test_custom_one_shot_and_two_shot_by_hand_and_large_prefills_fall_back_to_nccl():
    """vLLM: one-shot = 2 barriers at an LL step + every peer's buffer read; two-shot = 3 barriers + a ring's bytes;
    past its 8 MiB buffer, NCCL with the fastest protocol (LL128 for 16 MiB on 8 A100s)."""
    step_s = NCCL_STEP_US["LL"] * 1e-6
    one = allreduce_cost("vllm", get_model_chip(), 8, 8192, 0.0)
    assert one["algorithm"] == "one-shot" and one["seconds"] == pytest.approx(2 * step_s + 7 * 8192 / A100_NVLINK)
    two = allreduce_cost("vllm", get_model_chip(), 8, 2**20, 0.0)  # 1 MiB on 8 GPUs: over the 256 KiB one-shot cap
    assert two["algorithm"] == "two-shot"
    assert two["seconds"] == pytest.approx(3 * step_s + 7 / 4 * 2**20 / A100_NVLINK)
    assert allreduce_cost("vllm", get_model_chip(), 4, 2**20 // 4, 0.0)["algorithm"] == "one-shot"  # < 512 KiB on 4
    big = allreduce_cost("vllm", get_model_chip(), 8, 16 * 2**20, 5e-6)
    # by hand: LL128 40.6 us + 1.75 x 16 MiB at 281 GB/s = 145 us; Simple 56 us + 98 us = 154 us; LL 15 us + 196 us
    assert big["algorithm"] == "nccl-ring" and big["protocol"] == "LL128"
    assert big["seconds"] == pytest.approx(_ring_by_hand(8, 16 * 2**20, "LL128") + 15e-6, rel=1e-12)
    assert allreduce_cost("gpt-fast", get_model_chip(), 1, 8192, 5e-6)["seconds"] == 0.0  # one GPU: none
    assert allreduce_cost("vllm", get_model_chip(), 3, 8192, 0.0)["algorithm"] == "nccl-ring"  # 2, 4, 6, 8 only
    # PyTorch's IntraNodeComm (gpt-fast): one-shot to 256 KiB, two-shot to 10 MiB, then NCCL
    assert [allreduce_cost("gpt-fast", get_model_chip(), 8, b, 0.0)["algorithm"]
            for b in (256 * 2**10, 9 * 2**20, 11 * 2**20)] == ["one-shot", "two-shot", "nccl-ring"]


def get_model_chip():
    from simulator.hardware.specs import get_chip

    return get_chip("a100")


@pytest.mark.parametrize(("model", "engine", "chip", "weight", "monotone"), [
    ("llama-2-7b", "gpt-fast", "a100", "bf16", True), ("llama-2-7b", "vllm", "h100", "bf16", False),
    ("llama-3-70b", "vllm", "h100", "bf16", True), ("llama-3-70b", "gpt-fast", "a100", "int8", True)])
def test_speed_up_is_sub_linear_and_grows_where_the_weights_saved_outweigh_the_allreduces(model, engine, chip, weight,
                                                                                         monotone):
    """Speed-up(n) < n always (every AllReduce costs); doubling n speeds the step up exactly when the weight time a GPU
    saves, ``weights(n) - weights(2n)``, exceeds the AllReduce time it adds (both read from the breakdown). The 7B
    model on H100 under vLLM may go either way from 4 to 8 GPUs (its 1.7 GB share streams in 0.65 ms at 4 GPUs, so
    the 0.33 ms saved meets 64 AllReduces' growth), so only the comparison is asserted there."""
    cfg = get_model(model)
    steps = {n: served_step(cfg, chip, 1, 256, weight_dtype=weight, simulate=False, engine=engine, model=n)
             for n in (1, 2, 4, 8)}
    t = {n: s["step_time_s"] for n, s in steps.items()}
    for n in (2, 4, 8):
        assert 1 < t[1] / t[n] < n
    for n in (1, 2, 4):
        b, b2 = steps[n]["breakdown"], steps[2 * n]["breakdown"]
        saved = sum(b[f]["calibrated_s"] - b2[f]["calibrated_s"] for f in ("weights", "kv_cache", "matmul", "overlap"))
        added = b2["allreduce"]["calibrated_s"] - b["allreduce"]["calibrated_s"]
        assert (t[2 * n] < t[n]) == (saved > added)
        assert t[2 * n] < t[n] or (not monotone and n == 4)


def test_ideal_weights_split_exactly_over_the_model_axis():
    cfg = get_model("llama-2-7b")
    one = served_step(cfg, "a100", 1, 0, simulate=False, engine="gpt-fast")["breakdown"]
    eight = served_step(cfg, "a100", 1, 0, simulate=False, engine="gpt-fast", model=8)["breakdown"]
    norms = 2 * D * 2 * LAYERS + D * 2  # two RMSNorm weights a layer and the final one, bf16, on every GPU
    streamed = (cfg.params() - cfg.vocab_size * D) * 2  # the embedding table is looked up, not streamed
    assert one["weights"]["ideal_s"] * 2.039e12 == pytest.approx(streamed, rel=1e-9)
    assert eight["weights"]["ideal_s"] * 2.039e12 == pytest.approx((streamed - norms) / 8 + norms, rel=1e-9)


def test_uncalibrated_parts_are_named():
    cfg = get_model("llama-2-7b")
    assert served_step(cfg, "h100", 1, 100, simulate=False, engine="tensorrt-llm", model=8)["uncalibrated"] == []
    gpt = served_step(cfg, "a100", 1, 100, simulate=False, engine="gpt-fast", model=8)["uncalibrated"]
    # gpt-fast's kernel (PyTorch's one-shot) has its own fit, on H100s: on an A100 that borrowing is named
    assert len(gpt) == 1 and "gpt-fast" in gpt[0] and "torch-one-shot" in gpt[0] and "h100" in gpt[0]
    assert served_step(cfg, "h100", 1, 100, simulate=False, engine="vllm", model=8)["uncalibrated"] == []
    borrowed = dataclasses.replace(_cal("vllm", 15e-6), sync_fitted_to="tensorrt-llm")  # another engine's sync
    named = served_step(cfg, "a100", 1, 100, calibration=borrowed, simulate=False, model=2)["uncalibrated"]
    assert len(named) == 1 and "tensorrt-llm's fitted value" in named[0]
    assert "fitted without CUDA graphs where vllm runs with them" in named[0]
    assert served_step(cfg, "a100", 1, 100, simulate=False, engine="gpt-fast")["uncalibrated"] == []  # one GPU
    h200 = served_request(cfg, "h200", 1, 32, 8, engine="vllm", model=2)["uncalibrated"]
    assert any("h200" in u and "h100" in u for u in h200) and any("vllm" in u for u in h200)
    long = served_step(cfg, "h100", 1, 32768, simulate=False, engine="vllm")["uncalibrated"]
    assert any("KV-cache" in u for u in long)  # a long context: KV streaming is a large part, never fitted
    none = served_step(cfg, "a100", 1, 100, calibration=_cal("vllm", None), simulate=False, model=2)["uncalibrated"]
    assert any("none fitted" in u for u in none)


def test_bad_tensor_parallel_widths_are_one_line():
    for bad in (0, 16, 2.0, True):
        with pytest.raises(PodsimError, match="model=") as err:
            check_gpus(bad)
        assert "\n" not in str(err.value)
    with pytest.raises(PodsimError, match="n_heads"):  # 32 heads do not split over 3 GPUs
        served_step(get_model("llama-2-7b"), "a100", 1, 0, simulate=False, model=3)


def test_engine_on_a_mesh_through_the_cli(capsys):
    from simulator.frontend.cli import main

    argv = ["model", "llama-2-7b", "--chip", "a100", "--mesh", "model=8", "--calibrated", "--engine", "gpt-fast"]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    want = served_step(get_model("llama-2-7b"), "a100", 1, 0, simulate=False, engine="gpt-fast", model=8)
    assert out["served_step_time_s"] == pytest.approx(want["step_time_s"], rel=1e-12)
    assert out["served"]["model"] == 8 and out["served"]["allreduce"]["algorithm"] == "one-shot"
    assert out["uncalibrated"] == want["uncalibrated"] and out["uncalibrated"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "AllReduce 64 per step" in text and sum(line.startswith("  uncalibrated: ") for line in
                                                   text.splitlines()) == 1
    # a data axis: independent replicas, each with its share of the batch
    assert main(["model", "llama-2-7b", "--chip", "h100", "--mesh", "data=2,model=4", "--batch", "8", "--calibrated",
                 "--engine", "tensorrt-llm", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    replica = served_step(get_model("llama-2-7b"), "h100", 4, 0, simulate=False, engine="tensorrt-llm", model=4)
    assert out["served_step_time_s"] == pytest.approx(replica["step_time_s"], rel=1e-12)
    assert out["served_tokens_per_s"] == pytest.approx(2 * replica["tokens_per_s"], rel=1e-12)
    # a chip without serving factors: the calibrated step stands, and says what it lacks
    assert main(["model", "gpt2", "--chip", "tpu-v5e", "--mesh", "model=4", "--calibrated", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "served" not in out and any("tpu-v5e" in u for u in out["uncalibrated"])


def _rows_from_csv() -> list[dict[str, str]]:
    with (DATA / "calibration" / "decode_latency.csv").open() as f:
        return list(csv.DictReader(f))


def test_multi_gpu_sets_follow_the_stated_rule():
    """Fit: NeMo's 8-GPU rows at batch 1 and 8 (its single-GPU fit batches); every other multi-GPU row held out."""
    rows = _rows_from_csv()
    assert all(r["gpus"].isdigit() for r in rows)
    multi = [r for r in rows if int(r["gpus"]) > 1]
    assert {r["set"] for r in multi if "gpt-fast" in r["engine"] or "vLLM" in r["engine"]} == {"held_out"}
    want_fit = {r["row"] for r in multi if r["engine"].startswith("NeMo") and r["gpus"] == "8" and r["batch"] in "18"}
    assert {r["row"] for r in multi if r["set"] == "fit"} == want_fit and len(want_fit) == 4
    assert all(r["source"].startswith("https://") and r["published"] for r in multi)


def test_validate_family_and_fit_report_recomputed_from_the_csv():
    from simulator.frontend.validate import validate

    result = validate()
    rows = {r["row"]: r for r in _rows_from_csv()}
    multi = [r for r in rows.values() if int(r["gpus"]) > 1 and r["metric"] != "ttft" and int(r["batch"]) < 32]
    report = json.loads((DATA / "decode_calibration.json").read_text())["fit"]
    for label, which in (("fit", "multi_gpu_fit"), ("held_out", "multi_gpu_held_out")):
        subset = [r for r in multi if r["set"] == label]
        assert sorted(report[f"{which}_rows"]) == sorted(r["row"] for r in subset)
        logs = np.abs(np.log([predict(r) / float(r["measured_ms"]) for r in subset]))
        assert report[f"{which}_error"] == pytest.approx(np.expm1(logs.mean()), rel=1e-3)  # JSON: 8 decimals
        family = result["families"][MULTI_GPU][label]
        assert family["cases"] == len(subset) and family["geomean_error"] == pytest.approx(np.expm1(logs.mean()))
        assert family["worst_error"] == pytest.approx(np.expm1(logs.max()))
    assert result["families"][MULTI_GPU]["held_out"]["geomean_error"] <= 0.15  # issue 27's target
    # the speed-ups: time on 1 GPU over time on 8, same source and setup, from the published numbers
    cases = [c for c in result["cases"] if c["family"] == SPEEDUP]
    gpt = next(c for c in cases if "gpt-fast llama-2-7b bf16" in c["case"])
    assert gpt["measured"] == pytest.approx(9.533 / (1000 / 328.43), rel=1e-3)  # gpt-fast README: 3.1x
    assert gpt["set"] == "held out"
    sets = {label: np.expm1(np.mean([abs(math.log(c["predicted"] / c["measured"])) for c in cases
                                     if (c["set"] == "fit") == (label == "fit")])) for label in ("fit", "held_out")}
    for label, error in sets.items():
        assert result["families"][SPEEDUP][label]["geomean_error"] == pytest.approx(error)
        assert error <= 0.20  # issue 27: the 1 -> 8 speed-up within 20% of published


def test_tensorrt_llm_sync_minimises_the_fit_rows_error():
    """The fitted sync is the minimum of the multi-GPU fit rows' geometric-mean error, by a scan done here."""
    fit = [r for r in decode_rows() if r["set"] == "fit" and int(r["gpus"]) > 1]
    cal = get_decode_calibration("a100", "tensorrt-llm")
    h100 = get_decode_calibration("h100", "tensorrt-llm")

    def error(sync: float) -> float:
        cals = {"a100": cal, "h100": h100}
        logs = [abs(math.log(predict(r, _with_sync(cals[r["chip"]], sync)) / float(r["measured_ms"]))) for r in fit]
        return math.exp(sum(logs) / len(logs)) - 1

    fitted = cal.allreduce_sync_s
    assert cal.sync_fitted_to == "tensorrt-llm" and 1e-6 < fitted < 1e-4
    scan = np.linspace(0.5 * fitted, 1.5 * fitted, 11)
    errors = [error(s) for s in scan]
    assert scan[int(np.argmin(errors))] == pytest.approx(fitted, rel=0.11)
    assert error(fitted) <= min(errors) + 1e-3


def _with_sync(cal: DecodeCalibration, sync: float) -> DecodeCalibration:
    import dataclasses

    engines = {**cal.engines, "tensorrt-llm": {**cal.engines["tensorrt-llm"], "allreduce_sync_s": sync}}
    return dataclasses.replace(cal, engines=engines)


@pytest.mark.parametrize("chip", ["a100", "h100"])
@pytest.mark.parametrize("engine", ["tensorrt-llm", "vllm", "gpt-fast"])
@pytest.mark.parametrize("model,batch,new_tokens", [(1, 1, 1), (4, 8, 1), (8, 3, 1), (2, 4, 512)])
def test_no_factor_of_the_bound_exceeds_its_forecast(chip, engine, model, batch, new_tokens):
    """Each factor's ideal is a bound: its calibrated figure can only be slower (every fitted fraction is <= 1 and
    the bound prices the useful FLOPs at peak). A100 decode at batch 8 on 4 GPUs once printed calibrated matmul
    63.37 us beside an 'ideal' of 86.43 us (the ideal priced the token dimension padded to 16)."""
    step = served_step(get_model("llama-2-7b"), chip, batch=batch, context=1024, new_tokens=new_tokens,
                       simulate=False, engine=engine, model=model)
    for factor in ("weights", "kv_cache", "matmul", "launch_sync", "allreduce"):
        f = step["breakdown"][factor]
        assert f["ideal_s"] <= f["calibrated_s"] * (1 + 1e-12), (factor, f)
    assert step["closed_form_ideal_s"] <= step["step_time_s"]
