"""Collectives (AllGather, ReduceScatter, AllReduce, AllToAll, Broadcast) as schedules of messages.

A collective is compiled into `Transfer` records -- "send these keys from ``src`` to ``dst``, copying
or adding them, once these earlier transfers have arrived" -- and executed on a `Network`: each
transfer starts the moment its dependencies have arrived, so no global barrier is assumed.

Algorithms, per ring of ``n`` devices along one axis (or an explicit ring of devices):
- unidirectional ring: every shard travels n-1 hops one way;
- bidirectional ring (the default with wraparound): every shard travels ceil((n-1)/2) hops one way
  and floor((n-1)/2) the other, so both directions of every link carry data;
- line (an axis without wraparound): shards travel to both ends, n-1 steps (about twice the ring);
- several axes at once (``multi_axis="parallel"``, the default): the array is split into one part
  per axis and part p runs over the axes in rotated order, so every axis's links stay busy;
  ``"sequential"`` runs the whole array over one axis after another.
AllReduce is ReduceScatter then AllGather (axes reversed). AllToAll forwards each chunk the short way
round, a bundle per hop. Broadcast pipelines ``chunks`` pieces from the root, store and forward.

Numeric mode (``data``) carries real numpy arrays through the same schedule, so a result that matches
numpy proves the data movement, not just its timing. A group of one device is a no-op (time 0).
Sizes are in bytes; a size that does not split evenly into keys is padded up to whole bytes per key
(``padded_bytes`` reports it); numeric arrays must split exactly or raise.

Scale: on groups whose axes all wrap, every ring of an axis behaves identically (the schedule is
translation-invariant), so ``mode="reduced"`` (chosen automatically for timing-only AllGather,
ReduceScatter and AllReduce) simulates one representative ring per axis with all parts sharing its
links; it gives the same time as the full simulation (tested at small sizes). Its trace and
``link_bytes`` show the representative links only; ``max_link_bytes``, ``total_link_bytes`` and the
``bytes`` metric count the whole system.
"""
from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from simulator import analytic
from simulator.engine.network import Network
from simulator.errors import DeadlockError, PodsimError
from simulator.units import check_bytes, positive_int

KINDS = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all", "broadcast")
ALGORITHMS = ("auto", "bidirectional", "unidirectional")
MULTI_AXIS = ("parallel", "sequential")
MODES = ("auto", "full", "reduced")
MAX_CHUNKS = 10_000  #: pieces per message; more is a units mistake and would take minutes


@dataclass(frozen=True, slots=True)
class Transfer:
    """Send ``keys`` from ``src`` to ``dst`` (op ``copy`` or ``add``) after ``deps`` have arrived."""

    id: int
    src: Any
    dst: Any
    keys: tuple
    op: str
    deps: tuple[int, ...]
    nbytes: float


@dataclass
class Ring:
    """Devices along one axis in position order; ``wrap`` says whether the last links to the first."""

    devices: list[Any]
    wrap: bool
    slots: list[Any]  #: per position, the key under which arrivals are recorded (device, or position)


@dataclass
class Group:
    """Devices of one collective: position tuple (over the group axes) -> device."""

    sizes: tuple[int, ...]
    wraps: tuple[bool, ...]
    members: dict[tuple[int, ...], Any]

    @property
    def n(self) -> int:
        return math.prod(self.sizes)

    def ring(self, pos: tuple[int, ...], axis: int, reduced: bool) -> Ring:
        positions = [pos[:axis] + (i,) + pos[axis + 1:] for i in range(self.sizes[axis])]
        devices = [self.members[p] for p in positions]
        slots = list(range(len(devices))) if reduced else devices
        return Ring(devices, self.wraps[axis], slots)

    def positions(self) -> list[tuple[int, ...]]:
        return list(itertools.product(*(range(s) for s in self.sizes)))


def _reach(n: int, origin: int, wrap: bool, bidirectional: bool) -> list[tuple[int, int]]:
    """(direction, hops) that a shard starting at ``origin`` travels."""
    if n <= 1:
        return []
    if not wrap:
        return [(d, h) for d, h in ((1, n - 1 - origin), (-1, origin)) if h > 0]
    if not bidirectional:
        return [(1, n - 1)]
    return [(d, h) for d, h in ((1, math.ceil((n - 1) / 2)), (-1, (n - 1) // 2)) if h > 0]


def _reach_to(n: int, owner: int, wrap: bool, bidirectional: bool) -> list[tuple[int, int]]:
    """(direction, hops) of the chains that carry partial sums towards ``owner``."""
    if not wrap and n > 1:
        return [(d, h) for d, h in ((1, owner), (-1, n - 1 - owner)) if h > 0]
    return _reach(n, owner, wrap, bidirectional)


class Schedule:
    """Transfers under construction, with the arrivals recorded per (tag, slot)."""

    def __init__(self, key_bytes: float) -> None:
        self.key_bytes = key_bytes
        self.transfers: list[Transfer] = []
        self.arrivals: dict[tuple[Any, Any], list[int]] = defaultdict(list)
        self.by_tag: dict[Any, list[int]] = defaultdict(list)

    def add(self, src: Any, dst: Any, keys: tuple | int, op: str, deps: Sequence[int], tag: Any, slot: Any) -> int:
        """Append a transfer of ``keys`` (or, timing only, of that many keys) and record where it arrives."""
        tid = len(self.transfers)
        count = keys if isinstance(keys, int) else len(keys)
        self.transfers.append(Transfer(tid, src, dst, keys if not isinstance(keys, int) else (), op,
                                       tuple(sorted(set(deps))), count * self.key_bytes))
        self.arrivals[(tag, slot)].append(tid)
        self.by_tag[tag].append(tid)
        return tid

    def barrier(self, tags: Any) -> int:
        """A zero-byte transfer that arrives once every transfer with one of ``tags`` has arrived."""
        tid = len(self.transfers)
        deps = tuple(t for tag in (tags if isinstance(tags, list) else [tags]) for t in self.by_tag[tag])
        self.transfers.append(Transfer(tid, None, None, (), "copy", deps, 0.0))
        return tid


def _walk_chains(s: Schedule, ring: Ring, bidi: bool, start: Callable[[int], list[int]], tag: Any,
                 payload: Callable[[int, int, int, int], tuple | int]) -> None:
    """Send every origin's chain of hops round ``ring``; hop h carries ``payload(origin, d, h, hops)``
    and waits for hop h - 1 (the first hop for ``start(origin)``). An empty payload ends the chain."""
    n = len(ring.devices)
    for origin in range(n):
        for d, hops in _reach(n, origin, ring.wrap, bidi):
            prev = start(origin)
            for h in range(1, hops + 1):
                keys = payload(origin, d, h, hops)
                if not keys:
                    break
                a, b = (origin + (h - 1) * d) % n, (origin + h * d) % n
                prev = [s.add(ring.devices[a], ring.devices[b], keys, "copy", prev, tag, ring.slots[b])]


def gather_phase(s: Schedule, ring: Ring, bundles: list[tuple | int], bidi: bool, start: Callable[[int], list[int]],
                 tag: Any) -> None:
    """AllGather along ``ring``: the bundle of position i reaches every other position."""
    _walk_chains(s, ring, bidi, start, tag, lambda origin, d, h, hops: bundles[origin])


def reduce_phase(s: Schedule, ring: Ring, bundles: list[tuple | int], bidi: bool, start: Callable[[int], list[int]],
                 tag: Any) -> None:
    """ReduceScatter along ``ring``: partial sums of bundle c flow to position c, adding on the way.

    On a ring every chain starts at a different device, so no two share a link at the same step. On a
    line every chain towards the right starts at the left end; each link then serves the chains in
    a fixed order (farthest owner first) -- the AllGather schedule run backwards -- instead of all at
    once, which keeps the line at n-1 steps.
    """
    n = len(ring.devices)
    ahead: dict[tuple[int, int], int] = {}  # (direction, hop) -> transfer of the chain served before
    chains = [(d, hops, owner) for owner in range(n) for d, hops in _reach_to(n, owner, ring.wrap, bidi)]
    for d, hops, owner in sorted(chains, key=lambda c: (-c[0], -c[1], c[2])):
        prev: list[int] = []
        for h in range(1, hops + 1):
            a, b = (owner - (hops - h + 1) * d) % n, (owner - (hops - h) * d) % n
            link_order = [ahead[(d, h)]] if not ring.wrap and (d, h) in ahead else []
            deps = prev + start(a) + link_order
            prev = [s.add(ring.devices[a], ring.devices[b], bundles[owner], "add", deps, tag, ring.slots[b])]
            if not ring.wrap:
                ahead[(d, h)] = prev[0]


def all_to_all_phase(s: Schedule, ring: Ring, bundles: list[dict[int, tuple]], bidi: bool,
                     start: Callable[[int], list[int]], tag: Any) -> None:
    """AllToAll along ``ring``: ``bundles[i][t]`` goes from position i to position t, the short way;
    hop h forwards the chunks still travelling (those for positions h or more hops away)."""
    n = len(ring.devices)

    def still_travelling(origin: int, d: int, h: int, hops: int) -> tuple:
        return tuple(k for far in range(h, hops + 1) for k in bundles[origin].get((origin + far * d) % n, ()))

    _walk_chains(s, ring, bidi, start, tag, still_travelling)


def broadcast_phase(s: Schedule, ring: Ring, origin: int, pieces: int, bidi: bool,
                    start: Callable[[int, int], list[int]], tag: Any) -> None:
    """Broadcast along ``ring`` from ``origin``: pieces pipeline hop by hop, in order on every link."""
    n = len(ring.devices)
    for d, hops in _reach(n, origin, ring.wrap, bidi):
        behind: list[int | None] = [None] * (hops + 1)  # last piece's transfer at each hop
        for j in range(pieces):
            prev = start(origin, j)
            for h in range(1, hops + 1):
                a, b = (origin + (h - 1) * d) % n, (origin + h * d) % n
                deps = prev + ([behind[h]] if behind[h] is not None else [])
                behind[h] = s.add(ring.devices[a], ring.devices[b], (("piece", j),), "copy", deps,
                                  (tag, j), ring.slots[b])
                prev = [behind[h]]


@dataclass
class CollectiveResult:
    """Simulated and closed-form figures of one collective (seconds, bytes, bytes/s)."""

    kind: str
    time_s: float
    analytic_s: float
    book_s: float | None
    nbytes: float
    padded_bytes: float
    group_size: int
    groups: int
    algbw_bytes_per_s: float
    busbw_bytes_per_s: float
    max_link_bytes: float
    total_link_bytes: float
    mode: str
    n_transfers: int
    link_bytes: dict[str, float] = field(default_factory=dict)
    outputs: dict[Any, np.ndarray] | None = None

    def to_json(self) -> dict[str, Any]:
        """The figures as a flat dict (without the numeric outputs)."""
        return {k: v for k, v in self.__dict__.items() if k != "outputs"}


def _groups(net: Network, axes: Sequence[Any] | None, mesh: Any = None) -> list[Group]:
    """The independent groups a collective over ``axes`` runs in (size-1 axes dropped).

    Axes are physical axis indices, or logical axis names when a `simulator.workloads.mesh.Mesh` is given.
    """
    if mesh is not None:
        return _mesh_groups(mesh, axes)
    if not net.grid:
        if axes is not None:
            raise PodsimError(f"axes={list(axes)!r}: topology {net.graph.graph.get('kind')!r} has no axes; "
                              "omit --axes to use all chips as one ring")
        return [Group((len(net.chips),), (True,), {(i,): c for i, c in enumerate(net.chips)})]
    ndim = len(net.shape)
    axes = list(range(ndim)) if axes is None else list(axes)
    for a in axes:
        if isinstance(a, bool) or not isinstance(a, int) or not 0 <= a < ndim:
            raise PodsimError(f"axis {a!r} is not an axis of shape {'x'.join(map(str, net.shape))}; "
                              f"valid axes: {', '.join(map(str, range(ndim)))}")
    return _grid_groups(list(net.shape), list(net.wrap), axes, lambda coord: net._node(tuple(coord)))


def _mesh_groups(mesh: Any, axes: Sequence[Any] | None) -> list[Group]:
    names = list(mesh.names) if axes is None else list(axes)
    idx = [mesh.index(name) for name in names]
    wraps = [mesh.is_ring(name) for name in mesh.names]
    return _grid_groups(list(mesh.sizes), wraps, idx, mesh.device)


def _grid_groups(shape: list[int], wrap: list[bool], axes: list[int], node: Callable[[list[int]], Any]) -> list[Group]:
    if len(set(axes)) != len(axes):
        raise PodsimError(f"axes={axes!r} names an axis twice")
    axes = [a for a in axes if shape[a] > 1]
    others = [a for a in range(len(shape)) if a not in axes]
    groups = []
    for base in itertools.product(*(range(shape[a]) for a in others)):
        members = {}
        for pos in itertools.product(*(range(shape[a]) for a in axes)):
            coord = [0] * len(shape)
            for a, v in zip(others, base, strict=True):
                coord[a] = v
            for a, v in zip(axes, pos, strict=True):
                coord[a] = v
            members[pos] = node(coord)
        groups.append(Group(tuple(shape[a] for a in axes), tuple(wrap[a] for a in axes), members))
    return groups


def _keys_where(sizes: tuple[int, ...], fixed: dict[int, int]) -> list[tuple[int, ...]]:
    """Every position tuple whose entries on ``fixed`` axes take the fixed values."""
    ranges = [(fixed[a],) if a in fixed else range(n) for a, n in enumerate(sizes)]
    return list(itertools.product(*ranges))


def _ring_bases(group: Group, axis: int, fixed: dict[int, int], reduced: bool) -> list[tuple[int, ...]]:
    """Base positions (axis entry 0) of the rings along ``axis`` whose other entries match ``fixed``."""
    sizes = tuple(1 if a == axis else n for a, n in enumerate(group.sizes))
    bases = _keys_where(sizes, {a: v for a, v in fixed.items() if a != axis})
    return bases[:1] if reduced else bases


class _Compiler:
    """Builds the schedule of one collective over a list of groups."""

    def __init__(self, kind: str, groups: list[Group], parts: int, bidi: bool, reduced: bool,
                 schedule: Schedule, chunks: int, root_pos: tuple[int, ...], numeric: bool = True) -> None:
        self.kind, self.groups, self.parts, self.bidi, self.reduced = kind, groups, parts, bidi, reduced
        self.s, self.chunks, self.root_pos = schedule, chunks, root_pos
        self.numeric = numeric  #: False: bundles are key counts, not key lists (timing only, much faster)
        self.axes = list(range(len(groups[0].sizes)))

    def order(self, part: int) -> list[int]:
        return self.axes[part:] + self.axes[:part]

    def start_fn(self, barrier: int | None) -> Callable[[int], list[int]]:
        """Phases of a part are separated by a barrier: no device starts phase j+1 before every device
        of the group has finished phase j (free on wrapped axes, where all finish together)."""
        return (lambda i: []) if barrier is None else (lambda i: [barrier])

    def phase(self, what: str, group: Group, part: int, order: list[int], j: int, barrier: int | None,
              tag: Any) -> None:
        """Phase j of one part (over axis ``order[j]``): ``"ag"`` gathers, ``"rs"`` reduce-scatters.

        The bundle of ring position i holds the keys the position owns in this phase: for a gather,
        those whose shard agrees with the device on every axis not gathered yet; for a reduction, those
        whose shard agrees with it on every axis already reduced (and, on this axis, equals i).
        """
        a = order[j]
        for base in _ring_bases(group, a, {}, self.reduced):
            ring = group.ring(base, a, self.reduced)
            if what == "rs":
                fixed = {b: base[b] for b in order[:j]}
            else:
                fixed = {b: base[b] for b in self.axes if b not in order[:j] and b != a}
            if self.numeric:
                bundles = [tuple((part, k) for k in _keys_where(group.sizes, fixed | {a: i}))
                           for i in range(len(ring.devices))]
            else:  # every position owns as many keys: the product of the axes left free
                count = math.prod(n for b, n in enumerate(group.sizes) if b not in fixed and b != a)
                bundles = [count] * len(ring.devices)
            run = reduce_phase if what == "rs" else gather_phase
            run(self.s, ring, bundles, self.bidi, self.start_fn(barrier), tag)

    def phases(self) -> list[tuple[str, int]]:
        """(gather or reduce, index into the part's axis order) for each phase, in time order."""
        d = len(self.axes)
        if self.kind == "all_gather":
            return [("ag", j) for j in range(d)]
        if self.kind == "reduce_scatter":
            return [("rs", j) for j in range(d)]
        return [("rs", j) for j in range(d)] + [("ag", j) for j in range(d)]

    def collective(self, group: Group) -> None:
        """Phase by phase; every part runs phase j on its own axis, then all meet at a barrier."""
        barrier = None
        for step, (what, j) in enumerate(self.phases()):
            tags = []
            for part in range(self.parts):
                order = self.order(part) if self.parts > 1 else self.axes
                tag = (what, id(group), part, step)
                axes = order if what == "rs" or self.kind == "all_gather" else order[::-1]
                self.phase(what, group, part, axes, j, barrier, tag)
                tags.append(tag)
            barrier = self.s.barrier(tags)

    def all_to_all(self, group: Group) -> None:
        barrier = None
        for j, a in enumerate(self.axes):
            tag = ("a2a", id(group), j)
            done = self.axes[:j]
            for base in _ring_bases(group, a, {}, self.reduced):
                ring = group.ring(base, a, self.reduced)
                bundles = [self._a2a_bundle(group, base, a, i, done) for i in range(len(ring.devices))]
                all_to_all_phase(self.s, ring, bundles, self.bidi, self.start_fn(barrier), tag)
            barrier = self.s.barrier(tag)

    def _a2a_bundle(self, group: Group, base: tuple[int, ...], a: int, i: int, done: list[int]) -> dict[int, tuple]:
        q = base[:a] + (i,) + base[a + 1:]
        srcs = _keys_where(group.sizes, {b: q[b] for b in self.axes if b not in done})
        out: dict[int, tuple] = {}
        for c in range(group.sizes[a]):
            dsts = _keys_where(group.sizes, {b: q[b] for b in done} | {a: c})
            out[c] = tuple(itertools.product(srcs, dsts))
        return out

    def broadcast(self, group: Group) -> None:
        """Axis by axis from the root: phase j spreads every piece along axis j from each holder."""
        tags: list[Any] = []
        for j, a in enumerate(self.axes):
            tag = ("bcast", id(group), j)
            fixed = {b: self.root_pos[b] for b in self.axes if b not in self.axes[:j]}
            for base in _ring_bases(group, a, fixed, False):
                ring = group.ring(base, a, False)
                broadcast_phase(self.s, ring, self.root_pos[a], self.chunks, self.bidi,
                                self._piece_start(list(tags), ring), tag)
            tags.append(tag)

    def _piece_start(self, earlier: list[Any], ring: Ring) -> Callable[[int, int], list[int]]:
        """A holder forwards piece j once it has received it, in whichever earlier phase that was."""
        def start(i: int, j: int) -> list[int]:
            for tag in reversed(earlier):
                got = self.s.arrivals.get(((tag, j), ring.slots[i]))
                if got:
                    return got
            return []
        return start

    def compile(self) -> None:
        for group in self.groups:
            if self.kind == "all_to_all":
                self.all_to_all(group)
            elif self.kind == "broadcast":
                self.broadcast(group)
            else:
                self.collective(group)


def execute(net: Network, transfers: list[Transfer], buffers: dict[Any, dict[Any, np.ndarray]] | None = None,
            label: str = "") -> Any:
    """Start every transfer as soon as its dependencies have arrived; returns an event that fires when
    the last one has arrived (run the environment to get there).

    With ``buffers`` (device -> key -> array), each transfer snapshots its keys at the sender when it
    starts and copies or adds them into the receiver when it arrives.
    """
    done = net.env.event()
    remaining = [len(transfers)]
    if not transfers:
        return done.succeed(net.env.now)
    waiting = [len(t.deps) for t in transfers]
    done.podsim_waits_for = _Pending(transfers, waiting, remaining, label)
    dependents: list[list[int]] = [[] for _ in transfers]
    for t in transfers:
        for d in t.deps:
            dependents[d].append(t.id)

    def start(t: Transfer) -> None:
        payload = {k: buffers[t.src][k].copy() for k in t.keys} if buffers is not None else None
        event = net.message(t.src, t.dst, t.nbytes, label)
        event.callbacks.append(lambda _e: arrive(t, payload))

    def arrive(t: Transfer, payload: dict[Any, np.ndarray] | None) -> None:
        if payload is not None:
            store = buffers[t.dst]
            for k, value in payload.items():
                store[k] = store[k] + value if t.op == "add" else value
        for d in dependents[t.id]:
            waiting[d] -= 1
            if waiting[d] == 0:
                start(transfers[d])
        remaining[0] -= 1
        if remaining[0] == 0:
            done.succeed(net.env.now)

    for t in transfers:
        if not t.deps:
            start(t)
    return done


class _Pending:
    """Describes, when printed, the transfers of a collective that have not arrived (for deadlock errors)."""

    def __init__(self, transfers: list[Transfer], waiting: list[int], remaining: list[int], label: str) -> None:
        self.transfers, self.waiting, self.remaining, self.label = transfers, waiting, remaining, label

    def __str__(self) -> str:
        blocked = [t for t, w in zip(self.transfers, self.waiting, strict=True) if w > 0]
        example = ""
        if blocked:
            t = blocked[0]
            example = f"; e.g. transfer {t.id} ({t.src} -> {t.dst}) waits for transfers {list(t.deps)[:4]}"
        return (f"{self.remaining[0]} of {len(self.transfers)} transfers of {self.label or 'a collective'} "
                f"({len(blocked)} never sent{example})")


def check_arrived(done: Any, now: float) -> None:
    """Raise `DeadlockError` if the collective whose completion event is ``done`` did not finish."""
    if not done.triggered:
        raise DeadlockError(f"collective stopped at t={now:.6g} s with {done.podsim_waits_for} still pending; "
                            "a transfer depends on one that never arrives (a cycle, or a peer that never sends)")


def _step_params(net: Network, group: Group, axis: int, bidi: bool) -> tuple[float, float]:
    """(latency, effective one-way bandwidth) of one ring step along ``axis``.

    Latency is summed over the route between neighbours; bandwidth is a link's bandwidth divided by
    how many of the ring's step messages share it (2 for a bidirectional ring on a switch, where both
    directions leave through the same port; 1 on a torus). Both are taken at the ring's slowest step
    (an InfiniBand or DCN crossing in a two-level system).
    """
    ring = group.ring(tuple(0 for _ in group.sizes), axis, False)
    n = len(ring.devices)
    use: dict[tuple[Any, Any], int] = defaultdict(int)
    directions = (1, -1) if bidi and ring.wrap and n > 2 else (1,)
    for i, d in itertools.product(range(n), directions):
        j = (i + d) % n
        if not ring.wrap and not 0 <= i + d < n:
            continue
        path = net.routes(ring.devices[i], ring.devices[j])[0]
        for edge in zip(path, path[1:], strict=False):
            use[edge] += 1
    latency, bandwidth = 0.0, math.inf
    for i in range(n if ring.wrap else n - 1):  # the slowest step sets the pace of the whole ring
        path = net.routes(ring.devices[i], ring.devices[(i + 1) % n])[0]
        edges = list(zip(path, path[1:], strict=False))
        latency = max(latency, sum(net.graph.edges[e]["latency_s"] for e in edges))
        bandwidth = min(bandwidth, min(net.graph.edges[e]["bandwidth_bytes_per_s"] / use[e] for e in edges))
    return latency, bandwidth


def _closed_form(kind: str, net: Network, group: Group, parts: int, bidi: bool, key_bytes: float,
                 chunks: int, root_pos: tuple[int, ...]) -> float:
    """The algorithm's own closed form, assuming parts on different axes never share a link."""
    axes = list(range(len(group.sizes)))
    params = {a: _step_params(net, group, a, bidi) for a in axes}
    n_total = group.n

    def one(fn: Callable[..., float], ring_bytes: float, a: int) -> float:
        if fn in (analytic.all_gather_time, analytic.reduce_scatter_time):
            return _ring_phase_time(net, group, a, bidi, ring_bytes / group.sizes[a])
        lat, bw = params[a]
        return fn(ring_bytes, group.sizes[a], bw, lat, group.wraps[a], bidi)

    if kind == "all_to_all":
        per_device = key_bytes * n_total
        return sum(one(analytic.all_to_all_time, group.sizes[a] * per_device, a) for a in axes)
    if kind == "broadcast":
        hops = sum(max(h for _, h in _reach(group.sizes[a], root_pos[a], group.wraps[a], bidi)) for a in axes)
        lat, bw = params[axes[0]]
        return analytic.broadcast_time(key_bytes * chunks, hops, bw, lat, chunks)
    orders = [axes[p:] + axes[:p] for p in range(parts)] if parts > 1 else [axes]
    phases = [[_phase_time(kind, o, group, key_bytes, one)[j] for o in orders]
              for j in range(len(_phase_time(kind, orders[0], group, key_bytes, one)))]
    return sum(max(per_part) for per_part in phases)  # phases end at a barrier; parts run side by side


def _ring_phase_time(net: Network, group: Group, axis: int, bidi: bool, shard_bytes: float) -> float:
    """One AllGather (or ReduceScatter) phase along ``axis``: the slowest chain of hops.

    Every shard travels a chain of hops; hop h of every chain happens at step h, so a link used by
    several step-h messages (both directions through one switch port) gives each a share of its
    bandwidth. A hop costs its route's latency plus shard bytes over its bottleneck share; the phase
    lasts as long as the slowest chain, and no shorter than the busiest link's total transfer time.
    On a uniform ring this is steps x (latency + shard / b). On a two-level ring the slow crossing
    carries one shard per chain and sets the time; chains queueing there also spill latency, so the
    simulation runs up to ~12% longer than this bound when messages are small (within 1% when large).
    """
    ring = group.ring(tuple(0 for _ in group.sizes), axis, False)
    n = len(ring.devices)
    reach = {o: _reach(n, o, ring.wrap, bidi) for o in range(n)}
    hops_at: dict[int, list[tuple[int, int]]] = defaultdict(list)  # step -> (position, direction) sending
    for o, chains in reach.items():
        for d, hops in chains:
            for h in range(1, hops + 1):
                hops_at[h].append(((o + (h - 1) * d) % n, d))
    cost: dict[tuple[int, int, int], float] = {}
    work: dict[tuple[Any, Any], float] = defaultdict(float)  # seconds of transfer each link must carry
    for h, sends in hops_at.items():
        paths = {(i, d): net.routes(ring.devices[i], ring.devices[(i + d) % n])[0] for i, d in sends}
        use: dict[tuple[Any, Any], int] = defaultdict(int)
        for path in paths.values():
            for edge in zip(path, path[1:], strict=False):
                use[edge] += 1
                work[edge] += shard_bytes / net.graph.edges[edge]["bandwidth_bytes_per_s"]
        for (i, d), path in paths.items():
            edges = list(zip(path, path[1:], strict=False))
            latency = sum(net.graph.edges[e]["latency_s"] for e in edges)
            share = min(net.graph.edges[e]["bandwidth_bytes_per_s"] / use[e] for e in edges)
            cost[(h, i, d)] = latency + shard_bytes / share
    chain = max((sum(cost[(h, (o + (h - 1) * d) % n, d)] for h in range(1, hops + 1))
                 for o, chains in reach.items() for d, hops in chains), default=0.0)
    return max(chain, max(work.values(), default=0.0))


def _phase_time(kind: str, order: list[int], group: Group, key_bytes: float, one: Callable[..., float]) -> list[float]:
    """Closed-form time of each phase of one part (its array moves over ``order``)."""
    def gather(order_: list[int]) -> list[float]:
        return [one(analytic.all_gather_time, key_bytes * math.prod(group.sizes[b] for b in order_[:j + 1]), a)
                for j, a in enumerate(order_)]

    def reduce(order_: list[int]) -> list[float]:
        return [one(analytic.reduce_scatter_time, key_bytes * math.prod(group.sizes[b] for b in order_[j:]), a)
                for j, a in enumerate(order_)]

    if kind == "all_gather":
        return gather(order)
    if kind == "reduce_scatter":
        return reduce(order)
    return reduce(order) + gather(order[::-1])


def _book_time(kind: str, group: Group, net: Network, parts: int, nbytes: float) -> float | None:
    """The book's estimate max(latency * sum(n)/2, V / (k W)) for wrapped axes (x2 for AllReduce)."""
    if kind not in ("all_gather", "reduce_scatter", "all_reduce") or not all(group.wraps) or not net.grid:
        return None
    lat, bw = _step_params(net, group, 0, True)
    one = analytic.book_all_gather_time(nbytes / parts, sum(group.sizes), bw, lat)
    return 2 * one if kind == "all_reduce" else one


def _n_keys(kind: str, n: int, parts: int, chunks: int) -> int:
    return {"all_to_all": n * n, "broadcast": chunks}.get(kind, n * parts)


def _initial_buffers(kind: str, groups: list[Group], data: np.ndarray, parts: int, chunks: int,
                     root_pos: tuple[int, ...]) -> dict[Any, dict[Any, np.ndarray]]:
    buffers: dict[Any, dict[Any, np.ndarray]] = defaultdict(dict)
    for g in groups:
        positions = g.positions()
        for pos, dev in g.members.items():
            row = data[dev]
            if kind == "all_gather":
                for p, piece in enumerate(np.split(row, parts)):
                    buffers[dev][(p, pos)] = piece
            elif kind in ("reduce_scatter", "all_reduce"):
                for s, shard in zip(positions, np.split(row, len(positions)), strict=True):
                    for p, piece in enumerate(np.split(shard, parts)):
                        buffers[dev][(p, s)] = piece
            elif kind == "all_to_all":
                for t, chunk in zip(positions, np.split(row, len(positions)), strict=True):
                    buffers[dev][(pos, t)] = chunk
            elif pos == root_pos:
                for j, piece in enumerate(np.split(row, chunks)):
                    buffers[dev][("piece", j)] = piece
    return buffers


def _outputs(kind: str, groups: list[Group], buffers: dict[Any, dict[Any, np.ndarray]], parts: int,
             chunks: int) -> dict[Any, np.ndarray]:
    out = {}
    for g in groups:
        positions = g.positions()
        for pos, dev in g.members.items():
            b = buffers[dev]
            if kind in ("all_gather", "all_reduce"):
                pieces = [b[(p, s)] for s in positions for p in range(parts)]
            elif kind == "reduce_scatter":
                pieces = [b[(p, pos)] for p in range(parts)]
            elif kind == "all_to_all":
                pieces = [b[(o, pos)] for o in positions]
            else:
                pieces = [b[("piece", j)] for j in range(chunks)]
            out[dev] = np.concatenate(pieces)
    return out


def _check_data(kind: str, data: np.ndarray, n_chips: int, n: int, parts: int, chunks: int) -> float:
    """Validate numeric input; return V in bytes (the full array of one group)."""
    if not isinstance(data, np.ndarray) or data.ndim != 2 or data.shape[0] != n_chips:
        shape = getattr(data, "shape", None)
        raise PodsimError(f"data must be a 2-D numpy array with one row per chip ({n_chips} rows); got shape {shape}")
    m = data.shape[1]
    split = {"all_gather": parts, "all_to_all": n, "broadcast": chunks}.get(kind, n * parts)
    if m % split:
        raise PodsimError(f"data rows of {m} elements do not split into {split} equal pieces for {kind}; "
                          f"use a multiple of {split}")
    row_bytes = m * data.itemsize
    return {"all_gather": row_bytes * n, "all_to_all": row_bytes * n}.get(kind, row_bytes)


@dataclass
class _Plan:
    """A validated, compiled collective, ready to execute."""

    kind: str
    groups: list[Group]
    parts: int
    bidi: bool
    reduced: bool
    nbytes: float
    key_bytes: float
    n_keys: int
    chunks: int
    root_pos: tuple[int, ...]
    schedule: Schedule | None  #: None for a one-device group (a no-op)


def plan_collective(kind: str, system: Any, nbytes: float | None = None, *, axes: Sequence[Any] | None = None,
                    algorithm: str = "auto", multi_axis: str = "parallel", chunks: int = 1, root: Any = None,
                    data: np.ndarray | None = None, mode: str = "auto", mesh: Any = None,
                    channels: int | None = None) -> _Plan:
    """Validate the arguments of `run_collective` and compile its schedule."""
    net = system.network
    if net is None:
        raise PodsimError("this system has no topology; build it with System(chip, topology='torus:4x4')")
    if kind not in KINDS:
        raise PodsimError(f"unknown collective {kind!r}; valid kinds: {', '.join(KINDS)}")
    for name, value, valid in (("algorithm", algorithm, ALGORITHMS), ("multi_axis", multi_axis, MULTI_AXIS),
                               ("mode", mode, MODES)):
        if value not in valid:
            raise PodsimError(f"{name}={value!r}; valid: {', '.join(valid)}")
    positive_int(chunks, name="chunks")
    if chunks > MAX_CHUNKS:
        raise PodsimError(f"chunks={chunks} is more than the {MAX_CHUNKS:,} pieces podsim simulates per message")
    groups = _groups(net, axes, mesh)
    group = groups[0]
    bidi = algorithm == "bidirectional" or (algorithm == "auto" and net.grid)
    parts = max(1, len(group.sizes)) if multi_axis == "parallel" and kind not in ("all_to_all", "broadcast") else 1
    root_pos = _root_position(groups, root)
    if data is not None:
        nbytes = _check_data(kind, data, len(net.chips), group.n, parts, chunks)
    if nbytes is None:
        raise PodsimError("give nbytes (the collective's array size in bytes) or data")
    check_bytes(nbytes, name="nbytes", allow_zero=False)
    n_keys = _n_keys(kind, group.n, parts, chunks)
    key_bytes = math.ceil(nbytes / n_keys) if data is None else nbytes / n_keys  # whole bytes per key
    if group.n == 1:
        return _Plan(kind, groups, parts, bidi, False, nbytes, key_bytes, n_keys, chunks, root_pos, None)
    one_to_one = mesh is None or all(len(mesh.physical_axes(n)) == 1 for n, s in zip(mesh.names, mesh.sizes,
                                                                                     strict=True) if s > 1)
    reduced = _use_reduced(mode, kind, data, group, net, one_to_one)
    rings = _channel_groups(net, groups, channels, data, axes, mesh)
    if len(rings) > 1:
        key_bytes = math.ceil(nbytes / len(rings) / n_keys)
    schedule = Schedule(key_bytes)
    for channel in rings:
        _Compiler(kind, channel[:1] if reduced else channel, parts, bidi, reduced, schedule, chunks, root_pos,
                  numeric=data is not None).compile()
    return _Plan(kind, groups, parts, bidi, reduced, nbytes, key_bytes, n_keys, chunks, root_pos, schedule)


def _channel_groups(net: Network, groups: list[Group], channels: int | None, data: Any, axes: Any,
                    mesh: Any) -> list[list[Group]]:
    """The groups of each channel. GPU nodes over InfiniBand (``nodes:K:G``) default to one ring per
    GPU of a node, as NCCL runs one ring per NIC: ring c rotates each node's GPUs by c, so every ring
    crosses between nodes on different NICs, and each carries 1/G of the array. Elsewhere one ring."""
    gpus = net.graph.graph.get("gpus_per_node", 1) if net.graph.graph.get("kind") == "nodes" else 1
    count = gpus if channels is None else positive_int(channels, name="channels")
    if count == 1 or data is not None or axes is not None or mesh is not None or net.grid:
        if channels not in (None, 1):
            raise PodsimError(f"channels={channels} needs a timing-only collective over all chips of a non-torus "
                              "topology (one ring per channel)")
        return [groups]
    (group,) = groups
    order = [group.members[(i,)] for i in range(group.n)]
    per_node = max(1, min(count, gpus))
    rings = []
    for c in range(count):
        rotated = [order[(k // per_node) * per_node + (k % per_node + c) % per_node] for k in range(len(order))]
        rings.append([Group(group.sizes, group.wraps, {(i,): d for i, d in enumerate(rotated)})])
    return rings


def start_collective(kind: str, system: Any, nbytes: float, **kwargs: Any) -> Any:
    """Start a timing-only collective now, inside a running simulation; returns its completion event.

    Takes the keyword arguments of `run_collective` (except ``data``). On a calibrated system it pays
    the launch latency, and sets the links' calibrated efficiency when no other transfer is in flight
    (collectives that overlap keep the rate the first one set).
    """
    plan = plan_collective(kind, system, nbytes, **kwargs)
    if plan.schedule is None:
        return system.env.event().succeed(system.env.now)
    idle = not any(c._flows for c in system.network._links.values())
    return _execute_calibrated(system, plan, None, kind, set_links=idle)


def run_collective(kind: str, system: Any, nbytes: float | None = None, **kwargs: Any) -> CollectiveResult:
    """Run one collective on ``system`` (a `System` with a topology) and return its figures.

    ``nbytes`` is V: the full gathered array (AllGather), the unreduced array on each device
    (ReduceScatter, AllReduce), the whole array spread over the group (AllToAll), or the root's array
    (Broadcast). Keywords: ``axes`` (default all), ``algorithm`` (auto, bidirectional,
    unidirectional), ``multi_axis`` (parallel, sequential), ``chunks``, ``root``, ``mode`` (auto,
    full, reduced), ``mesh`` and ``data``. With ``data`` (one row per chip) the arrays move for real
    and ``outputs`` holds each chip's result; V then comes from the data. With a
    `simulator.workloads.mesh.Mesh`, ``axes`` are logical axis names and the groups follow its placement.
    """
    plan = plan_collective(kind, system, nbytes, **kwargs)
    data = kwargs.get("data")
    group, net = plan.groups[0], system.network
    if plan.schedule is None:
        return _no_op(kind, plan.nbytes, len(plan.groups))
    buffers = _initial_buffers(kind, plan.groups, data, plan.parts, plan.chunks, plan.root_pos) \
        if data is not None else None
    start, before = system.env.now, net.link_bytes()
    done = _execute_calibrated(system, plan, buffers, kind)
    system.run()
    net.set_link_efficiency(None)
    check_arrived(done, system.env.now)
    time_s = system.env.now - start
    closed = _closed_form(kind, net, group, plan.parts, plan.bidi, plan.key_bytes, plan.chunks, plan.root_pos)
    algbw, busbw = analytic.bus_bandwidth(kind, plan.nbytes, time_s, group.n)
    link_bytes = {k: v - before.get(k, 0.0) for k, v in net.link_bytes().items() if v > before.get(k, 0.0)}
    if plan.reduced:  # the trace saw one ring per axis; count the bytes of all the others too
        missing = _total_link_bytes(net, plan.groups, group, link_bytes) - sum(link_bytes.values())
        system.trace.count(next(iter(net._links.values())).kind, missing)
    return CollectiveResult(
        kind=kind, time_s=time_s, analytic_s=closed, book_s=_book_time(kind, group, net, plan.parts, plan.nbytes),
        nbytes=plan.nbytes, padded_bytes=plan.key_bytes * plan.n_keys - plan.nbytes, group_size=group.n,
        groups=len(plan.groups), algbw_bytes_per_s=algbw, busbw_bytes_per_s=busbw,
        max_link_bytes=max(link_bytes.values(), default=0.0),
        total_link_bytes=_total_link_bytes(net, plan.groups, group, link_bytes) if plan.reduced
        else sum(link_bytes.values()),
        mode="reduced" if plan.reduced else "full", n_transfers=len(plan.schedule.transfers), link_bytes=link_bytes,
        outputs=_outputs(kind, plan.groups, buffers, plan.parts, plan.chunks) if buffers is not None else None)


def _execute_calibrated(system: Any, plan: _Plan, buffers: Any, kind: str, set_links: bool = True) -> Any:
    """`execute`, after the calibrated launch latency and (with ``set_links``) with links at their
    calibrated efficiency for an array of this size; plain `execute` on an ideal system."""
    net, cal = system.network, system.calibration
    if cal is None:
        return execute(net, plan.schedule.transfers, buffers, kind)
    if set_links:
        net.set_link_efficiency(lambda link_kind: cal.link_fraction(link_kind, plan.nbytes))
    done = system.env.event()

    def launch(_e: Any) -> None:
        finished = execute(net, plan.schedule.transfers, buffers, kind)
        done.podsim_waits_for = getattr(finished, "podsim_waits_for", None)
        finished.callbacks.append(lambda ev: done.succeed(ev.value))

    system.env.timeout(cal.collective_launch_s).callbacks.append(launch)
    return done


def _root_position(groups: list[Group], root: Any) -> tuple[int, ...]:
    if root is None:
        return tuple(0 for _ in groups[0].sizes)
    for g in groups:
        for pos, dev in g.members.items():
            if dev == root:
                return pos
    raise PodsimError(f"root={root!r} is not a chip of this collective's groups")


def _use_reduced(mode: str, kind: str, data: Any, group: Group, net: Network, one_to_one: bool = True) -> bool:
    eligible = data is None and kind in ("all_gather", "reduce_scatter", "all_reduce") and net.grid \
        and all(group.wraps) and one_to_one
    if mode == "reduced" and not eligible:
        raise PodsimError("mode='reduced' needs a timing-only AllGather, ReduceScatter or AllReduce over axes that "
                          "all wrap; use mode='full'")
    return eligible and mode != "full"


def _total_link_bytes(net: Network, groups: list[Group], group: Group, link_bytes: dict[str, float]) -> float:
    """Bytes over all links of the full system, from the representative rings of a reduced run:
    each link of axis a stands for the ``groups * n / n_a`` rings along that axis."""
    total = 0.0
    for u, v in net._links:
        n_axis = net.shape[net.graph.edges[u, v]["axis"]]
        total += link_bytes.get(f"{u}->{v}", 0.0) * len(groups) * group.n / n_axis
    return total


def _no_op(kind: str, nbytes: float, n_groups: int) -> CollectiveResult:
    return CollectiveResult(kind=kind, time_s=0.0, analytic_s=0.0, book_s=0.0, nbytes=nbytes, padded_bytes=0.0,
                            group_size=1, groups=n_groups, algbw_bytes_per_s=math.inf, busbw_bytes_per_s=math.inf,
                            max_link_bytes=0.0, total_link_bytes=0.0, mode="full", n_transfers=0)
