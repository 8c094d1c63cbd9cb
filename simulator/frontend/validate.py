"""`podsim validate`: every calibration measurement run through the calibrated simulator.

Each case is simulated (not computed from the fitting formulas): a matmul on a calibrated chip, or a
collective on a calibrated system of the measured shape. Cases the fit used and cases kept apart are
reported separately, per family, as geometric-mean and worst errors, each set marked against the
target (``TARGET_ERROR``: at most 10% geometric-mean error on collectives from 1 MiB up and on large
matmuls). Every family is reported whether or not it meets the target; ``NOTES`` says why the ones
that miss it do.
"""
from __future__ import annotations

import csv
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from simulator import analytic
from simulator.collectives import run_collective
from simulator.engine.system import System
from simulator.hardware.calibration import DATA, fit_report, get_calibration

TARGET_ERROR = 0.10  #: geometric-mean error the calibrated mode aims at (collectives >= 1 MiB, large matmuls)
TARGETS: dict[str, float] = {}  #: families with a target of their own (the rest: `TARGET_ERROR`)


@dataclass
class Case:
    """One measurement beside its prediction (both in ``unit``)."""

    family: str
    name: str
    measured: float
    predicted: float
    unit: str
    held_out: bool

    @property
    def error(self) -> float:
        """Signed relative error of the prediction."""
        return self.predicted / self.measured - 1

    @property
    def ratio_error(self) -> float:
        """Symmetric error exp(|ln(predicted / measured)|) - 1: 2x too fast and 2x too slow both read 100%."""
        return math.exp(abs(math.log(self.predicted / self.measured))) - 1


def _rows(name: str) -> list[dict[str, str]]:
    with (DATA / "calibration" / name).open() as f:
        return list(csv.DictReader(f))


def matmul_cases() -> list[Case]:
    """torch's square bf16 matmuls on one H100 (eager, launch included), simulated on a calibrated H100 (the GPU
    kernel model); the held-out sizes are those the square-matmul fit has always kept apart."""
    held = set(fit_report()["matmul_h100"]["held_out"])
    cases = []
    for r in _rows("h100_matmul_square.csv"):
        n = int(r["m_k_n"])
        system = System("h100", calibrated=True, trace=False)
        system.chip.matmul(n, n, n, dtype="bf16")
        system.run()
        cases.append(Case("matmul, H100 bf16 square", f"{n}^3", float(r["tflop_per_s"]),
                          2 * n**3 / system.env.now / 1e12, "TFLOP/s", n in held))
    return cases


def _allreduce_s(nbytes: float, gpus: int, per_node: int) -> float:
    topology = f"switch:{gpus}" if gpus == per_node else f"nodes:{gpus // per_node}:{per_node}"
    system = System("a100", topology=topology, calibrated=True, trace=False)  # NCCL's ring, as fitted
    return run_collective("all_reduce", system, nbytes, algorithm="unidirectional").time_s


def nccl_cases() -> list[Case]:
    held = set(fit_report()["nccl_a100"]["held_out"])
    cases = []
    for r in _rows("a100_allreduce_busbw.csv"):
        size = int(r["size_bytes"])
        _, busbw = analytic.bus_bandwidth("all_reduce", size, _allreduce_s(size, 8, 8), 8)
        busbw /= 1e9
        cases.append(Case("AllReduce, 8 x A100 NVLink (nccl-tests)", _size(size), float(r["busbw_gb_per_s"]), busbw,
                          "GB/s busbw", size in held))
    return cases


def nvls_cases() -> list[Case]:
    """8-GPU NVLS AllReduce bus bandwidth, 1 MiB to 8 GiB: H100 (four sizes held out) and H200 (all held out).

    The simulation runs the ``nvls`` algorithm on a calibrated ``switch:8`` (the measurements are NCCL's
    NVLS algorithm at every size)."""
    held = set(fit_report()["nvls_h100"]["held_out"])
    cases = []
    for chip in ("h100", "h200"):
        for r in _rows(f"{chip}_nvls_allreduce_busbw.csv"):
            size = int(r["size_bytes"])
            if size < 2**20:
                continue
            system = System(chip, topology="switch:8", calibrated=True, trace=False)
            t = run_collective("all_reduce", system, size, algorithm="nvls").time_s
            _, busbw = analytic.bus_bandwidth("all_reduce", size, t, 8)
            cases.append(Case(f"AllReduce, 8 x {chip.upper()} NVLS (nccl-tests)", _size(size),
                              float(r["busbw_gb_per_s"]), busbw / 1e9, "GB/s busbw", chip == "h200" or size in held))
    return cases


def nvls_small_cases() -> list[Case]:
    """The same NVLS measurements below 1 MiB, where latency dominates: held out, never fitted (the fit starts at
    1 MiB), so they test the small-message regime."""
    cases = []
    for chip in ("h100", "h200"):
        for r in _rows(f"{chip}_nvls_allreduce_busbw.csv"):
            size = int(r["size_bytes"])
            if size >= 2**20:
                continue
            system = System(chip, topology="switch:8", calibrated=True, trace=False)
            t = run_collective("all_reduce", system, size, algorithm="nvls").time_s
            cases.append(Case("AllReduce, 8 x H100/H200 NVLS, 1-512 KiB", f"{chip} {size // 1024} KiB",
                              1.75 * size / float(r["busbw_gb_per_s"]) / 1e3, t * 1e6, "us", True))
    return cases


def _h100_ring_busbw(size: float, protocol: str = "auto") -> float:
    system = System("h100", topology="switch:4", calibrated=True, trace=False)
    t = run_collective("all_reduce", system, size, algorithm="unidirectional", protocol=protocol).time_s
    return analytic.bus_bandwidth("all_reduce", size, t, 4)[1] / 1e9


def h100_ring_cases() -> list[Case]:
    """4 x H100 rings (nccl-tests, NCCL 2.18.3; NCCL_ALGO=Ring, then NCCL_PROTO at 256 MiB), all held out: the ring's
    plateau (the H100 NVLink model is a published figure on the A100 curve's shape), and LL and LL128 bus
    bandwidth as a share of Simple's (the protocols' payload efficiency, `simulator.collectives.protocol`)."""
    rows = _rows("h100x4_ring_allreduce_busbw.csv")
    cases = [Case("AllReduce ring, 4 x H100 (nccl-tests)", _size(int(r["size_bytes"])), float(r["busbw_gb_per_s"]),
                  _h100_ring_busbw(int(r["size_bytes"])), "GB/s busbw", True) for r in rows if r["algorithm"] == "Ring"]
    by_protocol = {r["protocol"]: (int(r["size_bytes"]), float(r["busbw_gb_per_s"])) for r in rows
                   if r["algorithm"] == "auto"}
    size, simple = by_protocol.pop("Simple")
    simulated_simple = _h100_ring_busbw(size, "Simple")
    cases += [Case("Protocols, 4 x H100 ring, 256 MiB (nccl-tests)", f"{name} / Simple", busbw / simple,
                   _h100_ring_busbw(size, name) / simulated_simple, "x Simple busbw", True)
              for name, (_, busbw) in by_protocol.items()]
    return cases


def tpu_cases() -> list[Case]:
    """The book's two profiled AllGathers over 4 TPU v5e chips (an 8x4 slice, no wraparound): the ICI efficiency and
    the launch were solved from exactly these two, so they are the fit set and nothing is held out."""
    cases = []
    for r in _rows("tpu_v5e_book_allgather.csv"):
        system = System("tpu-v5e", topology=r["topology"], calibrated=True, trace=False)
        t = run_collective("all_gather", system, int(r["size_bytes"]), axes=[int(r["axis"])]).time_s
        cases.append(Case("AllGather, TPU v5e ICI (the book's profiles)", r["case"], float(r["measured_s"]) * 1e6,
                          t * 1e6, "us", False))
    return cases


def pytorch_cases() -> list[Case]:
    """PyTorch-level timings: the simulated collective plus PyTorch's fitted overhead per call."""
    report = fit_report()
    fitted = {tuple(c) for key in ("framework_a100", "ib_a100") for c in report[key]["fit_configs"]}
    framework = get_calibration("a100").framework_launch_s
    cases = []
    for r in _rows("a100_dgx_all_reduce_pow2.csv"):
        gpus, per_node, size = int(r["num_workers"]), int(r["devices_per_node"]), int(r["size_bytes"])
        family = ("AllReduce, A100 one node (PyTorch)" if gpus == per_node else
                  "AllReduce, A100 two nodes (PyTorch)")
        cases.append(Case(family, f"{gpus} GPUs ({per_node}/node), {_size(size)}", float(r["median_ms"]),
                          (framework + _allreduce_s(size, gpus, per_node)) * 1e3, "ms", (gpus, per_node) not in fitted))
    return cases


def _size(nbytes: int) -> str:
    return f"{nbytes / 2**20:.4g} MiB" if nbytes < 2**30 else f"{nbytes / 2**30:.4g} GiB"


def geomean_error(pairs: Iterable[tuple[float, float]]) -> float | None:
    """exp(mean |ln(predicted / measured)|) - 1 over ``(predicted, measured)`` pairs (None when empty).

    The symmetric average ratio error: 2x too fast and 2x too slow both read 100%.
    """
    logs = [abs(math.log(predicted / measured)) for predicted, measured in pairs]
    return math.exp(sum(logs) / len(logs)) - 1 if logs else None


def summarize(cases: list[Case]) -> dict[str, Any]:
    """Per family and per set (fit, held out): cases, geometric-mean and worst error, whether it meets the target."""
    out: dict[str, Any] = {}
    for family in dict.fromkeys(c.family for c in cases):
        mine = [c for c in cases if c.family == family]
        out[family] = {}
        fit, held = [c for c in mine if not c.held_out], [c for c in mine if c.held_out]
        for label, subset in (("fit", fit), ("held_out", held)):
            error = geomean_error((c.predicted, c.measured) for c in subset)
            target = TARGETS.get(family, TARGET_ERROR)
            out[family][label] = {"cases": len(subset), "geomean_error": error,
                                  "worst_error": max((c.ratio_error for c in subset), default=None),
                                  "meets_target": None if error is None else error <= target, "target_error": target}
    return out


NOTES = {
    "matmul, H100 bf16 square": "misses the 10% target on its held-out sizes since matmuls run on the GPU kernel "
           "model (simulator.hardware.gpu_kernels), fitted to XLA's H100 table, vidur's profiles, mamf-finder and "
           "this file's three fit sizes together (before: 3.2% fit, 7.1% held out, two constants fitted to these "
           "rows alone). The sources disagree: torch's 2048^3 (677 TFLOP/s, launch included) is faster than XLA's "
           "kernel alone (632), and vidur's large fp16 GEMMs run at about 750 TFLOP/s where this log reaches 798 "
           "at 8192^3; the model follows the many rows (2048^3: 728 -> 539, 8192^3: 748 -> 739 TFLOP/s)",
    "HBM": "no HBM measurements in the calibration set: the model uses 91% of the spec bandwidth, the middle of the "
           "published 87-95% for streaming HBM on H100",
    "AllReduce, A100 two nodes (PyTorch)": "misses the 10% target by far. The InfiniBand efficiency was fitted on 2 "
           "GPUs on 2 nodes (one NIC each); with more GPUs per node podsim runs one ring per GPU (NCCL's ring per "
           "NIC), so the node's NICs add up: 8 GPUs (4/node) then land within 13-33% from 8 MiB up, but 46-123% at "
           "1-4 MiB, where the measured calls carry a fixed cost the one-NIC fit never saw; the measured 16-GPU "
           "(8/node) runs are slower than 4/node (178-492% off) -- that cluster's network does not scale past about "
           "four NICs, which the model cannot know -- and the 4-GPU timings jump non-monotonically between sizes "
           "(64 MiB measured faster than 32 MiB)",
    "AllReduce, A100 one node (PyTorch)": "the NVLink model was fitted to nccl-tests and PyTorch's per-call "
           "overhead to the 2-GPU runs; the 4- and 8-GPU runs are held out and miss the 10% target mostly at "
           "1-4 MiB, where PyTorch's per-call overhead varies more than the one fitted constant (4 GPUs: 2 MiB "
           "measured faster than 1 MiB)",
    "AllReduce, 8 x H100/H200 NVLS, 1-512 KiB": "below the 1 MiB the NVLS fit starts at (the 10% target is for 1 MiB "
           "and up), podsim's NVLS is 10-38% fast up to 256 KiB: NCCL's NVLS pays about 23 us before data moves (its "
           "tuning model's NVLS latency; 25.6 us measured at 1 KiB on H100, 29.9 us on H200) where the fit gives 8 us "
           "of launch and 11 hops of 1 us. The rows are NVLS forced (Azure's script sets NCCL_ALGO=NVLS), so podsim "
           "runs nvls here too; left to choose, NCCL's tuner (podsim's calibrated auto, "
           "`simulator.collectives.nccl_tuner`) runs Ring/LL below about 1.24 MB on 8 H100",
    "Protocols, 4 x H100 ring, 256 MiB (nccl-tests)": "misses the 10% target narrowly: LL is modelled at its wire "
           "efficiency, 4 data bytes in every 8; NCCL reaches 0.43 of Simple's bus bandwidth with it (its tuner "
           "assumes 1/4 to 1/3), so podsim's LL is 18% fast on large arrays -- where LL is never the fastest "
           "protocol; LL128 (120 in 128) is within 3%",
    "AllGather, TPU v5e ICI (the book's profiles)": "the book's only measured TPU collectives: two constants (ICI at "
           "82.9% of its rate, 2.4 us of launch) solved from two profiles, so the fit is exact and nothing is held "
           "out; the book gives no measured DCN figure, so DCN links run at their line rate",
}


def validate() -> dict[str, Any]:
    """Run every case; return the cases and the per-family summary (JSON-ready)."""
    from simulator.frontend.validate_train import (
        FAMILY,
        GPU_FAMILY,
        GPU_NOTE,
        NOTE,
        gpu_size_trends,
        gpu_training_cases,
        training_cases,
    )

    gpu_training = gpu_training_cases()
    cases = (matmul_cases() + nccl_cases() + nvls_cases() + nvls_small_cases() + h100_ring_cases() + tpu_cases()
             + pytorch_cases() + training_cases() + gpu_training)
    NOTES.setdefault(FAMILY, NOTE)
    NOTES.setdefault(GPU_FAMILY, GPU_NOTE)
    NOTES[f"{GPU_FAMILY}: size trend"] = "; ".join(gpu_size_trends(gpu_training))
    from simulator.frontend import (
        validate_decode,  # serving: published single-GPU decode / prefill
        validate_kernels,  # GPU kernels: GEMM, attention, memory-bound
    )

    TARGETS.update(validate_decode.TARGETS)
    cases += validate_decode.decode_cases(Case) + validate_kernels.kernel_cases(Case)
    from simulator.frontend import validate_serving  # serving: published request streams (issue 33)

    TARGETS.update(validate_serving.TARGETS)
    cases += validate_serving.serving_cases(Case)
    return {"cases": [{"family": c.family, "case": c.name, "measured": c.measured, "predicted": c.predicted,
                       "unit": c.unit, "error": c.error, "set": "held out" if c.held_out else "fit"} for c in cases],
            "families": summarize(cases), "target_error": TARGET_ERROR,
            "notes": {**NOTES, **validate_decode.NOTES, **validate_kernels.NOTES, **validate_serving.NOTES}}


def case_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The per-case table `render` prints, as rows (one dict per case: family, case, measured, predicted, unit,
    error (signed, a fraction), set), ready for a notebook (``pandas.DataFrame(case_rows(validate()))``)."""
    keys = ("family", "case", "measured", "predicted", "unit", "error", "set")
    return [{k: c[k] for k in keys} for c in result["cases"]]


def summary_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The per-family summary lines `render` prints, as rows: family, set (fit / held_out), cases, geomean_error,
    worst_error (fractions), meets_target and target_error; sets without cases are left out, as in the text."""
    return [{"family": family, "set": label, "cases": s["cases"], "geomean_error": s["geomean_error"],
             "worst_error": s["worst_error"], "meets_target": s["meets_target"],
             "target_error": s.get("target_error", result["target_error"])}
            for family, sets in result["families"].items() for label, s in sets.items() if s["cases"]]


def render(result: dict[str, Any]) -> str:
    """The validation as a text table, then the per-family summary and notes (the rows of `case_rows` and
    `summary_rows`)."""
    lines = [f"{'family':<40} {'case':<28} {'measured':>10} {'predicted':>10} {'error':>8}  set"]
    for c in case_rows(result):
        lines.append(f"{c['family']:<40} {c['case']:<28} {c['measured']:>10.4g} {c['predicted']:>10.4g} "
                     f"{c['error'] * 100:>+7.1f}%  {c['set']}  ({c['unit']})")
    lines.append("")
    for s in summary_rows(result):
        verdict = "meets" if s["meets_target"] else "MISSES"
        lines.append(f"{s['family']:<40} {s['set']:<8} {s['cases']:>3} cases: geometric-mean error "
                     f"{s['geomean_error'] * 100:.1f}%, worst {s['worst_error'] * 100:.1f}% "
                     f"({verdict} the {s['target_error']:.0%} target)")
    lines += [""] + [f"note ({k}): {v}" for k, v in result["notes"].items()]
    return "\n".join(lines)
