"""`slice_direct` (issue 31, item 5): AllToAll across slices, each chunk straight to its chip.

Oracle from first principles: multislice:2:4x4 of tpu-v5e, n = 32 chips, m = 16 per slice, chunk c = V / n^2;
each chip's one DCN link (3.125 GB/s, REFERENCE.md; 10 us a traversal, the topology's stated assumption)
carries its (n - m) chunks for the other slice: T = 2 x 10 us + (n - m) c / b_dcn = 5.02 ms at 1 GB; the
slice's DCN cut (what it sends leaves over its m DCN links) makes that the bound too.
"""
from __future__ import annotations

import pytest

from simulator import System
from simulator.collectives import run_collective


def test_alltoall_across_slices_meets_its_first_principles_time() -> None:
    n, m, v, dcn = 32, 16, 1e9, 3.125e9
    hand = 2 * 1e-5 + (n - m) * v / n**2 / dcn
    r = run_collective("all_to_all", System("tpu-v5e", topology="multislice:2:4x4"), v)
    assert r.algorithm == "slice_direct"
    assert r.time_s == pytest.approx(hand, rel=5e-3)
    assert r.analytic_s == pytest.approx(r.time_s, rel=5e-3)
    assert r.time_s <= 1.2 * r.topology_bound_s


def test_numeric_alltoall_across_slices_moves_the_right_chunks() -> None:
    import numpy as np
    system = System("tpu-v5e", topology="multislice:2:2x2")
    n = 8
    data = np.arange(n * n * 2, dtype=np.float32).reshape(n, n * 2)
    r = run_collective("all_to_all", system, data=data, algorithm="slice_direct")
    for t in range(n):  # chip t gets chunk t of every chip r, in r order
        expect = np.concatenate([data[r, 2 * t:2 * t + 2] for r in range(n)])
        np.testing.assert_array_equal(r.outputs[t], expect)
