"""Issue 27: int8 weight-only kernels at their own HBM fraction, and the per-layer fixed cost that makes a
tensor-parallel step's small per-GPU matrices reach less of HBM (the b / (b + B_half) ramp of weight streaming).

Oracles: Llama-2-7B's streamed weights counted by hand (every weight but the input embedding table, 1 byte each
in int8), the A100 datasheet bandwidth, gpt-fast's README bound on the node it measured ("peak bandwidth is about
1700 GB/s" on its 330 W A100s), and the closed form of a fixed cost beside a rate."""
import csv

import pytest

from simulator.hardware.calibration import DATA
from simulator.hardware.decode_calibration import DecodeCalibration, get_decode_calibration
from simulator.workloads.served import served_step
from simulator.workloads.transformer import get_model

STREAMED = 6_738_415_616 - 32000 * 4096  # Llama-2-7B's published parameters less the embedding table a lookup reads
A100_HBM = 2.039e12  # bytes/s, A100 80GB SXM datasheet
README_PEAK = 1.70e12  # gpt-fast README: the most its power-limited A100s streamed, bytes/s


def _cal(**kw: object) -> DecodeCalibration:
    base: dict = {"hbm_fraction": 0.8, "layer_overhead_s": 0.0, "batch_slowdown": 0.0,
                  "matmul_fraction": {"bf16": 1.0, "int8": 1.0}}
    return DecodeCalibration("a100", **{**base, **kw})


def test_int8_weights_stream_at_the_engines_own_fraction():
    cfg = get_model("llama-2-7b")
    own = served_step(cfg, "a100", 1, 0, weight_dtype="int8", calibration=_cal(hbm_fraction_8bit=0.5),
                      simulate=False)
    assert own["breakdown"]["weights"]["calibrated_s"] == pytest.approx(STREAMED / (A100_HBM * 0.5), rel=1e-3)
    # an engine with native 8-bit kernels (no fraction of its own) streams them at its bf16 fraction
    native = served_step(cfg, "a100", 1, 0, weight_dtype="int8", calibration=_cal(), simulate=False)
    assert native["breakdown"]["weights"]["calibrated_s"] == pytest.approx(STREAMED / (A100_HBM * 0.8), rel=1e-3)
    # bf16 weights never take the 8-bit fraction
    bf16 = served_step(cfg, "a100", 1, 0, calibration=_cal(hbm_fraction_8bit=0.5), simulate=False)
    assert bf16["breakdown"]["weights"]["calibrated_s"] == pytest.approx(2 * STREAMED / (A100_HBM * 0.8), rel=1e-3)


def test_for_engine_does_not_carry_one_engines_8bit_fraction_to_another():
    cal = get_decode_calibration("a100")
    assert cal.for_engine("gpt-fast").hbm_fraction_8bit is not None
    for engine in ("vllm", "tensorrt-llm"):
        other = cal.for_engine("gpt-fast").for_engine(engine)
        assert other.hbm_fraction_8bit is None and other.weight_fraction(1) == other.hbm_fraction


def test_gpt_fast_fractions_are_physical():
    """Dequantizing in the kernel cannot stream faster than bf16 weights do, and neither beats the bandwidth the
    README measured on the same GPUs (1700 GB/s, 83% of the datasheet's 2039)."""
    g = get_decode_calibration("a100", "gpt-fast")
    assert g.hbm_fraction_8bit is not None
    assert 0 < g.hbm_fraction_8bit < g.hbm_fraction
    assert g.hbm_fraction * A100_HBM <= README_PEAK * 1.01


def test_the_per_layer_cost_is_a_ramp_in_matrix_size():
    """A fixed cost tau per layer beside a streaming rate r: a GPU holding b bytes of each layer streams at
    r b / (b + B_half), B_half = r tau. Over 8 GPUs each holds b / 8, so it reaches less of HBM."""
    tau, eta = 50e-6, 0.8
    cfg = get_model("llama-2-7b")
    rate, layer_bytes = A100_HBM * eta, (STREAMED - 32000 * 4096) * 2 / 32  # bf16, the blocks alone (no lm head)
    half = rate * tau
    for gpus in (1, 8):
        step = served_step(cfg, "a100", 1, 0, calibration=_cal(layer_overhead_s=tau), simulate=False, model=gpus)
        b = step["breakdown"]
        blocks_s = b["weights"]["calibrated_s"] - 32000 * 4096 * 2 / gpus / rate + b["launch_sync"]["calibrated_s"]
        reached = 32 * layer_bytes / gpus / blocks_s  # bytes/s the layers' weights stream at, their fixed cost in
        per_gpu = layer_bytes / gpus
        assert reached == pytest.approx(rate * per_gpu / (per_gpu + half), rel=2e-3)
    assert rate * (layer_bytes / 8) / (layer_bytes / 8 + half) < 0.6 * rate  # 51 MB a layer: under 60% of the rate


def test_new_gpt_fast_rows_keep_the_split_rule():
    """One-GPU rows fit, multi-GPU rows held out (the issue names gpt-fast's single-GPU rows as a fit source)."""
    with (DATA / "calibration" / "decode_latency.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r["row"].startswith("gptfast-a100-l31")]
    assert len(rows) == 10
    for r in rows:
        assert r["set"] == ("fit" if r["gpus"] == "1" else "held_out"), r["row"]
