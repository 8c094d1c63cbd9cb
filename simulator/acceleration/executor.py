"""The acceleration layer's one public entry: an `Executor`, exact or fast, that runs collectives and steps.

``fast`` is the executor's only switch. Fast runs report the exact run's figures (docs/acceleration.md is the
contract): step time, busy times, bytes per interface and per link, FLOPs, to 1e-9 relative. They are the same
bound (ideal links) or forecast (calibrated) as the exact run, computed with less work. Every mechanism behind it
lives in this subpackage and is reached only from here:

======================  =================================================================================
`aggregate`             flow-level aggregation: transfers share timers, no event per message (exact runs too)
`reduced`               one ring per axis for every ring of that axis (the algorithm builds it)
`quotient`              a schedule equivariant under a symmetry runs one transfer per orbit; `unfold`
`automorphisms`,        the symmetry groups: GPU node and rail rotations, XOR blocks; multislice slice
`slice_symmetry`        rotations (each permutation checked to be a graph automorphism)
`ring_quotient`         a ring algorithm's quotient built without its schedule
`step_symmetry`,        a symmetric step runs one chip per pipeline stage; GPU node quotient groups
`node_quotients`
`orbit_run`             a GPU node step with one program per orbit of a node group (stage chips unlike)
`replay`, `templates`   a repeated collective alone on its links replays its recorded timing
`reruns`                the one driver of a fast step's reruns (mixed, conflict, broken)
======================  =================================================================================

Who calls it: `simulator.collectives.api` through the `simulator.collectives.fast_path.FastPath` protocol, which
`FAST` implements and registers when this module is imported (the API sits below this layer, so it names only the
protocol); the steps of `simulator.workloads` (`simulate_step`, `StepSimulation`) import `executor` directly.
tests/test_layers.py holds that nothing else imports this layer.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from simulator.acceleration import aggregate as _aggregate
from simulator.acceleration import quotient as _quotient
from simulator.acceleration import reduced as _reduced
from simulator.acceleration import ring_quotient as _ring_quotient
from simulator.acceleration.replay import Replays
from simulator.acceleration.reruns import Attempt, Outcome, run_with_reruns
from simulator.acceleration.step_symmetry import Symmetry
from simulator.collectives import fast_path

if TYPE_CHECKING:  # annotations only
    import numpy as np
    import simpy

    from simulator.collectives.algorithm import Algorithm, Job
    from simulator.collectives.groups import Group
    from simulator.collectives.schedule import Completion, Transfer
    from simulator.engine.channel import Channel
    from simulator.engine.network import Network
    from simulator.engine.system import System

__all__ = ["EXACT", "FAST", "Attempt", "Executor", "Outcome", "Representatives", "executor"]


class Representatives(Protocol):
    """What a step driver may ask of the representatives `Executor.symmetry` gives it (the step half of the
    contract; `step_symmetry.Symmetry` implements it, and mypy holds the step drivers to these members).
    Inactive (``active`` False: not fast, or the step not symmetric), every chip runs and each call is the
    exact run's."""

    active: bool  #: representatives stand for the other chips
    per_stage: int  #: chips each representative stands for
    shared: dict[tuple, Any]  #: plans a rerun of the step reuses (pass it to the next attempt's `symmetry`)
    replays: Replays  #: lone repeated collectives replayed; ``metrics`` gives the finished run's figures

    @property
    def arrivals(self) -> int:
        """Chips of a stage that must reach a collective before it starts."""
        ...

    def chips(self) -> list[Any]:
        """The chips whose programs run (all chips when inactive)."""
        ...

    def start(self, kind: str, nbytes: float, axes: list[str], stage: int, exact: dict[str, Any]) -> simpy.Event:
        """Start the stage's collective (``exact``: the keywords of the exact run's `start_collective`)."""
        ...

    def lanes(self) -> dict[Any, list[Any]]:
        """Each program's chip -> the chips it stands for in lockstep (empty: one chip a program)."""
        ...

    def send_lanes(self, chip: Any, nbytes: float, label: str, counterpart: Callable[[Any], Any],
                   arrived: list[Callable[[Any], None]]) -> None:
        """Every lane of lockstep program ``chip`` sends to its counterpart; ``arrived[i]`` on lane i's arrival."""
        ...

    def unlock(self, why: str) -> None:
        """Stop a lockstep run whose lanes are apart at a send (`Rerun`)."""
        ...

    @property
    def foresees(self) -> bool:
        """Whether `foresee` would check anything (else the step need not list its collectives)."""
        ...

    def foresee(self, collectives: list[tuple[str, float, tuple[str, ...], int, dict[str, Any]]]) -> None:
        """Collectives the step will start (kind, bytes, axes, stage, ``exact``), checked early where that helps."""
        ...

    def send(self, chip: Any, nbytes: float, label: str, counterpart: Callable[[Any], Any],
             arrived: Callable[[Any], None]) -> None:
        """Every chip of ``chip``'s stage sends ``nbytes`` to its counterpart; ``arrived`` on the representative's."""
        ...

    def finish(self, trace: Any) -> None:
        """Scale the trace's counters to every chip and name the chips each representative stood for."""
        ...

    def upper_bound(self, per_chip: dict[Any, dict[str, float]]) -> float:
        """The step's upper bound, with the links of the groups it did not simulate."""
        ...

    def timeline_chip(self, peak: dict[Any, float], stage_of: dict[Any, int]) -> Any:
        """The chip whose memory timeline the exact run would report."""
        ...


class Executor:
    """Runs a collective's schedule or a step, exactly (``fast=False``: every chip, every transfer) or fast.

    The collective half is `simulator.collectives.fast_path.FastPath` (the API passes its ``mode`` too: ``full``
    asks for nothing fast); the step half builds a step's `Symmetry` and drives its reruns."""

    def __init__(self, fast: bool = True) -> None:
        self.fast = fast

    def __repr__(self) -> str:
        return f"Executor(fast={self.fast})"

    # -- a collective's schedule (the `FastPath` protocol) -------------------------------------------------------
    def reduced_eligible(self, mode: str, kind: str, data: Any, group: Group, net: Network,
                         one_to_one: bool = True) -> bool:
        """Whether the job allows reduced mode (`reduced.eligible`; ``mode='reduced'`` where not: an error)."""
        return _reduced.eligible(mode, kind, data, group, net, one_to_one) and self.fast

    def use_reduced(self, mode: str, eligible: bool, algorithm: Algorithm, auto: bool = False) -> bool:
        """Whether to build the job reduced (`reduced.use`)."""
        return _reduced.use(mode, eligible, algorithm, auto) and self.fast

    def direct_quotient(self, system: System, algorithm: Algorithm, job: Job) -> Any:
        """(quotient, group) of a ring algorithm built without its schedule (`ring_quotient.plan_quotient`)."""
        return _ring_quotient.plan_quotient(system, algorithm, job) if self.fast else None

    def quotient_run(self, system: System, plan: Any, mode: str, timing: bool) -> Any:
        """(quotient, group) to run ``plan`` on (`ring_quotient.run_quotient`); None: every transfer."""
        return _ring_quotient.run_quotient(system, plan, mode, timing) if self.fast else None

    def execute_aggregated(self, net: Network, transfers: list[Transfer],
                           buffers: dict[Any, dict[Any, np.ndarray]] | None, label: str) -> Completion:
        """Run a schedule by flow-level aggregation (`aggregate.execute_aggregated`; the exact figures: exact
        executors too)."""
        return _aggregate.execute_aggregated(net, transfers, buffers, label)

    def execute_quotient(self, net: Network, quotient: Any, label: str = "") -> Completion:
        """Run a quotient's representatives (`quotient.execute_quotient`)."""
        return _quotient.execute_quotient(net, quotient, label)

    def unfold(self, net: Network, action: Any, quotient: Any, before: dict[Channel, float]) -> None:
        """Every link of a representative's orbit carried what it carried (`quotient.unfold`)."""
        _quotient.unfold(net, action, quotient, before)

    def total_link_bytes(self, net: Network, groups: list[Group], group: Group,
                         link_bytes: dict[str, float]) -> float:
        """A reduced run's bytes over every link of the system (`reduced.total_link_bytes`); the trace names the
        links the rings stood for (`reduced.stand_in_rings`), so exports show every ring's spans."""
        _reduced.stand_in_rings(net, groups, link_bytes)
        return _reduced.total_link_bytes(net, groups, group, link_bytes)

    def every_link_bytes(self, net: Network, groups: list[Group], link_bytes: dict[str, float]) -> dict[str, float]:
        """A reduced run's bytes on every link its rings stood for (`reduced.every_link_bytes`)."""
        return _reduced.every_link_bytes(net, groups, link_bytes)

    # -- a step ---------------------------------------------------------------------------------------------------
    def symmetry(self, system: System, mesh: Any, stage_of: dict[Any, int], rings: bool = False,
                 axis_sets: list[tuple[str, ...]] | None = None, attempt: Attempt | None = None,
                 shared: dict | None = None) -> Representatives:
        """The step's representatives (`step_symmetry.Symmetry`: inactive, every chip running, where not fast or
        the step is not symmetric); ``attempt`` carries the single mechanisms a rerun turns off."""
        a = attempt or Attempt(fast=self.fast)
        if a.orbits is not None and self.fast and a.fast:  # one program per orbit of a node group (`orbit_run`)
            from simulator.acceleration.orbit_run import LockstepSymmetry, OrbitSymmetry

            kind = LockstepSymmetry if a.lockstep and not system.trace.enabled else OrbitSymmetry
            return kind(system, mesh, stage_of, a.orbits, rings, axis_sets, shared, a.node_allowed is None)
        return Symmetry(system, mesh, stage_of, self.fast and a.fast, rings, axis_sets, a.replay, a.avoid,
                        a.quotients, shared, a.node_allowed)

    def run_step(self, make: Callable[[Attempt], Any], *, quotients: bool = True, replay: bool = True,
                 orbits: bool = False) -> Outcome:
        """Run ``make(attempt)`` (a fresh run of the step for an attempt), rerun by `reruns.run_with_reruns`'s
        rules until a run needs none; ``quotients`` / ``replay`` False turn those mechanisms off (tests);
        ``orbits``: ``make`` runs an attempt's ``orbits`` (one program per orbit, `orbit_run`; rule 4)."""
        return run_with_reruns(make, Attempt(fast=self.fast, quotients=quotients, replay=replay), orbits)


FAST = Executor(fast=True)
EXACT = Executor(fast=False)


def executor(fast: bool) -> Executor:
    """`FAST` or `EXACT`."""
    return FAST if fast else EXACT


fast_path.register(FAST)
