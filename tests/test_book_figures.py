"""The book's own figures beside podsim's where they differ by design (issue 32): each oracle is the book's
arithmetic typed here from its chapters (jax-ml/scaling-book, gpus.md and tpus.md), not podsim's output."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.frontend.cli import main

BOOK_MODELS = Path(__file__).resolve().parents[1] / "docs" / "book_models"


def podsim_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    """The command's JSON; a `podsim model` question prices its state whether or not it fits (the book's figures,
    not a memory verdict: `--ignore-memory`)."""
    code = main([*argv, "--json", *(["--ignore-memory"] if argv[0] == "model" else [])])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


# --- chips: pods, hosts, SMs, CUDA cores, clocks -----------------------------------------------------------

def test_tpu_pod_summaries(capsys):
    """tpus, question 2: v5e 16x16 pod of 4x2 hosts: 32 hosts, 256 TensorCores, 256 x 1.97e14 FLOP/s, 256 x 16 GiB;
    v5p 16x20x28 of 2x2x1 hosts: 2,240 hosts, 17,920 TensorCores, 8960 x 4.59e14 FLOP/s."""
    v5e = podsim_json(capsys, "chips", "tpu-v5e")["facts"]["pod"]
    assert (v5e["chips_per_pod"], v5e["hosts_per_pod"], v5e["tensor_cores_per_pod"]) == (256, 32, 256)
    assert v5e["pod_peak_bf16_flops_per_s"] == pytest.approx(256 * 1.97e14)
    assert v5e["pod_hbm_capacity_bytes"] == pytest.approx(256 * 16 * 2**30)
    assert v5e["pcie_bytes_per_s_per_host"] == pytest.approx(8 * 1.6e10)
    v5p = podsim_json(capsys, "chips", "tpu-v5p")["facts"]["pod"]
    assert (v5p["chips_per_pod"], v5p["hosts_per_pod"], v5p["tensor_cores_per_pod"]) == (8960, 2240, 17920)
    assert v5p["pod_peak_bf16_flops_per_s"] == pytest.approx(8960 * 4.59e14)


def test_gpu_cuda_cores_and_clocks(capsys):
    """gpus, quiz 1: 132 x 4 x 32 = 16,896 CUDA cores (B200 18,944); x 1.59 GHz = 26.9 TFLOP/s, 33.5 at the
    1.98 GHz boost; the datasheet's 67 counts an FMA as 2; 990e12 / (132 x 4 x 1.76e9) ~ 1024 FLOPs per TC cycle."""
    h100 = podsim_json(capsys, "chips", "h100")
    gpu = h100["facts"]["gpu"]
    assert gpu["cuda_cores"] == 16896
    assert gpu["cuda_core_flops_per_s_base"] == pytest.approx(26.9e12, rel=0.01)
    assert gpu["cuda_core_flops_per_s_boost"] == pytest.approx(33.5e12, rel=0.01)
    assert gpu["cuda_core_fma_flops_per_s_boost"] == pytest.approx(h100["vpu_flops_per_s"], rel=0.01)  # 67e12
    assert gpu["tensor_core_bf16_flops_per_cycle"] == pytest.approx(1024, rel=0.05)
    assert gpu["node_egress_bytes_per_s"] == pytest.approx(400e9)
    assert gpu["node_nvlink_bytes_per_s"] == pytest.approx(3.6e12)  # quiz 2, question 1
    assert podsim_json(capsys, "chips", "b200")["facts"]["gpu"]["cuda_cores"] == 18944


def test_chips_json_carries_facts_and_unknown_name_is_refused(capsys):
    data = podsim_json(capsys, "chips")
    assert data["tpu-v5e"]["facts"]["per_core"]["bf16_flops_per_s_per_mxu"] == pytest.approx(1.97e14 / 4)
    assert main(["chips", "tpu-v99"]) == 2
    assert "tpu-v99" in capsys.readouterr().err


# --- critical batches over InfiniBand ----------------------------------------------------------------------

def test_roofline_ib_gives_the_books_per_gpu_critical_batch(capsys):
    """gpus, data parallelism: beyond a node, per-GPU token batch > 990e12 / 400e9 = 2,475 (19,800 per node)."""
    out = podsim_json(capsys, "roofline", "--chip", "h100", "--memory", "ib", "--flops", "1e12", "--bytes", "1e9")
    assert out["critical_batch_per_node"]["data_parallel"] == pytest.approx(8 * 990e12 / 400e9)
    assert out["critical_batch_per_gpu"]["data_parallel"] == pytest.approx(990e12 / 400e9)


@pytest.mark.parametrize(("n", "book"), [(8, 990e12 / 450e9), (16, 990e12 / 400e9)])
def test_train_data_axis_gives_the_books_gpu_figure_beside_podsims(capsys, n, book):
    """Inside a node 2,200 tokens per GPU, across nodes 2,475; podsim's own figure (both levels' rings one
    after the other) is at least the book's."""
    out = podsim_json(capsys, "model", "llama-2-7b", "--mode", "train", "--chip", "h100", "--mesh", f"data={n}",
                      "--batch", "64", "--seq", "1024", "--no-simulate")
    assert out["critical_batch_per_chip_book"]["data"] == pytest.approx(book)
    assert out["critical_batch_per_chip"]["data"] >= book * (1 - 1e-9)


# --- a decode step, each op by its own roofline ------------------------------------------------------------

def test_decode_per_op_sum_beside_max_of_totals(capsys):
    """The MLP compute-bound while attention reads the KV cache: each op's max(T_math, T_mem) with v5e's 1.97e14
    FLOP/s and 8.2e11 B/s (REFERENCE.md), added, exceeds max(total compute, total memory); the two ops' FLOPs and
    bytes add up to the step's per-chip totals."""
    out = podsim_json(capsys, "model", "llama-2-7b", "--chip", "tpu-v5e", "--mesh", "model=8", "--batch", "256",
                      "--context", "4096", "--no-simulate")
    ops = out["per_op"]
    assert sum(op["flops"] for op in ops.values()) == pytest.approx(out["per_chip"]["flops_per_step"], rel=1e-9)
    assert sum(op["hbm_bytes"] for op in ops.values()) == pytest.approx(out["per_chip"]["hbm_bytes_per_step"],
                                                                         rel=1e-9)
    book = sum(max(op["flops"] / 1.97e14, op["hbm_bytes"] / 8.2e11) for op in ops.values())
    assert out["lower_bound_per_op_s"] == pytest.approx(book, rel=1e-9)
    assert (ops["weight_matmuls"]["bound"], ops["attention"]["bound"]) == ("compute", "memory")
    assert out["lower_bound_per_op_s"] > out["lower_bound_s"] == pytest.approx(
        max(out["per_chip"]["flops_per_step"] / 1.97e14, out["per_chip"]["hbm_bytes_per_step"] / 8.2e11), rel=1e-9)


# --- a three-level collective on the SuperPOD --------------------------------------------------------------

def test_superpod_allgather_gives_the_books_overlapped_levels_beside_podsims(capsys):
    """gpus, cross-node collectives: min(450e9 x 8/7, 400e9 x 32/31, 12.8e12 x 4/3) = 413 GB/s at the leaf."""
    out = podsim_json(capsys, "collective", "all_gather", "--chip", "h100", "--topology", "superpod:4", "--bytes",
                      "1GB")
    book = min(450e9 * 8 / 7, 400e9 * 32 / 31, 12.8e12 * 4 / 3)
    assert out["book_levels_bandwidth_bytes_per_s"] == pytest.approx(book, rel=1e-9)
    assert out["book_levels_s"] == pytest.approx(1e9 / book, rel=1e-9)
    assert out["book_levels_bottleneck"] == "leaf"
    assert out["algbw_bytes_per_s"] < book  # podsim's levels do not overlap perfectly (about 301 GB/s)


# --- advice ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [["llama-3-70b"], ["--params", "70e9", "--kv-bytes-per-token", "1e5"]])
def test_int8_weights_are_not_told_to_use_8_bit_weights(capsys, argv):
    base = ["model", *argv, "--chip", "tpu-v5e", "--no-simulate"]
    int8 = podsim_json(capsys, *base, "--weight-dtype", "int8")["fit_note"]
    bf16 = podsim_json(capsys, *base)["fit_note"]
    assert "or 8-bit weights" not in int8 and "already 8-bit" in int8
    assert "or 8-bit weights" in bf16


# --- the pipeline bubble -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("schedule", "chunks"), [("gpipe", 1), ("interleaved", 2)])
def test_book_equal_stage_bubble_beside_podsims(capsys, schedule, chunks):
    """p = 4, M = 16: (p - 1) / (M + p - 1) = 3/19 with equal stages; interleaved v = 2: 3 / 35."""
    out = podsim_json(capsys, "model", "llama-2-7b", "--mode", "train", "--chip", "tpu-v5p", "--mesh", "pipeline=4",
                      "--microbatches", "16", "--batch", "16", "--seq", "512", "--schedule", schedule, "--no-simulate")
    assert out["book_bubble_fraction"] == pytest.approx(3 / (chunks * 16 + 3))
    assert 0 < out["bubble_fraction"] < 1


# --- no longer refused: MFU from chip-hours, prefill at an assumed MFU, no KV cache -----------------------

def test_mfu_from_measured_chip_hours(capsys):
    """transformers, question 7: DeepSeek v3, 37B active, 14.8T tokens, 2.79M H800-hours: 6 N T / (H x 3600 x
    peak). The book divides by 1.513e15 (an H800 PCIe sheet: 21.7%); podsim's h100 fp8 peak is 2.0e15."""
    out = podsim_json(capsys, "model", "--params", "37e9", "--mode", "train", "--tokens-total", "14.8e12",
                      "--measured-chip-hours", "2.79e6", "--chip", "h100")
    flops = 6 * 37e9 * 14.8e12
    assert out["measured_mfu_8bit"] == pytest.approx(flops / (2.79e6 * 3600 * 2.0e15), rel=1e-9)
    assert out["measured_mfu"] == pytest.approx(flops / (2.79e6 * 3600 * 9.9e14), rel=1e-9)
    assert out["chip_hours"] == pytest.approx(2.79e6, rel=1e-9)  # projected back at the measured MFU
    assert main(["model", "--params", "37e9", "--mode", "train", "--tokens-total", "14.8e12",
                 "--measured-chip-hours", "1", "--chip", "h100"]) == 2  # an MFU above the peak
    assert "above the peak" in capsys.readouterr().err


def test_prefill_at_an_assumed_mfu(capsys):
    out = podsim_json(capsys, "model", "llama-2-7b", "--mode", "prefill", "--seq", "2048", "--batch", "4",
                      "--assume-mfu", "0.4", "--chip", "tpu-v5e", "--mesh", "model=8", "--no-simulate")
    assert out["assumed_mfu_step_time_s"] == pytest.approx(out["flops_per_step"] / (8 * 1.97e14 * 0.4), rel=1e-9)
    assert main(["model", "llama-2-7b", "--mode", "decode", "--assume-mfu", "0.4", "--chip", "tpu-v5e"]) == 2
    capsys.readouterr()


def test_a_model_with_no_kv_cache(capsys):
    """--kv-bytes-per-token 0: weights alone; the critical batch is the chip's ridge C / W_hbm = 240 on v5e."""
    out = podsim_json(capsys, "model", "--params", "1e9", "--kv-bytes-per-token", "0", "--chip", "tpu-v5e",
                      "--batch", "64")
    assert out["critical_batch"] == pytest.approx(1.97e14 / 8.2e11, rel=1e-9)
    assert out["max_batch"] is None and "no KV cache" in out["fit_note"]
    assert out["lower_bound_s"] == pytest.approx(2e9 / 8.2e11, rel=1e-9)


def test_collective_root_takes_a_coordinate_as_send_does(capsys):
    """--root 1,2 on torus:4x4 is chip 6 (row-major), as send --src 1,2 reads it."""
    by_coord = podsim_json(capsys, "collective", "gather", "--chip", "tpu-v5e", "--topology", "torus:4x4",
                           "--bytes", "1MB", "--root", "1,2")
    by_index = podsim_json(capsys, "collective", "gather", "--chip", "tpu-v5e", "--topology", "torus:4x4",
                           "--bytes", "1MB", "--root", "6")
    corner = podsim_json(capsys, "collective", "gather", "--chip", "tpu-v5e", "--topology", "mesh:4x4",
                         "--bytes", "1MB", "--root", "0,0")
    middle = podsim_json(capsys, "collective", "gather", "--chip", "tpu-v5e", "--topology", "mesh:4x4",
                         "--bytes", "1MB", "--root", "1,1")
    assert by_coord["time_s"] == by_index["time_s"]
    assert corner["book_s"] == pytest.approx(2 * middle["book_s"])  # 2 links out of a corner, 4 in the middle
    assert main(["collective", "gather", "--chip", "tpu-v5e", "--topology", "torus:4x4", "--bytes", "1MB",
                 "--root", "9,9"]) == 2
    assert "(9, 9)" in capsys.readouterr().err


def test_snippet_helpers_are_public_again(tmp_path):
    """load_config_file and train_budget (and decode_budget) import from the package top, as snippets used them."""
    import simulator

    path = tmp_path / "tiny.toml"
    path.write_text('name = "tiny"\nd_model = 256\nd_ff = 1024\nn_layers = 2\nn_heads = 4\nvocab_size = 1000\n')
    cfg = simulator.load_config_file(path)
    assert (cfg.d_model, cfg.n_layers) == (256, 2)
    out = simulator.train_budget(cfg, simulator.get_chip("tpu-v5e"), batch=4, seq=128)
    assert out["t_compute_s"] > 0
    assert {"load_config_file", "train_budget", "decode_budget"} <= set(simulator.__all__)


# --- roofline --find batch ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("dtype", "weight", "peak", "w_bytes", "a_bytes"), [
    ("int8", None, 3.94e14, 1, 1),  # roofline question 1: B > 486 / 2 = 243 with the book's 8.1e11
    ("bf16", "int8", 1.97e14, 1, 2),  # question 2: int8 weights under bf16 compute, B > 120
    ("bf16", None, 1.97e14, 2, 2),  # the chapter's 240
])
def test_roofline_find_batch(capsys, dtype, weight, peak, w_bytes, a_bytes):
    k, n, hbm = 4096, 16384, 8.2e11
    argv = ["roofline", "--chip", "tpu-v5e", "--matmul", f"1,{k},{n}", "--dtype", dtype, "--find", "batch"]
    out = podsim_json(capsys, *argv, *(["--weight-dtype", weight] if weight else []))
    assert out["critical_batch_book"] == pytest.approx(peak / hbm * w_bytes / 2)
    b = out["critical_batch"]  # the smallest whole B with 2BKN/C >= (a B K + w K N + a B N)/W
    t = [(2 * x * k * n / peak, (a_bytes * x * (k + n) + w_bytes * k * n) / hbm) for x in (b - 1, b)]
    assert t[0][0] < t[0][1] and t[1][0] >= t[1][1]


def test_roofline_find_needs_a_matmul(capsys):
    assert main(["roofline", "--chip", "tpu-v5e", "--flops", "1e9", "--bytes", "1e6", "--find", "batch"]) == 2
    assert "--matmul" in capsys.readouterr().err


def test_roofline_chips_shares_a_whole_models_work(capsys):
    """tpus, question 1: 200B bf16 parameters over 32 v4p: 400e9 / 32 / 1.2e12 B/s, no per-chip arithmetic."""
    out = podsim_json(capsys, "roofline", "--chip", "tpu-v4", "--flops", "0", "--bytes", "400e9", "--chips", "32")
    assert out["per_chip_bytes"] == pytest.approx(400e9 / 32)
    assert out["lower_bound_s"] == pytest.approx(400e9 / 32 / 1.2e12)
    assert main(["roofline", "--chip", "tpu-v4", "--matmul", "8,8,8", "--chips", "4"]) == 2
    assert "--chips" in capsys.readouterr().err


def test_contracting_dim_crossover_is_twice_the_ici_ridge(capsys):
    """sharding, question 4: A[B, D_X] x W[D_X, F] as local matmuls and an AllReduce of [B, F] (4BF / W_ici) beats
    AllGather(W) then the whole matmul (2BDF / C) once D > 2 C / W_ici = 2 x 4.59e14 / 1.8e11 = 5,100 on v5p."""
    out = podsim_json(capsys, "roofline", "--chip", "tpu-v5p", "--memory", "ici", "--flops", "1", "--bytes", "1")
    assert out["contracting_dim_crossover"] == pytest.approx(2 * 4.59e14 / (2 * 9e10), rel=1e-12)
    hbm = podsim_json(capsys, "roofline", "--chip", "tpu-v5p", "--flops", "1", "--bytes", "1")
    assert "contracting_dim_crossover" not in hbm  # only against a chip-to-chip network


def test_roofline_batches_are_the_books_roofline_plot_points(capsys):
    """roofline, question 3: FLOP/s against B of bf16 [B, D] x [D, F] on v5e: 2BDF / max(2BDF / C, 2(BD + DF + BF) / W),
    rising with B until the ridge (B about 240), then flat at C = 1.97e14."""
    c, w, d, f = 1.97e14, 8.2e11, 8192, 32768
    out = podsim_json(capsys, "roofline", "--chip", "tpu-v5e", "--matmul", f"1,{d},{f}", "--batches", "1,64,240,1024")
    for point in out["batches"]:
        b = point["batch"]
        hand = 2 * b * d * f / max(2 * b * d * f / c, 2 * (b * d + d * f + b * f) / w)
        assert point["flops_per_s"] == pytest.approx(hand, rel=1e-12)
    assert [p["bound"] for p in out["batches"]] == ["memory", "memory", "memory", "compute"]
    assert out["batches"][-1]["flops_per_s"] == pytest.approx(c, rel=1e-12)


# --- the book's counts beside podsim's (issue 32, the book page's last rows) ---------------------------------

def test_pod_hbm_as_the_book_multiplies_it(capsys):
    """tpus, question 2: "256 x 16GB = 4TB" of HBM in a v5e pod, 8960 x 96GB = 860TB in a v5p pod (decimal GB;
    podsim's own pod_hbm_capacity_bytes reads a chip's GB as GiB)."""
    assert podsim_json(capsys, "chips", "tpu-v5e")["facts"]["pod"]["pod_hbm_capacity_bytes_book"] == \
        pytest.approx(256 * 16e9)
    assert podsim_json(capsys, "chips", "tpu-v5p")["facts"]["pod"]["pod_hbm_capacity_bytes_book"] == \
        pytest.approx(860e12, rel=0.001)


def test_roofline_at_a_questions_assumed_bandwidth(capsys):
    """tpus, question 3: v6e over PCIe at the question's 1.5e10 B/s, F = 4D: 2BDF / 9.2e14 > 2DF / 1.5e10 once
    B > 9.2e14 / 1.5e10 (61,000); question 6, stage 1: 1 GB over one 1.5e10 link, 66 ms. The preset's own PCIe
    figure is kept beside the assumed one."""
    out = podsim_json(capsys, "roofline", "--chip", "tpu-v6e", "--memory", "pcie", "--bandwidth", "1.5e10",
                      "--matmul", "1,8192,32768", "--find", "batch")
    assert out["critical_batch_book"] == pytest.approx(61000, rel=0.01)
    assert (out["bandwidth_bytes_per_s"], out["chip_bandwidth_bytes_per_s"]) == (1.5e10, 3.2e10)
    stage = podsim_json(capsys, "roofline", "--chip", "tpu-v5e", "--memory", "pcie", "--bandwidth", "15GB/s",
                        "--flops", "0", "--bytes", "1e9")
    assert stage["lower_bound_s"] == pytest.approx(66e-3, rel=0.02)
    assert main(["roofline", "--chip", "tpu-v5e", "--bandwidth", "-3", "--flops", "1", "--bytes", "1"]) == 2
    assert "--bandwidth" in capsys.readouterr().err


def test_training_memory_as_the_book_counts_it(capsys):
    """training, question 2: LLaMA-2 13B (L = 40, D = 5120, F = 13824), bf16 parameters and fp32 Adam: (2 + 4 + 4)
    x 13e9 = 130 GB; the activations after the three big matmuls at 16M tokens: 2 L B (D + 2F) = 42 TB; question 3:
    3M tokens, about 8 TB in all."""
    out = podsim_json(capsys, "model", "llama-2-13b", "--mode", "train", "--chip", "tpu-v5p", "--batch", "16000",
                      "--seq", "1000", "--no-simulate")["book_memory"]
    assert out["state_bytes"] == pytest.approx(130e9, rel=0.01)
    assert out["ffw_outputs"]["checkpoint_bytes"] == pytest.approx(2 * 40 * 16e6 * (5120 + 2 * 13824))
    assert out["ffw_outputs"]["checkpoint_bytes"] == pytest.approx(42e12, rel=0.01)
    q3 = podsim_json(capsys, "model", "llama-2-13b", "--mode", "train", "--chip", "tpu-v5p", "--batch", "3000",
                     "--seq", "1000", "--no-simulate")["book_memory"]
    assert q3["ffw_outputs"]["total_bytes"] == pytest.approx(8e12, rel=0.01)


def test_applied_training_memory_and_fsdp_split(capsys):
    """applied-training: LLaMA 3-70B at 4M tokens, 4 checkpoints a layer: params 2 x 70GB, optimizer 8 x 70GB,
    checkpoints 2 x 8192 x 4e6 x 4 x 80 = 20.9 TB, 21.6 TB in all, 21.6e12 / 96e9 = 225 v5p, 2.4 GB a chip on
    8960; FSDP alone leaves 4 x 1024 x 1024 / 8960 = 468 tokens a chip; X_opt = sqrt(2 x 4.19e6 x 8960 / 28672)
    = 1618. gpus, quiz 5 question 2.1: bf16 weights and fp32 Adam, 10 B x 70e9 / 80 GB: 9 H100s."""
    base = ["model", "llama-3-70b", "--mode", "train", "--chip", "tpu-v5p", "--mesh", "fsdp=8",
            "--checkpoints-per-layer", "4", "--no-simulate", "--tokens-total", "15e12", "--assume-mfu", "0.4",
            "--chips", "8960"]
    mem = podsim_json(capsys, *base, "--batch", "1000", "--seq", "4000")["book_memory"]
    assert mem["params_bytes"] == pytest.approx(140e9, rel=0.01)
    assert mem["optimizer_bytes"] == pytest.approx(560e9, rel=0.01)
    assert mem["checkpoint_bytes"] == pytest.approx(2 * 8192 * 4e6 * 4 * 80)
    assert mem["total_bytes"] == pytest.approx(21.6e12, rel=0.01)
    assert mem["min_chips"] in (225, 226)  # the book divides its rounded 21.6 TB
    assert mem["per_chip_bytes"] == pytest.approx(2.4e9, rel=0.01)
    split = podsim_json(capsys, *base, "--batch", "1024", "--seq", "4096")["book_fsdp_model"]
    assert split["tokens_per_chip"] == pytest.approx(468, rel=0.001)
    assert split["x_opt"] == pytest.approx(1618, rel=0.001)
    h100 = podsim_json(capsys, "model", "llama-3-70b", "--mode", "train", "--chip", "h100", "--mesh", "fsdp=8",
                       "--batch", "8", "--seq", "1024", "--no-simulate")
    assert h100["book_memory"]["min_chips_for_state"] == 9


def test_prefill_at_an_assumed_mfu_as_the_book_counts_it(capsys):
    """applied-inference: 8,192 prompt tokens of LLaMA 3-70B on 16 v5e at 40% MFU, 2 x 70e9 x 8192 / (16 x 1.97e14
    x 0.4) = 0.91 s (no attention FLOPs; podsim's assumed_mfu_step_time_s counts them)."""
    out = podsim_json(capsys, "model", "llama-3-70b", "--chip", "tpu-v5e", "--mode", "prefill", "--mesh", "model=16",
                      "--batch", "1", "--seq", "8192", "--assume-mfu", "0.4", "--no-simulate")
    assert out["book_assumed_mfu_step_time_s"] == pytest.approx(0.91, rel=0.01)
    assert out["assumed_mfu_step_time_s"] > out["book_assumed_mfu_step_time_s"]


def test_serving_fit_as_the_book_counts_it(capsys):
    """applied-inference: LLaMA 3-70B at batch 32 and 8k in int8 needs 112e9 / 16e9 = 7 v5e; its bf16 weights
    alone 70e9 x 2 / 16e9 = 8.75 chips, int8 4.38; a bf16 4x4 holds (16 x 16e9 - 140e9) / (324e3 x 8192) = 43
    caches of 8k (decimal GB, as the book divides)."""
    def hbm(*flags: str) -> dict:
        return podsim_json(capsys, "model", "llama-3-70b", "--chip", "tpu-v5e", "--no-simulate", *flags)["book_hbm"]

    assert hbm("--batch", "32", "--context", "8192", "--weight-dtype", "int8", "--kv-dtype", "int8")[
        "chips_for_weights_plus_kv"] == pytest.approx(7, rel=0.02)
    assert hbm("--batch", "1", "--context", "8192")["chips_for_weights"] == pytest.approx(8.75, rel=0.01)
    assert hbm("--batch", "1", "--context", "8192", "--weight-dtype", "int8")["chips_for_weights"] == \
        pytest.approx(4.38, rel=0.01)
    fit = hbm("--mesh", "model=16", "--kv-sharding", "auto", "--batch", "1", "--context", "8192")
    assert fit["max_batch"] in (42, 43)  # the book's 140 GB and 324 kB against podsim's 141.1 GB and 327.7 kB


def test_gpu_quiz_4_collectives(capsys):
    """gpus, quiz 4: an AllGather of B bytes over one SU of M = 32 nodes is bound at the top-level switch, B (M - 1)
    / (M x 400e9); an AllReduce with in-network reduction in a node costs exactly B / W_egress (450e9 on H100)."""
    su = podsim_json(capsys, "collective", "all_gather", "--chip", "h100", "--topology", "nodes:32:8", "--bytes", "1e9")
    assert su["book_s"] == pytest.approx(1e9 * 31 / (32 * 400e9))
    sharp = podsim_json(capsys, "collective", "all_reduce", "--chip", "h100", "--topology", "switch:8", "--bytes",
                        "1e9", "--algorithm", "nvls")
    assert sharp["topology_bound_s"] == pytest.approx(1e9 / 450e9, rel=0.01)


def test_gpu_fp32_vector_peak_as_the_book_counts_it(capsys):
    """gpus, quiz 1 question 7: the H100's vector peak counted as one op a CUDA core a cycle, 33.5e12 / 3.35e12 =
    10 FLOPs a byte (the datasheet's FMA-as-2 rate gives 20)."""
    out = podsim_json(capsys, "roofline", "--chip", "h100", "--dtype", "fp32", "--flops", "1", "--bytes", "1")
    assert out["book_peak_intensity_flops_per_byte"] == pytest.approx(10, rel=0.01)
    assert out["peak_intensity_flops_per_byte"] == pytest.approx(20, rel=0.01)


def test_moe_critical_batch_by_the_books_rule(capsys):
    """inference question 5.2 (no printed answer; the chapter's rule): the dense 1.97e14 / 8.2e11 = 240 times E / k
    = 16 / 2: 1,920."""
    out = podsim_json(capsys, "model", "--config", str(BOOK_MODELS / "inference_moe.toml"), "--chip", "tpu-v5e",
                      "--no-simulate")
    assert out["critical_batch_book"] == pytest.approx(1.97e14 / 8.2e11 * 16 / 2)


def test_deepseek_mfu_on_the_books_h800(capsys):
    """transformers question 7: 6 x 37e9 x 14.8e12 / (2.79e6 x 3600 x 1.513e15) = 21.7%."""
    out = podsim_json(capsys, "model", "--params", "37e9", "--mode", "train", "--tokens-total", "14.8e12",
                      "--measured-chip-hours", "2.79e6", "--chip-file", str(BOOK_MODELS / "h800_book.toml"))
    assert out["measured_mfu_8bit"] == pytest.approx(6 * 37e9 * 14.8e12 / (2.79e6 * 3600 * 1.513e15))
    assert out["measured_mfu_8bit"] == pytest.approx(0.217, rel=0.01)
