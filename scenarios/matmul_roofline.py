"""At what batch does a matmul stop being memory-bound on this chip?

Sweeps m for ``[m, k] @ [k, n]`` (bf16) on one chip: A stays in VMEM, B streams through in column
blocks with double buffering, C is stored block by block. Each point reports its arithmetic
intensity, simulated time, the unit it is bound by and the closed-form roofline.

A point's ``bound`` comes from end-to-end simulated time alone: the point is run again with a 0.1%
faster MXU and with a 0.1% faster HBM, and it is compute-bound when the faster MXU shortens the run
more (the unit whose speed sets the run is the one it is bound by). ``critical_batch`` is the
smallest such m, found by bisection over those simulated runs. In the pipeline the MXU and the HBM
race block by block -- each block's padded matmul against loading its B block and storing its C block
-- while A is read once up front and lies on the critical path either way, so the simulated crossing
is the first m whose per-block matmul outlasts the per-block HBM traffic. The closed forms count A's
bytes too, so `simulator.analytic.padded_critical_batch` (``analytic_critical_batch``, with m padded
to the MXU's 8 sublanes) is never below the simulated crossing (the same 241 on tpu-v5e at the
defaults; 617 against 593 on tpu-v6e, whose higher ridge gives A a larger share of the bytes);
`simulator.analytic.critical_batch` (``analytic_critical_batch_unpadded``) tends to the peak
intensity, about 240 on tpu-v5e, as k and n grow.

B's column block ``block_n`` defaults to the divisor of n nearest 256 (256 whenever 256 divides n).
A lives in VMEM whole, so ``k`` defaults to the largest of 16384, 8192, ... for which A at the largest m
and two B and C blocks (double buffering) fit the chip's VMEM: 16384 on tpu-v5e (128 MiB), 8192 on
tpu-v4 and the GPUs' 33-38 MB of shared memory, 4096 on the A100's 17.7 MB. A ``k`` given explicitly
is taken as given; ``buffers_effective`` says when VMEM then holds fewer blocks than the two buffers.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from simulator import analytic
from simulator.engine.system import System, resolve_chip
from simulator.errors import PodsimError
from simulator.hardware.specs import DTYPE_BYTES, ChipSpec, check_dtype
from simulator.report.result import Result
from simulator.units import positive_int
from simulator.workloads.pipeline import Operand, Step, effective_buffers, run_steps


def _steps(m: int, k: int, n: int, block_n: int, dtype: str) -> list[Step]:
    elem = DTYPE_BYTES[dtype]
    a = Operand("a", "a", elem * m * k)
    return [Step(f"a@b{j}", (a, Operand(f"b{j}", "b", elem * k * block_n)), matmul=(m, k, block_n),
                 outputs=(Operand(f"c{j}", "c", elem * m * block_n),), dtype=dtype)
            for j in range(n // block_n)]


def simulate_point(spec: ChipSpec, m: int, k: int, n: int, block_n: int, dtype: str) -> System:
    """One matmul of the sweep, simulated; returns the finished system."""
    if n % block_n:
        raise PodsimError(f"block_n={block_n} must divide n={n}")
    system = System(spec, trace=True)  # busy times come from spans, so tracing stays on
    run_steps(system, _steps(m, k, n, block_n, dtype), buffers=2)
    system.run()
    return system


def _point(spec: ChipSpec, m: int, k: int, n: int, block_n: int, dtype: str) -> dict[str, Any]:
    system = simulate_point(spec, m, k, n, block_n, dtype)
    busy = system.metrics()["busy_s"]
    elem = DTYPE_BYTES[dtype]
    roof = analytic.roofline(analytic.padded_matmul_flops(m, k, n, spec.mxu_dim, spec.sublanes),
                             analytic.matmul_bytes(m, k, n, elem), spec.peak_flops_per_s(dtype),
                             spec.hbm_bandwidth_bytes_per_s)
    return {"m": m, "time_s": system.env.now, "mxu_busy_s": busy["mxu"], "hbm_busy_s": busy["hbm"],
            "intensity_flops_per_byte": analytic.matmul_intensity(m, k, n, elem),
            "bound": _bound(spec, m, k, n, block_n, dtype),
            "analytic_lower_bound_s": roof["lower_bound_s"], "analytic_bound": roof["bound"]}


SPEEDUP = 1.001  #: the 0.1% faster unit of the end-to-end sensitivity test


def _bound(spec: ChipSpec, m: int, k: int, n: int, block_n: int, dtype: str) -> str:
    """"compute" when a 0.1% faster MXU shortens the simulated run more than a 0.1% faster HBM does."""
    mxu = replace(spec, peak_bf16_flops_per_s=spec.peak_bf16_flops_per_s * SPEEDUP,
                  peak_int8_flops_per_s=spec.peak_int8_flops_per_s * SPEEDUP)
    hbm = replace(spec, hbm_bandwidth_bytes_per_s=spec.hbm_bandwidth_bytes_per_s * SPEEDUP)
    faster_mxu_s = simulate_point(mxu, m, k, n, block_n, dtype).env.now
    faster_hbm_s = simulate_point(hbm, m, k, n, block_n, dtype).env.now
    return "compute" if faster_mxu_s < faster_hbm_s else "memory"


def _critical(spec: ChipSpec, k: int, n: int, block_n: int, dtype: str, hi: int) -> int | None:
    """Smallest m in [1, hi] that is compute-bound by end-to-end simulated time (bisection)."""
    if _bound(spec, hi, k, n, block_n, dtype) != "compute":
        return None
    lo = 0  # invariant: lo is memory-bound (or 0), hi compute-bound
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _bound(spec, mid, k, n, block_n, dtype) == "compute":
            hi = mid
        else:
            lo = mid
    return hi


DEFAULT_BLOCK_N = 256  #: B's column block when n allows it (two MXU widths on a v5e)


def default_block_n(n: int) -> int:
    """The divisor of ``n`` nearest `DEFAULT_BLOCK_N` by ratio (the smaller on a tie): 256 for n = 16384, 683 for
    n = 2049 = 3 x 683 (3 would run 683 blocks, 683 runs 3)."""
    divisors = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    divisors += [n // d for d in divisors]
    return min(sorted(set(divisors)), key=lambda d: abs(math.log(d / DEFAULT_BLOCK_N)))


DEFAULT_K = 16384  #: k when VMEM holds A at the largest m with room to double-buffer (halved until it does)
MIN_K = 128  #: the smallest default k (one MXU width); below it the defaults give up and VMEM's error stands


def default_k(spec: ChipSpec, m: int, n: int, block_n: int, dtype: str) -> int:
    """The largest k in 16384, 8192, ... (at least `MIN_K`) whose steps at batch ``m`` keep two buffers
    in ``spec``'s VMEM."""
    k = DEFAULT_K
    while k > MIN_K and effective_buffers(_steps(m, k, n, block_n, dtype), spec.vmem_capacity_bytes, 2) < 2:
        k //= 2
    return k


def run(*, k: int | None = None, n: int = 16384, m_values: tuple = (16, 32, 64, 128, 192, 256, 384, 512, 1024),
        block_n: int | None = None, dtype: str = "bf16", chip: str | ChipSpec = "tpu-v5e",
        trace: bool = True) -> Result:
    """Sweep m; report each point and the critical batch, simulated beside the closed form.

    ``k=None`` picks the largest k up to 16384 that double-buffers in the chip's VMEM (`default_k`);
    ``block_n=None`` the divisor of n nearest 256 (`default_block_n`), so any n has a block that divides it."""
    spec = resolve_chip(chip)
    check_dtype(dtype)
    positive_int(n, name="n")
    chosen_block = block_n is None
    block_n = default_block_n(n) if chosen_block else positive_int(block_n, name="block_n")
    if n % block_n:
        raise PodsimError(f"block_n={block_n} must divide n={n}")
    if not m_values or any(m < 1 for m in m_values):
        raise PodsimError(f"m_values={m_values!r} must be a non-empty list of integers >= 1")
    k = default_k(spec, max(m_values), n, block_n, dtype) if k is None else positive_int(k, name="k")
    effective = effective_buffers(_steps(max(m_values), k, n, block_n, dtype), spec.vmem_capacity_bytes, 2)
    points = [_point(spec, m, k, n, block_n, dtype) for m in sorted(m_values)]
    critical = _critical(spec, k, n, block_n, dtype, hi=max(m_values))
    peak, bw, elem = spec.peak_flops_per_s(dtype), spec.hbm_bandwidth_bytes_per_s, DTYPE_BYTES[dtype]
    closed = analytic.critical_batch(k, n, peak, bw, elem)
    padded = analytic.padded_critical_batch(k, n, peak, bw, elem, spec.mxu_dim, spec.sublanes)
    last = simulate_point(spec, max(m_values), k, n, block_n, dtype)
    return Result(
        scenario="matmul_roofline",
        params=dict(k=k, n=n, m_values=list(m_values), block_n=block_n, dtype=dtype, chip=spec.name),
        metrics=last.metrics(),
        extra={"points": points, "critical_batch": critical, "analytic_critical_batch": padded,
               "analytic_critical_batch_unpadded": closed if math.isfinite(closed) else None,  # None: never
               "peak_intensity_flops_per_byte": analytic.peak_intensity(spec.peak_flops_per_s(dtype),
                                                                        spec.hbm_bandwidth_bytes_per_s),
               "buffers_effective": effective},
        trace=last.trace,
        headline=(f"compute-bound from m = {_m(critical, max(m_values))} (simulated end to end) vs {_m(padded)} "
                  f"(closed form with MXU padding; {_m(closed)} unpadded); "
                  f"peak intensity {spec.peak_flops_per_s(dtype) / spec.hbm_bandwidth_bytes_per_s:.1f} FLOP/byte"),
        details=([] if effective == 2 else
                 [f"note: at m = {max(m_values)} VMEM holds A and only {effective} B/C block(s) at once, not the 2 "
                  f"double buffering needs (buffers_effective): loads wait for VMEM; use a smaller k or block_n"])
        + ([f"note: block_n={block_n}, the divisor of n={n} nearest {DEFAULT_BLOCK_N} (--set block_n=B to choose)"]
           if chosen_block and block_n != DEFAULT_BLOCK_N else []),
    )


def _m(m: float | None, tried: int | None = None) -> str:
    """A critical m as the headline writes it; when there is none, say so (never ``None`` or ``inf``)."""
    if m is None or not math.isfinite(m):
        return f"none up to {tried}" if tried else "never"
    return str(m) if isinstance(m, int) else f"{m:.1f}"
