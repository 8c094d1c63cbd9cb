"""Broadcast (and Reduce) over arc-disjoint spanning trees from the root, one per link, pipelined in pieces.

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
axis.

These "ways" trees are deep (a tree goes round every ring one way) and too few where an axis does not
wrap (a corner of ``slice:8x16`` has 3 links, a root of ``torus:2x4x4`` 5). `greedy_forest` grows
`tree_count` trees -- the most any forest can have: one per link out of the root, unless some other
position has fewer links in -- breadth first, all at once, and is used where it has more trees, or as
many and shallower: depth 5 / 11 / 23 on 4x4 / 8x8 / 16x16 tori (ways: 7 / 15 / 31), 15 on 8x8x8 (22),
22 with 3 trees on ``slice:8x16`` (2 trees before), 6 with 5 trees on ``torus:2x4x4`` (3 trees before).
`shallower` then re-deals each position's links in among the trees (swaps and 3-cycles that keep every tree
a tree): depth 5 / 9 / 17 on 4x4 / 8x8 / 16x16 (diameter 4 / 8 / 16), 13 on 8x8x8 (12), 33 on 32x32,
25 on 16x16x16 (24; about 5 s, where `SHALLOW_BUDGET` stops it).

Reduce runs the same trees backwards (`SpanningTrees._reduce_group`): each position adds what its
children sent of a piece into its own and sends the sum to its parent, pieces in order on each link; the
root's d incoming links each carry V / d. Every dependency of the broadcast reversed, so the same time.

Closed form (`closed_form`): a tree is a set of chains from the root; along a chain whose hops cost
``t_h = latency + piece / b`` (no other tree shares them) ``c`` pieces arrive after
``sum(t_h) + (c - 1) max(t_h)`` (`simulator.collectives.timing.chain_time`). The broadcast ends with
the slowest tree's deepest device: ``(depth + c - 1)(alpha + V / (P b))`` on uniform links, against the
bound ``V / (d W)`` a factor of about ``(1 + (depth - 1)/c)(1 + c alpha d W / V)``. Exact on grids, where
every hop is one link; on a logical axis laid over several physical axes a hop may cross links other hops
use, which the closed form does not count.

Default pieces (`SpanningTrees.default_chunks`): the count that minimises that time, about
``sqrt((depth - 1) V / (d b alpha))`` per tree, within `TRANSFER_BUDGET` transfers (each piece crosses
every device once); where that budget leaves fewer than `FILL` x (depth - 1) per tree (the fill then a
sixth of the bandwidth term, 1.17x), that many, within `MAX_TRANSFERS`. At 1 GB on tpu-v5e: 16x16
1.19x the bound (96 pieces per tree, 98,000 transfers), 8x8x8 1.20x (65 per tree, 200,000 transfers,
several seconds to simulate); ``chunks`` up to 10,000 pieces goes further.

Uneven shares (`deal`, `gather_shares`): where the trees' slowest links differ (a degraded cable, a slow
chip's cables), tree t carries pieces (Gather/Scatter: a part of every shard) in proportion to its slowest
link's rate, so the trees finish together; used only where that closed form is below the even split's (and,
for Gather/Scatter, where every tree's slowest link is at the root).
On ``torus:8`` with the root's cable at half speed: Broadcast/Reduce 22.78 -> 15.50 ms against the bound
V / (1.5 b) = 14.82 ms, Gather/Scatter 19.45 -> 12.97 ms (bound 12.96 ms).
"""
from __future__ import annotations

import itertools
import math
from collections import defaultdict
from functools import lru_cache
from typing import Any

from simulator.collectives import tree_gather
from simulator.collectives.algorithm import Algorithm, Job, register
from simulator.collectives.groups import Group
from simulator.collectives.schedule import Schedule
from simulator.collectives.timing import chain_time, route_latency
from simulator.engine.network import Network

Pos = tuple[int, ...]
Forest = tuple[tuple[dict[Pos, Pos], dict[Pos, int]], ...]
TRANSFER_BUDGET = 50_000  #: default pieces stop where the schedule would pass this many transfers (about 1 s)...
FILL = 6  #: ...unless that leaves fewer than FILL x (depth - 1) per tree (fill over a sixth of the bandwidth term)
MAX_TRANSFERS = 200_000  #: ...which may take the schedule up to this many transfers (several seconds)
MAX_PIECES = 10_000  #: as `simulator.collectives.api.MAX_CHUNKS`
START_TRIES = 6  #: choices of the trees' first links `greedy_forest` tries
BOTH_UP_TO = 256  #: on groups of at most this many positions `shallower` re-deals the ways forest too
ORDERS_UP_TO = 64  #: ...and on groups of at most this many, greedy forests from `START_TRIES` orders of first links
SHALLOW_BUDGET = 2_000_000  #: positions `shallower` may look at (in subtrees) before it stops (a few seconds)


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


def _neighbours(sizes: tuple[int, ...], wraps: tuple[bool, ...], x: Pos) -> list[Pos]:
    """Positions one step from ``x`` along an axis (a wrapped axis of 2 gives one neighbour, not two)."""
    out: list[Pos] = []
    for a, (k, w) in enumerate(zip(sizes, wraps, strict=True)):
        for s in (1, -1):
            y = (x[a] + s) % k if w else x[a] + s
            z = x[:a] + (y,) + x[a + 1:]
            if 0 <= y < k and z != x and z not in out:
                out.append(z)
    return out


def tree_count(sizes: tuple[int, ...], wraps: tuple[bool, ...], root: Pos) -> int:
    """Most arc-disjoint spanning trees from ``root`` any grid of this shape can hold: every tree needs its
    own link out of the root and its own link into every other position (Edmonds: on these grids the
    fewest links into any set of positions without the root is a single position's)."""
    positions = itertools.product(*(range(k) for k in sizes))
    return min([len(_neighbours(sizes, wraps, root))] +
               [len(_neighbours(sizes, wraps, x)) for x in positions if x != root])


def greedy_forest(sizes: tuple[int, ...], wraps: tuple[bool, ...], root: Pos) -> list[dict[Pos, Pos]] | None:
    """`tree_count` arc-disjoint spanning trees grown breadth first all at once (None: every try got stuck).

    Each tree starts on one of the root's links (where the root has more links than trees, the rest are
    free to any tree; the first `START_TRIES` choices of starting links are tried in turn). In each round
    every tree offers, from the positions it reached in the last round (all of them, if it reached none),
    each free link to a position it lacks; the links go out scarcest first (a position the tree can reach
    by fewest offered links), then those that lead away from the root (one hop farther), each link to one
    tree, each position once per tree. Shallower than the ways trees on tori (depth about 1.5 x the
    diameter rather than the sum of the sides), and it finds a tree for every link of the root where a
    mesh's edge or a size-2 axis leaves the ways short. It can get stuck where the root sits inside an
    axis that does not wrap on a grid of two or three axes (1,050 of 8,764 cases of sides 1-7, each
    wraparound and roots at the first, middle and last positions; never with the root at position 0 or
    on a torus); `shape_trees` then keeps the ways trees.
    """
    d = tree_count(sizes, wraps, root)
    starts = itertools.combinations(_neighbours(sizes, wraps, root), d)
    for first in itertools.islice(starts, START_TRIES):
        forest = _grow(sizes, wraps, root, list(first))
        if forest is not None:
            return forest
    return None


def _grow(sizes: tuple[int, ...], wraps: tuple[bool, ...], root: Pos, first: list[Pos]) -> list[dict[Pos, Pos]] | None:
    """The rounds of `greedy_forest`, tree t starting on the link from the root to ``first[t]``."""
    positions = list(itertools.product(*(range(k) for k in sizes)))
    near = {x: _neighbours(sizes, wraps, x) for x in positions}
    d = len(first)
    far = {x: sum(min(abs(p - q), k - abs(p - q)) if w else abs(p - q)
                  for p, q, k, w in zip(x, root, sizes, wraps, strict=True)) for x in positions}
    free = {(u, v) for u in positions for v in near[u] if v != root and (u != root or v not in first)}
    parents: list[dict[Pos, Pos]] = [{s: root} for s in first]
    reached = [{root, s} for s in first]
    frontier = [[s, root] for s in first]
    for _ in range(4 * len(positions)):
        if all(len(r) == len(positions) for r in reached):
            return parents
        offers = [(t, u, v) for t in range(d) for u in frontier[t] for v in near[u]
                  if v not in reached[t] and (u, v) in free]
        ways: dict[tuple[int, Pos], int] = defaultdict(int)
        for t, _, v in offers:
            ways[(t, v)] += 1
        offers.sort(key=lambda o: (ways[(o[0], o[2])], far[o[1]] - far[o[2]]))
        grown: list[list[Pos]] = [[] for _ in range(d)]
        for t, u, v in offers:
            if v not in reached[t] and (u, v) in free:
                free.discard((u, v))
                parents[t][v] = u
                reached[t].add(v)
                grown[t].append(v)
        if not any(grown):
            return None
        frontier = [g or list(r) for g, r in zip(grown, reached, strict=True)]
    return None


@lru_cache(maxsize=64)
def _shape_trees(sizes: tuple[int, ...], wraps: tuple[bool, ...],
                 root: Pos) -> tuple[tuple[dict[Pos, Pos], dict[Pos, int]], ...]:
    group = Group(sizes, wraps, {})
    group.members = {p: p for p in group.positions()}
    ways = [tree_parents(group, root, tree) for tree in trees(group)]
    greedy = greedy_forest(sizes, wraps, root)
    out = [(parents, depths(parents, root)) for parents in ways]
    if greedy is not None:
        mine = [(parents, depths(parents, root)) for parents in greedy]
        deepest = (max(max(ds.values()) for _, ds in forest) for forest in (mine, out))
        if len(mine) > len(out) or (len(mine) == len(out) and next(deepest) < next(deepest)):
            out = mine
    near = {x: _neighbours(sizes, wraps, x) for x in itertools.product(*(range(k) for k in sizes))}
    starts = [[parents for parents, _ in out]]
    if greedy is not None and len(greedy) == len(ways) and len(near) <= BOTH_UP_TO:
        starts.append(ways if starts[0][0] is not ways[0] else greedy)  # small groups: both, keep the shallower
    if len(near) <= ORDERS_UP_TO:  # tiny groups: the greedy grown from other orders of the root's links too
        for first in itertools.islice(itertools.permutations(near[root], len(out)), 1, START_TRIES):
            grown = _grow(sizes, wraps, root, list(first))
            if grown is not None:
                starts.append(grown)
    best = None
    for start in starts:
        forest = [(parents, depths(parents, root)) for parents in shallower(start, root, near)]
        key = (max(max(ds.values()) for _, ds in forest), sum(sum(ds.values()) for _, ds in forest))
        if best is None or key < best[0]:
            best = (key, forest)
    assert best is not None
    return tuple(best[1])


def shallower(forest: list[dict[Pos, Pos]], root: Pos, near: dict[Pos, list[Pos]],
              budget: int = SHALLOW_BUDGET) -> list[dict[Pos, Pos]]:
    """The forest with its trees' links into each position re-dealt among the trees, to make them shallower.

    A move, at one position x, hands the links into x that some trees use round among two or three of them (a
    swap or a 3-cycle), or hands one tree's link into x for one that no tree uses; it is taken where no tree
    gets a cycle (x's new parent is not below x in that tree) and the trees' depths get better: fewer positions
    at the deepest depth (in all trees together), else fewer at the next depth, and so on (each (tree, position)
    at depth h weighs ``B ** h`` with ``B`` above the positions' count). Each link into x stays with at most
    one tree and each tree keeps one link into x, so the forest stays arc-disjoint and spanning. Passes over
    every position repeat until none helps or ``budget`` positions have been visited by the subtrees looked
    at. On tori it takes the trees from about 1.45x the diameter deep to the diameter + 1 (depth 9 /
    17 / 13 on 8x8 / 16x16 / 8x8x8, diameter 8 / 16 / 12).
    """
    d = len(forest)
    parents = [dict(p) for p in forest]
    if d == 0 or not parents[0]:
        return parents
    kids: list[dict[Pos, list[Pos]]] = [defaultdict(list) for _ in range(d)]
    for t in range(d):
        for x, p in parents[t].items():
            kids[t][p].append(x)
    depth = [depths(p, root) for p in parents]
    weight = 4 * len(near)
    moves: list[tuple[tuple[int, ...], tuple[int, ...]]] = []  # (trees, who takes whose link)
    for r in (2, 3):
        for ts in itertools.combinations(range(d), r):
            moves.extend((ts, p) for p in itertools.permutations(range(r)) if all(p[i] != i for i in range(r)))

    def below(t: int, x: Pos) -> list[Pos]:
        out, todo = [], [x]
        while todo:
            y = todo.pop()
            out.append(y)
            todo.extend(kids[t][y])
        return out

    def apply(t: int, x: Pos, new: Pos, under: list[Pos], shift: int) -> None:
        kids[t][parents[t][x]].remove(x)
        kids[t][new].append(x)
        parents[t][x] = new
        for y in under:
            depth[t][y] += shift

    spent = 0
    positions = sorted(parents[0])
    while spent < budget:
        better = False
        for x in positions:
            held = [parents[t][x] for t in range(d)]
            unused = [u for u in near[x] if u not in held]
            tries = [(ts, tuple(held[ts[i]] for i in p)) for ts, p in moves]
            tries += [((t,), (u,)) for t in range(d) for u in unused if u == root or u in depth[t]]
            subtrees: dict[int, list[Pos]] = {}
            inside: dict[int, set[Pos]] = {}
            for ts, news in tries:
                shifts = [depth[t][new] + 1 - depth[t][x] for t, new in zip(ts, news, strict=True)]
                if min(shifts) >= 0:
                    continue  # no tree gets shallower
                for t in ts:
                    if t not in subtrees:
                        subtrees[t] = below(t, x)
                        inside[t] = set(subtrees[t])
                        spent += len(subtrees[t])
                if any(new in inside[t] for t, new in zip(ts, news, strict=True)):
                    continue
                gain = sum(weight ** (depth[t][y] + s) - weight ** depth[t][y]
                           for t, s in zip(ts, shifts, strict=True) for y in subtrees[t])
                if gain < 0:
                    for t, new, s in zip(ts, news, shifts, strict=True):
                        apply(t, x, new, subtrees[t], s)
                    better = True
                    break
        if not better:
            break
    return parents


def shape_trees(group: Group, root: Pos) -> tuple[tuple[dict[Pos, Pos], dict[Pos, int]], ...]:
    """(parents, depths) of each tree of ``group`` rooted at position ``root`` (cached per shape): the
    `greedy_forest` where it has more trees than `ways_forest`, or as many and shallower; else the ways."""
    return _shape_trees(group.sizes, group.wraps, root)


class SpanningTrees(Algorithm):
    """Broadcast (and Reduce, the trees reversed): the array dealt over arc-disjoint spanning trees,
    each pipelined in pieces."""

    name = "spanning_trees"
    summary = ("Broadcast, Reduce, Gather, Scatter over arc-disjoint spanning trees from the root (one per link of "
               "the root): pieces pipelined (Reduce adding on the way in), shards in parts, one per tree; near the "
               "root's bound")
    kinds = ("broadcast", "reduce", "gather", "scatter")
    topologies = ("ring", "line", "torus", "mesh")
    nic_rings = False

    def unfit(self, kind: str, net: Network, groups: list[Group]) -> str | None:
        why = super().unfit(kind, net, groups)
        if why is None and not net.grid:
            return "it needs a grid topology (ring, line, torus, mesh) to lay its trees on"
        return why

    def default_chunks(self, kind: str, net: Network, groups: list[Group], nbytes: float | None) -> int:
        """Pieces per tree that minimise the closed form within `TRANSFER_BUDGET` transfers, or where that
        budget leaves fewer than `FILL` x (depth - 1), that many (1.17x the bandwidth term) within
        `MAX_TRANSFERS`; numeric mode: one per tree. Gather and Scatter move shards (one part per tree): 1."""
        group = groups[0]
        if kind in ("gather", "scatter"):
            return 1
        root = tuple(0 for _ in group.sizes)
        forest = shape_trees(group, root)
        d = len(forest)
        if nbytes is None or group.n <= 1:
            return d
        edges = [net.graph.edges[e] for e in net.graph.edges]
        alpha = max(e["latency_s"] for e in edges)
        bandwidth = min(e["bandwidth_bytes_per_s"] for e in edges)
        depth = max(max(ds.values()) for _, ds in forest)
        best = math.sqrt((depth - 1) * nbytes / (d * bandwidth * alpha)) if alpha > 0 else float("inf")
        per_piece = d * (group.n - 1) * len(groups)  # transfers of one piece per tree
        cap = max(TRANSFER_BUDGET // per_piece, min(FILL * (depth - 1), MAX_TRANSFERS // per_piece))
        return d * max(1, min(cap, MAX_PIECES // d, round(best)))

    def build(self, job: Job, schedule: Schedule) -> None:
        for group in job.groups:
            if job.kind in ("gather", "scatter"):
                forest = shape_trees(group, job.root_pos)
                tree_gather.build(job, group, schedule, forest, gather_shares(job, group, forest))
            elif job.kind == "reduce":
                self._reduce_group(job, group, schedule)
            else:
                self._build_group(job, group, schedule)

    def _build_group(self, job: Job, group: Group, s: Schedule) -> None:
        forest = shape_trees(group, job.root_pos)
        members, add = group.members, s.add
        dealt = deal(job, group, forest)
        for t, (parents, depth) in enumerate(forest):
            pieces = dealt[t]
            if not pieces:
                continue
            keys = [(("piece", j),) for j in pieces] if job.numeric else None
            tag = ("tree", id(group), t)
            first: dict[Pos, int] = {}  # position -> the transfer that brought it the tree's first piece
            for x in sorted(parents, key=depth.__getitem__):
                # the transfers of a position's pieces are consecutive: piece k of x is first[x] + k
                p = parents[x]
                src, dst = members[p], members[x]
                up = first.get(p)  # None: p is the root, which holds every piece
                tid = -1
                for k in range(len(pieces)):
                    if up is None:
                        deps: tuple[int, ...] = (tid,) if k else ()
                    else:
                        deps = (up + k, tid) if k else (up,)
                    tid = add(src, dst, keys[k] if keys is not None else 1, "copy", deps, tag, dst)
                    if not k:
                        first[x] = tid

    def _reduce_group(self, job: Job, group: Group, s: Schedule) -> None:
        """The broadcast run backwards: each position adds what its children sent of piece j into its own,
        then sends the sum to its parent, pieces in order on each link."""
        forest = shape_trees(group, job.root_pos)
        dealt = deal(job, group, forest)
        for t, (parents, depth) in enumerate(forest):
            pieces = dealt[t]
            into: dict[tuple[Pos, int], list[int]] = defaultdict(list)  # (position, piece) -> its children's sums
            for x in sorted(parents, key=lambda y: -depth[y]):
                p, src, dst = parents[x], group.members[x], group.members[parents[x]]
                behind: list[int] = []
                for j in pieces:
                    keys = (("piece", j),) if job.numeric else 1
                    tid = s.add(src, dst, keys, "add", into[(x, j)] + behind, ("tree", id(group), t), dst)
                    into[(p, j)].append(tid)
                    behind = [tid]

    def closed_form(self, job: Job) -> float:
        """The slowest tree's deepest chain (`chain_time` of its pieces); Reduce is the same chains run
        backwards (each link again carries one tree's pieces in order), so the same time. The pieces are
        dealt as `deal` deals them."""
        group, net = job.group, job.net
        forest = shape_trees(group, job.root_pos)
        if job.kind in ("gather", "scatter"):
            return tree_gather.gather_time(job, forest, lambda u, v, b: _hop(net, u, v, b),
                                           gather_shares(job, group, forest))
        return _forest_time(job, group, forest, [len(p) for p in deal(job, group, forest)])


def _forest_time(job: Job, group: Group, forest: Forest, counts: list[int]) -> float:
    """Seconds until the last position has its last piece, tree t carrying ``counts[t]`` pieces of
    ``job.key_bytes`` (each tree's deepest chain, `chain_time`)."""
    worst = 0.0
    for c, (parents, depth) in zip(counts, forest, strict=True):
        if c == 0:
            continue
        cost: dict[Pos, list[float]] = {job.root_pos: []}
        for x in sorted(parents, key=depth.__getitem__):
            ends = (group.members[x], group.members[parents[x]])
            hop = _hop(job.net, *(ends if job.kind == "reduce" else ends[::-1]), job.key_bytes)
            cost[x] = cost[parents[x]] + [hop]
            worst = max(worst, chain_time(cost[x], c))
    return worst


def tree_rates(job: Job, group: Group, forest: Forest, at_root: bool = False) -> list[float]:
    """Each tree's bottleneck, bytes/s: the slowest link on the route of any of its hops (parent to child for
    Broadcast and Scatter, child to parent for Reduce and Gather). No two trees share a link, so a tree's
    pieces flow at this rate. ``at_root``: only the tree's hops at the root."""
    out = []
    for parents, _ in forest:
        rate = math.inf
        for x, p in parents.items():
            if at_root and p != job.root_pos:
                continue
            ends = (group.members[x], group.members[p])
            src, dst = ends if job.kind in ("reduce", "gather") else ends[::-1]
            path = job.net.routes(src, dst)[0]
            rate = min([rate] + [job.net.graph.edges[e]["bandwidth_bytes_per_s"]
                                 for e in zip(path, path[1:], strict=False)])
        out.append(rate)
    return out


def gather_shares(job: Job, group: Group, forest: Forest) -> list[float] | None:
    """Gather/Scatter in timing mode: the fraction of every shard each tree carries, in proportion to the
    trees' bottleneck rates (`tree_rates`) where those differ, each tree has one link at the root and its
    slowest link is that one (a slow hop below the root: cutting by bottleneck rates over-weights it, the
    tree's time being set by its chains rather than its slowest link), and that closed form
    (`tree_gather.gather_time`) is below the even cut's; None: 1 / d each."""
    d = len(forest)
    if job.numeric or d < 2:
        return None
    rates = tree_rates(job, group, forest)
    if max(rates) <= min(rates) * (1 + 1e-9) or not all(math.isfinite(r) and r > 0 for r in rates):
        return None
    if any(r < root * (1 - 1e-9) for r, root in zip(rates, tree_rates(job, group, forest, True), strict=True)):
        return None  # a slow hop below the root: a rate-proportional cut is not what its chains need
    if any(sum(p == job.root_pos for p in parents.values()) != 1 for parents, _ in forest):
        return None  # a tree on two of the root's links: its slow one carries only part of the tree's parts
    shares = [r / sum(rates) for r in rates]

    def hop(u: Any, v: Any, nbytes: float) -> float:
        return _hop(job.net, u, v, nbytes)

    if tree_gather.gather_time(job, forest, hop, shares) >= tree_gather.gather_time(job, forest, hop):
        return None
    return shares


def deal(job: Job, group: Group, forest: Forest) -> list[list[int]]:
    """The pieces (indices into ``job.chunks``) each tree carries.

    Even (piece j to tree j mod d) where the trees' bottlenecks (`tree_rates`) are alike. Where they differ
    (a degraded link or a slow chip's cables in some tree), each tree's count is proportional to its
    bottleneck rate (largest remainders; every tree keeps a piece while there are as many pieces as trees), so
    the slow tree's link carries its share at its own rate: on ``torus:8`` with the root's cable at half speed
    the shares are V/3 and 2V/3 and the time about V / (1.5 b) where an even split takes V / b. The uneven
    deal is used only where its closed form (`_forest_time`) is below the even one's."""
    d, chunks = len(forest), job.chunks
    even = [list(range(t, chunks, d)) for t in range(d)]
    if d < 2 or chunks <= d:
        return even
    rates = tree_rates(job, group, forest)
    if max(rates) <= min(rates) * (1 + 1e-9) or not all(math.isfinite(r) and r > 0 for r in rates):
        return even
    share = [chunks * r / sum(rates) for r in rates]
    counts = [max(1, math.floor(x)) for x in share]
    while sum(counts) > chunks:  # the max(1, ...) floor took too many: trim the largest
        counts[max(range(d), key=lambda t: counts[t] - share[t])] -= 1
    for t in sorted(range(d), key=lambda t: counts[t] - share[t])[:chunks - sum(counts)]:
        counts[t] += 1
    if _forest_time(job, group, forest, counts) >= _forest_time(job, group, forest, [len(p) for p in even]):
        return even
    out: list[list[int]] = [[] for _ in range(d)]
    for j in range(chunks):  # weighted round robin: the tree furthest behind its count next
        t = min((t for t in range(d) if len(out[t]) < counts[t]), key=lambda t: ((len(out[t]) + 1) / counts[t], t))
        out[t].append(j)
    return out


def _hop(net: Network, src: Any, dst: Any, piece_bytes: float) -> float:
    """Seconds one piece takes from ``src`` to ``dst`` alone: route latency plus bytes over the slowest link."""
    path = net.routes(src, dst)[0]
    edges = list(zip(path, path[1:], strict=False))
    return route_latency(net, edges) + piece_bytes / min(net.graph.edges[e]["bandwidth_bytes_per_s"] for e in edges)


SPANNING_TREES = register(SpanningTrees())
