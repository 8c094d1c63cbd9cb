"""The one rerun driver (`simulator.acceleration.reruns`): its rules on scripted runs, then each rerun reason
forced in both fast steps (the training step and the decode / simple training step), whose figures must
equal an exact run's (every chip simulated)."""
from __future__ import annotations

import dataclasses
import itertools
from types import SimpleNamespace

import pytest
from same_results import assert_same

from simulator.acceleration.replay import Replays
from simulator.acceleration.reruns import Attempt, run_with_reruns
from simulator.acceleration.step_symmetry import Rerun, Symmetry
from simulator.hardware.specs import get_chip
from simulator.workloads.budget import Parallelism
from simulator.workloads.plans.layout import TrainOptions, parse_plan_mesh
from simulator.workloads.plans.step import simulate_step
from simulator.workloads.simulate import simulate_decode
from simulator.workloads.transformer import get_model


class Scripted:
    """A run whose findings a script decides from its attempt: ``flags(attempt)`` -> dict of mixed, conflict,
    broken, node_next, disturbed, stop (raise `Rerun`)."""

    def __init__(self, attempt: Attempt, flags) -> None:
        self.attempt, f = attempt, flags(attempt)
        self.stop = f.get("stop", False)
        replays = SimpleNamespace(conflict=f.get("conflict", False), disturbed=f.get("disturbed", frozenset()))
        self.sym = SimpleNamespace(active=attempt.fast, mixed=f.get("mixed", False), broken=f.get("broken", False),
                                   node_next=f.get("node_next"), replays=replays)

    def run(self):
        if self.stop:
            raise Rerun()
        return self.attempt


def drive(flags, first=None):
    tried: list[Attempt] = []

    def make(attempt):
        tried.append(attempt)
        return Scripted(attempt, flags)
    outcome = run_with_reruns(make, first or Attempt())
    return outcome, tried


def test_a_clean_run_is_not_rerun():
    outcome, tried = drive(lambda a: {})
    assert outcome.reasons == [] and tried == [Attempt()] and outcome.figures == Attempt()


def test_mixed_narrows_the_quotient_groups_then_drops_quotients():
    """Mixed with groups g1, g2 seen: rerun allowing those; mixed again with the same: rerun without quotients."""
    g = frozenset({"g1", "g2"})
    outcome, tried = drive(lambda a: {"mixed": a.quotients, "node_next": g, "stop": a.quotients and not a.node_allowed})
    assert [(a.quotients, a.node_allowed) for a in tried] == [(True, None), (True, g), (False, None)]
    assert outcome.reasons == ["mixed", "mixed"] and outcome.figures == tried[-1]


def test_mixed_after_every_narrowing_runs_without_quotients():
    groups = itertools.count()
    outcome, tried = drive(lambda a: {"mixed": a.quotients, "node_next": frozenset({next(groups)})})
    assert [a.quotients for a in tried] == [True, True, True, True, False]
    assert outcome.reasons == ["mixed", "mixed", "mixed", "unquotiented"]


def test_conflicts_avoid_the_disturbed_replays_twice_then_run_without_replays():
    outcome, tried = drive(lambda a: {"conflict": a.replay, "disturbed": frozenset({len(a.avoid)})})
    assert [(a.replay, a.avoid) for a in tried] == [(True, frozenset()), (True, {0}), (True, {0, 1}),
                                                   (False, {0, 1, 2})]
    assert outcome.reasons == ["conflict"] * 3


def test_a_broken_run_is_rerun_exactly_even_with_a_conflict():
    outcome, tried = drive(lambda a: {"broken": a.fast, "conflict": a.fast})
    assert tried == [Attempt(), Attempt(fast=False)] and outcome.reasons == ["broken"]


def test_a_rerun_request_outside_the_mixed_reruns_is_a_bug_that_propagates():
    with pytest.raises(Rerun):
        drive(lambda a: {"conflict": a.replay and not a.avoid, "disturbed": frozenset({1}), "stop": bool(a.avoid)})


# -- each reason forced in the real fast steps: fast == exact ------------------------------------------------------
CFG = dataclasses.replace(get_model("llama-2-7b"), n_layers=4)
SPEC = get_chip("tpu-v5p")


def _train(fast: bool):
    return simulate_step(CFG, SPEC, parse_plan_mesh("data=4,model=4"), TrainOptions(), 8, 128, "torus:4x4", fast=fast)


def _decode(fast: bool):
    sim = simulate_decode(CFG, SPEC, 8, 512, Parallelism(4, 4), topology="torus:4x4", fast=fast)
    return sim, sim.summary()


STEPS = {"train": _train, "decode": _decode}


def _force(monkeypatch, reason: str) -> None:
    real = Symmetry.finish

    def finish(self, trace):
        real(self, trace)
        if reason == "broken":
            self.broken = self.broken or self.active
        elif reason == "mixed":
            self.mixed = self.mixed or self.quotients  # mixed while quotients are on: the rerun drops them

    if reason == "conflict":
        replay = Replays._replay

        def disturbed(self, group, template):
            self.conflict = True
            self.disturbed.add(tuple(group.keys))
            return replay(self, group, template)
        monkeypatch.setattr(Replays, "_replay", disturbed)
    else:
        monkeypatch.setattr(Symmetry, "finish", finish)


@pytest.fixture(scope="module")
def exact():
    return {name: step(False)[1] for name, step in STEPS.items()}


@pytest.mark.parametrize("reason", ["mixed", "conflict", "broken"])
@pytest.mark.parametrize("name", sorted(STEPS))
def test_each_rerun_reason_gives_the_exact_figures(monkeypatch, exact, name, reason):
    _force(monkeypatch, reason)
    sim, figures = STEPS[name](True)
    monkeypatch.undo()
    assert sim.reruns and set(sim.reruns) == {reason}, sim.reruns
    if reason == "broken":  # rerun exactly: every chip
        assert sim.sym is None or not sim.sym.active
    assert_same(exact[name], figures)
