"""The book's serving calculation and the flags issue 32 added for its remaining worked questions: int4 storage,
``podsim model --decode-length N --prefill-mfu F``, the GPU critical batch of data parallelism outside model
sharding, an abstract ``--params N --mode train`` step's tokens per chip, and ``podsim collective --versus``.

Each oracle is the book's formula worked here by hand from the model's own shape (LLaMA 3-70B: 80 layers, 8 KV heads
of 128, 70.55e9 parameters) and the chips' datasheet figures (REFERENCE.md: v5e 1.97e14 FLOP/s, 8.2e11 B/s of HBM,
16 GB; H100 990e12 FLOP/s, 450e9 B/s of NVLink egress, 50e9 B/s of InfiniBand per GPU, 8 GPUs a node), or a relation
between two runs that must hold whatever the code computes (int4 weights are a quarter of bf16's), never a number
read off podsim's output."""
from __future__ import annotations

import json

import pytest

from simulator.frontend.cli import main

V5E_HBM_BW, V5E_BF16, V5E_HBM_GB = 8.2e11, 1.97e14, 16e9
H100_BF16, H100_NODE_EGRESS, H100_NVLINK = 990e12, 8 * 50e9, 450e9
L3 = ["model", "llama-3-70b", "--chip", "tpu-v5e", "--no-simulate"]
L3_KV_INT4 = 2 * 8 * 128 * 80 * 0.5  #: K and V x 8 KV heads x 128 x 80 layers x half a byte: 81,920 B a token


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    """The command's JSON (a `podsim model` state priced whether or not it fits: --ignore-memory)."""
    code = main([*argv, "--json", *(["--ignore-memory"] if argv[0] == "model" else [])])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The one-line error of a bad input (exit 2)."""
    assert main(list(argv)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("podsim: error:") and "\n" not in err and "Traceback" not in err
    return err


# --- int4 storage --------------------------------------------------------------------------------------------

def test_int4_kv_cache_is_half_a_byte_an_element(capsys):
    """applied-inference, the smallest-slice table: 81 kB a token in int4 (2 K H L / 2)."""
    out = run(capsys, *L3, "--batch", "1", "--context", "8192", "--weight-dtype", "int4", "--kv-dtype", "int4")
    assert out["kv_bytes_per_position"] == L3_KV_INT4
    assert out["kv_cache_bytes"] == L3_KV_INT4 * 8192


def test_int4_weights_are_a_quarter_of_bf16_and_compute_at_the_bf16_rate(capsys):
    """int4 stores half a byte a weight but has no MXU rate of its own here: the same FLOPs at the bf16 peak."""
    bf16 = run(capsys, *L3, "--batch", "8", "--context", "1024")
    int4 = run(capsys, *L3, "--batch", "8", "--context", "1024", "--weight-dtype", "int4")
    assert int4["weight_bytes"] == pytest.approx(bf16["weight_bytes"] / 4, rel=1e-12)
    assert int4["compute_dtype"] == "bf16"
    assert int4["t_compute_s"] == pytest.approx(bf16["t_compute_s"], rel=1e-12)
    assert int4["params_total"] * 0.5 == pytest.approx(int4["weight_bytes"], rel=1e-12)


def test_int4_step_on_a_2x2_loads_the_weights_in_about_10_ms(capsys):
    """applied-inference: int4 parameters on 4 v5e, a tiny batch: 35.3e9 B / (4 x 8.2e11) plus the KV, ~10.8 ms."""
    out = run(capsys, *L3, "--mesh", "model=4", "--batch", "1", "--context", "8192", "--weight-dtype", "int4",
              "--kv-dtype", "int4")
    weights = 70.55e9 * 0.5
    kv = L3_KV_INT4 * (8192 + 1)  # the cached positions and the new one, split over the 4 chips by heads
    assert out["t_memory_s"] == pytest.approx((weights + kv) / 4 / V5E_HBM_BW, rel=0.02)
    assert out["t_memory_s"] == pytest.approx(0.010, rel=0.10)  # the book's "about 10 ms"


def test_kv_room_is_the_slices_hbm_less_the_weights(capsys):
    """book_hbm.kv_room_bytes: N x 16 GB - the weights (116 GB on a 4x4 in bf16; 58 GB on a 4x2 in int8, where the
    book's table writes 68)."""
    for mesh, dtype, chips, width in (("model=16", "bf16", 16, 2), ("model=8", "int8", 8, 1),
                                      ("model=4", "int4", 4, 0.5)):
        out = run(capsys, *L3, "--mesh", mesh, "--kv-sharding", "auto", "--batch", "1", "--context", "8192",
                  "--weight-dtype", dtype, "--kv-dtype", dtype)
        assert out["book_hbm"]["kv_room_bytes"] == pytest.approx(chips * V5E_HBM_GB - out["params_total"] * width,
                                                                 rel=1e-12)
    assert out["book_hbm"]["kv_room_bytes"] == pytest.approx(64e9 - 35.3e9, rel=0.01)


def test_int4_is_storage_only(capsys):
    """int4 is no compute dtype (no MXU rate): refused for --compute-dtype and podsim roofline --dtype."""
    assert "dtype" in refused(capsys, *L3, "--weight-dtype", "int4", "--compute-dtype", "int4")
    assert "dtype" in refused(capsys, "roofline", "--chip", "tpu-v5e", "--dtype", "int4", "--flops", "1",
                              "--bytes", "1")
    assert "int4" in refused(capsys, *L3, "--weight-dtype", "int3")


def test_8bit_weights_that_do_not_fit_are_told_of_int4(capsys):
    """The does-not-fit note offers a narrower dtype only when there is one: int4 for int8 weights."""
    out = run(capsys, *L3, "--weight-dtype", "int8", "--batch", "1", "--context", "8")
    assert not out["fits"] and "int4" in out["fit_note"] and "use 8-bit" not in out["fit_note"]
    out = run(capsys, *L3, "--weight-dtype", "int4", "--batch", "1", "--context", "8")
    assert not out["fits"] and "already int4" in out["fit_note"]


# --- --decode-length and --prefill-mfu ---------------------------------------------------------------------

def test_decode_length_prices_every_step_as_this_one(capsys):
    """decode_time_s = N x step; N twice as long halves the queries per second (the book's 19 ms x 512 = 9.7 s)."""
    base = [*L3, "--mesh", "model=16", "--kv-sharding", "auto", "--batch", "42", "--context", "8192"]
    a = run(capsys, *base, "--decode-length", "512")
    b = run(capsys, *base, "--decode-length", "1024")
    step = a["lower_bound_s"]
    assert a["decode_time_s"] == pytest.approx(512 * step, rel=1e-12)
    assert b["queries_per_s"] == pytest.approx(a["queries_per_s"] / 2, rel=1e-12)
    assert a["queries_per_s_per_chip"] == pytest.approx(42 / (step * 512 * 16), rel=1e-12)


def test_a_full_hbm_step_gives_the_books_qps_per_chip(capsys):
    """applied-inference: 43 / (0.019 x 512 x 16) = 0.27 QPS a chip; at podsim's 42 requests a step reads the
    weights and 42 caches, (70.55e9 x 2 + 42 x 8193 x 327,680) / (16 x 8.2e11) = 19.2 ms."""
    out = run(capsys, *L3, "--mesh", "model=16", "--kv-sharding", "auto", "--batch", "42", "--context", "8192",
              "--decode-length", "512")
    step = (70.55e9 * 2 + 42 * 8193 * 327680) / (16 * V5E_HBM_BW)
    assert out["lower_bound_s"] == pytest.approx(step, rel=0.02)
    assert out["queries_per_s_per_chip"] == pytest.approx(42 / (step * 512 * 16), rel=0.02)
    assert out["queries_per_s_per_chip"] == pytest.approx(0.27, rel=0.02)


def test_sequences_finished_and_tokens_evicted(capsys):
    """applied-inference: prefill 8192, decode 4096, batch 32: 32 / 4096 sequences a step, B (P + G) / G = 96 KV
    tokens evicted a step."""
    out = run(capsys, *L3, "--mesh", "model=16", "--batch", "32", "--context", "8192", "--decode-length", "4096")
    assert out["sequences_finished_per_step"] == 32 / 4096
    assert out["kv_tokens_evicted_per_step"] == 32 * (8192 + 4096) / 4096 == 96


def test_prefill_at_an_assumed_mfu_is_the_books_2NT(capsys):
    """applied-inference: 2 x 70e9 x 8192 / (16 x 1.97e14 x 0.4) = 0.91 s (0.917 s for 70.55e9 parameters); with
    attention's FLOPs (podsim's count) it is the prefill mode's own assumed-MFU step."""
    out = run(capsys, *L3, "--mesh", "model=16", "--batch", "32", "--context", "8192", "--decode-length", "512",
              "--prefill-mfu", "0.4")
    assert out["book_prefill_s"] == pytest.approx(2 * 70.55e9 * 8192 / (16 * V5E_BF16 * 0.4), rel=1e-3)
    prefill = run(capsys, *L3, "--mode", "prefill", "--mesh", "model=16", "--batch", "1", "--seq", "8192",
                  "--assume-mfu", "0.4")
    assert out["prefill_s"] == pytest.approx(prefill["assumed_mfu_step_time_s"], rel=1e-12)
    assert out["prefill_s"] > out["book_prefill_s"]  # attention's FLOPs counted


def test_prefill_to_generate_servers(capsys):
    """applied-inference: P / prefill = B G / (step x N), so P / G = prefill x B / (step x N) (the book's 0.91 x
    32 / (0.019 x 512) = 3, its step of batch 43)."""
    out = run(capsys, *L3, "--mesh", "model=16", "--kv-sharding", "auto", "--batch", "32", "--context", "8192",
              "--decode-length", "512", "--prefill-mfu", "0.4")
    step = out["lower_bound_s"]
    assert out["book_prefill_to_generate_servers"] == pytest.approx(out["book_prefill_s"] * 32 / (step * 512),
                                                                    rel=1e-12)
    assert out["prefill_to_generate_servers"] == pytest.approx(out["prefill_s"] * 32 / (step * 512), rel=1e-12)
    book_step = 0.917 * 32 / (3 * 512)  # the 19 ms the book divides by
    assert step < book_step  # batch 32's step is shorter than batch 43's, so the ratio is above 3
    assert out["book_prefill_to_generate_servers"] == pytest.approx(3, rel=0.15)


def test_abstract_model_serving_by_hand(capsys):
    """An abstract model is closed forms only: 30e9 int8 weights, 100 kB a token, 4 requests at 8192 on 16 v5e:
    step = (30e9 / 16 + 4 x 8193 x 100e3 / 16) / 8.2e11; prefill = 2 N P / (16 x 1.97e14 x F)."""
    out = run(capsys, "model", "--params", "30e9", "--kv-bytes-per-token", "100e3", "--chip", "tpu-v5e", "--mesh",
              "model=16", "--batch", "4", "--context", "8192", "--weight-dtype", "int8", "--compute-dtype", "bf16",
              "--decode-length", "256", "--prefill-mfu", "0.5")
    step = (30e9 / 16 + 4 * 8193 * 100e3 / 16) / V5E_HBM_BW
    assert out["decode_time_s"] == pytest.approx(256 * step, rel=1e-9)
    assert out["prefill_s"] == pytest.approx(2 * 30e9 * 8192 / (16 * V5E_BF16 * 0.5), rel=1e-12)
    assert out["prefill_s"] == out["book_prefill_s"]


@pytest.mark.parametrize("argv, says", [
    (["--decode-length", "0"], "--decode-length"),
    (["--decode-length", "-5"], "--decode-length"),
    (["--prefill-mfu", "0.4"], "--decode-length"),
    (["--decode-length", "8", "--prefill-mfu", "1.5"], "(0, 1]"),
    (["--decode-length", "8", "--prefill-mfu", "0.4"], "--context"),
    (["--mode", "prefill", "--decode-length", "8"], "--mode prefill"),
    (["--mode", "train", "--decode-length", "8"], "--mode train"),
])
def test_serving_flags_refuse_bad_input_in_one_line(capsys, argv, says):
    assert says in refused(capsys, "model", "llama-3-8b", "--no-simulate", *argv)


# --- the GPU critical batch outside model sharding; abstract training steps ------------------------------------

@pytest.mark.parametrize("mesh, nodes", [("data=48,model=8,pipeline=2", 2), ("data=64,model=8,pipeline=8", 8),
                                         ("data=512,model=8", 1), ("data=8,model=4", 1)])
def test_data_parallelism_outside_model_sharding(capsys, mesh, nodes):
    """gpus quiz 5 Q2.3 and Q3: the outer reduction's cost falls by the nodes a model group spans: 990e12 / (400e9
    x k) = 1,237 (k = 2), 309 (k = 8), 2,475 (k <= 1)."""
    out = run(capsys, "model", "llama-3-70b", "--mode", "train", "--chip", "h100", "--mesh", mesh, "--batch",
              "1536", "--seq", "1024", "--no-simulate")
    book = out["critical_batch_per_chip_book"]
    assert book["model_nodes_spanned"] == nodes
    assert book["data_outside_model"] == pytest.approx(H100_BF16 / (H100_NODE_EGRESS * nodes), rel=1e-12)


def test_no_outer_critical_batch_on_tpus_or_without_model_sharding(capsys):
    tpu = run(capsys, "model", "llama-3-70b", "--mode", "train", "--chip", "tpu-v5p", "--mesh",
              "data=4,model=8", "--batch", "8", "--seq", "1024", "--no-simulate")
    assert "data_outside_model" not in tpu.get("critical_batch_per_chip_book", {})
    gpu = run(capsys, "model", "llama-2-7b", "--mode", "train", "--chip", "h100", "--mesh", "data=16", "--batch",
              "64", "--seq", "1024", "--no-simulate")
    assert "data_outside_model" not in gpu["critical_batch_per_chip_book"]


def test_state_per_gpu_with_only_model_sharding(capsys):
    """gpus quiz 5 Q2.3.1: bf16 weights and fp32 Adam, (2 + 8) x N over 8-way TP, data replicating it: 87.5 GB for
    70e9 (88.2 GB for 70.55e9)."""
    out = run(capsys, "model", "llama-3-70b", "--mode", "train", "--chip", "h100", "--mesh", "data=512,model=8",
              "--batch", "1024", "--seq", "4096", "--no-simulate")
    assert out["book_memory"]["state_per_chip_model_sharded_bytes"] == pytest.approx(10 * 70.55e9 / 8, rel=1e-3)
    assert out["book_memory"]["state_per_chip_model_sharded_bytes"] == pytest.approx(
        out["book_memory"]["state_bytes"] / 8, rel=1e-12)


@pytest.mark.parametrize("params, batch, chips, mesh, per_chip", [
    ("16e9", 192, 192, None, 4096), ("314e9", 1536, 3072, "data=48,model=8,pipeline=8", 2048)])
def test_abstract_training_step_tokens_per_gpu(capsys, params, batch, chips, mesh, per_chip):
    """gpus quiz 5 Q3: Megatron-LM's 16B, 192 x 4096 / 192 = 4,096 tokens a GPU; its 314B, 1536 x 4096 / 3072."""
    where = ["--mesh", mesh] if mesh else ["--chips", str(chips)]
    out = run(capsys, "model", "--params", params, "--mode", "train", "--chip", "h100", "--batch", str(batch),
              "--seq", "4096", *where)
    assert out["tokens_per_chip"] == batch * 4096 / chips == per_chip
    assert "time_to_train_s" not in out  # no run projected without --tokens-total
    if mesh:
        assert out["critical_batch_per_chip_book"]["data_outside_model"] == pytest.approx(
            H100_BF16 / (H100_NODE_EGRESS * 8), rel=1e-12)


def test_abstract_training_step_refuses_chips_unlike_its_mesh(capsys):
    assert "--chips" in refused(capsys, "model", "--params", "7e9", "--mode", "train", "--chip", "h100", "--mesh",
                                "data=8", "--chips", "16")
    assert "--assume-mfu" in refused(capsys, "model", "--params", "7e9", "--mode", "train", "--tokens-total", "1e12")


# --- collective --versus -------------------------------------------------------------------------------------

def test_versus_on_rings_gives_the_books_factors(capsys):
    """sharding Q10: on a one-way ring the AllGather's busiest link carries N^2 (1 - 1/D), the AllToAll's N^2 / 2
    (1 - 1/D): 2x; on a bidirectional ring N^2 (1 - 1/D) / 2 against sum_{d<D/2} 2 d + D/2 blocks of N^2 / D^2 over
    two directions, N^2 / 8 for D = 8 and 64: 3.5 and 3.94, towards the book's 4."""
    n2 = 8192**2
    one_way = run(capsys, "collective", "all_gather", "--chip", "tpu-v5e", "--topology", "torus:8", "--bytes",
                  str(n2), "--algorithm", "unidirectional", "--versus", "all_to_all")
    assert one_way["versus"]["max_link_bytes"] == pytest.approx(n2 / 2 * (1 - 1 / 8), rel=1e-9)
    assert one_way["versus"]["max_link_bytes_ratio"] == pytest.approx(2, rel=1e-9)
    for d in (8, 64):
        both = run(capsys, "collective", "all_gather", "--chip", "tpu-v5e", "--topology", f"ring:{d}", "--bytes",
                   str(n2), "--versus", "all_to_all")
        a2a = (sum(2 * k for k in range(1, d // 2)) + d // 2) * n2 / d**2 / 2  # blocks x distance, per direction
        assert both["versus"]["max_link_bytes"] == pytest.approx(a2a, rel=1e-9)
        assert both["versus"]["max_link_bytes_ratio"] == pytest.approx(4 * (1 - 1 / d), rel=1e-9)


def test_versus_in_a_gpu_node(capsys):
    """gpus: in an 8-GPU node an AllGather costs B (N - 1) / (N W), an AllToAll B (N - 1) / (N^2 W): N = 8x; an
    AllReduce without SHARP (a ring) 2x the AllGather."""
    ag = run(capsys, "collective", "all_gather", "--chip", "h100", "--topology", "switch:8", "--bytes", "1e9",
             "--versus", "all_to_all")
    assert ag["versus"]["time_s"] == pytest.approx(1e9 * 7 / (64 * H100_NVLINK), rel=0.01)
    assert ag["versus"]["time_ratio"] == pytest.approx(8, rel=0.01)
    ar = run(capsys, "collective", "all_reduce", "--chip", "h100", "--topology", "switch:8", "--bytes", "1e9",
             "--algorithm", "unidirectional", "--versus", "all_gather")
    assert ar["versus"]["time_ratio"] == pytest.approx(2, rel=0.01)
    assert ar["versus"]["time_ratio"] == pytest.approx(ar["time_s"] / ar["versus"]["time_s"], rel=1e-12)


def test_versus_refuses_itself_and_calibrated_runs(capsys):
    base = ["collective", "all_gather", "--chip", "h100", "--topology", "switch:8", "--bytes", "1e6"]
    assert "--versus" in refused(capsys, *base, "--versus", "all_gather")
    assert "--calibrated" in refused(capsys, *base, "--versus", "all_to_all", "--calibrated")
    assert "bogus" in refused(capsys, *base, "--versus", "bogus")


def test_training_flops_per_token_is_6N_plus_causal_attention(capsys):
    """applied-training: about 6 x 70e9 = 4.2e11 FLOPs a token; podsim adds causal attention, 3 x 4 L (H Q) (T + 1) / 2
    a token, so a sequence twice as long adds 3 x 4 x 80 x 8192 x (2049 - 1025) / 2 = 4.03e9."""
    def per_token(seq: int) -> float:
        return run(capsys, "model", "llama-3-70b", "--mode", "train", "--chip", "tpu-v5p", "--mesh", "fsdp=8",
                   "--batch", "8", "--seq", str(seq), "--no-simulate")["model_flops_per_token"]

    short, long = per_token(1024), per_token(2048)
    assert long - short == pytest.approx(3 * 4 * 80 * 8192 * (2049 - 1025) / 2, rel=1e-9)
    assert short == pytest.approx(6 * 70.55e9, rel=0.02)


def test_spare_hbm_per_chip_is_16_gb_less_its_share_of_the_weights(capsys):
    """inference Q6.1 (no printed answer): the MoE's 211.7e9 int8 bytes over 128 v5e leave 16e9 - 211.7e9 / 128 =
    14.35e9 a chip; a model config's field agrees with its own weights over the model axis (bf16 on a 4x4:
    16e9 - 141.1e9 / 16)."""
    out = run(capsys, "model", "--params", "211.66e9", "--kv-bytes-per-token", "262144", "--chip", "tpu-v5e",
              "--mesh", "model=128", "--weight-dtype", "int8", "--no-simulate")
    assert out["book_hbm"]["spare_per_chip_bytes"] == pytest.approx(V5E_HBM_GB - 211.66e9 / 128, rel=1e-12)
    assert out["book_hbm"]["chips_for_weights"] == pytest.approx(211.66e9 / V5E_HBM_GB, rel=1e-12)
    out = run(capsys, *L3, "--mesh", "model=16", "--batch", "1", "--context", "8192")
    assert out["book_hbm"]["spare_per_chip_bytes"] == pytest.approx(V5E_HBM_GB - out["params_total"] * 2 / 16,
                                                                    rel=1e-12)
