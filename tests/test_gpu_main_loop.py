"""The GEMM main-loop term of the GPU kernel model (`GpuKernels.main_loop_efficiency`, ``k_half``): its limits, a
closed form by hand, and its fitted constants re-derived from the raw measurement rows by an independent numpy
implementation of the tile model (written from the module docstring's formula, not from the code)."""
import csv
import json
import math

import numpy as np
import pytest

from simulator.errors import PodsimError
from simulator.hardware.calibration import DATA
from simulator.hardware.gpu_kernels import DATA as KERNEL_DATA
from simulator.hardware.gpu_kernels import GpuKernels, gpu_kernels

#: datasheet numbers (NVIDIA H100 SXM): bf16 dense peak, SMs, HBM3 bandwidth
H100_PEAK, H100_SMS, H100_HBM = 9.9e14, 132, 3.35e12


def _one_tile(k_half: float) -> GpuKernels:
    """An H100 with one 128 x 256 tile at the full peak, no split-K, no fixed cost, unlimited HBM."""
    return GpuKernels(chip="h100", sms=H100_SMS, hbm_bytes_per_s=1e30, peak_flops_per_s={"bf16": H100_PEAK},
                      peak_fraction={"bf16": 1.0}, tiles=((128, 256),), tile_k={"bf16": 64}, tile_cost=0.0,
                      split_k=(1,), k_half={"bf16": k_half}, kernel_s=0.0, matmul_hbm_fraction=1.0)


def test_main_loop_limits():
    model = _one_tile(100.0)
    assert model.main_loop_efficiency(100.0) == pytest.approx(0.5)  # half the steady rate at k = k_half
    assert model.main_loop_efficiency(1e12) == pytest.approx(1.0, abs=1e-9)  # K -> infinity: the asymptote
    assert model.main_loop_efficiency(1e12) < 1.0
    values = [model.main_loop_efficiency(k) for k in (1, 64, 256, 1024, 4096, 65536)]
    assert values == sorted(values) and len(set(values)) == len(values)  # strictly rising in k
    assert _one_tile(0.0).main_loop_efficiency(64) == 1.0  # no fill and drain: the steady rate
    assert gpu_kernels("h100").main_loop_efficiency(64, "no-such-dtype") == 1.0  # an unfitted dtype: none
    for bad in (0, -5.0, float("nan")):
        with pytest.raises(PodsimError, match="must be a positive number"):
            model.main_loop_efficiency(bad)


def test_one_wave_by_hand():
    """132 tiles of 128 x 256 fill one wave: the kernel takes (k + k_half) elements of one tile's k loop."""
    model = _one_tile(100.0)
    m, n = 128 * 12, 256 * 11
    for k in (64, 1024, 8192):
        per_sm = H100_PEAK / H100_SMS
        assert model.matmul_kernel_s(m, k, n) == pytest.approx(2 * 128 * 256 * (k + 100) / per_sm, rel=1e-12)
        assert model.matmul_efficiency(m, k, n) == pytest.approx(k / (k + 100), rel=1e-12)


@pytest.mark.parametrize("chip", ["a100", "h100", "b200"])
def test_fitted_efficiency_tends_to_the_asymptote(chip):
    """A full-wave shape of the largest tile: as K grows the share of peak rises to ``peak_fraction`` (fixed cost and
    fill/drain amortised) and never passes it."""
    model = gpu_kernels(chip)
    tm, tn = model.tiles[0]
    m, n = tm * model.sms, tn * 4  # four full waves, compute-bound
    shares = [model.matmul_efficiency(m, k, n, "bf16") for k in (2 ** 10, 2 ** 14, 2 ** 18, 2 ** 22)]
    assert shares == sorted(shares)
    assert shares[-1] <= model.peak_fraction["bf16"]
    assert shares[-1] == pytest.approx(model.peak_fraction["bf16"], rel=2e-3)
    assert model.k_half["bf16"] > 0 and model.k_half["fp16"] == model.k_half["bf16"]


# -- the fit re-derived ------------------------------------------------------------------------------------------
def _csv(name):
    with (DATA / "calibration" / name).open() as f:
        return list(csv.DictReader(f))


def _h100_fit_rows():
    """Every H100 GEMM fit row as (dtype, b, m, k, n, measured seconds, launch carried), from the raw CSVs: XLA's
    table and mamf-finder (TFLOP/s of 2bmnk), vidur's fp16 kernel times, torch's square log (launch included; 2048
    and 8192 held out)."""
    rows = []
    for r in _csv("gpu_gemm.csv"):
        if r["chip"] == "h100" and r["set"] == "fit":
            b, m, n, k = (int(r[x]) for x in ("batch", "m", "n", "k"))
            rows.append((r["dtype"], b, m, k, n, 2 * b * m * n * k / (float(r["tflop_per_s"]) * 1e12), False))
    for r in _csv("gpu_kernels_vidur.csv"):
        if r["chip"] == "h100" and r["kind"] == "gemm" and r["set"] == "fit":
            rows.append(("fp16", 1, int(r["m"]), int(r["k"]), int(r["n"]), float(r["measured_s"]), False))
    for r in _csv("h100_matmul_square.csv"):
        s = int(r["m_k_n"])
        if s not in (2048, 8192):
            rows.append(("bf16", 1, s, s, s, 2 * s ** 3 / (float(r["tflop_per_s"]) * 1e12), True))
    return rows


def _numpy_times(rows, c, k_half):
    """Predicted seconds of ``rows`` under constants ``c`` with ``k_half`` per dtype: the best of every candidate
    tile and split of ceil(m/tm) ceil(n/tn) s tiles in waves of 132, each (k-chunk + k_half) x 2 tm tn FLOPs at the
    SM's share of peak x the tile's relative rate, split partials in fp32 through HBM; never under the operands'
    HBM stream; plus the fixed costs."""
    dtype = np.array([r[0] for r in rows])
    b, m, k, n, _, launch = (np.array([r[i] for r in rows], dtype=float) for i in range(1, 7))
    peak = np.where(dtype == "fp32", H100_PEAK / 2, np.where(dtype == "fp8", 2.0e15, H100_PEAK))
    frac = np.array([c["peak_fraction"][d] for d in dtype])
    tk = np.array([c["tile_k"][d] for d in dtype], dtype=float)
    kh = np.array([k_half.get(d, 0.0) for d in dtype])
    hbm = H100_HBM * c["matmul_hbm_fraction"]
    tm0, tn0 = c["tiles"][0]
    best = np.full(len(rows), np.inf)
    for tm, tn in c["tiles"]:
        rel = (1 + c["tile_cost"] * (1 / tm0 + 1 / tn0)) / (1 + c["tile_cost"] * (1 / tm + 1 / tn))
        for s in c["split_k"]:
            chunk = np.ceil(np.ceil(k / tk) / s) * tk
            waves = np.ceil(b * np.ceil(m / tm) * np.ceil(n / tn) * s / H100_SMS)
            t = waves * 2 * tm * tn * (chunk + kh) / (peak * frac / H100_SMS * rel)
            if s > 1:
                t = t + b * m * n * 4 * (s + 1) / hbm
            best = np.minimum(best, t)
    elem = np.where(dtype == "fp32", 4, np.where(dtype == "fp8", 1, 2))
    operands = b * (elem * (m * k + k * n) + np.maximum(elem, 2) * m * n) / hbm
    fixed = c["kernel_s"] + np.array([c["dtype_kernel_s"].get(d, 0.0) for d in dtype]) + launch * c["launch_s"]
    return fixed + np.maximum(best, operands)


def test_numpy_tile_model_matches_the_kernel_model():
    c = json.loads(KERNEL_DATA.read_text())["chips"]["h100"]
    rows = _h100_fit_rows()
    model = gpu_kernels("h100")
    expected = [model.matmul_kernel_s(m, k, n, d, b) + (model.launch_s if launch else 0.0)
                for d, b, m, k, n, _, launch in rows]
    assert _numpy_times(rows, c, c["k_half"]) == pytest.approx(expected, rel=1e-12)


def test_k_half_rederived_from_the_fit_rows():
    """The fit has one fill and drain per chip in k-tiles (k_half = k_tiles x tile_k for bf16, fp16 and TF32). With
    every other constant at its committed value, the k_tiles that minimises the H100 fit rows' mean |ln(predicted /
    measured)| (a numpy grid over 0.125-16 k-tiles, the fit's loss) lands on the committed one, within the grid step
    and the joint fit's tolerance; the held-out rows are never read."""
    c = json.loads(KERNEL_DATA.read_text())["chips"]["h100"]
    rows = _h100_fit_rows()
    measured = np.array([r[5] for r in rows])

    def loss(k_tiles: float) -> float:
        k_half = {**c["k_half"], **{d: k_tiles * c["tile_k"][d] for d in ("bf16", "fp16", "fp32")}}
        return float(np.mean(np.abs(np.log(_numpy_times(rows, c, k_half) / measured))))

    committed = c["k_half"]["bf16"] / c["tile_k"]["bf16"]
    assert c["k_half"]["fp32"] / c["tile_k"]["fp32"] == pytest.approx(committed, rel=1e-3)
    grid = np.geomspace(0.125, 16.0, 301)  # steps of 1.6%
    best = grid[int(np.argmin([loss(g) for g in grid]))]
    assert best == pytest.approx(committed, rel=0.08)
    assert loss(committed) < min(loss(committed / 2), loss(committed * 2), loss(1e-9))  # not flat, and it helps


def test_transferred_k_half_keeps_the_k_tiles():
    """Dtypes without their own rows take a fitted dtype's fill and drain in k-tiles (k_half / tile_k): fp8 and int8
    on H100 as bf16's, H200 as H100's."""
    h100, h200 = gpu_kernels("h100"), gpu_kernels("h200")
    for dtype in ("fp8", "int8"):
        assert h100.k_half[dtype] / h100.tile_k[dtype] == pytest.approx(h100.k_half["bf16"] / h100.tile_k["bf16"],
                                                                        rel=1e-3)
    assert h200.k_half == h100.k_half
    assert math.isfinite(sum(gpu_kernels("a100").k_half.values()))
