"""AllReduce on a line (an axis without wraparound): pieces added toward the middle chip, copied back out.

The optimum, from first principles. On a line of n chips joined by links of one-way bandwidth W:

- an end chip has one link in, and must receive V (every element of the sum depends on the other chips'
  arrays, V bytes of them in general): at least V / W;
- the links across any cut between neighbours i and i + 1 carry, each way, what one side needs of the
  other: the sum of that side's arrays, V bytes (no smaller message determines it): V / W again;
- all the chips together receive 2(n - 1) V (`simulator.collectives.bounds`) over 2(n - 1) link
  directions: V / W once more.

So V / W (plus latency) is the bound, and the ReduceScatter then AllGather the ring algorithms run on a
line cannot reach it: each phase loads the links into the ends with n - 1 shards of V / n, together
2 (n - 1) / n x V / W -- 1.5x the bound on a line of 4, 1.75x on 8. Here every element crosses every link
once each way, which is exactly the bound's load: piece j is added hop by hop from both ends toward the
middle chip m = floor((n - 1) / 2) (each chip adds what arrives into its own piece and sends the sum on),
and once m has both sides' sums it holds the total, which it copies hop by hop back out to both ends.
Link i -> i + 1 carries each piece once (a sum on the left of m, the total on the right), and so does
i + 1 -> i: V per link direction.

Closed form (`LinePipelined.closed_form`): the array in c pieces of V / c, each link carrying them one
after another in order; a hop costs t = alpha + (V / c) / W (its route latency, then the piece over the
link). A piece's longest chain of hops runs from the farther end to m and back out to an end:
H = 2 max(m, n - 1 - m) = 2 ceil((n - 1) / 2) hops (n - 1 on an odd line, n on an even one), and c pieces
pipelined along it take ``sum(t_h) + (c - 1) max(t_h)`` (`simulator.collectives.timing.chain_time`):

    T = (H + c - 1)(alpha + V / (c W)),   best c about sqrt((H - 1) V / (W alpha)),

against the bound V / W a factor of about (1 + (H - 1)/c)(1 + c alpha W / V): 1.02 on a line of 8 at 1 GB on
tpu-v5e. Small arrays: one piece, H hops (RS then AG takes 2(n - 1) steps; auto prices both).
"""
from __future__ import annotations

import math
from typing import Any

from simulator.collectives.algorithm import Algorithm, Capabilities, Job, register
from simulator.collectives.groups import Group
from simulator.collectives.schedule import Schedule
from simulator.collectives.timing import chain_time, route_latency
from simulator.engine.network import Network

TRANSFER_BUDGET = 50_000  #: default pieces stop where the schedule would pass this many transfers
MAX_PIECES = 10_000  #: as `simulator.collectives.api.MAX_CHUNKS`


def middle(n: int) -> int:
    """The chip the two sides' sums meet at: floor((n - 1) / 2)."""
    return (n - 1) // 2


def chains(n: int) -> list[list[tuple[int, int]]]:
    """The hop chains (lists of (from, to) positions) a piece's dependencies run along: from either end to the
    middle, then back out to either end (the four ways the pipeline's time can be set)."""
    m = middle(n)
    into = {0: [(i, i + 1) for i in range(m)], n - 1: [(i, i - 1) for i in range(n - 1, m, -1)]}
    out = {0: [(i, i - 1) for i in range(m, 0, -1)], n - 1: [(i, i + 1) for i in range(m, n - 1)]}
    return [into[a] + out[b] for a in (0, n - 1) for b in (0, n - 1)]


class LinePipelined(Algorithm):
    """AllReduce on a line: pieces summed toward the middle and copied back out, pipelined (see the module)."""

    name = "line_pipelined"
    summary = ("AllReduce on a line: pieces added hop by hop toward the middle chip, the totals copied back out, "
               "pipelined; V per link direction, the bound V/W")
    kinds = ("all_reduce",)
    topologies = ("line", "mesh", "torus")
    nic_rings = False
    capabilities = Capabilities(reduced=True)  #: `build` builds the first line only when ``job.reduced``

    def unfit(self, kind: str, net: Network, groups: list[Group]) -> str | None:
        why = super().unfit(kind, net, groups)
        group = groups[0]
        if why is None and not net.grid:
            return "it needs a grid topology (a line, or a mesh or slice axis without wraparound)"
        if why is None and (len(group.sizes) != 1 or (group.wraps[0] and group.sizes[0] > 2)):
            sizes = "x".join(map(str, group.sizes))
            return f"it runs on one axis without wraparound (a line), not a {sizes} group" + \
                   (" that wraps" if len(group.sizes) == 1 else "")
        return why

    def default_chunks(self, kind: str, net: Network, groups: list[Group], nbytes: float | None) -> int:
        """Pieces that minimise the closed form (within `TRANSFER_BUDGET`); numeric mode: one per chip."""
        n = groups[0].n
        if nbytes is None or n <= 1:
            return max(1, n)
        edges = [net.graph.edges[e] for e in net.graph.edges]
        alpha = max(e["latency_s"] for e in edges)
        bandwidth = min(e["bandwidth_bytes_per_s"] for e in edges)
        hops = 2 * max(middle(n), n - 1 - middle(n))
        best = math.sqrt((hops - 1) * nbytes / (bandwidth * alpha)) if alpha > 0 else float("inf")
        cap = max(1, min(MAX_PIECES, TRANSFER_BUDGET // (2 * (n - 1) * len(groups))))
        return max(1, min(cap, round(best)))

    def _pieces(self, job: Job) -> list[tuple | int]:
        """Keys of each piece (numeric: the n shard keys dealt round, in as many equal pieces as the chunks
        allow), or 1 per piece (timing: ``chunks`` pieces of V / chunks, priced through ``nbytes``)."""
        if not job.numeric:
            return [1] * job.chunks
        n = job.group.n
        c = max(k for k in range(1, min(job.chunks, n) + 1) if n % k == 0)
        keys = [(p, s) for s in job.group.positions() for p in range(job.parts)]
        return [tuple(keys[j::c]) for j in range(c)]

    def build(self, job: Job, s: Schedule) -> None:
        pieces = self._pieces(job)
        piece_bytes = None if job.numeric else job.nbytes / job.chunks
        for group in job.groups[:1] if job.reduced else job.groups:  # reduced: one line stands for all
            n, dev = group.n, [group.members[p] for p in group.positions()]
            m = middle(n)
            added: dict[tuple[int, int], list[int]] = {}  # (position, piece) -> sums that reached it
            behind: dict[tuple[int, int], int] = {}  # link (from, to) -> its last transfer
            for j, keys in enumerate(pieces):
                for side in (range(m), range(n - 1, m, -1)):  # each end in toward m
                    for i in side:
                        k = i + 1 if i < m else i - 1
                        deps = added.get((i, j), []) + ([behind[(i, k)]] if (i, k) in behind else [])
                        behind[(i, k)] = s.add(dev[i], dev[k], keys, "add", deps, ("line", id(group), j), dev[k],
                                               nbytes=piece_bytes)
                        added.setdefault((k, j), []).append(behind[(i, k)])
                got = {m: added.get((m, j), [])}
                for side in (range(m, 0, -1), range(m, n - 1)):  # the total back out to each end
                    for i in side:
                        k = i - 1 if side.step < 0 else i + 1
                        deps = got[i] + ([behind[(i, k)]] if (i, k) in behind else [])
                        behind[(i, k)] = s.add(dev[i], dev[k], keys, "copy", deps, ("line", id(group), j), dev[k],
                                               nbytes=piece_bytes)
                        got[k] = [behind[(i, k)]]

    def closed_form(self, job: Job) -> float:
        """The slowest of the four hop chains (`chains`), each ``chain_time`` of its c pieces."""
        group, net = job.group, job.net
        c = len(self._pieces(job))
        piece = job.nbytes / c
        dev = [group.members[p] for p in group.positions()]
        return max((chain_time([_hop(net, dev[i], dev[k], piece) for i, k in chain], c)
                    for chain in chains(group.n)), default=0.0)


def _hop(net: Network, src: Any, dst: Any, piece_bytes: float) -> float:
    """Seconds one piece takes from ``src`` to ``dst`` alone: route latency plus bytes over the slowest link."""
    path = net.routes(src, dst)[0]
    edges = list(zip(path, path[1:], strict=False))
    return route_latency(net, edges) + piece_bytes / min(net.graph.edges[e]["bandwidth_bytes_per_s"] for e in edges)


LINE_PIPELINED = register(LinePipelined())
