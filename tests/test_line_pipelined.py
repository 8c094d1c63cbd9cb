"""AllReduce on a line (`line_pipelined`): pieces summed toward the middle chip and copied back out.

Oracles from first principles: an end chip of a line has one link in and must receive V, so no AllReduce beats
V / b; ReduceScatter then AllGather loads the links into the ends with n - 1 shards of V / n per phase,
2 (n - 1) / n x V / b. Pieces summed hop by hop from both ends to the middle chip m = floor((n - 1)/2) and
copied back out cross every link once each way (V per link direction), and their longest chain of hops runs
from the farther end to m and back out: H = 2 max(m, n - 1 - m); c pieces pipelined along H hops of
``latency + V / (c b)`` take ``(H + c - 1)(latency + V / (c b))``. numpy gives the sums.
"""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.collectives import collective_groups, run_collective
from simulator.engine.system import System
from simulator.errors import PodsimError

B, A = 4.5e10, 1e-6  # tpu-v5e ICI: one-way bytes/s per link, hop latency
ALG = dict(algorithm="line_pipelined")


def _run(topology, nbytes, **kw):
    return run_collective("all_reduce", System("tpu-v5e", topology=topology, trace=False), nbytes, **kw)


def _hops(n):
    m = (n - 1) // 2
    return 2 * max(m, n - 1 - m)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 12), c=st.integers(1, 40), nbytes=st.sampled_from([1e3, 1e6, 1e9]))
def test_time_is_the_pipeline_along_the_longest_chain(n, c, nbytes):
    """(H + c - 1)(latency + V / (c b)), simulated and closed form; every link direction carries V."""
    r = _run(f"line:{n}", nbytes, chunks=c, **ALG)
    expected = (_hops(n) + c - 1) * (A + nbytes / c / B)
    assert r.time_s == pytest.approx(expected, rel=1e-9)
    assert r.analytic_s == pytest.approx(expected, rel=1e-9)
    assert r.max_link_bytes == pytest.approx(nbytes, rel=1e-9)
    assert r.time_s >= r.topology_bound_s * (1 - 1e-12)


@pytest.mark.parametrize("n", [3, 4, 8, 16])
def test_large_arrays_reach_the_end_chips_ingress_bound(n):
    """At 1 GB the default pieces come within (1 + sqrt((H - 1) latency b / V))^2 of V / b, the bound (an end
    chip's one link in): the best of (1 + (H - 1)/c)(1 + c latency b / V) over c, 1.02-1.05 here; ReduceScatter
    then AllGather (`line`) takes 2 (n - 1) / n of it, and auto now runs the pipeline."""
    r = _run(f"line:{n}", 1e9)
    assert r.algorithm == "line_pipelined"
    assert r.topology_bound_s == pytest.approx(1e9 / B, rel=1e-3)
    best = (1 + math.sqrt((_hops(n) - 1) * A * B / 1e9)) ** 2
    assert r.topology_bound_s <= r.time_s <= 1.001 * best * r.topology_bound_s
    old = _run(f"line:{n}", 1e9, algorithm="line")
    assert old.time_s == pytest.approx(2 * (n - 1) / n * 1e9 / B, rel=1e-3)


def test_small_arrays_pay_h_hops_of_latency_not_2_n_minus_1():
    """One piece of 8 bytes: H hops (8 on a line of 8) against the 14 steps of ReduceScatter then AllGather."""
    r = _run("line:8", 8.0, chunks=1, **ALG)
    assert r.time_s == pytest.approx(8 * (A + 8 / B), rel=1e-9)
    assert _run("line:8", 8.0, algorithm="line").time_s == pytest.approx(14 * (A + 1 / B), rel=1e-9)


@pytest.mark.parametrize("topology,axes", [("mesh:4x4", [0]), ("slice:8x16", [0])])
def test_lines_of_a_mesh_or_slice_run_side_by_side(topology, axes):
    """Each line of an axis without wraparound is its own group on its own links: same time as one line."""
    r = run_collective("all_reduce", System("tpu-v5e", topology=topology, trace=False), 1e9, axes=axes, chunks=100,
                       **ALG)
    n = collective_groups(System("tpu-v5e", topology=topology).network, axes)[0].n
    assert r.time_s == pytest.approx((_hops(n) + 99) * (A + 1e9 / 100 / B), rel=1e-9)


@pytest.mark.parametrize("topology,axes", [("torus:4x4", None), ("ring:8", None), ("mesh:4x4", None)])
def test_refused_where_the_group_is_not_a_line(topology, axes):
    """A ring or torus (wraparound) or a 2-D mesh: an error naming the algorithms that apply."""
    with pytest.raises(PodsimError, match="'line_pipelined' cannot run all_reduce here: .*; algorithms that apply: "):
        _run(topology, 1e6, **ALG)


@settings(max_examples=25, deadline=None)
@given(shape=st.sampled_from(["line:2", "line:3", "line:6", "line:9", "mesh:3x4", "mesh:4x2x3", "torus:2x3"]),
       axis=st.integers(0, 2), chunks=st.sampled_from([None, 1, 2, 3, 7]), per_chip=st.integers(1, 4),
       seed=st.integers(0, 2**16))
def test_numeric_mode_equals_numpy(shape, axis, chunks, per_chip, seed):
    """Real arrays: every chip of every line ends with the sum of its line's rows."""
    system = System("tpu-v5e", topology=shape)
    dims = len(system.network.shape)
    axes = None if shape.startswith("line") else [axis % dims]
    groups = collective_groups(system.network, axes)
    n = groups[0].n
    if len(groups[0].sizes) != 1 or (groups[0].wraps[0] and n > 2):
        return
    data = np.random.default_rng(seed).standard_normal((len(system.network.chips), n * per_chip))
    r = run_collective("all_reduce", system, data=data, axes=axes, chunks=chunks, **ALG)
    for g in groups:
        members = list(g.members.values())
        for dev in members:
            np.testing.assert_allclose(r.outputs[dev], data[members].sum(axis=0), rtol=1e-12, atol=1e-12)


def test_reduced_mode_counts_every_line_once():
    """torus:2x4 over the size-2 axis: four lines of two, alike (mode auto simulates one): 10 pieces along H = 2
    hops, and the link bytes are every line's, 2 link directions x V each, in either mode."""
    for mode in ("auto", "full"):
        r = run_collective("all_reduce", System("tpu-v5e", topology="torus:2x4", trace=False), 1e6, axes=[0],
                           mode=mode, chunks=10, **ALG)
        assert r.total_link_bytes == pytest.approx(4 * 2 * 1e6, rel=1e-9)
        assert r.time_s == pytest.approx((2 + 10 - 1) * (A + 1e5 / B), rel=1e-9)
