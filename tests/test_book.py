"""The book, chapter by chapter: one test per kind of question podsim answers with one command.

Each test computes the book's closed form here, from the hardware numbers of REFERENCE.md typed in
below (not read from podsim's presets), and holds the command's answer against it. Chapters: roofline,
TPUs (communication roofs), sharding (sharded arrays, collectives), transformers, inference, training
(critical batches), GPUs (NVLink, InfiniBand, SuperPOD fat trees).
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from simulator.frontend.cli import main

# REFERENCE.md, per chip (dense): bf16 FLOP/s, HBM B/s, ICI one way per link, DCN per chip, PCIe one way
V5E = {"C": 1.97e14, "int8": 3.94e14, "hbm": 8.2e11, "ici": 4.5e10, "dcn": 3.125e9, "pcie": 1.6e10}
V5P = {"C": 4.59e14, "hbm": 2.8e12, "ici": 9.0e10, "dcn": 6.25e9, "pcie": 1.6e10}
H100 = {"C": 9.9e14, "hbm": 3.35e12, "nvlink": 18 * 25e9, "ib": 50e9, "fp32": 6.7e13}  # fp32: datasheet CUDA cores
GPUS_PER_NODE = 8


def podsim_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    code = main([*argv, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def podsim_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


# --- roofline -------------------------------------------------------------------------------------------

def test_roofline_matmul_intensity_and_ridge(capsys):
    m, k, n = 4096, 8192, 128  # I ~ n when n << m, k
    out = podsim_json(capsys, "roofline", "--chip", "tpu-v5e", "--matmul", f"{m},{k},{n}")
    flops, nbytes = 2 * m * k * n, 2 * (m * k + k * n + m * n)
    assert out["intensity_flops_per_byte"] == pytest.approx(flops / nbytes, rel=1e-12)
    assert out["peak_intensity_flops_per_byte"] == pytest.approx(V5E["C"] / V5E["hbm"], rel=1e-12)  # about 240
    assert out["lower_bound_s"] == pytest.approx(max(flops / V5E["C"], nbytes / V5E["hbm"]), rel=1e-12)
    assert out["bound"] == ("compute" if flops / nbytes > V5E["C"] / V5E["hbm"] else "memory")


def test_roofline_pure_compute_takes_no_bytes(capsys):
    out = podsim_json(capsys, "roofline", "--chip", "tpu-v5e", "--flops", "1e12", "--bytes", "0")
    assert out["t_memory_s"] == 0 and out["intensity_flops_per_byte"] is None
    assert out["lower_bound_s"] == out["upper_bound_s"] == pytest.approx(1e12 / V5E["C"], rel=1e-12)
    assert out["bound"] == "compute"


def test_roofline_dtype_peaks(capsys):
    int8 = podsim_json(capsys, "roofline", "--chip", "tpu-v5e", "--flops", "1e12", "--bytes", "1", "--dtype", "int8")
    assert int8["t_compute_s"] == pytest.approx(1e12 / V5E["int8"], rel=1e-12)
    fp32 = podsim_json(capsys, "roofline", "--chip", "h100", "--flops", "1e12", "--bytes", "1", "--dtype", "fp32")
    assert fp32["t_compute_s"] == pytest.approx(1e12 / H100["fp32"], rel=1e-12)
    err = podsim_error(capsys, "roofline", "--chip", "tpu-v5e", "--flops", "1e12", "--bytes", "1", "--dtype", "fp32")
    assert "tpu-v5e has no fp32" in err and "bf16" in err


def test_double_buffering_overlaps_load_and_compute(capsys):
    """0.4 ms of loading and 0.2 ms of compute in q = 2 blocks: max(q a, q c) + min(a, c) with two buffers,
    q (a + c) with one."""
    q, a, c = 2, 0.4e-3 / 2, 0.2e-3 / 2
    two = podsim_json(capsys, "run", "double_buffer")
    one = podsim_json(capsys, "run", "double_buffer", "--set", "buffers=1")
    assert two["end_to_end_s"] == pytest.approx(max(q * a, q * c) + min(a, c), rel=1e-9)
    assert one["end_to_end_s"] == pytest.approx(q * (a + c), rel=1e-9)


# --- communication critical batches (tpus, training, gpus) ---------------------------------------------

@pytest.mark.parametrize(("chip", "memory", "axes", "bandwidth", "per"), [
    ("tpu-v5p", "ici", 1, 2 * V5P["ici"], "chip"),  # W_ici = 2 x one way: C/W = 2550
    ("tpu-v5p", "ici", 3, 3 * 2 * V5P["ici"], "chip"),  # all three axes at once: 850
    ("tpu-v5e", "ici", 2, 2 * 2 * V5E["ici"], "chip"),
    ("tpu-v5p", "dcn", 1, V5P["dcn"], "slice"),  # B/slice > C/W_dcn = 73,440
    ("tpu-v5e", "pcie", 1, V5E["pcie"], None),
    ("h100", "nvlink", 1, H100["nvlink"], "chip"),  # within a node: 2200 per GPU
    ("h100", "ib", 1, H100["ib"], "node"),  # across nodes: C/W_node = 2475 per GPU, 19,800 per node
])
def test_communication_critical_batch(capsys, chip, memory, axes, bandwidth, per):
    c = {"tpu-v5p": V5P, "tpu-v5e": V5E, "h100": H100}[chip]["C"]
    args = ["roofline", "--chip", chip, "--flops", "1e12", "--bytes", "1GB", "--memory", memory]
    out = podsim_json(capsys, *args, *(["--axes", str(axes)] if axes > 1 else []))
    assert out["bandwidth_bytes_per_s"] == pytest.approx(bandwidth, rel=1e-12)
    assert out["peak_intensity_flops_per_byte"] == pytest.approx(c / bandwidth, rel=1e-12)
    assert out["t_memory_s"] == pytest.approx(1e9 / bandwidth, rel=1e-12)
    if per is None:
        assert not any(key.startswith("critical_batch") for key in out)
        return
    assert out[f"critical_batch_per_{per}"]["data_parallel"] == pytest.approx(c / bandwidth, rel=1e-12)
    if per == "node":  # the book's per-GPU figure across nodes: C over a node's 8 NICs
        assert out["critical_batch_per_node"]["fsdp"] / GPUS_PER_NODE == pytest.approx(2475, rel=1e-12)


def test_book_headline_critical_batches(capsys):
    """The numbers the book prints: v5p 2550 per axis and 850 over three, H100 2200 in a node."""
    ridge = [podsim_json(capsys, "roofline", "--chip", chip, "--flops", "1", "--bytes", "1", "--memory", mem,
                         *extra)["peak_intensity_flops_per_byte"]
             for chip, mem, extra in (("tpu-v5p", "ici", []), ("tpu-v5p", "ici", ["--axes", "3"]),
                                      ("h100", "nvlink", []), ("tpu-v5p", "dcn", []))]
    assert ridge == pytest.approx([2550, 850, 2200, 73440], rel=1e-12)


@pytest.mark.parametrize(("args", "words"), [
    (["--chip", "tpu-v5e", "--memory", "ici", "--axes", "3"], "torus has 2 axes"),
    (["--chip", "tpu-v5p", "--memory", "nvlink"], "GPU network"),
    (["--chip", "h100", "--memory", "ici"], "--memory nvlink"),
    (["--chip", "tpu-v5p", "--memory", "dcn", "--axes", "2"], "--memory ici only"),
])
def test_communication_roofs_refuse_what_the_chip_lacks(capsys, args, words):
    assert words in podsim_error(capsys, "roofline", *args, "--flops", "1", "--bytes", "1")


# --- sharding: how big is an array on each device --------------------------------------------------------

@pytest.mark.parametrize(("array", "spec", "mesh", "local", "replication"), [
    ("fp32[1024,4096]", "A[I_XY, J]", "X=8,Y=2", [64, 4096], 1),
    ("bf16[256,1024]", "A[I_X,J]", "X=4,Y=2", [64, 1024], 2),  # replicated over Y
    ("bf16[256,1024]", "A[I_Y,J_X]", "X=4,Y=2", [128, 256], 1),
    ("int8[64,64,64]", "A[I,J,K]", "X=2,Y=2", [64, 64, 64], 4),  # fully replicated
])
def test_sharded_array_bytes(capsys, array, spec, mesh, local, replication):
    itemsize = {"fp32": 4, "bf16": 2, "int8": 1}[array.split("[")[0]]
    shape = [int(x) for x in array.split("[")[1].rstrip("]").split(",")]
    devices = int(np.prod([int(part.split("=")[1]) for part in mesh.split(",")]))
    out = podsim_json(capsys, "shard", array, spec, "--mesh", mesh)
    assert out["local_shape"] == local
    assert out["bytes_per_device"] == int(np.prod(local)) * itemsize
    assert out["total_bytes"] == int(np.prod(local)) * itemsize * devices
    assert out["replication"] == replication == devices * int(np.prod(local)) // int(np.prod(shape))
    assert out["hbm_load_s"] == pytest.approx(out["bytes_per_device"] / V5E["hbm"], rel=1e-12)  # default tpu-v5e


@pytest.mark.parametrize(("spec", "mesh", "words"), [
    ("A[I_Z, J]", "X=8,Y=2", "axis 'Z' is not in mesh"),
    ("A[I_XY, J]", "X=3,Y=2", "does not split over XY = 6 devices; give a multiple of 6 (e.g. 1020 or 1026)"),
    ("A[I_X, J_X]", "X=8,Y=2", "used twice"),
    ("A[I_X]", "X=8,Y=2", "names 1 dimension"),
])
def test_sharding_specs_that_cannot_be(capsys, spec, mesh, words):
    assert words in podsim_error(capsys, "shard", "fp32[1024,4096]", spec, "--mesh", mesh)


# --- sharding and GPUs: collectives beside the book's estimate ------------------------------------------

@pytest.mark.parametrize(("kind", "topology", "book"), [
    ("all_gather", "line:8", 7 / 8 * 1e9 / V5E["ici"]),  # a line: (N-1)/N V / b, twice a ring's (issue 31)
    ("all_reduce", "line:8", 2 * 7 / 8 * 1e9 / V5E["ici"]),
    ("all_to_all", "line:8", 1e9 / V5E["ici"] / 4),  # the middle link carries V / 4 each way
    ("broadcast", "ring:8", 1e9 / (2 * V5E["ici"])),  # the root sends both ways round
])
def test_book_estimate_on_lines_and_rooted_kinds(capsys, kind, topology, book):
    out = podsim_json(capsys, "collective", kind, "--chip", "tpu-v5e", "--topology", topology, "--bytes", "1GB")
    assert out["book_s"] == pytest.approx(book, rel=1e-12)
    assert out["time_s"] >= out["topology_bound_s"] * (1 - 1e-9)


@pytest.mark.parametrize(("kind", "factor"), [("all_gather", 1), ("reduce_scatter", 1), ("all_reduce", 2)])
def test_book_estimate_through_an_nvlink_switch(capsys, kind, factor):
    n, v = 8, 1e9
    out = podsim_json(capsys, "collective", kind, "--chip", "h100", "--topology", f"switch:{n}", "--bytes", "1GB")
    assert out["book_s"] == pytest.approx(factor * (n - 1) / n * v / H100["nvlink"], rel=1e-12)


@pytest.mark.parametrize("topology", ["nodes:2:8", "fattree:2:8"])
def test_two_node_all_gather_is_bound_by_the_node_level(capsys, topology):
    """Book, gpus, quiz 5: over 2 nodes the NVLink level (7/8 V / 450e9) is slower than the node egress
    ((2 - 1) / 2 V / 400e9)."""
    v = 1e9
    out = podsim_json(capsys, "collective", "all_gather", "--chip", "h100", "--topology", topology, "--bytes", "1GB")
    node_level, beyond = 7 / 8 * v / H100["nvlink"], 1 / 2 * v / (GPUS_PER_NODE * H100["ib"])
    assert node_level > beyond
    assert out["book_s"] == pytest.approx(node_level, rel=1e-12)
    assert out["book_s"] * (1 - 1e-9) <= out["time_s"] <= 2 * out["book_s"]


# --- GPUs: a SuperPOD-like fat tree ------------------------------------------------------------------------

def test_superpod_is_the_reference_fabric():
    import topologies

    g = topologies.parse_spec("superpod:4")
    chips = topologies.chips(g)
    leaves = [v for v in g if str(v).startswith("leaf")]
    assert len(chips) == 1024 and len(leaves) == 4 * 8 and g.graph["spines"] == 16
    assert g.number_of_edges() == 2 * (1024 + 1024 + len(leaves))  # NVLink port, NIC, one uplink per leaf
    levels = g.graph["level_bandwidth_bytes_per_s"]
    assert levels["leaf"] == H100["ib"] and levels["spine"] == 32 * H100["ib"] / 16  # 100 GB/s per spine link
    assert levels["leaf_uplink"] == 32 * H100["ib"]  # non-blocking: a leaf's uplinks carry its 32 NICs


def test_fat_tree_routes_a_rail_through_its_leaf_and_units_through_the_spine(capsys):
    from simulator.engine.system import System
    from simulator.hardware.specs import get_chip

    net = System(get_chip("h100"), topology="fattree:33:8").network  # units of 32 nodes: node 32 is in unit 1
    assert net.routes(0, 8)[0] == [0, "leaf0.0", 8]  # GPU 0 of nodes 0 and 1: one leaf
    assert net.routes(0, 32 * 8)[0] == [0, "leaf0.0", "spine", "leaf1.0", 32 * 8]
    v = 1e8  # point to point: hops x alpha + V / b (REFERENCE), four InfiniBand hops of 2.5 us at 50 GB/s
    out = podsim_json(capsys, "send", "--chip", "h100", "--topology", "fattree:33:8", "--src", "0",
                      "--dst", str(32 * 8), "--bytes", "100MB", "--single-path")
    assert out["time_s"] == pytest.approx(4 * 2.5e-6 + v / H100["ib"], rel=1e-9)


@pytest.mark.parametrize("algorithm", ["auto", "hierarchical", "unidirectional"])
def test_collectives_on_a_fat_tree_add_up(algorithm):
    from simulator.collectives import run_collective
    from simulator.engine.system import System
    from simulator.hardware.specs import get_chip
    from topologies import fattree

    data = np.random.default_rng(7).random((8, 8 * 48))
    graph = fattree(4, 2, nodes_per_unit=2, spines=2)  # two units: rails cross the spine
    r = run_collective("all_reduce", System(get_chip("h100"), topology=graph), data=data, algorithm=algorithm)
    for row in r.outputs.values():
        np.testing.assert_allclose(row, data.sum(axis=0))


def test_a_non_blocking_fat_tree_runs_rails_like_one_switch():
    """Inside one unit every rail has its own leaf: a hierarchical AllReduce takes what it takes on GPU
    nodes under one InfiniBand switch (same NICs, same two hops)."""
    from simulator.collectives import run_collective
    from simulator.engine.system import System
    from simulator.hardware.specs import get_chip

    times = [run_collective("all_reduce", System(get_chip("h100"), topology=t), 1e8, algorithm="hierarchical").time_s
             for t in ("fattree:4:8", "nodes:4:8")]
    assert times[0] == pytest.approx(times[1], rel=1e-9)


# --- transformers and inference -------------------------------------------------------------------------

def test_transformer_parameters_and_kv_cache(capsys):
    """llama-2-7b: L 32, D 4096, F 11008, 32 heads of 128, vocab 32000, untied; KV 2 L N_KV H bytes/position."""
    out = podsim_json(capsys, "model", "llama-2-7b", "--batch", "1", "--context", "1024", "--chip", "tpu-v5e")
    L, D, F, V, H, NKV = 32, 4096, 11008, 32000, 128, 32
    per_layer = 4 * D * D + 3 * D * F + 2 * D  # Q, K, V, O; gated MLP; two RMSNorm scales
    assert out["params_total"] == L * per_layer + 2 * V * D + D
    assert out["kv_bytes_per_position"] == 2 * L * NKV * H * 2
    assert out["kv_cache_bytes"] == 1024 * 2 * L * NKV * H * 2


def test_transformer_step_reads_a_config_file(tmp_path):
    from scenarios import transformer_step

    fields = dict(name="my-gpt2", d_model=768, d_ff=3072, n_layers=12, n_heads=12, n_kv_heads=12, head_dim=64,
                  vocab_size=50257, gated_mlp="false")
    path = tmp_path / "gpt2.toml"
    path.write_text("\n".join(f"{k} = {v!r}" if isinstance(v, str) and k == "name" else f"{k} = {v}"
                              for k, v in fields.items()))
    mine = transformer_step.run(config=str(path), mesh="model=1", batch=4, context=256, trace=False)
    preset = transformer_step.run(model="gpt2", mesh="model=1", batch=4, context=256, trace=False)
    assert mine.params["model"] == "my-gpt2"
    assert mine.extra["budget"]["flops_per_step"] == preset.extra["budget"]["flops_per_step"]
