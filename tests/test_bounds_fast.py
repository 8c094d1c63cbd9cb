"""The AllToAll link-load bound computed by numpy (per axis: positions' pairwise distances weighted by the
members at each) against the generic per-pair computation it replaced, on a sweep of topologies, groups and
faults: the whole topology bound equal to 1e-12, and on fault-free grids the coordinates' distances equal to
breadth-first search's fewest hops (the oracle's premise)."""
import networkx as nx
import pytest

from simulator.collectives import bounds, collective_groups
from simulator.engine.faults import LinkDown
from simulator.engine.system import System

CASES = [("ring:5", "tpu-v5e", {}, None), ("line:6", "tpu-v5e", {}, None), ("torus:4x4", "tpu-v5e", {}, None),
         ("torus:3x5", "tpu-v5e", {}, [1]), ("mesh:3x4", "tpu-v5e", {}, None), ("torus:4x4x4", "tpu-v5p", {}, None),
         ("torus:4x4x4", "tpu-v5p", {}, [0, 2]), ("slice:2x4x4", "tpu-v5p", {}, None),
         ("torus:4x4", "tpu-v5e", {"faults": [LinkDown(0, 1)]}, None),
         ("torus:4x4x4", "tpu-v5p", {"faults": [LinkDown(0, 1), LinkDown(5, 6)]}, [1]),
         ("mesh:4x4", "tpu-v5e", {"faults": [LinkDown(0, 4)]}, None), ("torus:4x4+hosts:4", "tpu-v5e", {}, None),
         ("nodes:2:4", "h100", {}, None), ("multislice:2:2x2", "tpu-v5e", {}, None), ("switch:6", "h100", {}, None)]


def _old_fabric(net):
    g = net.graph
    return nx.subgraph_view(g, filter_node=lambda v: g.nodes[v].get("role") != "host")


def _old_link_load_bound(net, groups, chunk_bytes):
    """The generic computation: every ordered pair's fewest hops, by coordinates on a fault-free grid, else by BFS."""
    fabric, hops = _old_fabric(net), 0
    for group in groups:
        members = list(group.members.values())
        for x in members:
            if net.grid and not net.faulted:  # a dead link: coordinates' distances are not the graph's hops
                a = net.graph.nodes[x]["coord"]
                for y in members:
                    b = net.graph.nodes[y]["coord"]
                    hops += sum(min(abs(p - q), n - abs(p - q)) if w else abs(p - q)
                                for p, q, n, w in zip(a, b, net.shape, net.wrap, strict=True))
            else:
                reach = nx.single_source_shortest_path_length(fabric, x)
                hops += sum(reach[y] for y in members)
    links = [(d["latency_s"], d["bandwidth_bytes_per_s"]) for _, _, d in fabric.edges(data=True)]
    return bounds.fill(links, hops * chunk_bytes)


@pytest.mark.parametrize("topology, chip, kw, axes", CASES)
def test_alltoall_bound_equals_the_generic_computation(topology, chip, kw, axes, monkeypatch):
    net = System(chip, topology=topology, trace=False, **kw).network
    groups = collective_groups(net, axes)
    root = (0,) * len(groups[0].sizes)
    fast = bounds.topology_bound("all_to_all", net, groups, 1e9, root)
    assert bounds._link_load_bound(net, groups, 1e9 / groups[0].n ** 2) == pytest.approx(
        _old_link_load_bound(net, groups, 1e9 / groups[0].n ** 2), rel=1e-12)
    monkeypatch.setattr(bounds, "_link_load_bound", _old_link_load_bound)
    monkeypatch.setattr(bounds, "_fabric", _old_fabric)
    old = bounds.topology_bound("all_to_all", net, groups, 1e9, root)
    assert fast == pytest.approx(old, rel=1e-12) and fast > 0


@pytest.mark.parametrize("topology", ["ring:7", "torus:4x6", "mesh:3x5", "torus:3x4x5", "slice:2x2x4"])
def test_grid_hops_are_breadth_first_fewest_hops(topology):
    """On a fault-free grid the sum of coordinates' distances over all ordered pairs is the BFS one."""
    net = System("tpu-v5p", topology=topology, trace=False).network
    members = [v for v in net.graph if net.graph.nodes[v].get("role") not in ("host", "switch")]
    bfs = sum(sum(nx.single_source_shortest_path_length(net.graph, x)[y] for y in members) for x in members)
    assert bounds._grid_hops(net, members) == bfs


@pytest.mark.parametrize("topology, faults", [("ring:8", [LinkDown(2, 1)]), ("torus:4x4", [LinkDown(0, 1)]),
                                              ("torus:4x6", [LinkDown(5, 0), LinkDown(7, 13)])])
def test_under_link_faults_the_link_load_bound_counts_the_faulted_graphs_hops(topology, faults):
    """A dead cable unwraps its axis for collectives and renumbers its positions from the break, but the
    other rings of that axis keep their wraparound: every chunk's fewest hops are breadth-first search's on
    the graph the run uses (the dead links removed), over every subset of members a group may hold."""
    net = System("tpu-v5e", topology=topology, trace=False, faults=faults).network
    chips = net.chips
    fabric = net.graph
    links = [(d["latency_s"], d["bandwidth_bytes_per_s"]) for _, _, d in fabric.edges(data=True)]
    for members in (chips, chips[::2], chips[1:5], [chips[0], chips[-1]]):
        hops = sum(nx.single_source_shortest_path_length(fabric, x)[y] for x in members for y in members)
        group = collective_groups(net, None)[0]
        group.members = dict(zip([(i,) for i in range(len(members))], members, strict=True))
        assert bounds._link_load_bound(net, [group], 1e6) == pytest.approx(bounds.fill(links, hops * 1e6), rel=1e-12)
