"""AllGather, ReduceScatter and AllReduce over the axes of a group, in stages of ring phases.

The array is cut into parts (`simulator.collectives.layout`); each part gathers over every axis once, in
its own order, one axis per stage, as the plan of `simulator.collectives.stages` says. With
``multi_axis="parallel"`` (the default) the parts are sized, and the early ones started stages ahead, so
that every axis's links are equally busy in every stage: the stages end together and the collective
approaches the per-chip ingress bound (the number of stages is the one whose closed form is fastest);
``"sequential"`` moves the whole array over one axis after another. A ReduceScatter runs the plan
backwards (the largest steps first); an AllReduce is the ReduceScatter, then the AllGather. A stage ends
at a barrier (no device starts stage t+1 before every device of the group has finished stage t -- free
on wrapped axes, where all finish together). In a stage, the parts crossing one axis travel together:
each position sends one bundle (`simulator.collectives.chains.Bundle`) of all their keys.

Closed form (`closed_form`): the stages add; a stage lasts as long as its busiest axis, each axis's
phase priced by `simulator.collectives.timing.chain_phase_time` from the units each ring link carries at
each step (`RingAlgorithm.split_gather_units`, ``split_reduce_units``) and the bytes of the bundle a
device sends then (a part of u units per shard, having gathered axes of n_1 ... n_j, sends
u x n_1 ... n_j units). Parts on different axes are assumed never to share a link (true on tori and
meshes, where a neighbour step stays on its axis). Exact on tori, meshes, lines and switches. On
two-level rings (GPU nodes over InfiniBand, slices over DCN) the chain profile keeps the steps in lock
step, while in the simulation fast chains run ahead and queue at the slow crossing: within 1%
bandwidth-bound, up to about 60% longer or 15% shorter in between (tests/test_bounds.py). So a one-axis
phase of a ring algorithm that sends each bundle whole (`unidirectional`, `line`) over NIC rings that are
rotations of one another, with hops of different rates, is priced by following ring 0's flows on the
fair-shared links its hops cross (`_Pricer.fluid`, `simulator.collectives.timing.fold_ring_ports` and
``shared_flow_time``; up to 64 positions; a one-way ring's flows also folded node onto node): equal to the
simulation on nodes:2:8 to nodes:8:8, ideal and calibrated, 1 MB to 1 GB (ideal nodes:4:8 64 MB AllGather
169.44 us, where the lock-step form said 199.0; tests/test_nic_ring_closed_form.py,
tests/test_node_alternatives.py, tests/test_flow_closed_forms.py). That includes the line across three nodes or
more, whose middle NICs' inputs carry a hop from each neighbour node and their outputs one (calibrated nodes:4:8
`line` AllGather 1 MB 36.72 us, where the profile said 42.68), and the line's ReduceScatter, whose links serve
the chains in a fixed order (each hop also waits for the chain served before it). At scale the
chain's latency (about 2.4 us a hop) outgrows the busiest link's work and the chain term's other half
prices every NVLink hop as shared by all the rings crossing a GPU's port, which the simulation shares
about 2x, not 7x: 1 GB AllReduce on nodes:64:8 and nodes:128:8 simulates 14% and 20% shorter than the
closed form (`test_flat_rings_across_many_nodes_beat_their_closed_form`; link bytes agree exactly).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np

from simulator import analytic
from simulator.collectives.algorithm import Job
from simulator.collectives.chains import Bundle, gather_split_phase, reduce_split_phase
from simulator.collectives.groups import Group, keys_where, ring_bases, rings_along
from simulator.collectives.layout import Layout, integer_parts, timing_units
from simulator.collectives.schedule import Schedule
from simulator.collectives.stages import balanced, rotated, sequential, stage_counts
from simulator.collectives.timing import (
    RING_FLUID_HOPS,
    Flow,
    PhaseProfile,
    PortFold,
    chain_phase_profile,
    fold_ring_ports,
    ring_links,
    ring_period,
    route_latency,
    shared_flow_time,
    step_edges,
)
from simulator.engine.network import Network

OnAxis = Callable[[bool], Any]  #: an axis's wraparound -> the ring algorithm that runs on it


def stage_sequence(kind: str, stages: int) -> list[tuple[str, int]]:
    """(``"ag"`` gather or ``"rs"`` reduce, gather stage) of each stage in time order: a reduction runs the
    gather plan backwards."""
    gather = [("ag", t) for t in range(stages)]
    reduce = [("rs", t) for t in reversed(range(stages))]
    return {"all_gather": gather, "reduce_scatter": reduce}.get(kind, reduce + gather)


# -- choosing the plan ---------------------------------------------------------------------------------
def prepare(job: Job, on_axis: OnAxis) -> None:
    """Set ``job.layout``: the plan of ``job.multi_axis`` with the fastest closed form, in whole units."""
    sizes, wraps = job.group.sizes, job.group.wraps
    halves = any(on_axis(w).splits(n) for n, w in zip(sizes, wraps, strict=True))
    if job.shard_units is None:  # timing only: whole bytes
        units, quantum = timing_units(job.nbytes, job.group.n, len(job.rings), halves), 2 if halves else 1
    else:
        units, quantum = job.shard_units, 1
    k = len(sizes)
    if job.multi_axis == "sequential":
        candidates = [sequential(k)]
    else:
        beta = [_beta(job, on_axis, a) for a in range(k)] if k > 1 else [1.0]
        candidates = ([rotated(k)] if k > 1 else []) + [(balanced(sizes, beta, stages), stages)
                                                        for stages in stage_counts(k)]
    pricer = _Pricer(job, on_axis)
    best: tuple[float, Layout] | None = None
    for plan, stages in candidates:
        layout = Layout(integer_parts(plan, units, quantum), stages, units, job.unit_bytes)
        t = pricer.time(layout)
        if best is None or t < best[0] * (1 - 1e-12):  # ties: fewer stages
            best = (t, layout)
    assert best is not None
    job.layout, job.parts = best[1], len(best[1].parts)


def _beta(job: Job, on_axis: OnAxis, a: int) -> float:
    """Seconds per byte of a bundle that a phase along axis ``a`` keeps its busiest link busy."""
    algorithm = on_axis(job.group.wraps[a])
    ring = job.group.ring(tuple(0 for _ in job.group.sizes), a)
    n = len(ring.devices)
    edges = [e for i, d in ring_links(n, algorithm.closed) for e in step_edges(job.net, ring, i, d)]
    return algorithm.phase_load(n) / min(job.net.graph.edges[e]["bandwidth_bytes_per_s"] for e in edges)


# -- closed form ---------------------------------------------------------------------------------------
def closed_form(job: Job, on_axis: OnAxis) -> float:
    """Sum over stages of the busiest axis's phase (see the module docstring)."""
    return _Pricer(job, on_axis).time(job.layout)


class _Pricer:
    """Stage times of one job's layouts; each axis's phase profile is computed once and priced per bundle."""

    def __init__(self, job: Job, on_axis: OnAxis) -> None:
        self.job, self.on_axis = job, on_axis
        self.profiles: dict[tuple[str, int, float], PhaseProfile] = job.cache.setdefault("multi_axis", {})

    def time(self, layout: Layout) -> float:
        sizes = self.job.group.sizes
        total = 0.0
        for what, stage in stage_sequence(self.job.kind, layout.stages):
            phases = [self.phase(what, a, layout.bundle_units(stage, a, sizes), layout.unit_bytes)
                      for a in range(len(sizes)) if layout.active(stage, a)]
            total += max(phases, default=0.0)
        return total

    def phase(self, what: str, a: int, units: tuple[int, int], unit_bytes: float) -> float:
        """Seconds of one phase along axis ``a`` moving bundles of ``units`` (first, second halves)."""
        job = self.job
        algorithm = self.on_axis(job.group.wraps[a])
        split = units[0] / sum(units) if sum(units) and algorithm.splits(job.group.sizes[a]) else 0.5
        key = (what, a, split)
        fluid = self.fluid(what, a, algorithm)
        if fluid is not None:
            times: dict[tuple[str, int, float], float] = job.cache.setdefault("multi_axis_fluid_times", {})
            nbytes = sum(units) * unit_bytes
            if (what, a, nbytes) not in times:
                times[(what, a, nbytes)] = shared_flow_time(fluid[0], fluid[1], nbytes)
            return times[(what, a, nbytes)]
        if key not in self.profiles:
            zero = tuple(0 for _ in job.group.sizes)
            rings = [r for groups in job.rings for r in rings_along(groups, zero, a, job.net.faulted)]
            # the profile is a function of the network's links, the algorithm, the phase and the rings alone (not of
            # the job's bytes): jobs on one network share it -- a step prices each of its collectives' groups in its
            # estimate and again when it plans them (`Network.priced`)
            shared = ("multi_axis", algorithm.name, what, split, tuple((tuple(r.devices), r.wrap) for r in rings))
            profile = job.net.priced.get(shared)
            if profile is None:
                per_step = algorithm.split_gather_units if what == "ag" else algorithm.split_reduce_units
                profile = job.net.priced[shared] = chain_phase_profile(
                    job.net, rings, algorithm.closed, algorithm.steps(job.group.sizes[a]),
                    lambda n, i, d, h: per_step(n, i, d, h, split), _table(algorithm, what, split),
                    windows=True, serial=what == "rs" and algorithm.serial_reduce)
            self.profiles[key] = profile
        return self.profiles[key].time(sum(units) * unit_bytes)


    def fluid(self, what: str, a: int, algorithm: Any) -> tuple[PortFold, list[Flow]] | None:
        """Ring 0's hops on their fair-shared ports (`timing.fold_ring_ports`) and the phase's flows, where a one-axis
        phase is priced by following its flows (`timing.shared_flow_time`): NIC rings, rotations of one another,
        over hops of different rates, which the chain profile keeps in lock step -- the chains of a ring algorithm
        that sends each bundle whole (a one-way ring, a line; not the halves of a bidirectional ring). A line's
        ReduceScatter serves each link in a fixed order, the farthest owner first (`chains.reduce_split_phase`):
        each of its hops there also waits for the hop of the chain served before it. None elsewhere (the profile is
        exact there: alike hops, tori)."""
        job = self.job
        cache: dict[tuple[str, int], Any] = job.cache.setdefault("multi_axis_fluid", {})
        if (what, a) in cache:
            return cache[(what, a)]
        cache[(what, a)] = None
        n = job.group.sizes[a]
        if len(job.group.sizes) != 1 or len(job.rings) < 2 or n * (n - 1) > RING_FLUID_HOPS or algorithm.splits(n):
            return None
        chains: list[tuple[int, int, int, list[tuple[int, int]]]] = []  # (direction, hops, origin, ring links)
        for o in range(n):
            ways = algorithm.gather_chains(n, o) if what == "ag" else algorithm.reduce_chains(n, o)
            if any(half is not None for *_, half in ways):
                return None  # a chain that carries only half its bundle somewhere
            for d, hops, _ in ways:
                first = o if what == "ag" else o - hops * d  # a reduction's chain ends at its owner
                chains.append((d, hops, o, [((first + k * d) % n, d) for k in range(hops)]))
        serial = what == "rs" and algorithm.serial_reduce
        if serial:
            chains.sort(key=lambda c: (-c[0], -c[1], c[2]))
        links = sorted({link for *_, hop_links in chains for link in hop_links}, key=lambda link: (-link[1], link[0]))
        zero = tuple(0 for _ in job.group.sizes)
        rings = [r for groups in job.rings for r in rings_along(groups, zero, a, job.net.faulted)]
        fold, period = None, 0
        if links == [(i, 1) for i in range(n)] and not serial and all(c[:2] == chains[0][:2] for c in chains):
            # a one-way ring whose chains are all alike: fold a node onto the next too
            period = ring_period(job.net, rings[0])
            fold = fold_ring_ports(job.net, rings, links, period) if period else None
            period = period if fold is not None else 0
        if fold is None:
            fold = fold_ring_ports(job.net, rings, links)
        if fold is None or len(set(fold.rate)) < 2:  # not alike rings, or hops all alike (the profile is exact)
            return None
        index = {link: k % period if period else k for k, link in enumerate(links)}
        flows: list[Flow] = []
        ahead: dict[tuple[int, int], int] = {}  # ring link -> the flow of the chain served on it before
        for _, _, o, hop_links in chains:
            if period and o >= period:
                continue  # the chains from o - period, o - 2 period, ... stand for it
            for h, link in enumerate(hop_links):
                deps = ((len(flows) - 1,) if h else ()) + ((ahead[link],) if serial and link in ahead else ())
                if serial:
                    ahead[link] = len(flows)
                flows.append((index[link], 1.0, deps))
        cache[(what, a)] = (fold, flows)
        return cache[(what, a)]


def _table(algorithm: Any, what: str, split: float) -> Any:
    """The algorithm's whole-phase units table for `chain_phase_profile` (None: it has none)."""
    if algorithm.units_table(what, 2, 1, split) is None:
        return None

    def table(n: int, d: int) -> np.ndarray:
        return algorithm.units_table(what, n, d, split)

    table.uniform = algorithm.uniform_rows  # type: ignore[attr-defined]  # one row for every position
    return table


# -- schedule ------------------------------------------------------------------------------------------
def build(job: Job, groups: list[Group], on_axis: OnAxis, s: Schedule) -> None:
    """Add the stages of every group: every axis crossed in a stage runs its phase, then all meet at a barrier."""
    layout = job.layout
    s.expect(len(groups) * _transfers(job, groups[0], on_axis))
    for group in groups:
        barrier = None
        for what, stage in stage_sequence(job.kind, layout.stages):
            tag = (what, id(group), stage)
            axes = [a for a in range(len(group.sizes)) if layout.active(stage, a)]
            for a in axes:
                _phase(job, group, on_axis, s, what, stage, a, barrier, tag)
            if axes:
                barrier = s.barrier(tag)


def _transfers(job: Job, group: Group, on_axis: OnAxis) -> int:
    """Transfers `build` adds for one group, from the chains' hop counts (`RingAlgorithm.gather_chains`,
    ``reduce_chains``): one per hop of every chain, on every ring of each phase (a bound for the memory
    check; barriers aside)."""
    total = 0
    for what, stage in stage_sequence(job.kind, job.layout.stages):
        for a in range(len(group.sizes)):
            if not job.layout.active(stage, a):
                continue
            n, algorithm = group.sizes[a], on_axis(group.wraps[a])
            chains = algorithm.reduce_chains if what == "rs" else algorithm.gather_chains
            hops = sum(h for o in range(n) for _, h, _ in chains(n, o))
            total += hops * len(ring_bases(group, a, {}, job.reduced))
    return total


def _phase(job: Job, group: Group, on_axis: OnAxis, s: Schedule, what: str, stage: int, a: int,
           barrier: int | None, tag: Any) -> None:
    """The phase along axis ``a`` at ``stage``: on every ring of that axis, each position's bundle."""
    layout = job.layout
    start = (lambda i: []) if barrier is None else (lambda i: [barrier])
    run = reduce_split_phase if what == "rs" else gather_split_phase
    first, second = layout.bundle_units(stage, a, group.sizes)
    timing = Bundle((), (first + second) * layout.unit_bytes,
                    (((), first * layout.unit_bytes), ((), second * layout.unit_bytes)))
    for base in ring_bases(group, a, {}, job.reduced):
        ring = group.ring(base, a, job.reduced)
        bundles = [_keys(layout, group, what, stage, a, base, i) if job.numeric else timing
                   for i in range(len(ring.devices))]
        run(s, ring, bundles, on_axis(ring.wrap), start, tag)


def _keys(layout: Layout, group: Group, what: str, stage: int, a: int, base: tuple[int, ...], i: int) -> Bundle:
    """The bundle ring position i sends: for a gather, the pieces of the shards that agree with the device on
    every axis the part has not gathered yet; for a reduction, of those that agree with it on every axis
    the part has reduced already and, on this axis, equal i."""
    halves: tuple[list, list] = ([], [])
    nbytes = [0.0, 0.0]
    for p, j in layout.active(stage, a):
        part = layout.parts[p]
        if what == "rs":
            fixed = {b: base[b] for b in part.order[j + 1:]}
        else:
            fixed = {b: base[b] for b in range(len(base)) if b not in part.order[:j] and b != a}
        shards = keys_where(group.sizes, fixed | {a: i})
        for h in (0, 1):
            halves[h].extend((p, shard, h) for shard in shards)
            nbytes[h] += len(shards) * part.halves[h] * layout.unit_bytes
    first, second = tuple(halves[0]), tuple(halves[1])
    return Bundle(first + second, nbytes[0] + nbytes[1], ((first, nbytes[0]), (second, nbytes[1])))


# -- the book's estimate -------------------------------------------------------------------------------
def book_time(kind: str, group: Group, net: Network, parts: int, nbytes: float) -> float | None:
    """The book's estimate max(latency x sum(n) / 2, V / (k W)) for axes that all wrap (x2 for AllReduce),
    k = ``parts``; None where the book gives none (other kinds, lines, switches)."""
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
