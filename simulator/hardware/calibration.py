"""Calibrated mode: efficiency models fitted to measurements, so podsim predicts what hardware shows.

Ideal peaks stay the default everywhere; a `System` built with ``calibrated=True`` applies the chip's
`Calibration`:

- on GPU presets, matmuls run on the GPU kernel model (`simulator.hardware.gpu_kernels`): tile quantization
  (m, n, k padded to the kernel's tile), wave quantization (tiles over SMs), a fitted peak fraction per dtype,
  the HBM roofline of the operands and a launch per kernel; elsewhere (TPUs) matmuls reach ``peak_fraction``
  of the MXU peak, less where the output tiles do not fill a whole wave of the chip's cores, plus a fixed
  ``launch_s`` per kernel;
- HBM streams at ``hbm_fraction`` of its bandwidth;
- a collective pays ``collective_launch_s`` once, and its links run at
  ``peak_fraction / (1 + (half_size_bytes / V) ** exponent)`` of their rate for an array of V bytes
  (the protocol overheads of small messages fading as they grow, as NCCL's measured bus bandwidth
  does); an algorithm fitted apart (``algorithms``: NVLS, whose switch reduces and multicasts) has its
  own link efficiency and launch.

The constants live in ``simulator/hardware/data/calibration.json``, written by ``scripts/fit_calibration.py``
from the measurement files in ``simulator/hardware/data/calibration`` with their sources and fit errors.
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from simulator.errors import PodsimError
from simulator.hardware.gpu_kernels import gpu_kernels

DATA = Path(__file__).resolve().parent / "data"  #: package data: calibration.json and the measurement files


@dataclass(frozen=True)
class MatmulEfficiency:
    """Achievable matmul rate: ``peak_fraction`` x wave fill, plus ``launch_s`` per kernel."""

    peak_fraction: float
    launch_s: float = 0.0
    tile_m: int = 0  #: output tile rows (0: no wave quantization, e.g. TPUs)
    tile_n: int = 0
    units: int = 0  #: cores the tiles are spread over (SMs)
    #: the GPU kernel model (`simulator.hardware.gpu_kernels.GpuKernels`) GPU presets' matmuls run on; the fields
    #: above are then the square-matmul fit in calibration.json (what the decode calibration takes as its input)
    kernels: Any = field(default=None, compare=False, repr=False)

    def wave_fill(self, m: int, n: int) -> float:
        """Fraction of the last-counted waves' core slots that hold a tile (1 = no quantization loss)."""
        if not self.tile_m or not self.units:
            return 1.0
        tiles = math.ceil(m / self.tile_m) * math.ceil(n / self.tile_n)
        return tiles / (math.ceil(tiles / self.units) * self.units)

    def time_s(self, flops: float, m: int, n: int, peak_flops_per_s: float) -> float:
        """Seconds for ``flops`` of an ``m x n``-output matmul at ``peak_flops_per_s``."""
        return self.launch_s + flops / (peak_flops_per_s * self.peak_fraction * self.wave_fill(m, n))

    def matmul_s(self, m: int, k: int, n: int, dtype: str, peak_flops_per_s: float, padded_flops: float) -> float:
        """Seconds of one ``[m, k] @ [k, n]`` matmul as the calibrated simulator runs it: the GPU kernel model
        (`simulator.hardware.gpu_kernels`: tile and wave quantization, per-dtype peak fraction, HBM roofline,
        launch) where the chip has one, else ``padded_flops`` at the fitted fraction of ``peak_flops_per_s``."""
        if self.kernels is not None:
            return self.kernels.matmul_s(m, k, n, dtype)
        return self.time_s(padded_flops, m, n, peak_flops_per_s)

    def rate(self, dtype: str, peak_flops_per_s: float) -> float:
        """FLOP/s of matmul work given as a FLOP count (no shape to tile): the kernel model's large-tile rate for
        ``dtype`` on a GPU preset, else ``peak_fraction`` of ``peak_flops_per_s``."""
        if self.kernels is not None:
            return self.kernels.peak(dtype) * self.kernels.peak_fraction[dtype]
        return peak_flops_per_s * self.peak_fraction


@dataclass(frozen=True)
class LinkEfficiency:
    """Fraction of a link's rate a collective of V bytes achieves: peak / (1 + (V_half / V) ** p)."""

    peak_fraction: float
    half_size_bytes: float = 0.0
    exponent: float = 1.0

    def fraction(self, nbytes: float) -> float:
        if nbytes <= 0 or not self.half_size_bytes:
            return self.peak_fraction
        return self.peak_fraction / (1 + (self.half_size_bytes / nbytes) ** self.exponent)


@dataclass(frozen=True)
class Calibration:
    """The efficiency models of one chip preset, with where each came from."""

    chip: str
    matmul: MatmulEfficiency | None = None
    hbm_fraction: float = 1.0
    links: dict[str, LinkEfficiency] = field(default_factory=dict)
    collective_launch_s: float = 0.0
    framework_launch_s: float = 0.0  #: a framework's own overhead per collective call (PyTorch); not simulated
    sources: dict[str, str] = field(default_factory=dict)
    #: per collective algorithm (e.g. ``nvls``): its own link efficiencies and launch, where it was fitted apart
    algorithms: dict[str, dict[str, Any]] = field(default_factory=dict)

    def link_fraction(self, kind: str, nbytes: float, algorithm: str | None = None) -> float:
        """Efficiency of links of ``kind`` for a collective of ``nbytes`` run by ``algorithm`` (1 when not
        calibrated); an algorithm fitted apart (NVLS: the switch reduces and multicasts) uses its own."""
        own = self.algorithms.get(algorithm or "", {}).get("links", {})
        model = own.get(kind) or self.links.get(kind)
        return model.fraction(nbytes) if model else 1.0

    def launch_s(self, algorithm: str | None = None) -> float:
        """Fixed seconds a collective run by ``algorithm`` pays before its first byte moves."""
        return self.algorithms.get(algorithm or "", {}).get("collective_launch_s", self.collective_launch_s)


@cache
def _table() -> dict[str, Any]:
    return json.loads((DATA / "calibration.json").read_text())


def calibrated_chips() -> list[str]:
    """Presets that have a calibrated model."""
    return sorted(_table()["chips"])


def get_calibration(chip: str) -> Calibration:
    """The calibration of preset ``chip``; `PodsimError` naming the calibrated presets otherwise."""
    data = _table()["chips"].get(chip)
    if data is None:
        raise PodsimError(f"no calibrated model for chip {chip!r}; calibrated chips: {', '.join(calibrated_chips())}")
    matmul = MatmulEfficiency(**data["matmul"]) if data.get("matmul") else None
    kernels = gpu_kernels(chip)
    if kernels is not None:  # GPU presets: matmuls run on the kernel model (tile and wave quantization per dtype)
        matmul = dataclasses.replace(matmul or MatmulEfficiency(kernels.peak_fraction["bf16"], kernels.launch_s,
                                                                *kernels.tiles[0], kernels.sms), kernels=kernels)
    links = {kind: LinkEfficiency(**v) for kind, v in data.get("links", {}).items()}
    algorithms = {name: {**v, "links": {kind: LinkEfficiency(**e) for kind, e in v.get("links", {}).items()}}
                  for name, v in data.get("algorithms", {}).items()}
    return Calibration(chip, matmul, data.get("hbm_fraction", 1.0), links, data.get("collective_launch_s", 0.0),
                       data.get("framework_launch_s", 0.0), data.get("sources", {}), algorithms)


def fit_report() -> dict[str, Any]:
    """The fit errors recorded by ``scripts/fit_calibration.py``."""
    return _table().get("fit", {})
