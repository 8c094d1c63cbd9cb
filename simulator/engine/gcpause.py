"""Pausing Python's cyclic garbage collector while a simulation runs (`gc_paused`).

A run's events, spans, channels and a collective's schedule are hundreds of thousands of small tracked objects,
nearly all freed by reference counting or alive until the run ends. With the collector on, its passes walk them
again and again (benchmarks/engine.py: about a third of a pipeline's run). With it merely off inside and on after,
the first passes after walk every object made inside at once: the young generation's, then the middle one's, and
-- the objects moved to the oldest generation count towards its threshold -- often a full pass over everything
alive (0.1-0.25 s after an 8,192-chip step's run). So `gc_paused` moves what was made inside, unexamined, straight
to the oldest generation (`gc.freeze` then `gc.unfreeze`: two list splices, no walk), where it is examined at the
interpreter's next full pass like anything else: no object is kept from the collector, only looked at later.
So that garbage cycles made inside are not left for a full pass the moved objects never ask for, `gc_paused` runs
one itself once it has moved `FULL_PASS_EVERY` objects since its last. The collector has no effect on results.
"""
from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

#: Objects made inside a pause (the young generation's count on leaving it) below which leaving just turns the
#: collector back on: its next young pass over them is short.
MOVE_FROM = 20_000
#: Objects moved to the oldest generation unexamined after which `gc_paused` runs one full pass (so cycles of
#: garbage made inside pauses are collected in a process that runs simulation after simulation). At 2 million, issue
#: 29's 16,384-H100 step paid one pass of 0.7 s that found no garbage at all (the simulator's objects are freed by
#: reference counting): the passes are now four times rarer.
FULL_PASS_EVERY = 8_000_000

_moved = [0]  #: objects moved since `gc_paused` last ran a full pass


def gc_paused(pause: bool = True) -> contextlib.AbstractContextManager[None]:
    """Pause Python's cyclic garbage collector inside (``pause``), as it was after; the objects made inside (at
    least `MOVE_FROM` of them) then go straight to the oldest generation, unexamined (the module's note). Nested
    pauses act as one, the outermost. No effect on results."""
    return _paused() if pause else contextlib.nullcontext()


@contextlib.contextmanager
def _paused() -> Iterator[None]:
    if not gc.isenabled():  # (off already: a pause around this one, or the caller's own choice)
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        made = gc.get_count()[0]
        if made >= MOVE_FROM and not gc.get_freeze_count():  # (objects frozen on purpose, as before a fork: kept)
            gc.freeze()  # every tracked object to the permanent generation, the young count to zero ...
            gc.unfreeze()  # ... and all of them back, into the oldest generation
            _moved[0] += made
        gc.enable()
        if _moved[0] >= FULL_PASS_EVERY:
            _moved[0] = 0
            gc.collect()
