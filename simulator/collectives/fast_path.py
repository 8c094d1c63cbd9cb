"""The collectives API's one door to the acceleration layer (`simulator.acceleration`): dependency inversion.

`simulator.collectives.api` runs a collective exactly on its own (every transfer of the schedule). Each shortcut
that gives the same figures with less work -- flow-level aggregation (`simulator.collectives.schedule.execute`'s
default, in exact runs too), reduced mode (one ring per axis), a quotient of the schedule by a symmetry of the
network, a quotient built without the schedule -- is asked of the `FastPath` registered here, an
interface this layer owns and the layer above implements. `simulator.acceleration.executor` registers its fast
`Executor` when it is imported; the API loads it by name (`PROVIDER`) the first time it needs one, so a script that
only calls `run_collective` runs fast without this layer importing the one above it. Nothing here imports upward;
tests/test_layers.py holds that this module is the only one below the acceleration layer that names it.

Seen from above, ``mode`` is the switch: ``full`` exact, ``auto`` fast where the algorithm declares it
(`simulator.collectives.algorithm.Capabilities`), ``reduced`` insists on reduced mode.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # annotations only
    import numpy as np

    from simulator.collectives.algorithm import Algorithm, Job
    from simulator.collectives.groups import Group
    from simulator.collectives.schedule import Completion, Transfer
    from simulator.engine.channel import Channel
    from simulator.engine.network import Network
    from simulator.engine.system import System

#: the module that implements `FastPath` and registers it on import (loaded on first need, by name)
PROVIDER = "simulator.acceleration.executor"


class FastPath(Protocol):
    """What `simulator.collectives.api` asks of the acceleration layer (the same figures, less work)."""

    def reduced_eligible(self, mode: str, kind: str, data: Any, group: Group, net: Network,
                         one_to_one: bool = True) -> bool:
        """Whether the job allows one representative ring per axis (``mode='reduced'`` where not: an error)."""
        ...

    def use_reduced(self, mode: str, eligible: bool, algorithm: Algorithm, auto: bool = False) -> bool:
        """Whether to build the job reduced: eligible, not ``full``, and declared by ``algorithm``."""
        ...

    def direct_quotient(self, system: System, algorithm: Algorithm, job: Job) -> Any:
        """(quotient, group) built without the schedule, or None (build the schedule)."""
        ...

    def quotient_run(self, system: System, plan: Any, mode: str, timing: bool) -> Any:
        """(quotient, group) to run ``plan`` on, or None (run every transfer)."""
        ...

    def execute_aggregated(self, net: Network, transfers: list[Transfer],
                           buffers: dict[Any, dict[Any, np.ndarray]] | None, label: str) -> Completion:
        """Start every transfer once its dependencies have arrived, by flow-level aggregation (one shared timer
        per instant and delay; the exact figures, exact runs too); the completion fires with the last arrival."""
        ...

    def execute_quotient(self, net: Network, quotient: Any, label: str = "") -> Completion:
        """Start the representatives' transfers; the completion fires when the whole collective would end."""
        ...

    def unfold(self, net: Network, action: Any, quotient: Any, before: dict[Channel, float]) -> None:
        """After a quotient run, give every link of each representative's orbit what it carried."""
        ...

    def total_link_bytes(self, net: Network, groups: list[Group], group: Group,
                         link_bytes: dict[str, float]) -> float:
        """Bytes over every link of the system, from a reduced run's representative rings (whose trace then names
        the links they stood for)."""
        ...

    def every_link_bytes(self, net: Network, groups: list[Group], link_bytes: dict[str, float]) -> dict[str, float]:
        """A reduced run's bytes per link (``"u->v"``) on every link, not only the representative rings' links."""
        ...


_registered: list[FastPath] = []


def register(path: FastPath) -> None:
    """Make ``path`` the API's fast path (the acceleration layer's executor calls this on import)."""
    _registered[:] = [path]


def fast_path() -> FastPath:
    """The registered fast path, loading `PROVIDER` (which registers it) the first time."""
    if not _registered:
        importlib.import_module(PROVIDER)
    assert _registered, f"{PROVIDER} registers a FastPath when imported"
    return _registered[0]
