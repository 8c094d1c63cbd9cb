"""The calibrated whole-training-step model's constants, per TPU generation, with their sources.

``simulator/hardware/data/train_calibration.json`` is written by ``scripts/fit_train_calibration.py``
from ``data/calibration/tpu_training_mfu.csv`` (published MFU of real TPU runs). It holds the few
constants the step model (`simulator.workloads.plans.calibrated`) fits -- MXU efficiency and its
shape dependence, flash attention's share of the MXU peak, what overlapped collectives still cost,
DCN efficiency and per-ring-step cost, a fixed per-step overhead -- plus the fit errors, and the
chips the model is calibrated for. HBM and ICI efficiencies come from the chip's `Calibration`
(``calibration.json``).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, fields
from functools import cache
from typing import Any

from simulator.errors import PodsimError
from simulator.hardware.calibration import DATA

TRAIN_JSON = DATA / "train_calibration.json"  #: the fitted constants and fit errors


@dataclass(frozen=True)
class StepConstants:
    """Efficiencies of one whole training step (1 = ideal; seconds are added costs)."""

    mxu_fraction: float = 1.0  #: share of the MXU peak a large, aligned matmul reaches
    mxu_half_dim: float = 0.0  #: the smaller matmul width (k or n) at which a matmul reaches half its peak share
    flash_fraction: float = 1.0  #: share of the MXU peak flash attention's block matmuls reach
    hbm_fraction: float = 1.0  #: share of HBM bandwidth streaming work reaches (from calibration.json)
    ici_fraction: float = 1.0  #: share of ICI link rate collectives reach (from calibration.json)
    overlap_interference: float = 0.0  #: share of an overlapped collective's time compute still pays (HBM contention)
    dcn_fraction: float = 1.0  #: share of the per-chip DCN rate the cross-slice gradient AllReduce reaches
    dcn_step_s: float = 0.0  #: fixed seconds per step of the cross-slice ring (synchronisation across slices)
    step_overhead_s: float = 0.0  #: fixed seconds per training step (host dispatch, metrics)


IDEAL = StepConstants()  #: every efficiency 1, no fixed costs


@dataclass(frozen=True)
class GpuStepConstants:
    """What a GPU training step pays beyond its kernels (`simulator.workloads.plans.calibrated_gpu`).

    ``compute_fraction`` and ``dispatch_s`` are the training framework's own (its kernels' generation -- cuBLAS,
    fused kernels --, its host overhead), as serving engines have their own factors; the rest are shared."""

    #: compute seconds an overlapped collective costs per second beside the compute, per unit of the SM share its
    #: kernels hold (`simulator.workloads.plans.calibrated_gpu.collective_sm_share`): 1 = exactly the SMs it takes
    sm_interference: float = 0.0
    dispatch_s: float = 0.0  #: host seconds to launch one kernel (eager PyTorch): a kernel takes at least this
    ib_fraction: float = 1.0  #: share of the NICs' line rate an NCCL ring across nodes reaches
    step_overhead_s: float = 0.0  #: fixed seconds per training step (optimizer launch, data loader, logging)
    compute_fraction: float = 1.0  #: share of the kernel model's throughput the framework's kernels reach
    framework: str = ""  #: whose constants these are ("" for the bound)
    attention: str = "flash"  #: the framework's attention kernel: flash, flash2 (FlashAttention-2) or unfused


GPU_IDEAL = GpuStepConstants()  #: nothing beyond the kernels


@cache
def _table() -> dict[str, Any]:
    return json.loads(TRAIN_JSON.read_text()) if TRAIN_JSON.exists() else {"chips": [], "constants": {}}


def train_calibrated_chips() -> list[str]:
    """Chip presets the calibrated training step covers."""
    return list(_table()["chips"]) + list(_table().get("gpu", {}).get("chips", []))


def step_constants(chip: str) -> StepConstants:
    """The fitted constants for preset ``chip``, with HBM and ICI efficiencies from its `Calibration`;
    `PodsimError` naming the covered chips otherwise."""
    from simulator.hardware.calibration import get_calibration

    table = _table()
    if chip not in table["chips"]:
        raise PodsimError(f"no calibrated training-step model for chip {chip!r} (no published training runs to fit); "
                          f"calibrated chips: {', '.join(table['chips']) or 'none'} -- or drop --calibrated for the "
                          "ideal step")
    cal = get_calibration(chip)
    known = {f.name for f in fields(StepConstants)}
    values = {k: float(v) for k, v in table["constants"].items() if k in known}
    ici = cal.links.get("ici")
    return StepConstants(**{**values, "hbm_fraction": cal.hbm_fraction,
                            "ici_fraction": ici.peak_fraction if ici else 1.0})


DEFAULT_FRAMEWORK = "megatron-core"  #: the training framework a calibrated GPU step assumes when none is named


def gpu_frameworks() -> list[str]:
    """Training frameworks with GPU step constants (fitted, or named with the fitted framework they take)."""
    table = _table().get("gpu", {})
    return sorted({*table.get("frameworks", {}), *table.get("aliases", {})})


def gpu_step_constants(chip: str, framework: str | None = None) -> GpuStepConstants:
    """The GPU step constants of ``framework`` (None: `DEFAULT_FRAMEWORK`); `PodsimError` for a chip the GPU step
    model does not cover or a framework it does not know, naming the valid ones."""
    table = _table().get("gpu", {})
    if chip not in table.get("chips", []):
        raise PodsimError(f"no calibrated GPU training-step model for chip {chip!r}; calibrated GPU chips: "
                          f"{', '.join(table.get('chips', [])) or 'none'}")
    name = framework or DEFAULT_FRAMEWORK
    own = table.get("aliases", {}).get(name, name)
    if own not in table.get("frameworks", {}):
        raise PodsimError(f"--framework {name!r}: no calibrated training framework of that name; valid: "
                          f"{', '.join(gpu_frameworks())}")
    known = {f.name for f in fields(GpuStepConstants)}
    values = {**table["constants"], **table["frameworks"][own]}
    given: dict[str, Any] = {k: (v if isinstance(v, str) else float(v)) for k, v in values.items() if k in known}
    return GpuStepConstants(**given, framework=name)


def gpu_fit_summary() -> dict[str, Any]:
    """The GPU step's fit: chips, axes and features the fit rows used, sources and errors."""
    return dict(_table().get("gpu", {}))


def train_fit_report() -> dict[str, Any]:
    """Sources and fit errors recorded by ``scripts/fit_train_calibration.py``."""
    table = _table()
    return {"sources": table.get("sources", {}), "fit": table.get("fit", {})}
