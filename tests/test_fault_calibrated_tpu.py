"""Calibrated TPU links under faults: `auto` prices the fault algorithms' closed forms on calibrated links.

On calibrated TPU systems `auto` ranks by closed forms at the calibrated link rates
(`simulator.collectives.protocol.calibrated_closed_form`), which moves each job onto a priced copy of the network
with an empty cache. The fault-only algorithms kept what their closed form needs in that cache (`prepare`), so
``--calibrated`` with any link fault or slow chip on a torus stopped with a KeyError ('broken', 'split', 'others',
'plan'), e.g. ``podsim collective all_gather --chip tpu-v5e --topology torus:4x4 --axes 1 --bytes 1GB --fault
link:0,0->0,1=down --calibrated``. They now prepare again on the priced links.

Oracle, by hand: a calibrated link runs at most at its peak rate, so a forecast can never beat the ideal bound
(the column cut of tests/test_multi_detour.py, 3/7 V / b, or the system's `topology_bound_s`), and a fault never
makes the calibrated run faster than the healthy calibrated one.
"""
from __future__ import annotations

import pytest

from simulator import System
from simulator.collectives import run_collective
from simulator.engine.faults import ChipSlow, LinkDegraded, LinkDown

B, V = 45e9, 1e9  # tpu-v5e ICI one direction (REFERENCE.md); the array


def test_a_dead_cable_on_one_axis_runs_calibrated() -> None:
    system = System("tpu-v5e", topology="torus:4x4", calibrated=True, faults=[LinkDown((0, 0), (0, 1))])
    r = run_collective("all_gather", system, V, axes=[1])
    healthy = run_collective("all_gather", System("tpu-v5e", topology="torus:4x4", calibrated=True), V, axes=[1])
    assert r.time_s >= 3 / 7 * V / B  # the column cut at peak rates
    assert r.time_s >= healthy.time_s
    assert r.time_s < 2 * 3 / 8 * V / B  # below what the lines at peak rate take (they do not beat a/2 x 2)


@pytest.mark.parametrize("fault", [LinkDegraded(0, 1, 0.5), ChipSlow(3, 0.5), LinkDown(0, 1)],
                         ids=["half-speed cable", "slow chip", "dead cable"])
def test_faults_on_a_ring_run_calibrated(fault: object) -> None:
    kind = "all_reduce"
    r = run_collective(kind, System("tpu-v5e", topology="torus:8", calibrated=True, faults=[fault]), V)
    healthy = run_collective(kind, System("tpu-v5e", topology="torus:8", calibrated=True), V)
    ideal = run_collective(kind, System("tpu-v5e", topology="torus:8", faults=[fault]), V)
    assert r.time_s >= healthy.time_s * (1 - 1e-9)
    assert r.time_s >= ideal.topology_bound_s * (1 - 1e-9)
