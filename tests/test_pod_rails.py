"""Root collectives on multipod (three levels: chips, slices over a pod's DCN switch, pods over the core).

Oracles by hand from the links (tpu-v5e, REFERENCE.md: DCN 3.125 GB/s per chip each way, 10 us a traversal; the
core link of a pod carries a quarter of a DCN port per chip of the pod, each way): every pod but the root's must
receive V (Broadcast; Reduce: send it) and only through its one core link.
"""
from __future__ import annotations

import numpy as np
import pytest

from simulator import System
from simulator.collectives import run_collective, topology_bound
from simulator.collectives.groups import collective_groups

W_D, A_DCN = 3.125e9, 1e-5  # tpu-v5e DCN per chip each way (B/s); one traversal's latency (s)


def _net(topology: str):
    return System("tpu-v5e", topology=topology, trace=False).network


@pytest.mark.parametrize("topology,chips_per_pod", [("multipod:2:2:4x4", 32), ("multipod:3:2:1x2", 4)])
@pytest.mark.parametrize("kind", ["broadcast", "reduce"])
def test_the_pod_cut_by_hand(topology, chips_per_pod, kind):
    """V into (out of) every other pod over its core link of chips_per_pod W_D / 4, moving bytes once its own
    latency has passed: A_DCN + V / (chips_per_pod W_D / 4); larger than the slice cut V / (m W_D) here."""
    net, v = _net(topology), 1e9
    groups = collective_groups(net, None)
    bound = topology_bound(kind, net, groups, v, (0,) * len(groups[0].sizes))
    assert bound == pytest.approx(A_DCN + v / (chips_per_pod * W_D / 4), rel=1e-9)


def test_the_pod_cut_for_gather_by_hand():
    """Gather on multipod:2:2:4x4: the other pod's 32 shards (V / 2) leave it over its core link."""
    net, v = _net("multipod:2:2:4x4"), 1e9
    groups = collective_groups(net, None)
    bound = topology_bound("gather", net, groups, v, (0,) * len(groups[0].sizes))
    assert bound == pytest.approx(A_DCN + v / 2 / (32 * W_D / 4), rel=1e-9)


W = 4.5e10  # tpu-v5e ICI, one way per link (REFERENCE.md)
A_ICI = 1e-6  # an ICI link's latency


def test_broadcast_of_two_pods_of_one_slice_of_two_step_by_step():
    """multipod:2:1:1x2, one batch of m A = 2 pieces of P = V / 2. The core link of a pod of 2 chips carries
    2 W_D / 4 each way; both rails cross it at once, so each moves at W_D / 4, over 4 traversals (chip, pod switch,
    core, pod switch, chip). The root (0, 0) sends both pieces to (0, 1) over ICI (A_ICI + 2P / W); the barrier
    waits for that, both rails cross (4 A_DCN + P / (W_D / 4)), the other slice's line of two exchanges its pieces
    (A_ICI + P / W). Reduce: the same steps backwards."""
    nbytes = 2e6
    p = nbytes / 2
    expected = (A_ICI + 2 * p / W) + (4 * A_DCN + p / (W_D / 4)) + (A_ICI + p / W)
    for kind in ("broadcast", "reduce"):
        r = run_collective(kind, System("tpu-v5e", topology="multipod:2:1:1x2", trace=False), nbytes,
                           algorithm="pod_rails", chunks=2)
        assert r.time_s == pytest.approx(expected, rel=1e-9)
        assert r.analytic_s == pytest.approx(expected, rel=1e-9)


def test_gather_of_two_pods_of_one_slice_of_two_step_by_step():
    """multipod:2:1:1x2, one round, shards of s = V / 4: both shards of pod 1 cross the core at once (4 A_DCN +
    s / (W_D / 4)) while the root's neighbour sends its own shard up (A_ICI + s / W); the neighbour then sends the
    one from pod 1 up (A_ICI + s / W). Scatter: the same backwards."""
    nbytes = 4e6
    s = nbytes / 4
    hop = A_ICI + s / W
    expected = max(hop, 4 * A_DCN + s / (W_D / 4)) + hop
    for kind in ("gather", "scatter"):
        r = run_collective(kind, System("tpu-v5e", topology="multipod:2:1:1x2", trace=False), nbytes,
                           algorithm="pod_gather", chunks=1)
        assert r.time_s == pytest.approx(expected, rel=1e-9)
        assert r.analytic_s == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("topology,root", [("multipod:2:2:4x4", 0), ("multipod:2:2:4x4", 37), ("multipod:3:2:2x2", 13),
                                           ("multipod:2:3:2x2", 20), ("multipod:3:1:1x2", 3)])
@pytest.mark.parametrize("kind,algorithm", [("broadcast", "pod_rails"), ("reduce", "pod_rails"),
                                            ("gather", "pod_gather"), ("scatter", "pod_gather")])
def test_closed_form_equals_the_simulation(topology, root, kind, algorithm):
    for nbytes in (1e5, 6.4e7):
        r = run_collective(kind, System("tpu-v5e", topology=topology, trace=False), nbytes, algorithm=algorithm,
                           root=root)
        assert r.time_s == pytest.approx(r.analytic_s, rel=1e-6), nbytes
        assert r.time_s >= r.topology_bound_s * (1 - 1e-12)


@pytest.mark.parametrize("kind,algorithm,core_bytes", [("broadcast", "pod_rails", 1.0), ("reduce", "pod_rails", 1.0),
                                                       ("gather", "pod_gather", 0.5),
                                                       ("scatter", "pod_gather", 0.5)])
def test_auto_runs_it_within_1_1x_of_the_bound_by_hand(kind, algorithm, core_bytes):
    """multipod:2:2:4x4, 1 GB: the bound by hand is the core cut (V, Gather: V / 2, over 32 W_D / 4 = 25 GB/s);
    before these algorithms auto ran a line (Broadcast 2293.5 ms), a ring (Reduce 2591.3 ms) or root_direct
    (Gather, Scatter 240.0 ms): 16x to 130x the old (looser) bound."""
    v = 1e9
    hand = A_DCN + core_bytes * v / (32 * W_D / 4)
    r = run_collective(kind, System("tpu-v5e", topology="multipod:2:2:4x4", trace=False), v)
    assert r.algorithm == algorithm
    assert hand <= r.time_s <= 1.1 * hand


@pytest.mark.parametrize("topology,root", [("multipod:2:2:2x2", 5), ("multipod:3:1:1x2", 4)])
def test_numeric_equals_numpy(topology, root):
    n = len(_net(topology).chips)
    rng = np.random.default_rng(5)
    data = rng.standard_normal((n, 4 * 3 * 8))
    r = run_collective("broadcast", System("tpu-v5e", topology=topology, trace=False), data=data,
                       algorithm="pod_rails", root=root)
    for chip_id, row in r.outputs.items():
        np.testing.assert_array_equal(row, data[root], err_msg=str(chip_id))
    r = run_collective("reduce", System("tpu-v5e", topology=topology, trace=False), data=data, algorithm="pod_rails",
                       root=root)
    np.testing.assert_allclose(r.outputs[root], data.sum(axis=0), rtol=1e-12)
    r = run_collective("gather", System("tpu-v5e", topology=topology, trace=False), data=data[:, :6],
                       algorithm="pod_gather", root=root)
    np.testing.assert_array_equal(r.outputs[root], data[:, :6].reshape(-1))
    whole = rng.standard_normal((n, 6 * n))
    r = run_collective("scatter", System("tpu-v5e", topology=topology, trace=False), data=whole,
                       algorithm="pod_gather", root=root)
    for chip_id, row in r.outputs.items():
        np.testing.assert_array_equal(row, whole[root].reshape(n, 6)[chip_id], err_msg=str(chip_id))


def test_each_refuses_the_other_level_count():
    with pytest.raises(Exception, match="slice_rails serves multislice"):
        run_collective("broadcast", System("tpu-v5e", topology="multislice:2:2x2"), 1e6, algorithm="pod_rails")
    with pytest.raises(Exception, match="slice_gather serves multislice"):
        run_collective("gather", System("tpu-v5e", topology="multislice:2:2x2"), 1e6, algorithm="pod_gather")
    with pytest.raises(Exception, match="pods under a core"):
        run_collective("broadcast", System("tpu-v5e", topology="multipod:2:2:2x2"), 1e6, algorithm="slice_rails")


def test_the_chain_leaves_each_pod_once():
    """The rails' chain: the root's slice, the rest of its pod, then each other pod in turn, every pod's slices
    from the root's offset in its pod round (root slice 3 = pod 1's second: 3, 2, then 5, 4, then 1, 0)."""
    from simulator.collectives.slice_rails import chain_order

    graph = {"pods": 3, "slices_per_pod": 2}
    assert chain_order(graph, 6, 3) == [3, 2, 5, 4, 1, 0]
    assert chain_order({}, 4, 1) == [1, 2, 3, 0]
