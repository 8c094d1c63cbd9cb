"""`RingAlgorithm`: the family of algorithms that move shards round rings, one axis at a time.

A ring algorithm is defined by where a shard goes along one axis (``reach``: the directions and hop
counts of its chains) and, for its closed form, by formulas for its longest chain and for the units each
ring link carries. Everything else is shared: AllGather, ReduceScatter and AllReduce compose per-axis
phases (`simulator.collectives.multi_axis`), AllToAll forwards chunks the short way
(`simulator.collectives.all_to_all`), Broadcast pipelines pieces from the root
(`simulator.collectives.broadcast`). On an axis without wraparound every ring algorithm runs the line
algorithm (``fallback``) there.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import ClassVar

import numpy as np

from simulator.collectives import all_to_all, broadcast, multi_axis
from simulator.collectives.algorithm import KINDS, Algorithm, Capabilities, Job, get_algorithm
from simulator.collectives.groups import Group
from simulator.collectives.layout import RING_KINDS
from simulator.collectives.schedule import Schedule
from simulator.collectives.timing import ring_links
from simulator.engine.network import Network

PRICED_TRANSFERS = 16_384  #: most transfers a calibrated broadcast's pieces may make (`priced_chunks`)


class RingAlgorithm(Algorithm):
    """Chains of neighbour hops along each axis of a group (subclasses give the geometry)."""

    kinds: ClassVar[tuple[str, ...]] = KINDS[:5]  #: every kind but the root ones (`simulator.collectives.root`)
    closed: bool = True  #: uses the wraparound link (needs an axis that wraps)
    serial_reduce: bool = False  #: reduction chains cross a link in a fixed order (a line)
    fallback: str = "line"  #: algorithm on axes without wraparound
    #: one ring per axis stands for all (reduced mode), closed forms price every group's routes (shared links),
    #: quotients built from the ring geometry without the schedule (`simulator.acceleration.ring_quotient`)
    capabilities = Capabilities(reduced=True, shared_links=True, direct_quotient=True)
    uniform_rows: bool = False  #: `units_table` is one row broadcast to every position (all links alike)

    # -- geometry (used by the schedule builders) ----------------------------------------------------
    def reach(self, n: int, origin: int) -> list[tuple[int, int]]:
        """(direction, hops) that a shard starting at position ``origin`` of ``n`` travels."""
        raise NotImplementedError

    def reach_to(self, n: int, owner: int) -> list[tuple[int, int]]:
        """(direction, hops) of the chains that carry partial sums towards ``owner``."""
        return self.reach(n, owner)

    # -- closed-form facts (formulas, independent of the builders) -----------------------------------
    def longest_chain(self, n: int) -> dict[int, int]:
        """Hops of the longest chain in each direction (+1, -1) on ``n`` positions: a phase's steps."""
        raise NotImplementedError

    def gather_load(self, n: int, i: int, d: int) -> int:
        """Shards ring link i -> i + d carries in an AllGather phase, one per step from the first."""
        raise NotImplementedError

    def reduce_load(self, n: int, i: int, d: int) -> int:
        """Partial-sum shards ring link i -> i + d carries in a ReduceScatter phase (the AllGather run
        backwards; priced as if they came one per step from the first, its mirror image)."""
        return self.gather_load(n, i, d)

    def gather_units(self, n: int, i: int, d: int, h: int) -> float:
        """Shards ring link i -> i + d carries at step h of an AllGather phase."""
        return 1.0 if h <= self.gather_load(n, i, d) else 0.0

    def reduce_units(self, n: int, i: int, d: int, h: int) -> float:
        """Partial sums ring link i -> i + d carries at step h of a ReduceScatter phase."""
        return 1.0 if h <= self.reduce_load(n, i, d) else 0.0

    def all_to_all_units(self, n: int, i: int, d: int, h: int) -> float:
        """Chunks ring link i -> i + d carries at step h of an AllToAll phase: a chain of H hops forwards
        the chunks still travelling, H - h + 1 of them at its hop h."""
        hops = self.longest_chain(n).get(d, 0)
        return hops - h + 1.0 if h <= hops else 0.0

    def steps(self, n: int) -> int:
        """Steps of a phase on ``n`` positions (its longest chain)."""
        return max(self.longest_chain(n).values(), default=0)

    def broadcast_reach(self, n: int, root: int) -> dict[int, int]:
        """Hops a broadcast from ``root`` travels in each direction."""
        return self.longest_chain(n)

    # -- halves: AllGather and ReduceScatter phases of `multi_axis` (AllToAll and Broadcast use `reach`) --
    def splits(self, n: int) -> bool:
        """Whether a phase on ``n`` positions sends the two halves of a bundle different ways."""
        return False

    def gather_chains(self, n: int, origin: int) -> list[tuple[int, int, int | None]]:
        """(direction, hops, half) of the chains from ``origin``: the last hop carries only ``half`` (None:
        the whole bundle all the way)."""
        return [(d, h, None) for d, h in self.reach(n, origin)]

    def reduce_chains(self, n: int, owner: int) -> list[tuple[int, int, int | None]]:
        """(direction, hops, half) of the chains towards ``owner``: the first hop carries only ``half``."""
        return [(d, h, None) for d, h in self.reach_to(n, owner)]

    def split_gather_units(self, n: int, i: int, d: int, h: int, split: float = 0.5) -> float:
        """`gather_units` of the chains of `gather_chains`, a bundle's first half being ``split`` of it."""
        return self.gather_units(n, i, d, h)

    def split_reduce_units(self, n: int, i: int, d: int, h: int, split: float = 0.5) -> float:
        """`reduce_units` of the chains of `reduce_chains`, a bundle's first half being ``split`` of it."""
        return self.reduce_units(n, i, d, h)

    def units_table(self, what: str, n: int, d: int, split: float = 0.5) -> np.ndarray | None:
        """`split_gather_units` (``what="ag"``) or `split_reduce_units` (``"rs"``) of every position (rows)
        at every step h = 1..`steps` (columns) at once, or None where the algorithm has no such formula
        (each entry is then evaluated alone)."""
        return None

    def phase_load(self, n: int) -> float:
        """Bundles the busiest ring link carries over a whole AllGather phase of `gather_chains` on ``n``
        positions (the per-link load that bounds the phase's bandwidth term)."""
        steps = range(1, self.steps(n) + 1)
        return max((sum(self.split_gather_units(n, i, d, h) for h in steps) for i, d in ring_links(n, self.closed)),
                   default=0.0)

    # -- the Algorithm interface ---------------------------------------------------------------------
    def on_axis(self, wrap: bool) -> RingAlgorithm:
        """The ring algorithm that runs on an axis (``fallback`` where the axis does not wrap)."""
        if wrap or not self.closed:
            return self
        line = get_algorithm(self.fallback)
        assert isinstance(line, RingAlgorithm)
        return line

    def unfit(self, kind: str, net: Network, groups: list[Group]) -> str | None:
        why = super().unfit(kind, net, groups)
        if why is None and self.closed and not any(groups[0].wraps):
            sizes = "x".join(map(str, groups[0].sizes))
            return f"no axis of the group ({sizes}) has a wraparound link"
        return why

    def prepare(self, job: Job) -> None:
        """AllGather, ReduceScatter, AllReduce: cut the array into the parts of the fastest multi-axis plan.
        Broadcast and Reduce with the default pieces (``job.auto_chunks``, timing mode): the pieces that pipeline
        best on the job's links (`priced_chunks`), so that the ideal closed form and run pipeline as a calibrated
        one does and the ideal figure is a bound of the calibrated forecast (issue 31: with one piece the ideal
        H100 switch:8 64 MB `line` Broadcast was 1.010 ms, 3.7x its calibrated LL128 forecast of 275 us)."""
        if job.kind in RING_KINDS:
            multi_axis.prepare(job, self.on_axis)
        elif job.kind in ("broadcast", "reduce") and job.auto_chunks and not job.numeric and job.chunks == 1:
            pieces = self.priced_chunks(job)
            if pieces is not None and pieces != job.chunks:
                job.chunks = pieces
                job.key_bytes = math.ceil(job.nbytes / len(job.rings) / pieces)  # whole bytes a key, as `_job` cuts
                job.cache.clear()

    def priced_chunks(self, job: Job, piece_bytes: float = 0.0) -> int | None:
        """Broadcast with the default pieces, as NCCL pipelines a ring broadcast in chunks. ``piece_bytes`` > 0 (a
        protocol that store-and-forwards whole chunks, NCCL's Simple): the array in pieces of at most that many
        bytes, as few as that allows (`protocol.broadcast_piece_bytes`). Else (LL and LL128 forward each line as it
        lands: cut-through) the power of two of pieces that minimises `broadcast.closed_form` on the job's links
        -- which falls as pieces shrink (a hop's latency is paid once, `chains.broadcast_phase`), so the finest
        cut the budget allows. At most `PRICED_TRANSFERS` transfers (two a piece a hop: its bytes, its latency)."""
        if job.kind not in ("broadcast", "reduce") or not job.auto_chunks or job.numeric:
            return None
        per_piece = 2 * (job.group.n - 1) * len(job.groups) * len(job.rings)
        if per_piece <= 0:
            return None
        whole = job.key_bytes * job.chunks  # one ring's array
        most = max(1, PRICED_TRANSFERS // per_piece)
        if piece_bytes > 0:
            return min(most, max(1, math.ceil(whole / piece_bytes)))
        best: tuple[float, int] | None = None
        c = 1
        while c <= most:
            t = self.closed_form(replace(job, chunks=c, key_bytes=whole / c, cache={}))
            if best is None or t < best[0]:
                best = (t, c)
            c *= 2
        return best[1] if best else None

    def build(self, job: Job, schedule: Schedule) -> None:
        pattern = {"all_to_all": all_to_all.build, "broadcast": broadcast.build,
                   "reduce": broadcast.build_reduce}.get(job.kind, multi_axis.build)
        for groups in job.rings:
            pattern(job, groups[:1] if job.reduced else groups, self.on_axis, schedule)

    def closed_form(self, job: Job) -> float:
        pattern = {"all_to_all": all_to_all.closed_form, "broadcast": broadcast.closed_form,
                   "reduce": broadcast.reduce_closed_form}
        return pattern.get(job.kind, multi_axis.closed_form)(job, self.on_axis)
