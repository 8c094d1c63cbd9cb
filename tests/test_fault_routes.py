"""Fault-aware ``auto`` (`simulator.collectives.fault_routes`): the invariants of issue 31, item 1.

Oracles: the same collective on the same topology with the cable removed (a degraded link can do anything a
missing one can, so it is never slower), and on the healthy topology (a fault never speeds anything up); and
the line's closed form from first principles for the torus:8 AllReduce of the issue.
"""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator import System
from simulator.collectives import run_collective
from simulator.engine.faults import LinkDegraded, LinkDown

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


def test_half_speed_link_routes_round_like_a_dead_one() -> None:
    """torus:8 AllReduce of 1 GB on tpu-v5e, one cable at half speed: no longer the bidirectional ring through
    it (44.45 ms before), but the pipelined line that avoids it -- V / W plus its pipeline's fill, from first
    principles: (H + c - 1)(alpha + V / (c W)) >= V / W = 1 GB / 45 GB/s = 22.2 ms."""
    result = run_collective("all_reduce", System("tpu-v5e", topology="torus:8",
                                                 faults=[LinkDegraded(0, 1, 0.5)]), 1e9)
    down = run_collective("all_reduce", System("tpu-v5e", topology="torus:8", faults=[LinkDown(0, 1)]), 1e9)
    link_bps = 45e9  # tpu-v5e ICI, one direction (REFERENCE.md)
    assert 1e9 / link_bps <= result.time_s <= 1.05 * 1e9 / link_bps
    assert result.time_s <= down.time_s * (1 + TOL)
    assert "avoids the degraded link" in (result.note or "")
    assert any(alt.get("route") for alt in result.alternatives)


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
    from simulator.engine.faults import ChipSlow
    healthy = _time(topology, kind, [])
    slow = _time(topology, kind, [ChipSlow(chip, factor)])
    assert healthy <= slow * (1 + TOL)
