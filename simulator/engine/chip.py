"""One chip as SimPy resources: HBM and VMEM pools, the HBM DMA channel, MXU and VPU.

Timing model: a load (HBM -> VMEM) or store (VMEM -> HBM) moves its bytes through the chip's one HBM
`Channel` at ``hbm_bandwidth_bytes_per_s``, fairly shared by every DMA in flight; VMEM bandwidth
(about 22x HBM) is counted but never the bottleneck of a DMA. A matmul occupies the MXU for its
padded FLOPs over the MXU peak of its dtype; a vector op occupies the VPU for its FLOPs over
``vpu_flops_per_s``. Compute reads and writes VMEM; those bytes are counted, not timed. With a
calibration (`simulator.hardware.calibration`) matmuls, FLOP counts and HBM run at their fitted efficiencies
(on GPU presets the kernel model of `simulator.hardware.gpu_kernels`: tiles, waves, dtype, HBM roofline, launch).
"""
from __future__ import annotations

import math
from typing import Any

import simpy

from simulator import analytic
from simulator.engine.channel import DONE_FRACTION, Channel, SerialUnit
from simulator.engine.memory import MemoryPool
from simulator.engine.trace import Trace
from simulator.hardware.specs import DTYPE_BYTES, ChipSpec
from simulator.units import positive


class Chip:
    """Chip ``index`` of a system, built from ``spec``; its units record spans into ``trace``."""

    def __init__(self, env: simpy.Environment, spec: ChipSpec, index: int | str = 0,
                 trace: Trace | None = None, calibration: Any = None) -> None:
        self.env = env
        self.spec = spec
        self.index = index
        self.trace = trace if trace is not None else Trace()
        self.calibration = calibration
        self.hbm = MemoryPool(env, "hbm", spec.hbm_capacity_bytes, chip=index)
        self.vmem = MemoryPool(env, "vmem", spec.vmem_capacity_bytes, chip=index)
        self.trace.add_pool(self.hbm)
        self.trace.add_pool(self.vmem)
        hbm_fraction = calibration.hbm_fraction if calibration is not None else 1.0
        self.dma = Channel(env, "hbm", spec.hbm_bandwidth_bytes_per_s * hbm_fraction, chip=index, trace=self.trace)
        self.mxu = SerialUnit(env, "mxu", chip=index, trace=self.trace)
        self.vpu = SerialUnit(env, "vpu", chip=index, trace=self.trace)
        self._peak: dict[str, float] = {}  # dtype -> MXU FLOP/s of `compute` (calibrated peak fraction applied)

    def load(self, nbytes: float, label: str, block: str | None = None) -> simpy.Event:
        """DMA ``nbytes`` of tensor ``label`` (span named ``block``) from HBM into VMEM.

        The caller holds the VMEM space.
        """
        trace = self.trace  # what trace.count("hbm_read", nbytes, label, "read") and ("vmem_write", nbytes) do
        trace.bytes_by_interface["hbm_read"] += nbytes
        trace.bytes_by_interface["vmem_write"] += nbytes
        trace.bytes_by_tensor[label]["read"] += nbytes
        return self.dma.transfer(nbytes, block or label, "load")

    def store(self, nbytes: float, label: str, block: str | None = None) -> simpy.Event:
        """DMA ``nbytes`` of tensor ``label`` (span named ``block``) from VMEM back to HBM."""
        trace = self.trace
        trace.bytes_by_interface["hbm_write"] += nbytes
        trace.bytes_by_interface["vmem_read"] += nbytes
        trace.bytes_by_tensor[label]["written"] += nbytes
        return self.dma.transfer(nbytes, block or label, "store")

    def matmul(self, m: int, k: int, n: int, label: str = "matmul", dtype: str = "bf16") -> simpy.Event:
        """``[m, k] @ [k, n]`` on the MXU: time = padded FLOPs / MXU peak(dtype).

        k and n pad to ``mxu_dim``, m to ``sublanes``; the span carries the useful 2mkn FLOPs.
        """
        flops = analytic.matmul_flops(m, k, n)
        padded = analytic.padded_matmul_flops(m, k, n, self.spec.mxu_dim, self.spec.sublanes)
        self.trace.padded_flops_total += padded
        elem = DTYPE_BYTES[dtype]
        self.trace.count("vmem_read", elem * (m * k + k * n))
        self.trace.count("vmem_write", elem * m * n)
        peak = self.spec.peak_flops_per_s(dtype)
        model = self.calibration.matmul if self.calibration is not None else None
        duration = model.matmul_s(m, k, n, dtype, peak, padded) if model is not None else padded / peak
        return self.mxu.run(duration, label, flops)

    def compute(self, flops: float, label: str = "compute", dtype: str = "bf16",
                useful_flops: float | None = None) -> simpy.Event:
        """``flops`` of MXU work (for work given as a FLOP count, not a shape).

        When ``flops`` already includes padding, ``useful_flops`` is the unpadded count the trace
        reports; by default all of ``flops`` is useful.
        """
        if flops.__class__ is not float or not 0.0 <= flops < math.inf:  # the hot path skips the call
            positive(flops, name=f"{label} flops", allow_zero=True)
        self.trace.padded_flops_total += flops
        useful = flops if useful_flops is None else useful_flops
        peak = self._peak.get(dtype)
        if peak is None:
            model = self.calibration.matmul if self.calibration is not None else None
            peak = self.spec.peak_flops_per_s(dtype)  # a FLOP count has no shape to tile: the large-tile rate
            peak = self._peak[dtype] = model.rate(dtype, peak) if model is not None else peak
        return self.mxu.run(flops / peak, label, useful)

    def fold_work(self, read: float, write: float, flops: float, useful: float | None, vector: float,
                  read_label: str, write_label: str) -> float | None:
        """The instant (s) a step's op ends whose ``read`` and ``write`` bytes move through the DMA at once with
        its ``flops`` on the MXU, then its ``vector`` FLOPs on the VPU -- what `load`, `store` and `compute` at
        once, then `vector`, give -- found without running them: their counters and the units' states are left
        as those would leave them, and the instant is the same float (the channel's fair share of two flows
        that start together, its own float steps; each unit's timer at ``now + (end - now)``). None (nothing
        done) unless every unit is idle, a plain `Channel` with no latency, and the trace keeps no spans."""
        trace, dma, now = self.trace, self.dma, self.env.now
        mxu, vpu = self.mxu, self.vpu
        if trace.enabled or type(dma) is not Channel or dma._flows or dma.latency_s or dma._last_update > now \
                or type(mxu) is not SerialUnit or type(vpu) is not SerialUnit or mxu._free_at > now \
                or vpu._free_at > now:  # (a slow, paused or jittered unit is a `FaultUnit`: it runs)
            return None
        counts, tensors = trace.bytes_by_interface, trace.bytes_by_tensor
        bandwidth = dma._bandwidth
        if read:
            tensors[read_label]["read"] += read
        if write:
            tensors[write_label]["written"] += write
        done = now
        if read and write:  # two flows from now, fair-shared: the first of them done, then the other alone
            counts["hbm_read"] += read
            counts["vmem_write"] += read
            counts["hbm_write"] += write
            counts["vmem_read"] += write
            least, most = (read, write) if read <= write else (write, read)
            first = now + least * 2 / bandwidth
            v = (first - now) * bandwidth / 2
            done = first if most - v <= DONE_FRACTION * most else first + (most - v) * 1 / bandwidth
            dma.bytes_carried += read + write
            dma._arrivals += 1
        elif read or write:
            nbytes = read or write
            counts["hbm_read" if read else "hbm_write"] += nbytes
            counts["vmem_write" if read else "vmem_read"] += nbytes
            done = now + nbytes / bandwidth
            dma.bytes_carried += nbytes
        if read or write:
            dma._last_update, dma._v = done, 0.0
            dma._generation += 4
        if flops:
            if flops.__class__ is not float or not 0.0 <= flops < math.inf:
                positive(flops, name="flops", allow_zero=True)
            trace.padded_flops_total += flops
            trace.flops_total += flops if useful is None else useful
            peak = self._peak.get("bf16")
            if peak is None:
                model = self.calibration.matmul if self.calibration is not None else None
                peak = self.spec.peak_flops_per_s("bf16")
                peak = self._peak["bf16"] = model.rate("bf16", peak) if model is not None else peak
            end = now + flops / peak
            mxu._free_at = end
            ends = now + (end - now)
            done = ends if ends > done else done
        if vector:
            positive(vector, name="vector flops", allow_zero=True)
            trace.flops_total += vector
            end = done + vector / self.spec.vpu_flops_per_s
            vpu._free_at = end
            done = done + (end - done)
        return done

    def vector(self, flops: float, label: str = "vector") -> simpy.Event:
        """``flops`` of element-wise work on the VPU."""
        positive(flops, name=f"{label} flops", allow_zero=True)
        return self.vpu.run(flops / self.spec.vpu_flops_per_s, label, flops)
