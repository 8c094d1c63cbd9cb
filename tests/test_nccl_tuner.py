"""NCCL's tuner: the choice equals what NCCL's tuning model gives by hand from its tables.

The constants below are read off NVIDIA/nccl ``src/graph/tuning.cc`` (master, commit 5067397c) by hand, and each
expected time is computed here with plain arithmetic, not by the module:

- ``baseLat`` (us, LL/LL128/Simple): Tree 6.8/14/8.4, Ring 6.6/14/8.4, NVLS and NVLSTree 0;
- ``hwLat`` NVLink: Tree 0.6/1.25/4.0, Ring 0.6/1.9/3.4, NVLS/NVLSTree Simple 25; network: Tree 5.0/8.5/14,
  Ring 2.7/4.0/14.0, NVLSTree Simple 20.9;
- ``llMaxBws``: Hopper one node 141, Ampere one node 87.7; across nodes (x86 Intel) row 0: 39.0 (two nodes);
- ``perChMaxTreeBws`` Hopper (N1/N2) 38.7/41.4, Ampere N1 24.0; ``perChMaxRingLL128Bws`` Hopper 36.7, Ampere 20;
  ``perChMaxTreeLL128Bws`` Hopper N2 36.7; ``perChMaxNVLSTreeBws`` Hopper N2 57.7; ``nvlsEfficiency`` Hopper 0.85;
- ``treeCorrectionFactor`` at log2(bytes/64) = 10: LL 0.6, LL128 0.6; at 20: Simple 0.8;
- time (us) = latency + bytes / (1000 x algorithm bandwidth in GB/s).

The graphs (channels x GB/s) are the search's reduction in `simulator.collectives.nccl_tuner.graph`, derived here
by hand from search.cc's ladders: 8 H100 in a node have 18 x 20.6 = 370.8 GB/s of NVLink; the first intra speed
(60) fits 6 channels (360 < 370.8), lower speeds (50: 350, 40: 360, 30: 360) are no better, and 24/60 < .49 stops
the ladder; ncclTopoDupChannels doubles them (60 >= 50): 12 x 30. Across nodes (one 50 GB/s NIC per GPU) the inter
ladder gives 48 x 7 = 336, then 45 x 8 = 360 (8 NICs), not duplicated (Hopper, < 50, > 4 channels): 8 x 45. The NVLS
graph on one node: 8 channels (one per GPU) at the first speed with 8 s <= 370.8 x 8/7 = 423.8: 50; across nodes 48
(the NIC's). 8 A100: 12 x 20 = 240 GB/s; 40 x 6 = 240 fills it; duplicated: 12 x 20.
"""
from __future__ import annotations

import pytest

from simulator.collectives import nccl_tuner as nt
from simulator.collectives import run_collective
from simulator.engine.system import System


def _h100(nodes: int = 1) -> nt.Comm:
    ring = nt.graph("hopper", 90, 18 * 20.6, nodes, 8, 50.0)
    nvls = nt.graph("hopper", 90, 18 * 20.6, nodes, 8, 50.0, nvls=True)
    return nt.Comm("hopper", 90, 8 * nodes, nodes, ring, nvls)


def _choice(comm: nt.Comm, kind: str, nbytes: float) -> tuple[str, str]:
    return nt.pick(nt.table(comm, kind, nbytes)[0])


def test_graphs_reduce_the_search_as_derived_by_hand():
    assert nt.graph("hopper", 90, 370.8, 1, 8, 0.0) == nt.Graph(12, 30.0, 30.0)
    assert nt.graph("hopper", 90, 370.8, 2, 8, 50.0) == nt.Graph(8, 45.0, 45.0)
    assert nt.graph("hopper", 90, 370.8, 1, 8, 0.0, nvls=True) == nt.Graph(8, 50.0, 50.0)
    assert nt.graph("hopper", 90, 370.8, 2, 8, 50.0, nvls=True) == nt.Graph(8, 48.0, 48.0)
    assert nt.graph("ampere", 80, 240.0, 1, 8, 0.0) == nt.Graph(12, 20.0, 20.0)


def test_one_h100_node_small_arrays_take_ring_ll():
    """1 KiB on 8 H100. Ring LL: 6.6 + 14 x 0.6 = 15.0 us, min(141, 0.5 x 12 x 30) x 8/14 = 80.571 GB/s -> 15.013 us;
    Tree LL: 6.8 + 2 x 7 x 0.6 = 15.2 us, min(0.92 x 360, 12 x 38.7) / 3.8 x 0.5 = 43.58 GB/s (x 0.9 at 2^4) ->
    15.226 us; NVLS: 25 us + ... So Ring/LL."""
    comm = _h100()
    assert nt.entry(comm, "all_reduce", "Ring", "LL") == pytest.approx((15.0, 141 * 8 / 14))
    assert nt.entry(comm, "all_reduce", "Tree", "LL") == pytest.approx((15.2, 0.92 * 360 / 3.8 * 0.5))
    assert nt.entry(comm, "all_reduce", "NVLS", "Simple") == pytest.approx((25.0, 50 * 8 * 8 / 14))
    assert nt.time_us(comm, "all_reduce", "Ring", "LL", 1024) == pytest.approx(15.0 + 1024 / (1000 * 141 * 8 / 14))
    assert _choice(comm, "all_reduce", 1024) == ("Ring", "LL")


def test_one_h100_node_switches_to_nvls_where_the_two_lines_cross():
    """Ring LL 15 + n/80571 us against NVLS 25 + n/228571 us (NVLS bandwidth min(50 x .85 x 7/8 x 2, 50) x 8 channels
    x 8/14): equal at n = 10 / (1/80.571 - 1/228.571) x 1000 = 1,244,354 bytes. LL128 (40.6 us, 189.3 GB/s) and
    Simple (56.0 us, 205.7 GB/s) rings lose to NVLS on both terms."""
    comm = _h100()
    ring_ll, nvls = 141 * 8 / 14, 50 * 8 * 8 / 14
    cut = 10 / (1 / ring_ll - 1 / nvls) * 1000
    assert cut == pytest.approx(1_244_354, rel=1e-5)
    assert _choice(comm, "all_reduce", 0.98 * cut) == ("Ring", "LL")
    assert _choice(comm, "all_reduce", 1.02 * cut) == ("NVLS", "Simple")
    assert _choice(comm, "all_reduce", 2**30) == ("NVLS", "Simple")


def test_two_h100_nodes_tree_ll_then_nvls_tree():
    """16 H100 on 2 nodes. 64 KiB: Tree LL 6.8 + 2 (7 x 0.6 + 5.0) = 25.2 us at min(331.2/3.8, 39.0) x 0.5 x 0.6 =
    11.7 GB/s -> 30.80 us; Ring LL 6.6 + 28 x max(0.6, 1.0) + 2 x 2.7 = 40.0 us at 39.0 x 16/30 -> 43.15 us; Tree LL128
    14 + 2 (7 x 1.25 + 8.5) = 48.5 us; NVLSTree 25 + 2 x 20.9 = 66.8 us. 64 MiB: NVLSTree min(48 x .85 x 7/8 x 2, 96,
    57.7) x 8 x 16/30 = 246.19 GB/s -> 66.8 + 272.59 = 339.4 us; Tree Simple 8.4 + 2 (7 x 4 + 14) = 92.4 us at 165.6 x
    0.8 GB/s -> 598.9 us; Ring Simple (8.4 + 28 x 3.4 + 2 x 14) x 1.4 = 184.24 us at 192 GB/s -> 533.8 us."""
    comm = _h100(2)
    assert nt.time_us(comm, "all_reduce", "Tree", "LL", 65536) == pytest.approx(25.2 + 65536 / 11700)
    assert nt.time_us(comm, "all_reduce", "Ring", "LL", 65536) == pytest.approx(40.0 + 65536 / (1000 * 39 * 16 / 30))
    assert _choice(comm, "all_reduce", 65536) == ("Tree", "LL")
    nvls_tree = 57.7 * 8 * 16 / 30
    expected = 66.8 + 2**26 / (1000 * nvls_tree)
    assert nt.time_us(comm, "all_reduce", "NVLSTree", "Simple", 2**26) == pytest.approx(expected)
    assert nt.time_us(comm, "all_reduce", "Ring", "Simple", 2**26) == pytest.approx(184.24 + 2**26 / 192000)
    assert _choice(comm, "all_reduce", 2**26) == ("NVLSTree", "Simple")


def test_a100_rings_ll128_then_simple_and_no_nvls():
    """8 A100 (no NVLS): Ring LL128 14 + 14 x 1.9 = 40.6 us at min(0.92 x 240, 12 x 20) x 8/14 = 126.17 GB/s; Ring
    Simple 8.4 + 14 x 3.4 = 56.0 us at 240 x 8/14 = 137.14 GB/s: equal at 15.4 / (1/126.17 - 1/137.14) x 1000 = 24.3
    MB. Ring LL: 15.0 us at min(87.7, 120) x 8/14 = 50.11 GB/s, LL128 from 25.6 / (1/50.11 - 1/126.17) x 1000 = 2.12 MB.
    """
    comm = nt.Comm("ampere", 80, 8, 1, nt.graph("ampere", 80, 240.0, 1, 8, 0.0), None)
    ll, ll128, simple = 87.7 * 8 / 14, 0.92 * 240 * 8 / 14, 240 * 8 / 14
    to_ll128, to_simple = 25.6 / (1 / ll - 1 / ll128) * 1000, 15.4 / (1 / ll128 - 1 / simple) * 1000
    assert (to_ll128, to_simple) == pytest.approx((2.12e6, 24.3e6), rel=0.01)
    assert _choice(comm, "all_reduce", 0.95 * to_ll128) == ("Ring", "LL")
    assert _choice(comm, "all_reduce", 1.05 * to_ll128) == ("Ring", "LL128")
    assert _choice(comm, "all_reduce", 1.05 * to_simple) == ("Ring", "Simple")
    assert "NVLS" in nt.table(comm, "all_reduce", 1e6)[1]


def test_enable_rules_collnet_nvls_and_kinds():
    times, off = nt.table(_h100(2), "all_gather", 2**20)
    assert {a for a, _ in times} == {"Ring"} and "SHARP" in off["CollNetDirect"] and "CollNet" in off["NVLS"]
    assert {a for a, _ in nt.table(_h100(), "all_gather", 2**20)[0]} == {"Ring", "NVLS"}
    assert {a for a, _ in nt.table(_h100(), "broadcast", 2**20)[0]} == {"Ring"}
    assert "one node" in nt.table(_h100(), "all_reduce", 2**20)[1]["NVLSTree"]
    assert set(nt.table(_h100(), "all_reduce", 2**20, "LL")[0]) == {("Tree", "LL"), ("Ring", "LL")}


def _run(topology: str, nbytes: float, chip: str = "h100", **kw):
    return run_collective("all_reduce", System(chip, topology=topology, calibrated=True, trace=False), nbytes, **kw)


@pytest.mark.parametrize(("topology", "nbytes", "algorithm", "protocol"), [
    ("switch:8", 1024, "unidirectional", "LL"), ("switch:8", 4 * 2**20, "nvls", "Simple"),
    ("nodes:2:8", 65536, "double_binary_tree", "LL"), ("nodes:2:8", 2**26, "nvls_tree", "Simple")])
def test_calibrated_auto_runs_nccls_choice_and_says_why(topology, nbytes, algorithm, protocol):
    r = _run(topology, nbytes)
    assert (r.algorithm, r.protocol) == (algorithm, protocol)
    assert r.nccl["reason"].startswith("NCCL's tuner picks") and r.nccl["table"][0]["model_time_s"] > 0
    assert r.analytic_s == pytest.approx(r.time_s, rel=0.2)  # the calibrated closed form of that protocol
    labels = {a["algorithm"]: a for a in r.alternatives}
    assert labels[algorithm]["nccl"] and labels[algorithm]["source"].startswith("NCCL")
    custom = [a for a in r.alternatives if not a["nccl"]]
    assert custom and all(a["source"] == "custom kernel" for a in custom)


def test_custom_kernels_run_by_name_and_ideal_runs_keep_the_fastest_closed_form():
    forced = _run("switch:8", 1024, algorithm="one_shot")
    assert forced.algorithm == "one_shot" and "custom kernel" in forced.nccl["reason"]
    ring = _run("switch:8", 1024, algorithm="unidirectional")
    assert ring.protocol == "LL" and ring.nccl["algorithm"] == "Ring"
    ideal = run_collective("all_reduce", System("h100", topology="switch:8", trace=False), 1024)
    assert ideal.nccl is None and ideal.algorithm == ideal.alternatives[0]["algorithm"]
    assert all("nccl" not in a for a in ideal.alternatives)
