"""Root collectives on multipod (three levels: chips, slices over a pod's DCN switch, pods over the core).

Oracles by hand from the links (tpu-v5e, REFERENCE.md: DCN 3.125 GB/s per chip each way, 10 us a traversal; the
core link of a pod carries a quarter of a DCN port per chip of the pod, each way): every pod but the root's must
receive V (Broadcast; Reduce: send it) and only through its one core link.
"""
from __future__ import annotations

import pytest

from simulator import System
from simulator.collectives import topology_bound
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
