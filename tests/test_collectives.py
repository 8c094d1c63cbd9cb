"""Collectives: simulated time against the closed forms, data movement against numpy, scale reduction."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import analytic
from simulator.collectives import applicable, run_collective
from simulator.collectives import collective_groups as _groups
from simulator.engine.system import System
from simulator.errors import PodsimError

B, A = 4.5e10, 1e-6  # tpu-v5e ICI: one-way bytes/s per link, hop latency
V = 2**30  # bandwidth-bound: 1 GiB


def _run(kind, topology, nbytes=V, **kw):
    return run_collective(kind, System("tpu-v5e", topology=topology, trace=False), nbytes, **kw)


@pytest.mark.parametrize("n", [2, 3, 4, 7, 8, 16, 31, 64])
@pytest.mark.parametrize("kind", ["all_gather", "reduce_scatter", "all_reduce"])
@pytest.mark.parametrize("wrap", [True, False])
def test_one_axis_matches_the_ring_formula(n, kind, wrap):
    """A bidirectional ring of n >= 3 takes ceil((n-1)/2) steps and puts (n-1)/2 shards on every link direction
    (an even ring sends half the antipode's shard each way); a line, or a ring of 2 (one link), n - 1 steps
    of a whole shard each. AllReduce is twice that (on a line auto runs `line_pipelined` instead:
    tests/test_line_pipelined.py)."""
    r = _run(kind, f"{'ring' if wrap else 'line'}:{n}", **({} if wrap else {"algorithm": "line"}))
    ring = wrap and n > 2
    steps, per_link = (math.ceil((n - 1) / 2), (n - 1) / 2) if ring else (n - 1, n - 1)
    shard = math.ceil(V / n)  # whole bytes per shard (V / n is whole and even for the even n here)
    expected = (steps * A + per_link * shard / B) * (2 if kind == "all_reduce" else 1)
    assert r.analytic_s == pytest.approx(expected, rel=1e-12)
    assert r.time_s == pytest.approx(expected, rel=1e-9)
    assert analytic.all_gather_time(n * shard, n, B, A, wrap=ring) * (2 if kind == "all_reduce" else 1) == \
        pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("topology", ["torus:4x4", "torus:8x8", "torus:16x16", "torus:64x64", "torus:3x5",
                                      "torus:4x8", "torus:4x4x4", "torus:2x3x4", "mesh:4x4", "mesh:8x8",
                                      "mesh:3x5", "mesh:4x4x4", "slice:8x16"])
@pytest.mark.parametrize("kind", ["all_gather", "reduce_scatter", "all_reduce"])
def test_several_axes_match_their_closed_form(topology, kind):
    r = _run(kind, topology)
    assert r.time_s == pytest.approx(r.analytic_s, rel=0.01)


def test_several_axes_at_once_beat_one_after_the_other():
    parallel, sequential = (_run("all_gather", "torus:8x8", multi_axis=m).time_s for m in ("parallel", "sequential"))
    assert parallel < 0.6 * sequential
    # every chip receives 63/64 of V over its 4 links, all busy all the time (two stages of 4 steps each):
    # the per-chip ingress bound, which is the book's V / (k W_ici) (k = 2 axes, W_ici = 2B) times 63/64
    assert parallel == pytest.approx(63 / 64 * V / (4 * B) + 2 * 4 * A, rel=1e-9)


def test_line_is_about_twice_the_ring():
    ring, line = _run("all_gather", "ring:16").time_s, _run("all_gather", "line:16").time_s
    assert line / ring == pytest.approx(2, rel=0.01)  # n-1 shards on the busiest link against (n-1)/2


@pytest.mark.parametrize("n", [4, 8, 16])
@pytest.mark.parametrize("nbytes", [2**10, 2**17, 2**23, 2**30])
def test_book_takes_a_max_where_the_simulation_adds(n, nbytes):
    """For even n the bidirectional ring pays n/2 steps of latency AND (n-1)/n of the book's V / W; the
    book's max(alpha n / 2, V / W) keeps only the larger and drops the factor (n-1)/n."""
    r = _run("all_gather", f"ring:{n}", nbytes)
    latency, bandwidth = A * n / 2, nbytes / (2 * B)
    assert r.book_s == pytest.approx(max(latency, bandwidth), rel=1e-12)
    assert r.time_s == pytest.approx(latency + (n - 1) / n * bandwidth, rel=1e-9)


def test_latency_bound_regime_shows_the_per_hop_term():
    tiny = _run("all_reduce", "ring:16", 16.0)
    assert tiny.time_s == pytest.approx(2 * 8 * A, rel=1e-3)  # 8 steps each way, twice


def test_all_to_all_is_a_quarter_of_all_gather_on_large_rings():
    a2a = _run("all_to_all", "ring:64", algorithm="bidirectional").time_s
    ag = _run("all_gather", "ring:64", algorithm="bidirectional").time_s
    # bandwidth terms: 32 x 33 / 2 chunks of V / 64^2 on a chain against 63/2 shards of V / 64 on a link;
    # the ratio tends to 1/4 as the ring grows (0.262 at 64)
    assert a2a / ag == pytest.approx((32 * 33 / 2 / 64**2) / (63 / 2 / 64), rel=0.02)
    assert _run("all_to_all", "ring:8", algorithm="bidirectional").time_s == pytest.approx(
        analytic.all_to_all_time(V, 8, B, A), rel=1e-9)


@pytest.mark.parametrize("n", [4, 7, 8])
def test_all_to_all_on_a_line_follows_its_longest_chain(n):
    """On a line the chain from an end forwards n-1, n-2, ..., 1 chunks hop after hop (each bundle
    waits for the whole previous hop), so it takes longer than the busiest link's bytes alone."""
    r = _run("all_to_all", f"line:{n}", algorithm="line")
    chunk = math.ceil(V / n**2)  # whole bytes per chunk
    chain = (n - 1) * A + chunk * n * (n - 1) / 2 / B
    busiest = (n - 1) * A + max((j + 1) * (n - 1 - j) for j in range(n - 1)) * chunk / B
    assert r.time_s == pytest.approx(chain, rel=1e-9)
    assert r.analytic_s == pytest.approx(chain, rel=1e-9)
    assert analytic.all_to_all_time(n**2 * chunk, n, B, A, wrap=False) == pytest.approx(chain, rel=1e-12)
    assert r.time_s > 1.1 * busiest


@pytest.mark.parametrize("nbytes", [V, 1e4])  # bandwidth-bound; latency-bound (1e4 B / B = 0.2 us < A)
@pytest.mark.parametrize("n", [2, 5, 8])
@pytest.mark.parametrize("chunks", [1, 4, 16])
def test_broadcast_pipelines_pieces(chunks, n, nbytes):
    """From the end of a line of n, c pieces of p = V / c bytes: a piece leaves a hop as soon as the one before it
    has left that link and it has itself arrived, and arrives a hop latency A after its bytes (a tandem of
    deterministic servers p / B with pure delays A between them): (n - 1) A + (n - 1 + c - 1) p / B -- the
    latency paid once a hop, not once a piece (issue 27; before, (n - 1 + c - 1)(A + p / B))."""
    r = _run("broadcast", f"line:{n}", nbytes, chunks=chunks, algorithm="line", root=0)
    expected = (n - 1) * A + (n - 1 + chunks - 1) * nbytes / chunks / B
    assert r.time_s == pytest.approx(expected, rel=1e-9)
    assert r.analytic_s == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("chunks", [1, 8, 64])
def test_broadcast_pieces_cross_the_switch_cut_through(chunks):
    """A unidirectional ring through an H100 node's switch: each hop is two links (chip -> switch -> chip, latency A
    each) whose bytes move at once (cut-through) at a port's 18 x 25 GB/s: 7 (2 A) + (7 + c - 1) p / egress."""
    r = run_collective("broadcast", System("h100", topology="switch:8", trace=False), V, algorithm="unidirectional",
                       chunks=chunks)
    egress = 18 * 2.5e10
    assert r.time_s == pytest.approx(7 * 2 * A + (7 + chunks - 1) * V / chunks / egress, rel=1e-9)


def test_switch_ring_goes_through_the_switch_port():
    r = run_collective("all_gather", System("h100", topology="switch:8"), V, algorithm="unidirectional")
    egress = 18 * 2.5e10
    assert r.time_s == pytest.approx(7 * (2 * A + V / (8 * egress)), rel=1e-9)


@pytest.mark.parametrize("topology", ["torus:4x4", "torus:3x5", "torus:4x4x4", "torus:4x3x5", "torus:6x4",
                                      "torus:2x4", "torus:2x3x2"])  # an axis of 2 is one link: alike both ways
@pytest.mark.parametrize("kind", ["all_gather", "reduce_scatter", "all_reduce"])
def test_reduced_simulation_gives_the_full_simulation_time(topology, kind):
    full, reduced = (_run(kind, topology, 3e8, mode=m) for m in ("full", "reduced"))
    assert reduced.mode == "reduced" and full.mode == "full"
    assert reduced.time_s == pytest.approx(full.time_s, rel=1e-12)
    assert reduced.max_link_bytes == pytest.approx(full.max_link_bytes, rel=1e-12)
    assert reduced.total_link_bytes == pytest.approx(full.total_link_bytes, rel=1e-12)
    assert reduced.n_transfers < full.n_transfers


def test_link_bytes_of_a_unidirectional_ring():
    r = _run("all_gather", "ring:8", 8e6, algorithm="unidirectional", mode="full")
    assert r.link_bytes == {f"{i}->{(i + 1) % 8}": pytest.approx(7e6) for i in range(8)}
    assert r.total_link_bytes == pytest.approx(8 * 7e6)


@pytest.mark.parametrize("kind,factor", [("all_reduce", 2 * 7 / 8), ("all_gather", 7 / 8),
                                         ("reduce_scatter", 7 / 8), ("all_to_all", 7 / 8), ("broadcast", 1.0)])
def test_bus_bandwidth_conventions(kind, factor):
    r = _run(kind, "ring:8")
    assert r.algbw_bytes_per_s == pytest.approx(V / r.time_s)
    assert r.busbw_bytes_per_s == pytest.approx(r.algbw_bytes_per_s * factor)


def _reference(kind, data, groups, n):
    out = {}
    for g in groups:
        positions = g.positions()
        members = [g.members[p] for p in positions]
        for i, dev in enumerate(members):
            if kind == "all_gather":
                out[dev] = np.concatenate([data[e] for e in members])
            elif kind == "all_reduce":
                out[dev] = np.sum([data[e] for e in members], axis=0)
            elif kind == "reduce_scatter":
                out[dev] = np.split(np.sum([data[e] for e in members], axis=0), n)[i]
            elif kind == "all_to_all":
                out[dev] = np.concatenate([np.split(data[e], n)[i] for e in members])
            else:
                out[dev] = data[members[0]]
    return out


TOPOLOGIES = ["ring:2", "ring:5", "line:4", "torus:3x4", "mesh:3x3", "torus:2x2x3", "mesh:2x3x2", "switch:5",
              "torus:4x4"]


@settings(max_examples=60, deadline=None)
@given(topology=st.sampled_from(TOPOLOGIES), kind=st.sampled_from(["all_gather", "reduce_scatter", "all_reduce",
                                                                     "all_to_all", "broadcast"]),
       axes_mask=st.integers(1, 7), scale=st.integers(1, 3), seed=st.integers(0, 2**16),
       algorithm=st.sampled_from(["auto", "unidirectional", "bidirectional", "line"]),
       multi_axis=st.sampled_from(["parallel", "sequential"]))
def test_numeric_mode_equals_numpy(topology, kind, axes_mask, scale, seed, algorithm, multi_axis):
    system = System("tpu-v5e", topology=topology)
    ndim = len(system.network.shape) if system.network.grid else 0
    axes = [a for a in range(ndim) if axes_mask >> a & 1] or None if ndim else None
    groups = _groups(system.network, axes)
    n, k = groups[0].n, len(groups[0].sizes)
    per_row = {"all_gather": k, "all_to_all": n, "broadcast": 3}.get(kind, n * k) * scale
    data = np.random.default_rng(seed).standard_normal((len(system.network.chips), per_row))
    kwargs = dict(axes=axes, data=data, algorithm=algorithm, multi_axis=multi_axis,
                  chunks=3 if kind == "broadcast" else 1)
    if n > 1 and algorithm != "auto" and algorithm not in applicable(kind, system.network, groups):
        with pytest.raises(PodsimError, match="no axis of the group .* has a wraparound link|serves"):
            run_collective(kind, system, **kwargs)  # a ring needs a wraparound link somewhere, and no switch
        return
    r = run_collective(kind, system, **kwargs)
    if n == 1:
        assert r.time_s == 0 and r.outputs is None
        return
    expected = _reference(kind, data, groups, n)
    assert set(r.outputs) == set(expected)
    for dev, want in expected.items():
        np.testing.assert_allclose(r.outputs[dev], want, rtol=1e-12, atol=1e-12)


def test_one_device_group_is_a_no_op():
    r = _run("all_reduce", "torus:1x8", axes=[0])
    assert (r.time_s, r.group_size, r.groups) == (0.0, 1, 8)


def test_bytes_that_do_not_split_evenly_are_padded():
    r = _run("all_gather", "ring:3", 1000.0)
    assert r.padded_bytes == 2  # 1000 bytes -> 3 shards of 334
    assert r.time_s == pytest.approx(1 * (A + 334 / B), rel=1e-12)


@pytest.mark.parametrize("kwargs,match", [
    (dict(kind="all_sum"), "unknown collective 'all_sum'"),
    (dict(axes=[7]), "axis 7 is not an axis of shape 4x4; valid axes: 0, 1"),
    (dict(axes=[0, 0]), "names an axis twice"),
    (dict(algorithm="tree"), "algorithm='tree'"),
    (dict(mode="reduced", kind="all_to_all"), "mode='reduced'"),
    (dict(chunks=0), "chunks"),
    (dict(nbytes=-5.0), "nbytes=-5.0"),
    (dict(nbytes=float("nan")), "nbytes=nan"),
])
def test_bad_collective_input(kwargs, match):
    kind = kwargs.pop("kind", "all_gather")
    nbytes = kwargs.pop("nbytes", 1e6)
    with pytest.raises(PodsimError, match=match):
        _run(kind, "torus:4x4", nbytes, **kwargs)


def test_numeric_data_must_split_evenly():
    with pytest.raises(PodsimError, match="do not split into 4"):
        run_collective("reduce_scatter", System(topology="ring:4"), data=np.zeros((4, 6)))


def test_axes_on_a_switch_are_an_error_and_no_topology_is_an_error():
    with pytest.raises(PodsimError, match="has no axes"):
        _run("all_gather", "switch:4", axes=[0])
    with pytest.raises(PodsimError, match="no topology"):
        run_collective("all_gather", System(), 1e6)
