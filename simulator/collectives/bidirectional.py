"""Bidirectional ring: every shard travels half the ring one way and half the other.

Both directions of every link carry data. On a ring of odd n a shard goes (n-1)/2 hops each way; on an
even ring it goes n/2 - 1 hops each way whole, and the antipode, n/2 hops away both ways round, gets
its first half from one side and its second half from the other (an AllGather's last hop, a
ReduceScatter's first, carries one half). Per link and phase that is (n-1)/2 shards in every case, the
per-chip ingress bound ((n-1) shards in over two links), in ceil((n-1)/2) steps. Closed form per phase
of shard s over links of one-way bandwidth W and hop latency alpha:

    ceil((n-1)/2) alpha + (n-1)/2 x s / W      (n >= 3; n = 2 has one link: alpha + s / W)

so an AllGather of V over a ring of n takes ceil((n-1)/2) alpha + (n-1)/n x V / (2W); ReduceScatter the
same, AllReduce twice. AllToAll and Broadcast (`reach`) send the antipodal piece one way still.
Serves rings and tori only: through a switch both directions leave a chip by its one port (use the
unidirectional ring there).
"""
from __future__ import annotations

import math

import numpy as np

from simulator.collectives.algorithm import register
from simulator.collectives.ring import RingAlgorithm


class Bidirectional(RingAlgorithm):
    """Shards go both ways round each ring (the default on tori)."""

    name = "bidirectional"
    summary = "ring, both ways: ceil((n-1)/2) steps, (n-1)/2 shards on every link direction (antipode split)"
    topologies = ("ring", "torus")
    uniform_rows = True

    def reach(self, n: int, origin: int) -> list[tuple[int, int]]:
        if n <= 1:
            return []
        return [(d, h) for d, h in ((1, math.ceil((n - 1) / 2)), (-1, (n - 1) // 2)) if h > 0]

    def longest_chain(self, n: int) -> dict[int, int]:
        return {1: math.ceil((n - 1) / 2), -1: (n - 1) // 2}

    def gather_load(self, n: int, i: int, d: int) -> int:
        return self.longest_chain(n)[d]  # one chain per origin, each crossing a link in turn

    # -- the antipodal split ---------------------------------------------------------------------------
    def splits(self, n: int) -> bool:
        return n >= 4 and n % 2 == 0

    def gather_chains(self, n: int, origin: int) -> list[tuple[int, int, int | None]]:
        if self.splits(n):
            return [(1, n // 2, 0), (-1, n // 2, 1)]
        return super().gather_chains(n, origin)

    def reduce_chains(self, n: int, owner: int) -> list[tuple[int, int, int | None]]:
        if self.splits(n):
            return [(1, n // 2, 0), (-1, n // 2, 1)]
        return super().reduce_chains(n, owner)

    def split_gather_units(self, n: int, i: int, d: int, h: int, split: float = 0.5) -> float:
        """Every link carries one chain's hop per step: whole bundles, then at step n/2 of an even ring the
        half going its way (``split`` forwards, the rest backwards)."""
        if not self.splits(n):
            return self.gather_units(n, i, d, h)
        return 1.0 if h < n // 2 else (split if d == 1 else 1.0 - split) if h == n // 2 else 0.0

    def split_reduce_units(self, n: int, i: int, d: int, h: int, split: float = 0.5) -> float:
        """The AllGather mirrored: the half first (the antipode's contribution), then whole partial sums."""
        if not self.splits(n):
            return self.reduce_units(n, i, d, h)
        return (split if d == 1 else 1.0 - split) if h == 1 else 1.0 if h <= n // 2 else 0.0

    def units_table(self, what: str, n: int, d: int, split: float = 0.5) -> np.ndarray:
        """The same units at every position: `split_gather_units` / `split_reduce_units` of each step."""
        steps = self.steps(n)
        h = np.arange(1, steps + 1)
        if not self.splits(n):
            row = (h <= self.longest_chain(n)[d]).astype(float)
        else:
            half = split if d == 1 else 1.0 - split
            whole, last = (h < n // 2, h == n // 2) if what == "ag" else ((h > 1) & (h <= n // 2), h == 1)
            row = np.where(whole, 1.0, np.where(last, half, 0.0))
        return np.broadcast_to(row, (n, steps))


BIDIRECTIONAL = register(Bidirectional())
