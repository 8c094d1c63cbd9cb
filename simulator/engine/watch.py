"""Watching simulations from outside: an event budget, progress and Ctrl-C for every `System` a command runs.

A front end opens ``with watching(RunWatch(...))`` around a command. Every `System.run` inside it, however
many systems a scenario builds, then reports to the watch every `TICK` events: the watch counts the
command's events, calls its ``on_progress`` (a progress bar), and raises `RunawayError` once they pass
its ``max_events`` budget. Ctrl-C during a run becomes `SimulationInterrupted`, whose message says what
was simulated so far. Without a watch, runs behave exactly as before.
"""
from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Callable, Iterator
from typing import Any

from simulator.errors import RunawayError
from simulator.units import format_quantity

#: Events between two reports to the watch (a power of two: the run loop tests it with a mask).
TICK = 0x4000
#: Estimated events above which a command says, before running, that it will take a while (about ten
#: seconds at the 1e5 events/s a laptop reaches; benchmarks/ measures the real rate).
LONG_RUN_EVENTS = 1_000_000
#: Events a simulated second of real time usually covers, for the rough duration in that warning.
EVENTS_PER_S = 100_000


class RunWatch:
    """One command's view of its simulations: events so far (all systems together), the latest simulated
    time, the event count estimated before the run (``estimate``, or None), an optional event budget
    and a progress callback ``on_progress(watch)``, called every `TICK` events."""

    def __init__(self, *, max_events: int | None = None, estimate: int | None = None,
                 on_progress: Callable[[RunWatch], None] | None = None,
                 on_long_run: Callable[[RunWatch, str], None] | None = None) -> None:
        self.max_events, self.estimate = max_events, estimate
        self.on_progress, self.on_long_run = on_progress, on_long_run
        self.events = 0
        self.now_s = 0.0
        self.started = time.monotonic()
        self.warned = False

    def expect(self, events: int, hint: str) -> None:
        """Work about to be scheduled will take about ``events`` more events: add them to the estimate;
        past `LONG_RUN_EVENTS` call ``on_long_run`` once (with ``hint``: how to make the run shorter),
        and past the budget refuse with `RunawayError` before anything of it runs."""
        self.estimate = (self.estimate or 0) + events
        if self.max_events is not None and self.estimate > self.max_events:
            raise RunawayError(f"this command would simulate about {self.estimate:,} events, more than its budget "
                               f"of {self.max_events:,}; {hint}")
        if self.estimate > LONG_RUN_EVENTS and not self.warned and self.on_long_run is not None:
            self.warned = True
            self.on_long_run(self, hint)

    def tick(self, now_s: float, events: int) -> None:
        """``events`` more events were processed; the run is at ``now_s`` seconds of simulated time."""
        self.events += events
        self.now_s = now_s
        if self.max_events is not None and self.events > self.max_events:
            raise RunawayError(f"this command passed its budget of {self.max_events:,} simulated events at "
                               f"t={now_s:.6g} s; use a smaller problem (fewer blocks, chunks or chips, "
                               "or --mode reduced for collectives)")
        if self.on_progress is not None:
            self.on_progress(self)

    def so_far(self, metrics: dict[str, Any] | None = None) -> str:
        """What has been simulated: events (against the estimate), simulated time, and from ``metrics``
        (`simulator.engine.trace.compute_metrics`) the bytes each interface moved."""
        of = f" of about {self.estimate:,} estimated" if self.estimate else ""
        text = f"{self.events:,} events{of}, {format_quantity(self.now_s, 's')} of simulated time"
        moved = (metrics or {}).get("bytes") or {}
        if moved:
            text += "; moved " + ", ".join(f"{format_quantity(v, 'B')} over {k}" for k, v in list(moved.items())[:4])
        return text


_CURRENT: contextvars.ContextVar[RunWatch | None] = contextvars.ContextVar("podsim_run_watch", default=None)


def current_watch() -> RunWatch | None:
    """The watch of the command running now, or None."""
    return _CURRENT.get()


def expect_events(events: int, hint: str) -> None:
    """Tell the command's watch (if any) that about ``events`` events are being scheduled; ``hint`` says
    how to make such a run shorter. Callers are the places that queue work: pipelines, collectives."""
    watch = _CURRENT.get()
    if watch is not None:
        watch.expect(int(events), hint)


@contextlib.contextmanager
def watching(watch: RunWatch) -> Iterator[RunWatch]:
    """Report every simulation run inside this block to ``watch``."""
    token = _CURRENT.set(watch)
    try:
        yield watch
    finally:
        _CURRENT.reset(token)
