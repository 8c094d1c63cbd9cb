"""2-D weight-stationary inference layouts (Pope et al. 2022; the book's inference chapter), and decode /
prefill on a chosen topology: closed forms computed here from the model's dimensions and the ring
formulas of REFERENCE.md, simulated steps against them and against the 1-D layout."""
import json
import math

import pytest

from simulator.errors import PodsimError
from simulator.frontend.cli import main
from simulator.hardware.specs import get_chip
from simulator.workloads.budget import Parallelism
from simulator.workloads.layout2d import budget_2d
from simulator.workloads.simulate import simulate_decode
from simulator.workloads.simulate2d import simulate_2d
from simulator.workloads.transformer import TransformerConfig, get_model

V5E = get_chip("tpu-v5e")
B, ALPHA, C = 4.5e10, 1e-6, 1.97e14  # v5e: ICI one-way bytes/s per link, hop latency, bf16 FLOP/s (REFERENCE)
# Multi-head attention with as many heads as the largest mesh (so the 1-D layout exists there too), plain MLP
MHA = TransformerConfig(name="mha", d_model=1024, d_ff=4096, n_layers=1, n_heads=256, head_dim=4, vocab_size=1024,
                        gated_mlp=False)


def ring(v: float, k: int) -> float:
    """Bidirectional ring AllGather (or ReduceScatter) of a V-byte array over k chips: (k-1)/k V/(2b) + steps."""
    return (k - 1) / k * v / (2 * B) + math.ceil((k - 1) / 2) * ALPHA if k > 1 else 0.0


def test_step_collectives_match_the_ring_formulas_per_op():
    cfg = get_model("llama-2-7b").replace(n_layers=2)  # D 4096, F 11008, 32 heads of 128, gated
    tokens, e, x, y = 8 * 512, 2, 8, 8
    out = budget_2d(cfg, V5E, 8, 0, Parallelism(1, 64), "2d:8x8", new_tokens=512, topology="torus:8x8")
    d_x, q_y, f_y = tokens * 4096 / x * e, tokens * 4096 / y * e, tokens * 11008 / y * e
    per_layer = [ring(3 * q_y, x), ring(q_y, x),  # Q, K, V scattered over X (MHA: kv = q), attention gathered
                 ring(d_x, y), ring(d_x, y),  # out projection: scatter over Y, next input gathered over Y
                 ring(2 * f_y, x), ring(f_y, x),  # gate and up scattered over X, activation gathered
                 ring(d_x, y), ring(d_x, y)]  # down projection
    first, head = ring(d_x, y), ring(tokens * 32000 / y * e, x)  # embedding gathered, logits scattered
    assert out["t_comm_s"] == pytest.approx(first + 2 * sum(per_layer) + head, rel=1e-9)
    logits = tokens * 32000 / y * e
    shares = ((x, 3 * q_y), (x, q_y), (y, d_x), (y, d_x), (x, 2 * f_y), (x, f_y), (y, d_x), (y, d_x))
    moved = 7 / 8 * d_x + 2 * sum((k - 1) / k * v for k, v in shares) + 7 / 8 * logits  # (k-1)/k V each
    assert out["per_chip"]["comm_bytes_per_step"] == pytest.approx(moved, rel=1e-9)
    assert out["per_chip"]["weight_bytes"] == pytest.approx(cfg.params() * 2 / 64)  # every matrix split 64 ways
    assert out["per_chip"]["flops_per_step"] == pytest.approx(out["flops_per_step"] / 64)


def test_2d_beats_1d_past_the_books_crossover_and_loses_before_it():
    """Per token and layer, 1-D moves V_1D = 4D (two AllReduces of D) over the model axis's two torus axes
    at once (4 links a chip); 2-D moves 4D/X over Y's links and F'/Y over X's (2 each), F' = 2q + 2kv + 2F.
    At the best grid V_2D = 2 sqrt(4 D F' / M), so 2-D is faster once 2 sqrt(4 D F' / M) / 2 < 4D / 4,
    i.e. M > 4 F'/D: 48 chips here (F' = 12 D). Simulated steps on 16 and 256 v5e chips fall either side."""
    f_prime = 2 * 1024 + 2 * 1024 + 2 * 4096
    crossover = 4 * f_prime / 1024
    assert crossover == 48
    for chips, topology in ((16, "torus:4x4"), (256, "torus:16x16")):
        par = Parallelism(1, chips)
        two = simulate_2d(MHA, V5E, 16, 0, par, "2d", new_tokens=512, trace=False, topology=topology)
        one = simulate_decode(MHA, V5E, 16, 0, par, new_tokens=512, trace=False, topology=topology)
        budget = budget_2d(MHA, V5E, 16, 0, par, "2d", new_tokens=512, topology=topology)
        faster = two.env.now < one.env.now
        assert faster == (chips > crossover), (chips, two.env.now, one.env.now)
        assert (budget["t_comm_s"] < budget["t_comm_1d_s"]) == (chips > crossover)
    assert two.summary()["layout"] == "2d:16x16" and one.env.now / two.env.now > 1.5  # about 2x at 256 chips


def test_simulated_2d_step_lies_between_the_budget_bounds():
    par = Parallelism(1, 64)
    sim = simulate_2d(MHA, V5E, 16, 0, par, "2d:8x8", new_tokens=1024, trace=False, topology="torus:8x8")
    b = budget_2d(MHA, V5E, 16, 0, par, "2d:8x8", new_tokens=1024, topology="torus:8x8")
    assert b["lower_bound_s"] <= sim.env.now <= 1.1 * b["upper_bound_s"]
    assert sim.env.now >= b["upper_bound_s"] * 0.9  # collectives run between ops: near the upper bound


def test_comm_bound_chip_counts_follow_the_books_algebra():
    """1-D: a layer's 2 T P_layer FLOPs over M chips at C against 4 T D bytes-elements at W: M_1D = 2 P W /
    (C 4 D e). 2-D at its best grid: compute T 2 P / (M C) equals 2 T sqrt(4 D F' / M) e / W at M_2D."""
    cfg = get_model("llama-3-8b")
    out = budget_2d(cfg, V5E, 8, 1024, Parallelism(1, 8), "2d", topology="torus:2x4")
    d, q, kv, f = 4096, 4096, 1024, 14336
    p_layer = d * (q + 2 * kv) + q * d + 3 * d * f
    w = 2 * B  # the book's W_ici: one wrapped axis, both ways
    m1 = 2 * p_layer * w / (C * 4 * d * 2)
    assert out["comm_bound_chips"]["1d"] == pytest.approx(m1, rel=1e-9)
    m2 = out["comm_bound_chips"]["2d"]
    f_prime = 2 * q + 2 * kv + 3 * f
    assert 2 * p_layer / (m2 * C) == pytest.approx(2 * math.sqrt(4 * d * f_prime / m2) * 2 / w, rel=1e-9)
    assert m2 < m1  # both below the heads: on one axis's bandwidth this model is communication-bound early


@pytest.mark.parametrize("layout, topology, match", [
    ("2d:3x8", "torus:8x8", "3 x 8 = 24 chips, not 64; the nearest valid choice is --layout 2d:8x8"),
    ("2d:8x8", "torus:4x16", "cannot be laid on the topology's axes.*nearest valid choice is --layout 2d:4x16"),
    ("2d:2x32", "torus:8x8", "cannot be laid on the topology's axes.*nearest valid choice is --layout 2d:1x64"),
    ("3d", "torus:8x8", "valid: 1d, 2d"),
])
def test_bad_2d_layouts_name_the_nearest_valid_choice(layout, topology, match):
    cfg = get_model("llama-3-70b")  # D 8192, F 28672, 64 heads, 8 KV heads
    with pytest.raises(PodsimError, match=match):
        budget_2d(cfg, V5E, 3, 128, Parallelism(1, 64), layout, topology=topology)


def test_a_grid_that_splits_neither_heads_nor_requests_is_refused():
    cfg = get_model("llama-3-70b")  # 64 heads not over 128 chips, Y <= 64 so X >= 2: 3 requests not over X
    with pytest.raises(PodsimError, match="no X x Y grid of model=128 chips .* 3 requests of a data group.*use "
                                          "--layout 1d or model=64"):
        budget_2d(cfg, V5E, 3, 128, Parallelism(1, 128), "2d:8x16", topology="torus:8x16")


def test_2d_refuses_mixture_of_experts_and_kv_sharding_flags(capsys):
    assert main(["model", "mixtral-8x7b", "--mesh", "model=8", "--layout", "2d", "--no-simulate"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "use --layout 1d" in err
    assert main(["model", "llama-2-7b", "--mesh", "model=8", "--layout", "2d", "--kv-sharding", "batch",
                 "--no-simulate"]) == 2
    assert "--kv-sharding batch is for --layout 1d" in capsys.readouterr().err


def test_model_cli_prefill_2d_json(capsys):
    assert main(["model", "llama-2-7b", "--mode", "prefill", "--mesh", "model=8", "--layout", "2d:2x4", "--batch",
                 "4", "--seq", "256", "--chip", "tpu-v5e", "--price-per-chip-hour", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["layout"], out["x"], out["y"], out["attention_split"]) == ("2d:2x4", 2, 4, "heads")
    assert out["lower_bound_s"] <= out["step_time_s"] and out["placement"] == {"data": [], "x": [0], "y": [1]}
    assert out["cost_per_step_usd"] == pytest.approx(8 * out["step_time_s"] / 3600)


# -- decode and prefill on a chosen topology ------------------------------------------------------------------------
def test_model_decode_takes_a_topology(capsys):
    def run(*extra):
        assert main(["model", "llama-2-7b", "--mode", "prefill", "--chip", "tpu-v5e", "--mesh", "model=4", "--batch",
                     "2", "--seq", "128", *extra, "--json"]) == 0
        return json.loads(capsys.readouterr().out)

    default, ring, line = run(), run("--topology", "ring:4"), run("--topology", "line:4")
    assert (ring["topology"], line["topology"]) == ("ring:4", "line:4")
    assert default["topology"] == "slice:2x2"  # the chip's own slice when none is given
    # a line of 4 is no ring: each AllReduce takes the one-way path round, about twice a ring's time
    assert line["step_time_s"] > ring["step_time_s"]
    assert run("--topology", "slice:2x2")["step_time_s"] == default["step_time_s"]
    assert main(["model", "llama-2-7b", "--mesh", "model=8", "--topology", "ring:4"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "8" in err


def test_gqa_attention_splits_requests_when_that_shards_the_kv_cache_further():
    """llama-3-70b has 8 KV heads. On a 4 x 8 grid, splitting heads over all 32 chips replicates each KV head on
    4 chips (1/8 of the cache a chip); splitting requests over X = 4 and heads over Y = 8 leaves 1/32."""
    cfg = get_model("llama-3-70b")
    out = budget_2d(cfg, V5E, 8, 4096, Parallelism(1, 32), "2d:4x8", topology="torus:4x8")
    assert out["attention_split"] == "requests"
    whole = 2 * 80 * 8 * 128 * 2 * 8 * 4096  # K and V, layers, KV heads, head_dim, bytes, requests, positions
    assert out["kv_cache_bytes"] == whole and out["per_chip"]["kv_cache_bytes"] == pytest.approx(whole / 32)


def test_crossovers_and_the_hbm_bound_chip_count_as_numbers():
    """The book's 1-D/2-D crossover N > 32 (F/D)(3/4)^2 (81 for F = 4D), podsim's F'/D and 4F'/D beside it,
    and the model-axis size past which 1-D's two AllReduces of [T, D] (4 T D e / W) outlast the layer's HBM
    reads (P_layer e_w + KV_layer) / (M W_hbm)."""
    cfg = get_model("llama-3-8b")
    batch, context = 8, 1024
    out = budget_2d(cfg, V5E, batch, context, Parallelism(1, 8), "2d", topology="torus:2x4")
    d, q, kv, f, layers = 4096, 4096, 1024, 14336, 32
    f_prime = 2 * q + 2 * kv + 3 * f
    crit = out["comm_bound_chips"]
    assert crit["crossover_1d_2d_book"] == pytest.approx(32 * f / d * 9 / 16)
    assert (crit["crossover_1d_2d"], crit["crossover_1d_2d_torus"]) == (pytest.approx(f_prime / d),
                                                                        pytest.approx(4 * f_prime / d))
    p_layer = d * (q + 2 * kv) + q * d + 3 * d * f
    kv_layer = 2 * kv * 2 * batch * (context + 1)  # K and V, bf16, every request's context and its new token
    w = 2 * B
    assert crit["1d_vs_hbm"] == pytest.approx((2 * p_layer + kv_layer) * w / (4 * batch * d * 2 * 8.2e11), rel=1e-9)
    assert layers == cfg.n_layers
