"""`podsim model --params N` (the book's abstract models) and whole-run projections (--tokens-total).

Oracles are the book's closed forms written out here: a decode step reads N b_w + B S K bytes and does
2 N B FLOPs; training a run of T tokens takes 6 N T / (chips peak MFU).
"""
import json
import math

import pytest

from simulator.frontend.cli import main
from simulator.hardware.specs import get_chip
from simulator.workloads.transformer import get_model


def _json(capsys, argv):
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_abstract_decode_step_is_the_books_bytes_over_hbm_bandwidth(capsys):
    chip = get_chip("tpu-v5e")
    out = _json(capsys, ["model", "--params", "7e9", "--kv-bytes-per-token", "5e5", "--batch", "1", "--context",
                         "1024", "--chip", "tpu-v5e"])
    reads = 7e9 * 2 + 1 * 1024 * 5e5  # bf16 weights + one request's cache
    writes = 5e5  # the new token's K and V
    assert out["t_memory_s"] == pytest.approx((reads + writes) / chip.hbm_bandwidth_bytes_per_s, rel=1e-12)
    assert out["book_t_memory_s"] == pytest.approx(reads / chip.hbm_bandwidth_bytes_per_s, rel=1e-12)
    assert out["t_compute_s"] == pytest.approx(2 * 7e9 / chip.peak_bf16_flops_per_s, rel=1e-12)
    assert out["bound"] == "memory" and out["fits"] is True


def test_abstract_decode_step_priced_op_by_op_is_the_books_21_ms(capsys):
    """The inference chapter's pop quiz: 30B int8 weights, bf16 FLOPs, 256 requests at 8192 positions of 100 kB,
    v5e 4x4. The weight matmuls are compute-bound (2 N B / (16 peak)), attention reads the KV cache
    (B S K / (16 W)); the book adds the two (21 ms at its 8.1e11 B/s), where max(total) hides the compute."""
    chip = get_chip("tpu-v5e")
    out = _json(capsys, ["model", "--params", "30e9", "--kv-bytes-per-token", "100e3", "--chip", "tpu-v5e",
                         "--mesh", "model=16", "--batch", "256", "--context", "8192", "--weight-dtype", "int8",
                         "--compute-dtype", "bf16", "--no-simulate", "--ignore-memory"])
    compute = 2 * 30e9 * 256 / (16 * chip.peak_flops_per_s("bf16"))
    kv = 256 * (8192 + 1) * 100e3 / (16 * chip.hbm_bandwidth_bytes_per_s)
    assert out["per_op"]["weight_matmuls"]["bound"] == "compute"
    assert out["per_op"]["attention"]["t_memory_s"] == pytest.approx(kv, rel=1e-12)
    assert out["lower_bound_per_op_s"] == pytest.approx(compute + kv, rel=1e-12)
    assert out["lower_bound_per_op_s"] > out["lower_bound_s"]
    assert out["lower_bound_per_op_s"] == pytest.approx(21e-3, rel=0.02)  # the book's printed answer


def test_abstract_int8_model_parallel_critical_batch_balances_compute_and_memory(capsys):
    chip = get_chip("tpu-v5e")
    n, k, s, m = 30e9, 100e3, 512, 8
    out = _json(capsys, ["model", "--params", "30e9", "--kv-bytes-per-token", "100e3", "--weight-dtype", "int8",
                         "--batch", "64", "--context", "512", "--chip", "tpu-v5e", "--mesh", "model=8"])
    peak, bw = chip.peak_int8_flops_per_s, chip.hbm_bandwidth_bytes_per_s
    # per chip: 2 N B / (m peak) = (N / m + B (S + 1) K / m) / bw, solved for B
    b_star = (n / m / bw) / (2 * n / (m * peak) - (s + 1) * k / (m * bw))
    assert out["critical_batch"] == pytest.approx(b_star, rel=1e-9)
    assert out["per_chip"]["weight_bytes"] == pytest.approx(n / m)
    assert out["t_memory_s"] == pytest.approx((n / m + 64 * (s + 1) * k / m) / bw, rel=1e-12)
    # largest batch: (HBM - weights per chip) / (one request's cache per chip), whole requests
    assert out["max_batch"] == math.floor((chip.hbm_capacity_bytes - n / m) / ((s + 1) * k / m))


def test_abstract_model_that_does_not_fit_says_how_many_chips(capsys):
    """A decode budget answers whether it fits (exit 0, ``fits`` false) and how many chips would hold it."""
    argv = ["model", "--params", "70e9", "--kv-bytes-per-token", "300e3", "--chip", "tpu-v5e"]
    out = _json(capsys, argv)
    assert out["fits"] is False and "model=9" in out["fit_note"]  # 140 GB over 16 GiB chips: 8.15 -> 9
    assert "ignore_memory" not in out


def test_abstract_training_run_is_six_n_t_over_chips_peak_mfu_with_cost(capsys):
    chip = get_chip("tpu-v5p")
    out = _json(capsys, ["model", "--params", "70e9", "--mode", "train", "--chip", "tpu-v5p", "--chips", "8960",
                         "--tokens-total", "15e12", "--assume-mfu", "0.4", "--price-per-chip-hour", "2"])
    seconds = 6 * 70e9 * 15e12 / (8960 * chip.peak_bf16_flops_per_s * 0.4)
    assert out["time_to_train_s"] == pytest.approx(seconds, rel=1e-12)
    assert out["time_to_train_days"] == pytest.approx(seconds / 86400, rel=1e-12)
    assert out["chip_hours"] == pytest.approx(seconds * 8960 / 3600, rel=1e-12)
    assert out["cost_usd"] == pytest.approx(seconds * 8960 / 3600 * 2, rel=1e-12)


def test_preset_training_projection_from_mfu_and_from_the_step(capsys):
    chip, n = get_chip("tpu-v5e"), get_model("gpt2").params(active=True)
    base = ["model", "gpt2", "--mode", "train", "--chip", "tpu-v5e", "--mesh", "data=2", "--batch", "2",
            "--no-simulate", "--tokens-total", "1e9"]
    assumed = _json(capsys, [*base, "--chips", "8", "--assume-mfu", "0.5"])
    assert assumed["time_to_train_s"] == pytest.approx(6 * n * 1e9 / (8 * chip.peak_bf16_flops_per_s * 0.5),
                                                       rel=1e-12)
    assert "time_to_train_from_step_s" not in assumed  # the step runs on 2 chips, the run on 8
    stepped = _json(capsys, base)
    steps = math.ceil(1e9 / (2 * 1024))
    assert stepped["steps"] == steps
    assert stepped["time_to_train_s"] == pytest.approx(steps * stepped["step_time_s"], rel=1e-12)
    assert stepped["chip_hours"] == pytest.approx(stepped["time_to_train_s"] * 2 / 3600, rel=1e-12)


@pytest.mark.parametrize("argv,needle", [
    (["model", "--params", "7e9", "--chip", "tpu-v5e"], "--kv-bytes-per-token"),
    (["model", "gpt2", "--params", "7e9"], "exactly one"),
    (["model", "--params", "7e9", "--mode", "train", "--tokens-total", "1e12"], "--assume-mfu"),
    (["model", "gpt2", "--tokens-total", "1e9"], "--mode train"),
    (["model", "gpt2", "--mode", "train", "--assume-mfu", "0.4"], "--tokens-total"),
    (["model", "--params", "7e9", "--mode", "train", "--tokens-total", "1e12", "--assume-mfu", "1.5"], "(0, 1]"),
    (["model", "--params", "1e30", "--kv-bytes-per-token", "1e5"], "--params"),
    (["model", "gpt2", "--kv-bytes-per-token", "1e5"], "--params N"),
])
def test_bad_projection_flags_give_one_line(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err
