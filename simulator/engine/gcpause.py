"""Pausing Python's cyclic garbage collector while a simulation runs (`gc_paused`)."""
from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def gc_paused(pause: bool = True) -> Iterator[None]:
    """Pause Python's cyclic garbage collector inside (``pause``), as it was after. A run's events, spans, and a
    collective's schedule and flows are tens of thousands of small tracked objects, nearly all freed by reference
    counting; the collector's full passes over them (and everything else alive) cost more than the simulation
    itself (benchmarks/engine.py: about a third of a pipeline's run). Cycles made inside are collected after. No
    effect on results."""
    enabled = gc.isenabled()
    if pause and enabled:
        gc.disable()
    try:
        yield
    finally:
        if pause and enabled:
            gc.enable()
