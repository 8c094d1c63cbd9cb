"""AllToAll: every device sends a distinct chunk to every other, one axis at a time.

Along each axis the chunks travel the ring algorithm's way round (the short way on a bidirectional ring),
a bundle per hop: hop h forwards the chunks still travelling (those for positions h or more hops away).
Axes run one after another with a barrier between them; in the phase over axis a each device sends, to
each position on that axis, every chunk whose target lies on it (n / n_a keys of the original V / n^2).

Closed form (`closed_form`): the phases add, each priced by `simulator.collectives.timing.chain_phase_time`
from the chunks each ring link carries at each step. Exact on tori and lines (a line's chain from an end
forwards n-1, n-2, ..., 1 chunks, each bundle waiting for the whole previous hop). Where lock step is wrong
-- two chains sharing a switch port carry unequal bundles, and when the smaller finishes the larger speeds
up; on GPU nodes' NIC rings the fast NVLink hops run ahead and queue at the InfiniBand crossing -- a one-axis
phase follows its flows on the fair-shared ports instead (`_fluid`, `simulator.collectives.timing.shared_flow_time`;
up to 64 positions): equal to the simulation on H100 switch:8, nodes:2:8 and nodes:4:8, ideal and calibrated,
1 MB to 1 GB (calibrated nodes:2:8 64 MB `line` 107.98 us, where lock step said 120.64;
tests/test_node_alternatives.py).
"""
from __future__ import annotations

import itertools
from collections.abc import Callable
from functools import partial
from typing import Any

from simulator.collectives.algorithm import Job
from simulator.collectives.chains import all_to_all_phase
from simulator.collectives.groups import Group, keys_where, ring_bases, rings_along
from simulator.collectives.schedule import Schedule
from simulator.collectives.timing import (
    RING_FLUID_HOPS,
    PortFold,
    chain_flows,
    chain_phase_time,
    fold_ring_ports,
    ring_period,
    shared_flow_time,
)

OnAxis = Callable[[bool], Any]



def _no_wait(_i: int) -> list[Any]:
    return []


def _after(barrier: Any, _i: int) -> list[Any]:
    return [barrier]


def build(job: Job, groups: list[Group], on_axis: OnAxis, s: Schedule) -> None:
    """Add the AllToAll of every group, axis by axis."""
    for group in groups:
        axes = list(range(len(group.sizes)))
        barrier = None
        for j, a in enumerate(axes):
            tag = ("a2a", id(group), j)
            done = axes[:j]
            start = _no_wait if barrier is None else partial(_after, barrier)
            for base in ring_bases(group, a, {}, job.reduced):
                ring = group.ring(base, a, job.reduced)
                bundles = [_bundle(group, axes, base, a, i, done) for i in range(len(ring.devices))]
                all_to_all_phase(s, ring, bundles, on_axis(ring.wrap), start, tag)
            barrier = s.barrier(tag)


def _bundle(group: Group, axes: list[int], base: tuple[int, ...], a: int, i: int,
            done: list[int]) -> dict[int, tuple]:
    """Keys position i of the ring through ``base`` sends to each position c along axis ``a``."""
    q = base[:a] + (i,) + base[a + 1:]
    srcs = keys_where(group.sizes, {b: q[b] for b in axes if b not in done})
    out: dict[int, tuple] = {}
    for c in range(group.sizes[a]):
        dsts = keys_where(group.sizes, {b: q[b] for b in done} | {a: c})
        out[c] = tuple((0, src, dst) for src, dst in itertools.product(srcs, dsts))  # one part (payload)
    return out


def closed_form(job: Job, on_axis: OnAxis) -> float:
    """Sum over axes of one AllToAll phase along that axis (see the module docstring)."""
    sizes, total = job.group.sizes, 0.0
    for a, n_a in enumerate(sizes):
        chunk_bytes = job.key_bytes * job.group.n / n_a  # all a device sends to one position on the axis
        algorithm = on_axis(job.group.wraps[a])
        rings = [r for groups in job.rings for r in rings_along(groups, tuple(0 for _ in sizes), a, job.net.faulted)]
        fluid = _fluid(job, rings, algorithm, n_a) if len(sizes) == 1 else None
        if fluid is not None:
            total += shared_flow_time(fluid[0], chain_flows(fluid[1], fluid[2]), chunk_bytes)
            continue
        total += chain_phase_time(job.net, rings, algorithm.closed, algorithm.steps(n_a),
                                  algorithm.all_to_all_units, chunk_bytes, windows=True)
    return total


def _fluid(job: Job, rings: list[Any], algorithm: Any, n: int
           ) -> tuple[PortFold, list[list[int]], list[list[float]]] | None:
    """Ring 0's hops on their fair-shared ports (`timing.fold_ring_ports`), the phase's chains as hop indices and the
    chunks each chain's hops carry, where an AllToAll phase is priced by following its flows
    (`timing.shared_flow_time`): NIC rings, rotations of one another, over hops of different rates (NVLink and
    InfiniBand). Lock step is wrong there: a chain's hops carry fewer chunks as it goes (H - h + 1 at hop h of H),
    so the fast NVLink hops run ahead, a GPU's port is shared by the flows in flight on it (not by every ring at
    every step), and each flow pays its route's latency as it starts, not in a step every chain waits for. So too
    where chains share a port (a line through a switch: a GPU's port carries its hops both ways, and when the
    smaller bundle is done the larger speeds up, up to 7% on H100 switch:8 at 1 GB). None elsewhere (the profile
    is exact there: alike hops, each link its own: tori, lines, rings)."""
    if not rings or n * (n - 1) > RING_FLUID_HOPS:
        return None
    reach = {o: algorithm.reach(n, o) for o in range(n)}
    links = sorted({((o + k * d) % n, d) for o in range(n) for d, hops in reach[o] for k in range(hops)},
                   key=lambda link: (-link[1], link[0]))
    fold, period = None, 0
    if links == [(i, 1) for i in range(n)] and all(reach[o] == reach[0] for o in range(n)):  # a one-way ring
        period = ring_period(job.net, rings[0])  # a node folded onto the next too (`timing.fold_ring_ports`)
        fold = fold_ring_ports(job.net, rings, links, period) if period else None
        period = period if fold is not None else 0
    if fold is None:
        fold = fold_ring_ports(job.net, rings, links)
    if fold is None or not (len(set(fold.rate)) > 1 or fold.shared):
        return None
    index = {link: k % period if period else k for k, link in enumerate(links)}
    origins = range(period or n)  # with a period, the chains from o + period, ... are those from o moved on
    chains = [[index[((o + k * d) % n, d)] for k in range(hops)] for o in origins for d, hops in reach[o]]
    units = [[float(hops - k) for k in range(hops)] for o in origins for _, hops in reach[o]]
    return fold, chains, units
