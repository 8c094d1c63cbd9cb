"""Bandwidth-limited paths (`Channel`) and one-op-at-a-time compute units (`SerialUnit`).

Timing model of a `Channel`: a transfer first waits ``latency_s`` (a wire / pipeline delay that does
not occupy the channel), then joins the channel. Sharing policy: fair sharing (processor sharing) --
every transfer in flight progresses at ``bandwidth / n`` when ``n`` are in flight, so two equal
transfers started together both finish after ``2 * bytes / bandwidth``, and a small transfer is not
stuck behind a large one. This is how concurrent DMA streams and flows on a link interleave at
fine grain; a lone transfer takes exactly ``latency + bytes / bandwidth``.

A `SerialUnit` (MXU, VPU) runs one operation at a time, first come first served.

Both return plain SimPy events and schedule one timeout per state change, with no process per
operation, so long pipelines stay cheap. `Channel.send` is `Channel.transfer` without an event: it calls
a function on arrival, and the timers of the flows that start at one instant with one delay share one
SimPy event (`call_after`): flow-level aggregation for the many equal messages of a collective's step; a
flow sent on an idle channel is admitted ahead of its arrival (`Channel.admit_ahead`), one timer instead of two.

Fair sharing costs O(log n) a change with ``n`` flows in flight (a virtual clock): every flow in flight has
received the same bytes since the channel last idled, ``v``, so a flow joining at ``v0`` finishes when ``v``
reaches ``v0 + bytes`` -- a key fixed at arrival, kept in a heap; an arrival or departure only advances ``v`` by
``elapsed * bandwidth / n``. `ListChannel` recomputes every flow's bytes left at each change (O(n)): the form
for a rate that varies with time (`simulator.engine.fault_channel.FaultChannel`).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from heapq import heapify, heappop, heappush
from typing import Any

import simpy
from simpy.events import Event, Timeout

from simulator.engine.simpy_door import clock, fire_now, timeout
from simulator.engine.timers import _new, _set_timer, call_after, call_at
from simulator.engine.trace import Span, Trace, new_span
from simulator.units import positive

#: A flow whose remaining bytes fall below this fraction of its size counts as finished
#: (absorbs float rounding in the fluid model; never used to order events).
_DONE_FRACTION = DONE_FRACTION = 1e-9  #: (public name: `Chip.fold_work` does a channel's float steps)



def _remaining(flow: _Flow) -> float:
    return flow.remaining


def _arrival(entry: tuple[float, int, _Flow]) -> int:
    return entry[1]


class _Flow:
    __slots__ = ("nbytes", "remaining", "event", "start", "label", "kind", "then", "arg", "generation")
    then: Callable[[Any], Any]  #: a `send` flow's callback (set by `Channel.send`), called with ``arg``
    arg: Any
    generation: int  #: the channel's generation when the flow's end timer was set

    def __init__(self, nbytes: float, event: simpy.Event | None, label: str, kind: str) -> None:
        self.nbytes = nbytes
        self.remaining = nbytes
        self.event = event  #: None: a `Channel.send` flow, which calls ``then(arg)`` on arrival instead
        self.start = 0.0
        self.label = label
        self.kind = kind


class Channel:
    """A bandwidth-limited path (an HBM port, one direction of a link) with fair sharing.

    Parameters
    ----------
    env : simpy.Environment
    name : str
        Unit name in the trace (``hbm``, ``link 0->1``).
    bandwidth_bytes_per_s : float
        Capacity shared by all transfers in flight.
    latency_s : float
        Delay before a transfer starts moving bytes; does not occupy the channel.
    """

    #: Complete a lone flow's event inside its timer's callback instead of scheduling it (see `_finish`):
    #: the same callbacks in the same order, one event fewer. False: always schedule (the plain path).
    complete_inline = True
    #: `send` shares timers and builds no event (`simulator.acceleration.aggregate` sends over the channel); False:
    #: it is `transfer` with a callback, and the aggregated delivery takes `Network.message` instead.
    aggregates = True
    #: `send` on an idle channel with no flow on its way in admits the flow at once, as of its arrival (``now +
    #: latency``: no flow sent later arrives sooner), and sets only its end timer -- one timer where there were
    #: two, the same float times. False: a latency timer, then `_enter` (the aggregated path before this).
    admit_ahead = True
    #: set on a network's links by `simulator.engine.network.Network` (the link's kind and nominal figures)
    kind: str
    nominal_bandwidth_bytes_per_s: float
    nominal_latency_s: float
    #: set only on a quotient's scaled copy of a link (`simulator.acceleration.quotient`): the link it stands for
    #: and how many flows on that link each of its flows is; elsewhere absent (read ``multiplicity`` by getattr)
    real: Channel
    multiplicity: int

    def __init__(self, env: simpy.Environment, name: str, bandwidth_bytes_per_s: float,
                 latency_s: float = 0.0, *, chip: int | str = 0, trace: Trace | None = None) -> None:
        self.env = env
        self.name = name
        bandwidth = bandwidth_bytes_per_s  # (`positive`'s own hot path inline, its message built only on an error:
        if not (bandwidth.__class__ is float and 0.0 < bandwidth < math.inf):  # a step builds tens of thousands)
            bandwidth = positive(bandwidth, name=f"{name} bandwidth_bytes_per_s")
        self._bandwidth = bandwidth  # (the setter's: no flow yet)
        if not (latency_s.__class__ is float and 0.0 <= latency_s < math.inf):
            latency_s = positive(latency_s, name=f"{name} latency_s", allow_zero=True)
        self.latency_s = latency_s
        self.chip = chip
        self.trace = trace
        self.bytes_carried = 0.0
        self._arrive_by = -math.inf  #: the latest end of a latency wait set so far (`admit_ahead`)
        self._flows: list[Any] = []  #: heap of (finish on the virtual clock, arrival number, flow)
        self._last_update = 0.0
        self._generation = 0
        self._v = 0.0  #: bytes every flow in flight has received since the channel last idled (or rebased)
        self._arrivals = 0  #: flows admitted while busy (ties in the heap go to the earlier)
        self._departures = 0  #: flows finished since the clock was last rebased

    @property
    def bandwidth_bytes_per_s(self) -> float:
        """Capacity shared by all transfers in flight (bytes per second)."""
        return self._bandwidth

    @bandwidth_bytes_per_s.setter
    def bandwidth_bytes_per_s(self, value: float) -> None:
        if self.__dict__.get("_flows"):
            self._unadmit()  # a flow admitted ahead of its arrival: it is admitted at the new rate when it arrives
        self._bandwidth = value

    @property
    def busy(self) -> bool:
        """Whether any transfer is moving bytes on the channel now (latency-only waits do not count)."""
        return bool(self._flows) and self._last_update <= clock(self.env)

    def _unadmit(self) -> bool:
        """Put back on its way in the flow admitted ahead of its arrival (`admit_ahead`), if there is one (the
        channel then idles until it arrives); whether there was. Only where the rate or the latency changed
        before it arrived: a flow that would arrive sooner, or a rate it must start at."""
        now = clock(self.env)
        if not self._flows or self._last_update <= now:
            return False
        at, flow = self._last_update, self._flows[0][2]
        self._flows = []
        self._generation += 1  # its end timer is void
        self._last_update = now
        call_at(self.env, at, self._enter, flow)
        return True

    def transfer(self, nbytes: float, label: str = "", kind: str = "transfer") -> simpy.Event:
        """Move ``nbytes``; the returned event fires (value: the time) when the last byte has arrived.
        """
        env = self.env
        event = Event(env)
        if nbytes <= 0:
            event.succeed(env.now)
            return event
        flow = _Flow(nbytes, event, label, kind)
        if self.latency_s > 0:
            self._arrive_by = clock(env) + self.latency_s
            Timeout(env, self.latency_s).callbacks.append(lambda _e: self._join(flow))
        elif self._flows:
            self._join(flow)
        else:  # an idle channel (the usual DMA): what `_join` does for a lone flow, inlined
            flow.start = self._last_update = clock(env)
            self._flows = [(nbytes, 0, flow)]
            self._v = 0.0
            generation = self._generation = self._generation + 1
            timeout(env, nbytes / self._bandwidth).callbacks.append(lambda _e: self._on_timer(generation, flow))
        return event

    def send(self, nbytes: float, label: str, kind: str, then: Callable[[Any], Any], arg: Any) -> None:
        """`transfer` without an event: call ``then(arg)`` when the last byte has arrived. The flow shares the
        channel exactly as a transfer does; its latency timer and, on an idle channel, its completion timer
        are shared with every other `call_after` of the same instant and delay (one SimPy event for a whole
        step of equal messages on idle links). On a channel idle with no flow on its way in, the flow is
        admitted at once as of its arrival (`admit_ahead`): only its completion timer is set. A subclass sends
        by its own `transfer` (`ListChannel`) or has a `send` of its own (`FaultChannel`)."""
        if type(self) is not Channel:
            self.transfer(nbytes, label, kind).callbacks.append(lambda _e: then(arg))
            return
        flow = _new(_Flow)
        flow.nbytes = flow.remaining = nbytes
        flow.event, flow.start, flow.label, flow.kind, flow.then, flow.arg = None, 0.0, label, kind, then, arg
        if nbytes <= 0:
            call_after(self.env, 0.0, then, arg)
            return
        latency = self.latency_s
        if latency <= 0:
            self._enter(flow)
            return
        env = self.env
        now = clock(env)
        if self._flows or self._arrive_by >= now or not self.admit_ahead:
            at = self._arrive_by = now + latency  # `call_after(env, latency, self._enter, flow)`, inline below
            fn: Callable[[Any], Any] = self._enter
        else:  # `admit_ahead`: what the latency timer and `_enter` would do, ahead (the same floats)
            flow.start = self._last_update = self._arrive_by = start = now + latency
            self._flows = [(nbytes, 0, flow)]
            self._v = 0.0
            generation = self._generation = self._generation + 1
            flow.generation = generation
            at, fn = start + nbytes / self._bandwidth, self._lone_done
        try:  # `call_at(env, at, fn, flow)` inline, as `FaultChannel.send` does (``at`` is later than now)
            pending = env._podsim_calls  # type: ignore[attr-defined]  # podsim's, kept on the env
        except AttributeError:
            pending = env._podsim_calls = {}  # type: ignore[attr-defined]
        calls = pending.get(at)
        if calls is not None:
            calls.append((fn, flow))
        else:
            _set_timer(env, pending, at, [(fn, flow)])

    def send_bytes(self, nbytes: float, label: str, kind: str, then: Callable[[Any], Any], arg: Any) -> None:
        """`send` without the latency: the bytes start moving now and ``then(arg)`` is called when the last has left
        the channel. A pipelined chain pays its hop latency apart, as a pure delay after the bytes
        (`simulator.collectives.schedule.DELAY`), so the next piece can follow as soon as this one has left."""
        latency, self.latency_s = self.latency_s, 0.0  # (read once, synchronously, by every `send` and `transfer`)
        try:
            self.send(nbytes, label, kind, then, arg)
        finally:
            self.latency_s = latency

    def _enter(self, flow: _Flow) -> None:
        """`_join` for a `send` flow: on an idle channel its completion timer is a shared `call_after`."""
        if self._flows and (self._last_update <= clock(self.env) or not self._unadmit()):
            self._admit(flow)
            return
        flow.start = self._last_update = clock(self.env)
        self._flows = [(flow.nbytes, 0, flow)]
        self._v = 0.0
        self._generation += 1
        flow.generation = self._generation
        call_after(self.env, flow.nbytes / self._bandwidth, self._lone_done, flow)

    def _lone_done(self, flow: _Flow) -> None:
        """`_on_timer` and `_finish` for the lone `send` flow ``flow`` (unless flows joined it since)."""
        if flow.generation != self._generation:
            return  # the set of flows changed since this timer was set: `_schedule` timed them anew
        now = self._last_update = clock(self.env)
        self._flows = []
        self._generation += 1
        self.bytes_carried += flow.nbytes
        trace = self.trace
        if trace is not None and trace.enabled:
            trace.spans.append(new_span(Span, (self.chip, self.name, flow.label, flow.start, now,
                                               flow.kind, flow.nbytes, 0.0)))
        flow.then(flow.arg)

    def _join(self, flow: _Flow) -> None:
        """`_admit`, with a fast path for an idle channel (the common case). Only `Channel.transfer` calls it:
        a subclass that overrides `_admit` or `_schedule` overrides `transfer` too (as `FaultChannel` does)."""
        if self._flows and (self._last_update <= clock(self.env) or not self._unadmit()):
            self._admit(flow)
            return
        # what _advance, _admit and _schedule do for a lone flow
        flow.start = self._last_update = self.env.now
        self._flows = [(flow.nbytes, 0, flow)]
        self._v = 0.0
        self._generation += 1
        generation = self._generation
        timer = timeout(self.env, flow.nbytes / self._bandwidth)
        timer.callbacks.append(lambda _e: self._on_timer(generation, flow))

    def _advance(self) -> None:
        now = clock(self.env)
        if self._flows and now > self._last_update:
            self._v += (now - self._last_update) * self._bandwidth / len(self._flows)
        self._last_update = now

    def _admit(self, flow: _Flow) -> None:
        if not self._flows:
            self._v = 0.0
        self._advance()
        flow.start = clock(self.env)
        self._arrivals += 1
        heappush(self._flows, (self._v + flow.remaining, self._arrivals, flow))
        self._schedule()

    def _schedule(self) -> None:
        self._generation += 1
        flows = self._flows
        if not flows:
            return
        generation = self._generation
        finish, _, first = flows[0]
        left = finish - self._v
        delay = (left if left > 0.0 else 0.0) * len(flows) / self._bandwidth
        if first.event is None:  # a `send` flow ends first: share the timer (`call_after`)
            call_after(self.env, delay, self._timer_call, (generation, first))
            return
        self.env.timeout(delay).callbacks.append(lambda _e: self._on_timer(generation, first))

    def _timer_call(self, arg: tuple[int, _Flow]) -> None:
        self._on_timer(*arg)

    def _on_timer(self, generation: int, first: _Flow) -> None:
        if generation != self._generation:
            return  # the set of flows changed since this timer was set
        flows = self._flows
        if len(flows) == 1:  # the common case: the only flow (``first``) is done, the channel idles
            self._last_update = clock(self.env)  # all _advance would do that still matters
            self._flows = []
            self._generation += 1  # all _schedule does with no flows
            self._finish(first, self.complete_inline)
            return
        self._advance()
        v = self._v
        done = [heappop(flows)]  # ``first``: the set of flows is the one its timer was set for
        while flows and flows[0][0] - v <= _DONE_FRACTION * flows[0][2].nbytes:
            done.append(heappop(flows))
        if not flows:
            self._v = 0.0
        else:
            self._departures += len(done)
            if self._departures >= len(flows):  # rebase the clock now and then (amortised O(1)): keys stay small
                self._flows = flows = [(f - v, i, flow) for f, i, flow in flows]
                heapify(flows)
                self._v, self._departures = 0.0, 0
        if len(done) > 1:
            done.sort(key=_arrival)  # finish in the order they joined, as the plain form does
        self._schedule()  # before the finishes: a `send` flow's ``then`` may start a flow here at once
        for entry in done:
            self._finish(entry[2])

    def _finish(self, flow: _Flow, inline: bool = False) -> None:
        now = clock(self.env)
        self.bytes_carried += flow.nbytes
        trace = self.trace
        if trace is not None and trace.enabled:  # (its FLOPs, 0, leave trace.flops_total as it is)
            trace.spans.append(new_span(Span, (self.chip, self.name, flow.label, flow.start, now,
                                               flow.kind, flow.nbytes, 0.0)))
        event = flow.event
        if event is None:  # a `send` flow: its arrival, now
            flow.then(flow.arg)
            return
        if not inline:
            event.succeed(now)
            return
        # Process the event here and now instead of scheduling it (one event fewer per transfer). Exact only
        # from the timer of a lone flow: that timer (priority NORMAL) pops when no URGENT event of this
        # instant is queued, has this one callback, and succeed() here would queue the event as the only
        # URGENT one of the instant, popped next. Its callbacks run in the same order either way.
        fire_now(event, now)


class ListChannel(Channel):
    """A `Channel` that keeps its flows in a list and recomputes each one's bytes left at every change (O(n)
    a change): the form for rates that vary with time (`simulator.engine.fault_channel.FaultChannel`), and the
    plain reference the virtual clock of `Channel` is checked against. Every transfer takes `_admit`."""

    aggregates = False  #: its `send` is `transfer` with a callback (`FaultChannel` has a `send` of its own)

    def transfer(self, nbytes: float, label: str = "", kind: str = "transfer") -> simpy.Event:
        event = Event(self.env)
        if nbytes <= 0:
            return event.succeed(self.env.now)
        flow = _Flow(nbytes, event, label, kind)
        if self.latency_s > 0:
            Timeout(self.env, self.latency_s).callbacks.append(lambda _e: self._admit(flow))
        else:
            self._admit(flow)
        return event

    def _advance(self) -> None:
        now = self.env.now
        if self._flows and now > self._last_update:
            moved = (now - self._last_update) * self._bandwidth / len(self._flows)
            for flow in self._flows:
                flow.remaining -= moved
        self._last_update = now

    def _admit(self, flow: _Flow) -> None:
        self._advance()
        flow.start = self.env.now
        self._flows.append(flow)
        self._schedule()

    def _schedule(self) -> None:
        self._generation += 1
        if not self._flows:
            return
        generation = self._generation
        first = min(self._flows, key=_remaining)
        delay = max(0.0, first.remaining) * len(self._flows) / self._bandwidth
        self.env.timeout(delay).callbacks.append(lambda _e: self._on_timer(generation, first))

    def _on_timer(self, generation: int, first: _Flow) -> None:
        if generation != self._generation:
            return  # the set of flows changed since this timer was set
        if len(self._flows) == 1:  # the only flow (``first``) is done, the channel idles
            self._last_update = self.env.now
            self._flows = []
            self._generation += 1
            self._finish(first, self.complete_inline)
            return
        self._advance()
        first.remaining = 0.0
        done = [f for f in self._flows if f.remaining <= _DONE_FRACTION * f.nbytes]
        self._flows = [f for f in self._flows if f.remaining > _DONE_FRACTION * f.nbytes]
        self._schedule()
        for flow in done:
            self._finish(flow)


class SerialUnit:
    """A compute unit (MXU, VPU) that runs one operation at a time, first come first served.

    An operation of ``duration_s`` requested at ``t`` starts at ``max(t, unit free)`` and holds the
    unit until it ends; its span is recorded then.
    """

    def __init__(self, env: simpy.Environment, name: str, *, chip: int | str = 0,
                 trace: Trace | None = None) -> None:
        self.env = env
        self.name = name
        self.chip = chip
        self.trace = trace
        self._free_at = 0.0

    def run(self, duration_s: float, label: str = "", flops: float = 0.0,
            kind: str = "compute") -> simpy.Event:
        """Occupy the unit for ``duration_s``; the event fires when the operation ends."""
        env = self.env
        now = clock(env)
        start = now if now > self._free_at else self._free_at
        end = start + duration_s
        self._free_at = end
        trace = self.trace
        if trace is not None:  # what Trace.add does, without building a span that is not kept
            trace.flops_total += flops
            if trace.enabled:
                trace.spans.append(new_span(Span, (self.chip, self.name, label, start, end, kind, 0.0, flops)))
        return timeout(env, end - now)
