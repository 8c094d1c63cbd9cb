"""Sharded matmul strategies: which collectives before and after one local matmul reach the output.

A strategy AllGathers whole dimension shardings of an operand first, multiplies the local blocks
(slicing a replicated operand for free to match the other's contraction sharding), then reduces
partial sums (AllReduce, or ReduceScatter onto an output dimension), gathers an over-split output or
slices a replicated one for free. `strategies` lists every one that yields the requested output.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from simulator.workloads.sharding.notation import ArraySpec, Dim, MatmulSpec, axes_text


@dataclass
class Reshard:
    """One change of an array's sharding in a strategy: ``kind`` over mesh ``axes`` on ``tensor``'s dimension ``dim``.

    ``kind`` is a collective (``all_gather``, ``reduce_scatter``, ``all_reduce``) or ``slice``: a free
    local cut of a dimension that is replicated over ``axes``.
    """

    kind: str
    tensor: str
    axes: tuple[str, ...]
    dim: int | None = None  #: 0 or 1: the dimension gathered or scattered onto
    dim_name: str = ""
    array: str = ""  #: the array's own name (H, W, ...) for display; ``tensor`` is its role A, B or C

    def __str__(self) -> str:
        onto = f" on {self.dim_name}" if self.dim is not None else ""
        return f"{self.kind} {self.array or self.tensor} over {axes_text(self.axes)}{onto}"


@dataclass
class Strategy:
    """Collectives before and after one local matmul, with the shardings they lead to."""

    pre: list[Reshard]
    post: list[Reshard]
    a: tuple[tuple[str, ...], tuple[str, ...]]  #: A's (I, J) axes after the pre-steps (and free slicing)
    b: tuple[tuple[str, ...], tuple[str, ...]]  #: B's (J, K) axes
    c: tuple[tuple[str, ...], tuple[str, ...]]  #: C's (I, K) axes at the end
    partial: tuple[str, ...]  #: partial-sum axes left at the end
    results: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        steps = [str(s) for s in self.pre] + ["local matmul"] + [str(s) for s in self.post]
        return ", then ".join(steps)


def _options(axes_0: tuple[str, ...], axes_1: tuple[str, ...]) -> list[tuple[int, ...]]:
    """Which dimensions of an operand to gather (whole shardings): none, dim 0, dim 1, both."""
    dims = [d for d, ax in ((0, axes_0), (1, axes_1)) if ax]
    return [c for r in range(len(dims) + 1) for c in itertools.combinations(dims, r)]


def strategies(spec: MatmulSpec) -> list[Strategy]:
    """Every strategy that yields the requested output (or C[I_A, K_B] fully reduced, by default)."""
    (ai, aj), (bj, bk) = ((d.axes for d in spec.a.dims), (d.axes for d in spec.b.dims))
    out: list[Strategy] = []
    for ga, gb in itertools.product(_options(ai, aj), _options(bj, bk)):
        s = _candidate(spec, (ai, aj), (bj, bk), ga, gb)
        if s is not None and all(s.name != o.name for o in out):
            out.append(s)
    return out


def _candidate(spec: MatmulSpec, a: tuple, b: tuple, ga: tuple[int, ...], gb: tuple[int, ...]) -> Strategy | None:
    pre = [Reshard("all_gather", "A", a[d], d, spec.a.dims[d].name, spec.a.name) for d in ga] + \
        [Reshard("all_gather", "B", b[d], d, spec.b.dims[d].name, spec.b.name) for d in gb]
    ai, aj = (() if 0 in ga else a[0]), (() if 1 in ga else a[1])
    bj, bk = (() if 0 in gb else b[0]), (() if 1 in gb else b[1])
    if aj and bj and aj != bj:
        return None
    if (1 in ga and bj) or (0 in gb and aj):
        return None  # gathering the contraction only to slice it back to the other operand's split
    contract = aj or bj  # a replicated operand is sliced locally to match the other
    aj, bj = contract, contract
    if set(ai) & set(bk) or set(contract) & (set(ai) | set(bk)):
        return None
    natural = (a[0], b[1]) if not set(a[0]) & set(b[1]) else (ai, bk)  # case 4: any output will do
    want = spec.c or ArraySpec("C", (Dim(spec.a.dims[0].name, natural[0]), Dim(spec.b.dims[1].name, natural[1])))
    post = _finish((ai, bk), contract, (want.dims[0].axes, want.dims[1].axes), want.partial,
                   (spec.a.dims[0].name, spec.b.dims[1].name))
    if post is None:
        return None
    gathered_out = {0: set(a[0]) if 0 in ga else set(), 1: set(b[1]) if 1 in gb else set()}
    if any(s.kind == "slice" and s.dim is not None and set(s.axes) & gathered_out[s.dim] for s in post):
        return None  # gathering an operand only to slice the output back the same way
    for step in post:
        step.array = want.name
    return Strategy(pre, post, (ai, aj), (bj, bk), (want.dims[0].axes, want.dims[1].axes), want.partial)


def _finish(have: tuple[tuple[str, ...], tuple[str, ...]], partial: tuple[str, ...],
            want: tuple[tuple[str, ...], tuple[str, ...]], want_partial: tuple[str, ...],
            names: tuple[str, str]) -> list[Reshard] | None:
    """Steps turning C[have]{U_partial} into C[want]{U_want_partial}, or None if not supported: a
    ReduceScatter onto a dimension the partial axes should split, an AllReduce over the partial axes
    left, an AllGather of an over-split tail, or a free local slice of a dimension that is replicated
    over the axes that should split it."""
    if set(want_partial) - set(partial):
        return None
    steps: list[Reshard] = []
    slices: list[Reshard] = []  # last: an axis may split another dimension until the collectives are done
    left = [p for p in partial if p not in want_partial]
    for d in (0, 1):
        extra = want[d][len(have[d]):] if want[d][:len(have[d])] == have[d] else None
        if extra is None:
            if have[d][:len(want[d])] == want[d] and not left:  # output over-sharded: gather the tail
                steps.append(Reshard("all_gather", "C", have[d][len(want[d]):], d, names[d]))
                continue
            return None
        if extra and not set(extra) & set(partial):  # replicated along these axes: keep one's own slice
            slices.append(Reshard("slice", "C", tuple(extra), d, names[d]))
        elif extra:
            if not set(extra) <= set(left):
                return None
            steps.append(Reshard("reduce_scatter", "C", tuple(extra), d, names[d]))
            left = [p for p in left if p not in extra]
    if left:  # after any ReduceScatter, which shrinks what is left to reduce
        steps.append(Reshard("all_reduce", "C", tuple(left)))
    return steps + slices
