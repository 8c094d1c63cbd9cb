"""What a command shows while it simulates, on stderr: a warning before a long run, then progress.

`command_watch` wraps one command in a `simulator.engine.watch.RunWatch`: work that queues many events
(pipelines, collectives) reports its estimate, and once the estimate passes `LONG_RUN_EVENTS` one line
says how many events are coming, roughly how long that takes, and how to make the run shorter. A run
still going after `DELAY_S` seconds shows a tqdm bar (events against the estimate, and simulated time)
on a terminal, or otherwise one plain line after `FIRST_LINE_S` and then every `LINE_EVERY_S` seconds.
Ctrl-C is handled by the engine (`SimulationInterrupted`), whose message says what was simulated so far.
"""
from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from typing import IO, Any

from simulator.engine.watch import EVENTS_PER_S, LONG_RUN_EVENTS, RunWatch, current_watch, watching
from simulator.units import format_quantity

DELAY_S = 1.0  #: runs shorter than this show nothing
HEARTBEAT_S = 1.0  #: how often the display is redrawn while nothing reports (preparing a run)
LINE_EVERY_S = 10.0  #: without a terminal, one progress line this often
FIRST_LINE_S = 2.0  #: without a terminal, the first line this soon (a 9 s run says what it does)
MAX_EVENTS = 50_000_000  #: a command's event budget (as `System`'s own guard): about ten minutes

__all__ = ["LONG_RUN_EVENTS", "Progress", "command_watch"]


class Progress:
    """Draws a command's progress on ``stream`` (stderr): the long-run warning, a bar or lines.

    Simulations report every `TICK` events; a heartbeat thread (`start`) also redraws once a second, so a
    command that spends long preparing (building a huge topology, planning a collective) before its
    first event says so too.
    """

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream or sys.stderr
        self.bar: Any = None
        self.last_line_s = FIRST_LINE_S - LINE_EVERY_S  # the first plain line at FIRST_LINE_S
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None

    def start(self, watch: RunWatch) -> None:
        """Redraw every `HEARTBEAT_S` seconds from a daemon thread until `close`."""
        def beat() -> None:
            while not self._stop.wait(HEARTBEAT_S):
                self(watch)

        self._heartbeat = threading.Thread(target=beat, name="podsim progress", daemon=True)
        self._heartbeat.start()

    def long_run(self, watch: RunWatch, hint: str) -> None:
        """The one warning before a long run: events, a rough duration, and ``hint``."""
        seconds = (watch.total or 0) / EVENTS_PER_S
        rough = f"{seconds / 60:.0f} minute(s)" if seconds >= 90 else f"{seconds:.0f} s"
        print(f"podsim: this run will simulate about {watch.total or 0:,} events (roughly {rough}); {hint}",
              file=self.stream, flush=True)

    def __call__(self, watch: RunWatch) -> None:
        elapsed = time.monotonic() - watch.started
        if elapsed < DELAY_S:
            return
        with self._lock:  # the run's ticks and the heartbeat thread
            self._draw(watch, elapsed)

    def _draw(self, watch: RunWatch, elapsed: float) -> None:
        if self.bar is None and _is_terminal(self.stream):
            self.bar = _tqdm_bar(self.stream)
        if self.bar is not None:
            self.bar.total = watch.total
            self.bar.n = watch.events
            self.bar.set_description_str("simulating" if watch.events else "preparing", refresh=False)
            counted = f", {watch.counted()}" if watch.counts else ""
            self.bar.set_postfix_str(f"t={format_quantity(watch.simulated_s, 's')} simulated{counted}", refresh=False)
            self.bar.refresh()
        elif elapsed - self.last_line_s >= LINE_EVERY_S:
            self.last_line_s = elapsed
            print(line(watch, elapsed), file=self.stream, flush=True)

    def close(self) -> None:
        """Stop the heartbeat and clear the bar."""
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join()
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def line(watch: RunWatch, elapsed_s: float) -> str:
    """One plain progress line: events against the estimate (never below them), the simulated time of every
    run so far (it never goes back), the command's own counts (draws, layouts priced, finalists simulated)."""
    counted = f"; {watch.counted()}" if watch.counts else ""
    if not watch.events:
        return f"podsim: preparing the run: {elapsed_s:.0f} s, nothing simulated yet{counted}"
    of = f" of about {watch.total:,}" if watch.estimate is not None else ""
    return (f"podsim: simulating: {watch.events:,}{of} events, t={format_quantity(watch.simulated_s, 's')} simulated, "
            f"{elapsed_s:.0f} s{counted}")


def _is_terminal(stream: IO[str]) -> bool:
    return bool(getattr(stream, "isatty", lambda: False)())


def _tqdm_bar(stream: IO[str]) -> Any:
    try:
        from tqdm import tqdm
    except ImportError:  # tqdm missing: fall back to plain lines
        return None
    return tqdm(total=None, unit="ev", unit_scale=True, desc="simulating", file=stream, leave=False,
                dynamic_ncols=True)


@contextlib.contextmanager
def command_watch(stream: IO[str] | None = None) -> Iterator[RunWatch]:
    """Watch every simulation of one command: reuse a watch already open (a test's, with its own budget)
    and give it the progress display, or open one with the `MAX_EVENTS` budget."""
    progress = Progress(stream)
    watch = current_watch() or RunWatch(max_events=MAX_EVENTS)
    watch.on_progress = watch.on_progress or progress
    watch.on_long_run = watch.on_long_run or progress.long_run
    progress.start(watch)
    try:
        with watching(watch):
            yield watch
    finally:
        progress.close()
