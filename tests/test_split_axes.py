"""Logical axes on factors of a physical axis (issue 13's default placement): ``data=8,model=8`` on 64 v5p chips
lies on the real 4x4x4 cube, its y axis split 2x2 (model the contiguous pairs, data the pairs two hops apart).

Chips of a ``slice:AxBxC`` are numbered row-major, chip = (x * B + y) * C + z, so the groups below are worked
out by hand from that numbering, not from the mesh code.
"""
from __future__ import annotations

import numpy as np
import pytest

from scenarios import transformer_step
from simulator import get_chip, run_collective
from simulator.acceleration.step_symmetry import why_not_symmetric
from simulator.collectives.groups import collective_groups
from simulator.engine.system import System
from simulator.workloads.mesh import Mesh, default_topology_for, parse_mesh


def _cube(mesh: str = "data=8,model=8") -> tuple[System, Mesh]:
    system = System(get_chip("tpu-v5p"), topology="slice:4x4x4", trace=False)
    return system, Mesh(parse_mesh(mesh), system.graph)


def _chip(x: int, y: int, z: int) -> int:
    return (x * 4 + y) * 4 + z


@pytest.mark.parametrize("chip,mesh,topology", [
    ("tpu-v5p", "data=8,model=8", "slice:4x4x4"),  # was the fictional slice:8x8
    ("tpu-v5p", "fsdp=128,model=2", "slice:4x8x8"),  # was slice:128x2
    ("tpu-v5e", "data=2,model=8", "slice:4x4"),  # was slice:2x8
    ("tpu-v5p", "data=4,model=16", "slice:4x4x4"),  # whole axes: unchanged
    ("tpu-v5p", "data=3,model=4", "slice:3x4"),  # no real slice of 12 chips: the mesh's own shape, as before
])
def test_a_mesh_splits_a_real_slice_before_falling_back_to_its_own_shape(chip, mesh, topology):
    assert default_topology_for(parse_mesh(mesh), get_chip(chip)) == topology


def test_data_8_model_8_on_the_cube_groups_by_hand():
    """model = y's inner pair x z (x fixed); data = x x y's outer pair, {y, y + 2} (z fixed)."""
    system, mesh = _cube()
    assert mesh.describe() == {"topology": "slice:4x4x4", "placement": {
        "data": [0, {"axis": 1, "size": 2, "stride": 2}], "model": [{"axis": 1, "size": 2, "stride": 1}, 2]}}
    model = {frozenset(g.members.values()) for g in collective_groups(system.network, ["model"], mesh)}
    data = {frozenset(g.members.values()) for g in collective_groups(system.network, ["data"], mesh)}
    assert model == {frozenset(_chip(x, y, z) for y in (2 * b, 2 * b + 1) for z in range(4))
                     for x in range(4) for b in range(2)}
    assert data == {frozenset(_chip(x, y, z) for x in range(4) for y in (a, a + 2))
                    for a in range(2) for z in range(4)}
    assert frozenset(range(8)) in model and frozenset({0, 8, 16, 24, 32, 40, 48, 56}) in data
    assert mesh.device((1, 0)) == _chip(0, 2, 0) and mesh.device((0, 4)) == _chip(0, 1, 0)
    model_group = collective_groups(system.network, ["model"], mesh)[0]
    assert model_group.sizes == (2, 4) and model_group.wraps == (False, True)  # a pair of a 4-ring is a line
    (whole,) = collective_groups(system.network, None, mesh)  # both factors of y in turn: y is whole again
    assert whole.sizes == (4, 4, 4) and whole.wraps == (True, True, True) and not whole.shared
    assert why_not_symmetric(system, mesh) is None  # still simulated by representatives: see the step test


def test_a_step_on_a_split_slice_by_representatives_equals_every_chip():
    """data=8,model=2 on a v5e's 4x4 slice: data takes x and y's outer pair (2 hops apart), model y's inner pair.
    The representatives' data collectives run with the groups that share their links, so the step is the one
    every chip's simulation gives."""
    kw = {"model": "gpt2", "mode": "train", "chip": "tpu-v5e", "mesh": "data=8,model=2", "batch": 16, "seq": 256,
          "trace": False}
    fast, full = transformer_step.run(**kw), transformer_step.run(**kw, exact=True)
    assert fast.extra["topology"] == "slice:4x4"
    assert fast.extra["placement"] == {"data": [0, {"axis": 1, "size": 2, "stride": 2}],
                                       "model": [{"axis": 1, "size": 2, "stride": 1}]}
    assert fast.extra["step_time_s"] == pytest.approx(full.extra["step_time_s"], rel=1e-9)


@pytest.mark.parametrize("kind", ["all_gather", "all_reduce"])
def test_a_strided_factor_is_a_ring_of_multi_hop_steps_sharing_its_links(kind):
    """a=4,b=2 on an 8-ring: a takes chips {o, o+2, o+4, o+6} (a ring through the wrap, 2 hops a step), b the
    pairs {2k, 2k+1} (a line of one link). Both groups of a cross every link, so each gets W/2 one way:
    bidirectional AllGather of V over 4 takes (3/4) V / (2 W/2); over the pair (1/2) V / W; AllReduce twice."""
    chip = get_chip("tpu-v5p")
    system = System(chip, topology="torus:8", trace=False)
    mesh = Mesh(parse_mesh("a=4,b=2"), system.graph)
    assert {frozenset(g.members.values()) for g in collective_groups(system.network, ["a"], mesh)} == \
        {frozenset({0, 2, 4, 6}), frozenset({1, 3, 5, 7})}
    w = system.graph.edges[0, 1]["bandwidth_bytes_per_s"]
    v, twice = 4e9, 2 if kind == "all_reduce" else 1  # latency below 1e-5 of the time
    for axis, expect in (("a", 0.75 * v / w), ("b", 0.5 * v / w)):
        r = run_collective(kind, System(chip, topology="torus:8", trace=False), v,
                           mesh=Mesh(parse_mesh("a=4,b=2"), system.graph), axes=[axis])
        assert r.time_s == pytest.approx(twice * expect, rel=1e-3)
        assert r.analytic_s == pytest.approx(r.time_s, rel=1e-2) and r.time_s >= r.topology_bound_s * (1 - 1e-9)


@pytest.mark.parametrize("axes", [["data"], ["model"], None])
def test_all_reduce_over_the_split_cube_meets_its_closed_form_above_the_bound(axes):
    system, mesh = _cube()
    r = run_collective("all_reduce", system, 64e6, mesh=mesh, **({"axes": axes} if axes else {}))
    assert r.time_s == pytest.approx(r.analytic_s, rel=1e-2)
    assert r.time_s >= r.topology_bound_s * (1 - 1e-9)


def test_numeric_collectives_over_a_split_axis_equal_numpy():
    """AllReduce over data sums the 8 rows of each data group; AllGather stacks them in data order (x, then
    y's outer pair: chips 0, 8, 16, ... for chip 0's group)."""
    rng = np.random.default_rng(13)
    rows = rng.standard_normal((64, 16))
    system, mesh = _cube()
    summed = run_collective("all_reduce", system, data=rows, mesh=mesh, axes=["data"]).outputs
    system, mesh = _cube()
    gathered = run_collective("all_gather", system, data=rows, mesh=mesh, axes=["data"]).outputs
    for a in range(2):
        for z in range(4):
            members = [_chip(x, y, z) for x in range(4) for y in (a, a + 2)]  # data order
            for c in members:
                np.testing.assert_allclose(summed[c], rows[members].sum(axis=0), rtol=1e-12)
                np.testing.assert_array_equal(np.asarray(gathered[c]).reshape(-1), rows[members].reshape(-1))


def test_groups_holding_two_factors_of_an_axis_out_of_order_are_refused():
    system, mesh = _cube()
    with pytest.raises(Exception, match="give them in mesh order \\(data, model\\)"):
        run_collective("all_reduce", system, 1e6, mesh=mesh, axes=["model", "data"])
