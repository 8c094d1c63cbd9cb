"""Gather, Scatter and Reduce (`simulator.collectives.root`) against closed forms written out here and numpy.

Oracles, from first principles: on an axis of n members a ring splits at the antipode (the longer side has
ceil((n-1)/2) = n // 2 members), a line at the root; the link next to the root carries its side's bundles one
after another, each a hop of latency alpha plus its bytes over the link bandwidth b. Reduce pipelines c pieces
along the H hops of the longer sides: (H + c - 1)(alpha + V / (c b)). Through a switch every member's message
shares the root's port: route latency 2 alpha + (bytes through the port) / port bandwidth.
"""
import json
import math

import numpy as np
import pytest

from simulator import System, get_chip
from simulator.analytic import BUS_FACTORS
from simulator.collectives import KINDS, run_collective
from simulator.frontend.cli import main

V = 1_000_000.0
CHIP = get_chip("tpu-v5e")
ALPHA, B = CHIP.hop_latency_s, CHIP.ici_bandwidth_bytes_per_s


def _run(kind, topology, nbytes=V, **kw):
    return run_collective(kind, System("tpu-v5e", topology=topology), nbytes, **kw)


def test_root_kinds_sit_beside_broadcast_with_nccl_bus_factors():
    assert {"gather", "scatter", "reduce", "broadcast"} <= set(KINDS)
    assert BUS_FACTORS["reduce"](8) == 1.0
    assert BUS_FACTORS["gather"](8) == BUS_FACTORS["scatter"](8) == 7 / 8


@pytest.mark.parametrize("kind", ["gather", "scatter"])
def test_gather_and_scatter_on_a_ring_carry_half_the_shards_through_the_roots_link(kind):
    r = _run(kind, "torus:8")
    expected = 4 * (ALPHA + V / 8 / B)  # 4 members on the longer side, V/8 each
    assert r.time_s == pytest.approx(expected, rel=1e-9)
    assert r.analytic_s == pytest.approx(expected, rel=1e-9)
    # the topology bound: 7V/8 through the root's two links (in for gather, out for scatter)
    assert r.topology_bound_s == pytest.approx(ALPHA + 7 * V / 8 / (2 * B), rel=1e-9)
    assert r.busbw_bytes_per_s == pytest.approx(V / r.time_s * 7 / 8, rel=1e-9)


def test_gather_on_a_torus_goes_axis_by_axis_with_growing_bundles():
    r = _run("gather", "torus:4x4")
    # last axis first: 2 members of V/16 each; then along axis 0: 2 bundles of a line's 4 shards, 4V/16
    expected = 2 * (ALPHA + V / 16 / B) + 2 * (ALPHA + 4 * V / 16 / B)
    assert r.time_s == pytest.approx(expected, rel=1e-9)


def test_scatter_on_a_line_from_an_end_sends_every_shard_down_one_link():
    r = _run("scatter", "line:6")
    shard = math.ceil(V / 6)  # keys hold whole bytes
    assert r.time_s == pytest.approx(5 * (ALPHA + shard / B), rel=1e-9)


@pytest.mark.parametrize("chunks", [1, 4, 16])
def test_reduce_pipelines_pieces_along_the_longer_side(chunks):
    r = _run("reduce", "torus:8", chunks=chunks, algorithm="root_chains")
    hops = 4
    assert r.time_s == pytest.approx((hops + chunks - 1) * (ALPHA + V / chunks / B), rel=1e-9)
    assert r.busbw_bytes_per_s == pytest.approx(V / r.time_s, rel=1e-9)


@pytest.mark.parametrize("chunks", [2, 8])
def test_reduce_both_ways_round_halves_the_bytes_through_each_of_the_roots_links(chunks):
    r = _run("reduce", "torus:8", chunks=chunks, algorithm="root_rings")
    # half the pieces round each way: c/2 pieces of V/c along n - 1 = 7 hops, the halves on disjoint links
    assert r.time_s == pytest.approx((7 + chunks // 2 - 1) * (ALPHA + V / chunks / B), rel=1e-9)
    assert r.max_link_bytes == pytest.approx(V / 2, rel=1e-9)


def test_auto_reduce_takes_the_rings_for_large_arrays_and_nears_the_roots_ingress_bound():
    """On a ring the two spanning trees are root_rings' two ways round (half the pieces each way, n - 1 hops):
    auto takes one of them, whichever pipelining count prices faster."""
    r = _run("reduce", "torus:8", nbytes=64e6)
    assert r.algorithm in ("root_rings", "spanning_trees")
    assert r.time_s <= 1.25 * r.topology_bound_s  # bound: V through the root's two links, V / (2 b)
    assert r.topology_bound_s == pytest.approx(ALPHA + 64e6 / (2 * B), rel=1e-9)


def test_reduce_default_pieces_beat_one_piece_and_stay_within_the_pipeline_optimum():
    r = _run("reduce", "torus:8", nbytes=64e6, algorithm="root_chains")
    one = 4 * (ALPHA + 64e6 / B)
    best = min((4 + c - 1) * (ALPHA + 64e6 / c / B) for c in range(1, 2049))
    assert r.time_s < one and r.time_s <= best * 1.05


@pytest.mark.parametrize("kind,port_bytes", [("gather", 3 * V / 4), ("scatter", 3 * V / 4), ("reduce", 3 * V)])
def test_through_a_switch_the_roots_port_carries_every_message(kind, port_bytes):
    system = System("tpu-v5e", topology="switch:4")
    port = system.network.graph.edges[0, "sw0"]
    r = run_collective(kind, system, V, algorithm="root_direct")  # auto takes switch_relay for Reduce
    assert r.algorithm == "root_direct"
    assert r.time_s == pytest.approx(2 * port["latency_s"] + port_bytes / port["bandwidth_bytes_per_s"], rel=1e-9)


@pytest.mark.parametrize("topology", ["torus:4x4", "ring:5", "mesh:3x4", "line:5", "switch:4"])
def test_numeric_results_equal_numpy(topology):
    rng = np.random.default_rng(7)
    n = System("tpu-v5e", topology=topology).network.chips
    data = rng.standard_normal((len(n), 8 * len(n)))
    root = n[-2]
    reduce_algorithms = ["auto", "root_rings"] if topology in ("torus:4x4", "ring:5") else ["auto"]
    for algorithm in reduce_algorithms:
        reduced = run_collective("reduce", System("tpu-v5e", topology=topology), data=data, root=root, chunks=4,
                                 algorithm=algorithm)
        assert list(reduced.outputs) == [root]
        np.testing.assert_allclose(reduced.outputs[root], data.sum(axis=0), rtol=1e-12, atol=1e-12)
    gathered = run_collective("gather", System("tpu-v5e", topology=topology), data=data, root=root)
    np.testing.assert_array_equal(gathered.outputs[root], data.reshape(-1))  # row-major positions = chip order
    scattered = run_collective("scatter", System("tpu-v5e", topology=topology), data=data, root=root)
    for i, chip in enumerate(n):
        np.testing.assert_array_equal(scattered.outputs[chip], np.split(data[n.index(root)], len(n))[i])


def test_contract_commands_report_time(capsys):
    for kind in ("gather", "scatter", "reduce"):
        assert main(["collective", kind, "--chip", "tpu-v5e", "--topology", "torus:8", "--bytes", "1MB",
                     "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        result = out.get("result", out)
        assert result["time_s"] > 0 and result["time_s"] >= result["topology_bound_s"]


def test_numeric_scatter_that_does_not_split_names_the_multiple():
    from simulator.errors import PodsimError

    with pytest.raises(PodsimError, match="multiple of 8"):
        run_collective("scatter", System("tpu-v5e", topology="torus:8"), data=np.zeros((8, 12)))
