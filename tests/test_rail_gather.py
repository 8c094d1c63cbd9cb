"""rail_gather: Gather and Scatter across GPU nodes over the rails of the root's node (collectives/rail_gather.py).

Oracles by hand from the nodes:K:G links: a GPU's NVLink port (W_nv each way, a GPU-to-GPU route crossing two
links) and its NIC (W_ib, two links of the IB switch); equal messages that start together on a link end
together; numeric results against numpy.
"""
from __future__ import annotations

import numpy as np
import pytest
from gpu_nodes import node_links

from simulator import System
from simulator.collectives import run_collective

V = 64e6


@pytest.mark.parametrize("kind", ["gather", "scatter"])
def test_two_nodes_one_infiniband_step_then_nvlink(kind):
    """nodes:2:8, root GPU 0: 7 rail GPUs each take one shard (s = V/16) over their NIC while the node's own 7
    shards cross the root's NVLink port (Gather); then the 7 forwards share that port. Scatter: the root sends
    the 7 remote shards, one per rail GPU, over NVLink, each goes on over InfiniBand, and the node's own 7
    follow over NVLink; the root's own rail's shard goes straight over its NIC meanwhile."""
    system = System("h100", topology="nodes:2:8")
    a_nv, w_nv, a_ib, w_ib = node_links(system)
    s = V / 16
    nvlink_step, ib_step = a_nv + 7 * s / w_nv, a_ib + s / w_ib
    expected = max(nvlink_step, ib_step) + nvlink_step if kind == "gather" else max(nvlink_step + ib_step,
                                                                                    2 * nvlink_step)
    r = run_collective(kind, system, V)
    assert r.algorithm == "rail_gather"
    assert r.time_s == pytest.approx(expected, rel=1e-6)
    assert r.analytic_s == pytest.approx(r.time_s, rel=1e-6)
    assert r.time_s <= 1.3 * r.topology_bound_s


@pytest.mark.parametrize("topology", ["nodes:4:8", "nodes:3:2", "nodes:2:4"])
def test_closed_form_equals_the_simulation_and_beats_sending_straight(topology):
    for kind in ("gather", "scatter"):
        for nbytes in (1e5, 1e9):
            r = run_collective(kind, System("h100", topology=topology), nbytes, algorithm="rail_gather", root=3)
            assert r.time_s == pytest.approx(r.analytic_s, rel=1e-6)
            straight = run_collective(kind, System("h100", topology=topology), nbytes, algorithm="root_direct", root=3)
            assert r.time_s < straight.time_s or nbytes < 1e6


def test_four_nodes_steps_pace_the_rails():
    """nodes:4:8, 64 MB, s = V/32: three InfiniBand steps of a shard at each rail GPU, each step's bytes right
    after the last one's (the step split: its route latency paid once, issue 31; 3 (a_ib + s / w_ib) before), the
    last forwarded over the root's NVLink port with the other 6 rails' (each step's forwards take less than an IB
    step's bytes, so they keep up)."""
    system = System("h100", topology="nodes:4:8")
    a_nv, w_nv, a_ib, w_ib = node_links(system)
    s = V / 32
    assert 7 * s / w_nv + a_nv < s / w_ib
    r = run_collective("gather", system, V)
    assert r.time_s == pytest.approx(a_ib + 3 * s / w_ib + a_nv + 7 * s / w_nv, rel=1e-6)


@pytest.mark.parametrize("topology,root", [("nodes:2:4", 0), ("nodes:3:2", 5), ("nodes:4:8", 13)])
def test_numeric_equals_numpy(topology, root):
    n = len(System("h100", topology=topology).network.chips)
    data = np.random.default_rng(5).standard_normal((n, 2 * n))
    gathered = run_collective("gather", System("h100", topology=topology), data=data, root=root,
                              algorithm="rail_gather")
    np.testing.assert_array_equal(gathered.outputs[root], data.reshape(-1))
    scattered = run_collective("scatter", System("h100", topology=topology), data=data, root=root,
                               algorithm="rail_gather")
    for chip in range(n):
        np.testing.assert_array_equal(scattered.outputs[chip], np.split(data[root], n)[chip])



def test_across_fat_tree_units_it_does_not_apply():
    """superpod:2: the rails' routes to the root's node differ (some cross the spine), which the closed form's
    single InfiniBand step does not price; auto keeps the others there."""
    from simulator.collectives import applicable, collective_groups
    net = System("h100", topology="superpod:2", trace=False).network
    assert "rail_gather" not in applicable("gather", net, collective_groups(net, None))
    assert "rail_gather" in applicable("gather", System("h100", topology="fattree:4:8").network,
                                       collective_groups(System("h100", topology="fattree:4:8").network, None))
