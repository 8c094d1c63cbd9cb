"""Chains of neighbour hops along one ring: the phases every ring algorithm is built from.

A ring algorithm (`simulator.collectives.ring.RingAlgorithm`) says how far a shard starting at a
position travels in each direction (``reach``); these builders lay the chains of hops on a `Ring`:
hop h of a chain waits for hop h - 1, so no step barrier is assumed.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from simulator.collectives.groups import Ring
from simulator.collectives.schedule import ADD_BYTES, COPY_BYTES, DELAY, Schedule

Start = Callable[[int], list[int]]  #: position -> transfers its first hop waits for


class Scheme(Protocol):
    """What the builders need of a ring algorithm."""

    serial_reduce: bool  #: reduction chains share links in a fixed order (a line), not all at once

    def reach(self, n: int, origin: int) -> list[tuple[int, int]]:
        """(direction, hops) that a shard starting at ``origin`` travels."""

    def reach_to(self, n: int, owner: int) -> list[tuple[int, int]]:
        """(direction, hops) of the chains that carry partial sums towards ``owner``."""


class SplitScheme(Scheme, Protocol):
    """A ring algorithm that may send a bundle's two halves different ways (`gather_split_phase`)."""

    def gather_chains(self, n: int, origin: int) -> list[tuple[int, int, int | None]]:
        """(direction, hops, half) of the chains from ``origin``: the last hop carries only ``half``
        (None: the whole bundle)."""

    def reduce_chains(self, n: int, owner: int) -> list[tuple[int, int, int | None]]:
        """(direction, hops, half) of the chains towards ``owner``: the first hop carries only ``half``."""


@dataclass(frozen=True)
class Bundle:
    """What one position sends in a phase: its keys (numeric mode; else empty) and their bytes, and the
    same for its two halves (an even bidirectional ring sends them different ways on the antipodal hop)."""

    keys: tuple
    nbytes: float
    halves: tuple[tuple[tuple, float], tuple[tuple, float]]

    def piece(self, half: int | None) -> tuple[tuple, float]:
        """(keys, bytes) of the whole bundle (``half`` None) or of one half."""
        return (self.keys, self.nbytes) if half is None else self.halves[half]


def walk_chains(s: Schedule, ring: Ring, scheme: Scheme, start: Start, tag: Any,
                payload: Callable[[int, int, int, int], tuple | int]) -> None:
    """Send every origin's chain of hops round ``ring``; hop h carries ``payload(origin, d, h, hops)``
    and waits for hop h - 1 (the first hop for ``start(origin)``). An empty payload ends the chain."""
    n = len(ring.devices)
    for origin in range(n):
        for d, hops in scheme.reach(n, origin):
            prev = start(origin)
            for h in range(1, hops + 1):
                keys = payload(origin, d, h, hops)
                if not keys:
                    break
                a, b = (origin + (h - 1) * d) % n, (origin + h * d) % n
                prev = [s.add(ring.devices[a], ring.devices[b], keys, "copy", prev, tag, ring.slots[b])]


def gather_phase(s: Schedule, ring: Ring, bundles: list[tuple | int], scheme: Scheme, start: Start,
                 tag: Any) -> None:
    """AllGather along ``ring``: the bundle of position i reaches every other position."""
    walk_chains(s, ring, scheme, start, tag, lambda origin, d, h, hops: bundles[origin])


def reduce_phase(s: Schedule, ring: Ring, bundles: list[tuple | int], scheme: Scheme, start: Start,
                 tag: Any) -> None:
    """ReduceScatter along ``ring``: partial sums of bundle c flow to position c, adding on the way.

    On a ring every chain starts at a different device, so no two share a link at the same step. On a
    line every chain towards the right starts at the left end; each link then serves the chains in
    a fixed order (farthest owner first) -- the AllGather schedule run backwards -- instead of all at
    once, which keeps the line at n-1 steps.
    """
    n = len(ring.devices)
    ahead: dict[tuple[int, int], int] = {}  # (direction, hop) -> transfer of the chain served before
    chains = [(d, hops, owner) for owner in range(n) for d, hops in scheme.reach_to(n, owner)]
    for d, hops, owner in sorted(chains, key=lambda c: (-c[0], -c[1], c[2])):
        prev: list[int] = []
        for h in range(1, hops + 1):
            a, b = (owner - (hops - h + 1) * d) % n, (owner - (hops - h) * d) % n
            link_order = [ahead[(d, h)]] if scheme.serial_reduce and (d, h) in ahead else []
            deps = prev + start(a) + link_order
            prev = [s.add(ring.devices[a], ring.devices[b], bundles[owner], "add", deps, tag, ring.slots[b])]
            if scheme.serial_reduce:
                ahead[(d, h)] = prev[0]


def all_to_all_phase(s: Schedule, ring: Ring, bundles: list[dict[int, tuple]], scheme: Scheme, start: Start,
                     tag: Any) -> None:
    """AllToAll along ``ring``: ``bundles[i][t]`` goes from position i to position t, the short way;
    hop h forwards the chunks still travelling (those for positions h or more hops away)."""
    n = len(ring.devices)

    def still_travelling(origin: int, d: int, h: int, hops: int) -> tuple:
        return tuple(k for far in range(h, hops + 1) for k in bundles[origin].get((origin + far * d) % n, ()))

    walk_chains(s, ring, scheme, start, tag, still_travelling)


def broadcast_phase(s: Schedule, ring: Ring, origin: int, pieces: int, scheme: Scheme,
                    start: Callable[[int, int], list[int]], tag: Any,
                    group: Callable[[int, int], int] | None = None) -> None:
    """Broadcast along ``ring`` from ``origin``: pieces pipeline hop by hop, in order on every link.

    One piece is one transfer a hop (its latency, then its bytes). Several pieces split each hop in two
    (`Schedule.add_split`): piece j's bytes leave once piece j has arrived at the hop's sender and piece j - 1's
    bytes have left the link, and it arrives the route's latency later -- each piece store-and-forwarded, the
    latency of a hop paid once, not once a piece (issue 27; `simulator.collectives.timing.split_chain_time`).
    ``group`` (position a, direction d) -> m: the hop from a forwards its pieces m at a time (`_grouped_chain`)."""
    n = len(ring.devices)
    if group is not None and pieces > 1 and any(group((origin + k * d) % n, d) > 1
                                                for d, hops in scheme.reach(n, origin) for k in range(hops)):
        for d, hops in scheme.reach(n, origin):
            _grouped_chain(s, ring, origin, d, hops, pieces, start, tag, group)
        return
    for d, hops in scheme.reach(n, origin):
        behind: list[int | None] = [None] * (hops + 1)  # last piece's transfer at each hop (its bytes, when split)
        for j in range(pieces):
            prev = start(origin, j)
            for h in range(1, hops + 1):
                a, b = (origin + (h - 1) * d) % n, (origin + h * d) % n
                last = behind[h]
                keys = (("piece", j),)
                if pieces > 1:
                    behind[h], sent = s.add_split(ring.devices[a], ring.devices[b], keys, "copy", prev, (tag, j),
                                                  ring.slots[b], [last] if last is not None else [])
                else:
                    deps = prev + ([last] if last is not None else [])
                    sent = behind[h] = s.add(ring.devices[a], ring.devices[b], keys, "copy", deps, (tag, j),
                                             ring.slots[b])
                prev = [sent]


def _grouped_chain(s: Schedule, ring: Ring, origin: int, d: int, hops: int, pieces: int,
                   start: Callable[[int, int], list[int]], tag: Any, group: Callable[[int, int], int],
                   op: str = "copy") -> None:
    """One chain of `broadcast_phase` whose hops forward ``group(a, d)`` pieces at a time (a network hop moves
    whole NCCL steps, `simulator.collectives.protocol.network_step_bytes`): a group's bytes, one transfer, leave
    once all its pieces have arrived and the group before it has left the link; then each piece's delay (the
    route's latency) arrives as that piece (`simulator.collectives.timing.grouped_chain_time`). Built a hop at a
    time over all pieces."""
    n = len(ring.devices)
    prev = [start(origin, j) for j in range(pieces)]
    for h in range(1, hops + 1):
        a, b = (origin + (h - 1) * d) % n, (origin + h * d) % n
        m = max(1, min(group(a, d), pieces))
        last: int | None = None
        for first in range(0, pieces, m):
            js = range(first, min(first + m, pieces))
            deps = [t for j in js for t in prev[j]] + ([last] if last is not None else [])
            keys = tuple(("piece", j) for j in js)
            last = s.add(ring.devices[a], ring.devices[b], keys, ADD_BYTES if op == "add" else COPY_BYTES, deps,
                         ("bytes", (tag, js[-1])),
                         ring.slots[b])
            for j in js:
                prev[j] = [s.add(ring.devices[a], ring.devices[b], 0, DELAY, [last], (tag, j), ring.slots[b])]


def reduce_to_phase(s: Schedule, ring: Ring, owner: int, pieces: int, scheme: Scheme, tag: Any,
                    group: Callable[[int, int], int] | None = None) -> None:
    """Reduce along ``ring`` to ``owner``: each piece's partial sum starts at the far end of every chain towards
    ``owner`` (``scheme.reach_to``) and is added into each member's own on the way, pieces one behind another on every
    link -- `broadcast_phase` run backwards, its hops split the same way where there are several pieces (and
    grouped the same way, ``group``)."""
    n = len(ring.devices)
    if group is not None and pieces > 1 and any(group((owner - (hops - k) * d) % n, d) > 1
                                                for d, hops in scheme.reach_to(n, owner) for k in range(hops)):
        for d, hops in scheme.reach_to(n, owner):
            _grouped_chain(s, ring, (owner - hops * d) % n, d, hops, pieces, lambda i, j: [], tag, group, "add")
        return
    for d, hops in scheme.reach_to(n, owner):
        behind: list[int | None] = [None] * (hops + 1)  # last piece's transfer at each hop (its bytes, when split)
        for j in range(pieces):
            prev: list[int] = []
            for h in range(1, hops + 1):
                a, b = (owner - (hops - h + 1) * d) % n, (owner - (hops - h) * d) % n
                last = behind[h]
                keys = (("piece", j),)
                if pieces > 1:
                    behind[h], sent = s.add_split(ring.devices[a], ring.devices[b], keys, "add", prev, (tag, j),
                                                  ring.slots[b], [last] if last is not None else [])
                else:
                    deps = prev + ([last] if last is not None else [])
                    sent = behind[h] = s.add(ring.devices[a], ring.devices[b], keys, "add", deps, (tag, j),
                                             ring.slots[b])
                prev = [sent]


def gather_split_phase(s: Schedule, ring: Ring, bundles: list[Bundle], scheme: SplitScheme, start: Start,
                       tag: Any) -> None:
    """AllGather along ``ring``: the bundle of position i reaches every other position, the last hop of a
    chain carrying only the half its chain names (`SplitScheme.gather_chains`)."""
    n = len(ring.devices)
    for origin in range(n):
        for d, hops, half in scheme.gather_chains(n, origin):
            prev = start(origin)
            for h in range(1, hops + 1):
                keys, nbytes = bundles[origin].piece(half if h == hops else None)
                a, b = (origin + (h - 1) * d) % n, (origin + h * d) % n
                prev = [s.add(ring.devices[a], ring.devices[b], keys, "copy", prev, tag, ring.slots[b], nbytes)]


def reduce_split_phase(s: Schedule, ring: Ring, bundles: list[Bundle], scheme: SplitScheme, start: Start,
                       tag: Any) -> None:
    """ReduceScatter along ``ring``: partial sums of bundle c flow to position c, adding on the way; the
    first hop of a chain carries only the half its chain names (`SplitScheme.reduce_chains`), so each half
    of the far end's contribution travels one way. Chains sharing a link on a line take it in a fixed
    order, as in `reduce_phase`."""
    n = len(ring.devices)
    ahead: dict[tuple[int, int], int] = {}  # (direction, hop) -> transfer of the chain served before
    chains = [(d, hops, owner, half) for owner in range(n) for d, hops, half in scheme.reduce_chains(n, owner)]
    for d, hops, owner, half in sorted(chains, key=lambda c: (-c[0], -c[1], c[2])):
        prev: list[int] = []
        for h in range(1, hops + 1):
            a, b = (owner - (hops - h + 1) * d) % n, (owner - (hops - h) * d) % n
            link_order = [ahead[(d, h)]] if scheme.serial_reduce and (d, h) in ahead else []
            keys, nbytes = bundles[owner].piece(half if h == 1 else None)
            prev = [s.add(ring.devices[a], ring.devices[b], keys, "add", prev + start(a) + link_order, tag,
                          ring.slots[b], nbytes)]
            if scheme.serial_reduce:
                ahead[(d, h)] = prev[0]
