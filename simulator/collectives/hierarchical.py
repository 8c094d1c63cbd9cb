"""Hierarchical AllReduce, AllGather and ReduceScatter over two or three levels.

Two levels: slices over DCN, nodes over InfiniBand. Three (``hierarchical3*``,
`simulator.collectives.levels.three_levels`): GPU nodes under a leaf per rail, units under the spine
(``fattree:K:G``, ``superpod:N``); TPU slices under a pod's DCN switch, pods under a slower core
(``multipod:P:K:AxB``).

AllReduce: reduce-scatter inside every domain on its fast links (ring phases along each ICI axis, or a
ring through the node's NVLink switch), so chip (k, b) holds domain k's partial sum of the 1/m of the
array that inner position b owns; then an AllReduce of that 1/m over the rail of the K chips at inner
position b -- each chip on its own DCN port or NIC, all m rails at once (per-rail); then an all-gather
inside every domain. ReduceScatter is the first two steps (the rail only reduce-scatters); AllGather
gathers over the rails first, so the slow level moves the least data. Inner phases use the torus trick
of `simulator.collectives.multi_axis`: the array is cut into parts, each part running the inner axes
in its own rotated order, so every axis's links stay busy; on an even wrapped axis each bundle's two halves
(whole parts) go opposite ways on the antipodal hop, as `multi_axis` sends them, so every link of a ring of 4
carries 1.5 bundles a phase, not 2 (issue 31: the ICI phases of multislice:4:4x4x4 were 4/3 their bytes).

Three levels split the rail step in two: the Q chips at one inner position inside a unit / pod reduce-
scatter their 1/m (each chip on its own NIC / DCN port, through its leaf / pod switch), then the P chips
that share an inner position and a place in their unit / pod all-reduce the 1/(mQ) they own (through the
spine / core), then the all-gathers run back out to in. Each tier's rings are priced together, so the
spine or core link they share is counted (`_tier_rings`), and run both ways round (a bidirectional ring
through the switches: both directions leave a chip by its one NIC or DCN port, so the bytes per port are
a one-way ring's, in half the steps -- 16 where a unit of 32 nodes would take 31).

Two variants (each for two and three levels):

- ``hierarchical``: the levels run one after another (a barrier between phases), as XLA runs a
  multislice AllReduce (ICI reduce-scatter, DCN all-reduce, ICI all-gather) and Horovod's hierarchical
  AllReduce. Closed form: the SUM of the level terms, each phase priced from first principles by
  `simulator.collectives.timing.chain_phase_time` (the slowest chain or the busiest link);
- ``hierarchical_pipelined``: the array is cut into ``PIPELINE`` chunks that flow through the levels
  in order (chunk c enters a phase once chunk c-1 has left it), as NCCL pipelines its NVLS-tree and
  CollNet levels. Closed form: ``sum_x t_x + (c-1) max(max_x t_x, W_in + A_in, W_out + A_out)`` for
  per-chunk phase times t_x -- the first chunk crosses every phase, the others follow one period apart:
  the slowest phase, or a level's link work W plus one of its phases' chain latency A (phases sharing
  links advance side by side, so the links idle for one chain's latency; not inside an AllReduce, whose
  inner links each carry a reduce-scatter chain and an all-gather chain of two chunks at once, one sending
  while the other waits out a hop's latency: W_in alone, as the simulation shows -- nodes:2:8, 1 GB: the
  pair takes 0.2456 ms a chunk against W_in = 0.2430 and W_in + A_in = 0.2572; closed form 4.29 -> 4.08 ms
  against 3.99 simulated, nodes:4:8 4.39 -> 4.28 against 4.27). W_in is the busiest inner link's bytes over
  all inner phases over its bandwidth (they share the fast links; a line's phases load opposite link
  directions, so the sum of each phase's busiest link overstated it 1.5x on multislice:2:4x4's unwrapped
  axes); W_out is the busiest physical link's bytes over all outer
  phases over its bandwidth (a chip's NIC or DCN port carries every tier's rails, a spine or core link only
  its tier's). On a multislice the pipelined variant's rail phases run direct (`Hierarchical.direct`): each
  bundle straight to its K - 1 peers through the DCN switch, one hop's latency where a ring pays K - 1, and
  each transfer split from its latency so the next chunk's bytes follow at once: the rail phases' period is
  W_out alone (multislice:4:4x4x4 at 1 GB: AllGather 2.749 -> 2.020 ms, 1.07x the bound). An AllReduce whose
  inner links pace it takes at least c W_in, and they idle only at the end, (W_rs / W_in) D while the last chunk
  is out on the rails (D: its outer phases; W_rs: the reduce-scatters' share of W_in): the closed form is the
  larger of that and the chained form without W_in (multislice:2:4x4x4 at 100 MB: 0.432 -> 0.392 ms against
  0.391 simulated; nodes:2:8 at 1 GB 4.083 -> 3.972 against 3.990).
  About the MAX of the level terms for many chunks, where the sequential variant pays their
  SUM. Two levels use 4 chunks, three use 8 (their fill, the sum of one chunk's phases, is longer). The
  simulation runs within -2.5% / +3.3% of it on two levels (GPU nodes and multislices, every kind, 1 KB to
  1 GB; the fill, which the sum of one chunk's phases prices as if alone, is the rest) where the phases are not
  latency-bound -- an AllReduce's closed form, at the count `prepare` picks, within -4% / +5% of it on nodes:2:8
  and multislice:2:4x4x4 from 16 MiB to 1 GiB (issue 31: at 16 chunks it had been 23% short) --, within -12% / +13% of
  it on three (fat trees and pods, every kind, 1 KB to 1 GB)
  (tests/test_switched_algorithms.py, tests/test_three_levels.py). The sequential variant equals its closed form exactly
  on two levels with one switch above the domains and on three levels; where two-level rails cross a shared
  core or spine link, within 4%. ``chunks`` (``--chunks``) sets the chunks flowing through the levels; without
  it `prepare` picks them.

  Tried and left out (issue 32): chunks following each other hop by hop with no barrier (a chip's chains starting
  on its own arrivals, each link taking two chunks at once, the next entering half way through the hops of the one
  before). Under fair sharing the two chunks on a link start each hop together and so wait out its latency
  together, and each chunk's pass takes about two periods, which lengthens the fill and bunches the last chunks:
  1 GB on superpod:4 AllGather 3.393 -> 3.257 ms, AllReduce +1.5%; superpod:2 AllGather -4.1%, AllReduce +6.1%;
  16 nodes of 8 H100s (8 a leaf) AllGather +4.5%, ReduceScatter -6.4% -- no better on the whole than the phase by
  phase pipeline here.
"""
from __future__ import annotations

import functools
import itertools
import math
from collections import Counter
from typing import Any

import numpy as np

from simulator.collectives import payload
from simulator.collectives.algorithm import Algorithm, Job, get_algorithm, register
from simulator.collectives.chains import Bundle, gather_phase, gather_split_phase, reduce_phase, reduce_split_phase
from simulator.collectives.groups import Group, Ring, keys_where
from simulator.collectives.levels import TWO_LEVEL_KINDS, Levels, three_levels, two_levels
from simulator.collectives.ring import RingAlgorithm
from simulator.collectives.schedule import Schedule
from simulator.collectives.timing import PhaseProfile, chain_phase_profile, ring_links, route_latency, step_edges
from simulator.engine.network import Network

#: inner parts per chunk: an equal share for each rotation over 1, 2 or 3 inner axes, each share in two halves of
#: whole parts (an even wrapped axis sends them opposite ways on its antipodal hop, `_halves`)
PARTS = 12
Stage = tuple[str, str, int]  #: ("rs" or "ag", "in" or "out", index into the part's inner axis order)


def stages(kind: str, n_axes: int, n_tiers: int = 1) -> list[Stage]:
    """The phases of ``kind``, in time order: reductions inside first, then tier by tier outwards (fastest
    first); gathers from the slowest tier inwards."""
    rs = [("rs", "in", j) for j in range(n_axes)] + [("rs", "out", t) for t in range(n_tiers)]
    ag = [("ag", "out", t) for t in reversed(range(n_tiers))] + [("ag", "in", j) for j in range(n_axes)]
    if kind == "all_gather":
        return ag
    if kind == "reduce_scatter":
        return rs
    return rs + ag


class Hierarchical(Algorithm):
    """Reduce-scatter inside each domain, the rails across domains, all-gather inside (see the module)."""

    name = "hierarchical"
    summary = "two levels in turn: reduce-scatter inside each slice/node, the rails across, all-gather inside"
    kinds = ("all_gather", "reduce_scatter", "all_reduce")
    topologies = TWO_LEVEL_KINDS
    nic_rings = False
    pipeline = 1  #: chunks flowing through the levels
    three = False  #: split the domains into units / pods as well (`simulator.collectives.levels.three_levels`)
    tier_ring = "unidirectional"  #: the ring each outer tier runs
    #: pipelined, on a multislice: the rail phases send each bundle straight to its K - 1 peers through the one DCN
    #: switch (`_direct_phase`), pieces split from their latency (`direct`)
    direct_tiers = False

    def levels(self, net: Network, group: Group) -> Levels | str:
        """The group's levels (two, or three for `three`), or why it has none."""
        return three_levels(net, group) if self.three else two_levels(net, group)

    def direct(self, net: Network, lv: Levels) -> bool:
        """Whether the rail phases run direct (`direct_tiers`): on one tier of slices under one DCN switch, where
        every pair of a rail's chips is one switch apart. A ring of K there moves the same bytes through each DCN
        port as sending every bundle straight to its K - 1 peers at once, but pays K - 1 hops' latency where direct
        pays one; and the pieces are split from their latency (`Schedule.add_split`): a chunk's bytes leave a port
        as soon as the chunk before's have left it, so the DCN port never idles through a latency between chunks
        (issue 31: multislice:4:4x4x4, every chunk's 3-step ring paid 60 us a chunk of 294)."""
        return (self.direct_tiers and lv.kind == "multislice" and len(lv.tiers) == 1
                and not net.graph.graph.get("pods", 0) > 1)

    def unfit(self, kind: str, net: Network, groups: list[Group]) -> str | None:
        why = super().unfit(kind, net, groups)
        if why is not None:
            return why
        levels = self.levels(net, groups[0])
        return levels if isinstance(levels, str) else None

    def parts(self, kind: str, group: Group, multi_axis: str) -> int:
        return PARTS * self.pipeline

    def chunks_of(self, job: Job) -> int:
        """Chunks flowing through the levels in ``job``: `pipeline`, or what `prepare` chose -- read from
        ``job.parts`` (`PARTS` a chunk), which travels with the job. Not from ``job.cache``: a calibrated closed
        form prices the job on a copy of its network with the cache emptied (`simulator.collectives.protocol._on`),
        and a count kept there fell back to `pipeline` while ``key_bytes`` stayed cut for the chosen count -- the
        closed form priced a quarter of the array where `prepare` chose 16 chunks (issue 31: nodes:2:8 calibrated
        AllReduce under Simple, 433 us at 256 MiB, below its 465 us at 64 MiB, where 1.85 ms was simulated)."""
        assert job.parts % PARTS == 0, f"{self.name}: {job.parts} parts is not a whole number of chunks"
        return job.parts // PARTS

    def prepare(self, job: Job) -> None:
        """Pipelined, timing only: the chunk count among half `pipeline`, `pipeline`, twice and four times it whose
        closed form is the least (issue 31: more chunks shorten the fill on small systems -- multislice:2:4x4
        AllGather 1.24x the bound at 4 chunks, 1.07x at 16 -- while on large ones their phases' latencies add up:
        superpod:4 AllGather of 1 GB, 3.35 ms closed form at 8, 3.28 at 4). An AllReduce's counts are ranked by
        their worst case (`closed_form` ``worst``): its inner links' period lies between their bytes alone and their
        bytes plus a phase's chain latency, as the offset between the reduce-scatter and all-gather chains sharing them
        falls, which no closed form here prices; ranked by the bytes alone, many small chunks won where the latency is
        most of a phase (issue 31: nodes:2:8 at 128 MiB, 16 chunks, 0.546 ms closed form against 0.710 simulated;
        now 4 chunks, 0.569 against 0.592; calibrated under Simple 1.19 -> 0.89 ms). A count the
        caller gave (``chunks``, ``--chunks``) is the chunks flowing through the levels, as it is."""
        if self.pipeline == 1 or job.numeric:
            return
        if not job.auto_chunks:
            count, job.chunks = job.chunks, 1  # the pieces are the pipeline's chunks, not cuts of each key
            self._set_chunks(job, count)
            return
        best: tuple[float, int] | None = None
        for count in (self.pipeline, self.pipeline // 2, 2 * self.pipeline, 4 * self.pipeline):
            self._set_chunks(job, count)
            t = self.closed_form(job, worst=True)
            if best is None or t < best[0] * (1 - 1e-9):
                best = (t, count)
        assert best is not None
        self._set_chunks(job, best[1])

    def _set_chunks(self, job: Job, count: int) -> None:
        job.parts = PARTS * count
        job.key_bytes = math.ceil(job.nbytes / payload.n_keys(job.kind, job.group.n, job.parts, job.chunks))

    # -- schedule --------------------------------------------------------------------------------------
    def build(self, job: Job, schedule: Schedule) -> None:
        for group in job.groups:
            levels = self.levels(job.net, group)
            assert isinstance(levels, Levels)
            direct = self.direct(job.net, levels)
            done: dict[int, int] = {}  # stage -> barrier of the previous chunk (the pipeline keeps order)
            for chunk in range(self.chunks_of(job)):
                before: list[int] = []
                for x, stage in enumerate(stages(job.kind, len(levels.sizes), len(levels.tiers))):
                    deps = before + ([done[x]] if x in done else [])
                    tags = self._stage(job, levels, schedule, stage, chunk, deps, (id(group), chunk, x), direct)
                    arrived = schedule.barrier(tags)
                    # a direct rail phase: the next chunk's bytes follow once this chunk's have left every port
                    done[x] = schedule.barrier([("bytes", t) for t in tags]) if direct and stage[1] == "out" \
                        else arrived
                    before = [arrived]

    def _stage(self, job: Job, lv: Levels, s: Schedule, stage: Stage, chunk: int, deps: list[int],
               tag: Any, direct: bool = False) -> list[Any]:
        what, level, j = stage
        run = reduce_phase if what == "rs" else gather_phase
        n_axes, tags = len(lv.sizes), []
        for r in range(n_axes):
            parts = [p for p in range(chunk * PARTS, (chunk + 1) * PARTS) if p % n_axes == r]
            rtag = (*tag, r)
            tags.append(rtag)
            start = lambda i, d=deps: d  # noqa: E731  (every chain waits for the phase before)
            if level == "out":
                for b in keys_where(lv.sizes, {}):
                    for k in (k for k in range(lv.outer) if lv.digits(k)[j] == 0):
                        ring = lv.tier_ring(j, k, b)
                        if job.numeric:
                            bundles = [_keys(job, parts, [lv.position[(kk, b)] for kk in _tier_bundle(lv, j, k, i)])
                                       for i in range(lv.tiers[j])]
                        else:  # a bundle's count: the parts of each slower tier's domains
                            bundles = [len(parts) * math.prod(lv.tiers[j + 1:])] * lv.tiers[j]
                        if direct:
                            _direct_phase(s, ring, bundles, what, deps, rtag)
                        else:
                            run(s, ring, bundles, _ring(self.tier_ring), start, rtag)
                continue
            order = _phase_order(job.kind, what, r, n_axes)
            a = order[j]
            split = reduce_split_phase if what == "rs" else gather_split_phase
            for base in keys_where(tuple(1 if x == a else n for x, n in enumerate(lv.sizes)), {}):
                fixed = _fixed(what, order, j, base)
                if job.numeric:  # the same for every domain's ring: keys of every domain's chips
                    halves = [_halves(job, parts, [lv.position[(kk, bb)] for bb in keys_where(lv.sizes, fixed | {a: i})
                                                   for kk in range(lv.outer)]) for i in range(lv.sizes[a])]
                else:
                    free = math.prod(n for x, n in enumerate(lv.sizes) if x != a and x not in fixed)
                    halves = [_halves(job, parts, lv.outer * free)] * lv.sizes[a]
                for k in range(lv.outer):
                    split(s, lv.inner_ring(k, base, a), halves, lv.inner_algorithm(a), start, rtag)
        return tags

    # -- closed form -----------------------------------------------------------------------------------
    def stage_times(self, job: Job, scale: float = 1.0) -> list[tuple[str, float]]:
        """(level, seconds) of each phase of one chunk (bytes x ``scale``): the slowest rotation inside, all
        rotations together on the rails."""
        lv = self.levels(job.net, job.group)
        assert isinstance(lv, Levels)
        n_axes, out, key = len(lv.sizes), [], job.key_bytes * scale
        per_rotation = [len([q for q in range(PARTS) if q % n_axes == r]) for r in range(n_axes)]
        for what, level, j in stages(job.kind, n_axes, len(lv.tiers)):
            if level == "out":
                algorithm = _ring(self.tier_ring)
                units = algorithm.reduce_units if what == "rs" else algorithm.gather_units
                free = math.prod(lv.tiers[j + 1:])  # positions of the slower tiers a bundle still holds
                steps = algorithm.steps(lv.tiers[j])
                table = _uniform_table(algorithm, what, units)
                if self.direct(job.net, lv):
                    profile = _profile(job, ("direct", j), lambda j=j: _direct_profile(job.net,
                                                                                       _tier_rings(job.net, lv, j)))
                else:
                    profile = _profile(job, ("out", what, j), lambda j=j, units=units, steps=steps, table=table:
                                       chain_phase_profile(job.net, _tier_rings(job.net, lv, j), True, steps, units,
                                                           table))
                out.append(("out", profile.time(key * PARTS * free)))
                continue
            times = []
            for r in range(n_axes):
                order = _phase_order(job.kind, what, r, n_axes)
                a = order[j]
                held = order[j + 1:] if what == "rs" else order[:j]
                unit = key * per_rotation[r] * lv.outer * math.prod(lv.sizes[x] for x in held)
                algorithm = lv.inner_algorithm(a)
                per_step = algorithm.split_reduce_units if what == "rs" else algorithm.split_gather_units
                units = functools.partial(_even, per_step)
                ring = lv.inner_ring(0, tuple(0 for _ in lv.sizes), a)
                profile = _profile(job, ("in", what, j, r), lambda ring=ring, algorithm=algorithm, units=units, a=a:
                                   chain_phase_profile(job.net, [ring], algorithm.closed, algorithm.steps(lv.sizes[a]),
                                                       units))
                times.append(profile.time(unit))
            out.append(("in", max(times)))
        return out

    def closed_form(self, job: Job, worst: bool = False) -> float:
        """Seconds by the closed form (see the module docstring); ``worst``: an AllReduce's inner links taking each
        chunk's bytes and one phase's chain latency beside them (``W_in + A_in``, the reduce-scatter and all-gather
        chains on them in step), the most fair sharing can make of them, which `prepare` ranks chunk counts by."""
        times = self.stage_times(job)
        total = sum(t for _, t in times)
        if self.chunks_of(job) == 1:
            return total
        # bandwidth-only part of each inner phase (a phase's time grows linearly in its bytes): what occupies
        # the fast links; the outer phases' bytes over each uplink, core or spine link they cross
        # phases that share links advance their chains side by side, so the links idle for one chain's
        # latency (a phase's time at no bytes: 2 t(S) - t(2S)) beside the work of them all -- on a tier ring
        # run both ways, for half of it: its port idles only while the chains of both directions wait
        lv = self.levels(job.net, job.group)
        assert isinstance(lv, Levels)
        ways = [1 if level == "in" else _directions(self.tier_ring, lv.tiers[j])
                for _, level, j in stages(job.kind, len(lv.sizes), len(lv.tiers))]
        split = [(level, t2 - t, (2 * t - t2) / w) for (level, t), (_, t2), w in zip(
            times, self.stage_times(job, 2.0), ways, strict=True)]
        inner_work = self._inner_work(job)
        inner = max(inner_work.values(), default=0.0)
        outer = max(self._outer_work(job).values(), default=0.0)
        # AllReduce: every inner link carries a reduce-scatter chain and an all-gather chain of two chunks at once,
        # and while one waits out a hop's latency the other sends, so the links' period is their bytes alone
        wait = 0.0 if job.kind == "all_reduce" else max((a for level, _, a in split if level == "in"), default=0.0)
        # direct rail phases: a chunk's bytes follow the last chunk's out of each port, its latency apart from them,
        # so a rail phase's period is its bytes alone
        direct = self.direct(job.net, lv)
        outer_period = outer + (0.0 if direct else max((a for level, _, a in split if level == "out"), default=0.0))
        slowest = max(w if direct and level == "out" else t for (level, w, _), (_, t) in zip(split, times, strict=True))
        c = self.chunks_of(job)
        if job.kind != "all_reduce" or not inner_work:
            return total + (c - 1) * max(inner + wait, outer_period, slowest)
        # AllReduce paced by its inner links: they work without a break (reduce-scatters of later chunks fill in while
        # a chunk is out on the rails) but at the end: the last chunk's reduce-scatter done, its all-gather waits out
        # its outer phases D, while the all-gathers of the chunks out before it arrive at the rate the links took
        # their reduce-scatters, W_ag / W_in of the links' time: they idle (1 - W_ag / W_in) D = (W_rs / W_in) D
        # (multislice:2:4x4x4, 100 MB: 0.432 ms by the chained form, 0.391 simulated)
        busiest = max(inner_work, key=inner_work.__getitem__)
        reducing = self._inner_work(job, "rs")[busiest]
        out = sum(t for level, t in times if level == "out")
        lag = max((a for level, _, a in split if level == "in"), default=0.0) if worst else 0.0
        return max(total + (c - 1) * max(outer_period, slowest), c * (inner + lag) + reducing / inner * out)

    def _inner_work(self, job: Job, only: str | None = None) -> Counter:
        """Seconds each physical link of a domain spends on one chunk's inner phases: every ring link's units over
        all steps of each phase, times a unit's bytes (as `stage_times` prices them), over the bandwidth of each
        link on its route. A line's phases load its link directions unevenly (a ReduceScatter the links towards
        one end, its AllGather the other way), so their busiest links differ from phase to phase; one domain's
        rings through inner position 0 stand for all (every ring of an axis is alike, on links of its own).
        ``only`` ("rs" or "ag"): the reduce-scatter or all-gather phases alone."""
        lv = self.levels(job.net, job.group)
        assert isinstance(lv, Levels)
        g, n_axes, work = job.net.graph, len(lv.sizes), Counter[Any]()
        per_rotation = [len([q for q in range(PARTS) if q % n_axes == r]) for r in range(n_axes)]
        for what, level, j in stages(job.kind, n_axes, len(lv.tiers)):
            if level != "in" or only not in (None, what):
                continue
            for r in range(n_axes):
                order = _phase_order(job.kind, what, r, n_axes)
                a = order[j]
                held = order[j + 1:] if what == "rs" else order[:j]
                unit = job.key_bytes * per_rotation[r] * lv.outer * math.prod(lv.sizes[x] for x in held)
                algorithm = lv.inner_algorithm(a)
                per_step = algorithm.split_reduce_units if what == "rs" else algorithm.split_gather_units
                ring, n = lv.inner_ring(0, tuple(0 for _ in lv.sizes), a), lv.sizes[a]
                for i, d in ring_links(n, algorithm.closed):
                    units = sum(per_step(n, i, d, h, 0.5) for h in range(1, algorithm.steps(n) + 1))
                    for e in step_edges(job.net, ring, i, d) if units else ():
                        work[e] += units * unit / g.edges[e]["bandwidth_bytes_per_s"]
        return work

    def _outer_work(self, job: Job) -> Counter:
        """Seconds each physical link spends on one chunk's outer phases: every ring hop's units over all
        steps, times a unit's bytes, over the bandwidth of each link on its route."""
        lv = self.levels(job.net, job.group)
        assert isinstance(lv, Levels)
        algorithm, g = _ring(self.tier_ring), job.net.graph
        work: Counter[Any] = Counter()
        for what, level, j in stages(job.kind, len(lv.sizes), len(lv.tiers)):
            if level != "out":
                continue
            if self.direct(job.net, lv):  # a unit from every position to every other, on each of its links
                unit = job.key_bytes * PARTS * math.prod(lv.tiers[j + 1:])
                for ring in _tier_rings(job.net, lv, j):
                    for a, b in itertools.permutations(ring.devices, 2):
                        path = job.net.routes(a, b)[0]
                        for e in zip(path, path[1:], strict=False):
                            work[e] += unit / g.edges[e]["bandwidth_bytes_per_s"]
                continue
            load = algorithm.reduce_load if what == "rs" else algorithm.gather_load  # units a ring link carries
            unit = job.key_bytes * PARTS * math.prod(lv.tiers[j + 1:])
            n = lv.tiers[j]
            for ring in _tier_rings(job.net, lv, j):
                for i, d in ring_links(n, True):
                    carried = load(n, i, d) * unit
                    for e in step_edges(job.net, ring, i, d) if carried else ():
                        work[e] += carried / g.edges[e]["bandwidth_bytes_per_s"]
        return work


class HierarchicalPipelined(Hierarchical):
    """`Hierarchical` with the array cut into chunks that flow through the levels in order."""

    name = "hierarchical_pipelined"
    summary = "two levels pipelined: the array in 4 chunks flows inside, across and inside again"
    pipeline = 4
    direct_tiers = True


def _direct_phase(s: Schedule, ring: Ring, bundles: list[tuple | int], what: str, deps: list[int], tag: Any) -> None:
    """A rail phase straight through the switch: AllGather (``what`` "ag"), position o's bundle to every other
    position; ReduceScatter ("rs"), every other position's partial of bundle o added into o's. Each transfer is
    split from its latency (`Schedule.add_split`), all of them waiting for ``deps``."""
    devices, n = ring.devices, len(ring.devices)
    for o in range(n):
        for i in range(n):
            if i != o:
                a, b, op = (o, i, "copy") if what == "ag" else (i, o, "add")
                s.add_split(devices[a], devices[b], bundles[o], op, deps, tag, ring.slots[b])


def _direct_profile(net: Network, rings: list[Ring]) -> PhaseProfile:
    """`_direct_phase`'s `PhaseProfile` over ``rings`` at once, one unit a transfer: each transfer pays its route's
    latency and its unit at the share its busiest link leaves it (that link's transfers share it fairly); the
    busiest link carries all its transfers' units."""
    flows = [net.routes(ring.devices[a], ring.devices[b])[0] for ring in rings
             for a in range(len(ring.devices)) for b in range(len(ring.devices)) if a != b]
    edges = [list(zip(path, path[1:], strict=False)) for path in flows]
    load: Counter[Any] = Counter(e for route in edges for e in route)
    g = net.graph
    per_byte = {e: count / g.edges[e]["bandwidth_bytes_per_s"] for e, count in load.items()}
    chains = {(route_latency(net, route), max(per_byte[e] for e in route)) for route in edges}
    return PhaseProfile(tuple(sorted(chains)), max(per_byte.values(), default=0.0))


def _ring(name: str) -> RingAlgorithm:
    """The ring algorithm ``name`` (an outer tier's ring)."""
    algorithm = get_algorithm(name)
    assert isinstance(algorithm, RingAlgorithm), f"{name!r} is not a ring algorithm"
    return algorithm


def _directions(name: str, n: int) -> int:
    """How many ways round a ring of ``n`` the ring algorithm ``name`` sends (chains of at least one hop)."""
    algorithm = _ring(name)
    return max(1, sum(1 for hops in algorithm.longest_chain(n).values() if hops > 0))


def _uniform_table(algorithm: Any, what: str, units: Any) -> Any:
    """``units`` of every position at every step as one row (`chain_phase_profile`'s ``table``), where the
    algorithm's rows are all alike (``uniform_rows``) and its table is ``units`` itself, entry by entry, on
    small rings (checked here); else None (each entry is evaluated alone)."""
    if not getattr(algorithm, "uniform_rows", False):
        return None
    for n in (2, 3, 5, 8):
        for d in (1, -1):
            rows = np.asarray(algorithm.units_table(what, n, d))
            if rows.tolist() != [[units(n, i, d, h) for h in range(1, algorithm.steps(n) + 1)] for i in range(n)]:
                return None

    def table(n: int, d: int) -> np.ndarray:
        return algorithm.units_table(what, n, d)

    table.uniform = True  # type: ignore[attr-defined]  # one row for every position
    return table


def _profile(job: Job, key: tuple, make: Any) -> PhaseProfile:
    """A phase's `PhaseProfile` (its time at any unit size), kept in the job between the closed form's calls."""
    key = ("hierarchical", *key)
    if key not in job.cache:
        job.cache[key] = make()
    return job.cache[key]


def _tier_bundle(lv: Levels, tier: int, k: int, i: int) -> list[int]:
    """Domains whose keys bundle ``i`` of ``tier``'s ring through domain ``k`` carries: digit ``tier`` is i,
    the faster tiers' digits are k's (reduced already, or not gathered yet), the slower tiers' any."""
    own = lv.digits(k)[:tier]
    return sorted(lv.index((*own, i, *rest)) for rest in itertools.product(*map(range, lv.tiers[tier + 1:])))


def _tier_rings(net: Network, lv: Levels, tier: int) -> list:
    """Every ring of ``tier`` (they share the links above the domains: a leaf's uplink, a pod's core link);
    where the rails share no link (one DCN or InfiniBand switch), one of them stands for all."""
    zero = tuple(0 for _ in lv.sizes)
    shared = net.graph.graph.get("pods", 0) > 1 or net.graph.graph.get("units", 0) > 1
    if len(lv.tiers) == 1 and not shared:
        return [lv.tier_ring(0, 0, zero)]
    return [lv.tier_ring(tier, k, b) for b in keys_where(lv.sizes, {}) for k in range(lv.outer)
            if lv.digits(k)[tier] == 0]


def _phase_order(kind: str, what: str, rotation: int, n_axes: int) -> list[int]:
    """The inner axes a phase indexes into: rotated by the part's rotation; reversed for AllReduce's gather."""
    axes = list(range(n_axes))
    order = axes[rotation:] + axes[:rotation]
    return order if what == "rs" or kind == "all_gather" else order[::-1]


def _fixed(what: str, order: list[int], j: int, base: tuple[int, ...]) -> dict[int, int]:
    """Inner axes on which a ring's keys agree with its chips: those reduced already (a reduction), or
    those not gathered yet (a gather), as in `simulator.collectives.multi_axis`."""
    if what == "rs":
        return {x: base[x] for x in order[:j]}
    return {x: base[x] for x in range(len(base)) if x not in order[:j] and x != order[j]}


def _even(per_step: Any, n: int, i: int, d: int, h: int) -> float:
    """``per_step`` (a ring algorithm's ``split_gather_units`` or ``split_reduce_units``) with even halves."""
    return float(per_step(n, i, d, h, 0.5))


def _halves(job: Job, parts: list[int], positions: list[tuple[int, ...]] | int) -> Bundle:
    """An inner ring position's `Bundle`: its keys (`_keys`; timing only, ``positions`` is their count), the first
    half of ``parts`` one half, the rest the other."""
    half = len(parts) // 2
    if job.numeric:
        assert not isinstance(positions, int)
        first, second = _keys(job, parts[:half], positions), _keys(job, parts[half:], positions)
        assert isinstance(first, tuple) and isinstance(second, tuple)
        return Bundle(first + second, (len(first) + len(second)) * job.key_bytes,
                      ((first, len(first) * job.key_bytes), (second, len(second) * job.key_bytes)))
    count = positions if isinstance(positions, int) else len(positions)
    return Bundle((), len(parts) * count * job.key_bytes,
                  (((), half * count * job.key_bytes), ((), (len(parts) - half) * count * job.key_bytes)))


def _keys(job: Job, parts: list[int], positions: list[tuple[int, ...]]) -> tuple | int:
    """The keys (part, group position) a bundle carries, or their count when timing only."""
    if job.numeric:
        return tuple((p, pos) for pos in positions for p in parts)
    return len(parts) * len(positions)


class Hierarchical3(Hierarchical):
    """`Hierarchical` over three levels: inside each domain, across the domains of a unit or pod, across those."""

    name = "hierarchical3"
    summary = "three levels in turn: inside each node/slice, across the nodes of a leaf / slices of a pod, across those"
    three = True
    tier_ring = "bidirectional"  #: both ways round each tier: half the steps, the same bytes through the one port


class Hierarchical3Pipelined(Hierarchical3):
    """`Hierarchical3` with the array cut into chunks that flow through the levels in order."""

    name = "hierarchical3_pipelined"
    summary = "three levels pipelined: the array in 8 chunks flows inside, across leaves/pods and back"
    pipeline = 8  #: three levels fill longer than two: 8 chunks keep the fill under an eighth of the sum


HIERARCHICAL = register(Hierarchical())
HIERARCHICAL_PIPELINED = register(HierarchicalPipelined())
HIERARCHICAL3 = register(Hierarchical3())
HIERARCHICAL3_PIPELINED = register(Hierarchical3Pipelined())
