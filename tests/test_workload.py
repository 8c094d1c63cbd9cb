"""Simulated Transformer steps held against their closed-form budgets."""
import pytest

from simulator.hardware.specs import get_chip
from simulator.workloads.budget import Parallelism, decode_budget, train_budget
from simulator.workloads.simulate import simulate_decode, simulate_train
from simulator.workloads.transformer import TransformerConfig, get_model

SEED = TransformerConfig(name="seed", d_model=4096, d_ff=11008, n_layers=32, n_heads=32, n_kv_heads=8, head_dim=128,
                         vocab_size=32000, tied_embeddings=True)
V5E, V5P = get_chip("tpu-v5e"), get_chip("tpu-v5p")


def test_seed_decode_step_moves_the_budgeted_bytes_and_flops():
    sim = simulate_decode(SEED, V5E, batch=4, context=8192)
    budget = decode_budget(SEED, V5E, batch=4, context=8192)
    bytes_ = sim.system.trace.bytes_by_interface
    assert bytes_["hbm_read"] == pytest.approx(budget["hbm_read_bytes_per_step"], rel=1e-9)
    assert bytes_["hbm_write"] == pytest.approx(budget["hbm_write_bytes_per_step"], rel=1e-9)
    mxu_flops = sum(s.flops for s in sim.system.trace.spans if s.unit == "mxu")  # the VPU's element-wise work aside
    assert mxu_flops == pytest.approx(budget["flops_per_step"], rel=1e-9)
    assert sim.system.trace.padded_flops_total > budget["flops_per_step"]  # batch 4 pads to 8 MXU rows
    # memory-bound: the step is the HBM time plus a little fill and drain
    assert budget["lower_bound_s"] <= sim.env.now <= budget["lower_bound_s"] * 1.01


@pytest.mark.parametrize("model,batch,context,par", [
    ("llama-2-7b", 4, 2048, Parallelism()), ("llama-2-7b", 8, 512, Parallelism(2, 4)),
    ("mixtral-8x7b", 16, 1024, Parallelism(1, 8)), ("gpt2", 64, 256, Parallelism()),
    ("llama-3-8b", 512, 128, Parallelism()),
])
def test_decode_step_between_its_bounds(model, batch, context, par):
    cfg = get_model(model)
    chip = V5P if model == "llama-3-8b" else V5E
    budget = decode_budget(cfg, chip, batch, context, par)
    sim = simulate_decode(cfg, chip, batch, context, par)
    assert budget["lower_bound_s"] * 0.999 <= sim.env.now <= budget["upper_bound_s"] * 1.05


def test_mesh_decode_uses_links_and_each_chip_its_share():
    cfg = get_model("llama-2-7b")
    sim = simulate_decode(cfg, V5E, 8, 512, Parallelism(1, 4))
    summary = sim.summary()
    assert summary["busiest_link_fraction"] > 0
    units = {s.unit for s in sim.system.trace.spans}
    assert {"hbm", "mxu", "vpu"} <= units and any(u.startswith("link") for u in units)
    one = simulate_decode(cfg, V5E, 8, 512)
    assert sim.env.now < one.env.now / 3  # four chips, each reading a quarter of the weights


def test_training_step_single_chip_between_bounds_and_checkpointing_costs_a_unit():
    cfg = get_model("gpt2")
    plain, ckpt = simulate_train(cfg, V5P, 16, 1024), simulate_train(cfg, V5P, 16, 1024, recompute=True)
    b_plain, b_ckpt = train_budget(cfg, V5P, 16, 1024), train_budget(cfg, V5P, 16, 1024, recompute=True)
    assert b_plain["lower_bound_s"] <= plain.env.now <= b_plain["upper_bound_s"] * 1.15
    assert ckpt.env.now / plain.env.now == pytest.approx(4 / 3, rel=0.05)  # compute-bound: 4 units vs 3
    assert ckpt.system.trace.bytes_by_interface["hbm_write"] < plain.system.trace.bytes_by_interface["hbm_write"]
    assert b_ckpt["lower_bound_s"] <= ckpt.env.now


def test_training_on_a_mesh_adds_the_model_axis_allreduces():
    cfg = get_model("llama-2-7b")
    par = Parallelism(2, 2)
    sim = simulate_train(cfg, V5P, 16, 1024, par)
    budget = train_budget(cfg, V5P, 16, 1024, par)
    assert sim.env.now == pytest.approx(budget["lower_bound_s"] + budget["t_model_allreduce_s"], rel=0.05)


def test_prefill_is_compute_heavier_than_decode():
    cfg = get_model("llama-2-7b")
    decode = simulate_decode(cfg, V5E, 4, 512)
    prefill = simulate_decode(cfg, V5E, 4, 0, new_tokens=512)
    assert prefill.system.metrics()["busy_s"]["mxu"] > 50 * decode.system.metrics()["busy_s"]["mxu"]
