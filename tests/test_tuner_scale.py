"""Closed forms and routes at a thousand chips: the fast paths give what first principles and networkx give.

The ring closed forms price whole phases as arrays (`RingAlgorithm.units_table`) and the switched
fabrics route from one search per source (`simulator.engine.routing`); here each is held against an
oracle computed independently: the per-entry unit formulas, networkx's own shortest paths, and the
textbook ring times on rings and switches of hundreds of chips.
"""
import math

import networkx as nx
import numpy as np
import pytest

from simulator.collectives import api
from simulator.collectives.algorithm import get_algorithm
from simulator.collectives.groups import collective_groups
from simulator.engine.routing import QuickestPaths
from simulator.engine.system import System


@pytest.mark.parametrize("name", ["unidirectional", "bidirectional", "line"])
def test_units_tables_hold_the_per_entry_formulas(name):
    ring = get_algorithm(name)
    for n in range(2, 13):
        steps = range(1, ring.steps(n) + 1)
        for d in (1, -1):
            positions = [i for i in range(n) if ring.closed or 0 <= i + d < n]  # links that exist
            for what, per_entry in (("ag", ring.split_gather_units), ("rs", ring.split_reduce_units)):
                for split in (0.5, 0.3):
                    table = np.asarray(ring.units_table(what, n, d, split))
                    by_entry = [[per_entry(n, i, d, h, split) for h in steps] for i in positions]
                    assert table[positions].tolist() == by_entry, (n, d, what, split)


def _cost(u, v, data):
    return data["latency_s"] + 1e6 / data["bandwidth_bytes_per_s"]


@pytest.mark.parametrize("topology", ["nodes:4:8", "fattree:8:8", "multislice:2:4x4"])
def test_routes_from_one_search_are_networkx_routes(topology):
    """Every route a network gives is networkx's quickest path (ties: networkx's own pick)."""
    net = System("tpu-v5e" if "slice" in topology else "h100", topology=topology, trace=False).network
    for a in net.chips[::5]:
        for b in net.chips:
            if a != b:
                assert net.routes(a, b)[0] == nx.shortest_path(net.graph, a, b, weight=_cost)


def test_a_tie_is_left_to_networkx():
    """Two equally quick ways from a to d: the one-search answer is None (networkx decides)."""
    g = nx.DiGraph()
    for u, v in (("a", "b"), ("b", "d"), ("a", "c"), ("c", "d"), ("d", "e")):
        g.add_edge(u, v, latency_s=1e-6, bandwidth_bytes_per_s=1e9)
    g.add_edge("a", "e", latency_s=1.0, bandwidth_bytes_per_s=1e9)
    paths = QuickestPaths(g, _cost)
    assert paths.path("a", "b") == ["a", "b"]
    assert paths.path("a", "d") is None and paths.path("a", "e") is None  # both go through the tie at d
    assert paths.path("d", "e") == ["d", "e"]


def _closed_form(system, kind, nbytes, name):
    """The algorithm's closed form for ``kind`` over every chip, its job prepared as planning does (no schedule
    is built: a thousand-chip ring's would hold a million transfers)."""
    net, algorithm = system.network, get_algorithm(name)
    groups = collective_groups(net, None, None)
    job = api._job(algorithm, kind, net, groups, nbytes, None, "parallel", None, (0,) * len(groups[0].sizes),
                   None, None, None)
    return algorithm.closed_form(job)


def _link(system):
    data = next(iter(system.network.graph.edges(data=True)))[2]
    return data["latency_s"], data["bandwidth_bytes_per_s"]


def test_a_thousand_chip_bidirectional_ring_by_hand():
    """AllGather of V on a ring of n: ceil((n-1)/2) hops of latency, (n-1)/n x V / (2 W) of bandwidth."""
    n, nbytes = 1024, 1024 * 1e6
    system = System("tpu-v5e", topology=f"torus:{n}", trace=False)
    alpha, w = _link(system)
    by_hand = math.ceil((n - 1) / 2) * alpha + (n - 1) / 2 * (nbytes / n) / w
    assert _closed_form(system, "all_gather", nbytes, "bidirectional") == pytest.approx(by_hand, rel=1e-9)


def test_a_long_line_by_hand():
    """A line of n (no wraparound used): n - 1 steps of latency plus a shard of V / n."""
    n, nbytes = 300, 300 * 1e6
    system = System("tpu-v5e", topology=f"torus:{n}", trace=False)
    alpha, w = _link(system)
    assert _closed_form(system, "all_gather", nbytes, "line") == pytest.approx((n - 1) * (alpha + nbytes / n / w),
                                                                               rel=1e-9)


def test_a_512_gpu_switch_ring_by_hand():
    """One-way ring through one switch: each of n - 1 steps crosses two links (2 alpha) with a shard of V/n."""
    n, nbytes = 512, 512 * 1e6
    system = System("h100", topology=f"switch:{n}", trace=False)
    alpha, b = _link(system)
    assert _closed_form(system, "all_gather", nbytes, "unidirectional") == pytest.approx(
        (n - 1) * (2 * alpha + nbytes / n / b), rel=1e-9)


@pytest.mark.parametrize("topology", ["nodes:4:8", "fattree:8:8", "multislice:4:4x4"])
def test_a_python_whole_graph_search_is_scipys(topology):
    """The whole-graph search a process runs in Python before it imports SciPy gives SciPy's distances exactly
    and its predecessors wherever the way in is the one quickest (no second in-link of equal cost)."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import dijkstra

    net = System("tpu-v5e" if "slice" in topology else "h100", topology=topology, trace=False).network
    paths = QuickestPaths(net.graph, _cost)
    paths._prepare()
    n = len(paths._nodes)
    matrix = csr_matrix((paths._costs, (paths._rows, paths._cols)), shape=(n, n))
    for src in net.chips[::7]:
        s = paths._index[src]
        dist, pred = paths._python_tree(s)
        want_dist, want_pred = dijkstra(matrix, indices=s, return_predecessors=True)
        assert dist.tolist() == want_dist.tolist()
        ways_in = np.zeros(n, dtype=int)
        for u, v, c in zip(paths._rows, paths._cols, paths._costs, strict=True):
            ways_in[v] += want_dist[u] + c == want_dist[v]
        unique = ways_in == 1
        assert (pred[unique] == want_pred[unique]).all() and pred[s] == want_pred[s] == -9999


@pytest.mark.parametrize("budget", [0, 10**9])
def test_routes_are_networkx_routes_by_either_whole_graph_search(budget, monkeypatch):
    """Routes that need whole-graph searches (a DCN switch reaches every chip) are networkx's, whether the
    searches run in Python (a large budget) or compiled (none)."""
    from simulator.engine import routing

    monkeypatch.setattr(routing, "PYTHON_TREE_LINKS", budget)
    monkeypatch.setattr(routing, "_python_links", [0])
    monkeypatch.setattr(routing, "_scipy_loaded", lambda: False)  # (another test imported it)
    searched = []
    python_tree = routing.QuickestPaths._python_tree
    monkeypatch.setattr(routing.QuickestPaths, "_python_tree",
                        lambda self, s: searched.append(s) or python_tree(self, s))
    monkeypatch.setattr(routing, "LOCAL", 4)  # every route past the source's first links: a whole-graph search
    net = System("tpu-v5e", topology="multislice:4:4x4", trace=False).network
    for a in net.chips[::9]:
        for b in net.chips[::3]:
            if a != b:
                assert net.routes(a, b)[0] == nx.shortest_path(net.graph, a, b, weight=_cost)
    assert bool(searched) == bool(budget)  # (the search it was meant to hold)
