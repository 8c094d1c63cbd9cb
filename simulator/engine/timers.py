"""Timers that call a function: `call_after` and `call_at` share one SimPy event among the calls due at one time.

Flow-level aggregation (issue 16): the many equal messages of a collective's step start at one instant with
one delay, so their latency and completion timers fall due at the same float time; one `Timeout` runs them all,
in the order they were set. The timers are built by `simulator.engine.simpy_door` (SimPy's `Timeout`, queued in
one call).
"""
from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import simpy

from simulator.engine.simpy_door import clock, timer_at

_new = object.__new__


def call_after(env: simpy.Environment, delay: float, fn: Callable[[Any], Any], arg: Any) -> None:
    """Call ``fn(arg)`` ``delay`` seconds from now. The calls due at one time (``now + delay``, the float a
    timeout's would be) share one timer -- one SimPy event, queued where the first was: they run in the
    order they were set, all before the events queued after the first of them for that same time. Times
    are exactly those of separate timeouts; only the order of events within one instant can differ."""
    at = clock(env) + delay
    try:
        pending = env._podsim_calls  # type: ignore[attr-defined]  # podsim's, kept on the env
    except AttributeError:  # the environment's first call
        pending = env._podsim_calls = {}  # type: ignore[attr-defined]
    calls = pending.get(at)
    if calls is not None:  # a timer for that time is set (a dict miss by `get`: no exception raised)
        calls.append((fn, arg))
    elif delay < 0:
        raise ValueError(f"Negative delay {delay}")
    else:
        _set_timer(env, pending, at, [(fn, arg)])


def call_at(env: simpy.Environment, at: float, fn: Callable[[Any], Any], arg: Any) -> None:
    """`call_after`, at the time ``at`` (not before now): the calls due at one float time share one timer."""
    try:
        pending = env._podsim_calls  # type: ignore[attr-defined]  # podsim's, kept on the env
    except AttributeError:
        pending = env._podsim_calls = {}  # type: ignore[attr-defined]
    calls = pending.get(at)
    if calls is not None:
        calls.append((fn, arg))
    elif at < clock(env):
        raise ValueError(f"call at t={at!r} s, before now (t={clock(env)!r} s)")
    else:
        _set_timer(env, pending, at, [(fn, arg)])


def _set_timer(env: simpy.Environment, pending: dict[float, list[tuple[Any, Any]]], at: float,
               calls: list[tuple[Any, Any]]) -> None:
    """Queue the timer that runs ``calls`` at ``at`` (`simpy_door.timer_at`)."""
    pending[at] = calls
    timer_at(env, at, partial(_run_calls, pending, at, calls))


def _run_calls(pending: dict[float, list[tuple[Any, Any]]], at: float, calls: list[tuple[Any, Any]],
               _event: Any) -> None:
    del pending[at]  # calls set from now on for this time (a zero delay) need a timer of their own
    for fn, arg in calls:
        fn(arg)
