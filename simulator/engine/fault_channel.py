"""Jitter factors (`Noise`) and the link / HBM channel of a disturbed chip or link (`FaultChannel`).

`simulator.engine.disturb.FaultModel` builds them; see its module for the timing rules. A `FaultChannel` keeps the
list form of `simulator.engine.channel.ListChannel` (its rate may vary with time), and has a `send` of its own
(flow-level aggregation: no event per flow) so that jittered links take the aggregated path too.
"""
from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import simpy

from simulator.engine.channel import _DONE_FRACTION, ListChannel, _Flow, _remaining
from simulator.engine.simpy_door import clock, timeout
from simulator.engine.timers import _new, _set_timer, call_after, call_at
from simulator.engine.trace import Span, Trace, new_span

Window = tuple[float, float]
OnLost = Callable[[str, str], None]


class Noise:
    """Jitter factors of mean 1 and coefficient of variation ``cv`` from ``rng``, drawn in blocks.

    lognormal: ``exp(N(mu, s))`` with ``s**2 = ln(1 + cv**2)``, ``mu = -s**2 / 2``; gamma: shape ``1 / cv**2``,
    scale ``cv**2``; uniform: ``1 +- sqrt(3) cv``.
    """

    BLOCK = 4096

    def __init__(self, rng: np.random.Generator, distribution: str, cv: float) -> None:
        self.rng, self.distribution, self.cv = rng, distribution, cv
        self._buffer: list[float] = []
        self._next = 0

    def draw(self, n: int) -> np.ndarray:
        """``n`` factors."""
        cv = self.cv
        if self.distribution == "lognormal":
            s = math.sqrt(math.log1p(cv * cv))
            return self.rng.lognormal(-s * s / 2, s, n)
        if self.distribution == "gamma":
            return self.rng.gamma(1 / (cv * cv), cv * cv, n)
        half = math.sqrt(3) * cv
        return self.rng.uniform(1 - half, 1 + half, n)

    def __call__(self) -> float:
        if self._next == len(self._buffer):
            self._buffer, self._next = self.draw(self.BLOCK).tolist(), 0
        self._next += 1
        return self._buffer[self._next - 1]


class Lost(simpy.Event):
    """An event that never fires: the operation it stands for died with a failed chip."""

    def __init__(self, env: simpy.Environment, what: str) -> None:
        super().__init__(env)
        self.what = what

    @property
    def podsim_waits_for(self) -> str:
        return self.what


def _windows(pauses: Sequence[Window]) -> list[Window]:
    """Pause windows sorted and merged where they overlap."""
    out: list[Window] = []
    for a, b in sorted(pauses):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        elif b > a:
            out.append((a, b))
    return out


class FaultChannel(ListChannel):
    """A `Channel` that may be jittered (``noise``), paused in ``pauses`` windows and failed at ``fail_at``.

    Its rate is the bandwidth, or zero inside a pause and from the failure on; a timer is set at each rate
    change while transfers are in flight, so between events the rate is constant and the fluid model holds.
    """

    def __init__(self, env: simpy.Environment, name: str, bandwidth_bytes_per_s: float, latency_s: float = 0.0, *,
                 chip: int | str = 0, trace: Trace | None = None, noise: Noise | None = None,
                 pauses: Sequence[Window] = (), fail_at: float = math.inf, on_lost: OnLost | None = None) -> None:
        super().__init__(env, name, bandwidth_bytes_per_s, latency_s, chip=chip, trace=trace)
        self.noise, self.fail_at, self.on_lost = noise, fail_at, on_lost
        self.pauses = _windows(pauses) if pauses else []
        self._breaks = sorted({t for w in self.pauses for t in w} | ({fail_at} if fail_at < math.inf else set())) \
            if self.pauses or fail_at < math.inf else []

    def _unadmit(self) -> bool:
        """`Channel._unadmit` for the list form."""
        now = clock(self.env)
        if not self._flows or self._last_update <= now:
            return False
        at, flow = self._last_update, self._flows[0]
        self._flows = []
        self._generation += 1  # its end timer is void
        self._last_update = now
        call_at(self.env, at, self._admit, flow)
        return True

    #: `send` without events of its own (flow-level aggregation, `simulator.acceleration.aggregate`): the flow's
    #: latency timer is a shared `call_after` and it calls back on arrival; it draws its jitter factor when sent, as
    #: `transfer` does. False: `send` is `transfer` with a callback, and `simulator.acceleration.aggregate` takes
    #: `Network.message` over these links (the plain path).
    aggregates = True

    def send(self, nbytes: float, label: str, kind: str, then: Callable[[Any], Any], arg: Any) -> None:
        """`transfer` without an event: call ``then(arg)`` when the last byte has arrived (never, if the channel
        fails first). Shares the channel with transfers exactly as a transfer does.

        On an idle channel of constant rate (jitter alone) with no flow on its way in, the flow is admitted now
        as of its arrival (``now + latency``: every flow sent later arrives no sooner, the latency being the
        channel's) and its end timed from there -- one timer, not two, at the same float times."""
        if not self.aggregates:
            self.transfer(nbytes, label, kind).callbacks.append(lambda _e: then(arg))
            return
        if nbytes <= 0:
            call_after(self.env, 0.0, then, arg)
            return
        flow = _new(_Flow)
        noise = self.noise
        if noise is None:
            flow.nbytes = flow.remaining = nbytes
        else:  # `Noise.__call__`, inline
            i = noise._next
            if i == len(noise._buffer):
                noise._buffer, i = noise.draw(noise.BLOCK).tolist(), 0
            noise._next = i + 1
            flow.nbytes, flow.remaining = nbytes, nbytes * noise._buffer[i]
        flow.event, flow.start, flow.label, flow.kind, flow.then, flow.arg = None, 0.0, label, kind, then, arg
        latency, env = self.latency_s, self.env
        if latency <= 0:
            self._admit(flow)
            return
        now = clock(env)
        if self._flows or self._arrive_by >= now or self._breaks or not self.admit_ahead:
            at = self._arrive_by = now + latency  # `call_after(env, latency, self._admit, flow)`, inline below
            fn: Callable[[Any], Any] = self._admit
        else:  # `Channel.admit_ahead`: what the latency timer and `_admit` would do, ahead (the same floats)
            flow.start = self._last_update = self._arrive_by = start = now + latency
            self._flows = [flow]
            self._generation += 1
            flow.generation = self._generation
            at, fn = start + flow.remaining / self._bandwidth, self._lone_done
        try:  # `call_at(env, at, fn, flow)` (``at`` is later than now)
            pending = env._podsim_calls  # type: ignore[attr-defined]  # podsim's, kept on the env
        except AttributeError:
            pending = env._podsim_calls = {}  # type: ignore[attr-defined]
        calls = pending.get(at)
        if calls is not None:
            calls.append((fn, flow))
        else:
            _set_timer(env, pending, at, [(fn, flow)])

    def transfer(self, nbytes: float, label: str = "", kind: str = "transfer") -> simpy.Event:
        if nbytes <= 0:
            return self.env.event().succeed(self.env.now)
        event = Lost(self.env, f"{self.name} ({label or kind})")
        flow = _Flow(nbytes, event, label, kind)
        if self.noise is not None:
            flow.remaining = nbytes * self.noise()
        if self.latency_s > 0:
            self._arrive_by = clock(self.env) + self.latency_s
            self.env.timeout(self.latency_s).callbacks.append(lambda _e: self._admit(flow))
        else:
            self._admit(flow)
        return event

    #: Jitter alone (a constant rate: no pause, no failure): a flow joining a busy channel and the end timers
    #: do what `ListChannel`'s `_advance`, `_admit`, `_schedule` and `_on_timer` do, in one call each (the same
    #: float operations in the same order: the same times). False: those methods, call by call.
    lean = True

    def _admit(self, flow: _Flow) -> None:
        flows = self._flows
        if flows and self._last_update > clock(self.env):
            self._unadmit()  # (only where the latency changed while a flow admitted ahead was on its way in)
            flows = self._flows
        if flows and not self._breaks and self.lean:  # busy, at a constant rate: `_advance`, `_admit`, `_schedule`
            now = clock(self.env)
            last = self._last_update
            if now > last:
                moved = (now - last) * self._bandwidth / len(flows)
                for other in flows:
                    other.remaining -= moved
            self._last_update = flow.start = now
            flows.append(flow)
            self._generation += 1
            if len(flows) == 2:  # (`min` by bytes left: the first of equals)
                first = flows[0] if flows[0].remaining <= flow.remaining else flow
            else:
                first = min(flows, key=_remaining)
            delay = max(0.0, first.remaining) * len(flows) / self._bandwidth
            if first.event is None:
                call_after(self.env, delay, self._timer_call, (self._generation, first))
            else:
                self._time(delay, self._generation, first)
            return
        if not flows and not self._breaks:  # idle, at a constant rate: `_advance` and `_schedule`, one flow
            flow.start = self._last_update = clock(self.env)
            self._flows = [flow]
            self._generation += 1
            if flow.event is None:  # a `send` flow: `Channel._lone_done` ends it, unless flows join it first
                flow.generation = self._generation
                call_after(self.env, flow.remaining / self._bandwidth, self._lone_done, flow)
            else:
                self._time(flow.remaining / self._bandwidth, self._generation, flow)
            return
        if self.env.now >= self.fail_at:
            self._lose(flow)
            return
        super()._admit(flow)

    def rate(self, t: float) -> float:
        """Bytes per second the channel moves from time ``t`` on (until the next rate change)."""
        if t >= self.fail_at:
            return 0.0
        i = bisect.bisect_right(self.pauses, (t, math.inf)) - 1
        return 0.0 if i >= 0 and self.pauses[i][0] <= t < self.pauses[i][1] else self._bandwidth

    def _advance(self) -> None:
        now = clock(self.env)
        if self._flows and now > self._last_update:
            rate = self.rate(self._last_update) if self._breaks else self._bandwidth
            moved = (now - self._last_update) * rate / len(self._flows)
            for flow in self._flows:
                flow.remaining -= moved
        self._last_update = now

    def _schedule(self) -> None:
        self._generation += 1
        if not self._flows:
            return
        now, generation = clock(self.env), self._generation
        if not self._breaks:  # a constant rate (jitter alone)
            first = min(self._flows, key=_remaining)
            self._time(max(0.0, first.remaining) * len(self._flows) / self._bandwidth, generation, first)
            return
        if now >= self.fail_at:
            flows, self._flows = self._flows, []
            for flow in flows:
                self._lose(flow)
            return
        rate = self.rate(now)
        i = bisect.bisect_right(self._breaks, now)
        change = self._breaks[i] if i < len(self._breaks) else math.inf
        if rate > 0:
            first = min(self._flows, key=_remaining)
            delay = max(0.0, first.remaining) * len(self._flows) / rate
            if now + delay <= change:
                self._time(delay, generation, first)
                return
        self.env.timeout(change - now).callbacks.append(lambda _e: self._on_change(generation))

    def _time(self, delay: float, generation: int, first: _Flow) -> None:
        """Set the timer of ``first``'s end, ``delay`` s from now: a shared `call_after` for a `send` flow."""
        if first.event is None:
            call_after(self.env, delay, self._timer_call, (generation, first))
        else:
            timeout(self.env, delay).callbacks.append(lambda _e: self._timer_call((generation, first)))

    def _timer_call(self, arg: tuple[int, _Flow]) -> None:
        """The end timer of a `send` flow (``arg``: the generation it was set in, the flow that ends first): at a
        constant rate (`lean`), `ListChannel._on_timer` with its `_advance`, `_schedule` and a `send` flow's
        `_finish` inline."""
        generation, first = arg
        if generation != self._generation:
            return  # the set of flows changed since this timer was set
        if self._breaks or not self.lean:
            ListChannel._on_timer(self, generation, first)
            return
        flows, now = self._flows, clock(self.env)
        if len(flows) == 1:  # the only flow (``first``) is done, the channel idles
            self._last_update = now
            self._flows = []
            self._generation += 1
            self._end(first, now, self.complete_inline)
            return
        last = self._last_update
        if now > last:
            moved = (now - last) * self._bandwidth / len(flows)
            for other in flows:
                other.remaining -= moved
        self._last_update = now
        first.remaining = 0.0
        done: list[_Flow] = []
        rest: list[_Flow] = []
        for other in flows:
            (done if other.remaining <= _DONE_FRACTION * other.nbytes else rest).append(other)
        self._flows = rest
        self._generation += 1
        if rest:
            head = min(rest, key=_remaining)
            self._time(max(0.0, head.remaining) * len(rest) / self._bandwidth, self._generation, head)
        for other in done:
            self._end(other, now, False)

    def _on_timer(self, generation: int, first: _Flow) -> None:
        if self._breaks or not self.lean:
            ListChannel._on_timer(self, generation, first)
        else:
            self._timer_call((generation, first))

    def _end(self, flow: _Flow, now: float, inline: bool) -> None:
        """`Channel._finish`, inline for a `send` flow (a `transfer`'s event: completed there if ``inline``)."""
        if flow.event is not None:
            self._finish(flow, inline)
            return
        self.bytes_carried += flow.nbytes
        trace = self.trace
        if trace is not None and trace.enabled:
            trace.spans.append(new_span(Span, (self.chip, self.name, flow.label, flow.start, now, flow.kind,
                                               flow.nbytes, 0.0)))
        flow.then(flow.arg)

    def _on_change(self, generation: int) -> None:
        if generation == self._generation:
            self._advance()
            self._schedule()

    def _lose(self, flow: _Flow) -> None:
        if self.on_lost is not None:
            self.on_lost(self.name, flow.label or flow.kind)
