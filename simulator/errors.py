"""Exceptions podsim raises for bad input and stuck simulations.

Every message names the offending value and what would be valid; the CLI prints it as one line on
stderr and exits with status 2.
"""
from __future__ import annotations

from typing import Any


class PodsimError(ValueError):
    """Base class of every podsim input error."""


class SpecError(PodsimError):
    """A chip or link spec field is missing, mistyped or out of range."""


class QuantityError(PodsimError):
    """A quantity string (``34MB``, ``0.4ms``) could not be parsed."""


class CapacityError(PodsimError):
    """An allocation can never fit in its memory pool."""


class ScenarioError(PodsimError):
    """An unknown scenario, an unknown parameter, or a scenario file that fails to import."""


class UserScenarioError(ScenarioError):
    """A user's scenario file raised its own exception inside ``run()``; ``details`` holds the traceback of
    the user's code, which the CLI prints above the one-line message."""

    def __init__(self, message: str, details: str = "") -> None:
        super().__init__(message)
        self.details = details


class DeadlockError(PodsimError):
    """The simulation ended with processes still waiting for something that never happens."""


class RunawayError(PodsimError):
    """A simulation exceeded its event-count or wall-clock guard."""


class FaultError(PodsimError):
    """A fault or jitter spec names a chip or link the topology lacks, or a value out of range."""


class IncompleteRunError(DeadlockError):
    """A run ended with work that a failed chip made impossible; ``incomplete`` maps each operation's label
    to how many of its transfers or ops were lost, ``failed`` each failed chip to the time it failed (s)."""

    def __init__(self, message: str, incomplete: dict[str, int], failed: dict[object, float],
                 stopped_at_s: float) -> None:
        super().__init__(message)
        self.incomplete, self.failed, self.stopped_at_s = incomplete, failed, stopped_at_s

    def __reduce__(self) -> tuple[Any, ...]:  # a worker process's error, sent back whole
        return type(self), (str(self), self.incomplete, self.failed, self.stopped_at_s)


class SimulationInterrupted(KeyboardInterrupt):
    """Ctrl-C during a simulation; the message says what was simulated so far (the CLI exits with 130)."""


class NonFiniteError(ArithmeticError):
    """A number about to be printed is inf or NaN. Not a `PodsimError`: the user's input was accepted, so
    this is podsim's bug (a quantity with no finite value is reported as null with a note, or its input is
    refused); the CLI says so in one line and exits with status 1."""


def one_line(err: BaseException, *, typed: bool = False) -> str:
    """``err``'s message folded onto one line; with ``typed``, an error that is not podsim's own (a bug or
    a library's) keeps its type name in front, so a sweep row says what kind of failure it was."""
    text = " ".join(str(err).split())
    if not typed or isinstance(err, PodsimError):
        return text
    return f"{type(err).__name__}: {text}".rstrip(": ")
