"""Flow-level aggregation: a collective's transfers and messages that call a function on arrival instead of
firing an event (issue 16; moved here from `simulator.collectives.schedule` and `simulator.engine.delivery`).

`execute_aggregated` runs a schedule as `simulator.collectives.schedule.execute` does, transfer by transfer
once its dependencies have arrived, but sends each with `deliver` (`Aggregated`: one object per run, no
closures). `deliver` and `deliver_hop` do what `Network.message` and `Network.hop` do -- the same routes, the
same channels shared fairly, the same cut-through timing, the same spans and byte counts -- but on plain links
whose class ``aggregates`` (`Channel`; `simulator.engine.fault_channel.FaultChannel`, the links of faults and
jitter, with its own `send`) they send with ``send``, so the timers of the messages that start at one instant
with one delay (a whole step of a collective on idle links) share one SimPy event (`call_after`), and no event
or process is built per message. Times are those of `Network.message` (the same float operations); only the
order of events within one instant can differ. Links that do not aggregate
(`simulator.engine.channel.ListChannel`, or a class whose ``aggregates`` is set False) and store-and-forward
routes take `Network.message`.

Exact runs use it too (it changes no figure): the collectives layer reaches it only through its `FastPath`
protocol (`simulator.collectives.fast_path`), which the executor implements.
"""
from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from simulator.collectives.schedule import (
    ADDS,
    AGGREGATED_EVENTS_PER_TRANSFER,
    DELAY,
    LONG_RUN_HINT,
    PLAIN_OPS,
    PULSE,
    Completion,
    Transfer,
    _Pending,
)
from simulator.engine.channel import Channel
from simulator.engine.network import Network
from simulator.engine.simpy_door import clock
from simulator.engine.timers import call_after
from simulator.engine.watch import TICK, expect_events
from simulator.units import MAX_BYTES, check_bytes

Then = Callable[[Any], Any]
_deps = operator.itemgetter(5)  #: a transfer's ``deps``
_PULSE_MASK = PULSE - 1


def deliver(net: Network, src: Any, dst: Any, nbytes: float, label: str, then: Then, arg: Any) -> None:
    """Send ``nbytes`` from chip ``src`` to chip ``dst`` (one route, one piece) and call ``then(arg)`` on arrival
    (`Network.message`, without its event)."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, (int, float)) or not 0 <= nbytes <= MAX_BYTES:
        check_bytes(nbytes, name="message nbytes")  # raises, as `Network.message` does
    if src == dst or nbytes == 0:
        call_after(net.env, 0.0, then, arg)
        return
    links, kinds = plain_route(net, src, dst)
    if links is None:
        net.message(src, dst, nbytes, label).callbacks.append(lambda _e: then(arg))
        return
    if net.trace is not None:
        share = nbytes / 1  # what `Network.message` counts: a share per route, times its hops of each kind
        for kind, count in kinds:
            net.trace.count(kind, share * count)
    if len(links) == 1:
        links[0].send(nbytes, label, "send", then, arg)
    else:
        _CutThrough(net, links, nbytes, label, then, arg).start_hop(0)


def plain_route(net: Network, src: Any, dst: Any) -> tuple[list[Channel] | None, list[tuple[str, int]]]:
    """(the links of the one route from chip ``src`` to chip ``dst`` when every one ``aggregates``, or None where
    `deliver` takes `Network.message`; the interfaces it crosses, with their hop counts), cached per pair."""
    route = net._plain_routes.get((src, dst))
    if route is None:
        hops, kinds = net._route_links(src, dst, False)
        links = hops[0]
        # several hops: cut-through, not over jittered links (`Network.message` sends their first hop from a
        # process, later in the instant: the order the links draw their jitter factors in would change)
        plain = len(hops) == 1 and all(c.aggregates for c in links) and (len(links) == 1 or (
            net.switching == "cut_through" and all(getattr(c, "noise", None) is None for c in links)))
        route = net._plain_routes[(src, dst)] = (hops[0] if plain else None, kinds)
    return route


def cut_through(net: Network, links: Sequence[Channel], nbytes: float, label: str, then: Then, arg: Any) -> None:
    """Send ``nbytes`` (more than zero) cut-through over the plain ``links`` of a route (what `deliver` does past
    its checks and byte counts) and call ``then(arg)`` on arrival."""
    _CutThrough(net, links, nbytes, label, then, arg).start_hop(0)


def deliver_hop(net: Network, u: Any, v: Any, nbytes: float, label: str, then: Then, arg: Any) -> None:
    """Send ``nbytes`` over the one link ``u -> v`` (either end may be a switch) and call ``then(arg)`` when the
    last byte has arrived (`Network.hop`, without its event)."""
    channel = net.link(u, v)
    if not channel.aggregates:
        net.hop(u, v, nbytes, label).callbacks.append(lambda _e: then(arg))
        return
    if net.trace is not None:
        net.trace.count(channel.kind, nbytes)
    channel.send(nbytes, label, "send", then, arg)


class _CutThrough:
    """One multi-hop cut-through message (`Network._cut_through`, step by step): hop k starts its transfer
    when the head has crossed the hops before it (their latencies, one timer each); the message arrives when
    every hop has finished and, hop by hop, no sooner than the previous hop's end plus this hop's latency."""

    __slots__ = ("env", "links", "nbytes", "label", "then", "arg", "ends", "left")

    def __init__(self, net: Network, links: Sequence[Channel], nbytes: float, label: str, then: Then, arg: Any) -> None:
        self.env, self.links, self.nbytes, self.label, self.then, self.arg = net.env, links, nbytes, label, then, arg
        self.ends = [0.0] * len(links)
        self.left = len(links)

    def start_hop(self, k: int) -> None:
        links = self.links
        link = links[k]
        link.send(self.nbytes, self.label, "send", self.hop_done, k)
        if k + 1 < len(links):
            call_after(self.env, link.latency_s, self.start_hop, k + 1)

    def hop_done(self, k: int) -> None:
        env = self.env
        now = self.ends[k] = clock(env)
        self.left -= 1
        if self.left:
            return
        done = 0.0
        for link, end in zip(self.links, self.ends):  # noqa: B905  (one end per link, by construction)
            late = done + link.latency_s
            done = end if end > late else late  # max(end, late): the same float
        if done > now:
            call_after(env, done - env.now, self.then, self.arg)
        else:
            self.then(self.arg)


def execute_aggregated(net: Network, transfers: list[Transfer], buffers: dict[Any, dict[Any, np.ndarray]] | None,
                        label: str) -> Completion:
    """`simulator.collectives.schedule.execute` with flow-level aggregation: `deliver` in place of
    `Network.message` (see `execute`; the executor's `FastPath.execute_aggregated`)."""
    done = Completion(net.env)
    expect_events(AGGREGATED_EVENTS_PER_TRANSFER * (len(transfers) % TICK), LONG_RUN_HINT)  # the rest `add` did not
    if not transfers:
        done.succeed(net.env.now)
        return done
    run = Aggregated(net, transfers, buffers, label, done)
    for t in transfers:
        if not t.deps:
            run.start(t)
    return done


Shape = tuple[list[int], list[list[int]], list[Transfer]]  #: `schedule_shape`


def schedule_shape(transfers: list[Transfer]) -> Shape:
    """What an `Aggregated` run of ``transfers`` starts from: each transfer's count of dependencies, the ids of
    the transfers that wait for each, and the transfers with none (in schedule order)."""
    waiting = list(map(len, map(_deps, transfers)))
    dependents: list[list[int]] = [[] for _ in transfers]
    for tid, _, _, _, _, deps, _ in transfers:
        for d in deps:
            dependents[d].append(tid)
    return waiting, dependents, [t for t in transfers if not t.deps]


class Aggregated:
    """One aggregated `execute` under way. An object, not closures that call each other: those would make a
    reference cycle holding the whole schedule until the garbage collector's next full pass."""

    __slots__ = ("net", "transfers", "buffers", "label", "done", "waiting", "remaining", "dependents", "payloads",
                 "single", "by_interface", "chips", "pulse")

    #: `arrive` starts a dependent that crosses one plain link (timing only, untraced) itself, as `start` would
    #: (one call fewer a transfer). False: always by `start`.
    lean = True

    def __init__(self, net: Network, transfers: list[Transfer], buffers: dict[Any, dict[Any, np.ndarray]] | None,
                 label: str, done: Completion, shape: Shape | None = None) -> None:
        """``shape``: `schedule_shape` of ``transfers``, where the caller keeps it between runs (a quotient's)."""
        self.net, self.transfers, self.buffers, self.label, self.done = net, transfers, buffers, label, done
        waiting, self.dependents, _ = schedule_shape(transfers) if shape is None else shape
        self.waiting = waiting.copy()  # (counted down by this run; the dependents are only read)
        self.remaining = [len(transfers)]
        done.pending = _Pending(transfers, self.waiting, self.remaining, label)
        self.payloads: dict[int, dict[Any, np.ndarray]] = {}
        self.single: dict[tuple[Any, Any], Any] = {}  # (src, dst) -> its route's one plain link, or False
        self.by_interface = net.trace.bytes_by_interface if net.trace is not None else None  # what Trace.count adds to
        self.chips = _chip_set(net)
        self.pulse = getattr(net.env, "podsim_pulse", None)  # `System.pulse`: progress and the wall-clock limit

    def start(self, t: Transfer) -> None:
        if self.buffers is not None:
            self.payloads[t.id] = {k: self.buffers[t.src][k].copy() for k in t.keys}
        src, dst, chips = t.src, t.dst, self.chips
        if t.op not in PLAIN_OPS:  # a split hop (`simulator.collectives.schedule.DELAY`): its bytes, or its latency
            if t.op == DELAY:
                call_after(self.net.env, self.net.route_latency_s(src, dst), self.arrive, t.id)
            else:
                self.net.send_bytes(src, dst, t.nbytes, self.label, self.arrive, t.id)
            return
        link = self.single.get((src, dst))
        if link is None:
            link = self.single[(src, dst)] = _single_link(self.net, src, dst, chips)
        nbytes = t.nbytes
        if link and nbytes > 0:  # what `deliver` does on a route of plain links
            if type(link) is tuple:  # several, cut-through
                links, kinds = link
                if self.by_interface is not None:
                    for kind, count in kinds:
                        self.by_interface[kind] += nbytes * count
                cut_through(self.net, links, nbytes, self.label, self.arrive, t.id)
                return
            if self.by_interface is not None:
                self.by_interface[link.kind] += nbytes
            link.send(nbytes, self.label, "send", self.arrive, t.id)
        elif src == dst or (src in chips and dst in chips):
            deliver(self.net, src, dst, t.nbytes, self.label, self.arrive, t.id)
        else:  # a chip and its switch (in-switch reduction, NVLS)
            deliver_hop(self.net, src, dst, t.nbytes, self.label, self.arrive, t.id)

    def arrive(self, tid: int) -> None:
        transfers = self.transfers
        if self.buffers is not None:
            t = transfers[tid]
            store = self.buffers[t.dst]
            for k, value in self.payloads.pop(tid).items():
                store[k] = store[k] + value if t.op in ADDS and k in store else value  # a switch starts empty
        waiting = self.waiting
        for d in self.dependents[tid]:
            waiting[d] -= 1
            if waiting[d] == 0:
                t = transfers[d]
                link = self.single.get((t[1], t[2])) if self.lean else None
                nbytes = t[6]
                if link and nbytes > 0 and type(link) is not tuple and self.buffers is None \
                        and t[4] in PLAIN_OPS:  # `start`, inline
                    if self.by_interface is not None:
                        self.by_interface[link.kind] += nbytes
                    link.send(nbytes, self.label, "send", self.arrive, t[0])
                else:
                    self.start(t)
        remaining = self.remaining
        left = remaining[0] = remaining[0] - 1
        if left & _PULSE_MASK == 0 and self.pulse is not None:  # every `PULSE` arrivals (counted down from the end)
            first = len(transfers) & _PULSE_MASK if left + PULSE > len(transfers) else 0  # the first report's
            self.pulse(AGGREGATED_EVENTS_PER_TRANSFER * (first or PULSE))
        if left == 0:
            self.done.succeed(self.net.env.now)


#: the last network's chips as a set (`_chip_set`): (its ``chips`` list, which a network never changes, the set)
_CHIPS: list[Any] = [None, frozenset()]


def _chip_set(net: Network) -> frozenset[Any]:
    """``net``'s chips as a set, made once for the network (not once a collective: 8,192 chips a start on a
    step's 16,000 collectives)."""
    if _CHIPS[0] is not net.chips:
        _CHIPS[:] = [net.chips, frozenset(net.chips)]
    return _CHIPS[1]


def _single_link(net: Network, src: Any, dst: Any, chips: set[Any] | frozenset[Any]) -> Any:
    """The one plain `Channel` a transfer from ``src`` to ``dst`` crosses, or (the plain channels of its one
    cut-through route, the interfaces they cross: `plain_route`), or False (none, or
    not plain: `deliver` decides)."""
    if src == dst:
        return False
    if src in chips and dst in chips:
        links, kinds = plain_route(net, src, dst)
        if links is not None and len(links) > 1:
            return links, kinds
        link = links[0] if links is not None else None
    else:
        link = net.link(src, dst)
    return link if link is not None and link.aggregates else False
