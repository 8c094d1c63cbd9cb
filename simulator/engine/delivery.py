"""Messages that call a function on arrival instead of firing an event: flow-level aggregation.

`deliver` and `deliver_hop` do what `Network.message` and `Network.hop` do -- the same routes, the same
channels shared fairly, the same cut-through timing, the same spans and byte counts -- but on plain
links whose class ``aggregates`` (`Channel`; `simulator.engine.fault_channel.FaultChannel`, the links of faults and
jitter, with its own `send`) they send with ``send``, so the timers of the messages that start at one instant
with one delay (a whole step of a collective on idle links) share one SimPy event (`call_after`), and no
event or process is built per message. Times are those of `Network.message` (the same float
operations); only the order of events within one instant can differ. Links that do not aggregate
(`simulator.engine.channel.ListChannel`, or a class whose ``aggregates`` is set False) and store-and-forward
routes take `Network.message`.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from simulator.engine.channel import Channel
from simulator.engine.network import Network
from simulator.engine.simpy_door import clock
from simulator.engine.timers import call_after
from simulator.units import MAX_BYTES, check_bytes

Then = Callable[[Any], Any]


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


def cut_through(net: Network, links: list[Channel], nbytes: float, label: str, then: Then, arg: Any) -> None:
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

    def __init__(self, net: Network, links: list[Channel], nbytes: float, label: str, then: Then, arg: Any) -> None:
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
