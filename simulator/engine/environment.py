"""The SimPy environment a `System` runs in: SimPy's own, with misuse of the Python API reported as a
podsim error that says what to do, instead of a SimPy traceback.

The usual slip: ``env.process(chip.matmul(...))``. A chip's ``matmul``, ``load``, ``store``, ``compute``
and ``vector`` start their work at once and return an *event*; a process is a generator that yields
such events. `Environment.process` checks what it is given, and `api_misuse` turns SimPy's "invalid
yield value" into the same kind of message.
"""
from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any

import simpy

from simulator.engine.simpy_door import bind_event_classes
from simulator.errors import PodsimError


class ApiMisuseError(PodsimError):
    """The Python API was called the wrong way (a process given an event, a process that yields a
    non-event); the message says what to write instead."""


_ONE_LINE_EXAMPLE = "def work(chip): yield chip.matmul(m, k, n) ... then system.process(work(chip), 'work')"


class Environment(simpy.Environment):
    """`simpy.Environment` whose `process` refuses anything but a generator, with a podsim message.

    SimPy binds its event classes to each environment for speed (`BoundClass.bind_early` reads only the
    class's own attributes); this subclass binds SimPy's too (`simpy_door.bind_event_classes`), so
    ``env.timeout`` costs what it always did.
    """

    def __init__(self, initial_time: float = 0) -> None:
        super().__init__(initial_time)
        bind_event_classes(self, skip=("process",))

    #: `System.pulse`, set by the `System` that owns the environment (work done inside few events reports there)
    podsim_pulse: Callable[[int], None]

    def process(self, generator: Any) -> simpy.Process:
        """Start ``generator`` (a called generator function) as a SimPy process."""
        if not hasattr(generator, "throw"):  # what SimPy checks: the generator protocol
            raise ApiMisuseError(not_a_generator(generator))
        return simpy.Process(self, generator)


def not_a_generator(value: Any) -> str:
    """Why ``value`` cannot be started as a process, and what to write instead."""
    if isinstance(value, simpy.Process):
        return ("env.process() was given a process that is already running; yield it from another process "
                "to wait for it, or start a generator only once")
    if isinstance(value, simpy.Event):
        return (f"env.process() takes a generator, but was given a {type(value).__name__} event: chip.matmul, "
                "load, store, compute, vector and start_collective start their work at once and return an "
                "event. Yield that event from a generator of your own and start the generator -- "
                f"{_ONE_LINE_EXAMPLE}")
    if inspect.isgeneratorfunction(value):
        return (f"env.process() was given the generator function {value.__name__} itself; call it: "
                f"env.process({value.__name__}(...))")
    return (f"env.process() takes a generator (a function with `yield` in it, called), not {_shown(value)}; "
            f"e.g. {_ONE_LINE_EXAMPLE}")


def api_misuse(err: RuntimeError) -> ApiMisuseError | None:
    """SimPy's RuntimeError for a process that yielded a non-event, as a podsim message (None for any other
    RuntimeError, which is not ours to explain)."""
    text = str(err)
    found = re.search(r'Invalid yield value "(.*)"', text, flags=re.S)
    if found is None:
        return None
    where = re.search(r'File "([^"]+)", line (\d+)', text)
    place = f" ({where.group(1)}, line {where.group(2)})" if where else ""
    value = found.group(1)
    hint = "call it and yield the event it returns" if value.startswith("<bound method") else \
        "to run a generator inside a process write `yield from gen`, or `yield system.process(gen, name)`"
    return ApiMisuseError(f"a process yielded {value!r}{place}, which is not an event: a process yields the events "
                          f"that chip.matmul/load/store, env.timeout or start_collective return; {hint}")


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}" if len(text) <= 60 else type(value).__name__
