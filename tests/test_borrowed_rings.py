"""`borrowed_rings` (issue 31, item 4): a one-axis collective borrowing the rings of idle neighbouring rows.

Oracles from first principles (v5p one-way ICI b = 90 GB/s, REFERENCE.md): one row of n = 4 chips along axis 0
of slice:4x4x4 has 2 axis links into each chip -- a ring AllGather takes (n - 1)/n x V / (2 b) = 4.17 ms at
1 GB -- and 6 links in all, so no AllGather beats (n - 1)/n x V / (6 b) = 1.39 ms; AllReduce twice both.
"""
from __future__ import annotations

import numpy as np
import pytest

from simulator import System
from simulator.collectives import run_collective
from simulator.collectives.groups import Group
from simulator.errors import PodsimError

B, V, N = 90e9, 1e9, 4


def _row(system: System) -> Group:
    return Group((N,), (True,), {(i,): system.network.chip_at((i, 0, 0)) for i in range(N)})


@pytest.mark.parametrize(("kind", "phases"), [("all_gather", 1), ("reduce_scatter", 1), ("all_reduce", 2)])
def test_one_row_borrows_its_idle_neighbours(kind: str, phases: int) -> None:
    system = System("tpu-v5p", topology="slice:4x4x4")
    r = run_collective(kind, system, V, groups=[_row(system)])
    own_ring = phases * (N - 1) / N * V / (2 * B)
    every_link = phases * (N - 1) / N * V / (6 * B)
    assert r.algorithm == "borrowed_rings"
    assert every_link * (1 - 1e-9) <= r.time_s <= 1.15 * every_link
    assert r.time_s < 0.4 * own_ring
    assert r.analytic_s == pytest.approx(r.time_s, rel=0.06)  # auto ranks by it


def test_nothing_to_borrow_when_every_row_runs() -> None:
    """``--axes 0``: all 16 rows run; none is idle, so the rings stay (and the bound says they are optimal)."""
    r = run_collective("all_gather", System("tpu-v5p", topology="slice:4x4x4"), V, axes=[0])
    assert r.algorithm != "borrowed_rings"
    assert all(a["algorithm"] != "borrowed_rings" for a in r.alternatives)
    with pytest.raises(PodsimError, match="nothing to borrow"):
        run_collective("all_gather", System("tpu-v5p", topology="slice:4x4x4"), V, axes=[0],
                       algorithm="borrowed_rings")


def test_numeric_data_is_refused_by_name_and_auto_runs_a_ring() -> None:
    system = System("tpu-v5p", topology="slice:4x4x4")
    data = np.ones((64, 8), dtype=np.float32)
    with pytest.raises(PodsimError, match="timing and bytes only"):
        run_collective("all_gather", system, data=data, groups=[_row(system)], algorithm="borrowed_rings")
    system = System("tpu-v5p", topology="slice:4x4x4")
    r = run_collective("all_reduce", system, data=data, groups=[_row(system)])
    assert r.algorithm != "borrowed_rings"
    row = [system.network.chip_at((i, 0, 0)) for i in range(N)]
    np.testing.assert_array_equal(r.outputs[row[0]], np.full(8, N, dtype=np.float32))


def test_book_estimate_is_the_rows_own() -> None:
    """The book's estimate does not depend on how the algorithm cuts the array: the row's ring, V / (2 b)."""
    system = System("tpu-v5p", topology="slice:4x4x4")
    r = run_collective("all_gather", system, V, groups=[_row(system)])
    assert r.algorithm == "borrowed_rings" and r.book_s == pytest.approx(V / (2 * B), rel=1e-9)
    assert abs(r.padded_bytes) < N  # whole bytes per key at most
