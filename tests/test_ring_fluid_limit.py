"""The NIC-ring closed form follows ring 0's flows (`timing.RING_FLUID_HOPS`) up to 128 positions: on ideal H100
nodes:16:8 (a ring of 128 GPUs) the lock-step form it fell back to was 1.20x the simulation at 256 MB, and `auto`
ran nvls_tree (1,570 us) where unidirectional simulates 1,358 us (h31pick's finding). The oracle is the
simulation of the algorithm forced by name."""
from __future__ import annotations

import pytest

from simulator.collectives import run_collective
from simulator.engine.system import System

V = 256e6


def _run(**kw):
    return run_collective("all_reduce", System("h100", topology="nodes:16:8", trace=False), V, **kw)


def test_the_ring_closed_form_follows_128_positions_and_auto_runs_the_faster():
    auto = _run()
    forms = {a["algorithm"]: a["time_s"] for a in auto.alternatives}
    ring = _run(algorithm="unidirectional")
    assert forms["unidirectional"] == pytest.approx(ring.time_s, rel=0.01)
    tree = _run(algorithm="nvls_tree")
    assert auto.time_s <= min(ring.time_s, tree.time_s) * 1.01
