"""Collectives over several axes against compositions of single-ring formulas written here.

One phase over a ring of n that moves a shard of s bytes per device takes steps(n) x (A + s / B):
ceil((n-1)/2) steps on a bidirectional ring, n - 1 on a line or a unidirectional ring. With
``multi_axis="parallel"`` the array V is cut into one part per axis (keys of V / (n parts) bytes each);
part p runs its phases over the axes in the order p, p+1, ...; a phase ends when its slowest part ends.
A gather's shard grows by each axis already gathered; a reduction's shrinks by each axis already reduced.
"""
import math

import pytest

from simulator.collectives import run_collective
from simulator.engine.system import System

B, A = 4.5e10, 1e-6  # tpu-v5e ICI: one-way bytes/s per link, hop latency
V = 2**30


def ring(n, shard):
    return math.ceil((n - 1) / 2) * (A + shard / B)


def line(n, shard):
    return (n - 1) * (A + shard / B)


def _run(kind, topology, **kw):
    return run_collective(kind, System("tpu-v5e", topology=topology, trace=False), V, **kw)


def test_all_gather_over_a_4x8_torus_in_parallel():
    key = V / (32 * 2)  # two parts
    # part 0 gathers over the 4-axis, then the 8-axis with 4 shards; part 1 the other way round
    expected = max(ring(4, key), ring(8, key)) + max(ring(8, 4 * key), ring(4, 8 * key))
    r = _run("all_gather", "torus:4x8")
    assert r.time_s == pytest.approx(expected, rel=1e-9)


def test_all_gather_over_a_4x8_torus_one_axis_after_the_other():
    key = V / 32
    assert _run("all_gather", "torus:4x8", multi_axis="sequential").time_s == pytest.approx(
        ring(4, key) + ring(8, 4 * key), rel=1e-9)


def test_reduce_scatter_over_a_3d_torus():
    key = math.ceil(V / (64 * 3))  # whole bytes per key
    # part p reduces over axes p, p+1, p+2 of 4 each: the shard holds 16, then 4, then 1 keys
    expected = ring(4, 16 * key) + ring(4, 4 * key) + ring(4, key)
    assert _run("reduce_scatter", "torus:4x4x4").time_s == pytest.approx(expected, rel=1e-9)


def test_all_reduce_over_a_3x5_torus():
    key = math.ceil(V / (15 * 2))
    reduce = max(ring(3, 5 * key), ring(5, 3 * key)) + max(ring(5, key), ring(3, key))
    gather = max(ring(5, key), ring(3, key)) + max(ring(3, 5 * key), ring(5, 3 * key))  # axes reversed
    assert _run("all_reduce", "torus:3x5").time_s == pytest.approx(reduce + gather, rel=1e-9)


def test_all_gather_over_a_mesh_runs_lines():
    key = math.ceil(V / (15 * 2))
    expected = max(line(3, key), line(5, key)) + max(line(5, 3 * key), line(3, 5 * key))
    assert _run("all_gather", "mesh:3x5").time_s == pytest.approx(expected, rel=1e-9)


def test_a_slice_runs_a_ring_on_the_axis_that_wraps_and_a_line_on_the_other():
    key = V / (8 * 16 * 2)  # v5e slice 8x16: the 16-axis wraps, the 8-axis does not
    expected = max(line(8, key), ring(16, key)) + max(ring(16, 8 * key), line(8, 16 * key))
    assert _run("all_gather", "slice:8x16").time_s == pytest.approx(expected, rel=1e-9)


def test_all_to_all_over_a_torus_adds_one_ring_per_axis():
    """Along an axis of n a chain of H hops forwards H, H-1, ..., 1 chunks; a device sends n_total / n
    original chunks of V / n_total^2 to each position on the axis."""
    def a2a(n, chunk):
        hops = math.ceil((n - 1) / 2)
        return hops * A + chunk * hops * (hops + 1) / 2 / B

    chunk = V / 16**2
    assert _run("all_to_all", "torus:4x4").time_s == pytest.approx(2 * a2a(4, 4 * chunk), rel=1e-9)


def test_broadcast_pipelines_pieces_across_axes():
    piece = V / 4
    hops = 2 + 2  # the farthest chip of a 4x4 torus is 2 hops away on each axis
    assert _run("broadcast", "torus:4x4", chunks=4).time_s == pytest.approx((hops + 4 - 1) * (A + piece / B),
                                                                            rel=1e-9)
