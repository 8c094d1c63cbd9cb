"""The custom AllReduce kernels of tensor-parallel decode (issue 27, item 5; issue 33's TP streams): vLLM's and
PyTorch's one-/two-shot kernels priced from first principles (a fixed latency, then every byte each GPU reads over
NVLink at a share of the link), their constants fitted to the kernels' own published microbenchmarks
(``allreduce_kernels.csv``) and never to a decode row, the fit re-derived here with numpy, and the sets as stated."""
import csv
import json
import math

import numpy as np
import pytest

from simulator.hardware.calibration import DATA
from simulator.hardware.decode_calibration import get_decode_calibration
from simulator.hardware.specs import get_chip
from simulator.workloads.served import served_step
from simulator.workloads.served_tp import AllReduceKernel, allreduce_cost
from simulator.workloads.transformer import get_model

H100_NVLINK = 18 * 25e9  # bytes/s one way: NVLink 4, 18 links x 25 GB/s (H100 SXM datasheet: 900 GB/s both ways)
A100_NVLINK = 12 * 25e9  # NVLink 3: 12 links x 25 GB/s
KiB, MiB = 2**10, 2**20


def _rows() -> list[dict[str, str]]:
    with (DATA / "calibration" / "allreduce_kernels.csv").open() as f:
        return list(csv.DictReader(f))


def test_custom_kernel_price_is_latency_plus_each_gpus_bytes_over_its_link_share():
    """One-shot: every GPU reads the n - 1 peers' whole buffers; two-shot: a reduce-scatter and an all-gather, each
    GPU reading (n - 1) / n of the buffer twice, behind one more barrier (the stage)."""
    k = AllReduceKernel("k", latency_s=5e-6, two_shot_stage_s=9e-6, link_efficiency=0.7, chip="h100")
    h100 = get_chip("h100")
    one = allreduce_cost("vllm", h100, 8, 64 * KiB, 0.0, k)  # vLLM: one-shot under 256 KiB on 8 GPUs
    assert one["algorithm"] == "one-shot" and one["protocol"] is None
    assert one["seconds"] == pytest.approx(5e-6 + 7 * 65536 / (0.7 * 450e9), rel=1e-12)  # 6.46 us
    assert one["seconds"] == pytest.approx(6.456e-6, rel=1e-3)
    two = allreduce_cost("vllm", h100, 8, MiB, 0.0, k)
    assert two["algorithm"] == "two-shot"
    assert two["seconds"] == pytest.approx(14e-6 + 2 * 7 / 8 * MiB / (0.7 * H100_NVLINK), rel=1e-12)
    # a sync on top is added per doubling, as for NCCL
    assert allreduce_cost("vllm", h100, 8, 64 * KiB, 1e-6, k)["seconds"] == pytest.approx(one["seconds"] + 3e-6)
    # the same kernel on A100's slower NVLink: only the bytes term grows, by 450 / 300
    a100 = allreduce_cost("gpt-fast", get_chip("a100"), 8, 64 * KiB, 0.0, k)["seconds"]
    assert a100 - 5e-6 == pytest.approx((one["seconds"] - 5e-6) * H100_NVLINK / A100_NVLINK, rel=1e-12)
    assert allreduce_cost("vllm", h100, 1, 64 * KiB, 0.0, k)["seconds"] == 0.0


def test_decode_steps_pay_the_engines_fitted_kernel_and_no_sync_on_top():
    """A served step's AllReduces are the fitted kernel's closed form, 2 per layer, with allreduce_sync_s 0."""
    cfg = get_model("llama-3-70b")
    for engine, chip, n, batch in (("vllm", "h100", 8, 10), ("gpt-fast", "a100", 8, 1), ("vllm", "h100", 4, 10)):
        cal = get_decode_calibration(chip, engine)
        k = cal.allreduce_kernel
        assert cal.allreduce_sync_s == 0.0 and cal.sync_fitted_to == engine and k is not None
        nbytes = batch * cfg.d_model * 2
        nvlink = {"h100": H100_NVLINK, "a100": A100_NVLINK}[chip]
        by_hand = k["latency_s"] + (n - 1) * nbytes / (nvlink * k["link_efficiency"])  # one-shot at these sizes
        step = served_step(cfg, chip, batch, 200, simulate=False, engine=engine, model=n)
        assert step["allreduce"]["algorithm"] == "one-shot" and step["allreduce"]["sync_s"] == 0.0
        assert step["allreduce"]["kernel"] == k["name"]
        assert step["allreduce"]["seconds"] == pytest.approx(by_hand, rel=1e-12)
        assert step["breakdown"]["allreduce"]["calibrated_s"] == pytest.approx(2 * cfg.n_layers * by_hand, rel=1e-12)
    # tensorrt-llm (NCCL, no CUDA graphs) keeps its fitted sync and has no kernel
    trt = get_decode_calibration("h100", "tensorrt-llm")
    assert trt.allreduce_kernel is None and trt.allreduce_sync_s > 0


def _fit_by_numpy(rows: list[dict[str, str]], stage: float | None) -> tuple[float, float, float]:
    """(latency, stage, efficiency) minimising the squared relative error, solved here as its normal equations."""
    x, y = [], []
    for r in rows:
        n, b, t = int(r["gpus"]), float(r["bytes"]), float(r["measured_us"]) * 1e-6
        one = r["algorithm"] == "one-shot"
        moved = ((n - 1) * b if one else 2 * (n - 1) / n * b) / H100_NVLINK
        x.append([1 / t, (0.0 if one else 1.0) / t, moved / t] if stage is None else [1 / t, moved / t])
        y.append(1.0)
    a = np.array(x)
    sol = np.linalg.solve(a.T @ a, a.T @ np.array(y))
    return (sol[0], sol[1], 1 / sol[2]) if stage is None else (sol[0], stage, 1 / sol[1])


def test_kernel_constants_are_the_least_squares_fit_of_their_fit_rows_alone():
    rows = _rows()
    vllm = get_decode_calibration("h100", "vllm").allreduce_kernel
    torch = get_decode_calibration("h100", "gpt-fast").allreduce_kernel
    lat, stage, eff = _fit_by_numpy([r for r in rows if r["kernel"] == "vllm-custom" and r["set"] == "fit"], None)
    assert (vllm["latency_s"], vllm["two_shot_stage_s"]) == pytest.approx((lat, stage), rel=1e-3)
    assert vllm["link_efficiency"] == pytest.approx(eff, rel=1e-3)
    lat, _, eff = _fit_by_numpy([r for r in rows if r["kernel"] == "torch-one-shot" and r["set"] == "fit"], 0.0)
    assert torch["latency_s"] == pytest.approx(lat, rel=1e-3)
    assert torch["link_efficiency"] == pytest.approx(eff, rel=1e-3)
    assert torch["two_shot_stage_s"] == vllm["two_shot_stage_s"]  # no two-shot rows of its own: vLLM's stage
    for k in (vllm, torch):  # physical: a share of the link, and a latency above two NVLink barriers (1.2 us)
        assert 0 < k["link_efficiency"] <= 1 and 1.2e-6 < k["latency_s"] < 50e-6 and k["chip"] == "h100"
    # the same constants on every chip's calibration (one kernel fit)
    assert get_decode_calibration("a100", "gpt-fast").allreduce_kernel == torch


def test_kernel_rows_name_their_sources_and_keep_a_held_out_split():
    rows = _rows()
    assert all(r["source"].startswith("https://github.com/") and r["published"] and r["harness"] for r in rows)
    for kernel in ("vllm-custom", "torch-one-shot"):
        mine = [r for r in rows if r["kernel"] == kernel]
        fit_sources = {r["source"] for r in mine if r["set"] == "fit"}
        held = [r for r in mine if r["set"] == "held_out"]
        assert fit_sources and held and {r["set"] for r in mine} == {"fit", "held_out"}
        assert {r["source"] for r in held} - fit_sources  # a held-out run from a source the fit did not see
    report = json.loads((DATA / "decode_calibration.json").read_text())["fit"]["allreduce_kernels"]
    for kernel, rep in report.items():
        assert sorted(rep["fit_rows"]) == sorted(r["row"] for r in rows if r["kernel"] == kernel and r["set"] == "fit")
        logs = [abs(math.log(_price(r, get_decode_calibration("h100", "vllm" if kernel == "vllm-custom"
                                                              else "gpt-fast").allreduce_kernel)
                             / (float(r["measured_us"]) * 1e-6)))
                for r in rows if r["kernel"] == kernel and r["set"] == "held_out"]
        assert rep["held_out_error"] == pytest.approx(math.expm1(sum(logs) / len(logs)), rel=1e-6)


def _price(row: dict[str, str], k: dict) -> float:
    n, b = int(row["gpus"]), float(row["bytes"])
    if row["algorithm"] == "one-shot":
        return k["latency_s"] + (n - 1) * b / (H100_NVLINK * k["link_efficiency"])
    return k["latency_s"] + k["two_shot_stage_s"] + 2 * (n - 1) / n * b / (H100_NVLINK * k["link_efficiency"])


def test_validate_has_the_kernel_families_with_both_sets():
    from simulator.frontend.validate import validate

    fams = validate()["families"]
    for family in ("AllReduce kernel, vLLM custom (CUDA graph, H100)",
                   "AllReduce kernel, PyTorch one-shot (per call, 8 x H100)"):
        assert fams[family]["fit"]["cases"] > 0 and fams[family]["held_out"]["cases"] > 0
