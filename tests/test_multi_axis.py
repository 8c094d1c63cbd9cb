"""Collectives over several axes against formulas written here, the per-chip ingress bound, and numpy.

One phase along an axis of n that moves a bundle of s bytes per device takes ``steps x A + load x s / B``:
on a wrapped axis of n >= 3 (a bidirectional ring) ceil((n-1)/2) steps and (n-1)/2 bundles on every link
direction (an even ring sends half the antipode's bundle each way); on a line, or an axis of 2 (one link),
n - 1 steps of a whole bundle each. The array is cut into parts; a part gathers the axes in its own order,
one per stage, and holds u x n_1 ... n_j bytes after gathering axes of n_1 ... n_j (u: its bytes per shard
position). Parts crossing one axis in one stage travel together; a stage lasts as long as its slowest
axis. A ReduceScatter runs the stages backwards (same times); an AllReduce is both.

The per-chip ingress bound: every chip receives (n-1)/n of V (twice for AllReduce) through its incoming
links, 2 per axis of 3 or more (1 for an axis of 2).
"""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import topologies
from simulator.collectives import collective_groups, plan_collective, run_collective
from simulator.engine.system import System
from simulator.workloads.mesh import Mesh

B, A = 4.5e10, 1e-6  # tpu-v5e ICI: one-way bytes/s per link, hop latency
V = 2**30
RING_KINDS = ("all_gather", "reduce_scatter", "all_reduce")


def axis_phase(n, wrap, nbytes):
    """Seconds of one phase along an axis of n moving ``nbytes`` per device (see the module docstring)."""
    if wrap and n > 2:
        return math.ceil((n - 1) / 2) * A + (n - 1) / 2 * nbytes / B
    return (n - 1) * (A + nbytes / B)


def staged(layout, sizes, wraps, kind):
    """The plan's time by the formula of the module docstring."""
    total = 0.0
    for t in range(layout.stages):
        phases = []
        for a, (n, wrap) in enumerate(zip(sizes, wraps, strict=True)):
            held = [math.prod(sizes[b] for b in p.order[:t - p.start]) * p.units for p in layout.parts
                    if p.start <= t < p.start + len(sizes) and p.order[t - p.start] == a]
            if held:
                phases.append(axis_phase(n, wrap, sum(held) * layout.unit_bytes))
        total += max(phases, default=0.0)
    return 2 * total if kind == "all_reduce" else total


def ingress(sizes, nbytes, kind):
    """The bandwidth term of the per-chip ingress bound."""
    n = math.prod(sizes)
    links = sum(2 if s > 2 else 1 for s in sizes if s > 1)
    return (2 if kind == "all_reduce" else 1) * (n - 1) / n * nbytes / (links * B)


def _run(kind, topology, nbytes=V, **kw):
    return run_collective(kind, System("tpu-v5e", topology=topology, trace=False), nbytes, **kw)


@pytest.mark.parametrize("topology,k,n_axis", [("torus:4x4", 2, 4), ("torus:8x8", 2, 8), ("torus:4x4x4", 3, 4),
                                               ("torus:5x5", 2, 5)])
@pytest.mark.parametrize("kind", RING_KINDS)
def test_alike_axes_take_equal_parts_in_k_stages(topology, k, n_axis, kind):
    """Where every axis has the same length, k equal parts (part p starts at axis p) keep every axis busy
    in every one of k stages: the ingress bound plus k phases of latency."""
    r = _run(kind, topology)
    steps = math.ceil((n_axis - 1) / 2)
    n = n_axis**k
    # a shard is whole bytes (an even number where halves go different ways); parts take whole (even) bytes of
    # it, as equal as they can be: each stage lasts as long as its largest part's phase
    quantum = 2 if n_axis % 2 == 0 else 1
    units = quantum * math.ceil(V / n / quantum)
    part = quantum * math.ceil(units / quantum / k)
    expected = (2 if kind == "all_reduce" else 1) * (k * steps * A + (n - 1) / 2 * part / B)
    assert r.time_s == pytest.approx(expected, rel=1e-9)
    assert r.analytic_s == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("topology", ["torus:4x8", "torus:3x5", "torus:2x16", "torus:4x4x8", "torus:2x3x16",
                                      "slice:4x16", "mesh:3x5", "torus:4x4"])
@pytest.mark.parametrize("kind", RING_KINDS)
def test_stages_match_the_formula_and_reach_the_ingress_bound(topology, kind):
    system = System("tpu-v5e", topology=topology, trace=False)
    plan = plan_collective(kind, system, V)
    if plan.algorithm.name == "grid_pipelined":  # AllReduce on a grid with a line axis: the ring plan is the next
        ring = min((a for a in plan.alternatives if a["algorithm"] != "grid_pipelined"), key=lambda a: a["time_s"])
        plan = plan_collective(kind, system, V, algorithm=ring["algorithm"])
    group = plan.groups[0]
    expected = staged(plan.job.layout, group.sizes, group.wraps, kind)
    r = run_collective(kind, system, V, algorithm=plan.algorithm.name)
    assert r.analytic_s == pytest.approx(expected, rel=1e-9)
    assert r.time_s == pytest.approx(expected, rel=1e-9)
    if all(group.wraps[a] or n == 2 for a, n in enumerate(group.sizes)):
        latency = 2 * (len(group.sizes) + 4) * max(math.ceil((n - 1) / 2) for n in group.sizes) * A
        assert r.time_s <= 1.01 * ingress(group.sizes, V, kind) + latency


@pytest.mark.parametrize("topology,before", [("torus:4x8", 1.29), ("torus:3x5", 1.14), ("torus:4x4x8", 1.32),
                                             ("torus:4x4x4", 1.33), ("ring:8", 1.14)])
def test_every_axis_ends_together(topology, before):
    """The bandwidth-bound AllGather within 1% of the bound (equal parts in k stages were 13-33% over)."""
    r = _run("all_gather", topology)
    assert r.time_s / r.topology_bound_s < 1.01 < before


def test_sequential_takes_one_axis_after_the_other():
    shard = V / 32
    expected = axis_phase(4, True, shard) + axis_phase(8, True, 4 * shard)
    r = _run("all_gather", "torus:4x8", multi_axis="sequential")
    assert r.time_s == pytest.approx(expected, rel=1e-9)
    assert r.analytic_s == pytest.approx(expected, rel=1e-9)


def test_more_stages_only_where_they_pay():
    """Stages cost latency: a latency-bound AllGather keeps the k stages a part needs."""
    small = plan_collective("all_gather", System("tpu-v5e", topology="torus:4x8", trace=False), 4096)
    large = plan_collective("all_gather", System("tpu-v5e", topology="torus:4x8", trace=False), V)
    assert small.job.layout.stages == 2 < large.job.layout.stages


@settings(max_examples=15, deadline=None)
@given(sizes=st.lists(st.integers(2, 16), min_size=1, max_size=3), kind=st.sampled_from(RING_KINDS),
       scale=st.floats(0.5, 4.0))
def test_every_wrapped_torus_reaches_the_ingress_bound(sizes, kind, scale):
    """Wrapped tori up to 3-D, sides 2-16, bandwidth-bound (V large against the latency steps): within 5% of
    the bound plus the latency of up to k + 4 stages (twice for AllReduce), and on the closed form."""
    topology = "torus:" + "x".join(map(str, sizes))
    steps = max(math.ceil((n - 1) / 2) for n in sizes)
    nbytes = scale * 1e6 * math.prod(sizes) * steps  # about 20 us of bandwidth per latency step and axis
    r = _run(kind, topology, nbytes)
    latency = (2 if kind == "all_reduce" else 1) * (len(sizes) + 4) * steps * A
    bound = A + ingress(sizes, nbytes, kind)
    assert r.topology_bound_s == pytest.approx(bound, rel=1e-6)
    assert r.time_s <= 1.05 * bound + latency
    assert r.time_s == pytest.approx(r.analytic_s, rel=0.01)


def _reference(kind, data, groups):
    out = {}
    for g in groups:
        members = [g.members[p] for p in g.positions()]
        total = np.sum([data[e] for e in members], axis=0)
        gathered = np.concatenate([data[e] for e in members])
        for i, dev in enumerate(members):
            out[dev] = {"all_gather": gathered, "all_reduce": total}.get(kind)
            if kind == "reduce_scatter":
                out[dev] = np.split(total, len(members))[i]
    return out


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(2, 4), min_size=1, max_size=3), wrap=st.booleans(), kind=st.sampled_from(RING_KINDS),
       elements=st.integers(1, 7), seed=st.integers(0, 2**16), axes_mask=st.integers(1, 7),
       algorithm=st.sampled_from(["auto", "line", "unidirectional"]), sequential=st.booleans())
def test_numeric_mode_moves_the_arrays_numpy_computes(sizes, wrap, kind, elements, seed, axes_mask, algorithm,
                                                      sequential):
    """Any shape, any row length (a multiple of the group for a reduction): halves of odd lengths, parts of
    a few elements or none, stages, lines and rings all deliver what numpy computes."""
    graph = topologies.torus(tuple(sizes), wrap, bandwidth_bytes_per_s=B, latency_s=A)
    system = System(topology=graph)
    axes = [a for a in range(len(sizes)) if axes_mask >> a & 1] or None
    groups = collective_groups(system.network, axes)
    n = groups[0].n
    if algorithm == "unidirectional" and not any(groups[0].wraps):
        algorithm = "auto"
    row = elements * (1 if kind == "all_gather" else n)
    data = np.random.default_rng(seed).standard_normal((len(system.network.chips), row))
    r = run_collective(kind, system, data=data, axes=axes, algorithm=algorithm,
                       multi_axis="sequential" if sequential else "parallel")
    for dev, want in _reference(kind, data, groups).items():
        np.testing.assert_allclose(r.outputs[dev], want, rtol=1e-12, atol=1e-12)
    assert r.time_s == pytest.approx(r.analytic_s, rel=1e-9)
    assert r.padded_bytes == 0


@pytest.mark.parametrize("topology,spec,physical", [("torus:4x4", "model=16", [0, 1]),
                                                    ("slice:4x4", "model=16", [0, 1]),
                                                    ("torus:4x4", "model=16@1+0", [0, 1]),
                                                    ("torus:2x4x8", "data=2,model=32", [1, 2]),
                                                    ("slice:2x2", "model=4", [0, 1])])
@pytest.mark.parametrize("kind", RING_KINDS)
def test_a_logical_axis_over_several_physical_axes_runs_over_all_of_them(topology, spec, physical, kind):
    """``model=16`` on a 4x4 slice is the collective over both physical axes (it was a row-major snake ring)."""
    mesh = Mesh(spec, System("tpu-v5e", topology=topology, trace=False).graph)
    logical = run_collective(kind, System("tpu-v5e", topology=topology, trace=False), V, mesh=mesh, axes=["model"])
    direct = run_collective(kind, System("tpu-v5e", topology=topology, trace=False), V, axes=sorted(physical))
    assert logical.time_s == pytest.approx(direct.time_s, rel=1e-12)
    assert logical.algorithm == direct.algorithm


def test_a_two_by_two_slice_axis_reaches_the_bound():
    """``model=4`` on an unwrapped 2x2 slice: two stages, each part crossing a single link per axis: 3/4 of V
    into every chip over its two links."""
    system = System("tpu-v5e", topology="slice:2x2", trace=False)
    r = run_collective("all_gather", system, V, mesh=Mesh("model=4", system.graph), axes=["model"])
    assert r.time_s == pytest.approx(2 * A + 3 / 4 * V / (2 * B), rel=1e-9)
    assert r.time_s == pytest.approx(r.topology_bound_s + A, rel=1e-6)  # the bound counts one latency


@pytest.mark.parametrize("shape,spec", [((4, 2, 2), "model=8,data=2"), ((4, 2, 2), "data=2@2,model=8@1+0"),
                                        ((4, 4), "model=4@1,data=4@0")])
@pytest.mark.parametrize("kind", RING_KINDS)
def test_logical_axes_move_the_arrays_in_logical_order(shape, spec, kind):
    """Positions of a logical axis laid over several physical axes follow its logical coordinate (row-major
    over the physical axes in placement order), so the gathered array comes out in that order."""
    graph = topologies.torus(shape, bandwidth_bytes_per_s=B, latency_s=A)
    system = System(topology=graph)
    mesh = Mesh(spec, system.graph)
    m = mesh.size("model")
    data = np.random.default_rng(3).standard_normal((16, 2 * m))
    r = run_collective(kind, system, data=data, mesh=mesh, axes=["model"])
    for dev in range(16):
        coords = mesh.coords(dev)
        line = [mesh.device(coords[:mesh.index("model")] + (c,) + coords[mesh.index("model") + 1:]) for c in range(m)]
        total = np.sum([data[e] for e in line], axis=0)
        want = {"all_gather": np.concatenate([data[e] for e in line]), "all_reduce": total,
                "reduce_scatter": np.split(total, m)[coords[mesh.index("model")]]}[kind]
        np.testing.assert_allclose(r.outputs[dev], want, rtol=1e-12, atol=1e-12)


def test_all_to_all_over_a_torus_adds_one_ring_per_axis():
    """Along an axis of n a chain of H hops forwards H, H-1, ..., 1 chunks; a device sends n_total / n
    original chunks of V / n_total^2 to each position on the axis."""
    def a2a(n, chunk):
        hops = math.ceil((n - 1) / 2)
        return hops * A + chunk * hops * (hops + 1) / 2 / B

    chunk = V / 16**2
    assert _run("all_to_all", "torus:4x4", algorithm="bidirectional").time_s == pytest.approx(2 * a2a(4, 4 * chunk),
                                                                                            rel=1e-9)


@pytest.mark.parametrize("nbytes", [V, 1e4])
def test_broadcast_pipelines_pieces_across_axes(nbytes):
    """The farthest chip of a 4x4 torus is 2 + 2 hops away; 4 pieces follow each other down them, each hop's
    latency paid once (a piece's bytes leave once the one before it has left the link; issue 27)."""
    piece = nbytes / 4
    hops = 2 + 2
    assert _run("broadcast", "torus:4x4", nbytes, chunks=4, algorithm="bidirectional").time_s == pytest.approx(
        hops * A + (hops + 4 - 1) * piece / B, rel=1e-9)
