"""Gather and Scatter over the spanning trees (`spanning_trees`, `simulator.collectives.tree_gather`).

Oracles from first principles: the root receives (Gather) or sends (Scatter) (n - 1) V / n through its d links,
so no algorithm beats (n - 1) V / (n d b); with every member's shard cut into d parts, one per tree, the root's
link in each tree carries the n - 1 parts of V / (n d) of everyone else, one after another, so if it never waits
it finishes at (n - 1)(latency + V / (n d b)); numpy gives the gathered array and the shards.
"""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.collectives import collective_groups, run_collective
from simulator.engine.system import System

B, A = 4.5e10, 1e-6  # tpu-v5e ICI: one-way bytes/s per link, hop latency
ALG = dict(algorithm="spanning_trees")


def _most_trees(net, chips, root):
    """Links out of the root, or into the chip with fewest (each tree needs one of each)."""
    def degree(x, adjacent):
        return len(set(adjacent(x)) - {x})
    return min([degree(root, net.graph.successors)] + [degree(x, net.graph.predecessors) for x in chips if x != root])


@pytest.mark.parametrize("topology", ["ring:8", "torus:4x4", "torus:3x5", "mesh:3x5", "torus:3x3x3", "torus:2x4x4",
                                      "line:6"])
@pytest.mark.parametrize("kind", ["gather", "scatter"])
@pytest.mark.parametrize("nbytes", [1e3, 64e6])
def test_the_roots_links_never_wait(topology, kind, nbytes):
    """(n - 1)(latency + V / (n d b)), simulated and closed form; each of the root's links carries (n - 1) V / (n d)."""
    system = System("tpu-v5e", topology=topology, trace=False)
    chips = system.network.chips
    n, d = len(chips), _most_trees(system.network, chips, chips[0])
    r = run_collective(kind, system, nbytes, root=chips[0], **ALG)
    part = math.ceil(nbytes / n) / d  # a shard holds whole bytes
    expected = (n - 1) * (A + part / B)
    assert r.time_s == pytest.approx(expected, rel=1e-9)
    assert r.analytic_s == pytest.approx(expected, rel=1e-9)
    assert r.max_link_bytes == pytest.approx((n - 1) * part, rel=1e-9)
    assert r.time_s >= r.topology_bound_s * (1 - 1e-12)


@pytest.mark.parametrize("kind", ["gather", "scatter"])
def test_auto_takes_the_trees_near_the_root_bound(kind):
    """torus:4x4, 64 MB: root_chains ends on the root's first-axis links only (2.67x); the trees use all four."""
    r = run_collective(kind, System("tpu-v5e", topology="torus:4x4", trace=False), 64e6)
    assert r.algorithm == "spanning_trees"
    assert r.topology_bound_s == pytest.approx(A + 15 * 64e6 / (16 * 4 * B), rel=1e-6)
    assert r.time_s <= 1.05 * r.topology_bound_s


@settings(max_examples=25, deadline=None)
@given(kind=st.sampled_from(["ring", "line", "torus", "mesh"]), sides=st.lists(st.integers(1, 4), min_size=1,
                                                                                 max_size=3),
       axes_mask=st.integers(0, 7), per_shard=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_numeric_mode_equals_numpy(kind, sides, axes_mask, per_shard, seed):
    """Gather: the root ends with its group's rows in position order; Scatter: member p with shard p of its root's
    row (root: a random chip over all axes, position 0 of each group otherwise)."""
    sides = sides[:1] if kind in ("ring", "line") else sides
    spec = f"{kind}:{'x'.join(map(str, sides))}"
    net = System("tpu-v5e", topology=spec).network
    axes = [a for a in range(len(sides)) if axes_mask >> a & 1] or None
    groups = collective_groups(net, axes)
    if groups[0].n == 1:
        return
    rng = np.random.default_rng(seed)
    root = int(rng.integers(0, len(net.chips))) if axes is None else None
    data = rng.standard_normal((len(net.chips), per_shard * groups[0].n))
    gathered = run_collective("gather", System("tpu-v5e", topology=spec), data=data, axes=axes, root=root, **ALG)
    scattered = run_collective("scatter", System("tpu-v5e", topology=spec), data=data, axes=axes, root=root, **ALG)
    for g in groups:
        members = [g.members[p] for p in g.positions()]
        source = root if root is not None else members[0]
        np.testing.assert_array_equal(gathered.outputs[source], data[members].reshape(-1))
        for i, dev in enumerate(members):
            np.testing.assert_array_equal(scattered.outputs[dev], np.split(data[source], len(members))[i])
    assert math.isfinite(gathered.time_s) and math.isfinite(scattered.time_s)
