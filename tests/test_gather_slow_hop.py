"""Gather and Scatter over spanning trees when a tree's slow hop is not at the root (issue 31, helper h31tree).

Oracle from first principles, derived by hand for ``torus:8`` (two trees, chains 7 -> 6 -> ... -> 0 and
1 -> 2 -> ... -> 7 -> 0, each carrying half of every shard: p = V / 16 per part): a hop costs
t = alpha + p / b, a hop over the half-speed cable t_slow = alpha + 2 p / b. In the first chain the link 4 -> 3
crosses the slow cable and carries the parts of 4, 5, 6, 7 one after another (4 t_slow); the last of them
still takes 3 -> 2, 2 -> 1, 1 -> 0 (3 t): 4 t_slow + 3 t. In the second chain 3 -> 4 carries 1, 2, 3
(3 t_slow), then 4 hops: 3 t_slow + 4 t. The slower chain ends the run. main's closed form priced every hop of
a tree at its slowest (7 t_slow, 19.45 ms against the simulation's 15.28 ms); the simulation must match the
hand count, and the closed form the simulation, wherever the slow cable is.
"""
import pytest

from simulator import System
from simulator.collectives import run_collective
from simulator.engine.faults import LinkDegraded

B = 4.5e10  # tpu-v5e ICI one-way bytes/s per link
ALPHA = 1e-6  # tpu-v5e ICI hop latency, s
V = 1e9


def _run(kind, topology, faults, root=0):
    return run_collective(kind, System("tpu-v5e", topology=topology, faults=faults), V, algorithm="spanning_trees",
                          root=root)


@pytest.mark.parametrize("kind", ["gather", "scatter"])
def test_a_half_speed_cable_away_from_the_root_costs_its_chain_not_every_hop(kind):
    p = V / 16
    t, slow = ALPHA + p / B, ALPHA + 2 * p / B
    hand = max(4 * slow + 3 * t, 3 * slow + 4 * t)  # 15.28 ms
    r = _run(kind, "torus:8", [LinkDegraded(3, 4, 0.5)])
    assert r.time_s == pytest.approx(hand, rel=1e-3)
    assert r.analytic_s == pytest.approx(r.time_s, rel=1e-6)  # main: 19.45 ms, 1.27x


CABLES_4X4 = [((0, 1), (0, 2)), ((1, 1), (1, 2)), ((2, 3), (3, 3)), ((0, 0), (0, 3)), ((1, 0), (2, 0))]


@pytest.mark.parametrize("kind", ["gather", "scatter"])
@pytest.mark.parametrize("topology,cable,fraction,root", [
    ("torus:8", (1, 2), 0.25, 0), ("torus:8", (6, 7), 0.5, 0), ("torus:8", (2, 3), 0.5, 5),
    ("ring:6", (2, 3), 0.4, 1), ("line:6", (3, 4), 0.5, 0),
    *[("torus:4x4", c, 0.3, 0) for c in CABLES_4X4], ("torus:4x4", ((2, 2), (2, 3)), 0.5, 5),
    ("mesh:3x4", ((1, 1), (1, 2)), 0.5, 0)])
def test_closed_form_equals_simulation_wherever_the_slow_cable_is(kind, topology, cable, fraction, root):
    """main was 1.08-3.33x above the simulation on these (torus:4x4 (2,3)-(3,3) at 0.3: 17.38 vs 5.22 ms). The
    run can never beat the root's ingress: (n - 1) V / n over the root's links."""
    r = _run(kind, topology, [LinkDegraded(*cable, fraction)], root)
    assert r.analytic_s == pytest.approx(r.time_s, rel=1e-6)
    assert r.time_s >= r.topology_bound_s * (1 - 1e-9)


def test_tree_time_of_a_chain_deeper_than_the_recursion_limit():
    """A ring's spanning trees are chains n - 1 deep (ring:1500 Gather once stopped with a RecursionError). On a
    chain 0 <- 1 <- ... <- n-1 of unit hops, link x -> x-1 carries the n - x parts of its subtree and the last
    still takes x - 1 hops: (n - x) + (x - 1) = n - 1 for every x."""
    from simulator.collectives.tree_gather import tree_time

    n = 5000
    parents = {x: x - 1 for x in reversed(range(1, n))}  # the deepest first, as a ring's far end may come
    assert tree_time(parents, {x: n - x for x in parents}, dict.fromkeys(parents, 1.0), 0) == n - 1

