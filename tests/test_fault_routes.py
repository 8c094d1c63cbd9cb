"""Fault-aware ``auto`` (`simulator.collectives.fault_routes`): the invariants of issue 31, item 1.

Oracles: the same collective on the same topology with the cable removed (a degraded link can do anything a
missing one can, so it is never slower), and on the healthy topology (a fault never speeds anything up); and
the line's closed form from first principles for the torus:8 AllReduce of the issue.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator import System
from simulator.collectives import run_collective
from simulator.engine.faults import ChipSlow, LinkDegraded, LinkDown

CABLES = {"torus:8": (0, 1), "torus:6": (2, 3), "torus:4x4": ((0, 0), (0, 1)), "torus:3x4": ((1, 2), (1, 3)),
          "mesh:4x4": ((1, 1), (1, 2)), "ring:5": (4, 0)}
KINDS = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all", "broadcast")
TOL = 1e-6


def _time(topology: str, kind: str, faults: list, nbytes: float = 64e6) -> float:
    return run_collective(kind, System("tpu-v5e", topology=topology, faults=faults), nbytes).time_s


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topology=st.sampled_from(sorted(CABLES)), kind=st.sampled_from(KINDS),
       fraction=st.floats(min_value=0.05, max_value=0.99))
def test_degrading_never_slower_than_removing_and_healthy_never_slower(topology: str, kind: str,
                                                                       fraction: float) -> None:
    src, dst = CABLES[topology]
    healthy = _time(topology, kind, [])
    degraded = _time(topology, kind, [LinkDegraded(src, dst, fraction)])
    down = _time(topology, kind, [LinkDown(src, dst)])
    assert degraded <= down * (1 + TOL)
    assert healthy <= degraded * (1 + TOL)


def test_half_speed_link_beats_a_dead_one() -> None:
    """torus:8 AllReduce of 1 GB on tpu-v5e, one cable at half speed (44.45 ms on the bidirectional ring through
    it; 23.02 ms on the pipelined line avoiding it, the dead cable's time). The split ring, chosen by simulating the
    candidates, keeps a share x of the array on the ring and the rest on the line, the slow cable's load balanced
    against the line's ends, from first principles (a = (n - 1)/n, f = 0.5): x a / f = x a + (1 - x), so
    x = 1 / (a / f + 1 - a) = 8/15 and the bandwidth term is x a / f x V / W = 0.933 V / W = 20.74 ms, below the
    V / W = 22.2 ms that any line (a dead cable) needs."""
    result = run_collective("all_reduce", System("tpu-v5e", topology="torus:8",
                                                 faults=[LinkDegraded(0, 1, 0.5)]), 1e9)
    down = run_collective("all_reduce", System("tpu-v5e", topology="torus:8", faults=[LinkDown(0, 1)]), 1e9)
    link_bps = 45e9  # tpu-v5e ICI, one direction (REFERENCE.md)
    a, f = 7 / 8, 0.5
    x = 1 / (a / f + 1 - a)
    balanced_s = x * a / f * 1e9 / link_bps
    assert balanced_s <= result.time_s <= 1.05 * balanced_s
    assert result.time_s < 1e9 / link_bps <= down.time_s
    assert result.algorithm == "split_ring"
    tried = [alt for alt in result.alternatives if "simulated_s" in alt]
    assert any(alt.get("route") for alt in result.alternatives) and len(tried) >= 2
    assert min(alt["simulated_s"] for alt in tried) == result.time_s  # the trial run is the run


def test_a_slightly_slow_link_keeps_its_ring() -> None:
    """One cable at 95%: the bidirectional ring through it (about healthy / 0.95 = 20.5 ms, its closed form) beats
    the line a dead cable forces (at least V / W = 22.2 ms); the closed forms alone, weighed for unlike links,
    chose the line."""
    result = run_collective("all_reduce", System("tpu-v5e", topology="torus:8",
                                                 faults=[LinkDegraded(0, 1, 0.95)]), 1e9)
    assert result.time_s < 1e9 / 45e9
    assert "avoids" not in (result.note or "")


def test_named_algorithm_is_not_rerouted() -> None:
    """Only ``auto`` looks for ways round a fault: a named algorithm runs on the network as faulted."""
    result = run_collective("all_reduce", System("tpu-v5e", topology="torus:8", faults=[LinkDegraded(0, 1, 0.5)]),
                            64e6, algorithm="bidirectional")
    assert "around the link faults" not in (result.note or "")
    assert all("route" not in alt for alt in result.alternatives)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topology=st.sampled_from(sorted(CABLES)), kind=st.sampled_from(KINDS), chip=st.integers(0, 4),
       factor=st.floats(min_value=0.05, max_value=0.99))
def test_a_slow_chip_never_speeds_a_collective_up(topology: str, kind: str, chip: int, factor: float) -> None:
    healthy = _time(topology, kind, [])
    slow = _time(topology, kind, [ChipSlow(chip, factor)])
    assert healthy <= slow * (1 + TOL)


def test_a_slow_chip_at_a_line_end_is_priced_and_auto_is_no_slower() -> None:
    """torus:8 AllReduce of 1 GB, chip 3 at half speed (its two cables at W / 2): the bidirectional ring through it
    takes 54.2 ms. Leaving out its cable to chip 4 puts it at the end of a pipelined line whose one slow link
    carries the whole array each way: V / (W / 2) = 44.4 ms plus the pipeline's fill, from first principles. auto
    prices that way and runs nothing slower (slow_chip_line, tests/test_slow_chip_line.py). Never below the bound:
    the slow chip must still send V and take V back over 2 x W / 2 (22.2 ms)."""
    result = run_collective("all_reduce", System("tpu-v5e", topology="torus:8", faults=[ChipSlow(3, 0.5)]), 1e9)
    ring = run_collective("all_reduce", System("tpu-v5e", topology="torus:8", faults=[ChipSlow(3, 0.5)]), 1e9,
                          algorithm="bidirectional")
    line_floor_s = 1e9 / (0.5 * 45e9)
    (end,) = [alt for alt in result.alternatives
              if alt["algorithm"] == "line_pipelined" and "slow chip at a line's end" in alt.get("route", "")]
    assert line_floor_s <= end["time_s"] <= 1.05 * line_floor_s < ring.time_s
    assert result.topology_bound_s == pytest.approx(1e9 / 45e9, rel=1e-3)
    assert result.topology_bound_s <= result.time_s <= end["time_s"]


def test_ways_name_cables_as_the_fault_flag_writes_them() -> None:
    """A 2-D grid's cables are named by coordinates (as in ``--fault link:1,1->1,2``), a ring's by chip id."""
    from simulator import System
    from simulator.collectives.fault_routes import alternatives
    from simulator.engine.faults import LinkDegraded

    grid = System("tpu-v5e", topology="torus:4x4")
    a, b = grid.network.chip_at((1, 1)), grid.network.chip_at((1, 2))
    grid = System("tpu-v5e", topology="torus:4x4", faults=[LinkDegraded(a, b, 0.5)])
    labels = [route.label for route in alternatives(grid)]
    assert any("avoids the degraded link 1,1-1,2" in label for label in labels), labels
    ring = System("tpu-v5e", topology="torus:8", faults=[LinkDegraded(0, 1, 0.5)])
    assert any("avoids the degraded link 0-1" in route.label for route in alternatives(ring))
