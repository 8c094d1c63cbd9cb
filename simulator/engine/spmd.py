"""SPMD: "every chip does X" -- one process per chip of a group, all started at once.

`spmd(system, program)` calls ``program(chip)`` for each chip and starts the generator it returns as a
named process of ``system`` (so `System.run` checks that each finishes); it returns one event that
fires when every chip's process has finished. A program yields the events a chip's methods return
(``yield chip.matmul(m, k, n)``) and may wait on events shared by all chips, such as a collective
started once with `simulator.collectives.start_collective`.
"""
from __future__ import annotations

from collections.abc import Callable, Generator, Iterable
from typing import TYPE_CHECKING, Any

import simpy

from simulator.engine.chip import Chip
from simulator.engine.environment import ApiMisuseError

if TYPE_CHECKING:  # annotations only: no import at run time (and no cycle)
    from simulator.engine.system import System


def spmd(system: System, program: Callable[[Chip], Generator[Any, Any, Any]], chips: Iterable[int | Chip] | None = None,
         name: str = "spmd") -> simpy.Event:
    """Start ``program(chip)`` on each chip of ``chips`` (indices or `Chip` objects; default every chip of
    ``system``) as process ``"{name} (chip i)"``; returns an event that succeeds when all have finished.

    >>> from simulator import System
    >>> system = System("tpu-v5e", topology="ring:4")
    >>> done = spmd(system, lambda chip: (yield chip.matmul(128, 128, 128)))
    >>> round(system.run() * 1e9, 3) == round(2 * 128**3 / 197e12 * 1e9, 3)
    True
    """
    if not callable(program):
        raise ApiMisuseError(f"spmd() takes a function of one chip that returns a generator, not {program!r}; "
                             "e.g. def layer(chip): yield chip.matmul(m, k, n)")
    members = _members(system, chips)
    processes = [system.process(_started(program, chip), f"{name} (chip {chip.index})") for chip in members]
    return simpy.AllOf(system.env, processes)


def _members(system: System, chips: Iterable[int | Chip] | None) -> list[Chip]:
    if chips is None:
        return list(system.chips)
    by_index = {chip.index: chip for chip in system.chips}
    members = []
    for c in chips:
        chip = c if isinstance(c, Chip) else by_index.get(c)
        if chip is None:
            raise ApiMisuseError(f"spmd(): no chip {c!r} in this system; its chips are {sorted(by_index)}")
        members.append(chip)
    return members


def _started(program: Callable[[Chip], Any], chip: Chip) -> Generator[Any, Any, Any]:
    gen: Generator[Any, Any, Any] = program(chip)
    if not hasattr(gen, "throw"):
        raise ApiMisuseError(f"spmd(): {getattr(program, '__name__', 'the program')}(chip) returned "
                             f"{type(gen).__name__}, not a generator; put at least one `yield` in it "
                             "(e.g. yield chip.matmul(m, k, n))")
    return gen
