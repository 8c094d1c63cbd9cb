"""The GPU kernel model (simulator.hardware.gpu_kernels): tile and wave quantization by hand, properties, the
attention FLOP closed form, the fit report recomputed from the measurement files, and the calibrated simulator
running the same model."""
import csv
import json
import math

import numpy as np
import pytest
from conftest import load_script
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.engine.system import System
from simulator.errors import PodsimError
from simulator.hardware.calibration import DATA, calibrated_chips, get_calibration
from simulator.hardware.gpu_kernels import (
    DATA as KERNEL_DATA,
)
from simulator.hardware.gpu_kernels import (
    GpuKernels,
    attention_flops,
    fit_report,
    gpu_kernels,
    kernel_chips,
)

H100_PEAK, H100_SMS = 9.9e14, 132


def _plain(**changes) -> GpuKernels:
    """An H100 with one 128 x 256 tile, no split-K, no fixed costs and unlimited HBM: only tiles and waves."""
    base = dict(chip="h100", sms=H100_SMS, hbm_bytes_per_s=1e30, peak_flops_per_s={"bf16": H100_PEAK},
                peak_fraction={"bf16": 1.0}, tiles=((128, 256),), tile_k={"bf16": 64}, tile_cost=0.0,
                split_k=(1,), kernel_s=0.0, matmul_hbm_fraction=1.0)
    return GpuKernels(**{**base, **changes})


def test_wave_quantization_by_hand_1024_cubed_on_h100():
    # tiles = ceil(1024/128) * ceil(1024/256) = 8 * 4 = 32; waves = ceil(32 / 132) = 1: 32 of 132 SMs busy
    model = _plain()
    one_tile_s = 2 * 128 * 256 * 1024 / (H100_PEAK / H100_SMS)  # one SM's share of the peak
    assert model.matmul_kernel_s(1024, 1024, 1024) == pytest.approx(one_tile_s, rel=1e-12)
    assert model.matmul_efficiency(1024, 1024, 1024) == pytest.approx(32 / 132, rel=1e-12)
    assert model.wave_fill(1024, 1024) == pytest.approx(32 / 132)
    # 10240^3: 80 * 40 = 3200 tiles, 25 waves (the last holds 32 of 132)
    assert model.matmul_efficiency(10240, 10240, 10240) == pytest.approx(3200 / (25 * 132), rel=1e-12)


def test_tile_quantization_pads_m_n_and_k():
    model = _plain()
    # m 1000 pads to 1024 (8 row tiles), n 1000 to 1024 (4 column tiles), k 1000 to 1024 (16 k-tiles of 64)
    assert model.matmul_kernel_s(1000, 1000, 1000) == pytest.approx(model.matmul_kernel_s(1024, 1024, 1024))
    assert model.matmul_kernel_s(1025, 1024, 1024) == pytest.approx(model.matmul_kernel_s(1152, 1024, 1024))
    assert model.matmul_kernel_s(1024, 1025, 1024) == pytest.approx(model.matmul_kernel_s(1024, 1088, 1024))
    # 132 tiles fill one wave; 133 take two
    assert model.matmul_kernel_s(128 * 132, 64, 256) * 2 == pytest.approx(model.matmul_kernel_s(128 * 133, 64, 256))


def test_the_fitted_h100_by_hand():
    """4096 x 1024 x 512 bf16 on the fitted H100: every candidate tile and split computed here from the JSON's
    constants (the main loop's fill and drain included); the model runs the fastest, plus its fixed cost and
    launch, or the HBM time if that is longer."""
    c = json.loads(KERNEL_DATA.read_text())["chips"]["h100"]
    m, k, n, fraction, cost = 4096, 1024, 512, c["peak_fraction"]["bf16"], c["tile_cost"]
    tm0, tn0 = c["tiles"][0]
    times = []
    for tm, tn in c["tiles"]:
        relative = (1 + cost * (1 / tm0 + 1 / tn0)) / (1 + cost * (1 / tm + 1 / tn))
        per_sm = H100_PEAK * fraction / H100_SMS * relative
        for split in c["split_k"]:
            chunk = math.ceil(math.ceil(k / 64) / split) * 64
            waves = math.ceil(math.ceil(m / tm) * math.ceil(n / tn) * split / H100_SMS)
            reduce_s = m * n * 4 * (split + 1) / (3.35e12 * c["matmul_hbm_fraction"]) if split > 1 else 0
            # the k loop pays the tile's fill and drain, k_half elements of k more (main_loop_efficiency)
            times.append(waves * 2 * tm * tn * (chunk + c["k_half"]["bf16"]) / per_sm + reduce_s)
    hbm_s = 2 * (m * k + k * n + m * n) / (3.35e12 * c["matmul_hbm_fraction"])
    expected = c["launch_s"] + c["kernel_s"] + max(min(times), hbm_s)
    assert gpu_kernels("h100").matmul_s(m, k, n, "bf16") == pytest.approx(expected, rel=1e-12)


def test_memory_bound_gemm_runs_at_the_hbm_roofline():
    model = gpu_kernels("h100")
    m, k, n = 1, 8192, 28672  # a decode step's up-projection: 470 MB of weights for 0.47 GFLOP
    hbm_s = 2 * (m * k + k * n + m * n) / (3.35e12 * model.matmul_hbm_fraction)
    assert model.matmul_kernel_s(m, k, n) == pytest.approx(model.kernel_s + hbm_s, rel=1e-12)


def test_dtypes_run_at_their_preset_rates():
    h100, a100 = gpu_kernels("h100"), gpu_kernels("a100")
    assert h100.peak("bf16") == h100.peak("fp16") == 9.9e14
    assert h100.peak("fp8") == h100.peak("int8") == 2.0e15
    assert h100.peak("fp32") == 9.9e14 / 2  # TF32
    assert a100.peak("int8") == 6.24e14 and a100.peak("fp32") == 1.56e14
    with pytest.raises(PodsimError, match="fp8.*valid dtypes: bf16, fp16, int8, fp32"):
        a100.matmul_s(1024, 1024, 1024, "fp8")  # Ampere has no fp8 tensor cores
    big = (8192, 8192, 8192)
    assert h100.matmul_s(*big, "fp8") < h100.matmul_s(*big, "bf16") < h100.matmul_s(*big, "fp32")


def test_presets_and_tpus():
    assert kernel_chips() == ["a100", "b200", "h100", "h200"]
    assert gpu_kernels("tpu-v5e") is None and gpu_kernels("tpu7x") is None
    h100, h200 = gpu_kernels("h100"), gpu_kernels("h200")
    assert h200.peak_fraction == h100.peak_fraction and h200.hbm_bytes_per_s == 4.8e12  # H100's kernels, own HBM
    for chip in kernel_chips():
        model = gpu_kernels(chip)
        assert 0 < model.graph_launch_s < model.launch_s
        assert all(0 < f <= 1 for f in model.peak_fraction.values())
        assert all(0 < f <= 1 for f in model.hbm_fraction.values())


@pytest.mark.parametrize("call, match", [
    (lambda g: g.matmul_s(0, 8, 8), "m=0"), (lambda g: g.matmul_s(8, 8.5, 8), "k=8.5"),
    (lambda g: g.matmul_s(8, 8, 8, "fp64"), "fp64"), (lambda g: g.matmul_s(8, 8, 8, batch=0), "batch=0"),
    (lambda g: g.memory_bound_s(1e6, "softmax"), "softmax.*elementwise, norm, optimizer"),
    (lambda g: g.memory_bound_s(-1.0), "nbytes=-1.0"), (lambda g: g.memory_bound_s(float("nan")), "nbytes=nan"),
    (lambda g: g.attention_s(1, 128, 128, 32, 5, 128), "multiple of kv_heads=5"),
    (lambda g: g.attention_s(1, 0, 128, 32, 8, 128), "q_len=0"),
])
def test_bad_input_is_a_podsim_error(call, match):
    with pytest.raises(PodsimError, match=match):
        call(gpu_kernels("h100"))


dims = st.integers(min_value=1, max_value=20000)


@settings(max_examples=60, deadline=None)
@given(m=dims, k=dims, n=dims, chip=st.sampled_from(["a100", "h100", "b200"]))
def test_matmul_properties(m, k, n, chip):
    model = gpu_kernels(chip)
    t = model.matmul_s(m, k, n)
    assert t >= (model.launch_s + model.kernel_s + model.operand_s(m, k, n)) * (1 - 1e-12)  # never beats HBM
    assert model.matmul_efficiency(m, k, n) <= max(model.peak_fraction.values()) + 1e-12  # never above the fit
    assert model.matmul_s(m, k + 64, n) >= t  # more work never finishes sooner
    assert model.matmul_s(m, k, n, batch=2) >= t
    assert model.matmul_s(m, k, n, batch=2) <= 2 * t + model.kernel_s  # a batch is at most its GEMMs in a row


@settings(max_examples=60, deadline=None)
@given(b=st.integers(1, 16), s=st.integers(1, 32768), hd=st.sampled_from([64, 80, 96, 128, 192, 256]),
       heads=st.sampled_from([8, 16, 32, 64]), causal=st.booleans(), chip=st.sampled_from(["a100", "h100", "b200"]))
def test_attention_properties(b, s, hd, heads, causal, chip):
    model = gpu_kernels(chip)
    fwd = model.attention_kernel_s(b, s, s, heads, heads, hd, causal)
    bwd = model.attention_kernel_s(b, s, s, heads, heads, hd, causal, backward=True)
    for backward, t in ((False, fwd), (True, bwd)):
        eff = model.attention_efficiency(b, s, s, heads, hd, causal, backward)
        assert 0 < eff <= 1
        flops = attention_flops(b, s, s, heads, hd, causal, backward)
        assert t == pytest.approx(flops / (model.peak("bf16") * eff), rel=1e-12)
    assert bwd > fwd  # 2.5x the FLOPs at a share of peak no higher than the forward's
    assert model.attention_kernel_s(b, 2 * s, 2 * s, heads, heads, hd, causal) >= fwd  # padded tiles: equal


def test_attention_flops_closed_form():
    b, h, q, kv, d = 2, 16, 4096, 4096, 128
    assert attention_flops(b, q, kv, h, d, causal=False) == 4 * b * h * q * kv * d
    assert attention_flops(b, q, kv, h, d, causal=True) == 4 * b * h * q * kv * d / 2
    assert attention_flops(b, q, kv, h, d, causal=True, backward=True) == 2.5 * 4 * b * h * q * kv * d / 2
    model = gpu_kernels("h100")  # grouped-query attention (8 KV heads) changes no FLOPs: a prefill's time stays
    assert model.attention_s(b, q, kv, h, 8, d) == model.attention_s(b, q, kv, h, h, d)
    assert model.attention_s(b, q, kv, h, 8, d) == model.launch_s + model.attention_kernel_s(b, q, kv, h, 8, d)


def test_decode_attention_streams_the_kv_cache():
    """One query token per sequence: the kernel reads K and V (per KV head) at the HBM roofline."""
    model = gpu_kernels("h100")
    b, kv, h, kv_heads, d = 8, 8192, 32, 8, 128
    kv_bytes = 2 * b * kv_heads * kv * d * 2  # K and V, bf16
    q_bytes = 2 * b * h * 1 * d * 2  # Q and O
    hbm = 3.35e12 * model.matmul_hbm_fraction
    assert model.attention_kernel_s(b, 1, kv, h, kv_heads, d) == pytest.approx((kv_bytes + q_bytes) / hbm)
    assert model.attention_kernel_s(b, 1, kv, h, h, d) > 3.9 * model.attention_kernel_s(b, 1, kv, h, kv_heads, d)


def test_attention_at_the_fa3_papers_setting():
    """H100 FA3, head dim 128, no mask, 16k tokens in one sequence: the paper's bar is 648 TFLOP/s."""
    model = gpu_kernels("h100")
    seconds = model.attention_kernel_s(1, 16384, 16384, 16, 16, 128, causal=False)
    assert attention_flops(1, 16384, 16384, 16, 128, causal=False) / seconds / 1e12 == pytest.approx(648, rel=0.1)


def test_memory_bound_kernels():
    model = gpu_kernels("h100")
    for kind in ("elementwise", "norm", "optimizer", "activation"):
        t = model.memory_bound_s(2**30, kind)
        assert t == pytest.approx(model.launch_s + model.memory_kernel_s[kind]
                                  + 2**30 / (3.35e12 * model.hbm_fraction[kind]), rel=1e-12)
    assert model.memory_bound_s(0.0) == model.launch_s + model.memory_kernel_s["elementwise"]


def _gerror(pairs):
    ratios = np.array([p / m for p, m in pairs])
    return float(np.exp(np.mean(np.abs(np.log(ratios)))) - 1)


def _csv(name):
    with (DATA / "calibration" / name).open() as f:
        return list(csv.DictReader(f))


def test_fit_report_recomputed_from_the_measurement_files():
    """The errors gpu_kernels.json records, recomputed here from the CSV rows with numpy (GEMM rows as 2bmnk over
    the kernel time; attention rows as TFLOP/s) -- and every row's set is fit or held_out."""
    report = fit_report()
    for chip in ("h100", "b200"):
        rows = [r for r in _csv("gpu_gemm.csv") if r["chip"] == chip]
        model = gpu_kernels(chip)
        for which in ("fit", "held_out"):
            pairs = []
            for r in rows:
                if r["set"] == which:
                    b, m, n, k = (int(r[x]) for x in ("batch", "m", "n", "k"))
                    measured_s = 2 * b * m * n * k / (float(r["tflop_per_s"]) * 1e12)
                    pairs.append((model.matmul_kernel_s(m, k, n, r["dtype"], b), measured_s))
            assert report[f"gemm_{chip}"]["gpu_gemm.csv"][which]["geomean_error"] == pytest.approx(_gerror(pairs))
    vidur = [r for r in _csv("gpu_kernels_vidur.csv") if r["chip"] == "a100" and r["kind"] == "gemm"]
    pairs = [(gpu_kernels("a100").matmul_kernel_s(int(r["m"]), int(r["k"]), int(r["n"]), "fp16"),
              float(r["measured_s"])) for r in vidur if r["set"] == "held_out"]
    assert report["gemm_a100"]["gpu_kernels_vidur.csv"]["held_out"]["geomean_error"] == pytest.approx(_gerror(pairs))
    fa3 = [r for r in _csv("flash_attention.csv") if r["impl"] == "fa3"]
    pairs = []
    for r in fa3:
        if r["set"] == "held_out":
            b, s, h, d = int(r["batch"]), int(r["seq_len"]), int(r["heads"]), int(r["head_dim"])
            causal = r["causal"] == "true"
            seconds = gpu_kernels("h100").attention_kernel_s(b, s, s, h, h, d, causal, r["direction"] == "backward")
            pairs.append((4 * b * h * s * s * d / (2 if causal else 1) / seconds / 1e12, float(r["tflop_per_s"])))
    assert report["attention_h100"]["held_out"]["geomean_error"] == pytest.approx(_gerror(pairs))
    for name in ("gpu_gemm.csv", "gpu_kernels_vidur.csv", "flash_attention.csv"):
        rows = _csv(name)
        assert {r["set"] for r in rows} == {"fit", "held_out"}
        assert all(r["source"].startswith("https://") and r["published"] and r["measured"] for r in rows)


def test_held_out_rules_as_stated():
    """XLA rows: every fourth shape in source order held out; vidur: CodeLlama-34B held out whole."""
    for chip in ("h100", "b200"):
        xla = [r for r in _csv("gpu_gemm.csv") if r["chip"] == chip and "XLA" in r["measured"]]
        shapes = list(dict.fromkeys((r["batch"], r["m"], r["n"], r["k"]) for r in xla))
        for r in xla:
            index = shapes.index((r["batch"], r["m"], r["n"], r["k"]))
            assert (r["set"] == "held_out") == (index % 4 == 3)
    for r in _csv("gpu_kernels_vidur.csv"):
        assert (r["set"] == "held_out") == ("CodeLlama" in r["model"])


def test_calibrated_simulation_runs_the_kernel_model():
    for chip in calibrated_chips():
        if gpu_kernels(chip) is None:
            continue
        for dtype, shape in (("bf16", (1024, 1024, 1024)), ("bf16", (3000, 5000, 700)), ("fp32", (512, 4096, 512)),
                             ("int8", (2048, 2048, 2048))):
            system = System(chip, calibrated=True, trace=False)
            system.chip.matmul(*shape, dtype=dtype)
            system.run()
            assert system.env.now == pytest.approx(gpu_kernels(chip).matmul_s(*shape, dtype), rel=1e-12)
        cal = get_calibration(chip)
        assert cal.matmul.kernels is gpu_kernels(chip)
    tpu = get_calibration("tpu-v4")
    assert tpu.matmul.kernels is None and tpu.matmul.peak_fraction == 0.95  # TPUs unchanged


def test_calibrated_compute_without_a_shape_runs_at_the_large_tile_rate():
    system = System("h100", calibrated=True, trace=False)
    system.chip.compute(1e12, dtype="bf16")
    system.run()
    assert system.env.now == pytest.approx(1e12 / (9.9e14 * gpu_kernels("h100").peak_fraction["bf16"]), rel=1e-12)


@pytest.mark.benchmark
def test_fit_script_reproduces_the_committed_constants():
    """``scripts/fit_gpu_kernels.py`` rebuilds gpu_kernels.json exactly (about 30 s: pytest -m benchmark)."""
    module = load_script(KERNEL_DATA.parents[3] / "scripts" / "fit_gpu_kernels.py")
    assert json.loads(json.dumps(module.build())) == json.loads(KERNEL_DATA.read_text())
