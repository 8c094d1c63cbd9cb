"""Collectives on GPU node systems run on the quotient by node and rail rotations (`collectives.automorphisms`,
`simulator.acceleration.quotient`, mode ``auto`` of `run_collective`) against full runs.

Oracles: the full simulation of every transfer (``mode="full"``) for the completion time, each link's bytes and
the interface counters; the orbit sizes from first principles (K nodes, G rails: node rotations have order K on
``nodes:K:G``, the number of scalable units on a fat tree, rail rotations order G); and where the quotient must
refuse (a rooted collective, a fabric whose symmetry fixes both ends of a link, a link that breaks the symmetry)
it is checked that it does.
"""
from __future__ import annotations

import pytest

from simulator.acceleration.automorphisms import Automorphisms, node_actions, node_rotation, rail_rotation
from simulator.acceleration.quotient import execute_quotient, quotient, run_on_quotient
from simulator.acceleration.ring_quotient import ring_quotient
from simulator.collectives import plan_collective, run_collective
from simulator.collectives.schedule import execute
from simulator.engine.system import System
from topologies.fattree import fattree


def _fat(nodes: int = 4, per_node: int = 2, per_unit: int = 2):
    return fattree(nodes, per_node, nodes_per_unit=per_unit, spines=2)


CASES = [  # topology, kind, algorithm, orbit sizes it may run on: products of K nodes (on a fat tree, U units and P
    # nodes per unit) and G rails
    ("nodes:4:4", "all_reduce", "unidirectional", {4, 16}),
    ("nodes:4:4", "all_gather", "unidirectional", {4, 16}),
    ("nodes:4:4", "reduce_scatter", "unidirectional", {4, 16}),
    ("nodes:4:4", "all_reduce", "hierarchical", {16}),
    ("nodes:8:8", "all_reduce", "hierarchical_pipelined", {64}),
    ("nodes:8:8", "reduce_scatter", "hierarchical", {64}),
    ("fat", "all_reduce", "hierarchical", {2 * 2, 2 * 2 * 2}),
    ("fat", "all_gather", "unidirectional", {2, 2 * 2, 2 * 2 * 2}),
    ("fat8", "all_reduce", "hierarchical3_pipelined", {2 * 4 * 4}),  # spine links fixed by 4 rotations: shared
    ("fat8", "reduce_scatter", "hierarchical3", {2 * 4 * 4}),
]


def _system(topology):
    graphs = {"fat": _fat, "fat8": lambda: fattree(8, 4, nodes_per_unit=4, spines=2)}
    return System("h100", topology=graphs[topology]() if topology in graphs else topology)


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in CASES])
def test_auto_runs_the_quotient_with_the_full_runs_figures(case):
    topology, kind, algorithm, orders = case
    full_system, quick_system = _system(topology), _system(topology)
    full = run_collective(kind, full_system, 24e6, algorithm=algorithm, mode="full")
    quick = run_collective(kind, quick_system, 24e6, algorithm=algorithm)
    assert full.mode == "full" and quick.mode == "quotient"
    assert quick.quotient_order in orders
    assert quick.time_s == pytest.approx(full.time_s, rel=1e-9)
    assert quick.link_bytes.keys() == full.link_bytes.keys()  # every link, each with what it carried in full
    for link, nbytes in full.link_bytes.items():
        assert quick.link_bytes[link] == pytest.approx(nbytes, rel=1e-9)
    assert quick.total_link_bytes == pytest.approx(full.total_link_bytes, rel=1e-9)
    assert dict(quick_system.trace.bytes_by_interface) == pytest.approx(dict(full_system.trace.bytes_by_interface),
                                                                         rel=1e-9)
    assert quick.n_transfers == full.n_transfers  # the schedule's, not the representatives'
    full_units = {s.unit for s in full_system.trace.spans}
    quick_units = {s.unit for s in quick_system.trace.spans}
    assert quick_units < full_units  # spans on the representative links only, as in full there
    key = lambda s: (str(s.chip), s.unit, s.label, round(s.start, 12), round(s.end, 12))  # noqa: E731
    # the same busy intervals (a shared link's m flows of one representative are one span in the quotient)
    assert {key(s) for s in quick_system.trace.spans} == {key(s) for s in full_system.trace.spans
                                                           if s.unit in quick_units}
    quick_metrics, full_metrics = quick_system.metrics(), full_system.metrics()
    assert quick_metrics["busy_s"] == pytest.approx(full_metrics["busy_s"], rel=1e-9)
    for name in ("upper_bound_s", "lower_bound_s", "overlap_s", "exposed_s"):
        assert quick_metrics[name] == pytest.approx(full_metrics[name], rel=1e-9)
    assert quick_metrics["utilization"] == pytest.approx(full_metrics["utilization"], rel=1e-9)
    assert "quotient_order" in quick.to_json() and "quotient_order" not in full.to_json()


@pytest.mark.parametrize("topology", ["nodes:4:4", "fat"])
def test_representative_links_carry_what_they_carry_in_full(topology):
    """Run the quotient alone: only representative links carry bytes, each exactly its full-run bytes, and one
    transfer (with a source) is run per orbit of |G|."""
    full_system, quick_system = _system(topology), _system(topology)
    plan = plan_collective("all_reduce", full_system, 24e6, algorithm="hierarchical", mode="full")
    execute(full_system.network, plan.schedule.transfers, None, "ar", aggregate=False)
    full_system.env.run()
    full_links = {pair: c.bytes_carried for pair, c in full_system.network.links.items() if c.bytes_carried}
    quick_plan = plan_collective("all_reduce", quick_system, 24e6, algorithm="hierarchical", mode="full")
    q, action = run_on_quotient(quick_system.network, quick_plan.schedule.transfers)
    assert q.order == action.order > 1
    done = execute_quotient(quick_system.network, q, "ar")
    quick_system.env.run()
    assert done.value == pytest.approx(full_system.env.now, rel=1e-12)
    quick_links = {pair: c.bytes_carried for pair, c in quick_system.network.links.items() if c.bytes_carried}
    assert quick_links and len(quick_links) * q.order == len(full_links)  # one link per orbit
    for pair, nbytes in quick_links.items():
        assert nbytes == pytest.approx(full_links[pair], rel=1e-12)
    sent = sum(t.src is not None for t in plan.schedule.transfers)
    assert sum(t.src is not None for t in q.transfers) * q.order == sent


def test_group_orders_from_first_principles():
    nodes = System("h100", topology="nodes:6:4").network
    assert [(a.name, a.order) for a in node_actions(nodes)] == [("nodes+rails", 24), ("nodes", 6), ("rails", 4)]
    fat = System("h100", topology=_fat(6, 2, 2)).network  # 3 units of 2 nodes: rotations by whole units
    orders = {a.name: a.order for a in node_actions(fat)}
    assert orders == {"units+nodes in units+rails": 3 * 2 * 2, "units+nodes in units": 3 * 2, "units+rails": 3 * 2,
                      "nodes in units+rails": 2 * 2, "units": 3, "nodes in units": 2, "rails": 2}
    assert [a.order for a in node_actions(fat)] == sorted(orders.values(), reverse=True)  # largest first
    action = node_actions(nodes)[1]
    assert action.apply((1,), 0) == 4 and action.apply((1,), "sw5") == "sw0" and action.apply((5,), "ib0") == "ib0"
    assert action.offset(9) == (4,) and action.offset("ib0") is None  # node 2 back to node 0; the fabric stays
    assert action.carrier("ib0", 9) == (4,)  # a link from the fixed switch is carried by its chip


def test_a_rooted_collective_has_no_quotient():
    system = System("h100", topology="nodes:4:4")
    plan = plan_collective("broadcast", system, 16e6, mode="full")
    assert all(quotient(system.network, plan.schedule.transfers, a) is None for a in node_actions(system.network))
    result = run_collective("broadcast", System("h100", topology="nodes:4:4"), 16e6)
    assert result.mode == "full" and result.quotient_order is None


def test_a_symmetry_fixing_both_ends_of_a_used_link_is_refused():
    """Rotating nodes inside each unit of a fat tree fixes its leaves and the spine, so every leaf-spine link: a
    flat ring, which crosses between units through the spine, has no quotient by it (it would need
    multiplicities); one unit's ring never reaches the spine and has one."""
    system = System("h100", topology=_fat(4, 2, 2))  # two units of two nodes
    net = system.network
    inside = {v: v for v in net.graph.nodes}  # node 0 <-> 1, node 2 <-> 3, GPUs on their rails
    inside.update({c: c ^ 2 for c in range(8)})
    inside.update({"sw0": "sw1", "sw1": "sw0", "sw2": "sw3", "sw3": "sw2"})
    action = Automorphisms(net, [(inside, 2)], "inside the units")
    assert action.offset("leaf0.0") is None and action.carrier("leaf0.0", "spine") is None
    plan = plan_collective("all_gather", system, 16e6, algorithm="unidirectional", mode="full")
    route = [v for src, dst in {(t.src, t.dst) for t in plan.schedule.transfers if t.src is not None}
             for v in net.routes(src, dst)[0]]
    assert "spine" in route
    assert quotient(net, plan.schedule.transfers, action) is None
    one_unit = System("h100", topology=_fat(2, 2, 2))
    result = run_collective("all_gather", one_unit, 16e6, algorithm="unidirectional")
    assert result.mode == "quotient" and "spine->leaf0.0" not in result.link_bytes


def test_a_link_that_breaks_the_symmetry_is_refused():
    graph = System("h100", topology="nodes:4:2").graph
    graph.edges[2, "ib0"]["bandwidth_bytes_per_s"] /= 2  # node 1's first NIC is slower
    net = System("h100", topology=graph).network
    with pytest.raises(ValueError, match="2->ib0"):
        Automorphisms(net, [(node_rotation(net, 1), 4)])
    with pytest.raises(ValueError, match="ib0"):
        Automorphisms(net, [(rail_rotation(net), 2)])  # rotating rails maps the slow NIC onto a fast one
    assert node_actions(net) == []
    result = run_collective("all_reduce", System("h100", topology=graph), 16e6)
    assert result.mode == "full"


def test_full_and_numeric_runs_stay_full():
    result = run_collective("all_reduce", System("h100", topology="nodes:4:4"), 16e6, mode="full")
    assert result.mode == "full"
    plain = run_collective("all_reduce", System("h100", topology="nodes:4:4"), 16e6, aggregate=False)
    assert plain.mode == "full"


def test_the_watch_expects_the_representatives_only():
    """The run-length estimate of a quotient run is what it reports: two units per representative run, far fewer
    than the schedule's two per transfer (the schedule's count is taken back once the quotient is known)."""
    from simulator.engine.watch import RunWatch, watching

    watch = RunWatch()
    system = System("h100", topology="nodes:8:8", trace=False)
    with watching(watch):
        result = run_collective("all_reduce", system, 1e6, algorithm="hierarchical_pipelined")
    assert result.mode == "quotient"
    assert watch.estimate == watch.events - system.events_processed
    assert watch.estimate < 2 * result.n_transfers / 10  # 64 chips per orbit: far fewer (barriers stay whole)


@pytest.mark.parametrize(("topology", "kind"), [("nodes:4:4", "all_reduce"), ("nodes:8:2", "all_gather"),
                                                ("nodes:4:2", "reduce_scatter")])
def test_a_ring_quotient_built_without_the_schedule_is_the_schedules_quotient(topology, kind):
    """`ring_quotient` builds, from the job alone, the transfers `quotient` keeps of the full schedule: as many,
    the same (source, destination, bytes, operation) and dependencies of the same shape, and the same run."""
    full_system, quick_system = System("h100", topology=topology), System("h100", topology=topology)
    plan = plan_collective(kind, full_system, 24e6, algorithm="unidirectional", mode="full")
    action = next(a for a in node_actions(full_system.network) if a.name == "nodes")
    kept = quotient(full_system.network, plan.schedule.transfers, action)
    built = ring_quotient(plan.job, plan.algorithm, full_system.network, action)
    assert built is not None and built.order == kept.order == int(topology.split(":")[1])
    assert built.represented == len(plan.schedule.transfers)
    def shape(q):
        return sorted((t.src, t.dst, t.nbytes, t.op, len(t.deps)) for t in q.transfers if t.src is not None)

    assert shape(built) == shape(kept)
    assert sum(t.src is None for t in built.transfers) == sum(t.src is None for t in kept.transfers)
    result = run_collective(kind, quick_system, 24e6, algorithm="unidirectional")
    assert result.mode == "quotient" and result.n_transfers == len(plan.schedule.transfers)
    done = execute_quotient(full_system.network, kept, kind)
    full_system.env.run()
    assert result.time_s == pytest.approx(done.value, rel=1e-9)


def test_a_line_is_not_rotated():
    """A line's reductions cross each link in a fixed order, not a rotation's: neither quotient is taken."""
    system = System("h100", topology="nodes:4:4")
    plan = plan_collective("all_reduce", system, 24e6, algorithm="line", mode="full")
    assert all(ring_quotient(plan.job, plan.algorithm, system.network, a) is None for a in node_actions(system.network))
    assert run_collective("all_reduce", System("h100", topology="nodes:4:4"), 24e6, algorithm="line").mode == "full"


def test_a_link_fixed_by_the_group_runs_shared_at_its_share_of_the_bandwidth():
    """Allowed multiplicities (``scaled``), a leaf-spine link that the rotations inside units fix runs as one
    channel at 1/2 of its bandwidth for the 2 flows each representative stands for: the full run's time, and
    the link's bytes are twice the channel's."""
    full_system, system = System("h100", topology=_fat(4, 2, 2)), System("h100", topology=_fat(4, 2, 2))
    full = run_collective("all_reduce", full_system, 16e6, algorithm="hierarchical3", mode="full")
    net = system.network
    inside = {v: v for v in net.graph.nodes}
    inside.update({c: c ^ 2 for c in range(8)})
    inside.update({"sw0": "sw1", "sw1": "sw0", "sw2": "sw3", "sw3": "sw2"})
    action = Automorphisms(net, [(inside, 2)], "inside the units")
    action.scaled = {}
    plan = plan_collective("all_reduce", system, 16e6, algorithm="hierarchical3", mode="full")
    q = quotient(net, plan.schedule.transfers, action)
    assert q is not None and q.order == 2
    shared = [c for c in q.links if getattr(c, "multiplicity", 1) > 1]
    assert shared and all(c.multiplicity == 2 and c.bandwidth_bytes_per_s == c.real.bandwidth_bytes_per_s / 2
                          for c in shared)
    assert all("spine" in c.name for c in shared)
    done = execute_quotient(net, q, "ar")
    system.env.run()
    assert done.value == pytest.approx(full.time_s, rel=1e-9)
    for c in shared:
        assert 2 * c.bytes_carried == pytest.approx(full.link_bytes[c.name.removeprefix("link ")], rel=1e-9)
