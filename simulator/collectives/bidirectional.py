"""Bidirectional ring: every shard travels ceil((n-1)/2) hops one way and floor((n-1)/2) the other.

Both directions of every link carry data, so a phase takes ceil((n-1)/2) steps instead of n - 1: per
phase of shard s over uniform links, ``ceil((n-1)/2)(alpha + s / b)``. For even n the antipodal shard
goes one way only, so the forward links carry n/2 shards and the backward ones n/2 - 1 (the topology
bound, with (n-1)/2 on every link, is that much lower). Through a switch both directions leave a chip by
its one port, which then carries n - 1 shards: the closed form counts them on that port.
"""
from __future__ import annotations

import math

from simulator.collectives.algorithm import register
from simulator.collectives.ring import RingAlgorithm


class Bidirectional(RingAlgorithm):
    """Shards go both ways round each ring (the default on tori)."""

    name = "bidirectional"
    summary = "ring, both ways: ceil((n-1)/2) steps, both directions of every link busy"
    topologies = ("ring", "torus", "switch", "nodes", "multislice")

    def reach(self, n: int, origin: int) -> list[tuple[int, int]]:
        if n <= 1:
            return []
        return [(d, h) for d, h in ((1, math.ceil((n - 1) / 2)), (-1, (n - 1) // 2)) if h > 0]

    def longest_chain(self, n: int) -> dict[int, int]:
        return {1: math.ceil((n - 1) / 2), -1: (n - 1) // 2}

    def gather_load(self, n: int, i: int, d: int) -> int:
        return self.longest_chain(n)[d]  # one chain per origin, each crossing a link in turn


BIDIRECTIONAL = register(Bidirectional())
