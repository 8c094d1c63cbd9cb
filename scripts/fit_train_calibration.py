"""Fit the calibrated training step's constants to published TPU MFU; writes hardware/data/train_calibration.json.

    python scripts/fit_train_calibration.py

Data: ``simulator/hardware/data/calibration/tpu_training_mfu.csv`` (MaxText's v5e and v5p tables, PaLM
on v4), each row marked ``fit`` or ``held_out``; held-out rows are never seen by the fit, and `podsim
validate` reports them apart. The predictor is `simulator.workloads.plans.calibrated` itself (a closed
form, milliseconds per row), compared with the MFU each publication printed, counted its own way.

Two stages, so each constant is pinned by the rows that move it: (1) on the single-slice fit rows,
the MXU's share of peak, its shape dependence (half-efficiency width), flash attention's share and the
interference of overlapped FSDP collectives with compute;
(2) with those fixed, on the multislice fit rows, DCN efficiency and the fixed cost per cross-slice
ring step. HBM and ICI efficiencies come from calibration.json; the per-step overhead is an estimate.
"""
from __future__ import annotations

import itertools
import json
import math
from dataclasses import asdict, replace
from pathlib import Path

from simulator.hardware.calibration import get_calibration
from simulator.hardware.train_calibration import GpuStepConstants, StepConstants
from simulator.workloads.plans.calibrated import calibrated_train_step
from simulator.workloads.plans.published import CSV_PATH, PublishedRun, published_runs
from simulator.workloads.plans.published_gpu import CSV_PATH as GPU_CSV
from simulator.workloads.plans.published_gpu import PublishedGpuRun, predict_run, published_gpu_runs

OUT = Path(__file__).resolve().parents[1] / "simulator" / "hardware" / "data" / "train_calibration.json"
CHIPS = ["tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu7x"]  # TPUs; fitted on v5e and v5p, checked on v4
STEP_OVERHEAD_S = 0.005  # host dispatch of one compiled step: an estimate (not identifiable from MFU tables)
GPU_CHIPS = ["a100", "h100", "h200", "b200"]  # fitted on A100 and H100 runs; H200 and B200 reuse the constants
#: an NCCL ring across nodes: 330 GB/s bus bandwidth on 2 nodes of 8 x H100 with 8 x 400 Gb/s NICs each (NVLS off,
#: NVIDIA/nccl#1221; data/calibration/h100x16_nvlstree_allreduce_busbw.csv) over the 400 GB/s of a node's NICs
IB_FRACTION = 330 / 400


def predict(run: PublishedRun, c: StepConstants) -> float:
    """The MFU the run's publication would print for podsim's step under constants ``c``."""
    out = calibrated_train_step(run.cfg, run.chip, run.plan, run.opts, run.batch, run.seq, constants=c,
                                check_memory=False)
    return run.predicted_published_mfu(out["step_time_s"])


def with_chip(run: PublishedRun, c: StepConstants) -> StepConstants:
    cal = get_calibration(run.chip.name)
    return replace(c, hbm_fraction=cal.hbm_fraction, ici_fraction=cal.links["ici"].peak_fraction)


def geomean_error(pairs: list[tuple[float, float]]) -> float:
    return math.exp(sum(abs(math.log(p / m)) for p, m in pairs) / len(pairs)) - 1


def loss(rows: list[PublishedRun], c: StepConstants) -> float:
    return geomean_error([(predict(r, with_chip(r, c)), r.published_mfu) for r in rows])


def search(rows: list[PublishedRun], base: StepConstants, grids: dict[str, list[float]]) -> StepConstants:
    """Exhaustive search over the grids, then five rounds of refinement around the best point, one constant at a
    time (coordinate descent: each tries 0.8-1.25 x its value with the others held)."""
    points = (bounded(replace(base, **dict(zip(grids, v, strict=True)))) for v in itertools.product(*grids.values()))
    best = min(points, key=lambda c: loss(rows, c))
    for _ in range(5):
        for k in grids:
            best = min((bounded(replace(best, **{k: getattr(best, k) * f}))
                        for f in (0.8, 0.9, 0.95, 1.0, 1.05, 1.1, 1.25)), key=lambda c: loss(rows, c))
    return best


def bounded(c: StepConstants) -> StepConstants:
    """Physical bounds: shares of a peak at most 1, and flash attention's block matmuls (a few hundred wide) no
    more efficient than the large weight matmuls."""
    mxu = min(c.mxu_fraction, 1.0)
    return replace(c, mxu_fraction=mxu, flash_fraction=min(c.flash_fraction, mxu),
                   dcn_fraction=min(c.dcn_fraction, 1.0), overlap_interference=min(c.overlap_interference, 1.0))


def errors(rows: list[PublishedRun], c: StepConstants) -> dict[str, object]:
    pairs = [(predict(r, with_chip(r, c)), r.published_mfu) for r in rows]
    return {"runs": [r.run for r in rows], "geomean_error": geomean_error(pairs),
            "worst_error": max(math.exp(abs(math.log(p / m))) - 1 for p, m in pairs)}


def build() -> dict[str, object]:
    """The table train_calibration.json holds: chips, fitted constants, sources, fit errors."""
    runs = published_runs()
    fit = [r for r in runs if not r.held_out]
    held = [r for r in runs if r.held_out]
    one = [r for r in fit if r.plan.size("data") == 1]
    multi = [r for r in fit if r.plan.size("data") > 1]
    base = StepConstants(step_overhead_s=STEP_OVERHEAD_S, dcn_fraction=1.0)
    stage1 = search(one, base, {"mxu_fraction": [0.8, 0.85, 0.9, 0.95], "mxu_half_dim": [64.0, 128.0, 256.0, 512.0],
                                "flash_fraction": [0.3, 0.45, 0.6, 0.8], "overlap_interference": [0.05, 0.2, 0.5, 1.0]})
    c = search(multi, stage1, {"dcn_fraction": [0.1, 0.2, 0.4, 0.8], "dcn_step_s": [0.001, 0.003, 0.01, 0.03]})
    constants = {k: round(v, 6) for k, v in asdict(c).items() if k not in ("hbm_fraction", "ici_fraction")}
    table = {
        "chips": CHIPS, "constants": constants,
        "sources": {
            "data": f"{CSV_PATH.name}: MaxText README tables (v5e 16B-128B on 1-32 v5e-256 slices; v5p 32B-512B) and "
                    "PaLM 540B on 6144 v4 (46.2% MFU), each row with its URL, date and configuration",
            "mxu_fraction, mxu_half_dim, flash_fraction, overlap_interference": "fitted (stage 1) to the "
                                                                                 "single-slice fit rows",
            "flash_fraction": "at its bound, the matmul share: attention is 1-5% of these runs' FLOPs (2,048 tokens), "
                              "so the tables barely identify it",
            "dcn_fraction, dcn_step_s": "fitted (stage 2) to the multislice fit rows with stage 1 fixed",
            "step_overhead_s": "an estimate (host dispatch of a compiled step); MFU tables cannot separate it",
            "hbm_fraction, ici_fraction": "the chip's calibration.json (HBM 91% of spec; ICI: the book's AllGathers)",
            "chips": "fitted on v5e and v5p; v4 is checked by the held-out PaLM row; v6e and tpu7x reuse the constants "
                     "(no published rows found for them)",
        },
        "fit": {"fit": errors(fit, c), "held_out": errors(held, c)},
    }
    return table


#: each fitted framework's attention kernel (what its runs used; `simulator.workloads.plans.calibrated_gpu.ATTENTION`)
FRAMEWORK_ATTENTION = {"megatron-lm": "unfused",  # the 2021-2022 papers' code predates FlashAttention
                       "megatron-core": "flash",  # Transformer Engine's fused (cuDNN) attention
                       "llm-foundry": "flash2"}  # FlashAttention-2 (its 2023-24 benchmark tables)
#: frameworks without fit rows -> the fitted family whose constants they take (fixed before any error was seen)
FRAMEWORK_ALIASES = {"torchtitan": "llm-foundry", "llama3-meta": "megatron-core"}
SHARED = ("sm_interference", "step_overhead_s")
OWN = ("compute_fraction",)
#: host seconds a kernel: not identified by the published rows (every fitted run's kernels run far longer than a
#: launch), so fixed at 0 until a launch-bound measurement pins it; the kernel model's launch_s is paid regardless
DISPATCH_S = 0.0


def _constants(params: dict[str, float], framework: str) -> GpuStepConstants:
    own = {k: params[f"{framework}.{k}"] for k in OWN}
    return GpuStepConstants(ib_fraction=IB_FRACTION, framework=framework, attention=FRAMEWORK_ATTENTION[framework],
                            dispatch_s=DISPATCH_S, **{k: params[k] for k in SHARED}, **own)


def _pairs(rows: list[PublishedGpuRun], params: dict[str, float]) -> list[tuple[float, float]]:
    return [(r.predicted(predict_run(r, _constants(params, FRAMEWORK_ALIASES.get(r.framework, r.framework)))
                         ["step_time_s"]), r.measured) for r in rows]


def gpu_errors(rows: list[PublishedGpuRun], params: dict[str, float]) -> dict[str, object]:
    pairs = _pairs(rows, params)
    return {"runs": [r.run for r in rows], "geomean_error": geomean_error(pairs) if pairs else None,
            "worst_error": max(math.exp(abs(math.log(p / m))) - 1 for p, m in pairs) if pairs else None}


#: where the search starts sm_interference: 1 (the compute loses exactly the SMs the collective's kernels hold) and
#: a few multiples of it; the fit loss is flat along it (the compute fractions trade against it), so one start's
#: coordinate descent can stop on a slope another start goes past
SM_INTERFERENCE_STARTS = (1.0, 2.0, 4.0, 8.0)


def gpu_search(rows: list[PublishedGpuRun]) -> dict[str, float]:
    """Coordinate descent from each of `SM_INTERFERENCE_STARTS`: shared constants over every fit row, each
    framework's own over all (its rows are the only ones they move). Steps 0.5-2x, then finer down to 1-2%; shares
    of a peak at most 1. The start with the lowest fit-row loss wins (only fit rows are seen)."""

    def loss(p: dict[str, float]) -> float:
        return geomean_error(_pairs(rows, p))

    def descend(start: float) -> dict[str, float]:
        params: dict[str, float] = {"sm_interference": start, "step_overhead_s": 0.01}
        for fw in FRAMEWORK_ATTENTION:
            params.update({f"{fw}.compute_fraction": 0.9})
        coarse = ((0.5, 0.7, 1.0, 1.4, 2.0), (0.8, 0.9, 1.0, 1.1, 1.25), (0.95, 1.0, 1.05))
        for factors in coarse * 2 + ((0.98, 0.99, 1.0, 1.01, 1.02),) * 4:  # then 1-2% steps: off the coarse grid
            for key in list(params):
                cap = 1.0 if key.endswith("compute_fraction") else math.inf
                params = min(({**params, key: min(cap, params[key] * f)} for f in factors), key=loss)
        return params

    return min((descend(s) for s in SM_INTERFERENCE_STARTS), key=loss)


def build_gpu() -> dict[str, object]:
    """The ``gpu`` section: chips, constants fitted to the GPU fit rows (shared and per framework), sources, fit
    errors, what the fit saw."""
    runs = published_gpu_runs()
    fit = [r for r in runs if not r.held_out]
    held = [r for r in runs if r.held_out]
    params = gpu_search(fit)
    frameworks = {fw: {**{k: round(params[f"{fw}.{k}"], 9) for k in OWN}, "dispatch_s": DISPATCH_S, "attention": att}
                  for fw, att in FRAMEWORK_ATTENTION.items()}
    features = sorted({"moe" for r in fit if r.cfg.n_experts} | {"tp_overlap" for r in fit if r.opts.tp_overlap})
    return {
        "chips": GPU_CHIPS, "constants": {**{k: round(params[k], 9) for k in SHARED}, "ib_fraction": IB_FRACTION},
        "frameworks": frameworks, "aliases": FRAMEWORK_ALIASES,
        "fit_chips": sorted({r.chip.name for r in fit}), "fit_axes": sorted({a for r in fit for a in r.plan.used}),
        "fit_features": features,
        "sources": {
            "data": f"{GPU_CSV.name}: published GPU training runs (Megatron-LM 2021 and 2022, Megatron-Core 2024, "
                    "llm-foundry, NeMo 24.07, Megatron-Bridge 25.11; torchtitan and Llama 3 held out whole), each row "
                    "with its URL and date (calibration/gpu_training_sources.md); the set column decided by the "
                    "file's rule",
            "sm_interference, step_overhead_s": "fitted to every fit row (geometric-mean error of each source's own "
                                                "metric)",
            "sm_interference": "compute seconds lost per second of overlap per unit of the SMs' share an overlapped "
                               "collective holds: NCCL's channels for the algorithm its tuner picks (one thread block "
                               "each), Transformer Engine's userbuffers 8.5 SMs (initialize_ub defaults: 1 SM "
                               "ring_exchange, 16 pipeline / bulk); 1 would be the SMs alone, the rest HBM and L2 "
                               "contention",
            "compute_fraction": "per framework, fitted with the shared constants (its own rows move it): its "
                                "kernels' share of the kernel model's throughput",
            "dispatch_s": "not fitted: 0 (no fitted run is launch-bound, so the rows do not identify it)",
            "attention": "per framework, what its runs used (not fitted)",
            "aliases": "frameworks without fit rows take the nearest fitted family's constants (fixed a priori)",
            "ib_fraction": "not fitted: 330 of 400 GB/s, an NCCL ring across 2 nodes of 8 x H100 (NVIDIA/nccl#1221)",
            "kernels": "simulator.hardware.gpu_kernels (GEMM, attention and memory-bound kernels, fitted apart)",
            "chips": "fitted on the chips in fit_chips; the others reuse the step constants with their own kernels",
        },
        "fit": {"fit": gpu_errors(fit, params), "held_out": gpu_errors(held, params)},
    }


def main() -> None:
    table = {**build(), "gpu": build_gpu()}
    OUT.write_text(json.dumps(table, indent=1) + "\n")
    print(json.dumps(table["constants"], indent=1))
    print(json.dumps(table["gpu"]["constants"], indent=1), json.dumps(table["gpu"]["fit"], indent=1))
    print(f"fit {table['fit']['fit']['geomean_error']:.3f} (worst {table['fit']['fit']['worst_error']:.3f}), held out "
          f"{table['fit']['held_out']['geomean_error']:.3f} (worst {table['fit']['held_out']['worst_error']:.3f})")


if __name__ == "__main__":
    main()
