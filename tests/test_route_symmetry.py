"""Routes of node systems by unit rotation, and route searches in bounded memory (simulator.acceleration.route_symmetry,
simulator.engine.routing): every route is networkx's quickest path, whichever way it was found."""
from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from simulator.acceleration.route_symmetry import UnitRotation
from simulator.collectives.algorithm import get_algorithm
from simulator.collectives.hierarchical import _uniform_table
from simulator.engine import routing
from simulator.engine.system import System


def _cost(u, v, data):  # the oracle's own cost: latency plus a megabyte over the bandwidth
    return data["latency_s"] + 1e6 / data["bandwidth_bytes_per_s"]


@pytest.mark.parametrize("topology", ["superpod:2", "fattree:64:4", "nodes:4:8", "multislice:4:4x4"])
def test_routes_moved_from_unit_zero_are_networkx_routes(topology):
    net = System("tpu-v5p" if "slice" in topology else "h100", topology=topology, trace=False).network
    rotation = UnitRotation.of(net.graph)
    assert rotation is not None and rotation.period >= 2
    chips = net.chips
    rng = np.random.default_rng(0)
    pairs = [(int(a), int(b)) for a, b in rng.choice(chips, size=(300, 2)) if a != b]
    pairs += [(c, chips[(i + 1) % len(chips)]) for i, c in enumerate(chips[::7])]  # ring neighbours, some far
    for a, b in pairs:
        assert net.routes(a, b)[0] == nx.shortest_path(net.graph, a, b, weight=_cost), (a, b)
    assert net._unit_routes  # (pairs outside unit 0 came through the rotation)


def test_the_rotation_is_a_bijection_that_keeps_every_link():
    net = System("h100", topology="superpod:2", trace=False).network
    rotation = UnitRotation.of(net.graph)
    g = net.graph
    for v in g.nodes:
        assert rotation.move(rotation.move(v, 1), -1) == v
    for u, v, data in g.edges(data=True):
        image = g.edges[rotation.move(u, 1), rotation.move(v, 1)]
        assert (image["bandwidth_bytes_per_s"], image["latency_s"]) == (data["bandwidth_bytes_per_s"],
                                                                        data["latency_s"])


@pytest.mark.parametrize("topology", ["torus:4x4", "ring:8", "slice:4x4"])
def test_no_rotation_where_there_is_no_node_system(topology):
    assert UnitRotation.of(System("tpu-v5e", topology=topology, trace=False).network.graph) is None


def test_a_faulted_node_system_has_no_rotation():
    system = System("h100", topology="nodes:4:8", trace=False)
    graph = system.network.graph.copy()
    graph.graph["faults"] = ["link 0->sw0 down"]
    assert UnitRotation.of(graph) is None


def test_route_searches_keep_bounded_memory(monkeypatch):
    """Every source's routes on a switched fabric, with the kept whole-graph searches capped at 8: each route is
    still networkx's, and no more than the cap are held (one per source held 25,600 x 29,601 on superpod:100)."""
    monkeypatch.setattr(routing, "TREE_BYTES", 0)  # the floor: 8 searches
    net = System("h100", topology="fattree:8:8", trace=False).network
    net._symmetry = None  # search every source directly
    chips = net.chips
    for a in chips:
        b = chips[(chips.index(a) + 9) % len(chips)]  # another node, another rail: across the spine
        assert net.routes(a, b)[0] == nx.shortest_path(net.graph, a, b, weight=_cost)
        assert len(net._quickest._trees) <= 8


@pytest.mark.parametrize("name", ["unidirectional", "bidirectional"])
@pytest.mark.parametrize("what", ["rs", "ag"])
def test_a_tier_rings_one_row_table_is_its_per_entry_units(name, what):
    """The hierarchical tier ring's one-row table (unidirectional: one; bidirectional, whose two halves differ
    by position: none) holds its units entry by entry, on rings far larger than the ones it was checked on."""
    algorithm = get_algorithm(name)
    units = algorithm.reduce_units if what == "rs" else algorithm.gather_units
    table = _uniform_table(algorithm, what, units)
    assert (table is not None) == (name == "unidirectional")
    for n in (2, 4, 7, 100) if table is not None else ():
        for d in (1, -1):
            by_entry = [[units(n, i, d, h) for h in range(1, algorithm.steps(n) + 1)] for i in range(n)]
            assert np.asarray(table(n, d)).tolist() == by_entry


@pytest.mark.parametrize("kind", ["all_reduce", "all_gather", "reduce_scatter"])
@pytest.mark.parametrize("topology", ["multislice:4:4x4", "multislice:3:2x4"])
def test_a_multislice_quotient_run_is_the_full_run(kind, topology):
    """Slice rotations (symmetry.slice_actions) make a multislice collective run one slice's transfers: the
    same time, bytes and busy times as every transfer run (mode full)."""
    from simulator.acceleration.automorphisms import slice_actions
    from simulator.collectives.api import run_collective

    results = {}
    for mode in ("auto", "full"):
        system = System("tpu-v5p", topology=topology, trace=True)
        results[mode] = run_collective(kind, system, 1e6, mode=mode)
    auto, full = results["auto"], results["full"]
    assert slice_actions(System("tpu-v5p", topology=topology, trace=False).network)
    assert auto.mode == "quotient" and full.mode != "quotient"
    assert auto.time_s == pytest.approx(full.time_s, rel=1e-12)
    assert auto.max_link_bytes == pytest.approx(full.max_link_bytes) and \
        auto.total_link_bytes == pytest.approx(full.total_link_bytes)
    assert auto.link_bytes.keys() == full.link_bytes.keys()
    assert all(auto.link_bytes[k] == pytest.approx(v) for k, v in full.link_bytes.items())


@pytest.mark.parametrize("key,value", [(None, None), ("bandwidth_bytes_per_s", 1e9), ("latency_s", 1e-3),
                                       ("kind", "dcn")])
def test_a_link_unlike_its_image_breaks_the_rotation(key, value):
    """One link of node 2 changed (its bandwidth, latency or kind): the rotation maps node 1's like link onto it,
    so there is none; unchanged, there is one."""
    graph = System("h100", topology="nodes:4:8", trace=False).network.graph.copy()
    if key is not None:
        u, v = next((u, v) for u, v in graph.edges if u == 16)  # chip 16: node 2's first GPU
        graph.edges[u, v][key] = value
    assert (UnitRotation.of(graph) is None) == (key is not None)
