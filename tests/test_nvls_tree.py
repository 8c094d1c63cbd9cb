"""nvls_tree: NVLS inside each H100/H200 node, a double binary tree of each rail across nodes (NCCL's NVLSTree).

Oracles: numpy for numeric mode; latencies and per-port bytes written here from the algorithm's definition
(hops times their latency; V + V/m up each NVLink port, V/m each way on each NIC for two nodes); the one
published two-node figure (NVIDIA/nccl#1221) for the calibrated mode.
"""
import csv

import numpy as np
import pytest

from simulator.collectives import run_collective
from simulator.engine.system import System
from simulator.errors import PodsimError
from simulator.frontend.cli import main
from simulator.hardware.calibration import DATA
from topologies.fattree import fattree

NV_B, NV_A = 4.5e11, 1e-6  # h100: NVLink egress per GPU each way, GPU-to-switch latency
IB_B, IB_A = 5e10, 2.5e-6  # one InfiniBand NIC per GPU each way, GPU-to-fabric latency


@pytest.mark.parametrize("topology", ["nodes:2:4", "nodes:3:2", "nodes:4:2", "nodes:5:3", None])
def test_numeric_mode_equals_numpy(topology):
    system = System("h200", topology=topology or fattree(4, 2, nodes_per_unit=2, spines=2))
    n = len(system.network.chips)
    data = np.random.default_rng(n).standard_normal((n, 32 * n))
    r = run_collective("all_reduce", system, data=data, algorithm="nvls_tree")
    for dev in range(n):
        np.testing.assert_allclose(r.outputs[dev], data.sum(0), rtol=1e-12, atol=1e-12)


def test_small_arrays_pay_the_hops_by_hand():
    """1 KB on two nodes: the first chunk crosses 4 NVLink hops (contribute, fetch, store, multicast) and the
    network up and down (two link latencies each way); each further chunk follows one network crossing later
    (a tree edge takes chunks in order). Bytes are negligible at this size."""
    r = run_collective("all_reduce", System("h100", topology="nodes:2:8", trace=False), 1e3, algorithm="nvls_tree")
    assert r.time_s == pytest.approx(4 * NV_A + 4 * IB_A + 7 * 2 * IB_A, rel=0.02)
    assert r.analytic_s == pytest.approx(r.time_s, rel=0.02)


def test_large_arrays_sit_near_the_busier_port():
    """1 GB on two nodes of 8: each NVLink port carries V + V/8 up; each NIC V/8 each way (one tree's half up,
    the other's down). The run is bounded below by the busier and pays a pipeline fill on top."""
    v = 1e9
    floor = max((v + v / 8) / NV_B, (v / 8) / IB_B)
    r = run_collective("all_reduce", System("h100", topology="nodes:2:8", trace=False), v, algorithm="nvls_tree")
    assert floor <= r.time_s <= 1.4 * floor
    assert r.time_s >= r.topology_bound_s
    ring = run_collective("all_reduce", System("h100", topology="nodes:2:8", trace=False), v,
                          algorithm="hierarchical_pipelined")
    assert r.time_s < ring.time_s  # the switch's reduction halves what the NVLink ports carry


@pytest.mark.parametrize("topology", ["nodes:2:8", "nodes:4:8", "nodes:3:4", "nodes:8:2"])
@pytest.mark.parametrize("nbytes", [1e6, 1e8, 1e9])
def test_closed_form_beside_the_simulation(topology, nbytes):
    """The closed form runs the ports as the simulation shares them (`simulator.collectives.port_fluid`; it was
    the pipeline's sum, within 10%): equal up to the simulation's own rounding, which staggers flows that start
    together by nanoseconds (0.8% on nodes:8:2 at 300 MB, 64 chunks)."""
    r = run_collective("all_reduce", System("h100", topology=topology, trace=False), nbytes, algorithm="nvls_tree")
    assert 0.99 <= r.time_s / r.analytic_s <= 1.01, r.time_s / r.analytic_s
    assert r.time_s >= r.topology_bound_s


def test_calibrated_two_nodes_against_the_published_figure():
    """NVIDIA/nccl#1221: 2 nodes of 8 H100s with NVLS on reach about 430 GB/s of bus bandwidth at 4-8 GiB (held
    out: never fitted). The calibrated run uses NVLS's NVLink fit and NCCL's Simple protocol only."""
    rows = list(csv.DictReader((DATA / "calibration" / "h100x16_nvlstree_allreduce_busbw.csv").open()))
    for row in rows:
        topology = f"nodes:{row['nodes']}:{row['gpus_per_node']}"
        r = run_collective("all_reduce", System("h100", topology=topology, calibrated=True, trace=False),
                           float(row["size_bytes"]), algorithm="nvls_tree")
        assert r.protocol == "Simple"
        assert r.busbw_bytes_per_s / (float(row["busbw_gb_per_s"]) * 1e9) == pytest.approx(1.0, abs=0.1)


@pytest.mark.parametrize("chip,topology,match", [
    ("a100", "nodes:2:8", "chip 'a100' has no NVLink SHARP switch"),
    ("h100", "switch:8", "serves nodes topologies, not switch"),
    ("h100", "nodes:1:8", "inside one node"),
])
def test_where_it_cannot_run_is_a_one_line_error(capsys, chip, topology, match):
    code = main(["collective", "all_reduce", "--chip", chip, "--topology", topology, "--bytes", "1MB",
                 "--algorithm", "nvls_tree"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "algorithms that apply:" in err
    with pytest.raises(PodsimError, match=match):
        run_collective("all_reduce", System(chip, topology=topology, trace=False), 1e6, algorithm="nvls_tree")


@pytest.mark.parametrize("topology", ["nodes:2:8", "nodes:4:8"])
@pytest.mark.parametrize("nbytes", [1e8, 3e8, 1e9, 4e9])
def test_closed_form_equals_the_simulation(topology, nbytes):
    """`auto` ranks nvls_tree by its closed form (issue 31: 3.14 against 3.36 ms simulated on nodes:2:8 at 1 GB, then
    within 4% with deeper pipelines; now its ports' fluid run, equal to rounding)."""
    r = run_collective("all_reduce", System("h100", topology=topology, trace=False), nbytes, algorithm="nvls_tree")
    assert r.analytic_s == pytest.approx(r.time_s, rel=0.01)


def test_two_nodes_one_gigabyte_within_1_2x_of_the_bound_by_hand():
    """Two nodes of 8, 1 GB: every NVLink port carries V + V/8 up (its contributions, then its shard's store) and
    every NIC V/8 each way (one tree's half up, the other's down): both 2.5 ms. The pipeline fills in a few
    chunks' time, so the run is within the issue's 1.2x of that floor (it was 1.34x: 8 chunks, whose fill is
    an eighth of the array and whose bursts of multicasts slow the next chunk's fetch, which the network waits for)."""
    v = 1e9
    floor = max((v + v / 8) / NV_B, (v / 8) / IB_B)
    r = run_collective("all_reduce", System("h100", topology="nodes:2:8", trace=False), v, algorithm="nvls_tree")
    assert floor <= r.time_s <= 1.2 * floor
    assert r.topology_bound_s <= r.time_s <= 1.2 * r.topology_bound_s


def test_four_nodes_sit_on_the_trees_own_floor():
    """Four nodes: in each of the two trees of 4 one node of each rail is interior (two children and a parent), a
    leaf in the other, so its NIC carries 3 + 1 halves of V/8 each way: 2 V/8, 5 ms at 1 GB -- 4/3 of the
    2 (K - 1)/K V/8 = 3.75 ms a ring over the nodes needs, so the issue's 1.2x of the joint bound is out of a tree's
    reach here; the run is held to 1.1x the trees' own floor (it was 1.16x)."""
    v = 1e9
    floor, ring = 2 * (v / 8) / IB_B, 2 * 3 / 4 * (v / 8) / IB_B
    r = run_collective("all_reduce", System("h100", topology="nodes:4:8", trace=False), v, algorithm="nvls_tree")
    assert r.topology_bound_s >= ring * (1 - 1e-9)
    assert floor <= r.time_s <= 1.1 * floor


def test_calibrated_runs_keep_the_fitted_depth():
    """A calibrated run pipelines `CHUNKS` chunks, the depth NVLS's NVLink rate was fitted at (its fill is in the
    fitted rate); an ideal one picks its depth by closed form (more chunks on large arrays)."""
    from simulator.collectives.nvls_tree import CHUNKS

    def run(calibrated, **kw):
        return run_collective("all_reduce", System("h100", topology="nodes:2:8", calibrated=calibrated, trace=False),
                              1e9, algorithm="nvls_tree", **kw)
    assert run(True).time_s == pytest.approx(run(True, chunks=CHUNKS).time_s, rel=1e-12)
    assert run(False).time_s < run(False, chunks=CHUNKS).time_s
