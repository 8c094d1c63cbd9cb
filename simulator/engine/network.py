"""Links of a topology as bandwidth channels, routing, and point-to-point messages.

Timing model (one line): a hop costs its latency plus bytes over its bandwidth; each link direction is
a `Channel` shared fairly by the messages on it (two flows each see half the bandwidth -- links
interleave packets from concurrent flows, so neither waits for the other to finish).

Multi-hop messages are either
- ``cut_through`` (default, as ICI and NVLink switch): the head moves on after one hop latency, so
  every hop carries the bytes at once and an uncontended message takes ``sum(latency) + bytes / b``
  (REFERENCE: latency and bandwidth add); a hop cannot finish before the previous hop finished plus
  its own latency, so a slow upstream link slows the whole message; or
- ``store_and_forward``: each hop receives the whole piece before sending it on. A message cut into
  ``chunks`` pieces pipelines them: ``(hops + chunks - 1) * (latency + bytes / (chunks * b))``.
Chunks matter only to store-and-forward: a cut-through message already pipelines at flit level.

Routing: dimension order on tori and meshes (shortest way round each ring, ties broken toward +1),
elsewhere the quickest path for a 1 MB message (so NVLink beats InfiniBand inside a node).
``multipath`` splits a message evenly over link-disjoint dimension-order routes (one per rotation
of the axes it must cross), so ``links_used`` links leave the source at once.
"""
from __future__ import annotations

import copy
import itertools
import math
import weakref
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import networkx as nx
import simpy

from simulator import analytic
from simulator.engine.channel import Channel
from simulator.engine.faults import HEALTHY_BANDWIDTH
from simulator.engine.routing import QuickestPaths
from simulator.engine.simpy_door import clock
from simulator.engine.speedups import route_finder
from simulator.engine.timers import call_after
from simulator.engine.trace import Trace
from simulator.errors import PodsimError
from simulator.units import MAX_BYTES, check_bytes, positive, positive_int

if TYPE_CHECKING:  # annotations only: no import at run time (and no cycle)
    from simulator.engine.system import System

SWITCHING = ("cut_through", "store_and_forward")
MAX_CHUNKS = 10_000  #: pieces per message; more is a units mistake and would take minutes
_GRID_KINDS = ("torus", "ring", "line", "mesh")


#: each graph's closed-form pieces (`Network.priced`), kept while the graph lives
_PRICED: weakref.WeakKeyDictionary[Any, dict[Any, Any]] = weakref.WeakKeyDictionary()


class Network:
    """The links of ``graph`` as channels in ``env``, with routing and messages."""

    def __init__(self, env: simpy.Environment, graph: nx.DiGraph, trace: Trace | None = None,
                 switching: str = "cut_through") -> None:
        if switching not in SWITCHING:
            raise PodsimError(f"switching={switching!r}; valid: {', '.join(SWITCHING)}")
        self.env = env
        self.graph = graph
        self.trace = trace
        self.switching = switching
        self.chips = sorted(v for v, role in graph.nodes(data="role") if role == "chip")
        self._chip_set = frozenset(self.chips)
        _check_connected(graph, self.chips)
        _check_links(graph)
        self._links: dict[tuple[Any, Any], Channel] = {}
        self._ahead: dict[tuple[Any, Any], float] = {}  # bytes carried by links not built yet (`carry`)
        self._efficiency: Any = None  # kind -> fraction of the link rate (calibrated collectives)
        self._latency: Any = None  # (kind, nominal latency) -> seconds a hop (a calibrated protocol)
        self._settings: dict[tuple[str, float], tuple[float, float]] = {}  # their values (`_apply_efficiency`)
        self._link_cache: dict[tuple[Any, Any, bool], tuple[list[list[Channel]], list[tuple[str, int]]]] = {}
        self._routes: dict[tuple[Any, Any, bool], list[list[Any]]] = {}
        hosts = [v for v, role in graph.nodes(data="role") if role == "host"]
        self._fabric = nx.restricted_view(graph, hosts, []) if hosts else graph  # chips never route via a host
        self._quickest = QuickestPaths(self._fabric, _route_cost)  # many routes from one source: one search
        self._symmetry: Any = False  # a node system's `speedups.RouteSymmetry` (None: none; False: not looked for yet)
        self._unit_routes: dict[tuple[Any, Any], list[Any] | None] = {}  # unit-0 pairs' quickest paths
        self._plain_routes: dict[tuple[Any, Any], Any] = {}  # (src, dst) -> plain channels or None (aggregation)
        self._unique: set[tuple[Any, Any]] = set()  # pairs routed on their one quickest path (`route_is_unique`)
        self.shape: tuple[int, ...] = tuple(graph.graph.get("shape", ()))
        self.wrap: tuple[bool, ...] = tuple(graph.graph.get("wrap", ()))
        self.grid = graph.graph.get("kind") in _GRID_KINDS and len(self.shape) > 0
        self.chip: Any = None  #: the system's ChipSpec (set by `System`): what its switches can do (NVLS)
        self.rows_in_use = False  #: a step's groups run on every row: none idle to borrow (`borrowed_rings`)
        # Faults (`simulator.engine.faults`): a dead cable unwraps its axis for collectives (``wrap``), whose
        # positions then count from ``origin``; routes follow the cabling (``links_wrap``) and avoid dead links.
        self.faulted = bool(graph.graph.get("faults"))
        self.origin: tuple[int, ...] = tuple(graph.graph.get("origin", (0,) * len(self.shape)))
        self._route_wrap = tuple(graph.graph.get("links_wrap", self.wrap))
        self._coords: dict[Any, tuple[int, ...]] | None = None  # node -> grid coordinate (`_grid_routes`, on demand)
        self._strides = tuple(math.prod(self.shape[i + 1:]) for i in range(len(self.shape)))  # row-major `_node`
        self.uniform = True  #: every ring of an axis behaves alike (no faults or jitter on links; `System` sets it)
        self.make_channel: Any = None  #: builds a link's channel from (u, v, edge data) instead of `Channel`
        self._busy_hint: Channel | None = None  #: the link `idle` last found busy (asked first next time)
        self._scan: list[Channel] = []  #: the built channels, in order, as `idle` scans them
        self._scan_at = 0  #: where `idle` found the last busy one (it scans on from there, round)
        #: runs strict-chain quotients in one timer and holds their links (`simulator.acceleration.chain_run`:
        #: ``run``, ``busy``, ``settle``); None: none
        self.eager_sink: Any = None
        #: (the values (kind, nominal latency) -> (fraction, hop latency) every built channel runs at, None: not known;
        #: the (kind, nominal latency) pairs of the built channels): `set_link_efficiency` sets only what changes
        self._applied: list[Any] = [{}, set()]

    # -- links -------------------------------------------------------------------------------
    def link(self, u: Any, v: Any) -> Channel:
        """The channel of link direction ``u -> v`` (built on first use)."""
        channel = self._links.get((u, v))
        if channel is None:
            channel = self._new_link(u, v)
        return channel

    def _new_link(self, u: Any, v: Any) -> Channel:
        data = self.graph._adj[u][v]  # (``graph.edges[u, v]`` without its view: unfolding builds tens of thousands)
        if self.make_channel is None:
            channel = Channel(self.env, f"link {u}->{v}", data["bandwidth_bytes_per_s"], data["latency_s"],
                              chip=u, trace=self.trace)
        else:
            channel = self.make_channel(u, v, data)
        channel.kind = data.get("kind", "ici")
        channel.nominal_bandwidth_bytes_per_s = channel.bandwidth_bytes_per_s
        channel.nominal_latency_s = channel.latency_s
        self._links[(u, v)] = channel
        pair = (channel.kind, channel.nominal_latency_s)
        if pair not in self._applied[1]:  # a kind of link not set yet: the next setting sets every channel
            self._applied[1].add(pair)
            self._applied[0] = None
        if self._ahead:
            carried = self._ahead.pop((u, v), None)
            if carried is not None:
                channel.bytes_carried += carried
        trace = self.trace
        if trace is not None and trace.enabled:  # the report groups links by kind and axis (by their busy times:
            # with tracing off there are none, and nothing reads these)
            roles = {"src_role": self.graph.nodes[u].get("role"), "dst_role": self.graph.nodes[v].get("role")}
            trace.links[channel.name] = {**data, **roles}
        if self._efficiency is not None or self._latency is not None:  # (else: its own rate and latency)
            self._apply_efficiency(channel, fresh=True)
        return channel

    def sibling(self, graph: nx.DiGraph) -> Network:
        """A network over ``graph`` (this one's graph with some cables left out, or its axes' wrap and origin
        changed) that shares this one's channels: a collective planned on it routes by ``graph`` and its bytes
        land on the same links (`simulator.collectives.fault_routes`). ``graph`` may only drop links, never add
        or change one."""
        other = copy.copy(self)
        other.graph = graph
        other._routes, other._link_cache, other._plain_routes, other._unique = {}, {}, {}, set()
        # what was found on this graph's links is not the sibling's: its routes' symmetry and unit routes
        other._symmetry, other._unit_routes = False, {}
        hosts = [v for v, role in graph.nodes(data="role") if role == "host"]
        other._fabric = nx.restricted_view(graph, hosts, []) if hosts else graph
        other._quickest = QuickestPaths(other._fabric, _route_cost)
        other.wrap = tuple(graph.graph.get("wrap", ()))
        other.origin = tuple(graph.graph.get("origin", (0,) * len(self.shape)))
        other._route_wrap = tuple(graph.graph.get("links_wrap", other.wrap))
        return other

    @property
    def priced(self) -> dict[Any, Any]:
        """Closed-form pieces that depend only on this network's graph -- its links' rates and latencies and the
        routes they give -- never on a job's bytes (`simulator.collectives.multi_axis._Pricer`'s phase profiles):
        shared by every job priced on a network over this graph object. Kept by graph, not by network: a sibling
        (`sibling`) or a calibrated price's view (`simulator.collectives.protocol.priced_view`) copies the network
        over another graph and so prices on its own pieces, and two networks over one graph share theirs (a graph
        is not changed once a network is built on it)."""
        found = _PRICED.get(self.graph)
        if found is None:
            found = _PRICED[self.graph] = {}
        return found

    @priced.setter
    def priced(self, pieces: dict[Any, Any]) -> None:
        _PRICED[self.graph] = pieces

    @property
    def links(self) -> Mapping[tuple[Any, Any], Channel]:
        """The channels of the link directions used so far, by ``(u, v)`` (a channel is built on first use; those
        given bytes by `carry` are built first)."""
        if self._ahead:
            self._build_ahead()
        return MappingProxyType(self._links)

    @property
    def built(self) -> Mapping[tuple[Any, Any], Channel]:
        """The channels built so far, by ``(u, v)``: `links` without the links `carry` gave bytes to, not built yet."""
        return MappingProxyType(self._links)

    def carry(self, u: Any, v: Any, nbytes: float) -> None:
        """Add ``nbytes`` to link ``u -> v``'s bytes carried, without building its channel where it is not built
        yet: it gets them when it is (by `link`, or by `links` and `link_bytes`, which build every such link
        first). A fast run's unfolding (`simulator.acceleration.quotient.unfold`) gives tens of thousands of links
        their bytes this way, most of which nothing asks for again."""
        channel = self._links.get((u, v))
        if channel is not None:
            channel.bytes_carried += nbytes
        else:
            self._ahead[(u, v)] = self._ahead.get((u, v), 0.0) + nbytes

    def _build_ahead(self) -> None:
        for pair in list(self._ahead):
            self.link(*pair)

    def idle(self) -> bool:
        """Whether no link is carrying bytes now. The link last found busy is asked first: at a collective's
        start the network is nearly always busy, and mostly on that link still, so the answer is usually one
        look; where it has gone idle, the scan starts where it was found (busy links lie near one another in the
        order they were built: a collective's); the answer is a whole scan's either way."""
        now = clock(self.env)
        hint = self._busy_hint  # (`Channel.busy` inline: a flow moving bytes now; no subclass redefines it)
        if hint is not None and hint._flows and hint._last_update <= now:
            return False
        channels = self._scan
        if len(channels) != len(self._links):  # (channels are only ever added: `_new_link`)
            channels = self._scan = list(self._links.values())
        start = self._scan_at if self._scan_at < len(channels) else 0
        for i in itertools.chain(range(start, len(channels)), range(start)):  # (on from where one was found last)
            channel = channels[i]
            if channel._flows and channel._last_update <= now:
                self._busy_hint, self._scan_at = channel, i
                return False
        sink = self.eager_sink  # the links a chain holds carry no flows: it says whether they would
        return sink is None or not sink.busy()

    def set_link_efficiency(self, fraction: Any, latency: Any = None) -> None:
        """Run every link at ``fraction(kind)`` of its rate (None: the full rate) from now on, and, with
        ``latency``, at ``latency(kind, nominal_latency_s)`` seconds a hop (None: its own latency).

        Only between collectives: a channel with transfers in flight keeps its rate.
        """
        if self.eager_sink is not None:  # the chains under way handed to the event-by-event run first
            self.eager_sink.settle()
        self._efficiency = fraction
        self._latency = latency
        self._settings = {}  # (kind, nominal latency) -> (fraction, hop latency) under these settings
        applied = self._applied  # (shared with siblings: they share the channels)
        pairs = applied[1]
        if applied[0] is not None:  # every channel at the values of the last settings: are these the same?
            new = {key: self._setting(key) for key in pairs}
            if new == applied[0]:  # a channel with no flow keeps its rate and latency: only those with one are set
                for channel in self._links.values():  # (a flow admitted ahead of its arrival: `_unadmit`)
                    if channel._flows:
                        self._apply_efficiency(channel)
                return
        for channel in self._links.values():
            self._apply_efficiency(channel)
        applied[0] = {key: self._setting(key) for key in pairs}

    def _setting(self, key: tuple[str, float]) -> tuple[float, float]:
        """(fraction of the rate, hop latency s) of links of ``key`` (kind, nominal latency) under the settings."""
        found = self._settings.get(key)  # (a function of kind and nominal latency: each asked once per setting)
        if found is None:
            kind, nominal = key
            factor = self._efficiency(kind) if self._efficiency is not None else 1.0
            found = self._settings[key] = (factor, nominal if self._latency is None else self._latency(kind, nominal))
        return found

    def _apply_efficiency(self, channel: Channel, fresh: bool = False) -> None:
        if not fresh and channel.busy:  # (``fresh``: just built, no flow yet)
            raise PodsimError(f"{channel.name} has transfers in flight; change link efficiency between collectives")
        key = (channel.kind, channel.nominal_latency_s)
        found = self._settings.get(key)
        if found is None:
            found = self._setting(key)
        channel.bandwidth_bytes_per_s = channel.nominal_bandwidth_bytes_per_s * found[0]
        channel.latency_s = found[1]

    def link_bytes(self) -> dict[str, float]:
        """Bytes carried per link direction that carried any (``"u->v"`` keys)."""
        if self._ahead:
            self._build_ahead()
        return {f"{u}->{v}": c.bytes_carried for (u, v), c in sorted(self._links.items(), key=_pair_str)
                if c.bytes_carried > 0}

    # -- routing -----------------------------------------------------------------------------
    def routes(self, src: Any, dst: Any, multipath: bool = False) -> list[list[Any]]:
        """Node paths from ``src`` to ``dst``: one, or link-disjoint ones with ``multipath``."""
        key = (src, dst, multipath)
        paths = self._routes.get(key)
        if paths is None:
            self._check_chip(src)
            self._check_chip(dst)
            if self.faulted:
                paths = self._fault_routes(src, dst, multipath)
            else:
                paths = self._grid_routes(src, dst, multipath) if self.grid else [self._switched_route(src, dst)]
            self._routes[key] = paths
        return paths

    def route_is_unique(self, src: Any, dst: Any) -> bool:
        """Whether ``routes(src, dst)`` is the one quickest path by a clear margin (`simulator.engine.routing.TIE`
        at every node on it) on an unfaulted fabric routed by cost (not a grid, no hosts). Then every permutation of
        the nodes that keeps every link's bandwidth, latency and kind (so its cost, `_route_cost`) maps it onto the
        route of the image pair: the image is that pair's one quickest path by the same margin (its cost is exact,
        a sum of the same link costs in the same order; any other path is slower by the margin, far past rounding),
        and every branch of `routes` gives the one quickest path where there is one (its own search, a unit-0
        route moved by a rotation that keeps costs, or networkx's exact search)."""
        if self.faulted or self.grid or self._fabric is not self.graph:
            return False
        self.routes(src, dst)
        return (src, dst) in self._unique

    def _switched_route(self, src: Any, dst: Any) -> list[Any]:
        """The quickest path on a routed (not grid) fabric: on a node system, unit 0's moved over
        (`simulator.engine.speedups.RouteFinder`) where unit 0's is the one quickest; else searched directly."""
        if self._symmetry is False:
            self._symmetry = route_finder().symmetry(self._fabric) if self._fabric is self.graph else None
        sym = self._symmetry
        if sym is not None:
            shift = sym.offset(src)
            if shift:
                a, b = sym.move(src, -shift), sym.move(dst, -shift)
                if (a, b) not in self._unit_routes:
                    self._unit_routes[(a, b)] = self._quickest.path(a, b)
                path = self._unit_routes[(a, b)]
                if path is not None:
                    self._unique.add((src, dst))
                    return [sym.move(v, shift) for v in path]
        path = self._quickest.path(src, dst)
        if path is None:
            return nx.shortest_path(self._fabric, src, dst, weight=_route_cost)
        self._unique.add((src, dst))
        return path

    def _fault_routes(self, src: Any, dst: Any, multipath: bool) -> list[list[Any]]:
        """Routes where links are down or chips failed: the usual ones that survive (no dead link, no failed
        chip in between), else the quickest such path; else (a failed chip cuts the way) the quickest path
        through it, where the message will be lost (`simulator.engine.disturb`)."""
        failed = set(self.graph.graph.get("failed_chips", ())) - {src, dst}
        if self.grid:  # (jitter, pauses, slow links alone: every route survives, the grid's own)
            has_edge = self.graph.has_edge
            paths = [p for p in self._grid_routes(src, dst, multipath) if not failed.intersection(p[1:-1])
                     and all(has_edge(u, v) for u, v in zip(p, p[1:], strict=False))]
            if paths:
                return paths

        def cost(u: Any, v: Any, data: dict[str, Any]) -> float | None:  # as routed healthy: a slow link stays used
            return None if u in failed or v in failed else _route_cost(u, v, data, healthy=True)

        try:
            return [nx.shortest_path(self.graph, src, dst, weight=cost)]
        except nx.NetworkXNoPath:
            return [nx.shortest_path(self.graph, src, dst, weight=_route_cost)]

    def _check_chip(self, node: Any) -> None:
        try:
            if node in self._chip_set:
                return
        except TypeError:  # unhashable: no node of the graph
            pass
        if node not in self.graph or self.graph.nodes[node].get("role") != "chip":
            raise PodsimError(f"{node!r} is not a chip of this topology; chips are 0..{len(self.chips) - 1}")

    def _grid_routes(self, src: int, dst: int, multipath: bool) -> list[list[int]]:
        coords = self._coords
        if coords is None:
            coords = self._coords = {v: c for v, c in self.graph.nodes(data="coord") if c is not None}
        a, b = coords[src], coords[dst]
        axes = [i for i in range(len(a)) if a[i] != b[i]]
        orders = [axes[r:] + axes[:r] for r in range(len(axes))] if multipath and len(axes) > 1 else [axes]
        return [self._dimension_order(a, b, order) for order in orders]

    def _dimension_order(self, a: tuple[int, ...], b: tuple[int, ...], order: list[int]) -> list[int]:
        node = self._node(a)
        coord, path = list(a), [node]
        for axis in order:
            step = self._step(coord[axis], b[axis], axis)
            c, target, n, stride = coord[axis], b[axis], self.shape[axis], self._strides[axis]
            while c != target:  # `_node` of the next coordinate: the index moves by the axis's stride
                after = (c + step) % n
                node += (after - c) * stride
                c = after
                path.append(node)
            coord[axis] = c
        return path

    def _step(self, x: int, y: int, axis: int) -> int:
        n = self.shape[axis]
        if not self._route_wrap[axis]:
            return 1 if y > x else -1
        forward = (y - x) % n
        return 1 if forward <= n - forward else -1

    def chip_at(self, coord: tuple[int, ...]) -> int:
        """The chip at position ``coord`` of the grid as collectives see it (row-major over ``shape``; grid
        topologies only): its coordinate, counted along each axis from ``origin`` (0 unless a dead cable
        unwrapped the axis, `simulator.engine.faults`)."""
        if any(self.origin):
            coord = tuple((c + o) % n for c, o, n in zip(coord, self.origin, self.shape, strict=True))
        return self._node(tuple(coord))

    def _node(self, coord: tuple[int, ...]) -> int:
        index = 0
        for c, n in zip(coord, self.shape, strict=True):
            index = index * n + c
        return index

    # -- messages ----------------------------------------------------------------------------
    def message(self, src: Any, dst: Any, nbytes: float, label: str = "", chunks: int = 1,
                multipath: bool = False) -> simpy.Event:
        """Send ``nbytes`` from chip ``src`` to chip ``dst``; the event fires (value: time) on arrival."""
        if isinstance(nbytes, bool) or not isinstance(nbytes, (int, float)) or not 0 <= nbytes <= MAX_BYTES:
            check_bytes(nbytes, name="message nbytes")  # raises; the hot path skips it (NaN fails the range too)
        if chunks != 1:
            positive_int(chunks, name="chunks")
            if chunks > MAX_CHUNKS:
                raise PodsimError(f"chunks={chunks} is more than the {MAX_CHUNKS:,} pieces podsim simulates "
                                  "per message")
        if src == dst or nbytes == 0:
            event = self.env.event()
            return event.succeed(self.env.now)
        hops, hops_by_kind = self._route_links(src, dst, multipath)
        share = nbytes / len(hops)
        if self.trace is not None:
            for kind, count in hops_by_kind:
                self.trace.count(kind, share * count)
        if len(hops) == 1 and len(hops[0]) == 1 and (chunks == 1 or self.switching == "cut_through"):
            return hops[0][0].transfer(share, label, "send")  # the common case: no process needed
        sends = [self.env.process(self._send(links, share, label, chunks)) for links in hops]
        return sends[0] if len(sends) == 1 else self.env.process(_all_of(self.env, sends))

    def hop(self, u: Any, v: Any, nbytes: float, label: str = "") -> simpy.Event:
        """Send ``nbytes`` over the one link ``u -> v`` (either end may be a switch, as for in-switch
        reductions); the event fires (value: the time) when the last byte has arrived."""
        channel = self.link(u, v)
        if self.trace is not None:
            self.trace.count(channel.kind, nbytes)
        return channel.transfer(nbytes, label, "send")

    # -- a pipelined hop split in two: its bytes, then its latency (`simulator.collectives.schedule.DELAY`) -----
    def hop_links(self, src: Any, dst: Any) -> list[Channel]:
        """The channels a transfer from ``src`` to ``dst`` crosses: its one route between two chips, else the one
        link (a chip and its switch); none from a device to itself."""
        if src == dst:
            return []
        if src in self._chip_set and dst in self._chip_set:
            return self._route_links(src, dst, False)[0][0]
        return [self.link(src, dst)]

    def route_latency_s(self, src: Any, dst: Any) -> float:
        """Seconds of latency a transfer from ``src`` to ``dst`` pays (its links' latencies add, as they do
        cut-through and store-and-forward alike), at the links' present (possibly calibrated) latencies."""
        return sum(link.latency_s for link in self.hop_links(src, dst))

    def send_bytes(self, src: Any, dst: Any, nbytes: float, label: str, then: Callable[[Any], Any],
                   arg: Any) -> None:
        """The bytes of a transfer from ``src`` to ``dst`` without its latency (`Channel.send_bytes` on every link;
        cut-through, every link of the route carries them at once; store-and-forward, link after link), then
        ``then(arg)`` when they have all left the last link: ``route_latency_s`` later they would have arrived.
        Counts the bytes per interface as `message` and `hop` do."""
        check_bytes(nbytes, name="message nbytes")
        links = self.hop_links(src, dst)
        if not links or nbytes == 0:
            call_after(self.env, 0.0, then, arg)
            return
        if self.trace is not None:
            for link in links:
                self.trace.count(link.kind, nbytes)
        if len(links) == 1:
            links[0].send_bytes(nbytes, label, "send", then, arg)
        elif self.switching == "cut_through":
            left = [len(links)]

            def one_done(_: Any) -> None:
                left[0] -= 1
                if left[0] == 0:
                    then(arg)

            for link in links:
                link.send_bytes(nbytes, label, "send", one_done, None)
        else:
            def forward(k: int) -> None:
                if k == len(links):
                    then(arg)
                else:
                    links[k].send_bytes(nbytes, label, "send", forward, k + 1)

            forward(0)

    def _route_links(self, src: Any, dst: Any, multipath: bool) -> tuple[list[list[Channel]], list[tuple[str, int]]]:
        """The channels of each route and how many hops of each link kind they cross (cached per pair)."""
        key = (src, dst, multipath)
        cached = self._link_cache.get(key)
        if cached is None:
            paths = self.routes(src, dst, multipath)
            hops = [[self.link(u, v) for u, v in zip(p, p[1:], strict=False)] for p in paths]
            kinds: dict[str, int] = {}
            for links in hops:
                for link in links:
                    kinds[link.kind] = kinds.get(link.kind, 0) + 1
            cached = self._link_cache[key] = (hops, list(kinds.items()))
        return cached

    def _send(self, links: list[Channel], nbytes: float, label: str, chunks: int) -> Generator[Any, Any, float]:
        if self.switching == "cut_through":
            return (yield from self._cut_through(links, nbytes, label))
        return (yield from self._store_and_forward(links, nbytes, label, chunks))

    def _cut_through(self, links: list[Channel], nbytes: float, label: str) -> Generator[Any, Any, float]:
        hops = []
        for k, link in enumerate(links):
            if k:
                yield self.env.timeout(links[k - 1].latency_s)  # the head reaches the next hop
            hops.append(link.transfer(nbytes, label, "send"))
        ends = yield simpy.AllOf(self.env, hops)
        done = 0.0
        for link, hop in zip(links, hops, strict=True):
            done = max(ends[hop], done + link.latency_s)
        if done > self.env.now:
            yield self.env.timeout(done - self.env.now)
        return self.env.now

    def _store_and_forward(self, links: list[Channel], nbytes: float, label: str,
                           chunks: int) -> Generator[Any, Any, float]:
        piece = nbytes / chunks
        previous: list[simpy.Event | None] = [None] * len(links)  # last piece's event on each hop
        for _ in range(chunks):
            previous = self._forward_piece(links, piece, label, previous)
        yield previous[-1]
        return self.env.now

    def _forward_piece(self, links: list[Channel], piece: float, label: str,
                       previous: list[simpy.Event | None]) -> list[simpy.Event | None]:
        events: list[simpy.Event | None] = []
        arrived: simpy.Event | None = None
        for k, link in enumerate(links):
            waits = [e for e in (arrived, previous[k]) if e is not None]
            arrived = self._after(waits, link, piece, label)
            events.append(arrived)
        return events

    def _after(self, waits: list[simpy.Event], link: Channel, piece: float, label: str) -> simpy.Event:
        if not waits:
            return link.transfer(piece, label, "send")
        done = self.env.event()

        def arrived(ev: simpy.Event) -> None:
            done.succeed(ev.value)

        def start(_e: Any) -> None:
            link.transfer(piece, label, "send").callbacks.append(arrived)

        simpy.AllOf(self.env, waits).callbacks.append(start)
        return done


def _pair_str(item: tuple[tuple[Any, Any], Channel]) -> str:
    """A link's sort key: ``str`` of its ``(u, v)`` (the order ``str`` of the whole item gives: the pair's text
    comes first and ends at its closing bracket, so the channel's text never decides)."""
    return str(item[0])


def _route_cost(u: Any, v: Any, data: dict[str, Any], healthy: bool = False) -> float:
    """Seconds a 1 MB message spends on a link: latency plus bytes over bandwidth (prefers fast links); ``healthy``:
    at the bandwidth it had before a fault slowed it (`faults.HEALTHY_BANDWIDTH`), so a route keeps a slow link."""
    bandwidth = data.get(HEALTHY_BANDWIDTH, data["bandwidth_bytes_per_s"]) if healthy else data["bandwidth_bytes_per_s"]
    return data["latency_s"] + 1e6 / bandwidth


def _all_of(env: simpy.Environment, events: Sequence[simpy.Event]) -> Generator[Any, Any, float]:
    yield simpy.AllOf(env, events)
    return env.now


def check_graph(graph: nx.DiGraph) -> None:
    """The checks `Network` makes of a topology graph (`PodsimError` as it raises them): a chip, every chip reaching
    every other over links, and every link's bandwidth > 0 and latency >= 0, finite."""
    _check_connected(graph, sorted(v for v, role in graph.nodes(data="role") if role == "chip"))
    _check_links(graph)


def _check_links(graph: nx.DiGraph) -> None:
    for u, v, data in _bad_links(graph):
        try:
            positive(data.get("bandwidth_bytes_per_s"), name=f"link {u}->{v} bandwidth_bytes_per_s")
            positive(data.get("latency_s"), name=f"link {u}->{v} latency_s", allow_zero=True)
        except PodsimError as err:
            raise PodsimError(f"{err}; every link needs a bandwidth > 0 and a latency >= 0") from None


def _bad_links(graph: nx.DiGraph) -> Iterator[tuple[Any, Any, Any]]:
    """The links, in the graph's order, whose bandwidth or latency fails `positive`'s own hot path (a float, > 0
    and >= 0, finite), which `_check_links` then checks in full (an int passes there), naming each."""
    inf = math.inf
    for u, links in graph.adjacency():
        for v, data in links.items():
            bandwidth, latency = data.get("bandwidth_bytes_per_s"), data.get("latency_s")
            if not (bandwidth.__class__ is latency.__class__ is float and 0.0 < bandwidth < inf
                    and 0.0 <= latency < inf):
                yield u, v, data


def _check_connected(graph: nx.DiGraph, chips: list[Any]) -> None:
    if not chips:
        raise PodsimError("the topology has no chips")
    reach = nx.descendants(graph, chips[0]) | {chips[0]}
    missing = [c for c in chips if c not in reach]
    if not missing and nx.ancestors(graph, chips[0]) | {chips[0]} >= set(chips):
        return
    raise PodsimError(f"the topology is disconnected: chip {missing[0] if missing else chips[0]!r} cannot reach "
                      f"every other chip; every chip must reach every other over links")


def send(system: System, src: Any, dst: Any, nbytes: float, *, chunks: int = 1,
         multipath: bool = True) -> dict[str, Any]:
    """Simulate one point-to-point message on ``system`` and report it beside the closed form.

    ``first_byte_s`` is when bytes start arriving at ``dst`` (the first byte on the last link);
    ``links_used`` is how many link-disjoint routes carry a share; ``hops`` counts links per route.
    """
    net = system.network
    if net is None:
        raise PodsimError("this system has no topology; build it with System(chip, topology='torus:4x4')")
    positive(nbytes, name="bytes")
    paths = net.routes(src, dst, multipath)
    start = system.env.now
    net.message(src, dst, nbytes, "send", chunks, multipath)
    system.run()
    last_links = {f"link {p[-2]}->{p[-1]}" for p in paths if len(p) > 1}
    first = min((s.start for s in system.trace.spans if s.unit in last_links), default=start)
    hops = max(len(p) - 1 for p in paths)
    edge = net.graph.edges[paths[0][0], paths[0][1]] if hops else {"latency_s": 0.0, "bandwidth_bytes_per_s": 1.0}
    if net.switching == "cut_through":
        closed = analytic.point_to_point_time(nbytes, hops, edge["bandwidth_bytes_per_s"], edge["latency_s"],
                                              len(paths)) if hops else 0.0
    else:
        closed = analytic.store_and_forward_time(nbytes / len(paths), hops, edge["bandwidth_bytes_per_s"],
                                                 edge["latency_s"], chunks)
    return {"time_s": system.env.now - start, "first_byte_s": first - start, "hops": hops, "links_used": len(paths),
            "analytic_s": closed, "routes": [list(p) for p in paths], "bytes": nbytes, "switching": net.switching,
            "chunks": chunks, "link_bytes": net.link_bytes()}
