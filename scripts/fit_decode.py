"""Fit the serving (decode / prefill) factors to published single- and multi-GPU measurements.

    python scripts/fit_decode.py

Reads simulator/hardware/data/calibration/decode_latency.csv (each row marked ``fit`` or ``held_out``),
fits ten constants to the single-GPU fit rows, then, with those fixed, each engine's tensor-parallel
synchronisation to its multi-GPU fit rows (geometric-mean error of predicted / measured), and writes
simulator/hardware/data/decode_calibration.json with per-chip factors, sources and fit errors:

- per serving engine (``vllm``; ``tensorrt-llm``: NeMo's and TensorRT-LLM v0.5's 2023 stack; ``gpt-fast``:
  compiled PyTorch), one HBM fraction for GPU decode kernels and the per-layer launch and
  synchronisation seconds, shared by A100 and H100 (two chips with one model size each cannot separate
  a per-chip fraction from the per-layer overhead; gpt-fast's 7B and 70B separate them by size);
- gpt-fast's int8 weight-only kernels' own HBM fraction (``hbm_fraction_8bit``), beside its bf16 one and its
  per-layer overhead: its README's one-GPU rows at two sizes in each dtype (Llama-2-7B and Llama-3.1-8B in bf16,
  both 32 layers, separate the fraction from the per-layer cost; Llama-3.1-8B and Llama-2/3.1-70B in int8, 32 and
  80 layers, the int8 fraction);
- the weight-streaming slowdown per doubling of a step's matmul rows: NeMo's batch 1 against 8, and vLLM's
  own from its 8-client throughput gain (continuous batching, `simulator.workloads.served.served_concurrent`);
- prefill's matmul fraction of peak: A100 bf16 and H100 8-bit (the two 2048-token first-token latencies);
- per engine with custom AllReduce kernels (vllm, gpt-fast), the kernel's constants
  (`simulator.workloads.served_tp.AllReduceKernel`: latency, two-shot stage, NVLink efficiency), fitted first,
  by linear least squares on relative error, to the fit rows of that kernel's own published microbenchmarks
  (``allreduce_kernels.csv``: vLLM's CUDA-graph benchmark of its custom kernel on H100; PyTorch's one-shot on
  8 H100), never to a decode row; their measured times hold the launch and barriers, so these engines pay no
  ``allreduce_sync_s`` on top (0, fitted to themselves). PyTorch's kernel has no two-shot rows: its stage is
  vLLM's;
- tensorrt-llm's ``allreduce_sync_s`` (NCCL without CUDA graphs): seconds each tensor-parallel AllReduce pays
  per doubling of GPUs beyond NCCL's ring latency (`simulator.workloads.served_tp`), fitted to NeMo's 8-GPU
  Llama-2-7B rows at batch 1 and 8 on A100 and H100. vLLM's and gpt-fast's multi-GPU decode rows stay held out.

H100 bf16 prefill uses the fitted H100 matmul efficiency of the calibrated mode (calibration.json);
H200 takes H100's factors (same SMs and clocks, faster HBM): its row is held out whole. The fit's
predictor is `simulator.workloads.served` itself, so the recorded errors are the model's.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from simulator.frontend.validate import geomean_error
from simulator.frontend.validate_decode import (
    MULTI_GPU,
    allreduce_kernel_rows,
    decode_rows,
    engine_of,
    family_of,
    gpus_of,
    kernel_features,
    predict,
)
from simulator.hardware.calibration import get_calibration
from simulator.hardware.decode_calibration import DecodeCalibration

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "simulator" / "hardware" / "data"


def rows() -> list[dict[str, str]]:
    return decode_rows()


H100_BF16_MATMUL = get_calibration("h100").matmul.peak_fraction


ENGINES = ("vllm", "tensorrt-llm", "gpt-fast")


KERNEL_CHIP = "h100"  #: every kernel microbenchmark row ran on H100s
VLLM_KERNEL = "vllm-custom"  #: the kernel whose two-shot rows fit the second stage a kernel without them takes
NCCL_ROWS = "nccl"  #: allreduce_kernels.csv's NCCL rows: held out whole, against NCCL's own latency model


def fit_kernels() -> dict[str, dict]:
    """Each custom AllReduce kernel's constants, by linear least squares on relative error over its fit rows
    (``t = latency + two_shot x stage + moved_bytes / (link_bw x efficiency)``, linear in latency, stage and
    1 / efficiency), with each set's geometric-mean error."""
    rows = [r for r in allreduce_kernel_rows() if r["kernel"] != NCCL_ROWS]  # NCCL's rows check, never fit
    out: dict[str, dict] = {}
    for name in sorted({r["kernel"] for r in rows}, key=lambda k: k != VLLM_KERNEL):  # vLLM's first: its stage
        fit = [r for r in rows if r["kernel"] == name and r["set"] == "fit"]
        feats = np.array([kernel_features(r) for r in fit])
        measured = np.array([float(r["measured_us"]) * 1e-6 for r in fit])
        two_shot = bool(feats[:, 1].any())
        stage = None if two_shot else out[VLLM_KERNEL]["two_shot_stage_s"]
        cols = [0, 1, 2] if two_shot else [0, 2]
        solved, *_ = np.linalg.lstsq(feats[:, cols] / measured[:, None], np.ones(len(fit)), rcond=None)
        latency, inv_eff = float(solved[0]), float(solved[-1])
        out[name] = {"name": name, "latency_s": round(latency, 10),
                     "two_shot_stage_s": round(float(solved[1]) if two_shot else stage, 10),
                     "link_efficiency": round(1 / inv_eff, 4), "chip": KERNEL_CHIP,
                     "two_shot_stage_from": name if two_shot else VLLM_KERNEL}
    return out


#: the custom kernel each engine runs (`simulator.workloads.served_tp.ENGINES`)
ENGINE_KERNELS = {"vllm": "vllm-custom", "gpt-fast": "torch-one-shot"}


def calibrations(q: dict[str, float], kernels: dict[str, dict] | None = None) -> dict[str, DecodeCalibration]:
    engines = {e: {"hbm_fraction": q[f"eta_{e}"], "layer_overhead_s": q[f"tau_{e}"]} for e in ENGINES}
    for e in ENGINES:  # vLLM's own; gpt-fast (batch-1 rows only) takes NeMo's
        engines[e]["batch_slowdown"] = q["beta_vllm"] if e == "vllm" else q["beta"]
        if f"eta8_{e}" in q:  # int8 weight-only kernels (gpt-fast): their own HBM fraction
            engines[e]["hbm_fraction_8bit"] = q[f"eta8_{e}"]
        if kernels and e in ENGINE_KERNELS:  # the kernel's measured time holds its sync: none on top
            engines[e].update(allreduce_sync_s=0.0, sync_fitted_to=e,
                              allreduce_kernel={k: v for k, v in kernels[ENGINE_KERNELS[e]].items()
                                                if k != "two_shot_stage_from"})
        elif f"sync_{e}" in q:
            engines[e].update(allreduce_sync_s=q[f"sync_{e}"], sync_fitted_to=e)
    common = {"hbm_fraction": q["eta_vllm"], "layer_overhead_s": q["tau_vllm"], "batch_slowdown": q["beta"],
              "engines": engines}
    a100 = DecodeCalibration("a100", matmul_fraction={"bf16": q["eps_a100"], "int8": q["eps_a100"]}, **common)
    h100 = DecodeCalibration("h100", matmul_fraction={"bf16": H100_BF16_MATMUL, "int8": q["eps_h100_8bit"]}, **common)
    return {"a100": a100, "h100": h100, "h200": dataclasses.replace(h100, chip="h200", borrowed_from="h100")}


def multi_gpu(row: dict[str, str]) -> bool:
    return gpus_of(row) > 1


#: engines with multi-GPU fit rows, whose tensor-parallel synchronisation is fitted (stage 2)
SYNC_ENGINES = ("tensorrt-llm",)


def errors(q: dict[str, float], subset: list[dict[str, str]], kernels: dict[str, dict] | None = None) -> float:
    cals = calibrations(q, kernels)
    return geomean_error([(predict(r, cals[r["chip"]]), float(r["measured_ms"])) for r in subset])


def search(loss, start: dict[str, float], rounds: int = 12) -> dict[str, float]:
    """Coordinate search: each constant in turn scaled by the factor that lowers the loss most, ``rounds`` times."""
    best = dict(start)
    for _ in range(rounds):
        for k in best:  # one constant at a time (coordinate refinement)
            best = min(({**best, k: best[k] * f} for f in (0.85, 0.93, 0.97, 1.0, 1.03, 1.07, 1.15)), key=loss)
    return best


#: engines whose single-GPU constants are refined jointly after the coordinate search (`refine`): gpt-fast's bf16
#: fraction and per-layer cost lie on a ridge (both set a 32-layer step's time), where one constant at a time
#: stalls (its fit rows' error 4.1% there, 2.1% at the ridge's minimum). Disclosed: this stage was added after
#: the first fit's printed summary (held-out aggregates among it) had been seen; it lowers fit-row error only
REFINED = {"gpt-fast": ("eta_gpt-fast", "eta8_gpt-fast", "tau_gpt-fast")}


def refine(q: dict[str, float], keys: tuple[str, ...], subset: list[dict[str, str]]) -> dict[str, float]:
    """``q`` with ``keys`` moved together to the minimum of the error over ``subset`` (Nelder-Mead on their
    logarithms, from ``q``'s values): rows that depend on no other constant, so the rest stay as they are."""
    from scipy.optimize import minimize

    def loss(x: np.ndarray) -> float:
        return errors({**q, **{k: float(np.exp(v)) for k, v in zip(keys, x, strict=True)}}, subset)

    start = np.log([q[k] for k in keys])
    res = minimize(loss, start, method="Nelder-Mead", options={"xatol": 1e-4, "fatol": 1e-6, "maxiter": 2000})
    return {**q, **{k: float(np.exp(v)) for k, v in zip(keys, res.x, strict=True)}} if res.fun < loss(start) else q


SOURCES = {
    "hbm_fraction": "per engine, fitted to decode_latency.csv: tensorrt-llm to NeMo + TensorRT-LLM Llama-2-7B at "
                    "batch 1 and 8 on A100 and H100; vllm to Llama-3.1-8B at one request on H100 and A100 40GB; "
                    "gpt-fast to Llama-2-7B and Llama-3.1-8B bf16 at batch 1 on one A100 (README, 2023-12 and "
                    "2024-09-13); one fraction for both GPUs",
    "hbm_fraction_8bit": "gpt-fast only (engines.gpt-fast): its int8 weight-only kernels, fitted to its README's "
                         "one-A100 Llama-3.1-8B, Llama-2-70B and Llama-3.1-70B int8 rows (github.com/pytorch-labs/"
                         "gpt-fast, 2023-12 and 2024-09-13); its Llama-2-7B int8 row stays held out",
    "layer_overhead_s": "fitted with hbm_fraction (kernel launches and synchronisation per layer per step, and each "
                        "kernel's fixed start and drain: the matrix-size ramp b / (b + B_half) of weight "
                        "streaming); gpt-fast's identified by its two bf16 sizes of 32 layers and its int8 rows of "
                        "32 and 80 layers",
    "batch_slowdown": "fitted to NeMo's batch-1 against batch-8 rows (skinny-GEMM weight streaming); vLLM's own "
                      "(engines.vllm) to its 8-client against 1-client throughput gain on A100 40GB "
                      "(musgrave-a100-40gb-c8, priced as closed-loop continuous batching); gpt-fast, with batch-1 "
                      "rows only, takes NeMo's",
    "attention_fraction": "not fitted: every measurement has a short context, so KV streaming is too small a part "
                          "to identify; taken as fast as weight streaming",
    "matmul_fraction": "prefill: fitted to TensorRT-LLM v0.5's 2048-token first-token latencies (A100 fp16, H100 "
                       "fp8); H100 bf16 from the calibrated mode's fitted matmul efficiency",
    "allreduce_sync_s": "per engine (engines.<name>.allreduce_sync_s): tensorrt-llm fitted to NeMo + TensorRT-LLM "
                        "Llama-2-7B on 8 x A100 and 8 x H100 at batch 1 and 8 (seconds per AllReduce per doubling "
                        "of GPUs beyond NCCL's ring LL latency: host launches without CUDA graphs); vllm and "
                        "gpt-fast: 0 (their custom kernel's fitted time holds its launch and barriers)",
    "allreduce_kernel": "per engine with custom kernels (engines.<name>.allreduce_kernel), fitted to "
                        "allreduce_kernels.csv's fit rows alone: vllm (vllm-custom) to vLLM's "
                        "benchmark_device_communicators.py on H100, 4 and 6 GPUs, one- and two-shot, 0.5-4 MiB, in "
                        "CUDA graphs (vllm-project/vllm#24111, 2025-09-02); gpt-fast (torch-one-shot: PyTorch's "
                        "one-shot kernel, IntraNodeComm's successor) to torch.ops.symm_mem.one_shot_all_reduce on 8 "
                        "x H100, 8 KiB-2 MiB, per call (pytorch/helion#245, 2025-07-23), its two-shot stage vLLM's; "
                        "held out: vllm-project/vllm#24532's 4-GPU run and #24111's 2-GPU row, "
                        "yifuwang/symm-mem-recipes#3 (2025-06-03)",
}


def kernel_report(name: str, kernel: dict) -> dict:
    """A kernel's fit and held-out rows and their geometric-mean errors (`kernel_features` at its constants)."""
    from simulator.frontend.validate_decode import predict_kernel_row

    rows = [r for r in allreduce_kernel_rows() if r["kernel"] == name]
    out: dict = {"two_shot_stage_from": kernel["two_shot_stage_from"]}
    for label in ("fit", "held_out"):
        subset = [r for r in rows if r["set"] == label]
        out[f"{label}_rows"] = [r["row"] for r in subset]
        out[f"{label}_error"] = geomean_error([(predict_kernel_row(r, kernel), float(r["measured_us"]))
                                               for r in subset])
    return out


def build() -> dict:
    data = rows()
    fit = [r for r in data if r["set"] == "fit" and not multi_gpu(r)]
    held = [r for r in data if r["set"] == "held_out" and not multi_gpu(r)]
    fit_tp = [r for r in data if r["set"] == "fit" and multi_gpu(r)]
    held_tp = [r for r in data if r["set"] == "held_out" and family_of(r) == MULTI_GPU]  # decode at batch 1-16

    def loss(q: dict[str, float]) -> float:
        return errors(q, fit)

    kernels = fit_kernels()
    q = search(loss, {"eta_vllm": 0.75, "tau_vllm": 2e-5, "eta_tensorrt-llm": 0.65, "tau_tensorrt-llm": 5e-5,
                      "eta_gpt-fast": 0.7, "eta8_gpt-fast": 0.6, "tau_gpt-fast": 2e-5, "beta": 0.05, "eps_a100": 0.65,
                      "eps_h100_8bit": 0.4, "beta_vllm": 0.05})
    for e, keys in REFINED.items():  # stage 1b: the engine's ridge, on its own single-GPU fit rows
        q = refine(q, keys, [r for r in fit if engine_of(r) == e])
    single = dict(q)
    for e in SYNC_ENGINES:  # stage 2: each engine's sync on its multi-GPU fit rows, the single-GPU constants fixed
        mine = [r for r in fit_tp if engine_of(r) == e]
        q = {**q, **search(lambda s, mine=mine, q=q: errors({**q, **s}, mine), {f"sync_{e}": 1e-5}, rounds=20)}
    cals = calibrations(q, kernels)
    chips = {}
    for name, cal in cals.items():
        sources = dict(SOURCES)
        if name == "h200":
            sources["hbm_fraction"] += "; H200 takes H100's factors (same SMs; its own row is held out)"
        chips[name] = {"engines": {e: {k: round(v, 8) if isinstance(v, float) else v for k, v in f.items()}
                                   for e, f in cal.engines.items()},
                       "batch_slowdown": round(cal.batch_slowdown, 4), "attention_fraction": 1.0,
                       "matmul_fraction": {k: round(v, 4) for k, v in cal.matmul_fraction.items()},
                       "sources": sources, **({"borrowed_from": cal.borrowed_from} if cal.borrowed_from else {})}
    report = {"fit_rows": [r["row"] for r in fit], "held_out_rows": [r["row"] for r in held],
              "fit_error": loss(single), "held_out_error": errors(q, held),
              "multi_gpu_fit_rows": [r["row"] for r in fit_tp], "multi_gpu_held_out_rows": [r["row"] for r in held_tp],
              "multi_gpu_fit_error": errors(q, fit_tp, kernels),
              "multi_gpu_held_out_error": errors(q, held_tp, kernels),
              "allreduce_kernels": {name: kernel_report(name, k) for name, k in kernels.items()}}
    return {"chips": chips, "fit": report}


if __name__ == "__main__":
    table = build()
    (DATA / "decode_calibration.json").write_text(json.dumps(table, indent=2) + "\n")
    print({k: v for k, v in table["fit"].items() if "error" in k})
    print({k: {f: v[f] for f in ("engines", "batch_slowdown", "matmul_fraction")} for k, v in table["chips"].items()})
