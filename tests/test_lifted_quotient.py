"""Multislice steps on one representative chip (issue 29): a tie between ``line`` and ``unidirectional`` goes to the
ring that uses the wraparound (its schedule is the same from every position), and a collective over many groups
runs on the quotient lifted from one group's schedule (`lifted_quotient`), which must be exactly the quotient of
every group's schedule (`simulator.acceleration.quotient.quotient`, the independent path: it checks the whole
schedule), and the step on it the full simulation of every chip."""
from __future__ import annotations

import dataclasses
import math

import pytest
from same_results import assert_same

from simulator.acceleration.node_quotients import lifted_quotient
from simulator.acceleration.quotient import quotient
from simulator.acceleration.slice_symmetry import slice_actions
from simulator.collectives import plan_collective
from simulator.collectives.algorithm import fastest, get_algorithm
from simulator.collectives.api import plan_one_group
from simulator.hardware.specs import get_chip
from simulator.workloads.plans.layout import parse_plan_mesh
from simulator.workloads.plans.links import build_system
from simulator.workloads.plans.step import simulate_step
from simulator.workloads.plans.train import TrainOptions
from simulator.workloads.transformer import get_model


def test_a_tie_goes_to_the_ring_that_uses_the_wraparound_then_the_first_by_name():
    assert not get_algorithm("line").closed and get_algorithm("unidirectional").closed
    assert fastest({"line": 1.0, "unidirectional": 1.0 + 1e-12}) == "unidirectional"
    assert fastest({"line": 1.0, "unidirectional": 1.0 + 1e-6}) == "line"  # not a tie: the fastest
    assert fastest({"bidirectional": 2.0, "unidirectional": 2.0}) == "bidirectional"  # two closed rings: by name


def _system(slices: int):
    return build_system(get_chip("tpu-v5e"), parse_plan_mesh(f"data={slices},fsdp=256"), f"multislice:{slices}:16x16",
                        False, False)


@pytest.mark.parametrize("axis,kind,nbytes", [("fsdp", "all_gather", 3 * 2**24), ("fsdp", "reduce_scatter", 2**25),
                                              ("data", "all_reduce", 3 * 2**20)])
def test_the_lifted_quotient_is_the_quotient_of_every_groups_schedule(axis, kind, nbytes):
    """On 3 v5e-256 slices: fsdp groups are the slices (the slice rotations move one onto the others), data groups a
    chip and its twins (the translations inside the slices move them); both run unidirectional rings (the tie) and
    lift to the quotient by every slice symmetry, 768 chips to one."""
    system, mesh = _system(3)
    net = system.network
    whole = plan_collective(kind, system, nbytes, axes=[axis], mesh=mesh, mode="full")
    assert whole.algorithm.name == "unidirectional"
    groups = whole.groups
    home = next(g for g in groups if min(net.chips) in g.members.values())
    one = plan_one_group(kind, system, nbytes, home, axes=[axis], mesh=mesh, mode="full")
    assert one.algorithm.name == whole.algorithm.name
    assert len(one.schedule.transfers) * len(groups) == len(whole.schedule.transfers)
    action = max(slice_actions(net), key=lambda a: a.order)
    assert action.order == 3 * 256
    full, lifted = quotient(net, whole.schedule.transfers, action), lifted_quotient(net, one.schedule.transfers,
                                                                                   groups, action, {})
    assert full is not None and lifted is not None
    assert [(t.src, t.dst, t.op, t.deps, t.nbytes) for t in lifted.transfers] == \
        [(t.src, t.dst, t.op, t.deps, t.nbytes) for t in full.transfers]
    assert lifted.routes == full.routes and lifted.links == full.links
    assert lifted.order == full.order == 768 and lifted.represented == full.represented


def test_a_group_not_moved_onto_every_other_is_not_lifted():
    """The slice rotations alone map no data group (a chip and its twins) onto another: nothing to lift by."""
    system, mesh = _system(3)
    net = system.network
    whole = plan_collective("all_reduce", system, 2**20, axes=["data"], mesh=mesh, mode="full")
    home = next(g for g in whole.groups if min(net.chips) in g.members.values())
    one = plan_one_group("all_reduce", system, 2**20, home, axes=["data"], mesh=mesh, mode="full")
    slices = next(a for a in slice_actions(net) if a.name == "slices")
    assert lifted_quotient(net, one.schedule.transfers, whole.groups, slices, {}) is None
    assert quotient(net, whole.schedule.transfers, slices) is not None  # the whole schedule has that quotient


@pytest.mark.parametrize("calibrated", [False, True])
def test_a_three_slice_step_on_one_chip_is_the_full_simulation(calibrated):
    """data=3 x fsdp=256 on three v5e-256 slices: every collective on the quotient by every slice symmetry (one
    representative chip of 768), the step time, bytes and every link's bytes as the full simulation's."""
    cfg = dataclasses.replace(get_model("llama-2-7b"), n_layers=1)
    plan, opts = parse_plan_mesh("data=3,fsdp=256"), TrainOptions(checkpoint="full")
    (full, exact), (fast, quick) = [simulate_step(cfg, get_chip("tpu-v5e"), plan, opts, 768, 256,
                                                  "multislice:3:16x16", trace=False, calibrated=calibrated, fast=f)
                                    for f in (False, True)]
    assert fast.sym.node_action.order == 768 and fast.reruns == []
    assert_same(exact, quick)
    assert math.isclose(fast.metrics["end_to_end_s"], full.metrics["end_to_end_s"], rel_tol=1e-9)
    assert fast.metrics["bytes"] == pytest.approx(full.metrics["bytes"], rel=1e-9)
    full_links, fast_links = full.system.network.link_bytes(), fast.system.network.link_bytes()
    assert full_links.keys() == fast_links.keys()
    assert all(math.isclose(fast_links[k], v, rel_tol=1e-9) for k, v in full_links.items())
