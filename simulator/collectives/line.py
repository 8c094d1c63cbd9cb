"""Line: shards travel to both ends of an axis without wraparound (n - 1 steps, about twice a ring).

Position i's shard goes n - 1 - i hops right and i hops left, so link i -> i+1 carries the i + 1 shards
of positions 0..i: the links into the two ends carry n - 1 shards, as an end chip (one link in) must
receive. A phase of shard s over uniform links takes ``(n - 1)(alpha + s / b)``. Every ring algorithm
runs this on an axis that does not wrap; asked for by name it also runs on an axis that does, leaving
the wraparound unused.
ReduceScatter runs the AllGather backwards: partial sums flow towards their owner, and each link
serves the chains in a fixed order (farthest owner first), which keeps it at n - 1 steps.
"""
from __future__ import annotations

import numpy as np

from simulator.collectives.algorithm import TOPOLOGY_KINDS, register
from simulator.collectives.ring import RingAlgorithm


class Line(RingAlgorithm):
    """Shards go to both ends of each axis, never over a wraparound link."""

    name = "line"
    summary = "line, both ends: n-1 steps, n-1 shards on the links into the ends"
    topologies = TOPOLOGY_KINDS
    closed = False
    serial_reduce = True

    def reach(self, n: int, origin: int) -> list[tuple[int, int]]:
        return [(d, h) for d, h in ((1, n - 1 - origin), (-1, origin)) if h > 0] if n > 1 else []

    def reach_to(self, n: int, owner: int) -> list[tuple[int, int]]:
        return [(d, h) for d, h in ((1, owner), (-1, n - 1 - owner)) if h > 0] if n > 1 else []

    def longest_chain(self, n: int) -> dict[int, int]:
        return {1: n - 1, -1: n - 1}  # from one end to the other

    def gather_load(self, n: int, i: int, d: int) -> int:
        return i + 1 if d == 1 else n - i  # the shards of the positions behind the link

    def reduce_load(self, n: int, i: int, d: int) -> int:
        return n - 1 - i if d == 1 else i  # the partial sums of the owners ahead of the link

    def reduce_units(self, n: int, i: int, d: int, h: int) -> float:
        # each link serves the owners ahead of it farthest first, so it is busy in a phase's last steps
        return 1.0 if self.steps(n) - self.reduce_load(n, i, d) < h <= self.steps(n) else 0.0

    def units_table(self, what: str, n: int, d: int, split: float = 0.5) -> np.ndarray:
        """AllGather: link i -> i + d busy in the first `gather_load` steps; ReduceScatter: in the last
        `reduce_load` (rows past a line's end are whatever the formula gives: no link runs there)."""
        steps, i = self.steps(n), np.arange(n)[:, None]
        h = np.arange(1, steps + 1)[None, :]
        if what == "ag":
            return (h <= (i + 1 if d == 1 else n - i)).astype(float)
        load = n - 1 - i if d == 1 else i
        return ((steps - load < h) & (h <= steps)).astype(float)

    def all_to_all_units(self, n: int, i: int, d: int, h: int) -> float:
        ahead = n - 1 - i if d == 1 else i  # targets beyond the link; a chain from each source behind it
        return float(ahead) if h <= self.gather_load(n, i, d) else 0.0

    def broadcast_reach(self, n: int, root: int) -> dict[int, int]:
        return {1: n - 1 - root, -1: root}


LINE = register(Line())
