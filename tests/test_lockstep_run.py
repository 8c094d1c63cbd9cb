"""A lockstep orbit run (`simulator.acceleration.orbit_run.LockstepSymmetry`: one program per pipeline stage,
standing for the stage's orbit representatives, each lane's waits booked from its own instant) gives the full
simulation's figures, as the orbit run with one program per orbit does (tests/test_orbit_run.py).

The systems are issue 29's 405B step on 16,384 H100 in small (data-parallel gradient AllReduces that NCCL's tuner
runs as a double binary tree, so a stage's replicas' pipeline messages arrive at different instants). The oracle
is the full simulation (``fast=False``: every chip's program, every transfer), which shares none of the lockstep
run's mechanism; the runs are untraced (a lockstep run runs only then)."""
from __future__ import annotations

import math

import pytest
from same_results import assert_same
from test_orbit_run import CASES, _step

from simulator.acceleration.orbit_run import LockstepSymmetry
from simulator.workloads.plans import step as step_module


@pytest.fixture(scope="module")
def full():
    return {name: _step(name, False, trace=False) for name in CASES}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_lockstep_run_gives_the_full_simulations_figures(full, name):
    (sim, exact), (fast, quick) = full[name], _step(name, True, trace=False)
    assert fast.reruns == ["mixed", "orbits"], fast.reruns
    assert isinstance(fast.sym, LockstepSymmetry) and fast.sym.active
    stages = 2
    assert len(fast.sym.chips()) == stages  # one program a stage ...
    lanes = fast.sym.lanes()
    assert sorted(c for group in lanes.values() for c in group) == sorted(fast.sym.orbit_members)  # ... for every orbit
    assert fast.lanes_apart > 0  # the stage's lanes did go apart (pipeline messages arriving at unlike instants)
    assert math.isclose(quick["step_time_s"], exact["step_time_s"], rel_tol=1e-12)
    assert_same(exact, quick)  # every figure: step, bubble, exposed per axis, busy fractions, bytes, memory
    assert_same(sim.metrics, fast.metrics)
    assert sim.system.network.link_bytes() == pytest.approx(fast.system.network.link_bytes(), rel=1e-12)
    assert sim.system.trace.bytes_by_interface == pytest.approx(fast.system.trace.bytes_by_interface, rel=1e-12)


def test_the_first_run_stops_at_its_start_where_a_collective_ahead_breaks_its_group(monkeypatch):
    """`Symmetry.foresee`: the stage's data-parallel tree AllReduce, checked when the step's group is chosen (its
    first collective), stops the first run then -- not where the tree starts, after every microbatch's forward."""
    stops = []
    run = step_module.TrainStep.run

    def noted(self):
        try:
            return run(self)
        finally:
            stops.append((type(self.sym).__name__, self.env.now))
    monkeypatch.setattr(step_module.TrainStep, "run", noted)
    fast, quick = _step("nodes:16:2", True, trace=False)
    (first, stopped), (second, end) = stops
    assert (first, second) == ("Symmetry", "LockstepSymmetry")
    assert end == quick["step_time_s"]
    assert stopped < quick["pipelined_s"] / 20  # at the first collective's start: a tiny part of the step


def test_lanes_apart_at_a_send_rerun_as_one_program_per_orbit(full, monkeypatch):
    """Where a lockstep program's lanes reach a pipeline send apart (made to, here: one lane a picosecond behind at
    the first send), the run stops (``unlocked``) and the orbit run with one program per orbit gives the figures."""
    send = step_module.TrainStep.send

    def apart(self, chip, stage, key):
        if self.lanes.get(chip) and not getattr(self, "_pushed", False):
            self._pushed = True
            self._skew[chip] = [0.0] + [-1e-12] * (len(self.lanes[chip]) - 1)
        return send(self, chip, stage, key)
    monkeypatch.setattr(step_module.TrainStep, "send", apart)
    fast, quick = _step("nodes:16:2", True, trace=False)
    assert fast.reruns == ["mixed", "orbits", "unlocked"], fast.reruns
    assert not isinstance(fast.sym, LockstepSymmetry) and fast.sym.active
    assert_same(full["nodes:16:2"][1], quick)


def test_a_traced_orbit_run_is_not_in_lockstep():
    """With a trace, spans would show every lane at its program's instants: one program per orbit runs."""
    fast, _ = _step("nodes:16:2", True, trace=True)
    assert fast.reruns == ["mixed", "orbits"] and not isinstance(fast.sym, LockstepSymmetry)


def test_an_interleaved_lockstep_run_gives_the_full_simulations_figures():
    """Interleaved stages (the 16k step's schedule): the last stage's chunk sends on to the first stage."""
    from simulator.hardware.specs import get_chip
    from simulator.workloads.plans.layout import parse_plan_mesh
    from simulator.workloads.plans.step import simulate_step
    from simulator.workloads.plans.train import TrainOptions

    cfg, mesh, topology, _ = CASES["nodes:16:2"]
    opts = TrainOptions(microbatches=4, schedule="interleaved", virtual_stages=2)

    def step(fast):
        return simulate_step(cfg, get_chip("h100"), parse_plan_mesh(mesh), opts, 64, 128, topology, trace=False,
                             calibrated=True, fast=fast)
    (sim, exact), (fast, quick) = step(False), step(True)
    assert fast.reruns == ["mixed", "orbits"] and isinstance(fast.sym, LockstepSymmetry) and fast.sym.lanes()
    assert_same(exact, quick)
    assert sim.system.network.link_bytes() == pytest.approx(fast.system.network.link_bytes(), rel=1e-12)
