"""Calibrated H100 nodes AllReduce: ``nvls_tree``'s forecast against its own simulation, and ``auto``'s pick against
the fastest listed alternative by simulation (issue 31: closed forms equal to their simulation wherever ``auto``
ranks by them).

The oracle is the event-driven simulation of each listed alternative asked for by name (``algorithm=NAME``: the
protocol and pieces NCCL's tuner would give it), as in tests/test_node_alternatives.py. Before session h31pick,
``nvls_tree``'s calibrated closed form (the pipeline's sum, each port alone) was 8.5-11.7% below its simulation on
two nodes (15.96 against 18.02 ms at 4 GiB) and 10-14% above it on four; it now runs its ports as the simulation
shares them (`simulator.collectives.port_fluid`).

The pick's rule, written: on calibrated GPU systems ``auto`` runs what NCCL's tuner picks, by NCCL's own model
(issue 27; docs/calibrated_broadcast.md). Its run is within `PICK` of the fastest simulated alternative, or, where
it is not (nodes:4:8 from 1 GB: NCCL's model puts NVLSTree ahead, podsim's simulation puts Ring 13-16% ahead), NCCL's
choice names that alternative (``forecast_faster_algorithm``, with its forecast, which equals its simulation) and
the ``--algorithm`` that runs it.
"""
from __future__ import annotations

from functools import cache
from typing import Any

import pytest

from simulator.collectives import run_collective
from simulator.engine.system import System

FORM = 0.01  #: nvls_tree's forecast against its simulation (the issue's 5%: the fluid run is exact to rounding)
PICK = 0.01  #: auto's run against the fastest listed alternative's simulation
CASES = [(t, v) for t in ("nodes:2:8", "nodes:4:8") for v in (64e6, 1e9, 4 * 2**30)]
IDS = [f"{t}-{v:.3g}" for t, v in CASES]


def _run(topology: str, nbytes: float, algorithm: str = "auto") -> Any:
    return run_collective("all_reduce", System("h100", topology=topology, calibrated=True, trace=False), nbytes,
                          algorithm=algorithm)


@cache
def _runs(topology: str, nbytes: float) -> tuple[Any, dict[str, Any]]:
    """``auto``'s run, and each listed alternative's run asked for by name."""
    auto = _run(topology, nbytes)
    return auto, {a["algorithm"]: _run(topology, nbytes, a["algorithm"]) for a in auto.alternatives}


@pytest.mark.parametrize(("topology", "nbytes"), CASES, ids=IDS)
def test_nvls_tree_forecast_equals_its_simulation(topology: str, nbytes: float) -> None:
    auto, forced = _runs(topology, nbytes)
    alt = next(a for a in auto.alternatives if a["algorithm"] == "nvls_tree")
    assert alt["time_is"] == "forecast" and alt["protocol"] == forced["nvls_tree"].protocol == "Simple"
    sim = forced["nvls_tree"].time_s
    assert alt["time_s"] == pytest.approx(sim, rel=FORM), f"forecast {alt['time_s'] * 1e6:.1f} us, simulated " \
                                                          f"{sim * 1e6:.1f} us"


@pytest.mark.parametrize(("topology", "nbytes"), CASES, ids=IDS)
def test_auto_runs_the_fastest_by_simulation_or_names_it(topology: str, nbytes: float) -> None:
    auto, forced = _runs(topology, nbytes)
    fastest = min(forced, key=lambda name: forced[name].time_s)
    best = forced[fastest].time_s
    assert auto.algorithm == auto.nccl["plugin"]  # NCCL's pick runs
    assert auto.time_s == pytest.approx(forced[auto.algorithm].time_s, rel=1e-9)
    named = auto.nccl.get("forecast_faster_algorithm")
    if auto.time_s <= best * (1 + PICK):
        assert named is None or forced[named["algorithm"]].time_s < auto.time_s
        return
    assert named is not None, f"auto runs {auto.algorithm} ({auto.time_s * 1e6:.1f} us) where {fastest} simulates " \
                              f"{best * 1e6:.1f} us, and says nothing"
    assert forced[named["algorithm"]].time_s <= best * (1 + PICK)
    assert named["time_s"] == pytest.approx(forced[named["algorithm"]].time_s, rel=PICK)
    assert named["picked_time_s"] == pytest.approx(auto.time_s, rel=PICK)
    assert f"--algorithm {named['algorithm']}" in auto.nccl["reason"]


def test_four_nodes_at_one_gigabyte_name_nccl_ring():
    """The named case: NCCL's model picks NVLSTree (5,431 against Ring's 5,778 us by its model); podsim simulates
    5,852.6 us for it and 5,074.0 us for Ring (forecasts)."""
    auto, forced = _runs("nodes:4:8", 1e9)
    assert auto.algorithm == "nvls_tree"
    named = auto.nccl["forecast_faster_algorithm"]
    assert (named["algorithm"], named["source"]) == ("unidirectional", "NCCL Ring")
    assert forced["unidirectional"].time_s < 0.9 * auto.time_s


@pytest.mark.parametrize(("topology", "kind", "nbytes"), [
    ("switch:8", "all_gather", 1e6), ("switch:8", "all_gather", 64e6), ("switch:8", "broadcast", 64e6),
    ("nodes:2:4", "all_gather", 1e6), ("nodes:2:4", "all_gather", 64e6), ("nodes:2:4", "broadcast", 1e6),
    ("nodes:2:8", "reduce", 1e6), ("nodes:4:8", "all_reduce", 256e6)])
def test_a_named_faster_alternative_is_faster_by_simulation(topology: str, kind: str, nbytes: float) -> None:
    """Other kinds and sizes: where NCCL's pick is not podsim's fastest forecast, the alternative named (custom
    kernels such as ``direct``, ``line``, ``nvls``, ``rail_chains``; NCCL's Ring on nodes:4:8 at 256 MB) simulates
    faster than the pick, and its forecast is its simulation (a sweep of six kinds on four H100 systems from 64 KB
    to 1 GB, session h31pick, found 66 named, none slower by simulation)."""
    def run(algorithm: str = "auto") -> Any:
        return run_collective(kind, System("h100", topology=topology, calibrated=True, trace=False), nbytes,
                              algorithm=algorithm)
    auto = run()
    named = auto.nccl.get("forecast_faster_algorithm")
    assert named is not None, "each of these cases names one (the test would check nothing otherwise)"
    forced = run(named["algorithm"])
    assert forced.time_s < auto.time_s
    assert named["time_s"] == pytest.approx(forced.time_s, rel=PICK)
