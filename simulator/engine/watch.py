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
    """One command's view of its simulations: events so far (all systems together), the latest system's
    simulated time (``now_s``) and the simulated time of every run together (``simulated_s``: never goes back,
    though each new `System` starts its clock at 0), the event count estimated before the run (``estimate``,
    or None), counts of the command's own steps (``counts``: Monte Carlo draws, layouts priced, finalists
    simulated), an optional event budget and a progress callback ``on_progress(watch)``, called every `TICK`
    events.

    What it reports holds whatever the callers send: the estimate is never negative (a correction takes back
    at most what was expected) and `total` is never below the events already simulated."""

    def __init__(self, *, max_events: int | None = None, estimate: int | None = None,
                 on_progress: Callable[[RunWatch], None] | None = None,
                 on_long_run: Callable[[RunWatch, str], None] | None = None) -> None:
        self.max_events = max_events
        self.estimate = None if estimate is None else max(0, int(estimate))
        self.on_progress, self.on_long_run = on_progress, on_long_run
        self.events = 0
        self.now_s = 0.0
        self._finished_s = 0.0  # simulated time of every run: the sum of `_clocks` and of the replaced ones
        self._run: int | None = None  # the id of the system at `now_s`
        self._clocks: dict[int | None, float] = {}  # each system's latest time, by id
        self.counts: dict[str, tuple[int, int]] = {}
        self.started = time.monotonic()
        self.warned = False

    @property
    def total(self) -> int | None:
        """Events the command will simulate, as far as is known: the estimate, or the events already simulated
        where they passed it (None before anything was estimated or simulated)."""
        if self.estimate is None:
            return self.events or None
        return max(self.estimate, self.events)

    def clock(self, now_s: float, run: int | None = None) -> None:
        """The clock of the running system (``run``: its id; None: the last one) reads ``now_s``. Each system's
        latest time counts once in `simulated_s`; a clock behind its system's last reading is a new system
        built where a freed one was, whose time adds to the old one's."""
        run = self._run if run is None else run
        last = self._clocks.get(run, 0.0)
        # the sum of every clock, kept as one number: a reading replaces its system's last one, unless it is
        # behind it (a new system at a freed one's id), when the old time stays in the sum
        self._finished_s += now_s - (last if now_s >= last else 0.0)
        self._clocks[run] = now_s
        self._run, self.now_s = run, now_s

    @property
    def simulated_s(self) -> float:
        """Seconds of simulated time of every run so far together (monotone)."""
        return self._finished_s

    def count(self, what: str, done: int, total: int) -> None:
        """``done`` of ``total`` of the command's own steps called ``what`` (e.g. "draws") are finished: shown
        beside the events, checked (0 <= done <= total, never fewer done than reported before)."""
        before = self.counts.get(what, (0, 0))[0]
        if not 0 <= done <= total or done < before:
            raise ValueError(f"count {what!r}: {done} of {total} after {before} (done must grow, within 0..total)")
        self.counts[what] = (done, total)
        if self.on_progress is not None:
            self.on_progress(self)

    def counted(self) -> str:
        """The counts, as text: ``draws 3 of 100, finalists 1 of 3`` ('' when there are none)."""
        return ", ".join(f"{what} {done:,} of {total:,}" for what, (done, total) in self.counts.items())

    def expect(self, events: int, hint: str) -> None:
        """Work about to be scheduled will take about ``events`` more events: add them to the estimate;
        past `LONG_RUN_EVENTS` call ``on_long_run`` once (with ``hint``: how to make the run shorter),
        and past the budget refuse with `RunawayError` before anything of it runs."""
        self.estimate = max(0, (self.estimate or 0) + events)  # a correction takes back at most what was expected
        if self.max_events is not None and self.estimate > self.max_events:
            raise RunawayError(f"this command would simulate about {self.estimate:,} events, more than its budget "
                               f"of {self.max_events:,}; {hint}")
        if self.estimate > LONG_RUN_EVENTS and not self.warned and self.on_long_run is not None:
            self.warned = True
            self.on_long_run(self, hint)

    def tick(self, now_s: float, events: int, run: int | None = None) -> None:
        """``events`` more events were processed; the run (``run``: the system's id) is at ``now_s`` seconds
        of simulated time."""
        self.events += max(0, events)
        self.clock(now_s, run)
        if self.max_events is not None and self.events > self.max_events:
            raise RunawayError(f"this command passed its budget of {self.max_events:,} simulated events at "
                               f"t={now_s:.6g} s; use a smaller problem (fewer blocks, chunks or chips, "
                               "or --mode reduced for collectives)")
        if self.on_progress is not None:
            self.on_progress(self)

    def so_far(self, metrics: dict[str, Any] | None = None) -> str:
        """What has been simulated: events (against the estimate), simulated time, and from ``metrics``
        (`simulator.engine.trace.compute_metrics`) the bytes each interface moved."""
        of = f" of about {self.total:,} estimated" if self.estimate is not None else ""
        text = f"{self.events:,} events{of}, {format_quantity(self.simulated_s, 's')} of simulated time"
        if self.counts:
            text += f" ({self.counted()})"
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


def count_steps(what: str, done: int, total: int) -> None:
    """Tell the command's watch (if any) that ``done`` of ``total`` of its steps called ``what`` are finished."""
    watch = _CURRENT.get()
    if watch is not None:
        watch.count(what, done, total)


@contextlib.contextmanager
def watching(watch: RunWatch) -> Iterator[RunWatch]:
    """Report every simulation run inside this block to ``watch``."""
    token = _CURRENT.set(watch)
    try:
        yield watch
    finally:
        _CURRENT.reset(token)
