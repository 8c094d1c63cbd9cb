"""AllToAll on grids (`dimension_order`): link loads and hops by hand, the bound, numpy, the old schedule.

Oracles from first principles: every device sends V / n^2 to every other; on a ring of k the short way
round puts ``sum over d of min(d, k - d)`` chunk-hops per source on the ring's 2k link directions, i.e.
``k^2/8`` chunks per link for even k (REFERENCE: a k-ary torus of N chips carries ``V k / (8 N)`` per
link direction); on a line the middle link carries the ``floor(k^2/4)`` pairs that cross it.
"""
import math

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.collectives import collective_groups, run_collective
from simulator.collectives.dimension_order import PIECES
from simulator.engine.system import System

B, A = 4.5e10, 1e-6  # tpu-v5e ICI: one-way bytes/s per link, hop latency
ALG = dict(algorithm="dimension_order")


def _run(topology, nbytes, **kw):
    return run_collective("all_to_all", System("tpu-v5e", topology=topology, trace=False), nbytes, **{**ALG, **kw})


def _ring_hops(k):
    """Chunk-hops one source puts on a ring of k, the short way round."""
    return sum(min(d, k - d) for d in range(1, k))


def _fifo_phase(k, order_s, m=PIECES):
    """One phase of pipelined chains round a ring of k, as the longest path through the DAG of its sends (an
    oracle independent of `piped_phase`'s recursion). Every link direction alike: it sends, in turn, the m
    pieces of hop 1 (the chain starting at its tail: every distance, the even ring's antipode half), then of hop
    2, ...; a piece takes its bytes' seconds, and piece p of hop h can leave once the link sent what precedes it
    and piece p of hop h - 1 left the link before (the same timeline, every link alike) plus one latency A."""
    far = k // 2
    carried = [sum(0.5 if k % 2 == 0 and d == far else 1.0 for d in range(h, far + 1)) for h in range(1, far + 1)]
    sends = [(h, p) for h in range(far) for p in range(m)]
    g = nx.DiGraph()
    for (h, p), nxt in zip(sends, sends[1:], strict=False):
        g.add_edge((h, p), nxt, weight=carried[h] * order_s / m)  # the link's order
    for h, p in sends:
        if h:
            g.add_edge((h - 1, p), (h, p), weight=carried[h - 1] * order_s / m + A)  # the piece, a hop on
        g.add_edge((h, p), "arrived", weight=carried[h] * order_s / m + A)
    return nx.dag_longest_path_length(g)


@pytest.mark.parametrize("k", [3, 4, 5, 6, 8, 16])
def test_a_ring_reaches_its_link_load_bound(k):
    """Each link direction carries (sum of hops) / 2 chunks -- the even ring's antipode half each way; its
    chains' hops cut into pieces keep every link busy (a quarter chunk's 11.7 us outlasts the 1 us latency), so
    the time is the bound: the link load plus one hop latency."""
    nbytes = k * k * 2 * 2**20  # whole bytes in every part of every chunk
    chunk = nbytes / k**2
    expected = A + _ring_hops(k) / 2 * chunk / B
    r = _run(f"ring:{k}", nbytes)
    assert r.time_s == pytest.approx(expected, rel=1e-9)
    assert r.analytic_s == pytest.approx(expected, rel=1e-9)
    assert r.topology_bound_s == pytest.approx(expected, rel=1e-9)
    assert _fifo_phase(k, chunk / B) == pytest.approx(expected, rel=1e-9)  # (a chain's chunk: both halves)


@pytest.mark.parametrize("k,nbytes", [(8, 64 * 2 * 4096), (6, 36 * 2 * 4096), (5, 25 * 4096), (16, 256 * 2**14)])
def test_a_ring_where_latency_binds_follows_its_sends(k, nbytes):
    """Small chunks: the links idle while pieces cross a hop; the DAG of the sends says how long. Never more than
    the whole-bundle chains' floor(k/2) latencies plus the link load (what they took), never less than the bound."""
    chunk = nbytes / k**2
    expected = _fifo_phase(k, chunk / B)
    r = _run(f"ring:{k}", nbytes)
    assert r.time_s == pytest.approx(expected, rel=1e-9)
    assert r.analytic_s == pytest.approx(expected, rel=1e-9)
    assert r.topology_bound_s * (1 - 1e-12) <= r.time_s
    assert r.time_s * (1 - 1e-12) <= (k // 2) * A + _ring_hops(k) / 2 * chunk / B


@pytest.mark.parametrize("shape", [(4, 4), (8, 8), (3, 3, 3), (4, 4, 4), (6, 6)])
def test_a_torus_with_alike_axes_matches_the_reference(shape):
    """k-ary n-dim torus of N chips: every link direction carries V k / (8 N) for even k (V (k^2 - 1) / (8 N k)
    for odd), all axes at once, one axis order's chains a phase, n phases one after another (a device starts the
    next once the last brought everything)."""
    k, n, N = shape[0], len(shape), math.prod(shape)
    nbytes = N * N * 2 * n * 2**10
    per_link = nbytes * k / (8 * N) if k % 2 == 0 else nbytes * (k * k - 1) / (8 * N * k)
    order_s = nbytes / N**2 * (N / k) / n / B  # an order's share of the chunks a device sends to one position
    expected = n * _fifo_phase(k, order_s)
    r = _run("torus:" + "x".join(map(str, shape)), nbytes)
    assert r.time_s == pytest.approx(expected, rel=1e-9)
    assert r.analytic_s == pytest.approx(expected, rel=1e-9)
    assert per_link / B + n * A <= r.time_s * (1 + 1e-12)
    assert r.time_s * (1 - 1e-12) <= per_link / B + n * (k // 2) * A  # (what the whole-bundle chains took)


@pytest.mark.parametrize("k", [4, 5, 8, 16])
def test_a_line_reaches_its_middle_cut(k):
    """The middle link of a line carries the floor(k^2/4) chunks between the halves; cut-through messages
    keep it busy from the start. The old schedule (chains of hops, store and forward) forwards them in
    turn along the longest chain, k(k-1)/2 chunks."""
    nbytes = 1e12
    cut = (k * k // 4) * nbytes / k**2 / B
    r = _run(f"line:{k}", nbytes)
    assert r.topology_bound_s == pytest.approx(A + cut, rel=1e-9)
    assert r.time_s == pytest.approx(cut, rel=1e-3)
    old = _run(f"line:{k}", nbytes, algorithm="line")
    assert old.time_s / r.time_s == pytest.approx(k * (k - 1) / 2 / (k * k // 4), rel=1e-3)


@pytest.mark.parametrize("topology,slow_axis_links", [("mesh:4x4", 4), ("line:8", 1), ("torus:4x8", 8)])
def test_the_cut_bound_by_hand(topology, slow_axis_links):
    """Half the chips on each side of the worst cut: (n/2)^2 chunks leave through the links that cross it (on
    a mesh one per row, on the long ring of a 4x8 torus two per row); the link-load bound averages them with
    idle links and is lower."""
    nbytes = 2**30
    n = math.prod(int(s) for s in topology.split(":")[1].split("x"))
    cut = (n // 2) ** 2 * nbytes / n**2
    r = _run(topology, nbytes)
    assert r.topology_bound_s == pytest.approx(A + cut / (slow_axis_links * B), rel=1e-9)
    assert r.time_s >= r.topology_bound_s


def test_old_schedule_against_new_on_a_torus():
    """One axis after another with barriers moves the whole array over each axis in turn; all axes at once
    move it once. On an 8x8 torus at 1 GB: the old schedule is over 2x the bound, the new one within 5%."""
    new, old = _run("torus:8x8", 1e9), _run("torus:8x8", 1e9, algorithm="bidirectional")
    assert new.time_s <= 1.05 * new.topology_bound_s
    assert old.time_s >= 2 * new.topology_bound_s


def test_sequential_takes_the_axes_in_turn():
    """multi_axis='sequential': one axis order, so each axis carries the whole array in turn: twice the time
    on a 2-D torus, bandwidth-bound."""
    parallel, sequential = _run("torus:8x8", 1e12), _run("torus:8x8", 1e12, multi_axis="sequential")
    assert sequential.time_s / parallel.time_s == pytest.approx(2, rel=1e-3)


def _torus(sides):
    return "torus:" + "x".join(map(str, sides))


SHAPES = st.one_of(st.lists(st.integers(2, 8), min_size=2, max_size=2), st.lists(st.integers(2, 4), min_size=3,
                                                                                      max_size=3))


@settings(max_examples=15, deadline=None)
@given(sides=SHAPES)
def test_near_the_link_load_bound_on_tori(sides):
    """Bandwidth-bound (1 TB), within 1.3x the topology bound (which includes the cut bound); at 1 GB
    within 1.3x the bound plus each axis's hop latencies; never below the bound; the closed form exact when
    every axis is a ring of one length, within 15% otherwise."""
    big, gig = _run(_torus(sides), 1e12), _run(_torus(sides), 1e9)
    assert big.topology_bound_s * (1 - 1e-12) <= big.time_s <= 1.3 * big.topology_bound_s
    hops = sum(k // 2 if k > 2 else 1 for k in sides) * A
    assert gig.topology_bound_s * (1 - 1e-12) <= gig.time_s <= 1.3 * (gig.topology_bound_s + hops)
    alike = len(set(sides)) == 1 and sides[0] > 2
    for r in (big, gig):
        lo, hi = (1 - 1e-9, 1 + 1e-9) if alike else (0.85, 1.15)
        assert lo <= r.time_s / r.analytic_s <= hi


@settings(max_examples=30, deadline=None)
@given(kind=st.sampled_from(["ring", "line", "torus", "mesh"]), sides=st.lists(st.integers(1, 5), min_size=1,
                                                                                 max_size=3),
       axes_mask=st.integers(0, 7), per_chunk=st.integers(1, 7), seed=st.integers(0, 2**16),
       multi_axis=st.sampled_from(["parallel", "sequential"]))
def test_numeric_mode_equals_numpy(kind, sides, axes_mask, per_chunk, seed, multi_axis):
    """Real arrays through the schedule: device i of a group ends with the i-th chunk of every member's row,
    in member order. Chunks of any length (their parts may be unequal or empty)."""
    sides = sides[:1] if kind in ("ring", "line") else sides
    topology = f"{kind}:{'x'.join(map(str, sides))}"
    system = System("tpu-v5e", topology=topology)
    axes = [a for a in range(len(sides)) if axes_mask >> a & 1] or None
    groups = collective_groups(system.network, axes)
    n = groups[0].n
    data = np.random.default_rng(seed).standard_normal((len(system.network.chips), n * per_chunk))
    r = run_collective("all_to_all", system, data=data, axes=axes, multi_axis=multi_axis,
                       algorithm="dimension_order" if n > 1 else "auto")
    if n == 1:
        return
    for g in groups:
        members = [g.members[p] for p in g.positions()]
        for i, dev in enumerate(members):
            want = np.concatenate([np.split(data[e], n)[i] for e in members])
            np.testing.assert_array_equal(r.outputs[dev], want)
