"""Calibrated serving: what the real decode and prefill kernels of one accelerator reach.

A served model's step at small batch is set by how much of HBM bandwidth the real kernels reach (well
below a streaming copy) plus per-layer launch and synchronisation costs; prefill by how much of the
matmul peak its large GEMMs reach. `DecodeCalibration` holds those factors for one chip preset:

- ``hbm_fraction``: fraction of the spec HBM bandwidth decode's weight-streaming kernels reach at batch 1;
- ``hbm_fraction_8bit``: per engine, the fraction its 8-bit weight kernels reach where they differ from its bf16
  ones (gpt-fast's int8 weight-only GEMVs convert each int8 weight to bf16 and scale it inside the kernel, and
  its README's one-GPU rows reach less of HBM in int8 than in bf16); None: ``hbm_fraction`` (an engine with
  native 8-bit kernels, or none fitted);
- ``batch_slowdown``: weight streaming slows by ``1 + batch_slowdown * log2(m)`` for ``m`` rows of a step's
  small-m matmuls (skinny GEMMs fill their tiles with fewer rows than they are built for), up to 64 rows;
- ``attention_fraction``: KV-cache streaming relative to ``hbm_fraction`` (1: as fast as weights);
- ``layer_overhead_s``: seconds per layer per step for kernel launches and synchronisation, and for each kernel's
  fixed start and drain (filling the memory pipeline, the last wave of blocks): a weight matrix of ``b`` bytes
  streams at ``b / (b + B_half)`` of the kernel's rate with ``B_half`` its share of this time at that rate, so
  the small per-GPU matrices of a tensor-parallel step reach less of HBM than one GPU's whole ones;
- ``matmul_fraction``: fraction of the MXU / tensor-core peak prefill's matmuls reach, per compute dtype
  (``bf16``, ``int8`` for 8-bit weights);
- ``allreduce_sync_s``: per engine, seconds each tensor-parallel AllReduce pays per doubling of the GPUs
  on top of its algorithm's latency (launch, waiting for the slowest GPU: `simulator.workloads.served_tp`):
  tensorrt-llm's fitted to its multi-GPU fit rows; 0 for an engine whose custom kernel has its own fit (the
  kernel's measured time holds its launch and barriers); ``sync_fitted_to`` names whose data fitted it (an
  engine priced with another's value is named uncalibrated on a mesh);
- ``allreduce_kernel``: per engine with custom AllReduce kernels, their fitted constants (latency, two-shot
  stage, NVLink efficiency, the chip that fitted them: `simulator.workloads.served_tp.AllReduceKernel`), fitted
  to the kernel's published microbenchmarks (``allreduce_kernels.csv``), not to any decode row;
- ``borrowed_from``: the preset whose factors a chip without its own fit rows takes (H200: H100's), else None.

The serving software sets the first and the fourth as much as the chip does (vLLM's decode reaches a
larger fraction of HBM than 2023's NeMo + TensorRT-LLM stack, whose per-layer cost is larger too), so
``engines`` holds each fitted engine's own ``hbm_fraction`` and ``layer_overhead_s`` (and ``batch_slowdown``
where its own measurements identify it: vLLM's continuous batching slows far less with batch than NeMo's
static batches; the others take the chip's); ``DEFAULT_ENGINE``
is the one used when none is named.

The constants live in ``simulator/hardware/data/decode_calibration.json``, written by
``scripts/fit_decode.py`` from ``simulator/hardware/data/calibration/decode_latency.csv`` (published
single- and multi-GPU measurements, each row marked fit or held out).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any

from simulator.errors import PodsimError
from simulator.hardware.calibration import DATA

DEFAULT_ENGINE = "vllm"  #: the serving engine a calibrated step assumes when none is named
MAX_SLOW_ROWS = 64  #: rows past which a step's matmuls stop slowing weight streaming (a whole tile's rows)


@dataclass(frozen=True)
class DecodeCalibration:
    """Fitted serving factors of one chip preset, with where each came from."""

    chip: str
    hbm_fraction: float
    layer_overhead_s: float
    batch_slowdown: float = 0.0
    attention_fraction: float = 1.0
    matmul_fraction: dict[str, float] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    engine: str = DEFAULT_ENGINE
    #: per serving engine: its own ``hbm_fraction``, ``layer_overhead_s``, ``batch_slowdown`` and, where fitted,
    #: ``allreduce_sync_s``
    engines: dict[str, dict[str, Any]] = field(default_factory=dict)
    allreduce_sync_s: float | None = None  #: seconds per tensor-parallel AllReduce per doubling of GPUs
    sync_fitted_to: str | None = None  #: the engine whose multi-GPU rows fitted ``allreduce_sync_s``
    #: the engine's custom AllReduce kernel constants (``served_tp.AllReduceKernel`` fields), None: first principles
    allreduce_kernel: dict[str, Any] | None = None
    borrowed_from: str | None = None  #: the preset whose factors these are (no fit rows of this chip)
    #: the engine's 8-bit weight kernels' HBM fraction (int8 weight-only: dequantized in the kernel), None: as bf16's
    hbm_fraction_8bit: float | None = None

    def for_engine(self, engine: str | None) -> DecodeCalibration:
        """These factors as serving engine ``engine`` reaches them (None: `DEFAULT_ENGINE`)."""
        name = engine or DEFAULT_ENGINE
        if not self.engines:
            return self
        if name not in self.engines:
            raise PodsimError(f"no decode calibration for engine {name!r} on chip {self.chip!r}; engines: "
                              f"{', '.join(sorted(self.engines))}")
        return replace(self, engine=name, **{"allreduce_sync_s": None, "sync_fitted_to": None, "allreduce_kernel": None,
                                             "hbm_fraction_8bit": None, **self.engines[name]})

    def weight_fraction(self, weight_elem_bytes: float) -> float:
        """Fraction of the spec HBM bandwidth the engine's decode kernels stream weights of ``weight_elem_bytes``
        bytes an element at (``hbm_fraction_8bit`` for 8-bit weights where fitted, else ``hbm_fraction``)."""
        if weight_elem_bytes == 1 and self.hbm_fraction_8bit is not None:
            return self.hbm_fraction_8bit
        return self.hbm_fraction

    def weight_slowdown(self, rows: int) -> float:
        """Factor (>= 1) by which streaming the weights slows for a step whose matmuls have ``rows`` rows."""
        return 1.0 + self.batch_slowdown * math.log2(min(max(rows, 1), MAX_SLOW_ROWS))

    def matmul(self, dtype: str) -> float:
        """Fraction of the peak prefill's matmuls reach for compute dtype ``dtype`` (``bf16`` or ``int8``)."""
        return self.matmul_fraction.get(dtype, self.matmul_fraction.get("bf16", 1.0))


@cache
def _table() -> dict[str, Any]:
    return json.loads((DATA / "decode_calibration.json").read_text())


def decode_calibrated_chips() -> list[str]:
    """Presets with a fitted serving (decode / prefill) calibration."""
    return sorted(_table()["chips"])


def get_decode_calibration(chip: str, engine: str | None = None) -> DecodeCalibration:
    """The serving calibration of preset ``chip`` as ``engine`` runs it (None: `DEFAULT_ENGINE`); `PodsimError`
    naming the chips (or engines) that have one otherwise."""
    data = _table()["chips"].get(chip)
    if data is None:
        raise PodsimError(f"no calibrated decode/prefill model for chip {chip!r} (no published decode "
                          f"measurements); chips with one: {', '.join(decode_calibrated_chips())}")
    # an engine without its own batch slowdown takes the chip's, whichever engine was picked before
    engines = {k: {"batch_slowdown": data.get("batch_slowdown", 0.0), **v} for k, v in data.get("engines", {}).items()}
    base = engines.get(DEFAULT_ENGINE, {})
    return DecodeCalibration(chip, base.get("hbm_fraction", data.get("hbm_fraction", 1.0)),
                             base.get("layer_overhead_s", data.get("layer_overhead_s", 0.0)),
                             data.get("batch_slowdown", 0.0), data.get("attention_fraction", 1.0),
                             dict(data.get("matmul_fraction", {})), dict(data.get("sources", {})),
                             DEFAULT_ENGINE, engines, None, None, None,
                             data.get("borrowed_from")).for_engine(engine)


def decode_fit_report() -> dict[str, Any]:
    """What ``scripts/fit_decode.py`` recorded: fitted rows, held-out rows and their errors."""
    return _table().get("fit", {})
