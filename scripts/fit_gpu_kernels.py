"""Fit the GPU kernel model's constants to the measurement files; writes simulator/hardware/data/gpu_kernels.json.

    python scripts/fit_gpu_kernels.py

Each measurement row carries its own ``set`` (fit / held_out), fixed when the row was written and before any
error was computed (rules in simulator/hardware/data/calibration/README.md); this script fits on the ``fit`` rows
only and reports both sets. Predictions are `simulator.hardware.gpu_kernels.GpuKernels` itself, so what is
fitted is what podsim runs. Errors are geometric-mean symmetric errors, exp(mean |ln(predicted / measured)|) - 1.

Per chip:

- GEMM (gpu_gemm.csv: the XLA cost-model tables and mamf-finder's best shapes; gpu_kernels_vidur.csv: vidur's
  fp16 operator profiles; on H100 also h100_matmul_square.csv, torch eager, whose timings include the launch):
  ``peak_fraction`` per dtype, ``tile_cost``, ``kernel_s``, TF32's extra fixed time, ``matmul_hbm_fraction``,
  (H100) ``launch_s`` and the tile main loop's fill and drain ``k_half`` (one per chip in k-tiles, `fit_gemm`),
  jointly, by Powell's method on the log of each constant, every fit row weighing the same. A row carries
  ``launch_s`` only if its source timed it from the host (torch's square log; XLA, vidur and mamf-finder time the
  device: the data README's table).
  A dtype or constant a chip has no rows for is reused from another chip, as the JSON's ``sources`` record.
- Memory-bound kernels (vidur's RMSNorm, SiLU-and-multiply and residual add): ``hbm_fraction`` and
  ``memory_kernel_s`` per kind; no optimizer-kernel measurement: "optimizer" takes the element-wise constants.
- Launch: ``launch_s`` from the H100 GEMM fit (h100_matmul_square.csv's timings include it); ``graph_launch_s``
  is a published figure (not fitted).
- Attention (flash_attention.csv): FlashAttention-3's share of peak by head dim and direction and its sequence
  term, fitted to the FA3 paper's H100 bars; the A100's FlashAttention-2 takes FA2's shape from the same paper's
  FA2-on-H100 bars, scaled to the FA2 paper's A100 figure (230 TFLOP/s).
"""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

from scipy.optimize import minimize

from simulator.hardware.gpu_kernels import GpuKernels, attention_flops, peak_rates
from simulator.hardware.gpu_kernels import build as build_kernels

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "simulator" / "hardware" / "data"
OUT = DATA / "gpu_kernels.json"
CHIPS = ("a100", "h100", "h200", "b200")

#: Candidate output tiles and k padding per chip: the tile shapes in cuBLAS's kernel names as profiles show them
#: (ampere_bf16_s16816gemm_bf16_256x128_..., sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_...).
TILES = {
    "a100": {"tiles": [[256, 128], [128, 128], [128, 64], [64, 64]],
             "tile_k": {"bf16": 32, "fp16": 32, "fp32": 16, "int8": 64}},
    "hopper": {"tiles": [[128, 256], [128, 128], [64, 128], [64, 64]],
               "tile_k": {"bf16": 64, "fp16": 64, "fp32": 32, "fp8": 128, "int8": 128}},
}
SPLIT_K = [1, 2, 4]
GRAPH_LAUNCH_S = 0.5e-6  # NVIDIA, "Getting Started with CUDA Graphs": 3.8 us -> 3.4 us per 2.9 us kernel
GEMM_BOUNDS = {"tile_cost": (math.log(0.1), math.log(200.0)), "kernel_s": (math.log(1e-7), math.log(2e-5)),
               "fixed": (math.log(1e-8), math.log(2e-5)),
               "k_tiles": (math.log(0.05), math.log(32.0)), "launch_s": (math.log(1e-8), math.log(1e-4))}
#: the tile fill-and-drain (k-tiles) at which the GEMM fit first fits the other constants (`fit_gemm`)
K_TILES_GRID = (1.0, 2.0, 3.0)
K_REF = 1024.0  #: k (elements) at which a main-loop dtype's share of peak is searched in the joint step (`fit_gemm`)
START = {"peak": 0.8, "fixed": 1e-6, "launch_s": 3e-6, "tile_cost": 4.0, "kernel_s": 3e-6, "matmul_hbm_fraction": 0.8}


def solve(loss, x0: list[float], bounds: list[tuple[float, float]]) -> list[float]:
    """Minimise ``loss`` over log-constants inside ``bounds`` (Powell's method, then a bounded polish)."""
    best = minimize(loss, x0, method="Powell", bounds=bounds, options={"xtol": 1e-5, "ftol": 1e-9, "maxiter": 20000})
    best = minimize(loss, best.x, method="Powell", bounds=bounds, options={"xtol": 1e-6, "ftol": 1e-10})
    return list(best.x)


LOG_FRACTION = (math.log(0.05), 0.0)  # a share of a peak: 5% to 100%


def read(name: str) -> list[dict[str, str]]:
    with (DATA / "calibration" / name).open() as f:
        return list(csv.DictReader(f))


def gerror(pairs: list[tuple[float, float]]) -> float | None:
    """exp(mean |ln(predicted / measured)|) - 1 (None when empty)."""
    logs = [abs(math.log(p / m)) for p, m in pairs]
    return math.exp(sum(logs) / len(logs)) - 1 if logs else None


def report(rows: list[dict[str, Any]], predict) -> dict[str, Any]:
    """Cases, errors and worst case of a family's fit and held-out rows under ``predict(row) -> (pred, meas)``."""
    out: dict[str, Any] = {}
    for label in ("fit", "held_out"):
        pairs = [predict(r) for r in rows if r["set"] == label]
        out[label] = {"cases": len(pairs), "geomean_error": gerror(pairs),
                      "worst_error": max((math.exp(abs(math.log(p / m))) - 1 for p, m in pairs), default=None)}
    return out


# -- GEMM rows ----------------------------------------------------------------------------------------------
def gemm_rows(chip: str) -> list[dict[str, Any]]:
    """Every GEMM measurement of ``chip`` as (dtype, batch, m, k, n, seconds, set, source file)."""
    rows = []
    for r in read("gpu_gemm.csv"):
        if r["chip"] == chip:
            b, m, n, k = (int(r[x]) for x in ("batch", "m", "n", "k"))
            rows.append({"dtype": r["dtype"], "batch": b, "m": m, "k": k, "n": n, "set": r["set"],
                         "seconds": 2.0 * b * m * n * k / (float(r["tflop_per_s"]) * 1e12), "file": "gpu_gemm.csv",
                         "group": "mamf" if "mamf" in r["measured"] else "xla", "launch": False})
    for r in read("gpu_kernels_vidur.csv"):
        if r["chip"] == chip and r["kind"] == "gemm":
            rows.append({"dtype": "fp16", "batch": 1, "m": int(r["m"]), "k": int(r["k"]), "n": int(r["n"]),
                         "set": r["set"], "seconds": float(r["measured_s"]), "file": "gpu_kernels_vidur.csv",
                         "group": "vidur", "launch": False})
    if chip == "h100":  # torch eager: each timing includes the launch
        rows += [{**r, "dtype": "bf16", "batch": 1, "m": r["n"], "k": r["n"], "file": "h100_matmul_square.csv",
                  "group": "square", "launch": True} for r in square_rows()]
    return rows


def kernels(chip: str, constants: dict[str, Any]) -> GpuKernels:
    return build_kernels(chip, constants)


def gemm_pair(model: GpuKernels, r: dict[str, Any]) -> tuple[float, float]:
    seconds = model.matmul_kernel_s(r["m"], r["k"], r["n"], r["dtype"], r["batch"])
    return seconds + (model.launch_s if r["launch"] else 0.0), r["seconds"]


def row_loss(pairs: list[tuple[float, float]]) -> float:
    """Mean |ln(predicted / measured)| over the fit rows, every row weighing the same (weighing each source the
    same instead lets one searched-for mamf-finder row outweigh vidur's 224 GEMMs)."""
    return sum(abs(math.log(p / m)) for p, m in pairs) / len(pairs)


def fit_gemm(chip: str, base: dict[str, Any], free: list[str], rows: list[dict[str, Any]],
             main_loop: tuple[str, ...] = ()) -> dict[str, Any]:
    """Fit the ``free`` GEMM constants of ``chip`` (``peak:<dtype>``, ``fixed:<dtype>``, ``tile_cost``,
    ``kernel_s``, ``matmul_hbm_fraction``, ``launch_s``) on its fit rows; the rest of ``base`` stays. The fp16
    constants are bf16's (the same tensor-core path).

    With ``main_loop`` dtypes, also one tile fill-and-drain for them all, counted in k-tiles (k_half[dtype] =
    k_tiles x tile_k[dtype]: the same pipeline depth and epilogue, whatever a dtype's k-tile width). The loss is not
    smooth (a min over tiles) and k_half trades off against the share of peak (time ~ (k + k_half) / peak_fraction),
    so Powell's method alone stops short: the other constants are fitted at each of ``K_TILES_GRID``, and from the
    best of them all are fitted together, k_tiles included, with each main-loop dtype's share of peak searched as its
    share at ``K_REF`` elements of k (p_ref = peak_fraction x K_REF / (K_REF + k_half); a step in k_tiles then leaves
    the mid-k rows where they were). An asymptote above 1 is refused."""
    fit = [r for r in rows if r["set"] == "fit"]

    def constants(x, names: list[str], k_tiles: float | None) -> dict[str, Any]:
        c = json.loads(json.dumps(base))
        for name, value in zip(names, x, strict=True):
            v = math.exp(value)
            if name.startswith("peak:"):
                c["peak_fraction"][name[5:]] = v
            elif name.startswith("fixed:"):
                c["dtype_kernel_s"][name[6:]] = v
            elif name == "k_tiles":
                k_tiles = v
            else:
                c[name] = v
        if main_loop:
            assert k_tiles is not None
            c["k_half"] = {d: k_tiles * c["tile_k"][d] for d in main_loop}
            if "k_tiles" in names:  # p_ref -> the asymptote
                for d in main_loop:
                    c["peak_fraction"][d] *= (K_REF + c["k_half"][d]) / K_REF
        c["peak_fraction"]["fp16"] = c["peak_fraction"]["bf16"]
        if "bf16" in c.get("k_half", {}):
            c["k_half"]["fp16"] = c["k_half"]["bf16"]
        return c

    def loss_of(names: list[str], k_tiles: float | None):
        def loss(x) -> float:
            c = constants(x, names, k_tiles)
            if max(c["peak_fraction"].values()) > 1.0:
                return math.inf
            return row_loss([gemm_pair(kernels(chip, c), r) for r in fit])
        return loss

    bounds = [GEMM_BOUNDS.get(n.split(":")[0], LOG_FRACTION) for n in free]
    x0 = [math.log(START[n.split(":")[0]]) for n in free]
    if not main_loop:
        return constants(solve(loss_of(free, None), x0, bounds), free, None)
    tried = []
    for k_tiles in K_TILES_GRID:
        x = solve(loss_of(free, k_tiles), x0, bounds)
        tried.append((loss_of(free, k_tiles)(x), k_tiles, x))
    _, k_tiles, x = min(tried)
    start = constants(x, free, k_tiles)
    names = [*free, "k_tiles"]
    x1 = []
    for name, value in zip(free, x, strict=True):  # the best grid point, its main-loop shares as p_ref
        d = name[5:]
        x1.append(value + math.log(K_REF / (K_REF + start["k_half"][d])) if name.startswith("peak:") and
                  d in main_loop else value)
    x1.append(math.log(k_tiles))
    return constants(solve(loss_of(names, None), x1, [*bounds, GEMM_BOUNDS["k_tiles"]]), names, None)


def same_k_tiles(c: dict[str, Any], fitted: str, others: tuple[str, ...]) -> None:
    """Give ``others`` (dtypes without rows of their own) the ``fitted`` dtype's fill and drain in k-tiles."""
    for d in others:
        c["k_half"][d] = c["k_half"][fitted] / c["tile_k"][fitted] * c["tile_k"][d]


def mamf_ratio(chip: str, dtype: str, base: str) -> float:
    """Share of peak of mamf-finder's best ``dtype`` shape over its best ``base`` shape on ``chip``: the best shapes
    are searched for on the hardware (wave-friendly there), so their ratio compares the dtypes' kernels alone."""
    rates = peak_rates(chip)
    best = {r["dtype"]: float(r["tflop_per_s"]) * 1e12 / rates[r["dtype"]] for r in read("gpu_gemm.csv")
            if r["chip"] == chip and "mamf" in r["measured"]}
    return best[dtype] / best[base]


MEASURED_KINDS = ("elementwise", "norm", "activation")


# -- memory-bound rows ---------------------------------------------------------------------------------------
def memory_rows(chip: str) -> list[dict[str, Any]]:
    return [{"kind": r["kind"], "nbytes": float(r["nbytes"]), "seconds": float(r["measured_s"]), "set": r["set"]}
            for r in read("gpu_kernels_vidur.csv") if r["chip"] == chip and r["kind"] != "gemm"]


def memory_pair(model: GpuKernels, r: dict[str, Any]) -> tuple[float, float]:
    return model.memory_kernel_time_s(r["nbytes"], r["kind"]), r["seconds"]


def fit_memory(chip: str, base: dict[str, Any]) -> dict[str, Any]:
    fit = [r for r in memory_rows(chip) if r["set"] == "fit"]

    def constants(x) -> dict[str, Any]:
        c = json.loads(json.dumps(base))
        c["hbm_fraction"] = dict(zip(MEASURED_KINDS, (math.exp(v) for v in x[:3]), strict=True))
        c["memory_kernel_s"] = dict(zip(MEASURED_KINDS, (math.exp(v) for v in x[3:]), strict=True))
        c["hbm_fraction"]["optimizer"] = c["hbm_fraction"]["elementwise"]  # no optimizer-kernel measurement
        c["memory_kernel_s"]["optimizer"] = c["memory_kernel_s"]["elementwise"]
        return c

    def loss(x) -> float:
        model = kernels(chip, constants(x))
        return sum(abs(math.log(p / m)) for p, m in (memory_pair(model, r) for r in fit)) / len(fit)

    floor = (math.log(1e-7), math.log(2e-5))
    x0 = [math.log(0.8), math.log(0.5), math.log(0.6)] + [math.log(2e-6)] * 3
    return constants(solve(loss, x0, [LOG_FRACTION] * 3 + [floor] * 3))


# -- launch (torch eager square matmuls) ---------------------------------------------------------------------
SQUARE_HELD_OUT = [2048, 8192]  # the split calibration.json's matmul_h100 fit has always used


def square_rows() -> list[dict[str, Any]]:
    return [{"n": int(r["m_k_n"]), "seconds": 2.0 * int(r["m_k_n"]) ** 3 / (float(r["tflop_per_s"]) * 1e12),
             "set": "held_out" if int(r["m_k_n"]) in SQUARE_HELD_OUT else "fit"}
            for r in read("h100_matmul_square.csv")]


# -- attention -----------------------------------------------------------------------------------------------
def attention_rows(chip: str, impl: str) -> list[dict[str, Any]]:
    return [{**r, "head_dim": int(r["head_dim"]), "seq_len": int(r["seq_len"]), "batch": int(r["batch"]),
             "heads": int(r["heads"]), "causal": r["causal"] == "true", "backward": r["direction"] == "backward",
             "tflop_per_s": float(r["tflop_per_s"])}
            for r in read("flash_attention.csv") if r["chip"] == chip and r["impl"] == impl]


def attention_pair(model: GpuKernels, r: dict[str, Any]) -> tuple[float, float]:
    """Predicted and measured TFLOP/s (useful FLOPs over kernel time, as the papers report)."""
    args = (r["batch"], r["seq_len"], r["seq_len"], r["heads"], r["heads"], r["head_dim"], r["causal"], r["backward"])
    flops = attention_flops(r["batch"], r["seq_len"], r["seq_len"], r["heads"], r["head_dim"], r["causal"],
                            r["backward"])
    return flops / model.attention_kernel_s(*args) / 1e12, r["tflop_per_s"]


ATTENTION_FREE = [("forward", 64), ("forward", 128), ("forward", 256), ("backward", 64), ("backward", 128)]


def fit_attention(chip: str, base: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    fit = [r for r in rows if r["set"] == "fit"]

    def constants(x) -> dict[str, Any]:
        c = json.loads(json.dumps(base))
        att = {"forward": {}, "backward": {}, "kv_half": {"forward": math.exp(x[5]), "backward": math.exp(x[6])}}
        for (direction, dim), value in zip(ATTENTION_FREE, x[:5], strict=True):
            att[direction][str(dim)] = math.exp(value)
        att["backward"]["256"] = att["backward"]["128"]  # no head-dim-256 backward measurement
        c["attention"] = att
        return c

    def loss(x) -> float:
        model = kernels(chip, constants(x))
        return sum(abs(math.log(p / m)) for p, m in (attention_pair(model, r) for r in fit)) / len(fit)

    x0 = [math.log(0.6)] * 5 + [math.log(256.0), math.log(256.0)]
    kv = (math.log(1.0), math.log(16384.0))  # the sequence term's half-point: 1 to 16k keys
    return constants(solve(loss, x0, [LOG_FRACTION] * 5 + [kv, kv]))


def scale_attention(chip: str, base: dict[str, Any], shape: dict[str, Any], rows: list[dict[str, Any]]) -> dict:
    """``shape``'s attention fractions scaled by one factor so the fit rows of ``chip`` match (FA2 on the A100)."""
    fit = [r for r in rows if r["set"] == "fit"]
    c = json.loads(json.dumps(base))
    c["attention"] = json.loads(json.dumps(shape))
    pairs = [attention_pair(kernels(chip, c), r) for r in fit]
    factor = math.exp(sum(math.log(m / p) for p, m in pairs) / len(pairs))
    for direction in ("forward", "backward"):
        c["attention"][direction] = {d: v * factor for d, v in c["attention"][direction].items()}
    return c


# -- the whole fit -------------------------------------------------------------------------------------------
def skeleton(chip: str) -> dict[str, Any]:
    t = TILES["a100" if chip == "a100" else "hopper"]
    return {"peak_fraction": {"bf16": 0.8, "fp16": 0.8, "fp32": 0.8, "fp8": 0.8, "int8": 0.8}, **t,
            "tile_cost": START["tile_cost"], "split_k": SPLIT_K, "kernel_s": START["kernel_s"], "dtype_kernel_s": {},
            "matmul_hbm_fraction": START["matmul_hbm_fraction"],
            "hbm_fraction": {"elementwise": 0.9, "norm": 0.9, "optimizer": 0.9, "activation": 0.9},
            "memory_kernel_s": {"elementwise": 2e-6, "norm": 2e-6, "optimizer": 2e-6, "activation": 2e-6},
            "attention": {"forward": {"64": 0.6, "128": 0.6, "256": 0.6}, "backward": {"64": 0.5, "128": 0.5,
                                                                                     "256": 0.5},
                          "kv_half": {"forward": 256.0, "backward": 256.0}},
            "launch_s": 0.0, "graph_launch_s": GRAPH_LAUNCH_S}


def rounded(c: dict[str, Any]) -> dict[str, Any]:
    def r(v: Any) -> Any:
        if isinstance(v, float):
            return float(f"{v:.4g}")
        if isinstance(v, dict):
            return {k: r(x) for k, x in v.items()}
        return v
    return {k: r(v) for k, v in c.items()}


def build() -> dict[str, Any]:
    """The whole table gpu_kernels.json holds: per chip its constants and sources, and the fit report."""
    chips: dict[str, dict[str, Any]] = {}
    fit: dict[str, Any] = {}

    # H100: GEMM (bf16, fp32 from XLA and vidur and mamf; fp8 from mamf), memory kernels, launch, FA3
    h100 = fit_gemm("h100", skeleton("h100"), ["peak:bf16", "peak:fp32", "fixed:fp32", "tile_cost", "kernel_s",
                                               "matmul_hbm_fraction", "launch_s"], gemm_rows("h100"),
                    main_loop=("bf16", "fp32"))
    h100["peak_fraction"]["fp8"] = h100["peak_fraction"]["bf16"] * mamf_ratio("h100", "fp8", "bf16")
    h100["peak_fraction"]["int8"] = h100["peak_fraction"]["fp8"]
    same_k_tiles(h100, "bf16", ("fp8", "int8"))
    h100 = fit_memory("h100", h100)
    h100 = fit_attention("h100", h100, attention_rows("h100", "fa3"))
    chips["h100"] = h100

    # A100: GEMM from vidur + mamf (bf16/fp16); TF32 and int8 shares reused from H100's ratios to bf16
    a100 = skeleton("a100")
    a100["launch_s"] = h100["launch_s"]
    a100 = fit_gemm("a100", a100, ["peak:bf16", "tile_cost", "kernel_s", "matmul_hbm_fraction"], gemm_rows("a100"),
                    main_loop=("bf16",))
    same_k_tiles(a100, "bf16", ("fp32", "int8"))
    ratio = h100["peak_fraction"]["fp32"] / h100["peak_fraction"]["bf16"]
    a100["peak_fraction"]["fp32"] = a100["peak_fraction"]["bf16"] * ratio
    a100["peak_fraction"]["int8"] = a100["peak_fraction"]["bf16"]
    a100["dtype_kernel_s"] = dict(h100["dtype_kernel_s"])  # TF32's extra fixed time: H100's
    del a100["peak_fraction"]["fp8"]
    a100 = fit_memory("a100", a100)
    fa2_shape = fit_attention("h100", h100, attention_rows("h100", "fa2"))["attention"]
    h100["attention_impls"] = {"fa2": fa2_shape}  # FlashAttention-2 on H100: what 2023-24 frameworks ran
    a100 = scale_attention("a100", a100, fa2_shape, attention_rows("a100", "fa2"))
    chips["a100"] = a100

    # B200: GEMM from XLA sm_100 + mamf (bf16, fp32, fp8); HBM share, memory kernels, launch, attention from H100
    b200 = {**json.loads(json.dumps(h100)), "peak_fraction": dict(h100["peak_fraction"])}
    b200 = fit_gemm("b200", b200, ["peak:bf16", "peak:fp32", "fixed:fp32", "peak:fp8", "tile_cost", "kernel_s"],
                    gemm_rows("b200"), main_loop=("bf16", "fp32", "fp8"))
    b200["peak_fraction"]["int8"] = b200["peak_fraction"]["fp8"]
    same_k_tiles(b200, "fp8", ("int8",))
    chips["b200"] = b200

    # H200: H100's SMs, clocks and kernels; only HBM differs (the preset's bandwidth)
    chips["h200"] = json.loads(json.dumps(h100))

    for chip in CHIPS:
        chips[chip] = rounded(chips[chip])
        chips[chip]["sources"] = SOURCES[chip]
    for chip in CHIPS:
        model = build_kernels(chip, chips[chip])
        fit[f"gemm_{chip}"] = {
            source: report([r for r in gemm_rows(chip) if r["file"] == source], lambda r, m=model: gemm_pair(m, r))
            for source in ("gpu_gemm.csv", "gpu_kernels_vidur.csv", "h100_matmul_square.csv")
            if any(r["file"] == source for r in gemm_rows(chip))}
        if memory_rows(chip):
            fit[f"memory_{chip}"] = report(memory_rows(chip), lambda r, m=model: memory_pair(m, r))
        for impl in ("fa2", "fa3"):
            if attention_rows(chip, impl) and (impl == "fa3") == (chip != "a100"):
                fit[f"attention_{chip}"] = report(attention_rows(chip, impl), lambda r, m=model: attention_pair(m, r))
    return {"chips": chips, "fit": fit}


def main() -> None:
    table = build()
    OUT.write_text(json.dumps(table, indent=2) + "\n")
    for family, sets in table["fit"].items():
        print(family, json.dumps(sets))


_GEMM = ("gpu_gemm.csv (XLA's cost-model table: {xla}; mamf-finder's best shape) and gpu_kernels_vidur.csv "
         "(vidur's fp16 operator profiles), fitted jointly")
SOURCES: dict[str, dict[str, str]] = {
    "h100": {
        "peak_fraction": "bf16/fp16, fp32 (TF32): " + _GEMM.format(xla="sm_90") + "; fp8: the bf16 fraction x "
                         "the ratio of mamf-finder's H100 fp8 and bf16 shares of peak; int8: fp8's (no measurement)",
        "tile_cost": _GEMM.format(xla="sm_90"), "kernel_s": _GEMM.format(xla="sm_90"),
        "matmul_hbm_fraction": _GEMM.format(xla="sm_90") + " (the memory-bound rows are vidur's few-token GEMMs)",
        "tiles": "cuBLAS sm90 kernel names (tilesize128x256x64, 128x128x64, 64x128x64, 64x64x64); not fitted",
        "k_half": "bf16/fp16, fp32 (TF32): one fill and drain in k-tiles, " + _GEMM.format(xla="sm_90") + " and "
                  "h100_matmul_square.csv; fp8, int8: the same k-tiles (no rows of their own at small k)",
        "hbm_fraction": "gpu_kernels_vidur.csv: RMSNorm (norm), residual add (elementwise), SiLU-and-multiply "
                        "(activation); optimizer: no measurement, takes the element-wise share",
        "memory_kernel_s": "gpu_kernels_vidur.csv, the same memory-bound rows, per kind (optimizer: element-wise's)",
        "launch_s": "h100_matmul_square.csv (torch eager, one timed matmul per call, launch included), in the "
                    "joint H100 GEMM fit (its fit sizes 1024, 4096, 10240)",
        "graph_launch_s": "NVIDIA 'Getting Started with CUDA Graphs' (developer.nvidia.com/blog/cuda-graphs): 3.8 us "
                          "per 2.9 us kernel launched in a stream, 3.4 us in a graph; a published figure, not fitted",
        "attention": "flash_attention.csv: FlashAttention-3 paper (arXiv:2407.08608) Figures 5-6 bars on H100 "
                     "(head dims 64/128/256 forward, 64/128 backward; backward 256 takes 128's); pytorch/benchmark "
                     "#2391's FA3 rows held out",
    },
    "a100": {
        "peak_fraction": "bf16/fp16: gpu_kernels_vidur.csv (A100 fp16 GEMMs) and mamf-finder's A100 row; fp32 "
                         "(TF32): H100's TF32-to-bf16 ratio (no A100 TF32 measurement); int8: bf16's; no fp8 "
                         "tensor cores",
        "tile_cost": "gpu_kernels_vidur.csv + mamf-finder (A100), jointly",
        "kernel_s": "gpu_kernels_vidur.csv + mamf-finder (A100), jointly",
        "matmul_hbm_fraction": "gpu_kernels_vidur.csv (A100's few-token GEMMs)",
        "tiles": "cuBLAS sm80 kernel names (ampere_*_s16816gemm_*_256x128, 128x128, 128x64, 64x64); not fitted",
        "k_half": "bf16/fp16: gpu_kernels_vidur.csv + mamf-finder (A100), jointly, in k-tiles; fp32 (TF32), int8: "
                  "the same k-tiles",
        "hbm_fraction": "gpu_kernels_vidur.csv (A100 RMSNorm, SiLU-and-multiply, residual add); optimizer takes "
                        "the element-wise share",
        "memory_kernel_s": "gpu_kernels_vidur.csv (A100)",
        "launch_s": "H100's (h100_matmul_square.csv): PyTorch's per-kernel launch is host-side, no A100 "
                    "measurement",
        "graph_launch_s": "NVIDIA 'Getting Started with CUDA Graphs'; published, not fitted",
        "attention": "FlashAttention-2: the shape (head dim, direction, sequence term) of FA2's own bars on H100 in "
                     "the FA3 paper, scaled to the FA2 paper's A100 figure (up to 230 TFLOP/s, 73% of peak; "
                     "flash_attention.csv's a100 row)",
    },
    "b200": {
        "peak_fraction": "bf16, fp32 (TF32), fp8: gpu_gemm.csv (XLA's sm_100 table and mamf-finder's B200 rows), "
                         "fitted jointly; int8: fp8's",
        "tile_cost": "gpu_gemm.csv (sm_100)", "kernel_s": "gpu_gemm.csv (sm_100)",
        "matmul_hbm_fraction": "H100's (the sm_100 shapes are never memory-bound)",
        "tiles": "Hopper's cuBLAS tile shapes (no 2-SM Blackwell tiles modelled)",
        "k_half": "bf16, fp32 (TF32), fp8: one fill and drain in k-tiles, gpu_gemm.csv (sm_100), jointly; int8: "
                  "fp8's",
        "hbm_fraction": "H100's (no B200 memory-bound kernel measurement)",
        "memory_kernel_s": "H100's", "launch_s": "H100's",
        "graph_launch_s": "NVIDIA 'Getting Started with CUDA Graphs'",
        "attention": "H100's FlashAttention-3 shares of peak, applied to the B200's peak (no published B200 "
                     "FlashAttention bars; FA3 targets Hopper, Blackwell runs cuDNN / FA4 kernels)",
    },
    "h200": {
        "all": "H100's constants: the same GH100 die, 132 SMs and clocks; only HBM differs (4.8 TB/s, the preset's); "
               "mamf-finder's H200 fp8 and GH200 rows are held out against it",
        "graph_launch_s": "NVIDIA 'Getting Started with CUDA Graphs'",
    },
}


if __name__ == "__main__":
    main()
