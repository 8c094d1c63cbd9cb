"""AllGather, ReduceScatter and AllReduce over several axes, composed of one ring phase per axis.

With ``multi_axis="parallel"`` (the default) the array is split into one part per axis and part p runs
over the axes in rotated order (p, p+1, ...), so at every phase each axis's links carry one part;
``"sequential"`` moves the whole array over one axis after another. A phase ends at a barrier (no device
starts phase j+1 before every device of the group has finished phase j -- free on wrapped axes, where all
finish together). AllReduce is ReduceScatter then AllGather with the axes reversed.

Closed form (`closed_form`): the phases add; a phase lasts as long as its slowest part, each part's
phase priced by `simulator.collectives.timing.chain_phase_time` for the bytes one device holds then
(a part of V/P gathered over axis a first holds V/(P n), then V/(P n) x n_a, ...). Parts on different
axes are assumed never to share a link (true on tori and meshes, where a neighbour step stays on its axis).
Exact on tori, meshes, lines and switches. On two-level rings (GPU nodes over InfiniBand, slices over
DCN) the closed form keeps the steps in lock step, while in the simulation fast chains run ahead and
queue at the slow crossing: within 1% bandwidth-bound, up to about 60% longer or 15% shorter in between
(tests/test_bounds.py).
"""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from simulator import analytic
from simulator.collectives.algorithm import Job
from simulator.collectives.chains import gather_phase, reduce_phase
from simulator.collectives.groups import Group, keys_where, ring_bases
from simulator.collectives.schedule import Schedule
from simulator.collectives.timing import chain_phase_time, route_latency, step_edges
from simulator.engine.network import Network

OnAxis = Callable[[bool], Any]  #: an axis's wraparound -> the ring algorithm that runs on it


def phases(kind: str, n_axes: int) -> list[tuple[str, int]]:
    """(``"ag"`` gather or ``"rs"`` reduce, index into the part's axis order) of each phase, in time order."""
    if kind == "all_gather":
        return [("ag", j) for j in range(n_axes)]
    if kind == "reduce_scatter":
        return [("rs", j) for j in range(n_axes)]
    return [("rs", j) for j in range(n_axes)] + [("ag", j) for j in range(n_axes)]


def orders(n_axes: int, parts: int) -> list[list[int]]:
    """Each part's axis order: part p starts at axis p."""
    axes = list(range(n_axes))
    return [axes[p:] + axes[:p] for p in range(parts)] if parts > 1 else [axes]


def phase_order(kind: str, what: str, order: list[int]) -> list[int]:
    """The axes a phase indexes into: AllReduce gathers over its reduction order reversed."""
    return order if what == "rs" or kind == "all_gather" else order[::-1]


def build(job: Job, groups: list[Group], on_axis: OnAxis, s: Schedule) -> None:
    """Add the phases of every group: every part runs phase j on its own axis, then all meet at a barrier."""
    for group in groups:
        barrier = None
        for step, (what, j) in enumerate(phases(job.kind, len(group.sizes))):
            tags = []
            for part, order in enumerate(orders(len(group.sizes), job.parts)):
                tag = (what, id(group), part, step)
                _phase(job, group, on_axis, s, what, part, phase_order(job.kind, what, order), j, barrier, tag)
                tags.append(tag)
            barrier = s.barrier(tags)


def _phase(job: Job, group: Group, on_axis: OnAxis, s: Schedule, what: str, part: int, order: list[int], j: int,
           barrier: int | None, tag: Any) -> None:
    """Phase j of one part (over axis ``order[j]``).

    The bundle of ring position i holds the keys the position owns in this phase: for a gather,
    those whose shard agrees with the device on every axis not gathered yet; for a reduction, those
    whose shard agrees with it on every axis already reduced (and, on this axis, equals i).
    """
    a = order[j]
    axes = range(len(group.sizes))
    start = (lambda i: []) if barrier is None else (lambda i: [barrier])
    for base in ring_bases(group, a, {}, job.reduced):
        ring = group.ring(base, a, job.reduced)
        if what == "rs":
            fixed = {b: base[b] for b in order[:j]}
        else:
            fixed = {b: base[b] for b in axes if b not in order[:j] and b != a}
        if job.numeric:
            bundles: list[Any] = [tuple((part, k) for k in keys_where(group.sizes, fixed | {a: i}))
                                  for i in range(len(ring.devices))]
        else:  # every position owns as many keys: the product of the axes left free
            count = math.prod(n for b, n in enumerate(group.sizes) if b not in fixed and b != a)
            bundles = [count] * len(ring.devices)
        run = reduce_phase if what == "rs" else gather_phase
        run(s, ring, bundles, on_axis(ring.wrap), start, tag)


def closed_form(job: Job, on_axis: OnAxis) -> float:
    """Sum over phases of the slowest part's phase (see the module docstring)."""
    n_axes = len(job.group.sizes)
    total = 0.0
    for what, j in phases(job.kind, n_axes):
        total += max(_phase_time(job, on_axis, what, phase_order(job.kind, what, order), j)
                     for order in orders(n_axes, job.parts))
    return total


def _phase_time(job: Job, on_axis: OnAxis, what: str, order: list[int], j: int) -> float:
    """One part's phase j over axis ``order[j]``: a device sends what it holds at that phase."""
    a, sizes = order[j], job.group.sizes
    held = order[:j] if what == "ag" else order[j + 1:]
    shard_bytes = job.key_bytes * math.prod(sizes[b] for b in held)
    algorithm = on_axis(job.group.wraps[a])
    rings = [groups[0].ring(tuple(0 for _ in sizes), a) for groups in job.rings]
    units = algorithm.gather_units if what == "ag" else algorithm.reduce_units
    return chain_phase_time(job.net, rings, algorithm.closed, algorithm.steps(sizes[a]), units, shard_bytes)


def book_time(kind: str, group: Group, net: Network, parts: int, nbytes: float) -> float | None:
    """The book's estimate max(latency x sum(n) / 2, V / (k W)) for axes that all wrap (x2 for AllReduce);
    None where the book gives none (other kinds, lines, switches)."""
    if kind not in ("all_gather", "reduce_scatter", "all_reduce") or not all(group.wraps) or not net.grid:
        return None
    lat, bw = _book_step(net, group)
    one = analytic.book_all_gather_time(nbytes / parts, sum(group.sizes), bw, lat)
    return 2 * one if kind == "all_reduce" else one


def _book_step(net: Network, group: Group) -> tuple[float, float]:
    """(latency, one-way bandwidth) of a bidirectional ring step along the first axis: the slowest
    step's route latency, and a link's bandwidth over the step messages sharing it."""
    ring = group.ring(tuple(0 for _ in group.sizes), 0)
    n = len(ring.devices)
    use: dict[tuple[Any, Any], int] = defaultdict(int)
    for i in range(n):
        for d in ((1, -1) if n > 2 else (1,)):
            for e in step_edges(net, ring, i, d):
                use[e] += 1
    routes = [step_edges(net, ring, i, 1) for i in range(n)]
    latency = max(route_latency(net, r) for r in routes)
    bandwidth = min(net.graph.edges[e]["bandwidth_bytes_per_s"] / use[e] for r in routes for e in r)
    return latency, bandwidth
