"""`detour_split` (issue 31, item 1): one row broken by a dead cable among rows that keep their rings.

Oracles from first principles: torus:4x4 of tpu-v5e (b = 45 GB/s one way), AllGather of V = 1 GB over axis 1,
cable (0,0)-(0,1) dead. The lines every row ran take a V / b with a = 3/4 (16.67 ms). With the broken row's share
x round its ring (the missing step detoured through row 1, whose own link then carries a/2 V (1 + x)) and the
rest on its line (ends a/2 x V + a (1 - x) V), x = 1/2 balances them: 0.75 a V / b = 12.5 ms of bandwidth.
"""
from __future__ import annotations

import pytest

from simulator import System
from simulator.collectives import run_collective
from simulator.engine.faults import LinkDown

B, V, A = 45e9, 1e9, 3 / 4


def test_a_dead_cable_in_one_row_no_longer_makes_every_row_a_line() -> None:
    faults = [LinkDown((0, 0), (0, 1))]
    r = run_collective("all_gather", System("tpu-v5e", topology="torus:4x4", faults=faults), V, axes=[1])
    lines = A * V / B
    assert "detour" in (r.note or "")  # auto runs multi_detour here (tests/test_multi_detour.py); detour_split tried
    mine = next(a for a in r.alternatives if a["algorithm"] == "detour_split")
    assert mine["time_s"] == pytest.approx(0.75 * lines, rel=5e-3)
    assert mine["simulated_s"] >= r.topology_bound_s * (1 - 1e-9)
    assert mine["simulated_s"] < 0.95 * lines  # the detour's steps wait on the borrowed link: 15.3 ms simulated
    healthy = run_collective("all_gather", System("tpu-v5e", topology="torus:4x4"), V, axes=[1])
    assert healthy.time_s <= r.time_s
