"""Three-level hierarchical collectives (fat-tree units, TPU pods), the multipod topology and --protocol.

Oracles: numpy for numeric mode; phase times written here from first principles (one ring step is the
route's latencies plus the bytes over the slowest link's share), and the hierarchical optimum as the sum
(or, pipelined, the max) of each level's bytes per chip over that level's bandwidth per chip.
"""
import json

import numpy as np
import pytest

from simulator.collectives import applicable, collective_groups, run_collective
from simulator.engine.system import System
from simulator.errors import PodsimError
from simulator.frontend.cli import main
from topologies import parse_spec
from topologies.errors import TopologyError
from topologies.fattree import fattree

NV_B, NV_A = 4.5e11, 1e-6  # h100: NVLink egress per GPU each way, GPU-to-switch latency
IB_B, IB_A = 5e10, 2.5e-6  # one InfiniBand NIC per GPU each way, one GPU-fabric or switch-switch hop
ICI_B, ICI_A, DCN_B, DCN_A = 4.5e10, 1e-6, 3.125e9, 1e-5  # tpu-v5e: one ICI link, one DCN port, hop latencies
THREE = ["hierarchical3", "hierarchical3_pipelined"]


def _small_fattree():
    """4 nodes of 2 H100s, 2 nodes per unit (one leaf per rail), 2 units under the spine."""
    return fattree(4, 2, nodes_per_unit=2, spines=2)


def _reference(kind, data, n):
    if kind == "all_reduce":
        return {d: data.sum(0) for d in range(n)}
    if kind == "all_gather":
        return {d: data.reshape(-1) for d in range(n)}
    return {d: np.split(data.sum(0), n)[d] for d in range(n)}


@pytest.mark.parametrize("chip,topology", [("h100", None), ("h100", "3 per unit"), ("tpu-v5e", "multipod:2:2:2x2"),
                                           ("tpu-v5e", "multipod:3:2:1x2")])
@pytest.mark.parametrize("kind", ["all_reduce", "all_gather", "reduce_scatter"])
@pytest.mark.parametrize("name", THREE)
def test_numeric_mode_equals_numpy(chip, topology, kind, name):
    if topology == "3 per unit":  # a tier ring of 3, both ways round
        topology = fattree(6, 2, nodes_per_unit=3, spines=2)
    system = System(chip, topology=topology or _small_fattree())
    n = len(system.network.chips)
    rng = np.random.default_rng(n + len(kind))
    # rows in 12 parts a chunk, 8 chunks (hierarchical3_pipelined): 96 pieces
    data = rng.standard_normal((n, 96 if kind == "all_gather" else 96 * n))
    r = run_collective(kind, system, data=data, algorithm=name)
    for dev, want in _reference(kind, data, n).items():
        np.testing.assert_allclose(r.outputs[dev], want, rtol=1e-12, atol=1e-12)


def test_three_level_allreduce_on_a_fat_tree_by_hand():
    """Node (ring of 2 through its NVLink switch), unit (ring of 2 through one leaf), spine (ring of 2 through
    leaf, spine, leaf: four hops, each GPU on its own NIC): each a one-step reduce-scatter, then the gathers."""
    v = 3.84e7
    r = run_collective("all_reduce", System("h100", topology=_small_fattree(), trace=False), v,
                       algorithm="hierarchical3")
    node, unit, spine = 2 * NV_A + v / 2 / NV_B, 2 * IB_A + v / 4 / IB_B, 4 * IB_A + v / 8 / IB_B
    assert r.time_s == pytest.approx(2 * (node + unit + spine), rel=1e-9)
    assert r.analytic_s == pytest.approx(r.time_s, rel=1e-9)
    assert r.time_s >= r.topology_bound_s


def test_a_tier_of_three_runs_both_ways_round_in_one_step_by_hand():
    """6 nodes of 2 H100s, 3 per unit: the unit's tier is a ring of 3 run both ways, so each GPU sends its two
    bundles of V/6 in one step, both through its one NIC (V/3 at its rate); then 2 units over the spine (V/12)."""
    v = 7.2e7
    r = run_collective("all_reduce", System("h100", topology=fattree(6, 2, nodes_per_unit=3, spines=2), trace=False),
                       v, algorithm="hierarchical3")
    node, unit, spine = 2 * NV_A + v / 2 / NV_B, 2 * IB_A + v / 3 / IB_B, 4 * IB_A + v / 12 / IB_B
    assert r.time_s == pytest.approx(2 * (node + unit + spine), rel=1e-9)
    assert r.analytic_s == pytest.approx(r.time_s, rel=1e-9)


def test_three_level_allreduce_across_pods_by_hand():
    """multipod:2:2:1x2 of v5e: a line of 2 chips per slice over ICI, a ring of 2 slices through the pod's DCN
    switch, a ring of 2 pods through the core, whose link carries a quarter of the pod's DCN egress (4 flows
    share 4 chips' worth of a quarter of a port each)."""
    v = 3.84e7
    r = run_collective("all_reduce", System("tpu-v5e", topology="multipod:2:2:1x2", trace=False), v,
                       algorithm="hierarchical3")
    inner, pod, core = ICI_A + v / 2 / ICI_B, 2 * DCN_A + v / 4 / DCN_B, 4 * DCN_A + v / 8 / (DCN_B / 4)
    assert r.time_s == pytest.approx(2 * (inner + pod + core), rel=1e-9)
    assert r.analytic_s == pytest.approx(r.time_s, rel=1e-9)


@pytest.mark.parametrize("chip,topology", [("h100", None), ("tpu-v5e", "multipod:2:2:2x2"),
                                           ("tpu-v5e", "multipod:3:2:1x2")])
@pytest.mark.parametrize("kind", ["all_reduce", "all_gather", "reduce_scatter"])
def test_closed_forms_beside_the_simulation(chip, topology, kind):
    for nbytes in (1e3, 1e8):
        for name, (lo, hi) in (("hierarchical3", (1 - 1e-9, 1 + 1e-9)), ("hierarchical3_pipelined", (0.93, 1.08))):
            r = run_collective(kind, System(chip, topology=topology or _small_fattree(), trace=False), nbytes,
                               algorithm=name)
            assert lo <= r.time_s / r.analytic_s <= hi, (name, nbytes, r.time_s / r.analytic_s)
            assert r.time_s >= r.topology_bound_s * (1 - 1e-12)


def test_one_gigabyte_within_1_2x_of_the_hierarchical_optimum_on_a_fat_tree():
    """4 nodes x 8 H100s, 2 nodes per unit. Levels: NVLink 2 (m-1)/m V, the unit's rail 2 (Q-1)/Q V/m and the
    spine's 2 (P-1)/P V/(mQ), both on the GPU's NIC. Sequential: their SUM; pipelined: the MAX of the NVLink
    term and the NIC's two terms together."""
    v, m, q, p = 1e9, 8, 2, 2
    inner = 2 * (m - 1) / m * v / NV_B
    nic = 2 * (q - 1) / q * v / m / IB_B + 2 * (p - 1) / p * v / (m * q) / IB_B
    system = lambda: System("h100", topology=fattree(4, 8, nodes_per_unit=2), trace=False)  # noqa: E731
    seq = run_collective("all_reduce", system(), v, algorithm="hierarchical3")
    assert 1.0 <= seq.time_s / (inner + nic) <= 1.2
    pipe = run_collective("all_reduce", system(), v, algorithm="hierarchical3_pipelined")
    assert 1.0 <= pipe.time_s / max(inner, nic) <= 1.2
    best = run_collective("all_reduce", system(), v)
    assert best.time_s <= 1.2 * max(inner, nic) and best.time_s >= best.topology_bound_s
    assert {a["algorithm"] for a in best.alternatives} >= {"hierarchical3", "hierarchical3_pipelined"}


def test_one_gigabyte_within_1_2x_of_the_hierarchical_optimum_across_pods():
    """multipod:2:2:16x1 of v5e: a bidirectional ICI ring of 16 (two links a chip), DCN inside a pod, the core
    between pods at a quarter of a DCN port per chip. XLA runs the levels in turn: the SUM of the terms."""
    v, m = 1e9, 16
    optimum = 2 * (m - 1) / m * v / (2 * ICI_B) + v / m / DCN_B + v / (2 * m) / (DCN_B / 4)
    seq = run_collective("all_reduce", System("tpu-v5e", topology="multipod:2:2:16x1", trace=False), v,
                         algorithm="hierarchical3")
    assert 1.0 <= seq.time_s / optimum <= 1.2


@pytest.mark.parametrize("kind,crossing", [("all_gather", 0.5), ("reduce_scatter", 0.5), ("all_reduce", 1.0)])
def test_the_bound_counts_the_core_between_pods_and_the_pipeline_is_within_1_2x_of_it(kind, crossing):
    """Issue 31: multipod:2:2:4x4 of v5e, 2 pods of 32 chips, each pod's one link to the core at a quarter of a DCN
    port per chip (32 x 3.125 / 4 = 25 GB/s each way). The core forwards, never adds, so a pod must take in what its
    chips lack from the other pod: AllGather the other pod's 32 shards (V/2), ReduceScatter the other pod's partial
    sums of its own 32 shards (V/2), AllReduce the other pod's partial sum of every element (V) -- 20, 20 and 40 ms
    through that one link. The bound used to stop at the slices' DCN ports (15 ms: hierarchical3_pipelined read
    1.46x); it now counts the pod cut, and the pipelined levels run within 1.2x of it."""
    v, core = 1e9, 32 * DCN_B / 4
    cut = crossing * v / core
    r = run_collective(kind, System("tpu-v5e", topology="multipod:2:2:4x4", trace=False), v,
                       algorithm="hierarchical3_pipelined")
    assert cut <= r.topology_bound_s <= cut + 1e-4  # the cut, plus at most the routes' latencies
    assert r.topology_bound_s <= r.time_s <= 1.2 * cut


@pytest.mark.parametrize("chip,topology,match", [
    ("h100", "nodes:4:8", "needs a third level"),
    ("h100", "fattree:4:8", "inside one scalable unit"),
    ("tpu-v5e", "multislice:4:2x2", "needs a third level"),
    ("tpu-v5e", "torus:4x4", "serves nodes, multislice topologies, not torus"),
])
def test_no_third_level_is_a_one_line_error_listing_what_applies(capsys, chip, topology, match):
    code = main(["collective", "all_reduce", "--chip", chip, "--topology", topology, "--bytes", "1MB",
                 "--algorithm", "hierarchical3"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "algorithms that apply:" in err
    with pytest.raises(PodsimError, match=match):
        run_collective("all_reduce", System(chip, topology=topology, trace=False), 1e6, algorithm="hierarchical3")


def test_the_multipod_topology():
    g = parse_spec("multipod:2:3:2x2", chip="length16")
    assert g.graph["kind"] == "multislice" and g.graph["shape"] == (6, 2, 2) and g.graph["pods"] == 2
    chips = [v for v, r in g.nodes(data="role") if r == "chip"]
    assert len(chips) == 24 and {g.nodes[v]["pod"] for v in chips[:12]} == {0}
    assert g.edges[0, "dcn0"]["bandwidth_bytes_per_s"] == 6.25e9  # v5p figure, a rule string has none
    assert g.edges["dcn1", "core"]["bandwidth_bytes_per_s"] == pytest.approx(12 * 6.25e9 / 4)
    with pytest.raises(TopologyError, match="multipod takes 3 field.*multipod:P:K:AxB"):
        parse_spec("multipod:2:2", "length16")
    system = System("tpu-v5e", topology="multipod:2:2:2x2", trace=False)
    fits = applicable("all_reduce", system.network, collective_groups(system.network, None))
    assert {"hierarchical", "hierarchical3"} <= set(fits)


# -- podsim collective --protocol -------------------------------------------------------------------------------
NCCL = {"LL": (0.6, 6.6, 4 / 8), "LL128": (1.9, 14.0, 120 / 128), "Simple": (3.4, 8.4, 1.0)}  # tuning.cc, ring


@pytest.mark.parametrize("protocol", ["LL", "LL128", "Simple"])
def test_cli_protocol_forces_the_calibrated_runs_protocol(capsys, protocol):
    """The ring on 8 A100s at 1 KiB: NCCL's base latency, then 14 steps of the step latency plus a shard at the
    protocol's share of the calibrated rate (a 1 KiB shard's bytes are a rounding error beside 0.6 us)."""
    assert main(["collective", "all_reduce", "--chip", "a100", "--topology", "switch:8", "--bytes", "1KiB",
                 "--algorithm", "unidirectional", "--calibrated", "--protocol", protocol, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["calibrated_protocol"] == protocol and data["params"]["protocol"] == protocol
    step, base, _ = NCCL[protocol]
    latency = (base + 14 * step) * 1e-6
    assert latency <= data["calibrated_time_s"] <= latency * 1.1


@pytest.mark.parametrize("args,match", [
    (["--protocol", "ll", "--calibrated"], "protocol='ll'; valid: auto, LL, LL128, Simple"),
    (["--protocol", "LL"], "add --calibrated"),
    (["--protocol", "LL", "--calibrated", "--chip", "tpu-v5e", "--topology", "torus:4x4"], "calibrated GPU system"),
])
def test_cli_bad_protocols_are_one_line_errors(capsys, args, match):
    base = ["collective", "all_reduce", "--bytes", "1MB"]
    if "--chip" not in args:
        base += ["--chip", "h100", "--topology", "nodes:2:8"]
    assert main(base + args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and match in err


def test_chunks_set_the_pipelines_chunks(capsys):
    """--chunks was ignored by the pipelined levels; now it is the chunks flowing through them (12 parts each)."""
    from simulator.collectives import plan_collective
    from simulator.collectives.hierarchical import HIERARCHICAL3_PIPELINED
    system = System("h100", topology=_small_fattree(), trace=False)
    jobs = {c: plan_collective("all_reduce", system, 1e8, algorithm="hierarchical3_pipelined", chunks=c).job
            for c in (2, 16)}
    assert [HIERARCHICAL3_PIPELINED.chunks_of(jobs[c]) for c in (2, 16)] == [2, 16]
    assert [jobs[c].parts for c in (2, 16)] == [24, 192]
    times = []
    for c in ("2", "16"):
        main(["collective", "all_reduce", "--chip", "tpu-v5e", "--topology", "multipod:2:2:2x2", "--bytes", "1e8",
              "--algorithm", "hierarchical3_pipelined", "--chunks", c, "--json"])
        times.append(json.loads(capsys.readouterr().out)["time_s"])
    assert times[0] != pytest.approx(times[1], rel=1e-3)
