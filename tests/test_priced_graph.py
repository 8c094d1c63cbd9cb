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


def test_a_kept_priced_view_is_the_priced_graph_of_its_settings():
    """`priced_view` keeps one priced copy per distinct set of settings' values on a graph (`_priced_kept`): the copy
    it hands out equals `priced_graph` made fresh with those settings (and the plain copy), the same settings share
    one copy, settings that differ on any link kind get their own, and a settings' value that no link uses (a kind
    absent from the graph) does not tell copies apart."""
    system, _ = build_system(get_chip("h100"), parse_plan_mesh("data=4,model=8"), "nodes:4:8", False, True)
    net = system.network
    kinds = {d.get("kind", "ici") for _, _, d in net.graph.edges(data=True)}
    assert {"nvlink", "ib"} <= kinds

    def scaled(nvlink):
        return lambda kind: {"nvlink": nvlink, "ib": 0.6}.get(kind, 0.9)

    first = protocol.priced_view(net, scaled(0.8), _latency).graph
    again = protocol.priced_view(net, scaled(0.8), _latency).graph
    other = protocol.priced_view(net, scaled(0.7), _latency).graph
    no_latency = protocol.priced_view(net, scaled(0.8), None).graph
    assert first is again and other is not first and no_latency is not first
    for graph, fraction, latency in ((first, scaled(0.8), _latency), (other, scaled(0.7), _latency),
                                     (no_latency, scaled(0.8), None)):
        plain = _plain(net.graph, fraction, latency)
        assert sorted(graph.edges(data=True), key=repr) == sorted(plain.edges(data=True), key=repr)
    nvlink_edge = next((u, v) for u, v, d in net.graph.edges(data=True) if d["kind"] == "nvlink")
    assert other.edges[nvlink_edge]["bandwidth_bytes_per_s"] == \
        net.graph.edges[nvlink_edge]["bandwidth_bytes_per_s"] * 0.7 != first.edges[nvlink_edge]["bandwidth_bytes_per_s"]

    def unused_differs(kind):
        return {"nvlink": 0.8, "ib": 0.6, "no such kind": 0.1}.get(kind, 0.9)

    if "ici" not in kinds:  # the default 0.9 applies to no link here either way
        assert protocol.priced_view(net, unused_differs, _latency).graph is first
