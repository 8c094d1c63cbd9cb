"""A calibrated run's alternatives are forecasts, never bare ideal closed forms (issue 27 item 6).

Oracles: the ideal run's own alternatives (ideal closed forms on peak links, a bound no calibrated time can beat) and
the calibrated simulation of each alternative asked for by name (what that alternative would run: on GPUs the
protocol NCCL's tuner picks for it, on TPUs the calibrated link rates). The alternatives' times are closed forms, the
simulations event-driven runs: they agree within ``REL`` (5%; the largest gap seen here is under 2%).

Every forecast is at least the topology bound and at least its own ideal closed form (issue 31: the ideal ring
Broadcast and Reduce now pipeline the pieces that suit their links, as the calibrated ones do; with one piece the ideal
form of an H100 switch:8 64 MB ``line`` Broadcast was 3.7x its LL128 forecast, no bound). `test_root_ideal_forms_bound_
forecasts` checks every root algorithm on a grid of GPU systems and sizes; two cases are strict xfails with their cause
(`LATENCY_BELOW_IDEAL`).
"""
from __future__ import annotations

import pytest

from simulator.collectives import run_collective
from simulator.engine.faults import LinkDown
from simulator.engine.system import System

REL = 0.05  #: closed form (an alternative's forecast) against its simulation

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
        assert alt["time_s"] >= ideal[name] * (1 - 1e-9), f"{name}: a forecast faster than its ideal bound"
        forced = run_collective(kind, System(chip, topology=topology, calibrated=True), nbytes, algorithm=name)
        assert forced.protocol == alt.get("protocol"), name
        assert alt["time_s"] == pytest.approx(forced.time_s, rel=REL), name
        if "ideal_time_s" in alt:  # TPU links: the ideal closed form kept beside the forecast, labelled
            assert alt["ideal_time_s"] == pytest.approx(ideal[name], rel=1e-9)


ROOT_GRID = [(chip, topology, kind, nbytes) for chip in ("h100", "a100") for topology in ("switch:8", "nodes:2:8",
                                                                                           "nodes:4:8")
             for kind in ("broadcast", "reduce", "gather", "scatter") for nbytes in (1e6, 64e6, 1e9)]
#: (chip, topology, kind, bytes, algorithm) whose ideal closed form lies above its forecast, and why: at 1 MB NCCL's LL
#: hop latencies (half a ring step: NVLink 0.3 us, InfiniBand 1.35 us; src/graph/tuning.cc) are below the ideal links'
#: wire latencies (NVLink 1 us, InfiniBand 2.5 us: topologies/switch.py, topologies/multilevel.py), so the "ideal"
#: latency is no lower bound of the calibrated one -- a preset inconsistency, not a pricing error. Measured: nodes:2:8
#: ideal 35.56 us against the LL forecast 31.19 us; at ideal rates with LL's hop latencies the same form is 13.69 us.
LATENCY_BELOW_IDEAL = {("h100", "nodes:2:8", "broadcast", 1e6, "line"), ("h100", "nodes:4:8", "broadcast", 1e6, "line")}


def _ideal_and_forecast(chip: str, topology: str, kind: str, nbytes: float) -> tuple[dict[str, float], list[dict]]:
    from simulator.collectives.api import plan_collective  # plans only: the closed forms, no simulation
    bare = plan_collective(kind, System(chip, topology=topology, trace=False), nbytes)
    cal = plan_collective(kind, System(chip, topology=topology, calibrated=True, trace=False), nbytes)
    return {a["algorithm"]: a["time_s"] for a in bare.alternatives}, cal.alternatives


@pytest.mark.parametrize(("chip", "topology", "kind", "nbytes"), ROOT_GRID)
def test_root_ideal_forms_bound_forecasts(chip: str, topology: str, kind: str, nbytes: float) -> None:
    """Every root algorithm's ideal closed form (ideal links: line rate, wire latency) is at most its calibrated
    forecast (calibrated rates, NCCL's protocol and launch): an ideal figure is a bound. Oracle: the physics that a
    calibrated link is never faster than its peak; on main 36 of these 168 pairs broke it (ring Broadcast and
    Reduce priced at one piece, forecast down to 0.20x the ideal form)."""
    ideal, forecasts = _ideal_and_forecast(chip, topology, kind, nbytes)
    assert forecasts and {a["algorithm"] for a in forecasts} == set(ideal)
    for alt in forecasts:
        name = alt["algorithm"]
        if (chip, topology, kind, nbytes, name) in LATENCY_BELOW_IDEAL:
            continue  # `test_ideal_latency_above_protocol_latency_is_no_bound`
        assert ideal[name] <= alt["time_s"] * (1 + 1e-9), \
            f"{name}: ideal {ideal[name]:.6g} s above its forecast {alt['time_s']:.6g} s ({alt.get('protocol')})"


@pytest.mark.xfail(strict=True, reason="LL's hop latency (NVLink 0.3 us, IB 1.35 us) is below the ideal links' wire "
                                       "latency (1 us, 2.5 us): a preset inconsistency (`LATENCY_BELOW_IDEAL`)")
@pytest.mark.parametrize(("chip", "topology", "kind", "nbytes", "name"), sorted(LATENCY_BELOW_IDEAL))
def test_ideal_latency_above_protocol_latency_is_no_bound(chip: str, topology: str, kind: str, nbytes: float,
                                                          name: str) -> None:
    ideal, forecasts = _ideal_and_forecast(chip, topology, kind, nbytes)
    forecast = next(a["time_s"] for a in forecasts if a["algorithm"] == name)
    assert ideal[name] <= forecast * (1 + 1e-9)


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


def test_a_tie_of_closed_forms_keeps_the_tuners_choice_and_every_alternative() -> None:
    """Ideal H100 switch:8, 64 MB Broadcast: ``line`` and ``unidirectional`` have one closed form (the same chain of 7
    hops through the switch, 157.06 us). ``auto`` keeps the tuner's tie rule (a ring that uses the wraparound first:
    `algorithm.fastest`) and lists every applicable algorithm; a tie once went to ``line`` (first by name) and the
    alternatives shrank to it alone."""
    r = run_collective("broadcast", System("h100", topology="switch:8"), 64e6)
    times = {a["algorithm"]: a["time_s"] for a in r.alternatives}
    assert set(times) == {"line", "unidirectional", "switch_relay"}
    assert times["line"] == pytest.approx(times["unidirectional"], rel=1e-12)
    assert r.algorithm == "unidirectional"
