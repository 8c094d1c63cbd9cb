"""The one door to SimPy's internals: every read or write of a private part of SimPy in podsim is here.

podsim runs on SimPy's public API (``simpy.Environment``, ``Event``, ``Timeout``, ``Process``, ``AllOf``,
``event.callbacks``, ``env.now``) everywhere except on a few hot paths, where one Python call less per event
is most of the engine's overhead over a hand-written SimPy model (``benchmarks/engine.py``). Those shortcuts
are the functions below; every other module calls them instead of touching SimPy's private names, and
``tests/test_simpy_door.py`` fails when any other module names one of them (it reads the source with `ast`).

Pinned: ``simpy>=4.1,<4.2`` (pyproject.toml); tested with SimPy 4.1.2. The internals relied on, each marked
``# internal:`` where it is used below, are those of ``simpy/core.py`` and ``simpy/events.py`` in 4.1:

* ``Environment._now`` -- the current time (the float ``env.now`` returns); written by the run loop.
* ``Environment._queue`` -- a heap (``heapq``) of 4-tuples ``(time, priority, eid, event)``, popped in that
  order; ``Environment._eid`` -- the ``itertools.count`` giving each queued event its tie-breaking id.
* ``Event._ok`` / ``Event._value`` -- success flag and value (``PENDING`` while untriggered);
  ``Timeout._delay``; a failed event is "defused" when it has a ``_defused`` attribute.
* ``simpy.events.URGENT`` (0) and ``NORMAL`` (1) -- the priorities; a lower one pops first at one time.
* ``simpy.core.BoundClass`` -- the descriptor that binds ``env.timeout``, ``env.event``... per environment.
* ``Environment.step`` -- `run_until_empty` is its body, inlined (the loop runs once per event), without its
  ``StopSimulation`` branch (``env.run(until=...)``; `System.run` runs until no event is left).

What breaks on an upgrade, and how it shows: a renamed or re-typed internal makes `check_internals` raise at
import (``SimPyChanged``, naming the internal and the tested version); a change in what ``step``,
``schedule``, ``succeed`` or ``Timeout.__init__`` do (say, a new field in the queue tuple, or a new step
rule) is caught by the behaviour tests in ``tests/test_simpy_door.py``, which run each shortcut against
plain SimPy. To upgrade: widen the pin, run those tests, fix this module (only this one), update the tested
version here and in docs/simpy_and_types.md.
"""
from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable, Iterator
from heapq import heappop, heappush
from typing import Any

import simpy
from simpy.core import BoundClass, EmptySchedule  # internal: BoundClass (undocumented descriptor)
from simpy.events import NORMAL, PENDING, URGENT, Event, Timeout

from simulator.errors import PodsimError

#: The SimPy versions this module is tested with (the pin in pyproject.toml).
TESTED = ((4, 1), (4, 2))  # [low, high)
TESTED_TEXT = "simpy>=4.1,<4.2"

__all__ = ["NORMAL", "TESTED_TEXT", "URGENT", "EmptySchedule", "SimPyChanged", "bind_event_classes",
           "check_internals", "clock", "fire_now", "init_pending", "pops_next", "queued", "run_until_empty",
           "succeed_urgent",
           "timeout", "timer_at"]

_new = object.__new__


class SimPyChanged(PodsimError):
    """The installed SimPy lacks an internal podsim relies on (see `simulator.engine.simpy_door`)."""


def clock(env: simpy.Environment) -> float:
    """The simulated time of ``env`` (s): ``env.now`` without the property call."""
    return env._now  # internal: Environment._now


def queued(env: simpy.Environment) -> Iterator[tuple[float, Event]]:
    """(time s, event) of every event queued in ``env``, in no particular order (heap order)."""
    for entry in env._queue:  # internal: Environment._queue, entries (time, priority, eid, event)
        yield entry[0], entry[3]


def init_pending(event: Event, env: simpy.Environment) -> None:
    """``Event.__init__(event, env)`` for a subclass's own ``__init__``: untriggered, no callbacks."""
    event.env, event.callbacks, event._value = env, [], PENDING  # internal: Event._value, PENDING


def succeed_urgent(event: Event, value: Any = None) -> None:
    """Trigger untriggered ``event`` with ``value`` and queue it now at priority URGENT (before this instant's
    NORMAL events; ``event.succeed`` queues at NORMAL). The caller knows ``event`` is untriggered: unchecked."""
    env = event.env
    event._ok, event._value = True, value  # internal: Event._ok, Event._value
    heappush(env._queue, (env._now, URGENT, next(env._eid), event))  # internal: _queue, _eid, _now


def pops_next(env: simpy.Environment) -> bool:
    """Whether an event triggered now at priority URGENT (`succeed_urgent`) would be the next one popped: no
    URGENT event of this instant is queued (a NORMAL one of this instant, or any later one, pops after it)."""
    queue = env._queue  # internal: Environment._queue, entries (time, priority, eid, event); [0] the least
    return not queue or queue[0][1] != URGENT or queue[0][0] != env._now  # internal: Environment._now


def fire_now(event: Event, value: Any) -> None:
    """Process untriggered ``event`` here and now, as the run loop would (value set, callbacks run, callbacks
    then None), instead of queuing it. Exact only where it would be the next event popped anyway."""
    event._ok, event._value = True, value  # internal: Event._ok, Event._value
    callbacks, event.callbacks = event.callbacks, None  # type: ignore[assignment]  # as Environment.step does
    for callback in callbacks:
        callback(event)


def timeout(env: simpy.Environment, delay: float) -> Timeout:
    """``Timeout(env, delay)``: SimPy's own object, checked and queued the way its ``__init__`` and
    ``Environment.schedule`` do it, in one call instead of three."""
    if delay < 0:
        raise ValueError(f"Negative delay {delay}")
    timer = _new(Timeout)
    # internal: Timeout fields as Timeout.__init__ sets them; the queue entry as Environment.schedule makes it
    timer.env, timer.callbacks, timer._value, timer._delay, timer._ok = env, [], None, delay, True
    heappush(env._queue, (env._now + delay, NORMAL, next(env._eid), timer))
    return timer


def timeout_at(env: simpy.Environment, at: float) -> Timeout:
    """A `Timeout` due at time ``at`` (s, not before now), queued at ``at`` exactly, with no callback yet (a
    process yields it)."""
    timer = _new(Timeout)
    timer.env, timer._value, timer._delay, timer._ok = env, None, at - env._now, True  # internal: Timeout fields
    timer.callbacks = []
    heappush(env._queue, (at, NORMAL, next(env._eid), timer))  # internal: _queue, _eid
    return timer


def timer_at(env: simpy.Environment, at: float, callback: Callable[[Any], Any]) -> Timeout:
    """A `Timeout` due at time ``at`` (s, not before now) with ``callback`` as its one callback, queued at ``at``
    exactly (``Timeout(env, at - now)`` would queue it at ``now + (at - now)``, which may round differently)."""
    timer = _new(Timeout)
    now_s = env._now  # internal: Environment._now
    timer.env, timer._value, timer._delay, timer._ok = env, None, at - now_s, True  # internal: Timeout fields
    timer.callbacks = [callback]
    heappush(env._queue, (at, NORMAL, next(env._eid), timer))  # internal: _queue, _eid
    return timer


def bind_event_classes(env: simpy.Environment, skip: tuple[str, ...] = ()) -> None:
    """Bind SimPy's event classes (``env.timeout``, ``env.event``, ...) on ``env`` itself, as
    ``BoundClass.bind_early`` does for the class of ``env`` only: a subclass of ``simpy.Environment`` then
    creates events as fast as SimPy's own. Names in ``skip`` stay as the subclass defines them."""
    for name, obj in vars(simpy.Environment).items():
        if type(obj) is BoundClass and name not in skip:  # internal: BoundClass
            setattr(env, name, getattr(env, name))


def run_until_empty(env: simpy.Environment, every: int, tick: Callable[[], None],
                    interrupted: Callable[[int], None]) -> int:
    """Process ``env``'s events until none is left; returns the number processed since the last ``tick``.

    ``Environment.step`` inlined: pop the next event, advance the clock, run its callbacks, raise a copy of
    its exception if it failed and was not defused. ``tick()`` is called after every ``every`` events
    (``every`` a power of 2); on Ctrl-C, ``interrupted(n)`` is called with the events since the last tick
    before the KeyboardInterrupt propagates. An environment whose class overrides ``step`` is stepped by
    calling its ``step`` (the same contract, one call more per event)."""
    mask, count = every - 1, 0
    if type(env).step is not simpy.Environment.step:
        step = env.step
        try:
            while True:
                try:
                    step()
                except EmptySchedule:
                    return count & mask
                count += 1
                if count & mask == 0:
                    tick()
        except KeyboardInterrupt:
            interrupted(count & mask)
            raise
    queue, pop = env._queue, heappop  # internal: Environment._queue
    try:
        while True:
            try:
                env._now, _, _, event = pop(queue)  # internal: Environment._now, queue entry layout
            except IndexError:
                return count & mask
            callbacks, event.callbacks = event.callbacks, None  # type: ignore[assignment]  # as step does
            for callback in callbacks:
                callback(event)
            if not event._ok and not hasattr(event, "_defused"):  # internal: _ok, _value, _defused
                exc = type(event._value)(*event._value.args)
                exc.__cause__ = event._value
                raise exc
            count += 1
            if count & mask == 0:
                tick()
    except KeyboardInterrupt:
        interrupted(count & mask)
        raise


def check_internals() -> None:
    """Raise `SimPyChanged` if the installed SimPy lacks an internal this module relies on; warn if its
    version is outside the tested range. Run once, at import."""
    version = tuple(int(p) for p in simpy.__version__.split(".")[:2] if p.isdigit())
    env = simpy.Environment(1.5)
    problems = []
    if getattr(env, "_now", None) != 1.5:
        problems.append("Environment._now (the current time)")
    if not isinstance(getattr(env, "_queue", None), list):
        problems.append("Environment._queue (a heapq list)")
    if not isinstance(getattr(env, "_eid", None), itertools.count):
        problems.append("Environment._eid (an itertools.count)")
    if not problems:
        t = env.timeout(2.0, value="v")
        entry = env._queue[0] if env._queue else ()
        if not (len(entry) == 4 and entry[0] == 3.5 and entry[1] == NORMAL and entry[3] is t):
            problems.append(f"queue entry layout (time, priority, eid, event); got {entry!r}")
        if getattr(t, "_ok", None) is not True or getattr(t, "_value", None) != "v" or \
                getattr(t, "_delay", None) != 2.0:
            problems.append("Timeout fields _ok, _value, _delay")
        if getattr(simpy.Event(env), "_value", None) is not PENDING:
            problems.append("Event._value is PENDING while untriggered")
    if not (URGENT < NORMAL):
        problems.append(f"priorities URGENT={URGENT!r} < NORMAL={NORMAL!r}")
    if not any(type(o) is BoundClass for o in vars(simpy.Environment).values()):
        problems.append("simpy.core.BoundClass binds Environment.timeout/event/...")
    if problems:
        raise SimPyChanged(f"SimPy {simpy.__version__} changed internals podsim relies on: {'; '.join(problems)}; "
                           f"install {TESTED_TEXT} (tested) or update simulator/engine/simpy_door.py")
    if not TESTED[0] <= version < TESTED[1]:
        warnings.warn(f"SimPy {simpy.__version__} is outside the tested range {TESTED_TEXT}; the internals "
                      "podsim relies on are present, but run tests/test_simpy_door.py", RuntimeWarning, stacklevel=2)


check_internals()
