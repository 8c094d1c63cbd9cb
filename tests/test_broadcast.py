"""Broadcast down arc-disjoint spanning trees (`spanning_trees`): trees, pipelining by hand, bound, numpy.

Oracles from first principles: the root's d outgoing link directions each carry V / d at most at b bytes/s
(the bound, V / (d b)); c pieces pipelined along h hops of ``latency + piece / b`` each take
``(h + c - 1)(latency + piece / b)``; no forest has more trees than the root has links out or any other chip
links in; a tree's depth is counted here by walking its parents (after checking they form a tree).
"""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.collectives import collective_groups, get_algorithm, run_collective
from simulator.collectives.spanning_trees import FILL, MAX_TRANSFERS, TRANSFER_BUDGET, shape_trees
from simulator.engine.system import System

B, A = 4.5e10, 1e-6  # tpu-v5e ICI: one-way bytes/s per link, hop latency
V = 2**30
ALG = dict(algorithm="spanning_trees")


def _system(topology):
    return System("tpu-v5e", topology=topology, trace=False)


def _run(topology, nbytes=V, kind="broadcast", **kw):
    return run_collective(kind, _system(topology), nbytes, **{**ALG, **kw})


def _sides(topology):
    return [int(s) for s in topology.split(":")[1].split("x")]


def _most_trees(net, members, root):
    """Links out of the root, or into the chip with fewest (each tree needs one of each)."""
    def degree(x, adjacent):
        return len(set(adjacent(x)) - {x})
    return min([degree(root, net.graph.successors)] + [degree(x, net.graph.predecessors) for x in members if x != root])


def _forest_depth(forest, root):
    """Hops from the root to the deepest position, walking each tree's parents."""
    deepest = 0
    for parents, _ in forest:
        for x in parents:
            hops = 0
            while x != root:
                x, hops = parents[x], hops + 1
                assert hops <= len(parents)
            deepest = max(deepest, hops)
    return deepest


@st.composite
def tori_and_roots(draw, max_side=6, max_chips=64):
    sides = draw(st.lists(st.integers(3, max_side), min_size=1, max_size=3).filter(
        lambda s: math.prod(s) <= max_chips))
    topology = ("ring:" if len(sides) == 1 else "torus:") + "x".join(map(str, sides))
    return topology, draw(st.integers(0, math.prod(sides) - 1))


@settings(max_examples=30, deadline=None)
@given(kind=st.sampled_from(["ring", "line", "torus", "mesh"]), sides=st.lists(st.integers(1, 6), min_size=1,
                                                                                 max_size=3), seed=st.integers(0, 999))
def test_the_trees_span_the_group_and_share_no_link(kind, sides, seed):
    """Every tree reaches every chip from the root (no cycle), over links of the graph, and no link direction
    carries two trees; there are as many trees as the root has links out, or as the chip with fewest links
    in has (a mesh's corner), the most any forest can have."""
    sides = sides[:1] if kind in ("ring", "line") else sides
    net = _system(f"{kind}:{'x'.join(map(str, sides))}").network
    (group,) = collective_groups(net, None)
    if group.n == 1:
        return
    root = group.positions()[seed % group.n]
    forest = shape_trees(group, root)
    used = set()
    for parents, depths in forest:
        assert set(depths) == set(group.positions())  # every position at a finite depth
        for child, parent in parents.items():
            link = (group.members[parent], group.members[child])
            assert net.graph.has_edge(*link) and link not in used
            used.add(link)
    assert len(forest) == _most_trees(net, list(group.members.values()), group.members[root])


@pytest.mark.parametrize("topology", ["ring:8", "torus:4x4", "torus:3x5", "torus:3x3x3", "line:8", "mesh:4x4",
                                      "torus:2x4x4", "mesh:3x5"])
@pytest.mark.parametrize("per_tree", [1, 5])
@pytest.mark.parametrize("kind", ["broadcast", "reduce"])
def test_pieces_pipeline_down_the_deepest_tree(topology, per_tree, kind):
    """d trees (one per link of the root; a mesh's corner has n links in), each with c pieces of V / (d c): the
    deepest chip of depth h gets its last piece after (h + c - 1) hops; Reduce runs the hops backwards."""
    net = _system(topology).network
    (group,) = collective_groups(net, None)
    root = group.positions()[0]
    forest = shape_trees(group, root)
    d, depth = _most_trees(net, list(group.members.values()), group.members[root]), _forest_depth(forest, root)
    r = _run(topology, chunks=d * per_tree, kind=kind)
    piece = math.ceil(V / (d * per_tree))
    expected = (depth + per_tree - 1) * (A + piece / B)
    assert r.time_s == pytest.approx(expected, rel=1e-9)
    assert r.analytic_s == pytest.approx(expected, rel=1e-9)
    assert r.max_link_bytes == pytest.approx(per_tree * piece, rel=1e-9)  # one tree per link direction


@settings(max_examples=8, deadline=None)
@given(case=tori_and_roots(max_side=6, max_chips=36))
def test_near_the_root_egress_bound_on_tori(case):
    """At 1 GB with the default pieces: within 1.3x of V / (d b) for the root's d outgoing links."""
    topology, root = case
    r = _run(topology, 1e9, root=root)
    d = _system(topology).graph.out_degree(root)
    egress = 1e9 / (d * B)
    assert r.topology_bound_s == pytest.approx(egress, rel=1e-3)  # the bound is the root's egress
    assert r.topology_bound_s * (1 - 1e-12) <= r.time_s <= 1.3 * r.topology_bound_s


def test_default_pieces_are_near_the_best_count():
    """The default count (about sqrt((h - 1) V / (d b latency)) per tree) beats half and twice as many."""
    best = _run("torus:4x4", 1e8)
    (group,) = collective_groups(_system("torus:4x4").network, None)
    d, h = 4, _forest_depth(shape_trees(group, (0, 0)), (0, 0))
    per_tree = round(math.sqrt((h - 1) * 1e8 / (d * B * A)))
    assert best.time_s == pytest.approx(_run("torus:4x4", 1e8, chunks=d * per_tree).time_s, rel=1e-12)
    for other in (per_tree // 2, 2 * per_tree):
        assert best.time_s < _run("torus:4x4", 1e8, chunks=d * other).time_s


@pytest.mark.parametrize("topology", ["torus:8x8x8", "torus:16x16", "slice:8x16", "torus:2x4x4"])
def test_default_pieces_reach_1_3x_the_bound_in_a_bounded_schedule(topology):
    """At 1 GB (and 1 TB) the default count c per tree keeps the schedule within MAX_TRANSFERS (each piece crosses
    all N - 1 chips) and, by the pipeline's closed form (h + c - 1)(latency + V / (d c b)) with h the depth,
    within 1.3x of the root's egress bound V / (d b); at least FILL (h - 1) per tree where the small budget
    would leave fewer (then the fill is at most a sixth of the bandwidth term)."""
    net = System("tpu-v5e", topology=topology, trace=False).network
    groups = collective_groups(net, None)
    (group,) = groups
    root = group.positions()[0]
    d, h = _most_trees(net, list(group.members.values()), group.members[root]), _forest_depth(
        shape_trees(group, root), root)
    for nbytes in (1e9, 1e12):
        pieces = get_algorithm("spanning_trees").default_chunks("broadcast", net, groups, nbytes)
        c = pieces // d
        assert pieces % d == 0 and pieces * (group.n - 1) <= MAX_TRANSFERS
        assert c >= FILL * (h - 1) or pieces * (group.n - 1) > TRANSFER_BUDGET - d * (group.n - 1)
        closed = (h + c - 1) * (A + math.ceil(nbytes / pieces) / B)
        assert closed <= 1.3 * nbytes / (d * B)


def test_old_broadcast_against_new():
    """The ring algorithms' broadcast sends the whole array each way round every axis, one piece: 16x the
    bound on a 4x4 torus; the trees stay within 10%."""
    new, old = _run("torus:4x4", 1e9), _run("torus:4x4", 1e9, algorithm="bidirectional", chunks=1)
    assert new.time_s <= 1.1 * new.topology_bound_s
    assert old.time_s >= 15 * new.topology_bound_s


@pytest.mark.parametrize("topology,links", [("torus:2x4x4", 5), ("slice:8x16", 3)])
def test_every_link_of_the_root_carries_a_tree(topology, links):
    """torus:2x4x4: the size-2 axis adds one link (no second way round), so the root has 5; slice:8x16 (the 8-axis
    does not wrap on tpu-v5e) 3 at the corner: one tree down each, the root's links each carry V / links."""
    r = _run(topology, 1e12, chunks=links * 200)  # 200 pieces down each tree of depth h: (1 + (h - 1)/200) V / (3 b)
    assert r.topology_bound_s == pytest.approx(1e12 / (links * B), rel=1e-6)
    assert r.topology_bound_s <= r.time_s <= 1.12 * r.topology_bound_s


@settings(max_examples=30, deadline=None)
@given(kind=st.sampled_from(["ring", "line", "torus", "mesh"]), sides=st.lists(st.integers(1, 5), min_size=1,
                                                                                 max_size=3),
       axes_mask=st.integers(0, 7), per_row=st.integers(1, 30), chunks=st.sampled_from([None, 1, 2, 3]),
       seed=st.integers(0, 2**16))
def test_numeric_mode_equals_numpy(kind, sides, axes_mask, per_row, chunks, seed):
    """Real arrays: every device of a group ends with its root's row (root: a random chip over all axes,
    position 0 of each group otherwise); Reduce over the same trees: the root ends with its group's sum."""
    sides = sides[:1] if kind in ("ring", "line") else sides
    system = System("tpu-v5e", topology=f"{kind}:{'x'.join(map(str, sides))}")
    n_chips = len(system.network.chips)
    axes = [a for a in range(len(sides)) if axes_mask >> a & 1] or None
    groups = collective_groups(system.network, axes)
    rng = np.random.default_rng(seed)
    root = int(rng.integers(0, n_chips)) if axes is None else None
    per_row = per_row * (chunks or 1)
    data = rng.standard_normal((n_chips, per_row))
    r = run_collective("broadcast", system, data=data, axes=axes, root=root, chunks=chunks, **ALG)
    if groups[0].n == 1:
        return
    spec = f"{kind}:{'x'.join(map(str, sides))}"
    summed = run_collective("reduce", System("tpu-v5e", topology=spec), data=data, axes=axes, root=root,
                            chunks=chunks, **ALG)
    for g in groups:
        source = root if root is not None else g.members[g.positions()[0]]
        for dev in g.members.values():
            np.testing.assert_array_equal(r.outputs[dev], data[source])
        np.testing.assert_allclose(summed.outputs[source], data[list(g.members.values())].sum(axis=0), rtol=1e-12,
                                   atol=1e-12)


@pytest.mark.parametrize("root", [0, 17, 53, 119])
def test_a_root_inside_the_axis_that_does_not_wrap_gets_a_tree_per_link_its_farthest_chips_allow(root):
    """slice:8x16 on tpu-v5e: the 8-axis does not wrap. A root inside it has 4 links out, but chips at the axis's
    ends have 3 links in: 3 trees, spanning, sharing no link direction; the root's 4th link is free to any tree."""
    net = _system("slice:8x16").network
    (group,) = collective_groups(net, None)
    pos = next(p for p, c in group.members.items() if c == root)
    forest = shape_trees(group, pos)
    assert len(forest) == _most_trees(net, list(group.members.values()), root) == 3
    used = set()
    for parents, _ in forest:
        assert _forest_depth([(parents, None)], pos) >= 1 and len(parents) == group.n - 1
        for child, parent in parents.items():
            link = (group.members[parent], group.members[child])
            assert net.graph.has_edge(*link) and link not in used
            used.add(link)
