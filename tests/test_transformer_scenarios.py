"""`podsim model`, and the decode_batch_sweep, transformer_step and moe_layer scenarios."""
import json

import pytest

from scenarios import decode_batch_sweep, moe_layer, transformer_step
from simulator.errors import CapacityError, PodsimError
from simulator.frontend.cli import main

KEYS = ["params_total", "params_active", "weight_bytes", "kv_cache_bytes", "flops_per_step", "hbm_bytes_per_step",
        "t_compute_s", "t_memory_s", "step_time_s", "fits", "max_batch"]


def _model_json(capsys, *argv):
    assert main(["model", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_model_command_contract(capsys):
    data = _model_json(capsys, "llama-2-7b", "--batch", "3", "--context", "2048", "--chip", "tpu-v5e")  # 4 do not fit
    assert all(k in data for k in KEYS)
    assert data["params_total"] == 6_738_415_616
    assert data["t_memory_s"] <= data["step_time_s"] <= 1.05 * (data["t_memory_s"] + data["t_compute_s"])


def test_model_seed_example_from_a_config_file(capsys, tmp_path):
    path = tmp_path / "seed.toml"
    path.write_text("d_model = 4096\nd_ff = 11008\nn_layers = 32\nn_heads = 32\nn_kv_heads = 8\nhead_dim = 128\n"
                    "vocab_size = 32000\ntied_embeddings = true\n")
    data = _model_json(capsys, "--config", str(path), "--batch", "4", "--context", "8192", "--no-simulate")
    assert round(data["weights_plus_kv_bytes"] / 2**30, 3) == 14.807
    assert round(data["flops_per_step"] / 1e9, 3) == 63.596
    assert round(data["hbm_read_bytes_per_step"] / 1e9, 3) == 15.899


def test_model_mesh_and_dtypes(capsys):
    bf16 = _model_json(capsys, "llama-2-7b", "--mesh", "model=4", "--no-simulate")
    int8 = _model_json(capsys, "llama-2-7b", "--mesh", "model=4", "--weight-dtype", "int8", "--kv-dtype", "fp8",
                       "--no-simulate")
    assert int8["weight_bytes"] == bf16["weight_bytes"] / 2
    assert bf16["per_chip"]["weight_bytes"] == bf16["weight_bytes"] / 4


BAD = {
    "unknown preset": ["model", "llama-9"],
    "two sources": ["model", "llama-2-7b", "--config", "x.toml"],
    "no source": ["model"],
    "mesh does not divide heads": ["model", "llama-2-7b", "--mesh", "model=3"],
    "bad mesh axis": ["model", "llama-2-7b", "--mesh", "pipe=2"],
    "bad dtype": ["model", "llama-2-7b", "--weight-dtype", "fp16"],
    "bad batch": ["model", "llama-2-7b", "--batch", "0"],
    "context per request mismatch": ["model", "llama-2-7b", "--batch", "3", "--context", "1,2"],
    "missing config file": ["model", "--config", "/nonexistent/m.toml"],
    "model does not fit": ["run", "transformer_step", "--set", "model=llama-3-70b", "--set", "mesh=model=1"],
    "mode": ["run", "transformer_step", "--set", "mode=serve"],
    "moe without experts": ["run", "moe_layer", "--set", "model=llama-2-7b"],
    "moe chips": ["run", "moe_layer", "--set", "chips=3"],
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_model_input_is_one_line_exit_2(capsys, case):
    assert main(BAD[case]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_does_not_fit_says_by_how_much_and_what_would():
    with pytest.raises(CapacityError, match=r"needs \d+\.\d+ GiB per chip .* GiB over\).*model=16"):
        transformer_step.run(model="llama-3-70b", mesh="model=4", batch=1, context=0)


def test_decode_batch_sweep_moves_from_memory_to_compute_bound():
    r = decode_batch_sweep.run(batches=(1, 32, 512))
    bounds = [p["bound"] for p in r.extra["points"]]
    assert bounds == ["memory", "memory", "compute"]
    per_token = [p["time_per_token_s"] for p in r.extra["points"]]
    assert per_token == sorted(per_token, reverse=True)
    # the MXU pads the batch to a multiple of 8 rows, so the simulated crossover sits up to 7 lower
    assert r.extra["analytic_critical_batch"] - 8 < r.extra["crossover_batch"] <= r.extra["analytic_critical_batch"]
    for p in r.extra["points"]:
        assert p["step_time_s"] >= p["analytic_lower_bound_s"] * 0.999


@pytest.mark.parametrize("mode", ["decode", "prefill", "train"])
def test_transformer_step_modes_on_a_mesh(mode):
    r = transformer_step.run(model="gpt2", mode=mode, batch=4, context=256, prompt=128, seq=256, mesh="data=2,model=2")
    assert r.extra["step_time_s"] >= r.extra["budget"]["lower_bound_s"] * 0.999
    assert r.extra["busiest_link_fraction"] > 0
    assert r.trace.spans


def test_moe_layer_matches_its_closed_form_and_imbalance_slows_it():
    balanced, skewed = moe_layer.run(), moe_layer.run(imbalance=0.5)
    for r in (balanced, skewed):
        assert r.extra["time_s"] == pytest.approx(r.extra["analytic_s"], rel=1e-9)
    assert skewed.extra["expert_s"] == pytest.approx(1.5 * balanced.extra["expert_s"], rel=1e-9)
    assert balanced.extra["params_total"] == 46_702_792_704 and balanced.extra["params_active"] == 12_879_925_248
    assert balanced.extra["expert_flops_per_token"] * 4 == balanced.extra["dense_equivalent_flops_per_token"]


def test_moe_imbalance_beyond_one_chip_is_rejected():
    with pytest.raises(PodsimError, match="imbalance=9"):
        moe_layer.run(imbalance=9)
