"""Default placement of a mesh on hardware that exists, and where every mesh result says it lies (issue 13).

Real slice shapes come from Cloud TPU's offerings (REFERENCE.md, "Wraparound"): v5e/v6e 1x1 ... 16x16 in
2-D, v4/v5p 2x2x1, 2x2x2, 2x2x4, 2x4x4 below a cube and multiples of 4 above; GPUs are NVLink nodes of 8.
"""
from __future__ import annotations

import pytest

from simulator import get_chip, run_collective
from simulator.engine.system import System
from simulator.workloads.mesh import Mesh, default_topology_for, parse_mesh

V5E_SLICES = {(1, 1), (2, 2), (2, 4), (4, 4), (4, 8), (8, 8), (8, 16), (16, 16)}


@pytest.mark.parametrize("chip,mesh,topology", [
    ("tpu-v5e", "model=4", "slice:2x2"),  # was a 1x4 line
    ("tpu-v5e", "data=2,model=4", "slice:2x4"),
    ("tpu-v5e", "data=4,model=2", "slice:4x2"),
    ("tpu-v5e", "data=16,model=16", "slice:16x16"),
    ("tpu-v5p", "model=16", "slice:2x2x4"),  # was an unwrapped line of 16
    ("tpu-v5p", "data=4,model=16", "slice:4x4x4"),
    ("h100", "model=8", "switch:8"),
    ("h100", "data=32,model=8", "nodes:32:8"),  # was one 256-GPU switch
])
def test_a_mesh_without_topology_lies_on_a_real_slice(chip, mesh, topology):
    assert default_topology_for(parse_mesh(mesh), get_chip(chip)) == topology


def test_every_v5e_default_is_a_real_slice_or_the_mesh_shape():
    """A real slice whenever one's axes can hold the mesh's axes in some order; otherwise (data=2,model=8: the
    only 16-chip slice, 4x4, has no axis of 2) the mesh's own shape, which the output notes as not sold."""
    for data in (1, 2, 4, 8, 16):
        for model in (1, 2, 4, 8, 16):
            spec = default_topology_for(parse_mesh(f"data={data},model={model}"), get_chip("tpu-v5e"))
            shape = tuple(int(s) for s in spec.split(":")[1].split("x"))
            padded = tuple(sorted(shape + (1,) * (2 - len(shape))))
            own = tuple(s for s in (data, model) if s > 1) or (1,)
            assert padded in V5E_SLICES or shape == own, (data, model, spec)
            if data * model > 1 and (sorted(own + (1,) * (2 - len(own))) in [sorted(s) for s in V5E_SLICES]):
                assert padded in V5E_SLICES  # the mesh's own shape is a real slice: never worse than it


def test_a_logical_axis_over_two_physical_axes_runs_at_the_ingress_bound():
    """model=4 on a v5e's 2x2 slice: the collective spans both physical axes; each chip has 2 incoming
    links (one per axis, size-2 axes have one link pair), so AllGather of V needs (3/4) V / (2 b)."""
    chip = get_chip("tpu-v5e")
    system = System(chip, topology=default_topology_for(parse_mesh("model=4"), chip), trace=False)
    mesh = Mesh(parse_mesh("model=4"), system.graph)
    assert mesh.describe() == {"topology": "slice:2x2", "placement": {"model": [0, 1]}}
    nbytes = 1e9
    r = run_collective("all_gather", system, nbytes, axes=["model"], mesh=mesh)
    bound = 0.75 * nbytes / (2 * chip.ici_bandwidth_bytes_per_s)
    assert bound <= r.time_s <= 1.02 * bound + 4 * chip.hop_latency_s


def test_results_with_a_mesh_say_where_it_lies():
    from scenarios import mlp_layers, transformer_step
    from simulator.workloads.sharding import sharded_matmul

    out = sharded_matmul("A[I_X,J]@B[J,K_Y]->C[I_X,K_Y]", {"I": 256, "J": 256, "K": 256}, "X=2,Y=2")
    assert out["topology"] == "slice:2x2" and out["placement"] == {"X": [0], "Y": [1]}
    r = mlp_layers.run(B=64, D=128, F=256, M=4, verify=False, trace=False)
    assert r.params["topology"] == "slice:2x2" and r.extra["placement"] == {"X": [0, 1]}
    d = transformer_step.run(model="gpt2", batch=4, context=64, mesh="model=4", trace=False)
    assert d.extra["topology"] == "slice:2x2" and d.extra["placement"] == {"data": [], "model": [0, 1]}
    line = transformer_step.run(model="gpt2", batch=4, context=64, mesh="model=4", topology="line:4", trace=False)
    assert line.extra["topology"] == "line:4" and line.extra["placement"]["model"] == [0]
    t = transformer_step.run(model="gpt2", mode="train", batch=8, seq=128, mesh="data=2,model=2", trace=False)
    assert t.extra["topology"] == "slice:2x2" and t.extra["placement"] == {"data": [0], "model": [1]}


def test_one_chip_results_say_there_is_no_placement():
    from scenarios import transformer_step

    t = transformer_step.run(model="gpt2", mode="train", batch=4, seq=128, mesh="data=1", trace=False)
    assert t.extra["topology"] is None and t.extra["placement"] == {}
    d = transformer_step.run(model="gpt2", batch=2, context=64, mesh="model=1", trace=False)
    assert d.extra["topology"] is None and d.extra["placement"] == {}
