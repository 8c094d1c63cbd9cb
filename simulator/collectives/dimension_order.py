"""AllToAll on grids with every axis busy at once: each chunk follows its dimension-order route.

Every device sends a distinct chunk of V / n^2 to every other device of its group (n devices). A chunk
from s to t crosses one axis after another, changing its coordinate on that axis to t's. Each chunk is
cut into one part per axis order, so while one part crosses axis 0 another crosses axis 1: every axis's
links are busy from the start. Where all axes are alike the orders are the rotations (part r crosses
axes r, r+1, ...: each phase keeps every axis busy with one part); where they differ, every permutation
(parts meet each axis at staggered times, so the longest axis never waits for work: one part per
rotation leaves it idle while parts arrive, up to 1.28x the bound on 3x8x8). Where a wrapped axis has
even length the chunk for the antipode is as far one way round as the other: each part is cut once
more, one half going each way.

One phase of a part moves, along one axis, what each device holds for each position on that axis (a
bundle of n / n_a chunk parts). A device starts phase j + 1 of a part once everything its phase j
brought has arrived (no barrier across devices).

- On a wrapped axis (a ring of k >= 3) bundles travel the short way in chains of neighbour hops: hop h
  of a chain forwards the bundles still travelling (those for positions h or more hops away), so every
  link carries one chain's hop at each step. Link load per phase: ``k^2/8`` bundles for even k (the
  antipode's half each way), ``(k^2 - 1)/8`` for odd k -- exactly the link-load bound of the ring.
  On healthy networks each hop is cut into `PIECES` split hops (bytes, then the latency), and each link
  direction sends its chains' hops in hop order (a FIFO), so its bytes flow while earlier pieces' latencies
  pass (`piped_phase`, the tandem evaluated exactly); on faulted ones whole bundles, ``floor(k/2)`` steps of
  one hop latency each. v5p slice:8x8x8 at 1 GB (2 MB a chip): 26.7 us against the bound's 22.7 (whole
  bundles: 33.7 us, 12 hop latencies a part).
- On an axis without wraparound (a line, a size-2 axis) each bundle is one cut-through message straight
  to its position, all sent at once and sharing the links fairly: link i -> i+1 carries the bundles of
  the i + 1 positions behind it to the k - 1 - i ahead, ``(i + 1)(k - 1 - i)``, most in the middle,
  ``floor(k^2/4)`` -- the cut bound. (Chains here would wait for one another: the chain from an end
  forwards k - 1, k - 2, ... bundles one after another, about twice the cut.)

Closed form (`closed_form`), from first principles: every part crosses every axis once, so a link of
axis a carries over the whole collective the per-phase load above times the bundle of all parts,
``B_a = V / (n k_a)`` bytes: ``V k / (8 n)`` per link direction of an even ring (REFERENCE: a k-ary
wrapped torus of N chips, ``t >= V k / (8 N b)``). The links work all the time, so the busiest link's
bytes over its bandwidth is the bandwidth term; each part pays the hop latencies of its phases one
after another: ``floor(k_a/2)`` per ring axis (a chain's steps; pipelined, what `piped_phase` adds to the
phase's link bytes), ``ceil(k_a/2)`` per line axis (the
messages that cross the middle link, the last to finish, then go on up to half the line); and no
part finishes before its farthest chunk has crossed ``far_a`` hops of each axis (``floor(k_a/2)`` on a
ring, ``k_a - 1`` on a line):

    t = max( max over links (bytes / b) + sum over axes (hops_a x alpha),  sum over axes (far_a x alpha) )

Exact (within float rounding) on rings and on tori whose axes are rings of one length (the parts move
in lock step, each axis carrying one part at every phase). By design it is an estimate elsewhere: on
tori with axes of different lengths parts meet on the busiest axis and overlap one another's
latencies, and on lines cut-through messages overlap their latencies with the middle link's work; the
simulation is then within 0.85-1.15x of it (bandwidth-bound within about 6%), tests/test_all_to_all.py.
"""
from __future__ import annotations

import itertools
from collections import defaultdict
from typing import Any

from simulator.collectives.algorithm import Algorithm, Job, register
from simulator.collectives.groups import Group, Ring, keys_where, ring_bases, rings_along
from simulator.collectives.schedule import Schedule
from simulator.collectives.timing import route_latency, step_edges
from simulator.engine.network import Network


def chains_on(ring_wrap: bool, k: int) -> bool:
    """Whether an axis of ``k`` positions runs neighbour chains (a ring) or direct messages (a line)."""
    return ring_wrap and k >= 3


def tie_split(group: Group) -> bool:
    """Whether some axis of ``group`` is a ring of even length (its antipode's chunk goes half each way)."""
    return any(chains_on(w, k) and k % 2 == 0 for k, w in zip(group.sizes, group.wraps, strict=True))


def axis_orders(group: Group, multi_axis: str = "parallel") -> list[tuple[int, ...]]:
    """The axis orders the parts take: the rotations (0, 1, ...), (1, 2, ..., 0), ... where every axis has
    the same length and wraparound (each phase then keeps every axis busy with one part); every
    permutation where they differ, so that parts meet each axis at staggered times and the longest
    axis never waits for work; one order, the axes in turn, for ``multi_axis="sequential"``."""
    n = len(group.sizes)
    if multi_axis != "parallel" or n <= 1:
        return [tuple(range(n))]
    if len(set(zip(group.sizes, group.wraps, strict=True))) == 1:
        return [tuple((r + j) % n for j in range(n)) for r in range(n)]
    return list(itertools.permutations(range(n)))


def ring_load(k: int) -> float:
    """Bundles one link direction of a ring of ``k`` carries in one phase (the short way round, the
    antipode's bundle halved each way): sum of hop counts over targets, per direction."""
    return sum(min(d, k - d) for d in range(1, k)) / 2


def line_load(k: int, i: int) -> int:
    """Bundles link i -> i+1 of a line of ``k`` carries in one phase (the positions behind it to those ahead)."""
    return (i + 1) * (k - 1 - i)


class DimensionOrder(Algorithm):
    """AllToAll: chunks on dimension-order routes, a part per axis order (see the module docstring)."""

    name = "dimension_order"
    summary = ("AllToAll: each chunk on its dimension-order route, a part per axis order so every axis is "
               "busy at once, the antipode's half each way round; near the link-load bound")
    kinds = ("all_to_all",)
    topologies = ("ring", "line", "torus", "mesh")

    def unfit(self, kind: str, net: Network, groups: list[Group]) -> str | None:
        why = super().unfit(kind, net, groups)
        if why is None and not net.grid:
            return "it needs a grid topology (ring, line, torus, mesh) whose axes route in dimension order"
        return why

    def parts(self, kind: str, group: Group, multi_axis: str) -> int:
        """One part per axis order (``multi_axis="parallel"``; one order for ``"sequential"``), times two
        where an even ring splits the antipode's chunk."""
        return len(axis_orders(group, multi_axis)) * (2 if tie_split(group) else 1)

    def build(self, job: Job, schedule: Schedule) -> None:
        orders = job.parts // (2 if tie_split(job.group) else 1)
        multi_axis = "parallel" if orders > 1 else "sequential"
        for groups in job.rings:
            for group in groups:
                for r, order in enumerate(axis_orders(group, multi_axis)):
                    _Order(job, group, r, order, orders, schedule).build()

    def closed_form(self, job: Job) -> float:
        group, net = job.group, job.net
        sizes = group.sizes
        bundle = job.key_bytes * job.parts * group.n  # all parts' chunks one device sends to one position
        busiest, latency, farthest = 0.0, 0.0, 0.0
        for a, k in enumerate(sizes):
            unit = bundle / k
            # faulted: every ring of every group (one crosses the slow link, another carries a detour), their loads
            # summed where their routes share links; else the ring through position 0 stands for them all
            rings = rings_along(job.groups, tuple(0 for _ in sizes), a, True) if net.faulted \
                else [group.ring(tuple(0 for _ in sizes), a)]
            chain = chains_on(rings[0].wrap, k)
            load: dict[Any, float] = defaultdict(float)
            for ring in rings:
                for i, d in ((i, d) for i in range(k) for d in (1, -1)):
                    if not chain and not 0 <= i + d < k:
                        continue
                    units = ring_load(k) if chain else line_load(k, min(i, i + d))
                    for e in step_edges(net, ring, i, d):
                        load[e] += units * unit
            busiest = max([busiest] + [b / net.graph.edges[e]["bandwidth_bytes_per_s"] for e, b in load.items()])
            alpha = max(route_latency(net, step_edges(net, ring, i, 1)) for ring in rings
                        for i in range(k if chain else k - 1))
            if chain and pipelined(net):  # the phase's pipelined chains over what the link carries in it
                orders = job.parts // (2 if tie_split(group) else 1)
                bw = min(net.graph.edges[e]["bandwidth_bytes_per_s"] for e in step_edges(net, rings[0], 0, 1))
                order_s = job.key_bytes * (job.parts / orders) * group.n / k / bw
                carried = ring_load(k) * order_s  # what a link direction carries in the phase
                latency += piped_phase(k, order_s, alpha) - carried
            else:
                latency += alpha * (k // 2 if chain else (k + 1) // 2)
            farthest += alpha * (k // 2 if chain else k - 1)
        return max(busiest + latency, farthest)


PIECES = 4  #: pieces each ring chain's hops are cut into on healthy networks (`_Order._piped_chains`)


def pipelined(net: Network) -> bool:
    """Whether ring axes run pipelined chains (`_Order._piped_chains`): on healthy networks, where every ring link
    is one physical link and all chains start together; a faulted network keeps whole-bundle chains (detours share
    links, and `DimensionOrder.closed_form` prices those by load)."""
    return not net.faulted and PIECES > 1


def piped_phase(k: int, order_s: float, alpha: float, pieces: int = PIECES) -> float:
    """Seconds of one phase of pipelined chains round a ring of ``k`` (each link direction alike, all chains
    started at 0): ``order_s`` is the seconds of what one chain carries to one position (the antipode's half
    for even k), ``alpha`` the hop latency. Link L sends, in order, hop 1 of the chain from L's tail (everything
    it carries), then hop 2 of the chain from one behind, ...; piece p of hop h is ready ``alpha`` after piece p
    of hop h - 1 left the link before L -- which, every link alike, left L's own timeline at that time. The
    tandem recursion ``D = max(ready, D_previous) + s``, evaluated exactly; the phase ends ``alpha`` after the
    last piece leaves."""
    far = k // 2
    weights = [1.0] * far
    if k % 2 == 0:
        weights[-1] = 0.5
    left, done = [0.0] * pieces, 0.0
    for h in range(1, far + 1):
        seconds = sum(weights[h - 1:]) * order_s / pieces
        for p in range(pieces):
            ready = 0.0 if h == 1 else left[p] + alpha
            done = max(ready, done) + seconds
            left[p] = done
    return done + alpha


def _cut(keys: tuple | int, m: int) -> list[Any]:
    """``keys`` (a tuple, or a count) in ``m`` pieces: consecutive slices, or equal fractions of the count."""
    if isinstance(keys, tuple):
        return [keys[p * len(keys) // m:(p + 1) * len(keys) // m] for p in range(m)]
    return [keys / m] * m


class _Order:
    """The phases of axis order number ``r`` (``order``) on one group."""

    def __init__(self, job: Job, group: Group, r: int, order: tuple[int, ...], orders: int,
                 schedule: Schedule) -> None:
        self.job, self.group, self.s = job, group, schedule
        self.order = list(order)
        self.parts = [r, r + orders] if tie_split(group) else [r]  # parts of this order: (+ half, - half)
        self.r = r

    def build(self) -> None:
        previous: Any = None
        piped = pipelined(self.job.net)
        for j, a in enumerate(self.order):
            tag = ("dimension_order", id(self.group), self.r, j)
            for base in ring_bases(self.group, a, {}, False):
                ring = self.group.ring(base, a)
                k = len(ring.devices)

                def start(i: int, ring: Ring = ring, previous: Any = previous) -> list[int]:
                    return list(self.s.arrivals.get((previous, ring.slots[i]), ())) if previous else []

                if chains_on(ring.wrap, k) and piped:
                    self._piped_chains(ring, base, a, j, start, tag)
                elif chains_on(ring.wrap, k):
                    self._chains(ring, base, a, j, start, tag)
                else:
                    self._direct(ring, base, a, j, start, tag)
            previous = tag

    def _keys(self, base: tuple[int, ...], a: int, j: int, i: int, c: int, parts: list[int]) -> tuple | int:
        """What position i of the ring through ``base`` sends to position c in phase j: keys (numeric) or
        their count -- the chunk parts from sources that agree with it on the axes not yet crossed, for
        targets that agree with it on the axes crossed and have c on axis a."""
        sizes = self.group.sizes
        if not self.job.numeric:
            return len(parts) * self.group.n // sizes[a]
        q = base[:a] + (i,) + base[a + 1:]
        srcs = keys_where(sizes, {b: q[b] for b in self.order[j:]})
        dsts = keys_where(sizes, {b: q[b] for b in self.order[:j]} | {a: c})
        return tuple((p, src, dst) for p in parts for src, dst in itertools.product(srcs, dsts))

    def _chains(self, ring: Ring, base: tuple[int, ...], a: int, j: int, start: Any, tag: Any) -> None:
        """Neighbour chains both ways round: hop h forwards what is still travelling."""
        k = len(ring.devices)
        far = k // 2  # hops to the farthest position each way (the antipode, for even k)
        for i, (d, parts) in itertools.product(range(k), ((1, self.parts[:1]), (-1, self.parts[-1:]))):
            bundles: list[Any] = []  # keys (numeric) or their counts
            for dist in range(1, far + 1):
                tie = k % 2 == 0 and dist == far
                bundles.append(self._keys(base, a, j, i, (i + dist * d) % k, parts if tie else self.parts))
            prev = start(i)
            for h in range(1, far + 1):
                still = bundles[h - 1:]
                keys = sum(still) if isinstance(still[0], int) else tuple(itertools.chain(*still))
                x, y = (i + (h - 1) * d) % k, (i + h * d) % k
                prev = [self.s.add(ring.devices[x], ring.devices[y], keys, "copy", prev, tag, ring.slots[y])]

    def _piped_chains(self, ring: Ring, base: tuple[int, ...], a: int, j: int, start: Any, tag: Any) -> None:
        """Neighbour chains both ways round, each hop cut into `PIECES` split hops (bytes, then the latency:
        `Schedule.add_split`): piece p of hop h leaves once piece p of hop h - 1 has arrived, and every link
        direction sends its chains' hops in hop order, a FIFO (hop 1 of the chain starting there, then hop 2 of
        the chain from one behind, ...), so its bytes flow while earlier pieces' latencies pass."""
        k, m = len(ring.devices), PIECES
        far = k // 2
        chains = list(itertools.product(range(k), ((1, self.parts[:1]), (-1, self.parts[-1:]))))
        pieces: dict[tuple[int, int], list[list[Any]]] = {}  # (i, d) -> per distance, its m pieces
        for i, (d, parts) in chains:
            per_dist = []
            for dist in range(1, far + 1):
                tie = k % 2 == 0 and dist == far
                per_dist.append(_cut(self._keys(base, a, j, i, (i + dist * d) % k, parts if tie else self.parts), m))
            pieces[(i, d)] = per_dist
        arrived: dict[tuple[int, int], list[list[int]]] = {(i, d): [start(i)] * m for i, (d, _) in chains}
        last: dict[tuple[int, int], list[int]] = {}  # link (x, d) -> the bytes transfer last sent on it
        for h in range(1, far + 1):
            for i, (d, _) in chains:
                x, y = (i + (h - 1) * d) % k, (i + h * d) % k
                for p in range(m):
                    still = [pieces[(i, d)][dist][p] for dist in range(h - 1, far)]
                    keys: Any = sum(still) if not isinstance(still[0], tuple) else tuple(itertools.chain(*still))
                    nbytes = keys * self.s.key_bytes if not isinstance(keys, tuple) else None
                    sent, delay = self.s.add_split(ring.devices[x], ring.devices[y], keys if nbytes is None else 0,
                                                   "copy", arrived[(i, d)][p], tag, ring.slots[y],
                                                   last.get((x, d), []), nbytes)
                    last[(x, d)] = [sent]
                    arrived[(i, d)][p] = [delay]

    def _direct(self, ring: Ring, base: tuple[int, ...], a: int, j: int, start: Any, tag: Any) -> None:
        """One message per bundle, straight to its position (cut-through over the line)."""
        k = len(ring.devices)
        for i in range(k):
            deps = start(i)
            for c in range(k):
                if c == i:
                    continue
                keys = self._keys(base, a, j, i, c, self.parts)
                self.s.add(ring.devices[i], ring.devices[c], keys, "copy", deps, tag, ring.slots[c])


DIMENSION_ORDER = register(DimensionOrder())
