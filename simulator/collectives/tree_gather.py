"""Gather and Scatter over the arc-disjoint spanning trees of `simulator.collectives.spanning_trees`.

Gather: every member's shard (V / n) is cut into d parts, part t travelling up tree t to the root hop by
hop, so each of the root's d incoming links carries the n - 1 parts of one tree, (n - 1) V / (n d): the
root-ingress bound. Scatter is the same run backwards (the root's parts go down, each tree carrying one
part of every member's shard).

Order on a link. Link x -> parent(x) carries the parts of x's subtree in `send_order`: x's own first, then
its children's link orders merged round-robin (every child's first, then every child's second, ...).

Closed form (`gather_time`), uniform hops of t = alpha + V / (n d b) each: every link x -> parent(x) is busy
without a gap from 0 to |subtree(x)| t. By induction up the tree: a child's link delivers its j-th part at
j t, so by time k t the merged order's first k + 1 parts are at x (the j-th part of a child sits at place
j or later, counting x's own); the root's link in each tree carries all n - 1 others, so

    T = (n - 1)(alpha + V / (n d b)),

against the bound (n - 1) V / (n d b) + alpha a factor of about 1 + alpha n d b / V. Scatter: every
dependency reversed (each link's parts in the reverse order), the same time. On links that differ (a
degraded cable, a logical axis over several physical axes) each link at its own cost t_x (`tree_time`): link
x -> parent(x) carries its |subtree(x)| parts one after another, and the last still takes the hops above it,

    T = max over x of  |subtree(x)| t_x + sum of t_y over the links y from parent(x) up to the root,

which the uniform case meets at the root's link. (It replaced pricing every hop of a tree at its slowest,
1.27x the simulation on ``torus:8`` with ``link:3->4=0.5``, 3.3x on ``torus:4x4`` with a cable far from the
root at 0.3.) Where the
trees' slowest links differ (a degraded cable), `spanning_trees.gather_shares` may cut the shards unevenly:
tree t's part of every shard in proportion to its slowest link's rate.

Numeric mode moves whole shards (keys of `simulator.collectives.payload`): member y's shard goes up
(or down) the tree of its place in row-major order modulo d; the data is checked against numpy, the time
is that of the schedule's unequal split.
"""
from __future__ import annotations

from typing import Any

from simulator.collectives.algorithm import Job
from simulator.collectives.groups import Group
from simulator.collectives.schedule import Schedule

Pos = tuple[int, ...]
Tree = tuple[dict[Pos, Pos], dict[Pos, int]]  #: (parents, depths)


def children(parents: dict[Pos, Pos]) -> dict[Pos, list[Pos]]:
    """Each position's children in the tree (in row-major order)."""
    out: dict[Pos, list[Pos]] = {}
    for x in sorted(parents):
        out.setdefault(parents[x], []).append(x)
    return out


def send_order(parents: dict[Pos, Pos], depth: dict[Pos, int], dealt: set[Pos] | None) -> dict[Pos, list[Pos]]:
    """Per position x, the origins whose parts link x -> parent(x) carries, in order: x's own (if dealt to this
    tree), then the children's orders merged round-robin. ``dealt``: the origins this tree carries (None: all)."""
    kids = children(parents)
    order: dict[Pos, list[Pos]] = {}
    for x in sorted(parents, key=lambda y: -depth[y]):
        lists = [order[c] for c in kids.get(x, [])]
        merged = [y for j in range(max(map(len, lists), default=0)) for lst in lists if j < len(lst) for y in [lst[j]]]
        order[x] = ([x] if dealt is None or x in dealt else []) + merged
    return order


def _dealt(job: Job, group: Group, t: int, d: int) -> set[Pos] | None:
    """Numeric mode: the members whose whole shard tree t carries (row-major place modulo d); timing: all."""
    if not job.numeric:
        return None
    return {p for i, p in enumerate(group.positions()) if i % d == t and p != job.root_pos}


def build(job: Job, group: Group, s: Schedule, forest: tuple[Tree, ...],
          shares: list[float] | None = None) -> None:
    """Gather (up the trees) or Scatter (down them, every order reversed) of ``job`` in ``group``; ``shares``:
    the fraction of every shard tree t carries in timing mode (None: 1 / d each)."""
    d = len(forest)
    shares = shares or [1 / d] * d
    gather = job.kind == "gather"
    for t, (parents, depth) in enumerate(forest):
        part = job.key_bytes * shares[t]  # a shard is a key of whole bytes (`simulator.collectives.payload`)
        order = send_order(parents, depth, _dealt(job, group, t, d))
        here: dict[tuple[Pos, Pos], int] = {}  # (position, origin) -> the transfer that brought origin's part
        for x in sorted(parents, key=lambda y: -depth[y] if gather else depth[y]):
            p = parents[x]
            src, dst = (group.members[x], group.members[p]) if gather else (group.members[p], group.members[x])
            behind: list[int] = []
            for y in (order[x] if gather else reversed(order[x])):
                keys: tuple | int = ((0, y),) if job.numeric else 1
                came = here.get((x, y) if gather else (p, y))
                deps = ([came] if came is not None else []) + behind
                tid = s.add(src, dst, keys, "copy", deps, ("tree_gather", id(group), t), dst,
                            nbytes=None if job.numeric else part)
                here[(p, y) if gather else (x, y)] = tid
                behind = [tid]


def gather_time(job: Job, forest: tuple[Tree, ...], hop: Any, shares: list[float] | None = None) -> float:
    """The closed form of the module docstring, each link at its own cost: the slowest tree's `tree_time`
    (``hop(src, dst, bytes)`` seconds per hop). ``shares`` as in `build`."""
    group, d = job.group, len(forest)
    shares = shares or [1 / d] * d
    worst = 0.0
    for t, (parents, depth) in enumerate(forest):
        part = job.key_bytes * shares[t] if not job.numeric else job.key_bytes
        order = send_order(parents, depth, _dealt(job, group, t, d))
        cost = {x: hop(*((group.members[x], group.members[p]) if job.kind == "gather" else
                         (group.members[p], group.members[x])), part) for x, p in parents.items()}
        worst = max(worst, tree_time(parents, {x: len(order[x]) for x in parents}, cost, job.root_pos))
    return worst


def tree_time(parents: dict[Pos, Pos], parts: dict[Pos, int], cost_s: dict[Pos, float], root: Pos) -> float:
    """Seconds until the root has every part of one tree: the largest, over the tree's links x -> parent(x), of
    the ``parts[x]`` parts that link carries one after another at ``cost_s[x]`` each (x's own part ready at 0),
    plus the hops from parent(x) up to the root that the last of them still takes. Each link carries its
    subtree's parts and nothing else (no two trees share a link direction), so none can finish sooner; with x's
    own part first on every link and the children's merged behind it the bound is met (uniform hops: the root's
    link, (n - 1) hops' time). Scatter runs every link backwards, the same time."""
    above: dict[Pos, float] = {root: 0.0}  # position -> seconds from it up to the root
    for x in parents:  # walked up iteratively: a ring's trees are n - 1 deep, past Python's recursion limit
        path = []
        while x not in above:
            path.append(x)
            x = parents[x]
        t = above[x]
        for y in reversed(path):
            t += cost_s[y]
            above[y] = t
    return max((parts[x] * cost_s[x] + above[parents[x]] for x in parents if parts[x]), default=0.0)
