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

from simulator.engine.channel import ListChannel, _Flow, _remaining
from simulator.engine.timers import _new, _timeout, call_after, call_at
from simulator.engine.trace import Trace

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
        self.pauses = _windows(pauses)
        self._breaks = sorted({t for w in self.pauses for t in w} | ({fail_at} if fail_at < math.inf else set()))

    def _unadmit(self) -> bool:
        """`Channel._unadmit` for the list form."""
        now = self.env._now
        if not self._flows or self._last_update <= now:
            return False
        at, flow = self._last_update, self._flows[0]
        self._flows = []
        self._generation += 1  # its end timer is void
        self._last_update = now
        call_at(self.env, at, self._admit, flow)
        return True

    #: `send` without events of its own (flow-level aggregation, `simulator.engine.delivery`): the flow's latency
    #: timer is a shared `call_after` and it calls back on arrival; it draws its jitter factor when sent, as
    #: `transfer` does. False: `send` is `transfer` with a callback, and `simulator.engine.delivery` takes
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
        flow.nbytes, flow.remaining = nbytes, nbytes * self.noise() if self.noise is not None else nbytes
        flow.event, flow.start, flow.label, flow.kind, flow.then, flow.arg = None, 0.0, label, kind, then, arg
        latency, env = self.latency_s, self.env
        if latency <= 0:
            self._admit(flow)
        elif self._flows or self._arrive_by >= env._now or self._breaks or not self.admit_ahead:
            self._arrive_by = env._now + latency
            call_after(env, latency, self._admit, flow)
        else:  # `Channel.admit_ahead`: what the latency timer and `_admit` would do, ahead (the same floats)
            flow.start = self._last_update = self._arrive_by = at = env._now + latency
            self._flows = [flow]
            self._generation += 1
            flow.generation = self._generation
            call_at(env, at + flow.remaining / self._bandwidth, self._lone_done, flow)

    def transfer(self, nbytes: float, label: str = "", kind: str = "transfer") -> simpy.Event:
        if nbytes <= 0:
            return self.env.event().succeed(self.env.now)
        flow = _Flow(nbytes, Lost(self.env, f"{self.name} ({label or kind})"), label, kind)
        if self.noise is not None:
            flow.remaining = nbytes * self.noise()
        if self.latency_s > 0:
            self._arrive_by = self.env._now + self.latency_s
            self.env.timeout(self.latency_s).callbacks.append(lambda _e: self._admit(flow))
        else:
            self._admit(flow)
        return flow.event

    def _admit(self, flow: _Flow) -> None:
        if self._flows:
            self._unadmit()  # (only where the latency changed while a flow admitted ahead was on its way in)
        if not self._flows and not self._breaks:  # idle, at a constant rate: `_advance` and `_schedule`, one flow
            flow.start = self._last_update = self.env._now
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
        now = self.env._now
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
        now, generation = self.env._now, self._generation
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
            _timeout(self.env, delay).callbacks.append(lambda _e: self._on_timer(generation, first))

    def _on_change(self, generation: int) -> None:
        if generation == self._generation:
            self._advance()
            self._schedule()

    def _lose(self, flow: _Flow) -> None:
        if self.on_lost is not None:
            self.on_lost(self.name, flow.label or flow.kind)
