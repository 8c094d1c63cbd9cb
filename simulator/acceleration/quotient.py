"""A collective run on the quotient of a symmetric network: one transfer and one link per orbit, exactly.

Let G be a group of symmetries of a network -- translations of a grid torus by whole steps along its
wrapped axes (`Translations`), or rotations of a GPU node system's nodes and rails
(`simulator.acceleration.automorphisms`) -- acting freely on its chips: every element other than the identity
moves every chip. If a collective's schedule is G-equivariant (for every transfer t and every g in G there
is a transfer g.t from g.src to g.dst with t's bytes whose dependencies are the images of t's) and so are
the routes, then in a run every member of an orbit {g.t} starts and arrives at the same instants, and
every link of an orbit {g.L} carries the same flows at the same instants (fair sharing treats flows that
start together alike, whatever order they join in). So it is enough to run one transfer per orbit -- those
sent by the orbit representatives of the chips (``action.offset`` takes a chip there) -- waiting on the
representatives of its dependencies, over the representatives of its route's links: link L's flows at
time T are, in full, the transfers g.t whose route crosses L; in the quotient, the representatives t whose
route crosses some link of L's orbit, each once. That needs G to act freely on the links the routes cross
(exactly one g maps the i-th hop of t onto L): a link is carried by whichever end G moves freely
(``action.carrier``; a switch G fixes, such as a node system's fabric, is no obstacle). Where neither end
is moved freely the link's stabiliser may not be trivial -- one representative flow stands for m flows on
that one link -- and the quotient refuses, unless the action allows multiplicities (``action.scaled``,
uncalibrated runs through `run_on_quotient`): the orbit's link then runs as a copy at 1/m of its bandwidth,
which fair sharing makes exact (each of the m k flows of k representatives gets B / (m k) either way), and
`unfold` counts m times its bytes. |G| times fewer transfers and events; the same times,
the same bytes on every link that runs; `unfold` then gives every link of an orbit its representative's
bytes and trace spans, as a full run leaves them.

`quotient` checks equivariance rather than assuming it, and returns None (run in full) when it fails:
transfers are matched by (source, destination, how many between them came before), each match must carry
the same bytes and operation and depend on the matches of the same orbits, barriers (no source) stay as they
are, and every route must be the image of its representative's (one route of plain channels, cut through).
Interface byte counters count each representative's bytes |G| times: the whole collective's traffic. Only
timing runs: a numeric collective (buffers) needs every chip's data. `run_on_quotient` tries a node
system's groups, largest first (`simulator.collectives.api` runs mode ``auto`` on it where one fits).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from types import SimpleNamespace
from typing import Any, Protocol

from simulator.acceleration.aggregate import Aggregated, Shape, cut_through, schedule_shape
from simulator.acceleration.unfolding import stand_ins
from simulator.collectives.schedule import (
    AGGREGATED_EVENTS_PER_TRANSFER,
    DELAY,
    LONG_RUN_HINT,
    PLAIN_OPS,
    Completion,
    Transfer,
    _new_transfer,
)
from simulator.engine.channel import Channel, call_after
from simulator.engine.network import Network
from simulator.engine.watch import TICK, expect_events

_UNSET = object()


class Action(Protocol):
    """A group G of symmetries of a network, as `quotient` uses it: ``order`` (|G|), ``identity``, ``offset(v)``
    (the element taking node ``v`` to its orbit's representative, None where G does not move ``v`` freely),
    ``apply(h, v)`` (``v``'s image under ``h``) and ``carrier(u, v)`` (the element taking link ``u -> v`` to
    its orbit's representative link, None where the link's stabiliser may not be trivial: then one
    representative would stand for several flows on one link, and the quotient refuses)."""

    order: int
    identity: Any

    def offset(self, v: Any) -> Any: ...

    def apply(self, h: Any, v: Any) -> Any: ...

    def carrier(self, u: Any, v: Any) -> Any: ...


class Translations:
    """The translations of a grid torus by multiples of ``steps[a]`` along each axis ``a`` (``steps[a] ==
    shape[a]``: none along it). Built only if each is a symmetry of the chips' links (same bandwidth, latency
    and kind; `ValueError` otherwise). Chips are grid positions; a translation is stored as the offset it
    subtracts (``offset``), so ``apply(offset(c), c) == rep(c)``, the orbit's chip with every coordinate
    below its step."""

    def __init__(self, net: Network, steps: tuple[int, ...]) -> None:
        shape = net.shape
        if not net.grid or len(steps) != len(shape) or any(n % s for s, n in zip(steps, shape, strict=True)):
            raise ValueError(f"steps {steps} do not divide the grid {shape}")
        self.shape, self.steps = shape, tuple(steps)
        self.order = math.prod(n // s for s, n in zip(steps, shape, strict=True))  #: |G|, chips per orbit
        self.coord = {v: tuple(c) for v, c in net.graph.nodes(data="coord") if c is not None}
        self._at = {c: v for v, c in self.coord.items()}
        if len(self._at) != math.prod(shape):
            raise ValueError("the grid's chips do not fill it")
        for axis, (s, n) in enumerate(zip(steps, shape, strict=True)):
            if s == n:
                continue
            shift = tuple(-s if a == axis else 0 for a in range(len(shape)))  # the generator: +s along the axis
            for u, v, data in net.graph.edges(data=True):
                if u not in self.coord or v not in self.coord:
                    continue
                image = net.graph.get_edge_data(self.apply(shift, u), self.apply(shift, v))
                if image is None or any(image.get(k) != data.get(k) for k in ("bandwidth_bytes_per_s", "latency_s",
                                                                               "kind")):
                    raise ValueError(f"a step of {s} along axis {axis} does not map link {u}->{v} onto a like one")

    def offset(self, v: Any) -> tuple[int, ...] | None:
        """The translation (as the offset it subtracts) taking chip ``v`` to its orbit's representative; None
        for a node G does not move freely (not a chip of the grid)."""
        c = self.coord.get(v)
        if c is None:
            return None
        return tuple(x - x % s for x, s in zip(c, self.steps, strict=True))

    def apply(self, h: tuple[int, ...], v: Any) -> Any:
        """Chip ``v`` translated by minus ``h``."""
        return self._at[tuple((x - d) % n for x, d, n in zip(self.coord[v], h, self.shape, strict=True))]

    def rep(self, v: Any) -> Any:
        """The representative of ``v``'s orbit."""
        h = self.offset(v)
        return v if h is None else self.apply(h, v)

    @property
    def identity(self) -> tuple[int, ...]:
        """The translation by nothing."""
        return (0,) * len(self.shape)

    def carrier(self, u: Any, v: Any) -> tuple[int, ...] | None:
        """The translation taking link ``u -> v`` to its orbit's representative link: ``u``'s (both ends must
        be chips of the grid); None where there is none (the quotient then refuses)."""
        return self.offset(u) if v in self.coord else None


@dataclass(frozen=True)
class Quotient:
    """A schedule's representatives (``transfers``, renumbered, dependencies on representatives) and, for each,
    its route's representative channels with the interfaces they cross (None: it arrives at once), and the
    orbit size ``order`` (transfers each one stands for)."""

    transfers: list[Transfer]
    routes: list[tuple[tuple[Channel, ...], tuple[tuple[str, int], ...]] | None]
    order: int
    links: tuple[Channel, ...]  #: every representative channel the routes cross
    represented: int = 0  #: transfers of the whole schedule (barriers too)
    announced: int = 0  #: of those, how many `Schedule.add` counted in the watch's estimate as it built them

    @cached_property
    def shape(self) -> Shape:
        """`schedule_shape` of ``transfers``, made once: a quotient runs at every start of its collective."""
        return schedule_shape(self.transfers)


def quotient(net: Network, transfers: list[Transfer], action: Action) -> Quotient | None:
    """The quotient of ``transfers`` by ``action`` (see the module), or None where the schedule or its routes
    are not equivariant (run it in full)."""
    n = len(transfers)
    depth, place = [0] * n, [0] * n
    index: dict[tuple[Any, int], int] = {}  #: (role, k) -> the representative's transfer id
    seen: dict[Any, int] = {}  #: role -> transfers of that role so far
    depth_of, seen_get = depth.__getitem__, seen.get
    chips, identity = set(net.chips), action.identity
    offsets: dict[Any, Any] = {}
    offsets_get, index_get = offsets.get, index.get
    # (the loops below unpack the records (id, src, dst, keys, op, deps, nbytes) rather than read their fields:
    # they visit every transfer of the whole schedule, hundreds of thousands on thousands of chips)
    for tid, src, dst, _, op, deps, nbytes in transfers:  # a transfer's role: its pair, bytes, operation and depth
        if not deps:  # (dependencies come first)
            d = 0
        elif len(deps) == 1:
            d = depth[tid] = 1 + depth[deps[0]]
        else:
            d = depth[tid] = 1 + max(map(depth_of, deps))
        if src is None:
            continue
        role = (src, dst, nbytes, op, d)
        k = seen_get(role, 0)
        seen[role] = k + 1
        place[tid] = k
        h = offsets_get(src, _UNSET)
        if h is _UNSET:
            h = offsets[src] = action.offset(src) if src in chips else None
        if h == identity:
            index[(role, k)] = tid  # a representative: the k-th of its role, in the order they were added
    rep_of = list(range(n))
    images: dict[tuple[Any, Any], Any] = {}  # (src, dst) -> their images under src's offset (None: not moved)
    images_get = images.get
    for tid, src, dst, _, op, _, nbytes in transfers:
        if src is None:
            continue
        image = images_get((src, dst), _UNSET)
        if image is _UNSET:
            h = offsets[src]
            if h is None or dst not in chips or action.offset(dst) is None:  # to or from a switch: a hop
                return None
            image = images[(src, dst)] = None if h == identity else (action.apply(h, src), action.apply(h, dst))
        if image is not None:
            r = index_get(((image[0], image[1], nbytes, op, depth[tid]), place[tid]))
            if r is None:
                return None
            rep_of[tid] = r
    sent = [t for t in transfers if t.src is not None]
    if len(sent) != action.order * sum(rep_of[t.id] == t.id for t in sent):  # every orbit whole: |G| members each
        return None  # (a member per translation at most, each source once) -- else the links' loads are not alike
    barriers: dict[frozenset, int] = {}
    for t in transfers:  # a barrier stands for those whose dependencies are of the same orbits (a group's)
        if t.src is None:
            rep_of[t.id] = barriers.setdefault(frozenset(rep_of[d] for d in t.deps), t.id)
    for tid, src, _, _, _, deps, _ in transfers:
        r = rep_of[tid]
        if r != tid and src is not None:
            rep_deps = transfers[r][5]
            if len(deps) == len(rep_deps) == 1:
                if rep_of[deps[0]] != rep_of[rep_deps[0]]:
                    return None
            elif {rep_of[d] for d in deps} != {rep_of[d] for d in rep_deps}:
                return None
    if not _routes_equivariant(net, transfers, rep_of, offsets, action):
        return None
    kept = [t for t in transfers if rep_of[t.id] == t.id]
    new_id = {t.id: i for i, t in enumerate(kept)}
    out: list[Transfer] = []
    for i, t in enumerate(kept):
        deps = tuple(sorted({new_id[rep_of[d]] for d in t.deps}))
        out.append(_new_transfer(Transfer, (i, t.src, t.dst, t.keys, t.op, deps, t.nbytes)))
    found = rep_routes(net, out, action)
    if found is None:
        return None
    routes, used = found
    return Quotient(out, routes, action.order, used, n, n - n % TICK)


def rep_routes(net: Network, transfers: list[Transfer], action: Any) -> tuple[list[Any], tuple[Channel, ...]] | None:
    """Each representative transfer's route on the quotient's representative links (None where it moves nothing)
    and the links they use, in first-use order; None where a route has no representative (`_rep_route`)."""
    routes: list[Any] = []
    used: dict[Channel, None] = {}
    for t in transfers:
        route = None if t.src is None or t.src == t.dst or not (t.nbytes or t.op == DELAY) else \
            _rep_route(net, t.src, t.dst, action)
        if route is False:
            return None
        if route is not None:
            used.update(dict.fromkeys(route[0]))
        routes.append(route)
    return routes, tuple(used)


def _routes_equivariant(net: Network, transfers: list[Transfer], rep_of: list[int], offsets: dict[Any, Any],
                        action: Action) -> bool:
    """Whether every transfer's route is its representative's route translated (checked once per chip pair)."""
    checked: set[tuple[Any, Any]] = set()
    for t in transfers:
        if rep_of[t.id] == t.id or t.src == t.dst or not t.nbytes or (t.src, t.dst) in checked:
            continue
        checked.add((t.src, t.dst))
        h, r = offsets[t.src], transfers[rep_of[t.id]]
        paths, rep_paths = net.routes(t.src, t.dst), net.routes(r.src, r.dst)
        if len(paths) != len(rep_paths) or any([action.apply(h, v) for v in p] != q
                                               for p, q in zip(paths, rep_paths, strict=True)):
            return False
    return True


def _rep_route(net: Network, src: Any, dst: Any, action: Action) -> Any:
    """The representative channels of the one route from ``src`` to ``dst`` and the interfaces it crosses, or
    False where it is not one route of plain channels that the quotient can run (several, store and forward)."""
    paths = net.routes(src, dst)
    if len(paths) != 1 or (len(paths[0]) > 2 and net.switching != "cut_through"):
        return False
    links: list[Channel] = []
    kinds: dict[str, int] = {}
    for u, v in zip(paths[0], paths[0][1:], strict=False):
        h = action.carrier(u, v)
        channel = net.link(action.apply(h, u), action.apply(h, v)) if h is not None else _shared(net, action, u, v)
        if channel is None or type(channel) is not Channel:
            return False
        links.append(channel)
        kinds[channel.kind] = kinds.get(channel.kind, 0) + 1
    return tuple(links), tuple(kinds.items())


def _shared(net: Network, action: Any, u: Any, v: Any) -> Channel | None:
    """Where the action allows it (``action.scaled`` a dict; `simulator.acceleration.automorphisms.Automorphisms`),
    the channel standing for link ``u -> v``'s orbit when its stabiliser has m > 1 elements: each representative
    flow on it stands for m flows on one link, so it runs on a copy of the orbit's representative link at 1/m
    of its bandwidth (fair sharing then gives each flow what it gets in full); None: refused."""
    scaled = getattr(action, "scaled", None)
    if scaled is None:
        return None
    (a, b), m = action.link_rep(u, v)
    real = net.link(a, b)
    if m == 1:
        return real
    channel = scaled.get((a, b))
    if channel is None:
        channel = scaled[(a, b)] = Channel(net.env, real.name, real.bandwidth_bytes_per_s / m, real.latency_s,
                                           chip=real.chip, trace=net.trace)
        channel.kind = real.kind
        channel.nominal_bandwidth_bytes_per_s, channel.nominal_latency_s = channel.bandwidth_bytes_per_s, real.latency_s
        channel.real, channel.multiplicity = real, m
    return channel


class _QuotientRun(Aggregated):
    """An aggregated `execute` of a quotient: each representative over its representative channels."""

    __slots__ = ("routes", "scale")
    routes: list[tuple[tuple[Channel, ...], tuple[tuple[str, int], ...]] | None]  #: `Quotient.routes`
    scale: int  #: transfers each representative stands for (`Quotient.order`)

    def start(self, t: Transfer) -> None:
        route = self.routes[t.id]
        if route is None:  # a barrier, a copy in place, nothing to send: what `deliver` does
            call_after(self.net.env, 0.0, self.arrive, t.id)
            return
        links, kinds = route
        nbytes = t.nbytes
        if t.op not in PLAIN_OPS:  # a split hop (`simulator.collectives.schedule.DELAY`) on the representative links
            if t.op == DELAY:
                call_after(self.net.env, sum(link.latency_s for link in links), self.arrive, t.id)
                return
            if self.by_interface is not None:
                for kind, count in kinds:
                    self.by_interface[kind] += nbytes * count * self.scale
            left = [len(links)]

            def one_done(_: Any) -> None:
                left[0] -= 1
                if left[0] == 0:
                    self.arrive(t.id)

            for link in links:
                link.send_bytes(nbytes, self.label, "send", one_done, None)
            return
        if self.by_interface is not None:
            for kind, count in kinds:
                self.by_interface[kind] += nbytes * count * self.scale
        if len(links) == 1:
            links[0].send(nbytes, self.label, "send", self.arrive, t.id)
        else:
            cut_through(self.net, links, nbytes, self.label, self.arrive, t.id)  # (the tuple itself: only read)


def execute_quotient(net: Network, q: Quotient, label: str = "") -> Completion:
    """Run the quotient ``q`` (timing only); its completion event fires when its last representative has
    arrived -- when the whole collective would have."""
    done = Completion(net.env)
    # the watch expects the representatives' work instead of what `Schedule.add` announced of the whole schedule
    expect_events(AGGREGATED_EVENTS_PER_TRANSFER * (len(q.transfers) - q.announced), LONG_RUN_HINT)
    if not q.transfers:
        done.succeed(net.env.now)
        return done
    sink = net.eager_sink  # a strict chain, alone on its links: in one timer (`simulator.acceleration.chain_run`)
    if sink is not None:
        chained = sink.run(q, label)
        if chained is not None:
            return chained
    run = _QuotientRun(net, q.transfers, None, label, done, q.shape)
    run.routes, run.scale = q.routes, q.order
    for t in q.shape[2]:
        run.start(t)
    return done


def run_on_quotient(net: Network, transfers: list[Transfer],
                    multiplicities: bool = False) -> tuple[Quotient, Any] | None:
    """The quotient of ``transfers`` by the largest symmetry group of a GPU node system that it is equivariant
    under (`simulator.acceleration.automorphisms.node_actions`), with that group; None where there is none."""
    from simulator.acceleration.automorphisms import node_actions, slice_actions

    actions = node_actions(net, multiplicities) or slice_actions(net)
    if not actions:
        return None
    chips = set(net.chips)
    pairs = {(t.src, t.dst) for t in transfers if t.src is not None and t.src != t.dst and t.nbytes}
    if any(src not in chips or dst not in chips for src, dst in pairs):
        return None
    paths = [net.routes(src, dst) for src, dst in pairs]
    if any(len(p) != 1 for p in paths):
        return None
    links = {(u, v) for (p,) in paths for u, v in zip(p, p[1:], strict=False)}
    for action in actions:  # a group that leaves a link the schedule uses without a carrier: refused at once
        if not multiplicities and any(action.carrier(u, v) is None for u, v in links):
            continue
        q = quotient(net, transfers, action)
        if q is not None:
            return q, action
    return None


def unfold(net: Network, action: Any, q: Quotient | SimpleNamespace, before: dict[Channel, float]) -> None:
    """After a quotient run, give every link of each representative link's orbit what that link carried: the
    bytes it carried in the run (since ``before``, bytes per channel; of ``q`` only its ``links`` are read, so a
    step's several quotients by one group pass a ``SimpleNamespace(links=...)`` of theirs) and, with tracing on,
    its busy time and spans (`simulator.acceleration.unfolding.Unfolding` on ``trace.stood_for``:
    `simulator.engine.trace.compute_metrics` counts the representative's spans for each, so busy times,
    utilisation and bounds are a full run's; the spans themselves stay on the representative links until an
    export unfolds them, as a full run of a thousand GPUs would hold tens of millions)."""
    trace = net.trace
    ahead = trace is None or not trace.enabled  # (no spans to name: a link not built yet is given its bytes by
    built = net.built  # `Network.carry`, and built only where something asks for it)
    ends = {channel: pair for pair, channel in built.items()}
    orbit = getattr(action, "orbit", None)  # (`Automorphisms.orbit`: every image at once)
    for channel in q.links:
        m = getattr(channel, "multiplicity", 1)
        real = channel.real if m > 1 else channel
        u, v = ends[real]
        carried = (channel.bytes_carried - before.get(channel, 0.0)) * m
        if m > 1:
            real.bytes_carried += carried
        seen: dict[tuple[Any, Any], Channel | None] = {(u, v): real}  # each link of the orbit once (None: carried)
        pairs = zip(orbit(u), orbit(v), strict=True) if orbit is not None else \
            ((action.apply(g, u), action.apply(g, v)) for g in action.elements())
        for pair in pairs:
            if pair in seen:
                continue
            image = built.get(pair)
            if image is None:
                if ahead:
                    net.carry(*pair, carried)
                    seen[pair] = None
                    continue
                image = net.link(*pair)
            seen[pair] = image
            image.bytes_carried += carried
        assert len(seen) * m == action.order, (u, v, m)  # the orbit, each link once
        if trace is not None and trace.enabled:  # spans: each of the m flows, on every link of the orbit
            out = [(image.chip, image.name) for image in list(seen.values())[1:] if image is not None]
            stand_ins(trace).add_links((channel.chip, channel.name), out, m)
