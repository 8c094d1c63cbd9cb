"""Collectives (AllGather, ReduceScatter, AllReduce, AllToAll, Broadcast) as schedules of messages.

A collective is compiled into `Transfer` records -- "send these keys from ``src`` to ``dst``, copying
or adding them, once these earlier transfers have arrived" -- and executed on a `Network`: each
transfer starts the moment its dependencies have arrived, so no global barrier is assumed.

The package, one concept per module:

- ``schedule``: transfers, dependencies, `execute`; ``groups``: which devices run together, their rings;
  ``payload``: keys and the real numpy arrays of numeric mode;
- ``algorithm``: the `Algorithm` interface and its registry; one module per algorithm family:
  ``unidirectional`` and ``bidirectional`` rings and the ``line`` (every ring algorithm runs a line on an
  axis that does not wrap), all of them `RingAlgorithm` (``ring``), composed over several axes
  (``multi_axis``), for AllToAll (``all_to_all``) and for Broadcast (``broadcast``); ``timing``: the
  closed-form pieces they share;
- ``layout``: how a ring algorithm cuts an AllGather / ReduceScatter / AllReduce array into parts and halves;
  ``stages``: the multi-axis plans (parts sized so every axis ends together); ``tuner``: ``auto``, the
  fastest applicable algorithm by closed form, and the alternatives every result lists;
- ``bounds``: the topology's lower bound; ``api``: `plan_collective`, `run_collective`, `start_collective`.

Numeric mode (``data``) carries real numpy arrays through the same schedule, so a result that matches
numpy proves the data movement, not just its timing. A group of one device is a no-op (time 0).
Sizes are in bytes; a size that does not split evenly into keys is padded up to whole bytes per key
(``padded_bytes`` reports it); numeric arrays must split exactly or raise.

Scale: on groups whose axes all wrap, every ring of an axis behaves identically (the schedule is
translation-invariant), so ``mode="reduced"`` (chosen automatically for timing-only AllGather,
ReduceScatter and AllReduce, by algorithms that declare it: `Capabilities`, docs/acceleration.md)
simulates one representative ring per axis with all parts sharing its links; it gives the same time as
the full simulation (tested at small sizes). Its trace and
``link_bytes`` show every link, each ring that did not run stood for by the representative's translate;
``max_link_bytes``, ``total_link_bytes`` and the ``bytes`` metric count the whole system. Reduced mode and
the quotients live in the layer above (`simulator.acceleration`); ``api`` reaches them only through the
protocol of ``fast_path``.
"""
from __future__ import annotations

# every algorithm module registers itself on import (issues 12-14 and 21); the registry is the API
from simulator.collectives import (  # noqa: F401
    bidirectional,
    borrowed_rings,
    detour_split,
    dimension_order,
    direct,
    grid_pipelined,
    hierarchical,
    line,
    line_pipelined,
    multi_detour,
    nvls,
    nvls_tree,
    pod_rails,
    rail_chains,
    rail_gather,
    recursive,
    root,
    slice_direct,
    slice_gather,
    slice_rails,
    slow_chip_line,
    spanning_trees,
    split_ring,
    switch_relay,
    tree,
    unidirectional,
)
from simulator.collectives.algorithm import (
    AUTO,
    AUTO_RULE,
    KINDS,
    Algorithm,
    Capabilities,
    Job,
    algorithms,
    applicable,
    get_algorithm,
    listing,
    names,
    register,
    render_listing,
    unregister,
)
from simulator.collectives.api import (
    MODES,
    MULTI_AXIS,
    CollectivePlan,
    CollectiveResult,
    plan_collective,
    run_collective,
    start_collective,
)
from simulator.collectives.bounds import topology_bound
from simulator.collectives.groups import Group, Ring, collective_groups
from simulator.collectives.ring import RingAlgorithm
from simulator.collectives.schedule import Completion, Schedule, Transfer, check_arrived, execute

__all__ = [
    "AUTO", "AUTO_RULE", "KINDS", "MODES", "MULTI_AXIS", "Algorithm", "Capabilities", "CollectivePlan",
    "CollectiveResult", "Completion", "Group", "Job", "Ring", "RingAlgorithm", "Schedule", "Transfer", "algorithms",
    "applicable", "check_arrived", "collective_groups", "execute", "get_algorithm", "listing", "names",
    "plan_collective", "register", "render_listing", "run_collective", "start_collective", "topology_bound",
    "unregister",
]


def __getattr__(name: str):
    """`Plan` was this package's name for `CollectivePlan` until 2026-12; kept with a warning until 2027-06."""
    if name == "Plan":
        import warnings

        warnings.warn("simulator.collectives.Plan is now CollectivePlan; the old name goes in 2027-06",
                      DeprecationWarning, stacklevel=2)
        return CollectivePlan
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
