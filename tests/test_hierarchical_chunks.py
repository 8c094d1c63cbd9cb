"""Multi-level collectives (issue 31, item 5): the pipelined hierarchy picks its chunk count by closed form.

Oracle: the regions-together bound (`simulator.collectives.bounds`), 2 (K - 1)/K x V over a slice's DCN egress
for AllReduce -- multislice:2:4x4 of tpu-v5e: K = 2, 16 chips x 3.125 GB/s: V / 50 GB/s = 20 ms at 1 GB -- and
the issue's target of 1.2x it.
"""
from __future__ import annotations

import pytest

from simulator import System
from simulator.collectives import run_collective


@pytest.mark.parametrize("kind", ["all_gather", "reduce_scatter", "all_reduce"])
def test_two_slices_within_the_target(kind: str) -> None:
    r = run_collective(kind, System("tpu-v5e", topology="multislice:2:4x4"), 1e9)
    factor = 2 if kind == "all_reduce" else 1
    hand = factor * (1 / 2) * 1e9 / (16 * 3.125e9)
    assert r.topology_bound_s >= hand * (1 - 1e-9)
    assert r.time_s <= 1.2 * r.topology_bound_s
    assert r.analytic_s == pytest.approx(r.time_s, rel=0.03)  # auto ranks by it
