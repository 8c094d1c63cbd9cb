"""Uneven shares over the spanning trees where a degraded link slows some of them (issue 31's open rows:
"uneven splits over spanning trees are not built").

Oracles from first principles: every byte of a Broadcast leaves the root (of a Reduce, enters it) over its
links, so with the root's links at rates r_i the time is at least V / sum(r_i) (a half-speed cable on
``torus:8``: V / (1.5 b); on ``torus:4x4``: V / (3.5 b)). Shares in proportion to the trees' bottleneck rates
put V r_i / sum(r) on link i, all finishing together: a link-load count (the busiest link's bytes) against
that share; and the forced algorithm's event-driven simulation against its closed form. An even split (what
main did) puts V / d on the slow link: V / b on ``torus:8``, 1.5x the bound.
"""
import pytest

from simulator import System
from simulator.collectives import run_collective
from simulator.engine.faults import LinkDegraded

B = 4.5e10  # tpu-v5e ICI one-way bytes/s per link
V = 1e9

#: (topology, the degraded cable and its fraction, the root's links' rates in units of b)
CASES = [("torus:8", LinkDegraded(0, 1, 0.5), [0.5, 1.0]),
         ("torus:4x4", LinkDegraded(0, 1, 0.5), [0.5, 1.0, 1.0, 1.0]),
         ("torus:4x4", LinkDegraded(0, 4, 0.25), [0.25, 1.0, 1.0, 1.0]),
         ("slice:4x4", LinkDegraded(0, 1, 0.5), [0.5, 1.0])]


@pytest.mark.parametrize("topology,fault,rates", CASES)
@pytest.mark.parametrize("kind", ["broadcast", "reduce"])
@pytest.mark.parametrize("algorithm", ["spanning_trees", "auto"])
def test_a_slow_root_link_gets_a_share_in_proportion_to_its_speed(topology, fault, rates, kind, algorithm):
    """Within 1.08x of V / sum(r) (main: 1.54x on torus:8, 1.80x forced on torus:4x4; auto 1.23x there), the
    busiest link carries the fastest tree's share V max(r) / sum(r) (not V / d), and the simulation equals
    the closed form."""
    system = System("tpu-v5e", topology=topology, faults=[fault])
    r = run_collective(kind, system, V, algorithm=algorithm)
    egress = V / (sum(rates) * B)
    assert r.topology_bound_s == pytest.approx(egress, rel=2e-3)
    assert egress * (1 - 1e-9) <= r.time_s <= 1.08 * egress
    assert r.algorithm == "spanning_trees"
    assert r.max_link_bytes == pytest.approx(V * max(rates) / sum(rates), rel=0.01)
    if algorithm == "spanning_trees":
        assert r.analytic_s == pytest.approx(r.time_s, rel=1e-6)


@pytest.mark.parametrize("topology", ["torus:8", "torus:4x4", "torus:2x4x4"])
def test_healthy_links_keep_the_even_split(topology):
    """All links alike: every tree carries V / d, so the busiest link carries V / d (d links out of the root)."""
    system = System("tpu-v5e", topology=topology)
    d = system.graph.out_degree(0)
    r = run_collective("broadcast", system, V, algorithm="spanning_trees")
    assert r.max_link_bytes == pytest.approx(V / d, rel=1e-3)


def test_uneven_numeric_broadcast_and_reduce_are_exact():
    """Real arrays over the uneven deal (12 pieces of a 0.96 MB row: 4 down the half-speed tree, 8 down the
    other, so the busiest link carries 2/3 of the row): every chip ends with the root's row; Reduce: the root
    with the sum."""
    import numpy as np

    rng = np.random.default_rng(3)
    data = rng.standard_normal((8, 120_000))
    fault = [LinkDegraded(0, 1, 0.5)]
    r = run_collective("broadcast", System("tpu-v5e", topology="torus:8", faults=fault), data=data, chunks=12,
                       algorithm="spanning_trees", root=0)
    assert r.max_link_bytes == pytest.approx(data[0].nbytes * 2 / 3, rel=1e-9)
    for dev in range(8):
        np.testing.assert_array_equal(r.outputs[dev], data[0])
    s = run_collective("reduce", System("tpu-v5e", topology="torus:8", faults=fault), data=data, chunks=12,
                       algorithm="spanning_trees", root=0)
    assert s.max_link_bytes == pytest.approx(data[0].nbytes * 2 / 3, rel=1e-9)
    np.testing.assert_allclose(s.outputs[0], data.sum(axis=0), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("topology,fault,rates", CASES[:3])
@pytest.mark.parametrize("kind", ["gather", "scatter"])
def test_gather_and_scatter_cut_shards_in_proportion_to_the_links(topology, fault, rates, kind):
    """Gather: the root takes in the n - 1 other shards, (n - 1) V / n bytes, over links of rates r: at least
    (n - 1) V / (n sum(r)); Scatter the same out. Cutting every shard in proportion to the trees' bottleneck
    rates comes within 1.02x (main: 1.50x on torus:8), equal to its closed form."""
    system = System("tpu-v5e", topology=topology, faults=[fault])
    n = len(system.network.chips)
    r = run_collective(kind, system, V, algorithm="spanning_trees")
    ingress = (n - 1) * V / (n * sum(rates) * B)
    assert r.topology_bound_s == pytest.approx(ingress, rel=3e-3)
    assert ingress * (1 - 1e-9) <= r.time_s <= 1.02 * ingress
    assert r.analytic_s == pytest.approx(r.time_s, rel=1e-6)


@pytest.mark.parametrize("kind", ["gather", "scatter"])
def test_a_slow_link_below_the_root_keeps_the_even_cut(kind):
    """torus:4x4, cable 5 - 9 at a quarter speed, root 0: the root's four links are healthy, so the
    root-ingress bound (n - 1) V / (n 4 b) holds and the even cut comes within 1.1x of it by simulation (the slow
    link carries only its subtree's parts). Cutting by the trees' slowest links would starve a healthy root
    link (1.64x, 1.93x); Gather's closed form (every hop at the tree's slowest) is too high there to rank by. (A
    guard: main passes it; a first version of the uneven cut did not.)"""
    faults = [LinkDegraded(5, 9, 0.25)]
    nbytes = 64e6
    r = run_collective(kind, System("tpu-v5e", topology="torus:4x4", faults=faults), nbytes,
                       algorithm="spanning_trees", root=0)
    ingress = 15 * nbytes / (16 * 4 * B)
    assert ingress <= r.time_s <= 1.1 * ingress


@pytest.mark.parametrize("kind", ["gather", "scatter"])
def test_a_tree_on_two_root_links_keeps_the_even_cut(kind):
    """mesh:3x3 rooted at the centre: 2 trees (the corners have 2 links in) over the root's 4 links, cable 3 - 4
    at half speed. The root's links carry (n - 1) V / n at rates b/2 + 3b at most: the bound. The even cut runs
    within 1.35x of it by simulation (1.32x, as main); cutting by the trees' slowest links would starve the
    slow tree's healthy root link (1.47x). (A guard: main passes it.)"""
    nbytes = 64e6
    r = run_collective(kind, System("tpu-v5e", topology="mesh:3x3", faults=[LinkDegraded(3, 4, 0.5)]), nbytes,
                       algorithm="spanning_trees", root=4)
    ingress = 8 * nbytes / (9 * 3.5 * B)
    assert ingress <= r.time_s <= 1.35 * ingress
