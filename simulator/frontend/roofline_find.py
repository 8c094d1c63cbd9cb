"""``podsim roofline --find batch``: the batch where a matmul turns compute-bound, as one number.

A ``[B, K] x [K, N]`` matmul with activations of ``a`` bytes an element and weights of ``w`` (``--weight-dtype``,
e.g. int8 weights under bf16 compute) does 2 B K N FLOPs and moves a B K + w K N + a B N bytes. Against a
peak C and a roof W it is compute-bound once 2 B K N / C >= (a B K + w K N + a B N) / W, i.e.

    B >= (w K N / W) / (2 K N / C - a (K + N) / W)

(``critical_batch``: the smallest whole B; None where the right side's denominator is not positive, when no
batch is enough). The book's rule for B << K, N drops the activations: B > (C / W) w / 2
(``critical_batch_book``: 240 for bf16 on v5e, 243 for int8 at the int8 peak, 120 for int8 weights under
bf16 compute; roofline questions 1 and 2). Both are bounds (ideal peaks).
"""
from __future__ import annotations

import math
from typing import Any

from simulator.errors import PodsimError

FINDS = ("batch",)  #: what `--find` solves for


def find_batch(k: int, n: int, act_bytes: int, weight_bytes: int, peak_flops_per_s: float,
               bandwidth_bytes_per_s: float) -> dict[str, Any]:
    """``critical_batch`` (exact, whole) and ``critical_batch_book`` (B << K, N) of a [B, K] x [K, N] matmul."""
    slope = 2 * k * n / peak_flops_per_s - act_bytes * (k + n) / bandwidth_bytes_per_s
    exact = None if slope <= 0 else math.ceil(weight_bytes * k * n / bandwidth_bytes_per_s / slope)
    book = peak_flops_per_s / bandwidth_bytes_per_s * weight_bytes / 2
    shown = exact if exact is not None else "none"
    out: dict[str, Any] = {"find": "batch", "critical_batch": exact, "critical_batch_book": book,
                           "find_note": f"B at which [B, {k}] x [{k}, {n}] turns compute-bound: exact {shown}; "
                                        f"the book's B > (C/W) w/2 = {book:.4g}"}
    if exact is None:
        out["find_note"] += " (the activations alone outlast the FLOPs: no batch is compute-bound)"
    return out


def check_find(find: str | None, matmul: str | None) -> None:
    if find is None:
        return
    if find not in FINDS:
        raise PodsimError(f"--find {find!r}; valid: {', '.join(FINDS)}")
    if not matmul:
        raise PodsimError("--find batch solves a matmul's batch: give --matmul B,K,N (B is the batch shown beside)")


MAX_BATCHES = 1000  #: points one `--batches` list may hold


def parse_batches(text: str) -> list[int]:
    """``--batches 1,64,240`` as whole positive batches (at most `MAX_BATCHES` of them)."""
    from simulator.units import parse_int

    parts = [p for p in text.split(",") if p.strip()]
    if not parts or len(parts) > MAX_BATCHES:
        raise PodsimError(f"--batches {text!r} must list 1 to {MAX_BATCHES} batches, e.g. 1,16,64,240,1024")
    return [parse_int(p, name="--batches", maximum=2**40) for p in parts]


def batch_points(batches: list[int], k: int, n: int, act_bytes: int, weight_bytes: int, peak_flops_per_s: float,
                 bandwidth_bytes_per_s: float) -> list[dict[str, Any]]:
    """The roofline of a [B, K] x [K, N] matmul at each B (the points of the book's roofline question 3): FLOPs,
    bytes (a B K + w K N + a B N), T_math and T_mem (s), the bound max of the two and the FLOP/s it achieves at
    that bound (``flops_per_s`` = FLOPs / bound, at most the peak)."""
    out = []
    for b in batches:
        flops = 2.0 * b * k * n
        nbytes = act_bytes * b * (k + n) + weight_bytes * k * n
        t_c, t_m = flops / peak_flops_per_s, nbytes / bandwidth_bytes_per_s
        bound = max(t_c, t_m)
        out.append({"batch": b, "flops": flops, "bytes": nbytes, "t_compute_s": t_c, "t_memory_s": t_m,
                    "lower_bound_s": bound, "flops_per_s": flops / bound, "bound": "compute" if t_c >= t_m else
                    "memory"})
    return out
