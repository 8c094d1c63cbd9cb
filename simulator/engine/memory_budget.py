"""A command's memory budget: work whose estimated memory passes it is refused before it is allocated.

Like the event budget (`simulator.engine.watch`), the places that are about to allocate memory that
grows with the problem (a collective's schedule, a closed form's per-step tables) estimate it first and
call `check_memory`; past the budget a `MemoryBudgetError` names the estimate, the budget and how to make
the run smaller. The budget is `DEFAULT_FRACTION` of the machine's physical memory (or of the address
space limit, ``ulimit -v``, where that is smaller), the environment variable ``PODSIM_MAX_MEMORY`` (bytes)
where it is set, or what a command sets with `memory_budget` (``--max-memory``).
"""
from __future__ import annotations

import contextlib
import contextvars
import os
import resource
from collections.abc import Iterator

from simulator.errors import RunawayError
from simulator.units import format_quantity

DEFAULT_FRACTION = 0.5  #: share of the machine's memory one command may plan to allocate
ENV_VAR = "PODSIM_MAX_MEMORY"  #: bytes; how a sweep's worker processes inherit ``--max-memory``


class MemoryBudgetError(RunawayError):
    """Work would allocate more memory than the command's budget (``--max-memory``)."""


def machine_memory_bytes() -> float:
    """Bytes of physical memory, or the address-space limit (``ulimit -v``) where that is lower."""
    physical = float(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return min(physical, float(soft)) if soft != resource.RLIM_INFINITY else physical


def default_budget_bytes() -> float:
    """``PODSIM_MAX_MEMORY`` where set, else `DEFAULT_FRACTION` of `machine_memory_bytes`."""
    env = os.environ.get(ENV_VAR)
    if env:
        try:
            return float(env)
        except ValueError:
            pass  # not a number: the default (the CLI only ever writes numbers there)
    return DEFAULT_FRACTION * machine_memory_bytes()


_BUDGET: contextvars.ContextVar[float | None] = contextvars.ContextVar("podsim_memory_budget", default=None)


def budget_bytes() -> float:
    """The memory budget of the command running now, in bytes."""
    value = _BUDGET.get()
    return default_budget_bytes() if value is None else value


@contextlib.contextmanager
def memory_budget(nbytes: float | None) -> Iterator[float]:
    """Run the block with a memory budget of ``nbytes`` (None: the default)."""
    token = _BUDGET.set(nbytes)
    try:
        yield budget_bytes()
    finally:
        _BUDGET.reset(token)


def check_memory(estimate_bytes: float, what: str, hint: str) -> None:
    """Refuse work about to allocate about ``estimate_bytes`` (``what``: what and how many of them) when
    that passes the budget; ``hint`` says how to make the run smaller."""
    budget = budget_bytes()
    if estimate_bytes > budget:
        raise MemoryBudgetError(f"{what} would need about {format_quantity(estimate_bytes, 'B')} of memory, more "
                                f"than this command's budget of {format_quantity(budget, 'B')} (--max-memory); "
                                f"{hint}")
