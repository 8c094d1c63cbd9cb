"""AllReduce on a 2-D or 3-D grid without wraparound (or with some): line shares, pipelined in lock step.

The bound (`simulator.collectives.bounds`): the N chips of a k0 x k1 grid together receive 2(N - 1) V over
the 2E link directions of its E = k0 (k1 - 1) + k1 (k0 - 1) links, so T >= (N - 1) V / (E W): 0.625 V/W on
4x4, where ReduceScatter then AllGather over both axes takes 1.5x that and `line_pipelined` on one axis
after the other V/W.

The shares (a fluid argument that the bound is reachable in bandwidth). Cut V into E units. Share A_r,
one per row r (the chips at axis-0 coordinate r), holds k1 - 1 units: it is summed along every column to
row r (a line reduction: link i -> i + 1 of a column carries it if r > i, i + 1 -> i if r <= i), AllReduced
along row r as `line_pipelined` does (summed toward the middle chip and copied back: one unit of it each
way over every link of row r), and copied back out along every column from row r. Share B_c, one per
column, holds k0 - 1 units, the same with the axes swapped. A column link direction then carries every A
share once (k0 (k1 - 1) units: summed in toward r on one side of it, copied back out on the other) and
its own column's B share (k0 - 1): N - 1 units; a row link direction likewise k1 (k0 - 1) + k1 - 1 = N - 1.
Every link direction carries (N - 1) / E of V: exactly the bound.

The schedule. The array is cut into c pieces, each piece holding one unit's worth (V / (c E) bytes) of
each of the E units. A share's hop that, on its own, happens ``o`` steps after the share starts
(its *offset*: a column reduction's hop from coordinate i toward r at offset i or k0 - 1 - i, the row
AllReduce from offset R = max(r, k0 - 1 - r) on, chip x1 of row r holding the total at
R + M1 + |x1 - m1| with m1 the row's middle chip and M1 = ceil((k1 - 1) / 2), the copies down its column
one step per hop after that) is run for piece j at step j + o. A step is one bundle per link direction
(the units of every share crossing it then; the ``add`` and ``copy`` keys as two transfers started
together) and ends at a barrier: every step starts when the previous one has ended everywhere.

Closed form (`GridPipelined.closed_form`): step t lasts max over link directions of
``alpha + units(t) x V / (c E) / W``, with units(t) the units a link direction carries at step t (the
shares whose hop on it has an offset o with 0 <= t - o < c); the steps add, over c + D - 1 steps for the
deepest share's depth D = 2 (k0 - 1) + 2 M1 (or the same with the axes swapped). Once every offset is
under way (D - 1 <= t <= c - 1) every link direction carries N - 1 units a step, so

    T = (c - D + 1)(alpha + (N - 1) V / (c E W)) + (the 2 (D - 1) steps of fill and drain, as above),

about (1 + ~(D - 1) / c)(N - 1) V / (E W) + (c + D - 1) alpha: the bound times the pipeline's fill (in
practice the fill costs about 0.6 D full steps: the links next to the lines' ends are full from the first
steps, the last copies drain for D). Timing mode sends one bundle per link direction a step (its ``add`` and
``copy`` bytes together: the same step time).

One axis a ring (more than two chips, wrapped: `slice:8x16` on v5e wraps its 16): a share is summed across a
ring from both sides (the antipode of an even ring on the low side), copied back the same way, and AllReduced
along a ring in k parts, part p summed at chip p (each way round then carries (k - 1) / k of the share). With
f = (k - 1) / k on a ring and 1 on a line, a column link direction carries f0 (k0 a + b) and a row link
direction f1 (k1 b + a) for shares a = |A_r|, b = |B_c|: equal when a : b = (f1 k1 - f0) : (f0 k0 - f1)
(`share_units`), and then again every link direction, wrap links too, carries (N - 1) / E of V. A piece is as
many units as all the shares' parts together (E on a grid without wraparound). Both axes rings: refused (the
ring algorithms reach the bound on tori). Numeric mode: c = N pieces, each unit of a piece one key.

Three axes (`family_units`). A share per line of every axis a (the chips sharing their coordinates on the two
other axes b, c), summed across to its line one axis after the other -- along b for every chain of b, then
along c within the plane of the line's b -- AllReduced along the line and copied back out the reverse way
(each chip's copy leaving as soon as it holds the total). On a grid without wraparound a family (a, b first)
at one unit a share puts k_b k_c units on every b link direction (every chain of b carries every line's sum,
the reduction one way and the copy the other: k_b lines a plane, k_c planes), k_c on every c link direction
(only the plane of the line) and 1 on its own line's; (a, c first) the same with b and c swapped. Those are
three loads per family, the same on every direction of an axis (a ring: k - 1 in place of k), so a choice of
units u >= 0 per family loads every link direction alike when three sums M u are equal: a cone whose extreme
rays are the null vectors of every three families' two difference rows (their cross product). Every such
choice moves 2 (N - 1) units of every unit of V, the least (each chip receives each other chip's
contribution once summed in, once copied back), so each link direction again carries (N - 1) / E of V: the
bound. Of the rays and their pairwise sums `family_units` takes the least fill and drain per unit of a piece
(`_fill_excess`): v5p slice:2x2x4 1.05x the bound at 1 GB, mesh:2x4x4 1.06x, where `line` takes 1.21x and
1.35x. The closed form is the same sum of lock steps over the hops' offsets as on two axes.
"""
from __future__ import annotations

import functools
import itertools
import math
from collections import defaultdict
from fractions import Fraction
from typing import Any

import numpy as np

from simulator.collectives.algorithm import Algorithm, Job, register
from simulator.collectives.groups import Group
from simulator.collectives.line_pipelined import MAX_PIECES, middle
from simulator.collectives.schedule import Schedule
from simulator.engine.network import Network
from simulator.errors import PodsimError

TRANSFER_BUDGET = 120_000  #: default pieces stop where the schedule would pass this many transfers...
FILL = 4  #: ...unless that leaves fewer than FILL x (D - 1) pieces (the fill then costs over ~0.6 / FILL of the sum)...
MAX_TRANSFERS = 500_000  #: ...which may take the schedule up to this many transfers (mesh:8x8x8: ~15 s, 330 MB)
Pos = tuple[int, ...]  #: a position in a group
Hop = tuple[Pos, Pos, int, str]  #: (from position, to position, offset, op)
Shape = tuple[tuple[int, ...], tuple[bool, ...]]  #: (sizes, wraps) of a 2-D or 3-D group


def edges(k0: int, k1: int) -> int:
    """Links (undirected) of a k0 x k1 grid without wraparound: E."""
    return k0 * (k1 - 1) + k1 * (k0 - 1)


def _sides(n: int, target: int, wrap: bool) -> tuple[int, int]:
    """Chips on the low and the high side of ``target``: a line's ends; a ring's halves (an even ring's
    antipode on the low side, so it sends up)."""
    return (n // 2, (n - 1) // 2) if wrap else (target, n - 1 - target)


def _reduce(n: int, target: int, start: int, wrap: bool) -> list[tuple[int, int, int]]:
    """(from, to, offset) of a reduction to ``target`` from both sides, the farthest chips first at ``start``."""
    low, high = _sides(n, target, wrap)
    return [((target - d) % n, (target - d + 1) % n, start + low - d) for d in range(low, 0, -1)] + \
        [((target + d) % n, (target + d - 1) % n, start + high - d) for d in range(high, 0, -1)]


def _spread(n: int, source: int, start: int, wrap: bool) -> list[tuple[int, int, int]]:
    """(from, to, offset) of a copy out from ``source`` to both sides, the first hops at ``start`` (on an even
    ring the antipode down the low side, which it summed up: each way round then carries n - 1 hops of the two)."""
    low, high = _sides(n, source, wrap)
    return [((source - d + 1) % n, (source - d) % n, start + d - 1) for d in range(1, low + 1)] + \
        [((source + d - 1) % n, (source + d) % n, start + d - 1) for d in range(1, high + 1)]


def _ready(n: int, source: int, start: int, wrap: bool) -> list[int]:
    """The offset at which each chip holds what `_spread` copies out from ``source``."""
    ready = [start] * n
    for _, j, o in _spread(n, source, start, wrap):
        ready[j] = o + 1
    return ready


def share_hops(shape: Shape, axis: int, line: Pos, part: int, order: tuple[int, ...] | None = None) -> list[Hop]:
    """Every hop, with its offset, of the share AllReduced along ``axis`` on the line through position ``line``
    (its entry on ``axis`` ignored), its AllReduce summed at chip ``part`` of the line (a line's middle; each
    chip of a ring for a part of the share). The share is summed across to its line one other axis after
    another, in ``order`` (default: the other axes in turn), every chain of a stage at once, and copied back
    out in the reverse order, each chip's copy leaving as soon as it holds the total."""
    sizes, wraps = shape
    order = tuple(a for a in range(len(sizes)) if a != axis) if order is None else order

    def moved(pos: Pos, b: int, x: int) -> Pos:
        return pos[:b] + (x,) + pos[b + 1:]

    def chains(b: int, fixed: tuple[int, ...]) -> list[Pos]:
        """Every position whose entries on ``fixed`` are the line's and whose entry on ``b`` is 0: the chain
        starts of a stage along ``b``."""
        ranges = [(line[a],) if a in fixed else (0,) if a == b else range(k) for a, k in enumerate(sizes)]
        return list(itertools.product(*ranges))

    hops: list[Hop] = []
    start = 0
    for i, b in enumerate(order):  # sum across to the line, one axis after another
        for base in chains(b, order[:i]):
            hops += [(moved(base, b, x), moved(base, b, y), o, "add")
                     for x, y, o in _reduce(sizes[b], line[b], start, wraps[b])]
        start += max(_sides(sizes[b], line[b], wraps[b]))
    half = max(_sides(sizes[axis], part, wraps[axis]))
    on_line = moved(line, axis, 0)
    hops += [(moved(on_line, axis, x), moved(on_line, axis, y), o, "add")
             for x, y, o in _reduce(sizes[axis], part, start, wraps[axis])]
    hops += [(moved(on_line, axis, x), moved(on_line, axis, y), o, "copy")
             for x, y, o in _spread(sizes[axis], part, start + half, wraps[axis])]
    ready = {moved(on_line, axis, x): o for x, o in enumerate(_ready(sizes[axis], part, start + half, wraps[axis]))}
    for i in range(len(order) - 1, -1, -1):  # copy the total back out, the last axis summed first
        b = order[i]
        for src in [p for p in ready if all(p[a] == line[a] for a in order[:i + 1])]:
            hops += [(moved(src, b, x), moved(src, b, y), o, "copy")
                     for x, y, o in _spread(sizes[b], line[b], ready[src], wraps[b])]
            for x, o in enumerate(_ready(sizes[b], line[b], ready[src], wraps[b])):
                ready.setdefault(moved(src, b, x), o)
    return hops


def _wraps(shape: Shape) -> tuple[bool, ...]:
    """Which axes run as rings (wrapped, more than two chips)."""
    return tuple(w and k > 2 for k, w in zip(*shape, strict=True))


def share_units(shape: Shape) -> tuple[int, int]:
    """Units of one part of an A share and of a B share (each share is one part on a line, k parts on a ring of
    k) that load every link direction alike: with f = (k - 1) / k on a ring, 1 on a line, a column link carries
    f0 (k0 a + b) of the shares a = |A_r| and b = |B_c|, a row link f1 (k1 b + a); equal when
    a : b = (f1 k1 - f0) : (f0 k0 - f1) -- on a grid without wraparound k1 - 1 : k0 - 1."""
    (k0, k1), (w0, w1) = shape[0], _wraps(shape)
    f0, f1 = (Fraction(k0 - 1, k0) if w0 else 1), (Fraction(k1 - 1, k1) if w1 else 1)
    a = Fraction(f1 * k1 - f0) / (k1 if w1 else 1)
    b = Fraction(f0 * k0 - f1) / (k0 if w0 else 1)
    scale = math.lcm(a.denominator, b.denominator)
    a, b = a * scale, b * scale
    g = math.gcd(int(a), int(b))
    return int(a) // g, int(b) // g


Family = tuple[int, tuple[int, ...]]  #: (the shares' axis, the order the other axes are summed across in)


def families(ndim: int) -> list[Family]:
    """Every (axis, order) of a 2-D or 3-D group: axis 1's shares first (a 2-D group's A shares), then 0's."""
    return [(a, order) for a in range(ndim - 1, -1, -1)
            for order in itertools.permutations([b for b in range(ndim) if b != a])]


def _family_shares(shape: Shape, family: Family) -> list[list[Hop]]:
    """The hops of each share (part) of ``family``: one per line along its axis (and per part on a ring)."""
    (sizes, wraps), (axis, order) = shape, family
    parts = range(sizes[axis]) if wraps[axis] else [middle(sizes[axis])]
    lines = itertools.product(*((0,) if a == axis else range(k) for a, k in enumerate(sizes)))
    return [share_hops(shape, axis, line, p, order) for line in lines for p in parts]


@functools.lru_cache(maxsize=64)
def family_units(shape: Shape) -> tuple[tuple[Family, int], ...]:
    """Units of one share (part) of each family, those whose loads are equal on every link direction.

    2-D: `share_units`. 3-D: a family's shares at one unit each put the same units on every link direction
    of one axis (summed over lines, a chain's reduction and its copy back load its two directions alike), so
    the loads are a 3 x 6 matrix M and a balanced choice is u >= 0 with M u equal on all three axes. Those form
    a cone; its extreme rays are the null vectors (the cross product of the two difference rows) of each
    three columns, where they have one sign. Of the rays and their pairwise sums, the one with the least fill
    and drain (the steps' excess over the steady state, per unit of a piece) is taken, then the fewest units."""
    sizes = shape[0]
    fams = families(len(sizes))
    if len(sizes) == 2:
        ua, ub = share_units(shape)
        return ((fams[0], ua), (fams[1], ub))
    hops_of = [_family_shares(shape, family) for family in fams]
    links = sorted({(a, b) for shares_ in hops_of for hops in shares_ for a, b, _, _ in hops})
    index = {link: i for i, link in enumerate(links)}
    d = max(o for shares_ in hops_of for hops in shares_ for _, _, o, _ in hops) + 1
    hist = np.zeros((len(fams), len(links), d))  # family x link direction x offset, one unit a share
    for f, shares_ in enumerate(hops_of):
        for hops in shares_:
            for a, b, o, _ in hops:
                hist[f, index[(a, b)], o] += 1
    axis = np.array([_axis_of(a, b) for a, b in links])
    loads = np.zeros((len(sizes), len(fams)), dtype=np.int64)
    for f, family in enumerate(fams):
        for ax in range(len(sizes)):
            seen = set(hist[f, axis == ax].sum(axis=1).tolist())
            if len(seen) != 1:  # not uniform along an axis: not the construction above
                raise PodsimError(f"grid_pipelined: family {family} loads axis {ax} unevenly on "
                                  f"{'x'.join(map(str, sizes))}")
            loads[ax, f] = int(seen.pop())
    r1, r2 = loads[0] - loads[1], loads[0] - loads[2]
    rays = []
    for cols in itertools.combinations(range(len(fams)), 3):
        n = np.cross(r1[list(cols)], r2[list(cols)])
        if not n.any() or (n.min() < 0 < n.max()):
            continue
        u = np.zeros(len(fams), dtype=np.int64)
        u[list(cols)] = np.abs(n)
        rays.append(u // math.gcd(*map(int, u)))
    if not rays:
        raise PodsimError(f"grid_pipelined: no balanced shares on {'x'.join(map(str, sizes))}")
    sums = (*rays, *(a + b for a in rays for b in rays))
    candidates = {tuple(int(x) for x in u // math.gcd(*map(int, u))) for u in sums}
    count = np.array([len(shares_) for shares_ in hops_of])

    def cost(u: tuple[int, ...]) -> tuple[float, int]:
        per_piece = int(np.dot(u, count))
        return _fill_excess(np.tensordot(np.array(u, dtype=float), hist, axes=1)) / per_piece, per_piece

    best = min(sorted(candidates), key=cost)
    return tuple((fam, c) for fam, c in zip(fams, best, strict=True) if c)


def _axis_of(a: Pos, b: Pos) -> int:
    """The axis a hop between neighbouring positions runs along."""
    return next(i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y)


def _fill_excess(hist: np.ndarray) -> float:
    """Units the busiest link direction carries over a pipeline of D pieces beyond D steady steps (``hist``:
    link direction x offset): the fill and drain's cost in the closed form's terms, the same for every c >= D."""
    d = hist.shape[1]
    steady = hist.sum(axis=1).max()
    per_step = [hist[:, max(0, t - d + 1):t + 1].sum(axis=1).max() for t in range(2 * d - 1)]
    return float(sum(per_step) - d * steady)


def shares_of(shape: Shape, table: tuple[tuple[Family, int], ...]) -> list[tuple[int, list[Hop]]]:
    """(units, hops) of every share (part) of the families in ``table`` at its units."""
    return [(c, hops) for fam, c in table for hops in _family_shares(shape, fam)]


def shares(shape: Shape) -> list[tuple[int, list[Hop]]]:
    """(units, hops) of every share (or share part): on a 2-D group A_r for each row r, then B_c for each
    column c; on a 3-D group each family of `family_units` in turn."""
    shape = (tuple(shape[0]), _wraps(shape))
    return shares_of(shape, family_units(shape))


def units(shape: Shape) -> int:
    """Units of one piece (all shares): E on a grid without wraparound."""
    return sum(u for u, _ in shares(shape))


def depth(shape: Shape) -> int:
    """D: the most offsets one share spans (its last hop's offset + 1)."""
    return max(max(o for _, _, o, _ in hops) + 1 for _, hops in shares(shape))


class GridPipelined(Algorithm):
    """AllReduce on a 2-D or 3-D grid: line shares, summed across, AllReduced along, copied back (module)."""

    name = "grid_pipelined"
    summary = ("AllReduce on a 2-D or 3-D grid without wraparound: one share per line of every axis, summed "
               "across to its line, AllReduced along it and copied back, pipelined in lock step: (N-1)V/(E W), "
               "the bound")
    kinds = ("all_reduce",)
    topologies = ("mesh", "torus")
    nic_rings = False

    def unfit(self, kind: str, net: Network, groups: list[Group]) -> str | None:
        why = super().unfit(kind, net, groups)
        group = groups[0]
        if why is None and not net.grid:
            return "it needs a grid topology (a 2-D or 3-D mesh or slice)"
        if why is None and (len(group.sizes) not in (2, 3) or min(group.sizes) < 2):
            return (f"it runs on a 2-D or 3-D group (two or three axes of 2 or more chips), not "
                    f"{'x'.join(map(str, group.sizes))}")
        if why is None and all(w and k > 2 for w, k in zip(group.wraps, group.sizes, strict=True)):
            return "every axis wraps: the ring algorithms reach the bound there"
        return why

    def parts(self, kind: str, group: Group, multi_axis: str) -> int:
        """E parts (numeric keys: one per unit of each of the N pieces)."""
        return units(_shape(group)) if len(group.sizes) in (2, 3) else 1

    def default_chunks(self, kind: str, net: Network, groups: list[Group], nbytes: float | None) -> int:
        """Pieces that minimise the closed form within `TRANSFER_BUDGET` transfers, or where that budget leaves
        fewer than `FILL` x (D - 1) pieces (a deep 3-D grid: D = 36 on 8x8x8, 48 on 2x16x16), up to that many within
        `MAX_TRANSFERS` (as `simulator.collectives.spanning_trees`); numeric mode: N."""
        group = groups[0]
        if nbytes is None:
            return group.n
        profile = _Profile(net, group)
        per_step = len(profile.hist) * len(groups) + 1  # a bundle per link direction, a barrier
        cap = TRANSFER_BUDGET // per_step - profile.d + 1
        if cap < FILL * (profile.d - 1):
            cap = max(cap, min(FILL * (profile.d - 1), MAX_TRANSFERS // per_step - profile.d + 1))
        cap = max(1, min(MAX_PIECES, cap))
        best = min(_candidates(cap), key=lambda c: profile.time(nbytes, c))
        return best

    def build(self, job: Job, s: Schedule) -> None:
        c = job.chunks if not job.numeric else job.group.n
        steps: dict[int, dict[tuple[Any, Any, str], Any]] = defaultdict(dict)
        for group in job.groups:
            if job.numeric:
                _numeric_steps(group, c, steps)
            else:
                _timing_steps(group, c, job.nbytes / (c * units(_shape(group))), steps)
        barrier = None
        for t in sorted(steps):
            deps = () if barrier is None else (barrier,)
            for (src, dst, op), keys in steps[t].items():
                if job.numeric:
                    s.add(src, dst, tuple(keys), op, deps, ("grid", t), dst)
                else:
                    s.add(src, dst, 1, op, deps, ("grid", t), dst, nbytes=keys)
            barrier = s.barrier(("grid", t))

    def closed_form(self, job: Job) -> float:
        """Steps in lock step: each the slowest link direction's latency plus its units' bytes (module)."""
        c = job.chunks if not job.numeric else job.group.n
        return _Profile(job.net, job.group).time(job.nbytes, c)


class _Profile:
    """Per link direction: the units its shares put on it at each offset, its latency and bandwidth."""

    def __init__(self, net: Network, group: Group) -> None:
        shape = _shape(group)
        self.e = units(shape)
        self.d = depth(shape)
        rows: dict[tuple[Any, Any], np.ndarray] = {}
        for count, hops in shares(shape):
            for a, b, o, _ in hops:
                row = rows.setdefault((a, b), np.zeros(self.d))
                row[o] += count
        self.hist = np.array(list(rows.values()))  # links x offsets
        self.cum = np.concatenate([np.zeros((len(rows), 1)), np.cumsum(self.hist, axis=1)], axis=1)
        data = [_link(net, group.members[a], group.members[b]) for a, b in rows]
        self.alpha = np.array([x[0] for x in data])
        self.bandwidth = np.array([x[1] for x in data])

    def time(self, nbytes: float, c: int) -> float:
        """Seconds of c pieces: the steps' slowest link directions, added."""
        unit = nbytes / (c * self.e)
        t = np.arange(c + self.d - 1)
        hi = np.minimum(t, self.d - 1) + 1  # offsets o <= t ...
        lo = np.maximum(t - c + 1, 0)  # ... and o > t - c
        units = self.cum[:, hi] - self.cum[:, lo]  # links x steps
        step = self.alpha[:, None] + units * unit / self.bandwidth[:, None]
        step = np.where(units > 0, step, 0.0)
        return float(step.max(axis=0).sum())


def _numeric_steps(group: Group, c: int, steps: dict[int, dict[tuple[Any, Any, str], Any]]) -> None:
    """File each hop's keys under its step: piece j's unit u of a share is key (share's first unit + u, the
    j-th position)."""
    positions, first = group.positions(), 0
    for count, hops in shares(_shape(group)):
        for a, b, o, op in hops:
            link = (group.members[a], group.members[b], op)
            for j in range(c):
                steps[j + o].setdefault(link, []).extend((first + u, positions[j]) for u in range(count))
        first += count


def _timing_steps(group: Group, c: int, unit: float, steps: dict[int, dict[tuple[Any, Any, str], Any]]) -> None:
    """File each link direction's bytes (per op) under each step: its offsets' units in the window of c."""
    hist: dict[tuple[Any, Any, str], dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for count, hops in shares(_shape(group)):
        for a, b, o, _ in hops:
            hist[(group.members[a], group.members[b], "add")][o] += count  # timing: one bundle a step
    for link, by_offset in hist.items():
        for o, count in by_offset.items():
            for t in range(o, o + c):
                row = steps[t]
                row[link] = row.get(link, 0.0) + count * unit


def _shape(group: Group) -> Shape:
    """(sizes, wraps) of a 2-D or 3-D group."""
    return group.sizes, group.wraps


def _link(net: Network, src: Any, dst: Any) -> tuple[float, float]:
    """(route latency, slowest bandwidth) from ``src`` to ``dst``."""
    path = net.routes(src, dst)[0]
    hops = list(zip(path, path[1:], strict=False))
    return (sum(net.graph.edges[h]["latency_s"] for h in hops),
            min(net.graph.edges[h]["bandwidth_bytes_per_s"] for h in hops))


def _candidates(cap: int) -> list[int]:
    """Piece counts to price: 1 .. cap, geometrically (about 60 values)."""
    out = {1, cap}
    x = 1.0
    while x < cap:
        out.add(min(cap, round(x)))
        x *= 1.12
    return sorted(out)


GRID_PIPELINED = register(GridPipelined())
