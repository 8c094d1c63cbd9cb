"""A collective run on the quotient of a symmetric network: one transfer and one link per orbit, exactly.

Let G be a group of symmetries of a network -- here translations of a grid torus by whole steps along its
wrapped axes (`Translations`) -- acting freely on its chips: every translation other than the identity moves
every chip. If a collective's schedule is G-equivariant (for every transfer t and every g in G there is a
transfer g.t from g.src to g.dst with t's bytes whose dependencies are the images of t's) and so are the
routes, then in a run every member of an orbit {g.t} starts and arrives at the same instants, and every link
of an orbit {g.L} carries the same flows at the same instants (fair sharing treats flows that start together
alike, whatever order they join in). So it is enough to run one transfer per orbit -- those sent by the orbit
representatives of the chips (`Translations.rep`) -- waiting on the representatives of its dependencies, over
the representatives of its route's links: link L's flows at time T are, in full, the transfers g.t whose
route crosses L; in the quotient, the representatives t whose route crosses some link of L's orbit, each
once (G acts freely on links too, so exactly one g maps the i-th hop of t onto L). |G| times fewer transfers
and events; the same times, the same bytes on every link that runs, and trace spans for those links only.

`quotient` checks equivariance rather than assuming it, and returns None (run in full) when it fails:
transfers are matched by (source, destination, how many between them came before), each match must carry
the same bytes and operation and depend on the matches of the same orbits, barriers (no source) stay as they
are, and every route must be the image of its representative's (one route of plain channels, cut through).
Interface byte counters count each representative's bytes |G| times: the whole collective's traffic. Only
timing runs: a numeric collective (buffers) needs every chip's data.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from simulator.collectives.schedule import Completion, Transfer, _Aggregated, _new_transfer
from simulator.engine.channel import Channel, call_after
from simulator.engine.delivery import cut_through
from simulator.engine.network import Network


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


@dataclass(frozen=True)
class Quotient:
    """A schedule's representatives (``transfers``, renumbered, dependencies on representatives) and, for each,
    its route's representative channels with the interfaces they cross (None: it arrives at once), and the
    orbit size ``order`` (transfers each one stands for)."""

    transfers: list[Transfer]
    routes: list[tuple[tuple[Channel, ...], tuple[tuple[str, int], ...]] | None]
    order: int
    links: tuple[Channel, ...]  #: every representative channel the routes cross


def quotient(net: Network, transfers: list[Transfer], action: Translations) -> Quotient | None:
    """The quotient of ``transfers`` by ``action`` (see the module), or None where the schedule or its routes
    are not equivariant (run it in full)."""
    n = len(transfers)
    depth, place, index, seen = [0] * n, [0] * n, {}, {}
    for t in transfers:  # a transfer's role: its pair, bytes, operation and depth (dependencies come first)
        depth[t.id] = 1 + max((depth[d] for d in t.deps), default=-1)
        if t.src is None:
            continue
        role = (t.src, t.dst, t.nbytes, t.op, depth[t.id])
        k = seen.get(role, 0)
        seen[role] = place[t.id] = k + 1
        index[(*role, k)] = t.id  # the k-th of its role, in the order they were added
    rep_of = list(range(n))
    offsets: dict[Any, Any] = {}
    for t in transfers:
        if t.src is None:
            continue
        h = offsets.get(t.src, 0)
        if h == 0:
            h = offsets[t.src] = action.offset(t.src)
        if h is None or (t.dst is not None and action.offset(t.dst) is None):
            return None
        if any(h):
            r = index.get((action.apply(h, t.src), action.apply(h, t.dst), t.nbytes, t.op, depth[t.id],
                           place[t.id] - 1))
            if r is None:
                return None
            rep_of[t.id] = r
    barriers: dict[frozenset, int] = {}
    for t in transfers:  # a barrier stands for those whose dependencies are of the same orbits (a group's)
        if t.src is None:
            rep_of[t.id] = barriers.setdefault(frozenset(rep_of[d] for d in t.deps), t.id)
    for t in transfers:
        r = rep_of[t.id]
        if r != t.id and t.src is not None and \
                {rep_of[d] for d in t.deps} != {rep_of[d] for d in transfers[r].deps}:
            return None
    if not _routes_equivariant(net, transfers, rep_of, offsets, action):
        return None
    kept = [t for t in transfers if rep_of[t.id] == t.id]
    new_id = {t.id: i for i, t in enumerate(kept)}
    out: list[Transfer] = []
    routes: list[Any] = []
    used: dict[Channel, None] = {}
    for i, t in enumerate(kept):
        deps = tuple(sorted({new_id[rep_of[d]] for d in t.deps}))
        out.append(_new_transfer(Transfer, (i, t.src, t.dst, t.keys, t.op, deps, t.nbytes)))
        route = None if t.src is None or t.src == t.dst or not t.nbytes else _rep_route(net, t.src, t.dst, action)
        if route is False:
            return None
        if route is not None:
            used.update(dict.fromkeys(route[0]))
        routes.append(route)
    return Quotient(out, routes, action.order, tuple(used))


def _routes_equivariant(net: Network, transfers: list[Transfer], rep_of: list[int], offsets: dict[Any, Any],
                        action: Translations) -> bool:
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


def _rep_route(net: Network, src: Any, dst: Any, action: Translations) -> Any:
    """The representative channels of the one route from ``src`` to ``dst`` and the interfaces it crosses, or
    False where it is not one route of plain channels that the quotient can run (several, store and forward)."""
    paths = net.routes(src, dst)
    if len(paths) != 1 or (len(paths[0]) > 2 and net.switching != "cut_through"):
        return False
    links, kinds = [], {}
    for u, v in zip(paths[0], paths[0][1:], strict=False):
        h = action.offset(u)
        if h is None:
            return False
        channel = net.link(action.apply(h, u), action.apply(h, v))
        if type(channel) is not Channel:
            return False
        links.append(channel)
        kinds[channel.kind] = kinds.get(channel.kind, 0) + 1
    return tuple(links), tuple(kinds.items())


class _QuotientRun(_Aggregated):
    """An aggregated `execute` of a quotient: each representative over its representative channels."""

    __slots__ = ("routes", "scale")

    def start(self, t: Transfer) -> None:
        route = self.routes[t.id]
        if route is None:  # a barrier, a copy in place, nothing to send: what `deliver` does
            call_after(self.net.env, 0.0, self.arrive, t.id)
            return
        links, kinds = route
        nbytes = t.nbytes
        if self.by_interface is not None:
            for kind, count in kinds:
                self.by_interface[kind] += nbytes * count * self.scale
        if len(links) == 1:
            links[0].send(nbytes, self.label, "send", self.arrive, t.id)
        else:
            cut_through(self.net, list(links), nbytes, self.label, self.arrive, t.id)


def execute_quotient(net: Network, q: Quotient, label: str = "") -> Completion:
    """Run the quotient ``q`` (timing only); its completion event fires when its last representative has
    arrived -- when the whole collective would have."""
    done = Completion(net.env)
    if not q.transfers:
        return done.succeed(net.env.now)
    run = _QuotientRun(net, q.transfers, None, label, done)
    run.routes, run.scale = q.routes, q.order
    for t in q.transfers:
        if not t.deps:
            run.start(t)
    return done
