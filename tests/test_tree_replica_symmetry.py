"""Why the 405B step on 16,384 H100 (DP 128) leaves the node quotient and the DP 64 step does not (issue 29).

NCCL's tuner picks Tree for the data-parallel AllReduce where latency weighs (more nodes, smaller messages;
at 501 MiB on 128 nodes of one GPU each, Tree/LL128 by 1%, while 64 nodes give Ring/Simple). podsim's double
binary tree (`simulator.collectives.tree`) is an in-order tree over the group's ranks plus its mirror image,
so a rotation of the replicas (rank i -> i + 1) maps neither tree onto itself: the AllReduce is not equivariant
under the stride groups that map every stage's replicas onto one another, only under rail rotations (and the
reversal of the replicas, which swaps the two trees: tests/test_orbit_run.py). And the step really is not
symmetric then: in the full simulation the tree's unequal port loads (roots, leaves) delay
some replicas' pipeline sends and not others. So the fast step must stop on the quotient (``mixed``); a stage's
chips are then not alike, and it reruns with one program per orbit of the replicas' reversal (which swaps the
two trees) times the rail rotations (``orbits``,
`simulator.acceleration.orbit_run`: tests/test_orbit_run.py), which gives the full simulation's figures.

The small system with the same structure: nodes:16:2, data=8, pipeline=2, model=2 (replicas 2 nodes apart, a
node's two GPUs a tensor-parallel pair, one GPU per node in each data group), where the tuner picks Tree for the
step's gradient AllReduces (at most 1 MiB) and Ring at 64 MiB; data=4 on nodes:8:2 (Ring) is the control."""
from __future__ import annotations

import math
from collections import defaultdict

import pytest
from same_results import assert_same

from simulator.acceleration.automorphisms import node_actions, stride_actions
from simulator.acceleration.quotient import quotient
from simulator.collectives import collective_groups, plan_collective
from simulator.collectives.tree import trees
from simulator.engine.network import Network
from simulator.hardware.specs import get_chip
from simulator.workloads.plans.layout import parse_plan_mesh
from simulator.workloads.plans.links import build_system
from simulator.workloads.plans.step import simulate_step
from simulator.workloads.plans.train import TrainOptions
from simulator.workloads.transformer import TransformerConfig

CFG = TransformerConfig(name="small", d_model=256, d_ff=1024, n_layers=4, n_heads=4, n_kv_heads=2, vocab_size=1024)
TREE = ("data=8,pipeline=2,model=2", "nodes:16:2")
RING = ("data=4,pipeline=2,model=2", "nodes:8:2")


def _data_all_reduce(nbytes: float):
    system, mesh = build_system(get_chip("h100"), parse_plan_mesh(TREE[0]), TREE[1], False, True)
    net = system.network
    pipe = mesh.index("pipeline")
    stage0 = [g for g in collective_groups(net, ["data"], mesh) if mesh.coords(next(iter(g.members.values())))[pipe]
              == 0]
    return net, plan_collective("all_reduce", system, nbytes, groups=stage0, mode="full")


def test_no_replica_rotation_maps_the_double_binary_tree_onto_itself():
    """By hand, from the tree's rule (tests the premise, not podsim's quotient): the in-order tree of 8 ranks has
    its root at rank 7 (i = 8, the highest power of two) and its mirror at rank 0; a rotation by k maps the root
    to rank 7 + k, the root of neither tree for 0 < k < 8."""
    first, mirror = trees(8, double=True)
    roots = [next(r for r in range(8) if r not in t) for t in (first, mirror)]
    assert roots == [7, 0]
    for k in range(1, 8):
        assert {(r + k) % 8 for r in roots} != set(roots)


@pytest.mark.parametrize("nbytes, algorithm, rotations", [(2**20, "double_binary_tree", False),
                                                           (64 * 2**20, "unidirectional", True)])
def test_the_data_all_reduce_has_a_replica_quotient_only_as_a_ring(nbytes, algorithm, rotations):
    """The tuner's choice by size decides it: every stride group (node rotations keeping the stages, times rails)
    holds the ring's schedule and none the tree's; rail rotations alone hold both (each rail's tree is built
    alike by position)."""
    net, plan = _data_all_reduce(nbytes)
    assert plan.algorithm.name == algorithm, plan.nccl["reason"]
    transfers = plan.schedule.transfers
    strides = list(stride_actions(net))
    assert strides and {a.name.split(" +")[0] for a in strides} == {"nodes by 2", "nodes by 4", "nodes by 8"}
    assert all((quotient(net, transfers, a) is not None) == rotations for a in strides)
    rails = next(a for a in node_actions(net) if a.name == "rails")
    assert quotient(net, transfers, rails) is not None


def _arrival_spreads(mesh_text: str, topology: str) -> list[float]:
    """The full simulation's pipeline sends, grouped by (label, the sender's coordinates but data): the spread of
    their arrival instants over the data-parallel replicas (independent of the fast step: every chip runs)."""
    arrivals: dict[tuple, dict[int, float]] = defaultdict(dict)
    real = Network.message

    def message(self, src, dst, nbytes, label=None, **kw):
        event = real(self, src, dst, nbytes, label=label, **kw)
        event.callbacks.append(lambda e, s=src, lab=label: noted.append((lab, s, e.env.now)))
        return event
    noted: list[tuple] = []
    Network.message = message
    try:
        sim, _ = simulate_step(CFG, get_chip("h100"), parse_plan_mesh(mesh_text), TrainOptions(microbatches=4), 64,
                               128, topology, trace=False, calibrated=True, fast=False)
    finally:
        Network.message = real
    data = sim.mesh.index("data")
    for label, src, now in noted:
        coords = list(sim.mesh.coords(src))
        replica, coords[data] = coords[data], 0
        arrivals[(label, tuple(coords))][replica] = now
    assert arrivals
    return [max(v.values()) - min(v.values()) for v in arrivals.values()]


def test_with_the_tree_the_replicas_really_differ_and_with_the_ring_they_do_not():
    assert max(_arrival_spreads(*TREE)) > 1e-7  # (microseconds apart: not rounding)
    assert max(_arrival_spreads(*RING)) == 0.0


def test_the_fast_step_stops_on_the_quotient_reruns_by_orbits_and_gives_the_full_figures():
    opts = TrainOptions(microbatches=4)
    (full, exact), (fast, quick) = [simulate_step(CFG, get_chip("h100"), parse_plan_mesh(TREE[0]), opts, 64, 128,
                                                  TREE[1], trace=True, calibrated=True, fast=f) for f in (False, True)]
    assert fast.reruns == ["mixed", "orbits"], fast.reruns
    assert math.isclose(quick["step_time_s"], exact["step_time_s"], rel_tol=1e-12)
    assert_same(exact, quick)
    assert_same(full.metrics, fast.metrics)
    assert full.system.network.link_bytes() == pytest.approx(fast.system.network.link_bytes(), rel=1e-12)


def test_a_run_that_finds_the_stage_unlike_stops_there(monkeypatch):
    """Without orbit runs (the driver's rule 4 off), the rerun after ``mixed`` (on rail rotations) finds the stage's
    chips unlike at a send's last arrival and stops (`Rerun`, ``broken``) rather than finishing a run whose figures
    the exact run replaces: no fast run reaches `Symmetry.finish`, and the exact run is the answer. With them
    (the default), the stage-representative run on rail rotations is skipped: the orbit run is the one that
    finishes, active."""
    from simulator.acceleration import reruns
    from simulator.acceleration.orbit_run import OrbitSymmetry
    from simulator.acceleration.step_symmetry import Symmetry

    finished: list[tuple[bool, bool]] = []
    real = Symmetry.finish

    def finish(self, trace):
        finished.append((self.active, isinstance(self, OrbitSymmetry)))
        real(self, trace)
    monkeypatch.setattr(Symmetry, "finish", finish)

    def step():
        return simulate_step(CFG, get_chip("h100"), parse_plan_mesh(TREE[0]), TrainOptions(microbatches=4), 64, 128,
                             TREE[1], trace=False, calibrated=True, fast=True)[0]
    assert step().reruns == ["mixed", "orbits"] and finished == [(True, True)]
    finished.clear()
    monkeypatch.setattr(reruns, "_orbit_group", lambda sym, names: None)
    assert step().reruns == ["mixed", "broken"] and finished == [(False, False)]


@pytest.mark.parametrize("nbytes", [2**20, 64 * 2**20])
def test_the_generator_check_refuses_only_groups_the_quotient_refuses(nbytes):
    """`node_quotients._Pairs` (which groups a stopped run's next attempt may use, without building those that
    cannot) is a necessary condition: every group it refuses, on the tree and on the ring, has no quotient; it
    refuses the replica rotations on the tree, and none of the groups that hold the ring."""
    from simulator.acceleration.automorphisms import block_specs, stride_specs
    from simulator.acceleration.node_quotients import NodeCandidate, _Pairs
    from simulator.acceleration.slice_symmetry import _Graph

    net, plan = _data_all_reduce(nbytes)
    transfers = plan.schedule.transfers
    stand_in = _Graph(net.graph)
    candidates = [NodeCandidate(name, order, stand_in, make) for name, order, make in
                  [*stride_specs(net), *block_specs(net)]] + list(node_actions(net))
    refused = []
    for c in candidates:
        pairs = _Pairs(transfers)
        if not pairs.may_fit(c):
            built = c.build() if isinstance(c, NodeCandidate) else c
            assert built is None or quotient(net, transfers, built) is None, c.name
            refused.append(c.name)
    stride_names = {a.name for a in stride_actions(net)}
    if plan.algorithm.name == "double_binary_tree":
        assert stride_names <= set(refused)
    else:
        assert not stride_names & set(refused)
