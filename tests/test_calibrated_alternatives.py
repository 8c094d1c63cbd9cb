"""A calibrated run's alternatives are forecasts, never bare ideal closed forms (issue 27 item 6).

Oracles: the ideal run's own alternatives (ideal closed forms on peak links, a bound no calibrated time can beat) and
the calibrated simulation of each alternative asked for by name (what that alternative would run: on GPUs the
protocol NCCL's tuner picks for it, on TPUs the calibrated link rates). The alternatives' times are closed forms, the
simulations event-driven runs: they agree within ``REL`` (5%; the largest gap seen here is under 2%).

Every forecast is at least the topology bound. One ideal closed form is no bound of its calibrated forecast, listed in
``NOT_BELOW_IDEAL``: an H100 node's line Broadcast, whose ideal run sends its default pieces while the calibrated
LL128 run cuts the array finer (0.64x the ideal closed form); that is the GPU-node Broadcast closed form's business.
"""
from __future__ import annotations

import pytest

from simulator.collectives import run_collective
from simulator.engine.faults import LinkDown
from simulator.engine.system import System

REL = 0.05  #: closed form (an alternative's forecast) against its simulation
NOT_BELOW_IDEAL = {("h100", "broadcast", "line")}  #: see the module docstring

CASES = [("tpu-v5e", "torus:4x4", "broadcast", 64e6),  # the case: spanning_trees listed at its ideal form
         ("h100", "switch:8", "broadcast", 4e6),  # unidirectional runs Simple (NCCL's pick), not LL128 (fastest)
         ("h100", "switch:8", "all_reduce", 4e6)]


@pytest.mark.parametrize(("chip", "topology", "kind", "nbytes"), CASES)
def test_calibrated_alternatives_are_forecasts(chip: str, topology: str, kind: str, nbytes: float) -> None:
    bare = run_collective(kind, System(chip, topology=topology), nbytes)
    ideal = {a["algorithm"]: a["time_s"] for a in bare.alternatives}
    cal = run_collective(kind, System(chip, topology=topology, calibrated=True), nbytes)
    assert {a["algorithm"] for a in cal.alternatives} == set(ideal)
    for alt in cal.alternatives:
        name = alt["algorithm"]
        assert alt["time_is"] == "forecast"
        assert alt["time_s"] >= bare.topology_bound_s, name
        if (chip, kind, name) not in NOT_BELOW_IDEAL:
            assert alt["time_s"] >= ideal[name] * (1 - 1e-9), f"{name}: a forecast faster than its ideal bound"
        forced = run_collective(kind, System(chip, topology=topology, calibrated=True), nbytes, algorithm=name)
        assert forced.protocol == alt.get("protocol"), name
        assert alt["time_s"] == pytest.approx(forced.time_s, rel=REL), name
        if "ideal_time_s" in alt:  # TPU links: the ideal closed form kept beside the forecast, labelled
            assert alt["ideal_time_s"] == pytest.approx(ideal[name], rel=1e-9)


def test_ideal_alternatives_carry_no_forecast_label() -> None:
    r = run_collective("broadcast", System("tpu-v5e", topology="torus:4x4"), 64e6)
    assert r.alternatives and all("time_is" not in a for a in r.alternatives)


def test_faulted_tpu_alternatives_forecast_every_way_and_keep_the_choice() -> None:
    """Round a dead link on calibrated TPU links: every way's alternatives are forecasts above their ideal bound, the
    ideal bound kept beside each is the ideal run's own, and the choice (made by ideal closed form) is unchanged."""
    faults = [LinkDown(0, 1)]
    bare = run_collective("all_reduce", System("tpu-v5e", topology="torus:4x4", faults=faults), 64e6)
    cal = run_collective("all_reduce", System("tpu-v5e", topology="torus:4x4", calibrated=True, faults=faults), 64e6)
    ideal = {(a["algorithm"], a.get("route")): a["time_s"] for a in bare.alternatives}
    assert cal.algorithm == bare.algorithm
    assert {(a["algorithm"], a.get("route")) for a in cal.alternatives} == set(ideal)
    assert any(a.get("route") for a in cal.alternatives)  # a way round the fault is listed
    for alt in cal.alternatives:
        assert alt["time_is"] == "forecast"
        assert alt["ideal_time_s"] == pytest.approx(ideal[(alt["algorithm"], alt.get("route"))], rel=1e-9)
        assert alt["time_s"] > alt["ideal_time_s"]
    chosen = next(a for a in cal.alternatives if a["algorithm"] == cal.algorithm and not a.get("route"))
    assert chosen["time_s"] == pytest.approx(cal.time_s, rel=REL)
