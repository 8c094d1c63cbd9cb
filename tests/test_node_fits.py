"""`NodeQuotients._fits` (the groups a stopping collective is equivariant under, which pick the orbit run's group)
takes a candidate that is a subgroup of one found to fit (`node_quotients._within`: every generator an element of
it) as fitting without building it. The oracle is every candidate built and its quotient asked for, one by one."""
from __future__ import annotations

import pytest
from test_orbit_run import CASES

from simulator.acceleration.node_quotients import NodeCandidate, _built, _within
from simulator.acceleration.step_symmetry import Symmetry
from simulator.collectives import collective_groups, plan_collective
from simulator.hardware.specs import get_chip
from simulator.workloads.plans.layout import parse_plan_mesh
from simulator.workloads.plans.links import build_system


def _setup(name: str):
    _, mesh_text, topology, _ = CASES[name]
    system, mesh = build_system(get_chip("h100"), parse_plan_mesh(mesh_text), topology, False, True)
    stage_of = {c.index: mesh.coords(c.index)[mesh.index("pipeline")] for c in system.chips}
    return system, mesh, Symmetry(system, mesh, stage_of, True)


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("axis", ["data", "model"])
def test_fits_equals_every_candidate_built_and_asked(name, axis):
    system, mesh, sym = _setup(name)
    pipe = mesh.index("pipeline")
    groups = [g for g in collective_groups(system.network, [axis], mesh)
              if mesh.coords(next(iter(g.members.values())))[pipe] == 0]
    plan = plan_collective("all_reduce", system, 2**20, groups=groups, mode="full")
    transfers = plan.schedule.transfers
    naive = frozenset(a.name for a in sym._candidates()
                      if (g := _built(a)) is not None and sym._quotient_of(transfers, g) is not None)
    assert naive  # (rails, at least)
    assert sym._fits(transfers) == naive
    by_name = {a.name: a for a in sym._candidates()}
    assert any(_within(by_name[h], _built(by_name[g])) for g in naive for h in naive if g != h)  # (the shortcut ran)


def test_within_is_subgroup_membership():
    """Rails by 2 lie in the rail rotations; the rail rotations do not lie in rails by 2, nor a node rotation in
    the rails."""
    system, _, sym = _setup("nodes:16:8")
    by_name = {a.name: a for a in sym._candidates()}
    rails = _built(by_name["rails"])
    assert _within(by_name["nodes in blocks of 1 + rails by 2"], rails)
    small = _built(by_name["nodes in blocks of 1 + rails by 2"])
    assert not _within(by_name["rails"], small)
    other = next(a for a in by_name.values() if type(a) is NodeCandidate and a.name.startswith("nodes by"))
    assert not _within(other, rails)


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("axis", ["data", "model"])
def test_fits_of_one_groups_schedule_lifted_equals_every_candidate_asked(name, axis):
    """The lifted form (one group's schedule and every group, `lifted_quotient`), as a step's first collective is
    kept: a group smaller than the groups is skipped unbuilt, as `lifted_quotient` would refuse it."""
    system, mesh, sym = _setup(name)
    pipe = mesh.index("pipeline")
    groups = [g for g in collective_groups(system.network, [axis], mesh)
              if mesh.coords(next(iter(g.members.values())))[pipe] == 0]
    plan = sym._one_group("all_reduce", 2**20, [axis], 0, {"groups": groups, "mode": "full"})
    assert plan is not None
    entry = (plan.schedule.transfers, sym.shared[("one group", "all_reduce", 2**20, (axis,), 0)])
    naive = frozenset(a.name for a in sym._candidates()
                      if (g := _built(a)) is not None and sym._quotient_of(entry, g) is not None)
    assert sym._fits(entry) == naive
