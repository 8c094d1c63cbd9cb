"""Unidirectional ring: every shard travels n - 1 hops one way round.

Each step every device sends one shard to its successor, so every link carries n - 1 shards one way
and the other direction stays idle. Closed form per phase of shard s over uniform links of bandwidth b
and step latency alpha: ``(n - 1)(alpha + s / b)`` (NCCL's ring). The default through switches (GPU
nodes), where a chip has one port and both directions of a bidirectional ring would share it. Reduce too, on
one axis (NCCL's ring Reduce): partial sums from the root's successor round to the root, n - 1 hops.
"""
from __future__ import annotations

from typing import ClassVar

import numpy as np

from simulator.collectives.algorithm import register
from simulator.collectives.groups import Group
from simulator.collectives.ring import RingAlgorithm
from simulator.engine.network import Network


class Unidirectional(RingAlgorithm):
    """Shards go one way round each ring."""

    name = "unidirectional"
    summary = "ring, one way: n-1 steps, every link carries n-1 shards in one direction"
    topologies = ("ring", "torus", "switch", "nodes", "multislice")
    uniform_rows = True
    #: and NCCL's ring Reduce, on one axis (`broadcast.build_reduce`)
    kinds: ClassVar[tuple[str, ...]] = RingAlgorithm.kinds + ("reduce",)

    def unfit(self, kind: str, net: Network, groups: list[Group]) -> str | None:
        why = super().unfit(kind, net, groups)
        if why is None and kind == "reduce" and len(groups[0].sizes) != 1:
            return "a ring Reduce runs along one axis (use root_chains on a grid)"
        return why

    def reach(self, n: int, origin: int) -> list[tuple[int, int]]:
        return [(1, n - 1)] if n > 1 else []

    def longest_chain(self, n: int) -> dict[int, int]:
        return {1: n - 1}

    def gather_load(self, n: int, i: int, d: int) -> int:
        return n - 1 if d == 1 else 0

    def units_table(self, what: str, n: int, d: int, split: float = 0.5) -> np.ndarray:
        """Every link one way carries a shard at each of the n - 1 steps; the other way none."""
        return np.broadcast_to(np.full(self.steps(n), 1.0 if d == 1 else 0.0), (n, self.steps(n)))


UNIDIRECTIONAL = register(Unidirectional())
