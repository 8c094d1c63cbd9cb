"""`protocol.priced_graph` (the tuner's priced copy of a network's graph, issue 29) is what networkx's own copy and a
pass over its edges give: the oracle below is that plain construction, written out here; and the calibrated tuner
prices every algorithm and protocol as it did on such a copy."""
from __future__ import annotations

import math

import networkx as nx
import pytest

from simulator.collectives import protocol
from simulator.hardware.specs import get_chip
from simulator.workloads.plans.layout import parse_plan_mesh
from simulator.workloads.plans.links import build_system


def _plain(graph, fraction, latency):
    graph = graph.copy()
    for _, _, data in graph.edges(data=True):
        kind = data.get("kind", "ici")
        data["bandwidth_bytes_per_s"] *= fraction(kind)
        if latency is not None:
            data["latency_s"] = latency(kind, data["latency_s"])
    return graph


def _fraction(kind):
    return {"nvlink": 0.8, "ib": 0.6}.get(kind, 0.9)


def _latency(kind, own):
    return own + (3e-6 if kind == "ib" else 1e-6)


@pytest.mark.parametrize("directed", [True, False])
@pytest.mark.parametrize("latency", [None, _latency])
def test_the_priced_graph_is_the_plain_copy_priced(directed, latency):
    system, _ = build_system(get_chip("h100"), parse_plan_mesh("data=4,model=8"), "nodes:4:8", False, True)
    graph = system.graph if directed else nx.Graph(system.graph)
    assert graph.is_directed() == directed
    before = {(u, v): dict(d) for u, v, d in graph.edges(data=True)}
    fast, plain = protocol.priced_graph(graph, _fraction, latency), _plain(graph, _fraction, latency)
    assert type(fast) is type(plain) and fast.graph == plain.graph
    assert dict(fast.nodes(data=True)) == dict(plain.nodes(data=True))
    assert sorted(fast.edges(data=True), key=repr) == sorted(plain.edges(data=True), key=repr)
    if directed:
        assert {(u, v) for u, v in fast.in_edges()} == {(u, v) for u, v in plain.in_edges()}
        assert all(fast.pred[v][u] is fast.succ[u][v] for u, v in fast.edges())
    assert {(u, v): dict(d) for u, v, d in graph.edges(data=True)} == before  # the network's own graph unchanged
    changed = next(iter(fast.edges(data=True)))
    changed[2]["bandwidth_bytes_per_s"] = -1.0  # a copy: the original keeps its rate
    assert graph.edges[changed[0], changed[1]]["bandwidth_bytes_per_s"] > 0


def test_the_calibrated_tuner_prices_as_on_the_plain_copy(monkeypatch):
    """Every (algorithm, protocol) price of a calibrated tune on H100 nodes, with the priced graph and with the
    plain copy in its place: equal."""
    from simulator.collectives import plan_collective

    def run():
        system, mesh = build_system(get_chip("h100"), parse_plan_mesh("data=4,model=8"), "nodes:4:8", False, True)
        out = []
        for kind, axes in (("all_reduce", ["data"]), ("all_gather", ["model"]), ("reduce_scatter", ["data", "model"])):
            for nbytes in (2.0**16, 2.0**26):
                plan = plan_collective(kind, system, nbytes, axes=axes, mesh=mesh, mode="full")
                out.append((plan.protocol, [(a["algorithm"], a["time_s"]) for a in plan.alternatives]))
        return out

    fast = run()
    monkeypatch.setattr(protocol, "priced_graph", _plain)
    plain = run()
    assert len(fast) == len(plain) and any(alts for _, alts in fast)
    for (p1, a1), (p2, a2) in zip(fast, plain, strict=True):
        assert p1 == p2 and [n for n, _ in a1] == [n for n, _ in a2]
        assert all(math.isclose(t1, t2, rel_tol=1e-12) for (_, t1), (_, t2) in zip(a1, a2, strict=True))
