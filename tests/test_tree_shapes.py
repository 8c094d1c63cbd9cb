"""The trees themselves, against facts derived without the schedule that uses them (issue 31, h31tree).

`tree.sends` and `spanning_trees.shape_trees` are each the one source of a schedule and of its closed form, so a
wrong tree would be wrong in both and their agreement would not show it. Here each tree is held against what a
tree of its kind must be, from first principles: a neighbour relation written out from the torus's definition
(coordinates one step apart, mod k where an axis wraps), depths by breadth-first search from the root, the
in-order binary tree's shape drawn by hand, link byte counts from "each chip receives each byte once", and the
data the simulator moves against numpy.
"""
import itertools
from collections import Counter, deque

import numpy as np
import pytest

from simulator import System
from simulator.collectives import run_collective
from simulator.collectives.groups import Group
from simulator.collectives.spanning_trees import shape_trees
from simulator.collectives.tree import parents as binary_parents
from simulator.collectives.tree import sends, trees

V = 1e6


def neighbours(sizes, wraps, x):
    """Positions one step from x on one axis (mod k where the axis wraps), written from the grid's definition."""
    out = set()
    for a, (k, w) in enumerate(zip(sizes, wraps, strict=True)):
        for s in (1, -1):
            y = x[a] + s
            if w:
                y %= k
            if 0 <= y < k and y != x[a]:
                out.add(x[:a] + (y,) + x[a + 1:])
    return out


def bfs_depths(parent, root):
    kids = {}
    for x, p in parent.items():
        kids.setdefault(p, []).append(x)
    depth, todo = {root: 0}, deque([root])
    while todo:
        p = todo.popleft()
        for x in kids.get(p, []):
            assert x not in depth, f"{x} reached twice"
            depth[x] = depth[p] + 1
            todo.append(x)
    return depth


#: (topology, sizes, wraps, the depth every forest must reach at most: the diameter + 1 on 2-D tori, as the
#: module claims; n - 1 on a ring, whose only two arc-disjoint spanning trees are its two one-way chains)
GRIDS = [("torus:4x4", (4, 4), (True, True), 5), ("torus:8x8", (8, 8), (True, True), 9),
         ("torus:8", (8,), (True,), 7), ("ring:6", (6,), (True,), 5), ("mesh:3x4", (3, 4), (False, False), None),
         ("torus:2x4x4", (2, 4, 4), (True, True, True), None)]


def forest(sizes, wraps, root):
    group = Group(sizes, wraps, {})
    group.members = {p: p for p in group.positions()}
    return [parents for parents, _ in shape_trees(group, root)]


@pytest.mark.parametrize("topology,sizes,wraps,depth", GRIDS)
@pytest.mark.parametrize("root_at", ["first", "middle"])
def test_spanning_trees_are_arc_disjoint_spanning_trees_on_real_links(topology, sizes, wraps, depth, root_at):
    root = tuple(0 for _ in sizes) if root_at == "first" else tuple(k // 2 for k in sizes)
    positions = set(itertools.product(*(range(k) for k in sizes)))
    trees_ = forest(sizes, wraps, root)
    # as many trees as the root has links out (every grid here has no position with fewer links in)
    assert len(trees_) == min(len(neighbours(sizes, wraps, x)) for x in positions)
    used = Counter((p, x) for parents in trees_ for x, p in parents.items())
    assert max(used.values()) == 1  # no link direction carries two trees
    for parents in trees_:
        assert set(parents) == positions - {root}
        assert all(p in neighbours(sizes, wraps, x) for x, p in parents.items())  # every hop is one link
        found = bfs_depths(parents, root)
        assert set(found) == positions  # every chip reached once, from the root
        if depth is not None:
            assert max(found.values()) <= depth
    if depth is not None and root_at == "first":
        assert max(max(bfs_depths(p, root).values()) for p in trees_) == depth


@pytest.mark.parametrize("topology", ["torus:4x4", "torus:8", "mesh:3x4"])
def test_spanning_tree_broadcast_moves_each_byte_to_each_chip_once(topology):
    """n - 1 chips each receive V once: (n - 1) V over all links (the pieces are whole bytes: a few bytes more);
    an even split puts V / d on each of the root's d links; numeric: every chip ends with the root's row."""
    system = System("tpu-v5e", topology=topology)
    n = len(system.network.chips)
    r = run_collective("broadcast", system, V, algorithm="spanning_trees", root=0)
    assert r.total_link_bytes == pytest.approx((n - 1) * V, rel=1e-3)
    d = system.graph.out_degree(0)
    assert r.max_link_bytes == pytest.approx(V / d, rel=1e-3)
    data = np.random.default_rng(1).standard_normal((n, 96))
    out = run_collective("broadcast", System("tpu-v5e", topology=topology), data=data, algorithm="spanning_trees",
                         root=0).outputs
    for chip in range(n):
        np.testing.assert_array_equal(out[chip], data[0])
    red = run_collective("reduce", System("tpu-v5e", topology=topology), data=data, algorithm="spanning_trees",
                         root=0).outputs
    np.testing.assert_allclose(red[0], data.sum(axis=0), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("topology,sizes,wraps", [("torus:4x4", (4, 4), (True, True)), ("torus:8", (8,), (True,))])
def test_spanning_tree_gather_bytes_are_each_shard_times_its_hops(topology, sizes, wraps):
    """Every other chip's shard (V / n), cut in d parts, climbs its tree to the root: tree t carries V / (n d) of
    chip x over depth_t(x) links, so the links carry sum_t sum_x depth_t(x) V / (n d) in all and the root takes in
    (n - 1) V / n; numeric: the root ends with every row, Scatter every chip with its own."""
    root = tuple(0 for _ in sizes)
    trees_ = forest(sizes, wraps, root)
    n, d = int(np.prod(sizes)), len(trees_)
    hops = sum(sum(bfs_depths(p, root).values()) for p in trees_)
    r = run_collective("gather", System("tpu-v5e", topology=topology), V, algorithm="spanning_trees", root=0)
    assert r.total_link_bytes == pytest.approx(hops * V / (n * d), rel=1e-6)
    ingress = sum(b for link, b in r.link_bytes.items() if link.endswith("->0"))
    assert ingress == pytest.approx((n - 1) * V / n, rel=1e-6)
    data = np.random.default_rng(2).standard_normal((n, 40))
    g = run_collective("gather", System("tpu-v5e", topology=topology), data=data, algorithm="spanning_trees", root=0)
    np.testing.assert_array_equal(g.outputs[0], data.reshape(-1))


def hand_drawn_8():
    """The in-order binary tree of ranks 0..7 (i = rank + 1; rank 7, i = 8, on top of the 7-node tree):

               7
              /
             3
           /   \\
          1     5
         / \\   / \\
        0   2 4   6
    """
    return {3: 7, 1: 3, 5: 3, 0: 1, 2: 1, 4: 5, 6: 5}


def in_order(parent, n):
    kids = {r: sorted(c for c, p in parent.items() if p == r) for r in range(n)}
    root = next(r for r in range(n) if r not in parent)

    def walk(r):
        left = [c for c in kids[r] if c < r]
        right = [c for c in kids[r] if c > r]
        assert len(left) <= 1 and len(right) <= 1, f"rank {r} has children {kids[r]}"
        return [y for c in left for y in walk(c)] + [r] + [y for c in right for y in walk(c)]

    return walk(root)


def test_binary_tree_of_8_is_the_hand_drawn_one():
    assert binary_parents(8) == hand_drawn_8()


@pytest.mark.parametrize("n", [3, 4, 5, 7, 8, 12, 16, 31, 33, 64])
def test_binary_tree_is_an_in_order_binary_tree_log2_deep(n):
    parent = binary_parents(n)
    assert len(parent) == n - 1
    assert in_order(parent, n) == list(range(n))  # binary, every rank once, left < rank < right
    root = next(r for r in range(n) if r not in parent)
    assert max(bfs_depths(parent, root).values()) == n.bit_length() - 1  # floor(log2 n)


@pytest.mark.parametrize("n", [4, 8, 16, 24])
def test_double_binary_tree_makes_every_rank_a_leaf_once(n):
    """NCCL's double tree, even rank counts: leaves of one tree are the interior ranks of the other."""
    one, two = trees(n, True)
    leaves = [set(range(n)) - set(t.values()) for t in (one, two)]
    assert leaves[0] == set(range(0, n, 2)) and leaves[0].isdisjoint(leaves[1])
    assert leaves[0] | leaves[1] == set(range(n))


@pytest.mark.parametrize("n", [3, 5, 7, 9, 13, 31])
def test_double_binary_tree_of_an_odd_count_shares_one_leaf(n):
    """Odd rank counts (NCCL's ``ncclGetDtree`` shifts the second tree by one rank there): each tree has (n + 1) / 2
    leaves, so n + 1 leaf places over n ranks -- at least one rank is a leaf in both; the trees share exactly one,
    so no rank is interior in both (a mirror of an odd count keeps the same leaves: (n - 1) / 2 ranks interior in
    both, each carrying both trees' halves)."""
    forest_ = trees(n, True)
    leaves = [set(range(n)) - set(t.values()) for t in forest_]
    assert [len(x) for x in leaves] == [(n + 1) // 2] * 2
    assert len(leaves[0] & leaves[1]) == 1
    assert leaves[0] | leaves[1] == set(range(n))  # every rank a leaf in one tree: interior in at most one
    for parent in forest_:
        root = next(r for r in range(n) if r not in parent)
        assert max(bfs_depths(parent, root).values()) <= n.bit_length() - 1  # each still log2 deep


@pytest.mark.parametrize("n,double", [(8, False), (8, True), (13, False), (13, True), (16, True)])
def test_tree_sends_reduce_every_contribution_once_and_return_the_sum_to_every_rank(n, double):
    """Per tree and chunk: each non-root rank sends up once to its parent and gets the sum down once from it;
    following the up sends' waits, the root's sum holds every rank's contribution exactly once."""
    forest_ = trees(n, double)
    out = sends(n, double)
    carries = {}  # send index -> Counter of the ranks whose contribution it carries
    for i, (t, c, way, a, b, deps) in enumerate(out):
        assert b == forest_[t].get(a) if way == "up" else a == forest_[t].get(b)
        if way == "up":
            carries[i] = Counter([a]) + sum((carries[j] for j in deps if out[j][2] == "up" and out[j][1] == c),
                                            Counter())
    for t, parent in enumerate(forest_):
        root = next(r for r in range(n) if r not in parent)
        for c in range(8):
            ups = [(i, s) for i, s in enumerate(out) if s[0] == t and s[1] == c and s[2] == "up"]
            downs = Counter(s[4] for s in out if s[0] == t and s[1] == c and s[2] == "down")
            assert sorted(s[3] for _, s in ups) == sorted(parent)
            assert downs == Counter(list(parent))  # every non-root rank receives the sum once
            at_root = sum((carries[i] for i, s in ups if s[4] == root), Counter()) + Counter([root])
            assert at_root == Counter(range(n))


@pytest.mark.parametrize("algorithm", ["binary_tree", "double_binary_tree"])
def test_binary_tree_allreduce_bytes_and_values(algorithm):
    """switch:8: each of the 7 tree edges carries V up and V down (each tree V / 2 on the double tree, over twice
    the edges), every GPU -> switch -> GPU hop two links: 28 V in all; a rank takes in V per child plus V from its
    parent (rank 1 of the hand-drawn tree: 3 V). Values: numpy's sum on every rank."""
    r = run_collective("all_reduce", System("h100", topology="switch:8"), V, algorithm=algorithm)
    assert r.total_link_bytes == pytest.approx(28 * V, rel=1e-4)  # 16 chunks of whole 256-byte keys: a little over
    if algorithm == "binary_tree":
        assert r.link_bytes["sw0->1"] == pytest.approx(3 * V, rel=1e-6)
        assert r.link_bytes["sw0->7"] == pytest.approx(1 * V, rel=1e-6)  # the root: one child, no parent
    data = np.random.default_rng(4).standard_normal((8, 128))
    out = run_collective("all_reduce", System("h100", topology="switch:8"), data=data, algorithm=algorithm).outputs
    for rank in range(8):
        np.testing.assert_allclose(out[rank], data.sum(axis=0), rtol=1e-12, atol=1e-12)
