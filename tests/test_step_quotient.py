"""Whole steps whose collectives run on quotients by translations, and the fast path's upper bound, against the
full simulation of every chip (`simulate_step(fast=False)`)."""
from __future__ import annotations

import dataclasses
import math

import pytest
from same_results import assert_same

from simulator.acceleration import step_symmetry as symmetry
from simulator.hardware.specs import get_chip
from simulator.workloads.plans.layout import parse_plan_mesh
from simulator.workloads.plans.step import simulate_step
from simulator.workloads.plans.train import TrainOptions
from simulator.workloads.transformer import get_model

CASES = [  # model, chip, mesh (split over the default topology where it must be), layers
    ("gpt2", "tpu-v5e", "data=4,model=4", None),  # lines (no wraparound): the upper bound's old miss
    ("llama-2-7b", "tpu-v5p", "data=2,model=8", 4),  # 4x2x2 v5p: model takes a factor of an axis
    ("llama-2-7b", "tpu-v5p", "fsdp=2,data=4,model=8", 4),  # 4x4x4: FSDP and data share an axis
    ("llama-2-7b", "tpu-v5p", "pipeline=2,data=4,model=2", 4),
]


def _step(model, chip, mesh, layers, **kwargs):
    cfg = get_model(model)
    if layers:
        cfg = dataclasses.replace(cfg, n_layers=layers)
    opts = TrainOptions(microbatches=2) if "pipeline" in mesh else TrainOptions()
    return simulate_step(cfg, get_chip(chip), parse_plan_mesh(mesh), opts, 16, 256, **kwargs)


@pytest.mark.parametrize("case", CASES, ids=[c[2] for c in CASES])
def test_fast_step_bounds_match_the_full_simulation(case):
    (full, exact), (fast, quick) = _step(*case, fast=False), _step(*case)
    assert fast.sym.active and not full.sym.active
    assert_same(exact, quick)
    for key in ("end_to_end_s", "upper_bound_s", "lower_bound_s", "overlap_s"):
        assert math.isclose(fast.metrics[key], full.metrics[key], rel_tol=1e-9), key
    assert fast.metrics["bytes"] == pytest.approx(full.metrics["bytes"], rel=1e-9)


def test_split_step_runs_its_collectives_on_quotients():
    """data=2,model=8 on 16 v5p chips (4x2x2): model takes the 4-chip axis and half of the next, so its groups
    and data's share links; translations by (1, 2, 1) (order 8) map every group onto a group: 2 chips' transfers
    stand for all 16."""
    case = CASES[1]
    fast, quick = _step(*case)
    assert fast.sym.quotiented and all(axes for _, _, axes, _ in fast.sym.quotiented)
    off, slow = _step(*case, quotients=False)
    assert not off.sym.quotiented
    assert_same(slow, quick)
    assert off.metrics["upper_bound_s"] == pytest.approx(fast.metrics["upper_bound_s"], rel=1e-9)


def test_a_class_with_and_without_quotients_reruns_without(monkeypatch):
    """If one collective of a class of links has no quotient while another ran on one, their traffic would meet
    on different channels: the step reruns with no quotient at all, and still matches the full simulation."""
    real, calls = symmetry.quotient, []

    def every_other(net, transfers, action):
        calls.append(1)
        return real(net, transfers, action) if len(calls) % 2 else None

    monkeypatch.setattr(symmetry, "quotient", every_other)
    case = CASES[1]
    fast, quick = _step(*case)
    assert len(calls) >= 2 and not fast.sym.quotiented and fast.sym.active
    monkeypatch.setattr(symmetry, "quotient", real)
    _, exact = _step(*case, fast=False)
    assert_same(exact, quick)


def test_axes_that_cannot_run_at_once_run_in_turn():
    """data=32,fsdp=2,sequence=2 on 128 v5p chips (4x4x8): data, fsdp and sequence each take a factor of the 8-chip
    axis, fsdp's between the other two, so the gradient AllReduce over (data, sequence) has no groups that can run
    at once (their rings would cross fsdp's). It runs axis by axis, the same in the fast and the full simulation
    (it used to stop with an error, on a layout the plan search can rank)."""
    cfg = dataclasses.replace(get_model("llama-2-7b"), n_layers=2)
    plan = parse_plan_mesh("data=32,fsdp=2,sequence=2")
    (full, exact), (fast, quick) = [simulate_step(cfg, get_chip("tpu-v5p"), plan, TrainOptions(), 128, 128,
                                                  fast=fast) for fast in (False, True)]
    assert not full.sym.active and fast.sym.active
    assert not fast._groupable(("data", "sequence")) and fast._groupable(("data",))
    assert_same(exact, quick)
    assert fast.metrics["upper_bound_s"] == pytest.approx(full.metrics["upper_bound_s"], rel=1e-9)


@pytest.mark.parametrize("kind", ["all_reduce", "reduce_scatter", "all_gather"])
def test_in_turn_moves_what_one_collective_over_all_the_axes_would(kind):
    """The axis-by-axis sequence, by hand: an AllReduce of V over (A=4, B=2) is a ReduceScatter of V over B, an
    AllReduce of V/2 over A and an AllGather of V over B; each chip then sends 2V(n-1)/n with n = 8, what one ring
    over all 8 would (a ReduceScatter or AllGather: half of that)."""
    import simpy

    from simulator.workloads.plans.step import TrainStep

    env, calls, sizes = simpy.Environment(), [], {"a": 4, "b": 2}

    class Fake:
        plan = type("P", (), {"size": staticmethod(sizes.__getitem__)})()

        def _start_axes(self, kind, nbytes, axes, stage):
            calls.append((kind, nbytes, tuple(axes)))
            return env.timeout(0)

    env.process(TrainStep._in_turn(Fake(), kind, 64.0, ["a", "b"], 0))
    env.run()
    expected = {"all_reduce": [("reduce_scatter", 64.0, ("b",)), ("all_reduce", 32.0, ("a",)),
                               ("all_gather", 64.0, ("b",))],
                "reduce_scatter": [("reduce_scatter", 64.0, ("b",)), ("reduce_scatter", 32.0, ("a",))],
                "all_gather": [("all_gather", 32.0, ("a",)), ("all_gather", 64.0, ("b",))]}[kind]
    assert calls == expected
    per_chip = {"reduce_scatter": lambda v, n: v * (n - 1) / n, "all_gather": lambda v, n: v * (n - 1) / n,
                "all_reduce": lambda v, n: 2 * v * (n - 1) / n}
    sent = sum(per_chip[k](v, math.prod(sizes[a] for a in axes)) for k, v, axes in calls)
    assert sent == pytest.approx(per_chip[kind](64.0, 8))


def test_the_closed_form_prices_in_turn_what_the_step_runs():
    """The plan's closed form prices a collective whose axes cannot run at once as the step runs it: the sum of
    its axis-by-axis collectives, within 2% of their simulations (the tuner's closed form for the 32-chip data
    AllReduce over three physical axes sits 14 us over its simulation; the joint price it replaced was 34% under)."""
    from simulator.collectives import run_collective
    from simulator.workloads.plans.estimate import _comm_s
    from simulator.workloads.plans.links import axis_links, build_system
    from simulator.workloads.plans.ops import Comm, in_turn

    chip, plan, v = get_chip("tpu-v5p"), parse_plan_mesh("data=32,fsdp=2,sequence=2"), 64e6
    system, mesh = build_system(chip, plan, None, False)
    priced = _comm_s(Comm("all_reduce", ("data", "sequence"), v, "data"), axis_links(mesh, system.graph, chip,
                                                                                       system.network))
    simulated = 0.0
    for kind, nbytes, axis in in_turn("all_reduce", v, ["data", "sequence"], plan.size):
        system, mesh = build_system(chip, plan, None, False)
        simulated += run_collective(kind, system, nbytes, axes=[axis], mesh=mesh).time_s
    assert priced == pytest.approx(simulated, rel=0.02)


GPU_CASES = [  # mesh, topology, the group's order by hand
    ("data=2,model=8", "nodes:2:8", 16),  # every node rotation x every rail rotation: 2 x 8
    ("fsdp=4,model=8", "nodes:4:8", 32),
    ("fsdp=8,model=4", "nodes:8:4", 32),
    ("data=2,fsdp=2,model=8", "fattree:4:8", 8),  # node rotations fix the fat tree's spine links: rails alone
    # every XOR of the node index's bits and the GPU index's (4 x 8): its collectives pair partners at XOR
    # distances (recursive halving-doubling, direct), which no rotation of all nodes preserves
    ("data=2,fsdp=4,model=4", "nodes:4:8", 32),
]


@pytest.mark.parametrize("case", GPU_CASES, ids=[f"{m}-{t}" for m, t, _ in GPU_CASES])
def test_gpu_node_steps_on_quotients_by_rotations_match_the_full_simulation(case):
    """On GPU nodes every group of a collective runs (no grid to reduce over); the step's collectives run on the
    quotient by the node and rail rotations the first one is equivariant under, and `Symmetry.finish` gives every
    link of each representative's orbit its bytes and busy time: step, bounds and every link's bytes as in full."""
    mesh, topology, order = case
    cfg = dataclasses.replace(get_model("llama-2-7b"), n_layers=2)
    (full, exact), (fast, quick) = [simulate_step(cfg, get_chip("h100"), parse_plan_mesh(mesh), TrainOptions(), 8,
                                                  128, topology, fast=fast) for fast in (False, True)]
    assert fast.sym.quotiented and fast.sym.node_action.order == order
    assert_same(exact, quick)
    for key in ("upper_bound_s", "lower_bound_s", "overlap_s", "end_to_end_s"):
        assert math.isclose(fast.metrics[key], full.metrics[key], rel_tol=1e-9), key
    full_links, fast_links = full.system.network.link_bytes(), fast.system.network.link_bytes()
    assert full_links.keys() == fast_links.keys()
    for link, nbytes in full_links.items():
        assert math.isclose(fast_links[link], nbytes, rel_tol=1e-9), link
