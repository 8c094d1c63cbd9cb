"""Mesh: logical axes on physical ones; placement decides rings vs lines and therefore time."""
import pytest

import topologies
from simulator.collectives import run_collective
from simulator.engine.system import System
from simulator.errors import PodsimError
from simulator.workloads.mesh import Mesh, default_topology_for, parse_mesh

B, A = 4.5e10, 1e-6


def test_parse_mesh():
    spec = parse_mesh("X=4, Y=2")
    assert (spec.names, spec.sizes, spec.n_devices) == (("X", "Y"), (4, 2), 8)
    assert parse_mesh("data=2@1,model=4@0").placement == ((1,), (0,))


@pytest.mark.parametrize("text,match", [("", "empty"), ("X4", "NAME=SIZE"), ("X=4,X=2", "twice"),
                                        ("X=0", "from 1 to"), ("X=-1", "NAME=SIZE"), ("X=1000,Y=2000", "1,000,000"),
                                        ("X=²", "NAME=SIZE"), ("X=٣", "NAME=SIZE"), ("X=16@0+0", "twice"),
                                        ("X=" + "9" * 5000, "characters")])
def test_bad_mesh_specs(text, match):
    with pytest.raises(PodsimError, match=match):
        parse_mesh(text)


def test_axes_laid_in_order_and_coordinates_round_trip():
    mesh = Mesh("X=4,Y=4", topologies.torus((4, 4)))
    assert mesh.placement == ((0,), (1,))
    assert mesh.device((1, 2)) == 6
    assert all(mesh.device(mesh.coords(d)) == d for d in range(16))


def test_one_logical_axis_spans_two_physical_axes():
    mesh = Mesh("X=16", topologies.torus((4, 4)))
    assert mesh.placement == ((0, 1),)
    assert [mesh.device((i,)) for i in range(16)] == list(range(16))


def test_explicit_placement_swaps_axes():
    mesh = Mesh("X=4@1,Y=4@0", topologies.torus((4, 4)))
    assert mesh.device((1, 2)) == 2 * 4 + 1


@pytest.mark.parametrize("text,shape,match", [("X=4,Y=2", (4, 4), "8 devices but the topology has 16"),
                                              ("X=3,Y=4", (2, 6), "does not match the physical axes"),
                                              ("X=4@0,Y=4@0", (4, 4), "unused axes")])
def test_mesh_that_does_not_fit_the_topology(text, shape, match):
    """X=3 shares no factor with the first axis of 2x6, so not even a factor of it can hold X."""
    with pytest.raises(PodsimError, match=match):
        Mesh(text, topologies.torus(shape))


def test_unknown_axis_lists_the_mesh_axes():
    with pytest.raises(PodsimError, match="axis 'Z' is not in mesh X=4,Y=4; mesh axes: X, Y"):
        Mesh("X=4,Y=4", topologies.torus((4, 4))).index("Z")


def test_same_logical_mesh_two_placements_two_times():
    """A 4x4 grid wrapped on physical axis 0 only: logical X on axis 0 is a ring, on axis 1 a line."""
    graph = topologies.torus((4, 4), wrap=(True, False), bandwidth_bytes_per_s=B, latency_s=A)
    times = {}
    for text in ("X=4@0,Y=4@1", "X=4@1,Y=4@0"):
        system = System(topology=graph)
        mesh = Mesh(text, system.graph)
        times[text] = run_collective("all_gather", system, 1e9, axes=["X"], mesh=mesh).time_s
    ring = 2 * A + 1.5 * 2.5e8 / B  # bidirectional ring of 4: 2 steps, 3/2 shards per link (antipode split)
    line = 3 * (A + 2.5e8 / B)   # line of 4: 3 steps
    assert times == {"X=4@0,Y=4@1": pytest.approx(ring), "X=4@1,Y=4@0": pytest.approx(line)}


def test_mesh_on_a_switch_enumerates_chips():
    system = System("h100", topology="switch:8")
    mesh = Mesh("X=2,Y=4", system.graph)
    assert mesh.device((1, 3)) == 7 and mesh.is_ring("Y")
    r = run_collective("all_reduce", system, 1e9, axes=["Y"], mesh=mesh)
    assert r.groups == 2 and r.group_size == 4
    assert r.time_s == pytest.approx(r.analytic_s, rel=0.01)


def test_default_topology_is_the_chips_slice():
    from simulator.hardware.specs import get_chip

    assert default_topology_for(parse_mesh("X=4,Y=2"), get_chip("tpu-v5e")) == "slice:4x2"
    assert default_topology_for(parse_mesh("data=1,model=8"), get_chip("h100")) == "switch:8"


def test_default_topology_follows_explicit_placement():
    from simulator.hardware.specs import get_chip

    assert default_topology_for(parse_mesh("X=4@1,Y=2@0"), get_chip("tpu-v5e")) == "slice:2x4"
    with pytest.raises(PodsimError, match="exactly one physical axis"):
        default_topology_for(parse_mesh("X=4@0+1,Y=2@2"), get_chip("tpu-v5p"))
