"""``book_s`` (issue 31, item 3): the book's formula on healthy hardware, wrapped or not, and absent under faults.

Oracles: the book's own numbers typed in from REFERENCE.md (tpu-v5e one-way ICI b = 45 GB/s): an AllGather
over an unwrapped axis of N chips is (N - 1)/N x V / b (34 MB over 4: 559 us, the book's "about 560 us").
"""
from __future__ import annotations

import pytest

from simulator import System
from simulator.collectives import run_collective
from simulator.engine.faults import LinkDegraded

B = 45e9


def test_unwrapped_axis_is_the_books_example() -> None:
    v = 2**25  # 33.5 MB, the book's bf16 example
    r = run_collective("all_gather", System("tpu-v5e", topology="slice:4x4"), v, axes=[0])
    assert r.book_s == pytest.approx(3 / 4 * v / B, rel=1e-12)
    assert 555e-6 < r.book_s < 565e-6


def test_small_array_on_an_unwrapped_axis_is_latency_bound_as_the_book_says() -> None:
    """The book's pop quiz 2, part 2: bf16[256, 256] over the unwrapped axis of 4 of a v5e {X: 8, Y: 4} has
    32 kB shards (0.7 us each at 45 GB/s), so it is latency-bound: 3 hops of 1 us, "roughly 3 us"."""
    r = run_collective("all_gather", System("tpu-v5e", topology="mesh:8x4"), 256 * 256 * 2, axes=[1])
    assert r.book_s == pytest.approx(3 * 1e-6, rel=1e-12)
    big = run_collective("all_gather", System("tpu-v5e", topology="mesh:8x4"), 2**25, axes=[1])
    assert big.book_s == pytest.approx(3 / 4 * 2**25 / B, rel=1e-12)  # bandwidth-bound: the floor does not bind


def test_no_book_estimate_under_faults_and_the_run_says_why() -> None:
    r = run_collective("all_reduce", System("tpu-v5e", topology="torus:8", faults=[LinkDegraded(0, 1, 0.5)]), 1e9)
    assert r.book_s is None and "book_s absent" in (r.note or "")
    healthy = run_collective("all_reduce", System("tpu-v5e", topology="torus:8"), 1e9)
    assert healthy.book_s == pytest.approx(2 * 1e9 / (2 * B), rel=1e-9)  # the book: AllReduce 2 V / W_ici, W_ici = 2b


def test_multi_level_allreduce_bound_counts_what_crosses_between_nodes() -> None:
    """Issue 31: K = 4 H100 nodes of 8 GPUs, InfiniBand that cannot add: the 4 nodes together must receive
    2 (K - 1) V over their 4 x 8 NICs of 50 GB/s: T >= 2 (K - 1) / K x V / (8 x 50 GB/s) = 3.75 ms at 1 GB
    (the per-node cut alone gave V / 400 GB/s = 2.5 ms); the simulation is not faster."""
    r = run_collective("all_reduce", System("h100", topology="nodes:4:8"), 1e9)
    hand = 2 * 3 / 4 * 1e9 / (8 * 50e9)
    assert r.topology_bound_s >= hand * (1 - 1e-9)
    assert r.time_s >= r.topology_bound_s * (1 - 1e-9)


def test_one_axis_of_a_cube_counts_the_hops_every_row_needs() -> None:
    """Issue 31: v5p slice:4x4x4 ``--axes 0`` AllGather of 1 GB. 16 rows run at once; each row's 4 shards must
    each reach 4 distinct axis-0 coordinates, so cross at least 3 axis-0 links (a detour through another row
    steps along axis 0 too): 16 x 3 V of byte-hops over the 128 axis-0 link directions of b = 90 GB/s:
    T >= 48 V / (128 b) = 4.17 ms (the old bound, every link at one hop, said 1.39 ms). The rings reach it."""
    r = run_collective("all_gather", System("tpu-v5p", topology="slice:4x4x4"), 1e9, axes=[0])
    hand = 48e9 / (128 * 90e9)
    assert r.topology_bound_s == pytest.approx(hand, rel=1e-3)
    assert hand * (1 - 1e-9) <= r.time_s <= 1.01 * hand


def test_one_group_alone_may_borrow_other_links_and_the_own_links_bound_says_how_much() -> None:
    """One row alone (explicit group): its own links allow (n - 1)/n V over 2 links, 0.75 V / (2 b); every
    link of its chips (6 each) allows 0.75 V / (6 b): the two bounds, side by side."""
    from simulator.collectives.groups import Group
    system = System("tpu-v5p", topology="slice:4x4x4")
    row = Group((4,), (True,), {(i,): system.network.chip_at((i, 0, 0)) for i in range(4)})
    r = run_collective("all_gather", system, 1e9, groups=[row])
    assert r.own_links_bound_s == pytest.approx(0.75e9 / (2 * 90e9), rel=1e-3)
    assert r.topology_bound_s == pytest.approx(0.75e9 / (6 * 90e9), rel=5e-3)  # (+ the detours' latency)
    assert r.time_s >= r.topology_bound_s * (1 - 1e-9)
    own = run_collective("all_gather", system, 1e9, groups=[row], algorithm="bidirectional")  # stays on its links
    assert own.time_s >= own.own_links_bound_s * (1 - 1e-9)
    assert r.algorithm == "borrowed_rings" and r.time_s < own.own_links_bound_s  # borrowing beats its own links


def test_roots_of_every_row_share_the_plane_they_sit_in() -> None:
    """Issue 31: v5p slice:4x4x4 ``--axes 0`` Gather to position 0: the 16 roots form the plane x = 0, whose
    only links in from outside are its 32 axis-0 link directions; the roots need 16 x 3/4 V through them:
    T >= 12 V / (32 b) = 4.17 ms at 1 GB (each root's six links alone said 1.39 ms)."""
    r = run_collective("gather", System("tpu-v5p", topology="slice:4x4x4"), 1e9, axes=[0])
    hand = 12e9 / (32 * 90e9)
    assert r.topology_bound_s >= hand * (1 - 1e-9)
    assert r.time_s >= r.topology_bound_s * (1 - 1e-9)


def test_all_to_all_over_one_chip_slices_is_the_dcn_share_alone() -> None:
    """multislice:2:1 (a fuzz find: ZeroDivisionError): each slice is one chip, so nothing moves at home and
    each chip sends V / n^2 of its V / n to the other over its DCN link: book_s = (n - 1) V / n^2 / W_dcn."""
    v = 64e3
    system = System("tpu-v5e", topology="multislice:2:1")
    r = run_collective("all_to_all", system, v)
    dcn = max(d["bandwidth_bytes_per_s"] for _, _, d in system.network.graph.out_edges(0, data=True))
    assert r.book_s == pytest.approx(v / 4 / dcn, rel=1e-12)
