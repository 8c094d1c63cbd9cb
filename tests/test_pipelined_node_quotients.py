"""Pipelined training steps on GPU nodes run on the node quotient (issue 29): the data-parallel replicas of a
stage lie a pipeline's worth of nodes apart, so the node rotations by that stride (times rail rotations) map
every stage onto itself and its replicas onto one another (`automorphisms.stride_actions`); one replica per
stage runs its collectives and pipeline sends on the representative links and every link of an orbit is given
what its representative carried; each collective's schedule is built for the group of its stage's smallest chip
alone and lifted to every group (`node_quotients.lifted_quotient`). The oracle is the full simulation of every
chip on the same calibrated system (`simulate_step(fast=False)`): step time, every figure of the step, per-unit
busy times, bytes per interface and per link, to 1e-9 relative."""
from __future__ import annotations

import math

import pytest
from same_results import assert_same

from simulator.acceleration.automorphisms import stride_actions
from simulator.hardware.specs import get_chip
from simulator.workloads.plans.layout import parse_plan_mesh
from simulator.workloads.plans.links import build_system
from simulator.workloads.plans.step import simulate_step
from simulator.workloads.plans.train import TrainOptions
from simulator.workloads.transformer import TransformerConfig

CFG = TransformerConfig(name="small", d_model=512, d_ff=2048, n_layers=8, n_heads=8, n_kv_heads=4, vocab_size=8192)
CASES = [  # chip, mesh, topology, schedule, the order of the group the step must run on (replicas x rails)
    ("h100", "data=2,pipeline=2,model=4", "nodes:4:4", "1f1b", 2 * 4),
    ("h100", "data=2,pipeline=4,model=4", "nodes:8:4", "interleaved", 2 * 4),
    ("h100", "data=4,pipeline=2,model=2", "nodes:8:2", "1f1b", 4 * 2),
    ("a100", "data=3,pipeline=2,model=4", "nodes:6:4", "gpipe", 3 * 4),
    ("h100", "pipeline=2,data=2,model=4", "nodes:4:4", "1f1b", 2 * 4),  # a stage's replicas side by side: blocks
]


def _steps(chip: str, mesh: str, topology: str, schedule: str, trace: bool = True, calibrated: bool = True):
    opts = TrainOptions(schedule=schedule, microbatches=4, **({"virtual_stages": 2} if schedule == "interleaved"
                                                               else {}))
    return [simulate_step(CFG, get_chip(chip), parse_plan_mesh(mesh), opts, 48, 128, topology, trace=trace,
                          calibrated=calibrated, fast=fast) for fast in (False, True)]


@pytest.mark.parametrize("case", CASES, ids=[f"{c[1]}-{c[2]}-{c[3]}" for c in CASES])
def test_a_pipelined_step_on_the_node_quotient_is_the_full_simulation(case):
    chip, mesh, topology, schedule, order = case
    (full, exact), (fast, quick) = _steps(chip, mesh, topology, schedule)
    assert fast.sym.node_action is not None and fast.sym.node_action.order == order, fast.sym.node_action
    assert fast.sym.quotiented and "broken" not in fast.reruns, fast.reruns  # (no fall back to the full run)
    lifted = {key[1:] for key in fast.sym.shared if key[0] == "one group"}  # one group's schedule, lifted
    assert lifted == set(fast.sym.quotiented), (lifted, fast.sym.quotiented)
    assert math.isclose(quick["step_time_s"], exact["step_time_s"], rel_tol=1e-9)
    assert_same(exact, quick)
    assert_same(full.metrics, fast.metrics)  # busy seconds per unit and link, bytes, bounds, overlap
    full_links, fast_links = full.system.network.link_bytes(), fast.system.network.link_bytes()
    assert full_links.keys() == fast_links.keys()
    for link, nbytes in full_links.items():
        assert math.isclose(fast_links[link], nbytes, rel_tol=1e-9), link


def test_an_ideal_pipelined_step_with_replays_on_the_node_quotient_is_the_full_simulation():
    """Ideal links (bounds): collectives replayed where alone on their links, the sends claiming theirs."""
    (full, exact), (fast, quick) = _steps("h100", "data=2,pipeline=4,model=4", "nodes:8:4", "1f1b", calibrated=False)
    assert fast.sym.node_action is not None and fast.sym.quotiented and "broken" not in fast.reruns
    assert_same(exact, quick)
    assert_same(full.metrics, fast.metrics)
    assert full.system.network.link_bytes() == pytest.approx(fast.system.network.link_bytes(), rel=1e-9)


def test_the_stride_groups_keep_every_stage_and_are_automorphisms():
    """From the layout by hand: node k holds stage k mod P (data outermost, pipeline, then model inside a node), so
    a rotation by s nodes keeps every stage exactly where P divides s; each group listed was checked an
    automorphism, and their orders are (K / s) x (G / r), largest first."""
    system, mesh = build_system(get_chip("h100"), parse_plan_mesh("data=2,pipeline=4,model=4"), "nodes:8:4", False,
                                True)
    net = system.network
    actions = list(stride_actions(net))
    assert [a.order for a in actions] == sorted((a.order for a in actions), reverse=True)
    assert {(a.name, a.order) for a in actions} == {(f"nodes by {s} + rails by {r}", 8 // s * 4 // r)
                                                    for s in (2, 4) for r in (1, 2, 4)}
    stage = {c.index: mesh.coords(c.index)[mesh.index("pipeline")] for c in system.chips}
    for a in actions:
        keeps = all(stage[a.apply(h, c)] == stage[c] for h in a.elements() for c in stage)
        assert keeps == (int(a.name.split()[2]) % 4 == 0), a.name


@pytest.mark.parametrize("case", CASES[:2], ids=[f"{c[1]}-{c[2]}-{c[3]}" for c in CASES[:2]])
def test_the_tuner_prices_each_collective_once_for_every_stage(case, monkeypatch):
    """A stage's groups are another stage's moved by a node rotation (`node_quotients.rotated_onto`): the fast step
    tunes each distinct collective (kind, bytes, axes) once and the other stages take its choice; the step is the
    full simulation's all the same (`test_a_pipelined_step_on_the_node_quotient_is_the_full_simulation`)."""
    from simulator.collectives import api

    calls = []
    tune = api.tune

    def counted(*args, **kwargs):
        calls.append(args[1])
        return tune(*args, **kwargs)

    monkeypatch.setattr(api, "tune", counted)
    chip, mesh, topology, schedule, _ = case
    opts = TrainOptions(schedule=schedule, microbatches=4, **({"virtual_stages": 2} if schedule == "interleaved"
                                                               else {}))
    fast, _ = simulate_step(CFG, get_chip(chip), parse_plan_mesh(mesh), opts, 48, 128, topology, trace=False,
                            calibrated=True, fast=True)
    distinct = {(kind, nbytes, axes) for kind, nbytes, axes, _ in fast.sym.quotiented}
    stages = {stage for *_, stage in fast.sym.quotiented}
    assert len(stages) > 1 and len(fast.sym.quotiented) > len(distinct)
    assert len(calls) == len(distinct), (calls, distinct)


def test_rotated_onto_maps_a_stage_s_groups_position_by_position():
    """On nodes:4:4 with data=2, pipeline=2, model=4 (chip k * 4 + g is GPU g of node k; node k holds stage k mod 2),
    the data groups of stage 0 are {0, 8}, {1, 9}, {2, 10}, {3, 11} and of stage 1 {4, 12} ...: the rotation by one
    node maps the first onto the second (and by three the second onto the first), in order; groups listed in
    another order, positions swapped, or groups that no rotation keeping the rails maps there are refused."""
    import dataclasses

    from simulator.acceleration.node_quotients import rotated_onto
    from simulator.collectives import collective_groups

    system, mesh = build_system(get_chip("h100"), parse_plan_mesh("data=2,pipeline=2,model=4"), "nodes:4:4", False,
                                True)
    net = system.network
    groups = collective_groups(net, ["data"], mesh)
    stage0 = [g for g in groups if min(g.members.values()) // 4 % 2 == 0]
    stage1 = [g for g in groups if min(g.members.values()) // 4 % 2 == 1]
    assert [sorted(g.members.values()) for g in stage0] == [[r, 8 + r] for r in range(4)]
    assert [sorted(g.members.values()) for g in stage1] == [[4 + r, 12 + r] for r in range(4)]
    cache: dict = {}
    assert rotated_onto(net, cache, stage0, stage1)
    assert rotated_onto(net, cache, stage1, stage0)  # by 3 nodes: 4 -> 0 and 12 -> 8, position by position
    assert not rotated_onto(net, cache, stage0, stage0[1:] + stage0[:1])  # by 0 nodes: {0, 8} is not {1, 9}
    assert not rotated_onto(net, cache, stage0, stage1[::-1])
    swapped = [dataclasses.replace(g, members={p: g.members[q] for p, q in zip(g.members, list(g.members)[::-1],
                                                                                strict=True)}) for g in stage1]
    assert not rotated_onto(net, cache, stage0, swapped)
    rails = stage1[1:] + stage1[:1]  # {5, 13} first: a rail rotation, not a node rotation
    assert not rotated_onto(net, cache, stage0, rails)
