"""A GPU node training step whose stage's chips are unlike runs one program per orbit of the rail rotations
(`simulator.acceleration.orbit_run`, the rerun driver's rule 4), and gives the full simulation's figures.

The systems are issue 29's 405B step on 16,384 H100 in small (tests/test_tree_replica_symmetry.py): data-parallel
replicas whose gradient AllReduce NCCL's tuner runs as a double binary tree, which no rotation of the replicas maps
onto itself; rail rotations do. The oracle is the full simulation (``fast=False``: every chip's program, every
transfer), which shares none of the orbit run's mechanism."""
from __future__ import annotations

import math

import pytest
from same_results import assert_same

from simulator.acceleration import reruns
from simulator.acceleration.orbit_run import OrbitSymmetry
from simulator.hardware.specs import get_chip
from simulator.workloads.plans.layout import parse_plan_mesh
from simulator.workloads.plans.step import simulate_step
from simulator.workloads.plans.train import TrainOptions
from simulator.workloads.transformer import TransformerConfig

SMALL = TransformerConfig(name="small", d_model=256, d_ff=1024, n_layers=4, n_heads=4, n_kv_heads=2,
                          vocab_size=1024)
EIGHT = TransformerConfig(name="small-8", d_model=256, d_ff=1024, n_layers=4, n_heads=8, n_kv_heads=8,
                          vocab_size=1024)
CASES = {  #: name: (model, mesh, topology, GPUs a node: the rail rotations' order)
    "nodes:16:2": (SMALL, "data=8,pipeline=2,model=2", "nodes:16:2", 2),
    "nodes:16:8": (EIGHT, "data=8,pipeline=2,model=8", "nodes:16:8", 8),
}


def _step(name: str, fast: bool, trace: bool = True):
    cfg, mesh, topology, _ = CASES[name]
    return simulate_step(cfg, get_chip("h100"), parse_plan_mesh(mesh), TrainOptions(microbatches=4), 64, 128,
                         topology, trace=trace, calibrated=True, fast=fast)


@pytest.fixture(scope="module")
def full():
    return {name: _step(name, False) for name in CASES}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_orbit_run_gives_the_full_simulations_figures(full, name):
    (sim, exact), (fast, quick) = full[name], _step(name, True)
    assert fast.reruns == ["mixed", "orbits"], fast.reruns
    assert isinstance(fast.sym, OrbitSymmetry) and fast.sym.active
    per_node = CASES[name][3]
    chips = len(sim.system.chips)
    # one program per pair of mirrored replicas' nodes: an orbit of the replicas' reversal times the rail rotations
    assert fast.sym.orbits == "nodes mirrored by 2 + rails by 1"
    assert len(fast.sym.chips()) == chips // (2 * per_node)
    assert fast.sym.per_stage == 2 * per_node
    # the tensor-parallel collectives ran on the wider group (replica rotations times rails), on NVLink alone
    assert fast.sym.wide is not None and fast.sym.wide.order > per_node and fast.sym._wide_links
    assert {c.kind for c in fast.sym._wide_links} == {"nvlink"}
    assert {c.kind for c in fast.sym._node_links} == {"ib"}
    assert math.isclose(quick["step_time_s"], exact["step_time_s"], rel_tol=1e-12)
    assert_same(exact, quick)  # every figure: step, bubble, exposed per axis, busy fractions, bytes, memory
    assert_same(sim.metrics, fast.metrics)  # busy time of every unit and link, overlap, bound
    assert sim.system.network.link_bytes() == pytest.approx(fast.system.network.link_bytes(), rel=1e-12)
    assert sim.system.trace.bytes_by_interface == pytest.approx(fast.system.trace.bytes_by_interface, rel=1e-12)


def test_the_replicas_reversal_maps_the_double_binary_tree_onto_itself():
    """By hand, from the tree's rule (the premise of the mirror groups, `automorphisms.mirror_specs`): the second
    tree is the first's mirror image, so reversing the ranks (i -> n - 1 - i) swaps the two trees' parent maps;
    and on nodes:16:2 the reversal of the 8 blocks of 2 nodes (the replicas of data=8, pipeline=2) is a graph
    automorphism moving every chip, under which the stage's data-parallel AllReduce (the tree) has a quotient."""
    from simulator.acceleration.automorphisms import Automorphisms, mirror_specs
    from simulator.acceleration.quotient import quotient
    from simulator.collectives import collective_groups, plan_collective
    from simulator.collectives.tree import trees
    from simulator.workloads.plans.links import build_system

    for n in (8, 128):
        first, second = trees(n, double=True)
        assert {n - 1 - r: n - 1 - p for r, p in first.items()} == second
        assert {n - 1 - r: n - 1 - p for r, p in second.items()} == first
    system, mesh = build_system(get_chip("h100"), parse_plan_mesh(CASES["nodes:16:2"][1]), "nodes:16:2", False, True)
    net = system.network
    name, order, make = next(spec for spec in mirror_specs(net) if spec[0] == "nodes mirrored by 2 + rails by 1")
    mirror = Automorphisms(net, make(), name)  # (checks every generator an automorphism)
    assert order == mirror.order == 4 and all(mirror.offset(c) is not None for c in net.chips)
    (k, g) = net.graph.nodes[net.chips[0]]["coord"]
    perm = mirror.generator(0)
    assert net.graph.nodes[perm[net.chips[0]]]["coord"] == (14, g)  # node 0 (replica 0, stage 0) -> node 14
    pipe = mesh.index("pipeline")
    stage0 = [grp for grp in collective_groups(net, ["data"], mesh)
              if mesh.coords(next(iter(grp.members.values())))[pipe] == 0]
    plan = plan_collective("all_reduce", system, 2**20, groups=stage0, mode="full")
    assert plan.algorithm.name == "double_binary_tree"
    assert quotient(net, plan.schedule.transfers, mirror) is not None


def test_an_orbit_group_a_collective_does_not_hold_stops_the_run_and_the_exact_run_follows(full, monkeypatch):
    """Forced onto a group of replica rotations (nodes by 8: the tree holds none of them), the orbit run stops at
    the first collective its group does not hold and the full simulation gives the figures."""
    monkeypatch.setattr(reruns, "_orbit_group", lambda sym, names: "nodes by 8 + rails by 1")
    fast, quick = _step("nodes:16:2", True)
    assert fast.reruns == ["mixed", "orbits", "broken"], fast.reruns
    assert not fast.sym.active
    assert_same(full["nodes:16:2"][1], quick)



def test_a_link_belongs_to_the_orbits_of_one_group_only():
    """`OrbitSymmetry._claim`, the wider group's premise: a link run in the orbits of one group (every image of it
    under that group: on nodes:16:2, a stage's 8 nodes times 2 rails = 16 links) cannot then run in the other's."""
    from simulator.acceleration.automorphisms import node_actions, stride_actions
    from simulator.workloads.plans.links import build_system

    system, mesh = build_system(get_chip("h100"), parse_plan_mesh(CASES["nodes:16:2"][1]), "nodes:16:2", False, True)
    net = system.network
    wide = next(a for a in stride_actions(net) if a.name == "nodes by 2 + rails by 1")
    rails = next(a for a in node_actions(net) if a.name == "rails")
    stage_of = {c.index: mesh.coords(c.index)[mesh.index("pipeline")] for c in system.chips}
    sym = OrbitSymmetry(system, mesh, stage_of, "rails", shared={("node choice", None): wide})
    assert sym.active and sym.wide is wide and sym.node_action.name == "rails"
    chip = system.chips[0].index
    nvlink = next(net.link(chip, v) for v in net.graph.successors(chip) if net.graph.edges[chip, v]["kind"] == "nvlink")
    ib = next(net.link(chip, v) for v in net.graph.successors(chip) if net.graph.edges[chip, v]["kind"] == "ib")
    assert sym._claim((nvlink,), wide) and sym._claim((nvlink,), wide)
    assert sum(owner == wide.name for owner in sym._owner.values()) == 8 * 2
    assert not sym._claim((nvlink,), rails)
    assert sym._claim((ib,), rails)
    assert sum(owner == "rails" for owner in sym._owner.values()) == 2  # one node's two rails
    assert not sym._claim((ib,), wide)


def test_a_run_that_finds_a_link_in_both_groups_orbits_reruns_on_one(full, monkeypatch):
    """Where `_claim` refuses a link to the rail rotations (made to, here, once the wider group has run a
    collective), the orbit run stops (``narrowed``), reruns with every collective on the rail rotations, and gives
    the full simulation's figures."""
    claim = OrbitSymmetry._claim

    def refusing(self, channels, action):
        if self.wide is not None and action is self.node_action and self._wide_links:
            return False
        return claim(self, channels, action)
    monkeypatch.setattr(OrbitSymmetry, "_claim", refusing)
    fast, quick = _step("nodes:16:2", True)
    assert fast.reruns == ["mixed", "orbits", "narrowed"], fast.reruns
    assert fast.sym.active and fast.sym.wide is None and not fast.sym._wide_links
    (sim, exact) = full["nodes:16:2"]
    assert_same(exact, quick)
    assert_same(sim.metrics, fast.metrics)


def test_the_orbit_group_is_the_largest_allowed_and_only_where_it_is_smaller_than_a_stage():
    """`orbit_group` (which group an orbit run takes): the largest of the names given, by order; None where that
    one maps a stage's chips onto one another (a replica rotation: then one program per stage is its run)."""
    from simulator.acceleration.orbit_run import orbit_group
    from simulator.acceleration.step_symmetry import Symmetry
    from simulator.workloads.plans.links import build_system

    system, mesh = build_system(get_chip("h100"), parse_plan_mesh(CASES["nodes:16:2"][1]), "nodes:16:2", False, True)
    stage_of = {c.index: mesh.coords(c.index)[mesh.index("pipeline")] for c in system.chips}
    sym = Symmetry(system, mesh, stage_of, True)
    assert sym.active and sym.node_quotients and sym.per_stage == 16
    names = {c.name for c in sym._candidates()}
    mirror, rails, stride = "nodes mirrored by 2 + rails by 1", "rails", "nodes by 2 + rails by 1"
    assert {mirror, rails, stride} <= names
    assert orbit_group(sym, frozenset({rails})) == rails
    assert orbit_group(sym, frozenset({rails, mirror})) == mirror  # order 4 over 2
    assert orbit_group(sym, frozenset({rails, mirror, stride})) is None  # order 16: a whole stage
    assert orbit_group(sym, frozenset(names)) is None


def test_the_orbit_run_without_a_trace_gives_the_full_simulations_figures():
    """As the benchmarks run it (``trace=False``: no spans, no stand-ins)."""
    (sim, exact), (fast, quick) = _step("nodes:16:2", False, trace=False), _step("nodes:16:2", True, trace=False)
    assert fast.reruns == ["mixed", "orbits"] and isinstance(fast.sym, OrbitSymmetry)
    assert_same(exact, quick)
    assert sim.system.network.link_bytes() == pytest.approx(fast.system.network.link_bytes(), rel=1e-12)
