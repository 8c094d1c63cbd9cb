"""`build_layout`: `build_system`'s graph and mesh without the system, for the closed forms of a step that is not
simulated (`train_plan(simulate=False)` builds no chips or channels: on 8,192 chips that was most of its time)."""
from __future__ import annotations

import networkx as nx
import pytest

from simulator import get_chip, get_model
from simulator.errors import PodsimError
from simulator.workloads.plans import TrainOptions, parse_plan_mesh, train_plan
from simulator.workloads.plans import links as plan_links
from simulator.workloads.plans.links import build_layout, build_system


@pytest.mark.parametrize("chip,mesh,topology", [
    ("tpu-v5e", "data=2,fsdp=16", "multislice:2:4x4"),
    ("tpu-v5p", "data=8,model=8", None),  # the default slice: the y axis split
    ("tpu-v5e", "data=3,model=4", None),  # no real slice of 12 chips: the mesh's own shape
    ("h100", "data=2,model=8", "nodes:2:8"),
    ("tpu-v5e", "data=1", None),  # one chip, no topology
])
def test_the_layout_is_the_systems(chip, mesh, topology):
    spec, plan = get_chip(chip), parse_plan_mesh(mesh)
    graph, placed = build_layout(spec, plan, topology)
    system, expected = build_system(spec, plan, topology, trace=False)
    if system.graph is None:
        assert graph is None and placed is None and expected is None
        return
    assert graph.graph == system.graph.graph
    assert list(graph.nodes(data=True)) == list(system.graph.nodes(data=True))
    assert list(graph.edges(data=True)) == list(system.graph.edges(data=True))
    assert placed.describe() == expected.describe()
    assert all(placed.coords(c) == expected.coords(c) for c in system.network.chips)


def _bad(**link: float) -> nx.DiGraph:
    g = nx.DiGraph()
    for c in range(2):
        g.add_node(c, role="chip")
    g.add_edge(0, 1, bandwidth_bytes_per_s=1e9, latency_s=1e-6)
    g.add_edge(1, 0, **{"bandwidth_bytes_per_s": 1e9, "latency_s": 1e-6, **link})
    return g


@pytest.mark.parametrize("graph", [_bad(bandwidth_bytes_per_s=0.0), _bad(latency_s=-1.0),
                                   nx.DiGraph([(0, 1)])])  # (no chips: the nodes have no role)
def test_a_bad_graph_is_refused_as_the_system_refuses_it(graph):
    spec, plan = get_chip("tpu-v5e"), parse_plan_mesh("data=2")
    with pytest.raises(PodsimError) as system_error:
        build_system(spec, plan, graph)
    with pytest.raises(PodsimError) as layout_error:
        build_layout(spec, plan, graph)
    assert str(layout_error.value) == str(system_error.value)


def test_a_step_not_simulated_builds_no_system(monkeypatch):
    cfg, chip, plan = get_model("llama-2-7b"), get_chip("tpu-v5p"), parse_plan_mesh("data=2,pipeline=4,model=8")
    opts = TrainOptions(microbatches=8)
    with_system = train_plan(cfg, chip, 64, 1024, plan, opts, None, simulate=True, trace=False)

    def refuse(*_a, **_k):
        raise AssertionError("a System was built")
    monkeypatch.setattr(plan_links, "System", refuse)
    without = train_plan(cfg, chip, 64, 1024, plan, opts, None, simulate=False, trace=False)
    assert without["closed_form_s"] == with_system["closed_form_s"]  # (the pipeline's hops priced on the graph)
    assert without["closed_form"] == with_system["closed_form"]
