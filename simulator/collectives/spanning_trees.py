"""Broadcast down arc-disjoint spanning trees from the root, one per outgoing link, pipelined in pieces.

The root's array is cut into ``chunks`` pieces, dealt round the trees (piece j to tree j mod d); every
tree reaches every device, no two trees share a link direction, so each link carries one tree's pieces
one after another and the root sends on all d of its outgoing links at once.

The trees, on a group whose axes all wrap (rings of 3 or more): 2n of them for n axes, ``(a, s)`` for
each axis a and way s = +1 or -1 round the rings. Tree ``(a, s)`` uses only links that step the way s.
For a device x, let D be the axes where it differs from the root and measure its offset on each axis
the way s. Its parent is one step back (against s) along axis

- a, if a is not in D (a jump: the tree reaches x from the far side of x's ring along a, which it
  entered first from the root), else
- the first axis of D met going down from a - 1 round to a itself (a - 1, a - 2, ..., a).

At each device the n trees of one way take n different axes (the axes of D are shifted round among
the trees whose axis is in D, those whose axis is not in D take their own axis), and the two ways take
opposite links, so no link direction carries two trees (Edmonds: a digraph whose every cut from the
root has d arcs holds d arc-disjoint spanning trees; on a torus d = 2n). A tree reaches depth up to
``1 + sum(k_a - 1)``: it goes round each ring one way.

On a group with an axis that does not wrap (a line, a size-2 axis) only the n trees of one way are
built: on such an axis a tree steps away from the root, and a jump comes from x's neighbour on that
axis. That matches a mesh, where a corner has n incoming links and so at best receives V / (n W); on
a torus with a size-2 axis the root has more links than trees (the size-2 axis adds one link, no
second way round), so it stays above the bound there.

Closed form (`closed_form`): a tree is a set of chains from the root; along a chain whose hops cost
``t_h = latency + piece / b`` (no other tree shares them) ``c`` pieces arrive after
``sum(t_h) + (c - 1) max(t_h)`` (`simulator.collectives.timing.pipeline_time`). The broadcast ends with
the slowest tree's deepest device: ``(depth + c - 1)(alpha + V / (P b))`` on uniform links, against the
bound ``V / (d W)`` a factor of about ``1 + (depth - 1)/c``. Exact on grids, where every hop is one link;
on a logical axis laid over several physical axes a hop may cross links other hops use, which the
closed form does not count.

Default pieces (`SpanningTrees.default_chunks`): the count that minimises that time, about
``sqrt((depth - 1) V / (d b alpha))`` per tree, capped so that the schedule stays below
`TRANSFER_BUDGET` transfers (each piece crosses every device once): on 16x16 and 8x8x8 tori that stops
short of the depth's wish (1.6x and 2.3x the bound at 1 GB; ``chunks`` up to 10,000 pieces goes further).
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

from simulator.collectives.algorithm import Algorithm, Job, register
from simulator.collectives.groups import Group
from simulator.collectives.schedule import Schedule
from simulator.collectives.timing import pipeline_time, route_latency
from simulator.engine.network import Network

Pos = tuple[int, ...]
TRANSFER_BUDGET = 50_000  #: default pieces stop where the schedule would pass this many transfers (about 1 s)
MAX_PIECES = 10_000  #: as `simulator.collectives.api.MAX_CHUNKS`


def rings(group: Group) -> tuple[bool, ...]:
    """Per axis: a ring (wraps, 3 or more positions; both ways round are distinct links) or a line."""
    return tuple(w and k >= 3 for k, w in zip(group.sizes, group.wraps, strict=True))


def trees(group: Group) -> list[tuple[int, int]]:
    """The trees ``(axis, way)``: both ways on a group of rings, one way where some axis is a line."""
    n = len(group.sizes)
    ways = (1, -1) if all(rings(group)) else (1,)
    return [(a, s) for s in ways for a in range(n)]


def parent(group: Group, root: Pos, tree: tuple[int, int], x: Pos) -> Pos:
    """The position that sends to ``x`` in ``tree`` (see the module docstring); ``x`` is not the root."""
    a, s = tree
    sizes, ring = group.sizes, rings(group)
    n = len(sizes)
    differs = [x[c] != root[c] for c in range(n)]
    c = a if not differs[a] else next(c for c in ((a - i) % n for i in range(1, n + 1)) if differs[c])
    if ring[c]:
        step = s
    elif differs[c]:
        step = 1 if x[c] > root[c] else -1  # on a line a tree steps away from the root
    else:
        step = -1 if x[c] + 1 < sizes[c] else 1  # a jump: from the neighbour beyond x
    return x[:c] + ((x[c] - step) % sizes[c],) + x[c + 1:]


def tree_parents(group: Group, root: Pos, tree: tuple[int, int]) -> dict[Pos, Pos]:
    """Every non-root position's parent in ``tree``."""
    return {x: parent(group, root, tree, x) for x in group.positions() if x != root}


def depths(parents: dict[Pos, Pos], root: Pos) -> dict[Pos, int]:
    """Hops from the root to each position along ``parents``."""
    out: dict[Pos, int] = {root: 0}
    for x in parents:
        chain = []
        while x not in out:
            chain.append(x)
            x = parents[x]
            if len(chain) > len(parents):
                raise AssertionError(f"the parents of a broadcast tree form a cycle through {x}")
        d = out[x]
        for y in reversed(chain):
            d += 1
            out[y] = d
    return out


@lru_cache(maxsize=64)
def _shape_trees(sizes: tuple[int, ...], wraps: tuple[bool, ...],
                 root: Pos) -> tuple[tuple[dict[Pos, Pos], dict[Pos, int]], ...]:
    group = Group(sizes, wraps, {})
    group.members = {p: p for p in group.positions()}
    out = []
    for tree in trees(group):
        parents = tree_parents(group, root, tree)
        out.append((parents, depths(parents, root)))
    return tuple(out)


def shape_trees(group: Group, root: Pos) -> tuple[tuple[dict[Pos, Pos], dict[Pos, int]], ...]:
    """(parents, depths) of each tree of ``group`` rooted at position ``root`` (cached per shape)."""
    return _shape_trees(group.sizes, group.wraps, root)


class SpanningTrees(Algorithm):
    """Broadcast: the array dealt over arc-disjoint spanning trees, each pipelined in pieces."""

    name = "spanning_trees"
    summary = ("Broadcast: pieces dealt over arc-disjoint spanning trees from the root (2 per axis on a torus), "
               "pipelined; near the root's egress bound V/(d W)")
    kinds = ("broadcast",)
    topologies = ("ring", "line", "torus", "mesh")

    def unfit(self, kind: str, net: Network, groups: list[Group]) -> str | None:
        why = super().unfit(kind, net, groups)
        if why is None and not net.grid:
            return "it needs a grid topology (ring, line, torus, mesh) to lay its trees on"
        return why

    def default_chunks(self, kind: str, net: Network, groups: list[Group], nbytes: float | None) -> int:
        """Pieces that minimise the closed form, within `TRANSFER_BUDGET` (numeric mode: one per tree)."""
        group = groups[0]
        d = len(trees(group))
        if nbytes is None or group.n <= 1:
            return d
        edges = [net.graph.edges[e] for e in net.graph.edges]
        alpha = max(e["latency_s"] for e in edges)
        bandwidth = min(e["bandwidth_bytes_per_s"] for e in edges)
        root = tuple(0 for _ in group.sizes)
        depth = max(max(ds.values()) for _, ds in shape_trees(group, root))
        best = math.sqrt((depth - 1) * nbytes / (d * bandwidth * alpha)) if alpha > 0 else float("inf")
        cap = max(1, min(MAX_PIECES // d, TRANSFER_BUDGET // (d * (group.n - 1) * len(groups))))
        return d * max(1, min(cap, round(best)))

    def build(self, job: Job, schedule: Schedule) -> None:
        for groups in job.rings:
            for group in groups:
                self._build_group(job, group, schedule)

    def _build_group(self, job: Job, group: Group, s: Schedule) -> None:
        forest = shape_trees(group, job.root_pos)
        d = len(forest)
        for t, (parents, depth) in enumerate(forest):
            pieces = range(t, job.chunks, d)
            got: dict[tuple[Pos, int], int] = {}  # (position, piece) -> the transfer that brought it
            for x in sorted(parents, key=depth.__getitem__):
                p, src, dst = parents[x], group.members[parents[x]], group.members[x]
                behind: list[int] = []
                for j in pieces:
                    deps = ([got[(p, j)]] if p != job.root_pos else []) + behind
                    keys = (("piece", j),) if job.numeric else 1
                    got[(x, j)] = s.add(src, dst, keys, "copy", deps, ("tree", id(group), t), dst)
                    behind = [got[(x, j)]]

    def closed_form(self, job: Job) -> float:
        group, net = job.group, job.net
        forest = shape_trees(group, job.root_pos)
        d, worst = len(forest), 0.0
        for t, (parents, depth) in enumerate(forest):
            c = len(range(t, job.chunks, d))
            if c == 0:
                continue
            cost: dict[Pos, list[float]] = {job.root_pos: []}
            for x in sorted(parents, key=depth.__getitem__):
                cost[x] = cost[parents[x]] + [_hop(net, group.members[parents[x]], group.members[x], job.key_bytes)]
                worst = max(worst, pipeline_time(cost[x], c))
        return worst


def _hop(net: Network, src: Any, dst: Any, piece_bytes: float) -> float:
    """Seconds one piece takes from ``src`` to ``dst`` alone: route latency plus bytes over the slowest link."""
    path = net.routes(src, dst)[0]
    edges = list(zip(path, path[1:], strict=False))
    return route_latency(net, edges) + piece_bytes / min(net.graph.edges[e]["bandwidth_bytes_per_s"] for e in edges)


SPANNING_TREES = register(SpanningTrees())
