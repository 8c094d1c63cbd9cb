"""Descriptive facts of the chip presets that the simulator does not run on, but that the book's worked
questions ask about: a TPU pod and its hosts, a GPU's SMs, CUDA cores and clocks, a GPU node.

The numbers come from "How To Scale Your Model" (jax-ml/scaling-book): ch. *tpus* (question 2: "each
host is a 4x2 slice" on v5e, "2x2x1" on v5p; pods of 16x16 and 16x20x28) and ch. *gpus* ("Summary of GPU
specs": SMs, base/boost clocks; 4 subpartitions of 32 fp32 CUDA cores per SM; 8 GPUs and 4 NVSwitches
per H100 node, 400 GB/s node egress). `pod_summary` and `gpu_summary` derive the figures the questions
want (hosts, TensorCores, pod FLOP/s and HBM -- in GiB as the presets read a datasheet's GB, and in decimal
GB as the book multiplies them; CUDA cores, their FLOP/s at 1 op per cycle as the book
counts them and with an FMA as 2, as the datasheet does; FLOPs per Tensor Core per cycle). Every figure
here is a bound (a peak), like the presets'. A user chip (``--chip-file``) has no facts: ``None``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simulator.hardware.specs import ChipSpec

GPUS_PER_NODE = 8  #: an HGX / DGX node (book, gpus: "Sets of 8 GPUs called nodes")


@dataclass(frozen=True, kw_only=True)
class PodFacts:
    """A TPU generation's largest pod and its hosts (book, tpus, question 2)."""

    pod_shape: tuple[int, ...]  #: chips along each torus axis of a full pod
    host_shape: tuple[int, ...]  #: the slice of chips one CPU host drives over PCIe

    @property
    def chips_per_pod(self) -> int:
        return _prod(self.pod_shape)

    @property
    def chips_per_host(self) -> int:
        return _prod(self.host_shape)


@dataclass(frozen=True, kw_only=True)
class GpuFacts:
    """A GPU's SMs, CUDA cores and clocks, and its node (book, gpus, "Summary of GPU specs")."""

    sms: int
    fp32_cores_per_sm: int = 128  #: 4 subpartitions x 32 fp32 CUDA cores
    subpartitions_per_sm: int = 4  #: one Tensor Core each
    base_clock_hz: float
    boost_clock_hz: float
    tensor_clock_hz: float  #: the clock the book divides the bf16 peak by (H100: 1.76 GHz; B200: 1.86 GHz)
    gpus_per_node: int = GPUS_PER_NODE
    nvswitches_per_node: int = 4
    clock_note: str = ""


def _prod(xs: tuple[int, ...]) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


POD_FACTS: dict[str, PodFacts] = {
    "tpu-v5e": PodFacts(pod_shape=(16, 16), host_shape=(4, 2)),
    "tpu-v5p": PodFacts(pod_shape=(16, 20, 28), host_shape=(2, 2, 1)),
    "tpu-v4": PodFacts(pod_shape=(16, 16, 16), host_shape=(2, 2, 1)),
    "tpu-v6e": PodFacts(pod_shape=(16, 16), host_shape=(4, 2)),
}

GPU_FACTS: dict[str, GpuFacts] = {
    "h100": GpuFacts(sms=132, base_clock_hz=1.59e9, boost_clock_hz=1.98e9, tensor_clock_hz=1.76e9),
    "h200": GpuFacts(sms=132, base_clock_hz=1.59e9, boost_clock_hz=1.98e9, tensor_clock_hz=1.76e9),
    "b200": GpuFacts(sms=148, base_clock_hz=1.86e9, boost_clock_hz=2.1e9, tensor_clock_hz=1.86e9, nvswitches_per_node=2,
                     clock_note="the book gives no B200 clock (base 1.86 GHz here is an estimate): boost 2.1 GHz is "
                                "its question 6 estimate (80 TFLOP/s "
                                "of fp32 FMAs / 37,888 FLOPs per cycle), 1.86 GHz its Tensor Core footnote's"),
    "a100": GpuFacts(sms=108, base_clock_hz=1.10e9, boost_clock_hz=1.41e9, tensor_clock_hz=1.41e9,
                     nvswitches_per_node=6),
}


def nominal_hbm_bytes(chip: ChipSpec) -> float:
    """The chip's HBM as the book counts it, a datasheet's "GB" in decimal bytes (16 GB = 16e9 on v5e, 96e9 on
    v5p, 80e9 on H100): the presets read "GB" as GiB (`simulator.hardware.specs`), the book multiplies by 1e9."""
    return chip.hbm_capacity_bytes / 2**30 * 1e9


def pod_summary(chip: ChipSpec) -> dict[str, Any] | None:
    """A full pod of ``chip``: chips, hosts, TensorCores, MXUs, FLOP/s, HBM, PCIe and DCN per host
    (bounds: peaks summed); None for a chip with no pod facts (GPUs, user chips)."""
    facts = POD_FACTS.get(chip.name)
    if facts is None:
        return None
    n, per_host = facts.chips_per_pod, facts.chips_per_host
    return {"pod_shape": "x".join(map(str, facts.pod_shape)), "chips_per_pod": n, "host_shape":
            "x".join(map(str, facts.host_shape)), "chips_per_host": per_host, "hosts_per_pod": n // per_host,
            "tensor_cores_per_pod": n * chip.tensor_cores, "mxus_per_pod": n * chip.mxu_count,
            "pod_peak_bf16_flops_per_s": n * chip.peak_bf16_flops_per_s,
            "pod_peak_int8_flops_per_s": n * chip.peak_int8_flops_per_s,
            "pod_hbm_capacity_bytes": n * chip.hbm_capacity_bytes,
            "pod_hbm_capacity_bytes_book": n * nominal_hbm_bytes(chip),  # the book's chips x "16 GB" (decimal)
            "pcie_bytes_per_s_per_host": per_host * chip.pcie_bandwidth_bytes_per_s,
            "dcn_bytes_per_s_per_host": per_host * chip.dcn_bandwidth_bytes_per_s}


def core_summary(chip: ChipSpec) -> dict[str, Any]:
    """Per TensorCore (TPU) or SM (GPU) and per MXU (Tensor Core on a GPU): peak bf16 FLOP/s and HBM share."""
    return {"bf16_flops_per_s_per_tensor_core": chip.peak_bf16_flops_per_s / chip.tensor_cores,
            "bf16_flops_per_s_per_mxu": chip.peak_bf16_flops_per_s / chip.mxu_count,
            "hbm_bytes_per_tensor_core": chip.hbm_capacity_bytes / chip.tensor_cores}


def gpu_summary(chip: ChipSpec) -> dict[str, Any] | None:
    """A GPU's CUDA cores and their FLOP/s two ways (the book's 1 op per core per cycle, at base and boost
    clock; the datasheet's FMA as 2 at boost), FLOPs per Tensor Core per cycle, SMEM and the node's
    bandwidth (NVLink egress x GPUs; node egress over one InfiniBand NIC per GPU); None if not a known GPU."""
    facts = GPU_FACTS.get(chip.name)
    if facts is None:
        return None
    cores = facts.sms * facts.fp32_cores_per_sm
    g = facts.gpus_per_node
    out: dict[str, Any] = {"sms": facts.sms, "cuda_cores": cores, "base_clock_hz": facts.base_clock_hz,
           "boost_clock_hz": facts.boost_clock_hz, "tensor_clock_hz": facts.tensor_clock_hz,
           "cuda_core_flops_per_s_base": cores * facts.base_clock_hz,
           "cuda_core_flops_per_s_boost": cores * facts.boost_clock_hz,
           "cuda_core_fma_flops_per_s_boost": 2 * cores * facts.boost_clock_hz,
           "fma_clock_hz_from_vpu": chip.vpu_flops_per_s / (2 * cores),  # the preset's FP32 rate / 2 FLOPs a core
           "tensor_core_bf16_flops_per_cycle": chip.peak_bf16_flops_per_s / (
               facts.sms * facts.subpartitions_per_sm * facts.tensor_clock_hz),
           "smem_bytes": chip.vmem_capacity_bytes, "gpus_per_node": g, "nvswitches_per_node": facts.nvswitches_per_node,
           "gpu_nvlink_egress_bytes_per_s": chip.ici_egress_bytes_per_s,
           "node_nvlink_bytes_per_s": g * chip.ici_egress_bytes_per_s,
           "node_egress_bytes_per_s": g * chip.dcn_bandwidth_bytes_per_s}
    if facts.clock_note:
        out["clock_note"] = facts.clock_note
    return out


def chip_facts(chip: ChipSpec) -> dict[str, Any]:
    """Every derived fact of ``chip`` that applies: ``per_core`` always, ``pod`` (TPUs), ``gpu`` (GPUs)."""
    out: dict[str, Any] = {"per_core": core_summary(chip)}
    for key, value in (("pod", pod_summary(chip)), ("gpu", gpu_summary(chip))):
        if value is not None:
            out[key] = value
    return out
