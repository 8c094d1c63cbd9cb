"""Closed-form budgets against REFERENCE.md's seed example and hand arithmetic."""
import math

import pytest

from simulator.errors import PodsimError
from simulator.hardware.specs import get_chip
from simulator.workloads.budget import (
    Parallelism,
    decode_budget,
    parse_parallelism,
    saved_activation_elements,
    train_budget,
)
from simulator.workloads.transformer import ModelError, TransformerConfig, get_model

SEED = TransformerConfig(name="seed", d_model=4096, d_ff=11008, n_layers=32, n_heads=32, n_kv_heads=8, head_dim=128,
                         vocab_size=32000, tied_embeddings=True)
V5E = get_chip("tpu-v5e")


def test_seed_decode_example_from_reference():
    b = decode_budget(SEED, V5E, batch=4, context=8192)
    assert round(b["weights_plus_kv_bytes"] / 2**30, 3) == 14.807
    assert round(b["flops_per_step"] / 1e9, 3) == 63.596
    assert round(b["hbm_read_bytes_per_step"] / 1e9, 3) == 15.899
    # "about 15.9 ms at 1 TB/s against about 0.636 ms of math at 100 TFLOP/s"
    assert b["hbm_read_bytes_per_step"] / 1e12 == pytest.approx(15.9e-3, rel=0.001)
    assert b["flops_per_step"] / 1e14 == pytest.approx(0.636e-3, rel=0.001)


def test_kv_cache_by_hand_with_unequal_requests():
    b = decode_budget(SEED, V5E, batch=3, context=[100, 2000, 0])
    per_position = 2 * 32 * 8 * 128 * 2  # K and V, layers, KV heads, head width, bf16
    assert b["kv_bytes_per_position"] == per_position
    assert b["kv_cache_bytes"] == per_position * 2100
    assert b["kv_growth_bytes_per_step"] == per_position * 3


def test_flops_split_into_weights_and_attention():
    b = decode_budget(SEED, V5E, batch=2, context=[10, 30])
    attention_per_source = 2 * 32 * 32 * 128  # one of QK^T or AV: 2 FLOPs x layers x N_Q x H
    assert b["attention_qk_flops"] == b["attention_av_flops"] == attention_per_source * (11 + 31)
    assert b["weight_matmul_flops"] == 2 * 2 * (32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 11008)
                                                + 32000 * 4096)


def test_prefill_attention_is_causal():
    b = decode_budget(SEED, V5E, batch=1, context=0, new_tokens=4)
    assert b["attention_qk_flops"] == 2 * 32 * 32 * 128 * (1 + 2 + 3 + 4)


def test_per_chip_split_over_model_and_data():
    one = decode_budget(get_model("llama-2-7b"), V5E, batch=8, context=512)
    mesh = decode_budget(get_model("llama-2-7b"), V5E, batch=8, context=512, par=Parallelism(data=2, model=4))
    assert mesh["per_chip"]["flops_per_step"] == pytest.approx(one["flops_per_step"] / 8)
    assert mesh["per_chip"]["weight_bytes"] == pytest.approx(one["weight_bytes"] / 4)
    assert mesh["per_chip"]["kv_cache_bytes"] == pytest.approx(one["kv_cache_bytes"] / 8)


def test_fewer_kv_heads_than_model_chips_are_replicated():
    b = decode_budget(get_model("llama-3-8b"), V5E, batch=1, context=1000, par=Parallelism(model=16))
    # 8 KV heads on 16 chips: each chip keeps one head, 1/8 of the cache
    assert b["per_chip"]["kv_cache_bytes"] == pytest.approx(b["kv_cache_bytes"] / 8)


def test_fit_and_largest_batch():
    b = decode_budget(get_model("llama-2-7b"), V5E, batch=4, context=2048)
    weights = 6_738_415_616 * 2
    per_request = 2 * 32 * 4096 * 2 * 2049
    assert b["max_batch"] == math.floor((16 * 2**30 - weights) / per_request)
    assert b["fits"] is (weights + 4 * per_request <= 16 * 2**30)
    big = decode_budget(get_model("llama-3-70b"), V5E, batch=1, context=0, par=Parallelism(model=4))
    assert not big["fits"] and "model=16" in big["fit_note"] and big["max_batch"] == 0


def test_critical_batch_makes_compute_equal_memory():
    cfg = get_model("llama-3-8b")
    chip = get_chip("tpu-v5p")
    b = decode_budget(cfg, chip, batch=1, context=128)
    crit = b["critical_batch"]
    at = decode_budget(cfg, chip, batch=round(crit), context=128)
    assert at["t_compute_s"] == pytest.approx(at["t_memory_s"], rel=0.01)
    assert decode_budget(cfg, chip, batch=8, context=128)["bound"] == "memory"
    never = decode_budget(SEED, V5E, batch=1, context=8192)  # long context: KV-bound at any batch
    assert never["critical_batch"] is None and "no batch makes this step compute-bound" in never["critical_batch_note"]


def test_training_units_and_checkpointing():
    cfg, chip = get_model("gpt2"), get_chip("tpu-v5p")
    plain = train_budget(cfg, chip, 8, 1024)
    ckpt = train_budget(cfg, chip, 8, 1024, recompute=True)
    assert plain["flops_per_step"] == pytest.approx(3 * plain["forward_flops"])
    assert ckpt["flops_per_step"] == pytest.approx(4 * plain["forward_flops"])
    assert ckpt["memory_per_chip"]["activation_bytes"] < plain["memory_per_chip"]["activation_bytes"] / 5
    assert plain["memory_per_chip"]["optimizer_bytes"] == 8 * cfg.params()
    assert saved_activation_elements(cfg, recompute=True) == cfg.d_model


@pytest.mark.parametrize("text,expected", [("", Parallelism()), ("model=4", Parallelism(1, 4)),
                                           ("data=2, model=8", Parallelism(2, 8))])
def test_parse_parallelism(text, expected):
    assert parse_parallelism(text) == expected


@pytest.mark.parametrize("text", ["model=0", "pipe=2", "model", "data=x"])
def test_bad_parallelism(text):
    with pytest.raises(PodsimError):
        parse_parallelism(text)


@pytest.mark.parametrize("cfg,par,batch,match", [
    (get_model("llama-2-7b"), Parallelism(model=3), 1, "does not divide n_heads"),
    (get_model("llama-2-7b"), Parallelism(data=3), 4, "does not divide batch"),
    (SEED.replace(d_ff=11000), Parallelism(model=16), 1, "does not divide d_ff=11000"),
    (SEED.replace(d_model=3072, n_heads=24, d_ff=12288), Parallelism(model=12), 1, "one must divide the other"),
])
def test_mesh_that_does_not_divide(cfg, par, batch, match):
    with pytest.raises(ModelError, match=match):
        decode_budget(cfg, V5E, batch=batch, context=0, par=par)


@pytest.mark.parametrize("kwargs,match", [(dict(context=[1, 2]), "one per request"), (dict(context=-1), ">= 0"),
                                          (dict(weight_dtype="fp16"), "dtype='fp16'"),
                                          (dict(new_tokens=0), "new_tokens")])
def test_bad_budget_input(kwargs, match):
    with pytest.raises(PodsimError, match=match):
        decode_budget(SEED, V5E, batch=3, **{"context": 0, **kwargs})


def test_critical_batch_and_max_batch_scale_with_the_data_axis():
    """Each data group is its own copy of the model: twice the groups, twice the batch at the crossover
    and twice the requests that fit (the per-chip arithmetic is unchanged)."""
    cfg, chip = get_model("llama-2-7b"), get_chip("h100")
    one = decode_budget(cfg, chip, batch=2, context=512)
    two = decode_budget(cfg, chip, batch=2, context=512, par=Parallelism(data=2))
    assert one["critical_batch"] is None and two["critical_batch"] is None  # KV-bound at 512 positions, any batch
    short = [decode_budget(cfg, chip, batch=2, context=64, par=Parallelism(data=d))["critical_batch"] for d in (1, 2)]
    assert short[1] == pytest.approx(2 * short[0], rel=1e-9)
    assert two["max_batch"] == 2 * one["max_batch"]
    per_request = 2 * 32 * 4096 * 2 * 513  # KV bytes of one more request at this context
    weights = cfg.params() * 2
    assert one["max_batch"] == math.floor((80 * 2**30 - weights) / per_request)


def test_moe_per_chip_reads_only_the_experts_its_group_routes_to():
    from simulator.workloads.simulate import simulate_decode

    cfg, chip = get_model("mixtral-8x7b"), get_chip("tpu-v5p")
    par = Parallelism(data=4)
    budget = decode_budget(cfg, chip, batch=8, context=256, par=par)
    sim = simulate_decode(cfg, chip, 8, 256, par)
    assert budget["lower_bound_s"] <= sim.env.now <= budget["upper_bound_s"] * 1.05


def test_batch_limits():
    with pytest.raises(PodsimError, match="batch=1000000000 must be an integer from 1 to 1,000,000"):
        decode_budget(SEED, V5E, batch=10**9, context=0)
    with pytest.raises(ModelError, match="batch=0 must be an integer from 1"):
        train_budget(get_model("gpt2"), V5E, 0, 128)


def test_moe_critical_batch_reads_every_expert_a_large_batch_touches():
    """The book: an MoE decode step turns compute-bound only once the batch pays for reading all E experts,
    about (total / active parameters) times the dense critical batch (E/k for expert-dominated models)."""
    cfg, chip = get_model("mixtral-8x7b"), get_chip("tpu-v5e")
    crit = decode_budget(cfg, chip, batch=1, context=0)["critical_batch"]
    # first principles at context 0: B * 2 N_active / peak = N_total * bytes / bandwidth
    peak, bw = chip.peak_flops_per_s("bf16"), chip.hbm_bandwidth_bytes_per_s
    book = cfg.params() * 2 / bw / (2 * cfg.params(active=True) / peak)
    assert crit == pytest.approx(book, rel=0.02)
    dense_like = peak / bw  # about what the k experts one token reads would give
    assert crit > 3 * dense_like
    at = decode_budget(cfg, chip, batch=round(crit), context=0)
    assert at["t_compute_s"] == pytest.approx(at["t_memory_s"], rel=0.01)
    below = decode_budget(cfg, chip, batch=round(0.8 * crit), context=0)
    assert below["bound"] == "memory"


def test_params_by_part_is_the_books_quarter_attention():
    """The book (transformers, question 1): D = 4096, F = 4D, N H = D, L = 64: attention 4 D^2 L, the three MLP
    matrices 3 D F L, so attention is 4D^2 / (4D^2 + 12D^2) = 1/4 of the layers' parameters."""
    d, f, layers, vocab = 4096, 4 * 4096, 64, 32000
    cfg = TransformerConfig(name="q1", d_model=d, d_ff=f, n_layers=layers, n_heads=32, vocab_size=vocab)
    parts = decode_budget(cfg, V5E)["params_by_part"]
    assert parts["attention"] == 4 * d * d * layers
    assert parts["mlp"] == 3 * d * f * layers
    assert parts["embeddings"] == 2 * d * vocab
    assert parts["attention_fraction"] == 0.25
    assert sum(v for k, v in parts.items() if k != "attention_fraction") == cfg.params()


def test_attention_flops_equal_the_projections_at_twice_d_model():
    """The book (transformers, question 5): 24 B T D N H = 12 B T^2 N H at T = 2D (8,192 for D = 4096), checked
    on the budget's own FLOP counts: a token at that context does as many attention FLOPs as projection FLOPs."""
    cfg = TransformerConfig(name="q5", d_model=4096, d_ff=16384, n_layers=2, n_heads=32, vocab_size=32000)
    s = decode_budget(cfg, V5E)["context_attention_equals_projections"]
    assert s == 2 * 4096
    at = decode_budget(cfg, V5E, batch=1, context=int(s) - 1)  # the new token attends to context + 1 = S positions
    projections = cfg.n_layers * 2 * 4 * 4096 * 4096
    assert at["attention_qk_flops"] + at["attention_av_flops"] == pytest.approx(projections, rel=1e-12)
