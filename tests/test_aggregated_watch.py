"""Aggregated collectives under a command's watch (issues 16 and 21): the run-length estimate counts what the
aggregated executor reports, and the wall-clock limit and progress reach a run of few SimPy events.

An aggregated run handles a whole ring step of transfers inside one timer event, so the System's check every
`TICK` events may never fire; the executor reports its arrivals to `System.pulse` instead.
"""
from __future__ import annotations

import pytest

from simulator.collectives import plan_collective, run_collective
from simulator.engine.system import System
from simulator.engine.watch import TICK, RunWatch, watching
from simulator.errors import RunawayError
from topologies.fattree import fattree

#: the first has more than one TICK of transfers at 1 MB (11,272), which the wall-clock limit and progress tests need
CASES = [("nodes:16:8", "h100", "hierarchical_pipelined"), ("torus:8x8", "tpu-v5p", "bidirectional")]


def _transfers(topology: str, chip: str, algorithm: str) -> int:
    plan = plan_collective("all_reduce", System(chip, topology=topology, trace=False), 1e6, algorithm=algorithm,
                           mode="full")
    return len(plan.schedule.transfers)


@pytest.mark.parametrize(("topology", "chip", "algorithm"), CASES)
def test_estimate_of_an_aggregated_run_matches_what_it_reports(topology: str, chip: str, algorithm: str) -> None:
    # what the watch counted: the System's own SimPy events plus the executor's reports (two units per
    # transfer, one report per 4,096 arrivals and one at the end): the estimate is within a factor of two
    watch = RunWatch()
    system = System(chip, topology=topology, trace=False)
    with watching(watch):
        run_collective("all_reduce", system, 1e6, algorithm=algorithm, mode="full")
    n = _transfers(topology, chip, algorithm)
    assert watch.events - system.events_processed == 2 * n  # every arrival reported, once
    assert watch.estimate == 2 * n
    assert watch.estimate / 2 <= watch.events <= 2 * watch.estimate


def test_estimate_of_a_plain_run_is_the_right_order_of_magnitude() -> None:
    # the plain path: about three events per transfer and hop; GPU routes cross two or three hops
    watch = RunWatch()
    system = System("h100", topology="nodes:8:8", trace=False)
    with watching(watch):
        run_collective("all_reduce", system, 1e6, algorithm="hierarchical_pipelined", aggregate=False)
    assert watch.estimate == 3 * _transfers("nodes:8:8", "h100", "hierarchical_pipelined")
    assert watch.estimate / 10 <= watch.events <= 10 * watch.estimate


def test_wall_clock_limit_stops_an_aggregated_run_of_few_events() -> None:
    topology, chip, algorithm = CASES[0]
    free = System(chip, topology=topology, trace=False)
    run_collective("all_reduce", free, 1e6, algorithm=algorithm)
    assert free.events_processed < TICK  # the check every TICK events would never have run
    assert _transfers(topology, chip, algorithm) > 4096  # but the executor reports at least once before the end
    limited = System(chip, topology=topology, trace=False, wall_clock_limit_s=1e-9)
    with pytest.raises(RunawayError, match="wall_clock_limit_s=1e-09"):
        run_collective("all_reduce", limited, 1e6, algorithm=algorithm)


def test_progress_reaches_the_watch_during_an_aggregated_run() -> None:
    # the progress callback runs several times although the System ticks (every TICK events) never fire
    seen: list[int] = []
    watch = RunWatch(on_progress=lambda w: seen.append(w.events))
    topology, chip, algorithm = CASES[0]
    with watching(watch):
        run_collective("all_reduce", System(chip, topology=topology, trace=False), 1e6, algorithm=algorithm)
    n = _transfers(topology, chip, algorithm)
    assert len(seen) >= n // 4096
    assert seen == sorted(seen) and seen[-1] == watch.events


def test_pulse_outside_a_run_checks_no_wall_clock() -> None:
    # a System's pulse between runs (no run under way) counts progress but cannot trip the limit
    system = System("h100", topology="nodes:2:8", trace=False, wall_clock_limit_s=1e-9)
    watch = RunWatch()
    with watching(watch):
        system.pulse(10)
    assert watch.events == 10


def test_long_run_warning_names_the_whole_schedule() -> None:
    # the warning comes once the schedule is built, with its whole estimate (two units per transfer), not the
    # part built when the estimate first passed the threshold; a threshold far below the size forces it
    from simulator.engine import watch as watch_module

    warnings: list[int] = []
    watch = RunWatch(on_long_run=lambda w, hint: warnings.append(w.estimate))
    topology, chip, algorithm = CASES[0]
    n = _transfers(topology, chip, algorithm)
    threshold = watch_module.LONG_RUN_EVENTS
    watch_module.LONG_RUN_EVENTS = 1_000
    try:
        with watching(watch):
            run_collective("all_reduce", System(chip, topology=topology, trace=False), 1e6, algorithm=algorithm,
                           mode="full")
    finally:
        watch_module.LONG_RUN_EVENTS = threshold
    assert warnings == [2 * n]


def test_budget_still_refuses_a_schedule_while_it_is_built() -> None:
    # more than TICK transfers (38,920 on 32 nodes): the first report, two units each, passes the budget
    system = System("h100", topology="nodes:32:8", trace=False)
    with watching(RunWatch(max_events=10_000)), pytest.raises(RunawayError, match="budget of 10,000"):
        plan_collective("all_reduce", system, 1e6, algorithm="hierarchical_pipelined")


@pytest.mark.parametrize(("make", "algorithm"), [
    (lambda: fattree(6, 2, nodes_per_unit=3, spines=2), "hierarchical3_pipelined"),  # NIC routes via leaf and spine
    (lambda: "nodes:3:4", "hierarchical_pipelined"),
], ids=["fattree-6-2", "nodes-3-4"])
def test_cut_through_routes_aggregated_equal_the_plain_path(make, algorithm) -> None:
    # multi-hop cut-through routes taken straight from the route cache (`plain_route`, `cut_through`): the
    # same time, bytes per link and per interface, and spans as the plain path, which sends Network.message
    runs = []
    for aggregate in (True, False):
        system = System("h100", topology=make())
        result = run_collective("all_reduce", system, 3e6, algorithm=algorithm, aggregate=aggregate, mode="full")
        runs.append((system, result))
    (fs, fr), (ps, pr) = runs
    assert fr.time_s == pytest.approx(pr.time_s, rel=1e-9)
    assert fr.link_bytes.keys() == pr.link_bytes.keys()
    assert all(fr.link_bytes[k] == pytest.approx(v, rel=1e-12) for k, v in pr.link_bytes.items())
    assert dict(fs.trace.bytes_by_interface) == pytest.approx(dict(ps.trace.bytes_by_interface), rel=1e-12)
    key = lambda s: (str(s.chip), s.unit, s.label, round(s.start, 15), round(s.end, 15))  # noqa: E731
    assert len(fs.trace.spans) == len(ps.trace.spans)
    for a, b in zip(sorted(fs.trace.spans, key=key), sorted(ps.trace.spans, key=key), strict=True):
        assert (str(a.chip), a.unit, a.nbytes) == (str(b.chip), b.unit, b.nbytes)
        assert a.start == pytest.approx(b.start, rel=1e-9, abs=1e-15)
        assert a.end == pytest.approx(b.end, rel=1e-9, abs=1e-15)
    # the oracle for the bytes: an AllReduce moves 2 (n-1)/n of V out of every chip at least
    n = len(fs.network.chips)
    assert fr.total_link_bytes >= 2 * (n - 1) / n * 3e6 * n * (1 - 1e-12)
