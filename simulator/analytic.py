"""Closed forms from "How To Scale Your Model" (ch. roofline): the oracle every simulation is held to.

All functions are pure, take SI units and return SI units (seconds, bytes, FLOPs, FLOP/byte).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from simulator.errors import PodsimError


def _ceil_to(x: int, multiple: int) -> int:
    return -(-x // multiple) * multiple


def matmul_flops(m: int, k: int, n: int) -> float:
    """FLOPs of ``[m, k] @ [k, n]``: 2mkn (one multiply and one add per term)."""
    return 2.0 * m * k * n


def padded_matmul_flops(m: int, k: int, n: int, mxu_dim: int, sublanes: int = 8) -> float:
    """FLOPs the MXU spends on ``[m, k] @ [k, n]`` with k, n padded to ``mxu_dim`` and m to ``sublanes``."""
    return 2.0 * _ceil_to(m, sublanes) * _ceil_to(k, mxu_dim) * _ceil_to(n, mxu_dim)


def matmul_bytes(m: int, k: int, n: int, elem_bytes: float = 2) -> float:
    """HBM bytes of ``[m, k] @ [k, n]``: read both operands once, write the output once."""
    return elem_bytes * (m * k + k * n + m * n)


def arithmetic_intensity(flops: float, nbytes: float) -> float:
    """FLOPs per byte moved."""
    if nbytes <= 0:
        raise PodsimError(f"bytes={nbytes!r} must be > 0 to compute an intensity")
    return flops / nbytes


def matmul_intensity(m: int, k: int, n: int, elem_bytes: float = 2) -> float:
    """Arithmetic intensity of a matmul; about m when m << k, n (bf16); 1024/3 at m = k = n = 1024."""
    return arithmetic_intensity(matmul_flops(m, k, n), matmul_bytes(m, k, n, elem_bytes))


def peak_intensity(peak_flops_per_s: float, bandwidth_bytes_per_s: float) -> float:
    """The ridge point: intensity above which a task is compute-bound (about 240 for v5e HBM)."""
    return peak_flops_per_s / bandwidth_bytes_per_s


def roofline(flops: float, nbytes: float, peak_flops_per_s: float,
             bandwidth_bytes_per_s: float) -> dict[str, Any]:
    """Roofline times and bounds: T_math, T_comms, max (perfect overlap) and sum (no overlap)."""
    t_compute = flops / peak_flops_per_s
    t_memory = nbytes / bandwidth_bytes_per_s
    return {
        "t_compute_s": t_compute,
        "t_memory_s": t_memory,
        "lower_bound_s": max(t_compute, t_memory),
        "upper_bound_s": t_compute + t_memory,
        "intensity_flops_per_byte": flops / nbytes if nbytes > 0 else math.inf,
        "peak_intensity_flops_per_byte": peak_intensity(peak_flops_per_s, bandwidth_bytes_per_s),
        "bound": "compute" if t_compute >= t_memory else "memory",
    }


def roof_flops_per_s(intensity: float, peak_flops_per_s: float, bandwidth_bytes_per_s: float) -> float:
    """The attainable rate at ``intensity``: min(peak, intensity x bandwidth)."""
    return min(peak_flops_per_s, intensity * bandwidth_bytes_per_s)


def percent_of_peak(achieved_flops_per_s: float, peak_flops_per_s: float) -> float:
    """Achieved rate as a percentage of the chip's peak."""
    return 100.0 * achieved_flops_per_s / peak_flops_per_s


def percent_of_roof(achieved_flops_per_s: float, intensity: float, peak_flops_per_s: float,
                    bandwidth_bytes_per_s: float) -> float:
    """Achieved rate as a percentage of the task's own roof (REFERENCE: 3 of 4 GFLOP/s is 75%)."""
    return 100.0 * achieved_flops_per_s / roof_flops_per_s(intensity, peak_flops_per_s, bandwidth_bytes_per_s)


def pipeline_time(blocks: int, load_s: float, compute_s: float, buffers: int) -> float:
    """Time of ``blocks`` equal blocks, each a load of ``load_s`` then a compute of ``compute_s``.

    One buffer serialises everything: q(a + c). With two or more buffers loads run ahead of compute:
    max(qa, qc) + min(a, c) -- the first load and last compute cannot overlap. Deeper buffering does
    not help equal blocks; it helps when block times vary.
    """
    if blocks < 0 or buffers < 1:
        raise PodsimError(f"blocks={blocks} must be >= 0 and buffers={buffers} >= 1")
    if blocks == 0:
        return 0.0
    if buffers == 1:
        return blocks * (load_s + compute_s)
    return max(blocks * load_s, blocks * compute_s) + min(load_s, compute_s)


#: The one-line definition of exposed time that outputs print beside it.
EXPOSED_MEANING = ("exposed: time on the critical path when the named resource (an axis's links, a pipeline "
                   "neighbour's message) is busy and compute is not; never negative")


def exposed_s(path_s: float, compute_s: float) -> float:
    """Exposed time (`EXPOSED_MEANING`) of a stretch of critical path ``path_s`` seconds long on which compute
    is busy for ``compute_s``: the rest, when only communication runs. The one definition every closed form and
    simulation uses; compute cannot outlast the path it lies on, so a ``compute_s`` beyond ``path_s`` (past
    rounding) is a model inconsistency, raised rather than printed as a negative time."""
    gap = path_s - compute_s
    if gap < -1e-9 * max(abs(path_s), abs(compute_s), 1e-12):
        raise ArithmeticError(f"exposed time of a {path_s!r} s path with {compute_s!r} s of compute is negative "
                              f"({gap!r} s): the model booked more compute than the path holds")
    return max(0.0, gap)


def critical_batch(k: int, n: int, peak_flops_per_s: float, bandwidth_bytes_per_s: float,
                   elem_bytes: float = 2) -> float:
    """The m at which ``[m, k] @ [k, n]`` turns compute-bound: 2mkn / P = e(mk + kn + mn) / B.

    Solving gives m = I e k n / (2kn - I e (k + n)) with I = P / B; it tends to the peak intensity I
    (for bf16) as k, n grow. ``inf`` when the matmul can never become compute-bound.
    """
    ridge = peak_intensity(peak_flops_per_s, bandwidth_bytes_per_s)
    denom = 2.0 * k * n - ridge * elem_bytes * (k + n)
    return ridge * elem_bytes * k * n / denom if denom > 0 else math.inf


def padded_critical_batch(k: int, n: int, peak_flops_per_s: float, bandwidth_bytes_per_s: float,
                          elem_bytes: float = 2, mxu_dim: int = 128, sublanes: int = 8) -> int | None:
    """Smallest integer m whose padded MXU time reaches its HBM time (None if none ever does).

    The MXU pads m up to a multiple s of ``sublanes`` and k, n up to ``mxu_dim`` (K', N'), so compute
    time is a staircase in m, constant over each block j of m in (s(j-1), sj], while HBM time grows
    with m. The first m of a block is therefore the only candidate in it, and block j qualifies when
    2 s j K' N' / P >= e ((s(j-1) + 1)(k + n) + k n) / B, which is linear in j: solve for j, then check.
    Padding can make the answer far smaller than the unpadded `critical_batch` (k = n = 2049 on a v5e:
    265 against 305), or finite where that is infinite (n = 129).
    """
    s, kp, np_ = sublanes, _ceil_to(k, mxu_dim), _ceil_to(n, mxu_dim)
    slope = 2.0 * s * kp * np_ / peak_flops_per_s - s * elem_bytes * (k + n) / bandwidth_bytes_per_s
    offset = elem_bytes * ((1 - s) * (k + n) + k * n) / bandwidth_bytes_per_s

    def wins(j: int) -> bool:
        m = s * (j - 1) + 1
        return padded_matmul_flops(m, k, n, mxu_dim, s) / peak_flops_per_s >= (
            matmul_bytes(m, k, n, elem_bytes) / bandwidth_bytes_per_s)

    if wins(1):
        return 1
    if slope <= 0:
        return None  # each block adds at least as much HBM time as MXU time: never compute-bound
    j = max(1, math.ceil(offset / slope))
    while j > 1 and wins(j - 1):  # the solved j can be one off by rounding; the check decides
        j -= 1
    while not wins(j):
        j += 1
    return s * (j - 1) + 1


def pipeline_time_blocks(load_s: list[float], compute_s: list[float], buffers: int) -> float:
    """Time of blocks with their own load and compute times, ``buffers`` deep (max-plus recurrence).

    Load i starts when load i-1 is done and a buffer is free (compute i-buffers done); compute i
    starts when load i and compute i-1 are done. Equal blocks reduce to `pipeline_time`.
    """
    if len(load_s) != len(compute_s) or buffers < 1:
        raise PodsimError(f"need equal-length block lists (got {len(load_s)}, {len(compute_s)}) and buffers >= 1")
    load_end = 0.0
    compute_end: list[float] = []
    for i, (a, c) in enumerate(zip(load_s, compute_s, strict=True)):
        slot_free = compute_end[i - buffers] if i >= buffers else 0.0
        load_end = max(load_end, slot_free) + a
        compute_end.append(max(load_end, compute_end[-1] if compute_end else 0.0) + c)
    return compute_end[-1] if compute_end else 0.0


# -- collectives (REFERENCE.md "Collectives"; V = bytes of the full gathered / unreduced array) --------------------

def ring_steps(n: int, wrap: bool = True, bidirectional: bool = True) -> int:
    """Sequential neighbour steps of a ring AllGather: n-1 one way, ceil((n-1)/2) both ways, n-1 on a line."""
    if n <= 1:
        return 0
    if not wrap or not bidirectional:
        return n - 1
    return math.ceil((n - 1) / 2)


def ring_link_load(n: int, wrap: bool = True, bidirectional: bool = True) -> float:
    """Shards the busiest link direction carries in a ring AllGather of ``n`` devices: n-1 one way or on a
    line, (n-1)/2 both ways (an even ring splits the antipode's shard, half each way round); a ring of
    2 has one link (1 shard)."""
    if n <= 1:
        return 0.0
    if not wrap or not bidirectional or n == 2:
        return float(n - 1)
    return (n - 1) / 2


def all_gather_time(nbytes: float, n: int, bandwidth_bytes_per_s: float, latency_s: float = 0.0,
                    wrap: bool = True, bidirectional: bool = True) -> float:
    """Ring AllGather of ``nbytes`` over ``n`` devices: steps x latency + link load x nbytes / (n b).

    Every step pays one hop latency; the busiest link direction carries `ring_link_load` shards of
    nbytes / n. Unidirectional ring and a line take n-1 steps, each link carrying n-1 shards; a
    bidirectional ring ceil((n-1)/2) steps with (n-1)/2 shards per link, so its bandwidth term is
    (n-1)/n x V / (2b) -- the per-chip ingress bound -- where the book writes V / W_ici with W_ici = 2b:
    the book drops the factor (n-1)/n, and takes ``max(latency * n / 2, V / W_ici)``
    (`book_all_gather_time`) where every step pays both.
    """
    steps = ring_steps(n, wrap, bidirectional)
    if not steps:
        return 0.0
    return steps * latency_s + ring_link_load(n, wrap, bidirectional) * nbytes / (n * bandwidth_bytes_per_s)


def reduce_scatter_time(nbytes: float, n: int, bandwidth_bytes_per_s: float, latency_s: float = 0.0,
                        wrap: bool = True, bidirectional: bool = True) -> float:
    """ReduceScatter: the AllGather pattern run backwards, same time (the additions are free)."""
    return all_gather_time(nbytes, n, bandwidth_bytes_per_s, latency_s, wrap, bidirectional)


def all_reduce_time(nbytes: float, n: int, bandwidth_bytes_per_s: float, latency_s: float = 0.0,
                    wrap: bool = True, bidirectional: bool = True) -> float:
    """AllReduce = ReduceScatter + AllGather: twice the AllGather time."""
    return 2 * all_gather_time(nbytes, n, bandwidth_bytes_per_s, latency_s, wrap, bidirectional)


def all_to_all_time(nbytes: float, n: int, bandwidth_bytes_per_s: float, latency_s: float = 0.0,
                    wrap: bool = True, bidirectional: bool = True) -> float:
    """Ring AllToAll of a ``nbytes`` array spread over ``n`` devices (each holds nbytes / n).

    Each device's n chunks of nbytes / n^2 travel the short way round; step h forwards the chunks
    still travelling, so a chain of L steps costs L * latency + (nbytes / n^2) * L (L + 1) / 2 / b --
    about V / (8b), a quarter of the bidirectional AllGather, for large n. On a line (no wraparound)
    the chain from an end takes L = n - 1 hops the same way, each bundle waiting for the whole previous
    hop: longer than the busiest link's (n/2)^2 chunks alone.
    """
    if n <= 1:
        return 0.0
    chunk = nbytes / n**2
    steps = ring_steps(n, wrap, bidirectional)
    return steps * latency_s + chunk * steps * (steps + 1) / 2 / bandwidth_bytes_per_s


def broadcast_time(nbytes: float, hops: int, bandwidth_bytes_per_s: float, latency_s: float = 0.0,
                   chunks: int = 1) -> float:
    """Pipelined broadcast along a chain of ``hops`` devices in ``chunks`` pieces (store and forward):
    (hops + chunks - 1) * (latency + nbytes / (chunks b))."""
    if hops <= 0:
        return 0.0
    return (hops + chunks - 1) * (latency_s + nbytes / (chunks * bandwidth_bytes_per_s))


def book_all_gather_time(nbytes: float, n: int, bandwidth_bytes_per_s: float, latency_s: float = 0.0) -> float:
    """The book's bidirectional-ring estimate: max(latency * n / 2, V / W_ici) with W_ici = 2b.

    Over k axes at once pass V / k as ``nbytes`` and the sum of the axis lengths as ``n``.
    """
    return max(latency_s * n / 2, nbytes / (2 * bandwidth_bytes_per_s))


def point_to_point_time(nbytes: float, hops: int, bandwidth_bytes_per_s: float, latency_s: float,
                        links_used: int = 1) -> float:
    """REFERENCE: hops x latency + bytes / (links used x b) -- latency and bandwidth add (cut-through)."""
    return hops * latency_s + nbytes / (links_used * bandwidth_bytes_per_s)


def store_and_forward_time(nbytes: float, hops: int, bandwidth_bytes_per_s: float, latency_s: float,
                           chunks: int = 1) -> float:
    """A message cut into ``chunks`` pieces, each stored then forwarded at every hop."""
    return broadcast_time(nbytes, hops, bandwidth_bytes_per_s, latency_s, chunks)


BUS_FACTORS: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0, "reduce": lambda n: 1.0, "gather": lambda n: (n - 1) / n,
    "scatter": lambda n: (n - 1) / n}


def bus_bandwidth(kind: str, nbytes: float, time_s: float, n: int) -> tuple[float, float]:
    """nccl-tests conventions: (algbw, busbw) = (size / time, algbw x factor(kind, n))."""
    if time_s <= 0:
        return math.inf, math.inf
    algbw = nbytes / time_s
    return algbw, algbw * BUS_FACTORS[kind](n)
