"""`split_ring` (issue 31, item 1): a share of the array round a ring through its one slow cable, the rest on
the line that avoids it.

Oracles from first principles: torus:8 of tpu-v5e (b = 45 GB/s one way), one cable at f = 1/2. AllGather: the
ring share x = 2f / (1 + f) = 2/3 balances the slow cable (x (n-1)/(2n) V at f b) against the line's end links
(x (n-1)/(2n) V + (1 - x)(n-1)/n V at b): T = (2/3)(7/8) V / b = 12.96 ms at 1 GB, against 7/8 V / b = 19.44 ms
for the line alone (what a dead cable leaves).
"""
from __future__ import annotations

import pytest

from simulator import System
from simulator.collectives import run_collective
from simulator.collectives.split_ring import share
from simulator.engine.faults import LinkDegraded, LinkDown
from simulator.errors import PodsimError

B, V, N = 45e9, 1e9, 8


def test_share_balances_the_slow_cable() -> None:
    a = (N - 1) / N
    for f in (0.2, 0.5, 0.9):
        x = share("all_gather", N, f)
        assert x * a / 2 / f == pytest.approx(x * a / 2 + (1 - x) * a)
        y = share("all_reduce", N, f)
        assert y * a / f == pytest.approx(y * a + (1 - y))


def test_half_speed_cable_allgather() -> None:
    hand = (2 / 3) * (N - 1) / N * V / B
    r = run_collective("all_gather", System("tpu-v5e", topology=f"torus:{N}", faults=[LinkDegraded(0, 1, 0.5)]), V)
    down = run_collective("all_gather", System("tpu-v5e", topology=f"torus:{N}", faults=[LinkDown(0, 1)]), V)
    assert r.algorithm == "split_ring"
    assert r.analytic_s == pytest.approx(hand, rel=2e-3)
    assert r.topology_bound_s == pytest.approx(hand, rel=2e-3)  # the bound: this split is optimal in bandwidth
    assert hand * (1 - 1e-9) <= r.time_s <= 1.1 * hand  # the ring share's steps wait behind the slow cable
    assert r.time_s < 0.75 * down.time_s


def test_only_for_one_slow_cable() -> None:
    with pytest.raises(PodsimError, match="exactly one degraded cable"):
        run_collective("all_gather", System("tpu-v5e", topology="torus:8"), V, algorithm="split_ring")
    two = [LinkDegraded(0, 1, 0.5), LinkDegraded(4, 5, 0.5)]
    with pytest.raises(PodsimError, match="exactly one degraded cable"):
        run_collective("all_gather", System("tpu-v5e", topology="torus:8", faults=two), V, algorithm="split_ring")
