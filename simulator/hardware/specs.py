"""Hardware facts: `ChipSpec`, the named presets, and user chips read from TOML files.

All fields are SI with the unit in the name (bytes, seconds, bytes/s, FLOP/s). Presets come from
"How To Scale Your Model" (jax-ml/scaling-book, chapters *tpus* and *gpus*) and the vendor figures it
quotes; each preset's ``source`` says where its numbers come from and which ones are estimates.
Capacities quoted in "GB" are read as GiB: HBM stacks and VMEM come in binary sizes.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simulator.errors import QuantityError, SpecError
from simulator.hardware.documents import read_document, table
from simulator.units import check_int, check_number, parse_quantity, show

GiB = 2.0**30
MiB = 2.0**20

#: Bytes per element of each dtype podsim knows.
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp8": 1, "int8": 1}
#: Dtypes a model may STORE its weights or KV cache in (`podsim model --weight-dtype / --kv-dtype`): the compute
#: dtypes and int4, half a byte an element (the book's applied-inference int4 rows). int4 is storage only: its
#: matmuls run at the bf16 (or --compute-dtype) rate, so it is not a compute dtype of `DTYPE_BYTES`.
STORAGE_DTYPE_BYTES: dict[str, float] = {**DTYPE_BYTES, "int4": 0.5}

#: Wraparound rules: which axes of a slice are rings (REFERENCE.md, "Wraparound").
WRAPAROUND_RULES = {
    "length16": "an axis wraps only when its length is 16 (tpu-v5e, tpu-v6e; 2D, at most 16x16)",
    "multiple4": "an axis wraps when its length is a multiple of 4 (tpu-v4, tpu-v5p, tpu7x; 3D cubes)",
    "switch": "no torus: chips hang off a non-blocking switch (NVLink GPUs)",
}

_FLOAT_FIELDS = (
    "peak_bf16_flops_per_s", "peak_int8_flops_per_s", "vpu_flops_per_s",
    "hbm_capacity_bytes", "hbm_bandwidth_bytes_per_s", "vmem_capacity_bytes", "vmem_bandwidth_bytes_per_s",
    "ici_bandwidth_bytes_per_s", "hop_latency_s", "pcie_bandwidth_bytes_per_s", "dcn_bandwidth_bytes_per_s",
)
_INT_FIELDS = ("mxu_dim", "mxu_count", "tensor_cores", "ici_links", "torus_dims")

#: The range every numeric field must lie in: (least, most, unit). Wide enough for any chip built or
#: planned (and for tests that shrink VMEM to one tile), narrow enough that 1e300 FLOP/s or 1e-300 B/s
#: -- numbers that would print as 1e300 or inf -- are refused with the range in the message.
PLAUSIBLE: dict[str, tuple[float, float, str]] = {
    "peak_bf16_flops_per_s": (1e6, 1e18, "FLOP/s"), "peak_int8_flops_per_s": (1e6, 1e18, "FLOP/s"),
    "vpu_flops_per_s": (1e6, 1e18, "FLOP/s"),
    "hbm_capacity_bytes": (2.0**10, 2.0**50, "bytes"), "hbm_bandwidth_bytes_per_s": (1e6, 1e15, "B/s"),
    "vmem_capacity_bytes": (1.0, 2.0**40, "bytes"), "vmem_bandwidth_bytes_per_s": (1e6, 1e16, "B/s"),
    "ici_bandwidth_bytes_per_s": (1e6, 1e14, "B/s"), "hop_latency_s": (0.0, 1e-2, "s"),
    "pcie_bandwidth_bytes_per_s": (1e6, 1e13, "B/s"), "dcn_bandwidth_bytes_per_s": (1e6, 1e13, "B/s"),
    "mxu_dim": (1, 4096, ""), "mxu_count": (1, 2**20, ""), "tensor_cores": (1, 2**20, ""),
    "ici_links": (1, 1024, ""), "torus_dims": (0, 6, ""), "sublanes": (1, 4096, ""),
}
_UNIT_KIND = {
    "flops_per_s": "flops", "bytes_per_s": "bandwidth", "bytes": "bytes", "_s": "time",
}


@dataclass(frozen=True, kw_only=True)
class ChipSpec:
    """One accelerator chip, dense (no sparsity), SI units.

    The MXU multiplies ``[m, k] x [k, n]`` with k and n padded to ``mxu_dim`` and m padded to
    ``sublanes`` rows; the ``mxu_count`` MXUs act together at ``peak_*_flops_per_s``.
    """

    name: str
    peak_bf16_flops_per_s: float  #: MXU peak for bf16 operands
    peak_int8_flops_per_s: float  #: MXU peak for int8 (TPU) or fp8 (GPU) operands
    vpu_flops_per_s: float  #: vector unit (TPU VPU, GPU CUDA cores) FLOP/s
    hbm_capacity_bytes: float
    hbm_bandwidth_bytes_per_s: float
    vmem_capacity_bytes: float  #: TPU VMEM; GPU shared memory summed over SMs
    vmem_bandwidth_bytes_per_s: float
    mxu_dim: int  #: systolic array side (128, or 256 on v6e); GPU tensor-core tile side
    mxu_count: int
    tensor_cores: int  #: TPU TensorCores sharing HBM; GPU SMs
    ici_bandwidth_bytes_per_s: float  #: one-way bandwidth of one ICI / NVLink link
    ici_links: int  #: links per chip (4 on 2D tori, 6 on 3D, NVLink links on GPUs)
    hop_latency_s: float  #: per-hop link latency
    pcie_bandwidth_bytes_per_s: float  #: host link, one way
    dcn_bandwidth_bytes_per_s: float  #: data-centre network egress per chip (InfiniBand NIC on GPUs)
    wraparound: str  #: one of WRAPAROUND_RULES
    torus_dims: int  #: 2 or 3 for TPUs, 0 for switch-connected GPUs
    sublanes: int = 8  #: row granularity of the MXU's streamed operand
    source: str = field(default="user", compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise SpecError(f"name={show(self.name)} must be a non-empty string")
        where = f"chip {self.name!r}: "
        for name, (low, high, unit) in PLAUSIBLE.items():
            if unit:
                check_number(getattr(self, name), name=name, minimum=low, maximum=high, unit=unit, error=SpecError,
                             where=where)
            else:
                check_int(getattr(self, name), name=name, minimum=int(low), maximum=int(high), error=SpecError,
                          where=where)
        if self.wraparound not in WRAPAROUND_RULES:
            raise SpecError(f"chip {self.name!r}: wraparound={show(self.wraparound)}; valid rules: "
                            + ", ".join(WRAPAROUND_RULES))

    def peak_flops_per_s(self, dtype: str = "bf16") -> float:
        """MXU peak FLOP/s for ``dtype`` (bf16 or fp32 use the bf16 rate; int8 and fp8 the 8-bit rate)."""
        check_dtype(dtype)
        return self.peak_int8_flops_per_s if DTYPE_BYTES[dtype] == 1 else self.peak_bf16_flops_per_s

    @property
    def ici_egress_bytes_per_s(self) -> float:
        """All links together, one way (the NVLink egress figure on GPUs)."""
        return self.ici_bandwidth_bytes_per_s * self.ici_links

    def replace(self, **changes: Any) -> ChipSpec:
        """A copy with ``changes`` applied (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Every field as a plain dict (JSON-ready)."""
        return dataclasses.asdict(self)


def check_dtype(dtype: str) -> int:
    """Bytes per element of ``dtype``; `SpecError` listing the valid dtypes otherwise."""
    if not isinstance(dtype, str) or dtype not in DTYPE_BYTES:
        raise SpecError(f"dtype={dtype!r}; valid dtypes: {', '.join(DTYPE_BYTES)}")
    return DTYPE_BYTES[dtype]


def check_storage_dtype(dtype: str) -> float:
    """Bytes per element of a weight or KV-cache storage ``dtype`` (`STORAGE_DTYPE_BYTES`: int4 is 0.5);
    `SpecError` listing them otherwise."""
    if not isinstance(dtype, str) or dtype not in STORAGE_DTYPE_BYTES:
        raise SpecError(f"dtype={dtype!r}; valid weight and KV-cache dtypes: {', '.join(STORAGE_DTYPE_BYTES)}")
    return STORAGE_DTYPE_BYTES[dtype]


_BOOK = "scaling-book ch. tpus (hardware table)"
_GPU = "scaling-book ch. gpus; NVIDIA datasheet"


def _tpu(name: str, bf16: float, int8: float, hbm_gib: float, hbm_bw: float, ici: float, links: int,
         mxu_dim: int, mxu_count: int, cores: int, pcie: float, dcn: float, rule: str,
         vmem_mib: float = 128, vpu: float | None = None, note: str = "") -> ChipSpec:
    return ChipSpec(
        name=name, peak_bf16_flops_per_s=bf16, peak_int8_flops_per_s=int8,
        vpu_flops_per_s=vpu if vpu is not None else bf16 / 30,
        hbm_capacity_bytes=hbm_gib * GiB, hbm_bandwidth_bytes_per_s=hbm_bw,
        vmem_capacity_bytes=vmem_mib * MiB, vmem_bandwidth_bytes_per_s=22 * hbm_bw,
        mxu_dim=mxu_dim, mxu_count=mxu_count, tensor_cores=cores,
        ici_bandwidth_bytes_per_s=ici, ici_links=links, hop_latency_s=1e-6,
        pcie_bandwidth_bytes_per_s=pcie, dcn_bandwidth_bytes_per_s=dcn,
        wraparound=rule, torus_dims=3 if rule == "multiple4" else 2,
        source=f"{_BOOK}; VMEM bandwidth = 22x HBM and hop latency 1 us (ch. tpus){note}",
    )


def _gpu(name: str, bf16: float, fp8: float, hbm_gib: float, hbm_bw: float, link_bw: float,
         sms: int, fp32: float, smem_bw: float) -> ChipSpec:
    return ChipSpec(
        name=name, peak_bf16_flops_per_s=bf16, peak_int8_flops_per_s=fp8, vpu_flops_per_s=fp32,
        hbm_capacity_bytes=hbm_gib * GiB, hbm_bandwidth_bytes_per_s=hbm_bw,
        vmem_capacity_bytes=sms * 256e3, vmem_bandwidth_bytes_per_s=smem_bw,
        mxu_dim=16, mxu_count=4 * sms, tensor_cores=sms,
        ici_bandwidth_bytes_per_s=link_bw, ici_links=18, hop_latency_s=1e-6,
        pcie_bandwidth_bytes_per_s=6.4e10, dcn_bandwidth_bytes_per_s=5e10,
        wraparound="switch", torus_dims=0,
        source=f"{_GPU}; 18 NVLink links one way; 256 kB SMEM per SM; IB NDR 50 GB/s per GPU; "
               "PCIe 5.0 x16; SMEM bandwidth and CUDA-core FP32 rate are estimates",
    )


# Every number below, with its source and which ones are estimates: simulator/hardware/data/README.md
PRESETS: dict[str, ChipSpec] = {
    c.name: c
    for c in (
        _tpu("tpu-v4", 2.75e14, 2.75e14, 32, 1.2e12, 4.5e10, 6, 128, 8, 2, 1.6e10, 6.25e9, "multiple4",
             vmem_mib=32, note="; VMEM 32 MiB and DCN (as v5p) are estimates"),
        _tpu("tpu-v5e", 1.97e14, 3.94e14, 16, 8.2e11, 4.5e10, 4, 128, 4, 1, 1.6e10, 3.125e9, "length16",
             note="; HBM 8.2e11 B/s (older text 8.1e11); VPU = MXU/30"),
        _tpu("tpu-v5p", 4.59e14, 9.18e14, 96, 2.8e12, 9.0e10, 6, 128, 8, 2, 1.6e10, 6.25e9, "multiple4",
             vpu=1.4e13, note="; VPU 7e12 per core x 2 cores"),
        _tpu("tpu-v6e", 9.2e14, 1.84e15, 32, 1.6e12, 9.0e10, 4, 256, 2, 1, 3.2e10, 1.25e10, "length16",
             note="; VMEM 128 MiB and 2 MXUs are estimates"),
        _tpu("tpu7x", 2.3e15, 4.61e15, 192, 7.4e12, 9.0e10, 6, 256, 4, 2, 3.2e10, 1.25e10, "multiple4",
             note="; VMEM, MXU count, PCIe and DCN are estimates"),
        _gpu("h100", 9.9e14, 2.0e15, 80, 3.35e12, 2.5e10, 132, 6.7e13, 3.3e13),
        _gpu("h200", 9.9e14, 2.0e15, 141, 4.8e12, 2.5e10, 132, 6.7e13, 3.3e13),
        _gpu("b200", 2.3e15, 4.5e15, 192, 8.0e12, 5.0e10, 148, 8.0e13, 4.0e13),
        ChipSpec(  # for the calibration data (8-GPU A100 nodes); not in REFERENCE.md's table
            name="a100", peak_bf16_flops_per_s=3.12e14, peak_int8_flops_per_s=6.24e14, vpu_flops_per_s=1.95e13,
            hbm_capacity_bytes=80 * GiB, hbm_bandwidth_bytes_per_s=2.039e12, vmem_capacity_bytes=108 * 164e3,
            vmem_bandwidth_bytes_per_s=1.9e13, mxu_dim=16, mxu_count=432, tensor_cores=108,
            ici_bandwidth_bytes_per_s=2.5e10, ici_links=12, hop_latency_s=1e-6, pcie_bandwidth_bytes_per_s=3.2e10,
            dcn_bandwidth_bytes_per_s=2.5e10, wraparound="switch", torus_dims=0,
            source="NVIDIA A100 SXM4 80GB datasheet: 312 TFLOP/s bf16, 2.039 TB/s HBM2e, NVLink 3 (12 links x 25 GB/s "
                   "one way), IB HDR 200 Gb/s per GPU, PCIe 4.0 x16; SMEM bandwidth is an estimate"),
    )
}


def get_chip(name: str) -> ChipSpec:
    """The preset called ``name``; `SpecError` listing the valid names otherwise."""
    if not isinstance(name, str) or name not in PRESETS:
        raise SpecError(f"unknown chip {name!r}; valid chips: {', '.join(PRESETS)}")
    return PRESETS[name]


def _field_kind(name: str) -> str:
    for suffix, kind in _UNIT_KIND.items():
        if name.endswith(suffix):
            return kind
    return "number"


def _coerce(name: str, value: Any, origin: str) -> Any:
    if name in ("name", "wraparound", "source"):
        if not isinstance(value, str):
            raise SpecError(f"{origin}: {name}={show(value)} must be a string")
        return value
    if name in _INT_FIELDS + ("sublanes",):
        return value  # type and range are checked by ChipSpec itself
    try:
        return parse_quantity(value, _field_kind(name), name=name)
    except QuantityError as err:
        raise SpecError(f"{origin}: {err}") from None


def chip_from_dict(data: dict[str, Any], origin: str = "chip") -> ChipSpec:
    """Build a `ChipSpec` from a dict of field values (numbers or unit strings such as "16GiB").

    A ``base`` key names a preset whose fields fill in whatever ``data`` leaves out.
    """
    valid = [f.name for f in dataclasses.fields(ChipSpec)]
    unknown = sorted(set(data) - set(valid) - {"base"})
    if unknown:
        raise SpecError(f"{origin}: unknown field(s) {', '.join(unknown)}; valid fields: {', '.join(valid)}")
    values = get_chip(data["base"]).to_dict() if "base" in data else {}
    values["source"] = f"{origin} (based on {data['base']})" if "base" in data else origin
    values.update({k: _coerce(k, v, origin) for k, v in data.items() if k != "base"})
    required = [f.name for f in dataclasses.fields(ChipSpec) if f.default is dataclasses.MISSING]
    missing = [k for k in required if k not in values]
    if missing:
        raise SpecError(f"{origin}: missing field(s) {', '.join(missing)} (or give base = a preset name)")
    try:
        return ChipSpec(**values)
    except SpecError as err:  # say which file the out-of-range value came from
        raise SpecError(f"{origin}: {err}") from None


def load_chip_file(path: str | Path) -> ChipSpec:
    """Read a user chip from a TOML file: top-level keys are `ChipSpec` fields, or a [chip] table."""
    data = read_document(path, "TOML", "chip file", SpecError)
    data = table(data, "chip", f"chip file {Path(path).name}", SpecError)
    return chip_from_dict(data, origin=f"chip file {Path(path).name}")
