"""Calibrated mode: the fitted constants reproduce, the simulator obeys them, ideal stays the default;
validation meets its target where it claims to and reports every family that misses it."""
import csv
import functools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from conftest import load_script

from simulator.collectives import run_collective
from simulator.engine.system import System
from simulator.errors import PodsimError
from simulator.frontend.cli import main
from simulator.frontend.validate import render, validate
from simulator.hardware.calibration import DATA, LinkEfficiency, MatmulEfficiency, calibrated_chips, get_calibration
from simulator.hardware.gpu_kernels import gpu_kernels

ROOT = Path(__file__).resolve().parents[1]


def _fit_script():
    return load_script("fit_calibration")


def test_fitting_script_reproduces_the_committed_constants():
    rebuilt = json.loads(json.dumps(_fit_script().build()))  # tuples become lists, as in the file
    assert rebuilt == json.loads((DATA / "calibration.json").read_text())


def test_wave_quantization_by_hand():
    model = MatmulEfficiency(peak_fraction=1.0, tile_m=128, tile_n=256, units=132)
    assert model.wave_fill(1024, 1024) == pytest.approx(32 / 132)  # 8 x 4 tiles, one wave of 132 SMs
    assert model.wave_fill(10240, 10240) == pytest.approx(3200 / (25 * 132))  # 25 waves, the last part-full
    assert MatmulEfficiency(peak_fraction=0.9).wave_fill(8, 8) == 1.0


def test_link_efficiency_curve():
    link = LinkEfficiency(peak_fraction=0.8, half_size_bytes=1e6, exponent=1.0)
    assert link.fraction(1e6) == pytest.approx(0.4)  # half of the peak fraction at the half size
    assert link.fraction(1e12) == pytest.approx(0.8, rel=1e-5)


def test_calibrated_matmul_runs_at_the_fitted_rate():
    system = System("h100", calibrated=True)
    system.chip.matmul(1024, 1024, 1024)
    system.run()  # a GPU preset's matmul runs on the kernel model (tiles, waves, dtype, HBM roofline, launch)
    assert system.env.now == pytest.approx(gpu_kernels("h100").matmul_s(1024, 1024, 1024, "bf16"), rel=1e-12)
    tpu = System("tpu-v5e", calibrated=True)  # TPUs keep the peak-fraction model
    tpu.chip.matmul(1024, 1024, 1024)
    tpu.run()
    cal = get_calibration("tpu-v5e")
    assert tpu.env.now == pytest.approx(cal.matmul.time_s(2 * 1024**3, 1024, 1024, 1.97e14), rel=1e-12)
    ideal = System("h100")
    ideal.chip.matmul(1024, 1024, 1024)
    ideal.run()
    assert ideal.env.now == pytest.approx(2 * 1024**3 / 9.9e14, rel=1e-12)  # ideal is still the default
    assert system.env.now > 3 * ideal.env.now  # a 1024^3 matmul fills a quarter of the SMs


def test_simulated_calibrated_allreduce_equals_the_fitting_formula():
    fit, cal = _fit_script(), get_calibration("a100")
    link = cal.links["nvlink"]
    for size in (2**20, 2**26, 2**33):
        r = run_collective("all_reduce", System("a100", topology="switch:8", calibrated=True), float(size),
                           algorithm="unidirectional")  # the ring the formula prices (auto may pick another)
        want = fit.ring_allreduce_s(size, 8, 3.0e11, 2, link.fraction(size))  # with the fastest NCCL protocol
        assert r.time_s == pytest.approx(want, rel=1e-9)


def test_links_return_to_their_full_rate_after_a_calibrated_collective():
    system = System("a100", topology="switch:8", calibrated=True)
    run_collective("all_reduce", system, 64e6)
    assert all(c.bandwidth_bytes_per_s == c.nominal_bandwidth_bytes_per_s for c in system.network.links.values())


def test_hbm_runs_at_its_calibrated_fraction():
    system = System("h100", calibrated=True)
    system.chip.load(3.35e9, "x")
    system.run()
    assert system.env.now == pytest.approx(1e-3 / 0.91, rel=1e-9)  # 3.35 GB at 91% of 3.35 TB/s


def test_chips_without_a_model_say_which_have_one():
    assert {"a100", "h100", "h200", "tpu-v5e"} <= set(calibrated_chips())
    with pytest.raises(PodsimError, match="no calibrated model for chip 'b200'; calibrated chips: a100"):
        System("b200", calibrated=True)


def test_nccl_style_rings_spread_a_two_node_ring_over_every_nic():
    ring = dict(algorithm="unidirectional")  # NCCL's ring (auto may pick another algorithm)
    one = run_collective("all_reduce", System("a100", topology="nodes:2:4"), 64e6, rings=1, **ring).time_s
    four = run_collective("all_reduce", System("a100", topology="nodes:2:4"), 64e6, **ring).time_s
    assert four == pytest.approx(one / 4, rel=0.02)  # four rings, each crossing on its own NIC
    with pytest.raises(PodsimError, match="rings=2"):
        run_collective("all_reduce", System(topology="torus:4x4"), 64e6, rings=2)


TARGET = 0.10  # issue 9: <= 10% geometric-mean error on collectives from 1 MiB up and on large matmuls
MEETS = ("AllReduce, 8 x A100 NVLink (nccl-tests)",
         "AllReduce, 8 x H100 NVLS (nccl-tests)", "Serving decode, one GPU (tensorrt-llm)",
         "Training step MFU, TPU (published runs)", "GEMM, A100 fp16 (vidur)", "GEMM, H100 fp16 (vidur)",
         "Attention, H100 FlashAttention-3", "GEMM by shape, B200 (XLA table)",
         "Multi-GPU decode (tensor parallel)", "Multi-GPU decode speed-up, 1 -> 8 GPUs",  # issue 27: 15%, 20%
         "Multi-GPU prefill (first token, tensor parallel)", "Training step, GPU (published runs)",
         "AllReduce kernel, vLLM custom (CUDA graph, H100)", "AllReduce kernel, PyTorch one-shot (per call, 8 x H100)",
         "Serving decode, one GPU (gpt-fast)",  # issue 27: int8 weight-only kernels at their own HBM fraction
         "GEMM by shape, H100 (XLA table)",  # issue 27: the tile main loop's fill and drain (held out 9.6%)
         "Serving request streams (vLLM 0.6, SGLang's runs)")  # held out <= 15% with the TP worker sync
TARGETS = {"Multi-GPU decode (tensor parallel)": 0.15, "Multi-GPU decode speed-up, 1 -> 8 GPUs": 0.20,
           "Serving request streams (vLLM 0.6, SGLang's runs)": 0.15,  # issue 33's 15% on the request streams
           "Serving request streams (vLLM, one GPU)": 0.15, "Serving request streams (vLLM, tensor parallel)": 0.15}
#: GPU kernel families whose fit sets miss too: one model fitted across sources that disagree (notes say how)
FIT_MISSES = ("GEMM by shape, H100 (XLA table)", "GEMM, best shape (mamf-finder)",
              "Memory-bound kernels < 16 MiB, A100/H100 (vidur)", "Memory-bound kernels >= 16 MiB, A100/H100 (vidur)")
#: the H100 XLA table misses on its fit rows (11.4%) but meets on its held-out ones (9.6%): a meet, checked as such
MISSES = ("matmul, H100 bf16 square", *(f for f in FIT_MISSES if f != "GEMM by shape, H100 (XLA table)"),
          "AllReduce, A100 one node (PyTorch)", "AllReduce, A100 two nodes (PyTorch)",
          "AllReduce, 8 x H100/H200 NVLS, 1-512 KiB", "Protocols, 4 x H100 ring, 256 MiB (nccl-tests)",
          "Serving decode, batch 32-64, one GPU (tensorrt-llm)", "Serving decode, one GPU (vllm)",  # test_served
          "Serving prefill (first token), one GPU (tensorrt-llm)",
          "Multi-GPU decode, batch 32-64 (tensor parallel)", "AllReduce, NCCL ring at decode sizes (H100)",
          "vLLM host time per engine step (Vidur, one A100)",  # held out: CodeLlama-34B's larger host costs
          "vLLM tensor-parallel worker sync")  # held out: the 34B / 70B barriers scatter about the 7B lines
HELD_OUT_WHOLE = ("AllReduce, 8 x H200 NVLS (nccl-tests)", "AllReduce ring, 4 x H100 (nccl-tests)",
                  "AllReduce, 8 x H100/H200 NVLS, 1-512 KiB", "Protocols, 4 x H100 ring, 256 MiB (nccl-tests)",
                  "Serving decode, batch 32-64, one GPU (tensorrt-llm)",
                  "Multi-GPU prefill (first token, tensor parallel)", "Multi-GPU decode, batch 32-64 (tensor parallel)",
                  "Serving request streams (vLLM, one GPU)",  # issue 33's 15%: test_serve_cli checks its note
                  "Serving request streams (vLLM, tensor parallel)",
                  "AllReduce, NCCL ring at decode sizes (H100)")  # NCCL's own latency model, nothing fitted
FIT_WHOLE = ("AllGather, TPU v5e ICI (the book's profiles)",  # two measurements, two constants
             "Attention, A100 FlashAttention-2")  # the FA2 paper's one A100 figure scales FA2's shape


@functools.cache
def _validated() -> dict:
    """`validate()` once for the tests that read it (every case is a simulation: seconds)."""
    return validate()


def test_validation_targets_on_held_out_data_and_every_miss_reported():
    """The target, <= 10% geometric-mean error, holds on every fit set and on the held-out (never fitted) sets
    of the matmul and nccl-tests families. The PyTorch families, NVLS below 1 MiB (where the 1 MiB target does
    not apply) and LL's bandwidth miss it on their held-out sets; for them the test asserts they are reported,
    not dropped: every measurement is a case, their summaries say they
    miss the target (the errors recomputed here with numpy), `podsim validate` prints the miss and a note
    says why."""
    result = _validated()
    rows = {name: len(list(csv.DictReader((DATA / "calibration" / name).open())))
            for name in ("h100_matmul_square.csv", "a100_allreduce_busbw.csv", "a100_dgx_all_reduce_pow2.csv")}
    for name in ("h100_nvls_allreduce_busbw.csv", "h200_nvls_allreduce_busbw.csv", "tpu_v5e_book_allgather.csv"):
        rows[name] = len(list(csv.DictReader((DATA / "calibration" / name).open())))  # NVLS: both sides of 1 MiB
    rows["h100x4_ring_allreduce_busbw.csv"] = 6 - 1  # the Simple row is the protocols' denominator, not a case
    rows["decode_latency.csv"] = len(list(csv.DictReader((DATA / "calibration" / "decode_latency.csv").open())))
    rows["tpu_training_mfu.csv"] = len(list(csv.DictReader((DATA / "calibration" / "tpu_training_mfu.csv").open())))
    serving = list(csv.DictReader((DATA / "calibration" / "decode_latency.csv").open()))
    setup = ("source", "engine", "chip", "model", "weight_dtype", "batch", "input_len", "output_len", "metric")
    ones = {tuple(r[k] for k in setup) for r in serving if r["gpus"] == "1" and r["metric"] in ("tpot", "request")}
    rows["1 -> 8 GPU speed-ups"] = sum(r["gpus"] == "8" and tuple(r[k] for k in setup) in ones for r in serving)
    rows["gpu_training.csv"] = len(list(csv.DictReader((DATA / "calibration" / "gpu_training.csv").open())))
    for name in ("gpu_gemm.csv", "gpu_kernels_vidur.csv"):
        rows[name] = len(list(csv.DictReader((DATA / "calibration" / name).open())))
    attention = list(csv.DictReader((DATA / "calibration" / "flash_attention.csv").open()))
    rows["flash_attention.csv"] = sum(r["chip"] != "h100" or r["impl"] == "fa3" for r in attention)  # FA2 on H100:
    for name in ("serving_latency.csv", "vllm_host_overhead.csv", "serving_host_runs.csv", "allreduce_kernels.csv"):
        rows[name] = len(list(csv.DictReader((DATA / "calibration" / name).open())))
    assert len(result["cases"]) == sum(rows.values())  # no measurement dropped        # the A100's shape, no case
    families = result["families"]
    assert sorted(families) == sorted(set((*MEETS, *MISSES, *HELD_OUT_WHOLE, *FIT_WHOLE)))
    for family, sets in families.items():
        for which, summary in sets.items():
            cases = [c for c in result["cases"] if c["family"] == family and (c["set"] == "fit") == (which == "fit")]
            if not cases and family in (HELD_OUT_WHOLE if which == "fit" else FIT_WHOLE):
                continue  # held out whole, or fitted whole
            ratios = np.array([c["predicted"] / c["measured"] for c in cases])
            error = np.exp(np.mean(np.abs(np.log(ratios)))) - 1
            assert summary["cases"] == len(cases) > 0
            assert summary["geomean_error"] == pytest.approx(error, rel=1e-12)
            assert summary["meets_target"] == (error <= TARGETS.get(family, TARGET))
        if family in FIT_MISSES:
            assert sets["fit"]["geomean_error"] > TARGET and "target" in result["notes"][family]
        else:
            assert sets["fit"]["cases"] == 0 or sets["fit"]["geomean_error"] <= TARGETS.get(family, TARGET), family
    for family in (*MEETS, "AllReduce, 8 x H200 NVLS (nccl-tests)", "AllReduce ring, 4 x H100 (nccl-tests)"):
        assert families[family]["held_out"]["geomean_error"] <= TARGETS.get(family, TARGET), family
    text = render(result)
    for family in MISSES:
        target = TARGETS.get(family, TARGET)
        assert families[family]["held_out"]["geomean_error"] > target and "target" in result["notes"][family]
        assert any(line.startswith(family) and "held_out" in line and f"MISSES the {target:.0%} target" in line
                   for line in text.splitlines())


def test_validation_tables_match_podsim_validate():
    """docs/validation.md (generated by scripts/make_validation_doc.py) carries every family's row as
    `podsim validate` computes it; every such row quoted in the calibration page or the README's summary is one
    of them (a stale figure left in prose pages fails here)."""
    result = _validated()
    rows = set()
    for family, sets in result["families"].items():
        for which, s in sets.items():
            if s["cases"]:
                rows.add(f"| {family} | {which.replace('_', ' ')} | {s['cases']} | {s['geomean_error'] * 100:.1f}% | "
                         f"{s['worst_error'] * 100:.1f}% |")
    generated = (ROOT / "docs" / "validation.md").read_text()
    for row in rows:
        assert row[:-1] in generated, row  # the generated table has the worst row and the target after these
    for path in (ROOT / "docs" / "explanation" / "calibration.md", ROOT / "README.md"):
        quoted = [line for line in path.read_text().splitlines() if line.startswith("| ") and line.endswith("% |")]
        assert set(quoted) <= rows, (path.name, set(quoted) - rows)
    summary = [line for line in (ROOT / "README.md").read_text().splitlines()
               if line.startswith("| ") and line.endswith("% |")]
    assert len(summary) >= 5


def test_cli_validate_and_calibrated_collective(capsys):
    assert main(["validate", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["families"]
    assert main(["collective", "all_reduce", "--chip", "a100", "--topology", "switch:8", "--bytes", "1GB",
                 "--calibrated", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["calibrated_time_s"] > data["time_s"]  # fitted efficiencies are below the line rate
    assert math.isclose(data["busbw_bytes_per_s"], 3.0e11, rel_tol=0.01)  # ideal: NVLink line rate
