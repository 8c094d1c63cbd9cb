"""The one driver of a fast step's reruns: when a symmetric run must be run again, and how.

A fast step (`simulator.acceleration.step_symmetry.Symmetry`) runs representatives and trusts three things
it can only check as it goes; each, found false, asks for a rerun, and this module is the only place that
decides the next attempt. Both fast steps use it: the training step (`simulator.workloads.plans.step.
simulate_step`) and the inference / simple training step (`simulator.workloads.simulate.StepSimulation.run`).

The rules, in order (each rerun starts from a fresh system; every figure of the last run is the answer):

1. ``mixed`` (`Symmetry.mixed`): a class of links ran some collectives on a quotient and some not, or (GPU
   nodes, `simulator.acceleration.node_quotients`) a collective was not equivariant under the step's
   group (the run stopped early, `Rerun`). Rerun with the quotient groups every collective seen was
   equivariant under (``node_next``), up to `MIXED_TRIES` times, then without quotients.
2. ``conflict`` (`simulator.acceleration.replay.Replays.conflict`): a replayed collective turned out not
   alone on its links. Rerun without replaying those (``avoid``), twice, then without replays.
3. ``broken`` (`Symmetry.broken`): a stage's chips turned out unlike. Rerun exactly (``fast=False``: every
   chip); a broken run is not rerun for a conflict first, since the exact run has no replays. A run stops
   (`Rerun`) as soon as it finds them unlike, unless it is ``mixed`` already.
4. ``orbits`` (a step that can run one program per orbit, ``orbits=True``: the training step on GPU nodes,
   `simulator.acceleration.orbit_run`): where the group a broken run used -- or, on ``mixed``, the largest
   group the next attempt would use -- does not map a stage's chips onto one another (its orbits are smaller
   than a stage), the step reruns on that group with one program per orbit instead: exact by the group's
   symmetry alone (every chip of an orbit runs its representative's program on the image links), so it needs
   no stage's chips alike. The stage-representative attempt on such a group is skipped: nothing but a
   coincidence could make a stage's chips alike under it (tests/test_orbit_run.py). An orbit run that finds a
   link asked for in the orbits of both its groups (``narrowed``: `orbit_run.OrbitSymmetry._claim`) reruns with
   every collective on the one group; one that finds a collective or send its group does not hold (``mixed``,
   `Rerun`) is followed by the exact run (``broken``). The orbit run is first tried in lockstep (trace off: one
   program per stage standing for the stage's orbit representatives, `orbit_run.LockstepSymmetry`); one whose
   lanes turn out apart at a pipeline send (``unlocked``) reruns with one program per orbit.

Before them, ``chained`` (`simulator.acceleration.chain_run`): a chain run in one timer turned out not alone on
its links (the run stopped at once, `Rerun`). The same attempt reruns without chains, and so does every later
rerun of the step (they share its plans).

Every rerun gives the exact run's figures (tests/test_reruns.py holds each reason's fast run against an
exact one); the reasons taken are returned, in order, for tests and reports.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar

from simulator.acceleration.chain_run import no_chains
from simulator.acceleration.step_symmetry import Rerun

MIXED_TRIES = 3  #: reruns with narrower quotient groups before running without quotients
CONFLICT_TRIES = 3  #: reruns for replay conflicts: two avoiding the disturbed replays, the last without any
REASONS = ("chained", "mixed", "unquotiented", "conflict", "orbits", "unlocked", "narrowed", "broken")


@dataclass(frozen=True)
class Attempt:
    """How one run of a step is set up: ``fast`` (representatives), ``quotients`` (collectives on quotients),
    ``replay`` (repeated collectives replayed), ``avoid`` (replays not to take), ``node_allowed`` (GPU
    nodes: the quotient groups allowed; None: any; in an orbit run, empty: no wider group), ``orbits`` (the name of
    the node group whose orbits each run one program: `simulator.acceleration.orbit_run`; None: one program per
    pipeline stage), ``lockstep`` (an orbit run with one program per stage whose lanes are the stage's orbit
    representatives: `orbit_run.LockstepSymmetry`)."""

    fast: bool = True
    quotients: bool = True
    replay: bool = True
    avoid: frozenset = frozenset()
    node_allowed: frozenset | None = None
    orbits: str | None = None
    lockstep: bool = False


class FastRun(Protocol):
    """One run of a step: ``run()`` gives its figures (or raises `Rerun`), then ``sym`` says what it found
    (None, or an inactive `Symmetry`: every chip ran, nothing to rerun)."""

    @property
    def sym(self) -> Any: ...  # an attribute or a read-only property

    def run(self) -> Any: ...


R = TypeVar("R", bound=FastRun)


@dataclass
class Outcome:
    """The last run, its figures, and the rerun reasons taken (of `REASONS`, in order)."""

    run: Any
    figures: Any
    reasons: list[str]


def _flag(sym: Any, name: str) -> bool:
    return bool(sym is not None and getattr(sym, "active", True) and getattr(sym, name))


def _chained(sym: Any) -> bool:
    chains = getattr(sym, "chains", None) if sym is not None else None
    return bool(chains is not None and chains.conflict)


def _conflict(sym: Any) -> bool:
    return bool(sym is not None and getattr(sym, "active", True) and sym.replays.conflict)


def run_with_reruns(make: Callable[[Attempt], R], first: Attempt = Attempt(), orbits: bool = False) -> Outcome:
    """Run ``make(first)``, then rerun by the module's rules until a run needs none; ``make`` builds a fresh
    run (on a fresh system) for an attempt (``orbits``: it runs an attempt's ``orbits`` too, rule 4). A `Rerun`
    raised by the first run, a ``mixed`` rerun with quotients or an orbit run stops that run (``mixed``), and so
    does one any fast run raises with ``broken`` set (a stage's chips found unlike as they went: the exact run
    follows); raised by any other run it is a bug, and propagates."""
    reasons: list[str] = []

    def go(attempt: Attempt, stop: bool = False) -> tuple[R, Any]:
        sim = make(attempt)
        try:
            return sim, sim.run()
        except Rerun:  # stopped early: ``mixed`` says so, and the next attempt narrows the quotients; or ``broken``
            if _chained(sim.sym):  # a chain was not alone on its links: the same attempt without chains
                reasons.append("chained")
                with no_chains():
                    return go(attempt, stop)
            if not (stop or _flag(sim.sym, "broken")):  # (a stage's chips unlike, any fast run: then the exact run)
                raise
            return sim, None

    def by_orbits(group: str) -> Outcome:  # rule 4: one program per orbit of ``group``, else the exact run
        reasons.append("orbits")
        attempt = Attempt(fast=True, replay=False, orbits=group, lockstep=True)
        sim, figures = go(attempt, stop=True)
        if _flag(sim.sym, "unlocked"):  # lanes apart at a send: one program per orbit
            reasons.append("unlocked")
            attempt = replace(attempt, lockstep=False)
            sim, figures = go(attempt, stop=True)
        if _flag(sim.sym, "narrowed"):  # a link asked for in two groups' orbits: every collective on ``group``
            reasons.append("narrowed")
            sim, figures = go(replace(attempt, node_allowed=frozenset()), stop=True)
            if _flag(sim.sym, "unlocked"):
                reasons.append("unlocked")
                sim, figures = go(replace(attempt, node_allowed=frozenset(), lockstep=False), stop=True)
        if figures is not None and not (_flag(sim.sym, "mixed") or _flag(sim.sym, "broken")):
            return Outcome(sim, figures, reasons)
        reasons.append("broken")
        sim, figures = go(Attempt(fast=False))
        return Outcome(sim, figures, reasons)

    attempt = first
    sim, figures = go(attempt, stop=True)
    for _ in range(MIXED_TRIES):
        if not _flag(sim.sym, "mixed"):
            break
        reasons.append("mixed")
        node_next = sim.sym.node_next
        allowed = node_next if node_next and attempt.node_allowed != node_next else None
        names = allowed or getattr(sim.sym, "node_failed", None)  # (that collective's groups: the orbit run checks)
        group = _orbit_group(sim.sym, names) if orbits and names else None
        if group is not None:  # a stage's representatives would stand for chips no symmetry maps onto theirs
            return by_orbits(group)
        attempt = replace(attempt, quotients=allowed is not None, node_allowed=allowed)
        sim, figures = go(attempt, stop=attempt.quotients)
    if _flag(sim.sym, "mixed"):
        reasons.append("unquotiented")
        attempt = replace(attempt, quotients=False, node_allowed=None)
        sim, figures = go(attempt)
    for tries in range(CONFLICT_TRIES):
        if not _conflict(sim.sym) or _flag(sim.sym, "broken"):
            break
        reasons.append("conflict")
        attempt = replace(attempt, replay=tries < CONFLICT_TRIES - 1, avoid=attempt.avoid | sim.sym.replays.disturbed)
        sim, figures = go(attempt)
    if _flag(sim.sym, "broken"):
        action = getattr(sim.sym, "node_action", None) if orbits and attempt.orbits is None else None
        group = _orbit_group(sim.sym, frozenset({action.name})) if action is not None else None
        if group is not None:
            return by_orbits(group)
        reasons.append("broken")
        sim, figures = go(Attempt(fast=False))
    return Outcome(sim, figures, reasons)


def _orbit_group(sym: Any, names: frozenset) -> str | None:
    """The name of the largest group of ``names`` a step's orbit run can use (`orbit_run.orbit_group`), where its
    orbits are smaller than a pipeline stage; else None."""
    from simulator.acceleration.orbit_run import orbit_group

    return orbit_group(sym, names)
