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
