"""Parallelism plans held against the book's closed forms, each computed here from first principles.

C = peak bf16 FLOP/s, W = bytes a chip moves per second along an axis (both ways round a wrapped
ring: 2 x the one-way link bandwidth), alpha = C / W. Small synthetic models keep the runs short; the
tiny vocabulary keeps the output layer from skewing the per-layer arithmetic.
"""
import math

import pytest

from simulator.hardware.specs import get_chip
from simulator.workloads.budget import Parallelism, decode_budget
from simulator.workloads.plans import PlanError, TrainOptions, parse_plan_mesh, train_plan
from simulator.workloads.plans.schedules import tasks
from simulator.workloads.simulate import simulate_decode
from simulator.workloads.transformer import TransformerConfig, get_model

V5P, V5E = get_chip("tpu-v5p"), get_chip("tpu-v5e")
C = V5P.peak_bf16_flops_per_s
W = 2 * V5P.ici_bandwidth_bytes_per_s  # a wrapped ring, both ways
MLP_HEAVY = TransformerConfig(name="mlp-heavy", d_model=2048, d_ff=8192, n_layers=8, n_heads=16, vocab_size=256,
                              tied_embeddings=True)
LAYER_PARAMS = 4 * 2048**2 + 3 * 2048 * 8192  # attention Q, K, V, O + gated MLP (norms aside)


def _train(cfg, mesh, batch, seq, topology=None, chip=V5P, **opts):
    return train_plan(cfg, chip, batch, seq, parse_plan_mesh(mesh), TrainOptions(**opts), topology, trace=False)


# -- training state memory --------------------------------------------------------------------------------------

def test_training_state_is_sixteen_bytes_per_parameter_sharded_as_zero_says():
    cfg = get_model("llama-3-70b")
    p = cfg.params()
    full = train_plan(cfg, V5P, 64, 4096, parse_plan_mesh("fsdp=8,model=8"), TrainOptions(checkpoint="full"),
                      simulate=False)
    assert (full["params_bytes"], full["grads_bytes"], full["optimizer_bytes"]) == (2 * p, 2 * p, 12 * p)
    chip = full["memory_per_chip"]
    assert chip["params_bytes"] + chip["grads_bytes"] + chip["optimizer_bytes"] == pytest.approx(16 * p / 64)
    zero1 = train_plan(cfg, V5P, 64, 4096, parse_plan_mesh("fsdp=8,model=8"), TrainOptions(zero=1, master_copy=False),
                       simulate=False)["memory_per_chip"]
    assert zero1["params_bytes"] + zero1["grads_bytes"] == pytest.approx(4 * p / 8)  # model-sharded only
    assert zero1["optimizer_bytes"] == pytest.approx(8 * p / 64)
    # the case: data=8, model=8 replicates the optimizer and does not fit a 96 GiB v5p; fsdp does
    replicated = train_plan(cfg, V5P, 64, 4096, parse_plan_mesh("data=8,model=8"), TrainOptions(checkpoint="full"),
                            simulate=False)
    assert not replicated["fits"] and full["fits"]
    assert full["min_chips"] == math.ceil(full["train_state_bytes"] / (96 * 2**30))


def test_activations_are_k_saved_tensors_per_layer():
    out = _train(MLP_HEAVY, None, 4, 512, checkpoint=2)
    assert out["activations_bytes"] == 2 * (4 * 512) * 2048 * 2 * 8  # K T D 2 L


# -- data parallelism and FSDP turn compute-bound at a per-chip batch of C / W ------------------------------------

def _backward_per_layer_s(tokens):
    return 4 * tokens * LAYER_PARAMS / C


def test_data_parallel_critical_batch_is_c_over_w():
    out = _train(MLP_HEAVY, "data=4", 4, 512, topology="ring:4")
    assert out["critical_batch_per_chip"]["data"] == pytest.approx(C / W)  # 2550 on v5p


@pytest.mark.parametrize("axis", ["data", "fsdp"])
def test_compute_bound_above_c_over_w_and_communication_bound_below(axis):
    v = LAYER_PARAMS * 2  # one layer's bf16 weights (and gradients)
    ring = 3 / 4 * v / W  # AllGather on a bidirectional ring of 4: each chip receives 3/4 of V, both ways at once
    per_layer = {"data": 2 * ring, "fsdp": 3 * ring}[axis]  # AllReduce; or AllGather, AllGather, ReduceScatter
    tail = {"data": 2 * ring, "fsdp": 3 * ring}[axis]  # the first gathers and last reduction cannot hide
    above = _train(MLP_HEAVY, f"{axis}=4", 4 * 10, 512, topology="ring:4")  # 5120 tokens a chip, 2 x C / W
    assert above["exposed_comm_s"][axis] == pytest.approx(tail, rel=0.05)
    below = _train(MLP_HEAVY, f"{axis}=4", 4 * 1, 512, topology="ring:4")  # 512 tokens a chip, C / (5 W)
    assert below["exposed_comm_s"][axis] > 3 * tail
    if axis == "data":  # reductions queue behind each other: all but the backward's overlap is exposed
        b = _backward_per_layer_s(512)
        assert below["exposed_comm_s"]["data"] == pytest.approx(8 * (per_layer - b) + b, rel=0.1)
    assert below["step_time_s"] == pytest.approx(below["closed_form_s"], rel=0.05)
    assert below["simulated_memory_peak_bytes"] == pytest.approx(below["memory_per_chip_bytes"], rel=0.03)


def test_fsdp_plus_model_minimum_batch_is_2_alpha_squared_over_f():
    """The book (training chapter): the discriminant of the FSDP/model split vanishes at a per-chip batch of
    alpha^2 / (M_X M_Y F) in the current edition (max of the two terms) -- alpha^2 / (2F) with FSDP over two
    axes and the model over one; the older edition's 4 alpha^2 / (F M_X M_Y) beside it."""
    cfg = TransformerConfig(name="wide", d_model=2048, d_ff=16384, n_layers=2, n_heads=16, vocab_size=256,
                            tied_embeddings=True)
    out = train_plan(cfg, V5P, 64, 1024, parse_plan_mesh("fsdp=16,model=4"), TrainOptions(), "torus:4x4x4",
                     simulate=False)
    alpha = C / W
    assert out["critical_batch_per_chip"]["fsdp"] == pytest.approx(alpha / 2)  # fsdp over two axes
    assert out["critical_batch_per_chip"]["fsdp+model"] == pytest.approx(alpha**2 / (16384 * 2 * 1))
    assert out["critical_batch_per_chip_older_edition"]["fsdp+model"] == pytest.approx(4 * alpha**2 / (16384 * 2))


def test_fsdp_plus_model_hides_its_communication_only_above_the_minimum_batch():
    cfg = TransformerConfig(name="wide", d_model=1024, d_ff=20480, n_layers=4, n_heads=16, vocab_size=256,
                            tied_embeddings=True)
    least = (C / W) ** 2 / 20480  # one axis each: alpha^2 / F tokens per chip (about 318)
    seq = 1024
    big = _train(cfg, "fsdp=4,model=4", 4 * math.ceil(4 * least * 16 / 4 / seq), seq, "torus:4x4", tp_overlap=True)
    small = _train(cfg, "fsdp=4,model=4", 4, 256, "torus:4x4", tp_overlap=True)  # 64 tokens a chip
    assert big["tokens_per_chip"] > 3 * least > 12 * small["tokens_per_chip"]
    assert sum(big["exposed_comm_s"].values()) < 0.2 * big["step_time_s"]
    assert sum(small["exposed_comm_s"].values()) > 0.5 * small["step_time_s"]


# -- pipelines -----------------------------------------------------------------------------------------------

UNIFORM = TransformerConfig(name="uniform", d_model=1024, d_ff=8192, n_layers=8, n_heads=8, vocab_size=128,
                            tied_embeddings=True)


@pytest.mark.parametrize("schedule,v", [("gpipe", 1), ("1f1b", 1), ("interleaved", 2)])
def test_pipeline_bubble_is_p_minus_1_over_m_plus_p_minus_1(schedule, v):
    p, m = 4, 8
    out = _train(UNIFORM, f"pipeline={p}", 4 * m, 1024, "ring:4", microbatches=m, schedule=schedule)
    book = (p - 1) / (v * m + p - 1)
    assert out["bubble_fraction"] == pytest.approx(book, abs=0.03)
    assert out["closed_form"]["bubble_fraction"] == pytest.approx(book, abs=0.005)
    assert out["step_time_s"] == pytest.approx(out["closed_form_s"], rel=0.06)
    # the stash the closed form counts (M, p or Megatron's warm-up microbatches) is what the chips hold
    assert out["simulated_memory_peak_bytes"] == pytest.approx(out["memory_per_chip_bytes"], rel=0.03)


def test_1f1b_stashes_p_microbatches_where_gpipe_stashes_m():
    gpipe, one = (_train(UNIFORM, "pipeline=4", 32, 256, "ring:4", microbatches=16, schedule=s) for s in
                  ("gpipe", "1f1b"))
    assert gpipe["memory_per_chip"]["activations_bytes"] == pytest.approx(
        16 / 4 * one["memory_per_chip"]["activations_bytes"])
    assert gpipe["step_time_s"] == pytest.approx(one["step_time_s"], rel=0.05)


def test_every_schedule_runs_each_microbatch_forward_then_backward_once():
    for schedule, v in (("gpipe", 1), ("1f1b", 1), ("interleaved", 2)):
        for rank in range(4):
            order = tasks(schedule, 4, rank, 8, v)
            assert sorted(order) == sorted((k, i, c) for k in "FB" for i in range(8) for c in range(v))
            assert all(order.index(("F", i, c)) < order.index(("B", i, c)) for i in range(8) for c in range(v))


# -- inference: KV sharding and weight-only quantization --------------------------------------------------------

def test_sharding_kv_beyond_the_heads_halves_its_bytes_and_doubles_the_batch():
    cfg = get_model("llama-3-70b")  # 8 KV heads on a model axis of 16: heads alone replicate each twice
    kv_per_position = 2 * 80 * 8 * 128 * 2
    weights = cfg.params() * 2 / 16
    heads = decode_budget(cfg, V5E, 8, 8192, Parallelism(1, 16), kv_sharding="heads")
    auto = decode_budget(cfg, V5E, 8, 8192, Parallelism(1, 16), kv_sharding="auto")
    history = kv_per_position * 8 * 8192
    bw = V5E.hbm_bandwidth_bytes_per_s
    assert auto["per_chip"]["kv_cache_bytes"] == pytest.approx(history / 16)
    assert heads["per_chip"]["kv_cache_bytes"] == pytest.approx(2 * history / 16)
    growth = kv_per_position * 8
    streamed = (cfg.params() - cfg.vocab_size * cfg.d_model) * 2 / 16  # the input embedding is looked up, not read
    assert auto["t_memory_s"] == pytest.approx((streamed + (history + growth) / 16) / bw, rel=0.001)
    assert auto["max_batch"] == (16 * 2**30 - weights) // (kv_per_position * 8193 / 16)
    assert auto["max_batch"] >= 2 * heads["max_batch"]


@pytest.mark.parametrize("how", ["heads", "sequence", "auto"])
def test_simulated_decode_with_sharded_kv_sits_between_its_bounds(how):
    cfg = TransformerConfig(name="gqa", d_model=2048, d_ff=8192, n_layers=4, n_heads=16, n_kv_heads=2,
                            vocab_size=1024)
    par = Parallelism(1, 8)
    budget = decode_budget(cfg, V5E, 8, 32768, par, kv_sharding=how)
    sim = simulate_decode(cfg, V5E, 8, 32768, par, kv_sharding=how, trace=False)
    assert budget["lower_bound_s"] * 0.999 <= sim.env.now <= budget["upper_bound_s"] * 1.1
    kv_read = sim.system.trace.bytes_by_interface["hbm_read"] - budget["weight_bytes_read_per_step"]  # all 8 chips
    share = 1 / 8 if how != "heads" else 1 / 2  # two KV heads: each on four of the eight chips, or split
    assert kv_read == pytest.approx(share * budget["kv_cache_bytes"] * 8, rel=0.01)  # summed over the 8 chips


def test_int8_weights_with_bf16_math_halve_the_critical_batch():
    cfg = get_model("llama-3-70b")
    book = V5E.peak_bf16_flops_per_s / (2 * V5E.hbm_bandwidth_bytes_per_s)  # C / (2 W_hbm) = 120 on v5e
    out = decode_budget(cfg, V5E, 1, 0, weight_dtype="int8", compute_dtype="bf16")
    assert out["critical_batch"] == pytest.approx(book, rel=0.01)
    assert round(book) == 120


# -- bad plans: one line naming the nearest valid choice ---------------------------------------------------------

@pytest.mark.parametrize("mesh,opts,batch,seq,match", [
    ("pipeline=64", {}, 8, 1024, "nearest valid choice is pipeline=12"),
    ("model=5", {}, 8, 1024, "nearest valid choice is model=4"),
    ("expert=2", {}, 8, 1024, "needs a mixture-of-experts model"),
    ("data=3", {}, 8, 1024, "nearest valid batch is 9"),
    ("data=2", {"microbatches": 3}, 8, 1024, "nearest valid choice is --microbatches 2"),
    ("sequence=3", {}, 8, 1024, "nearest valid choice is sequence=2"),
    ("pipeline=2", {"microbatches": 1, "schedule": "interleaved"}, 8, 1024, "multiple of pipeline=2"),
])
def test_bad_plans_name_the_nearest_valid_choice(mesh, opts, batch, seq, match):
    with pytest.raises(PlanError, match=match):
        train_plan(get_model("gpt2"), V5E, batch, seq, parse_plan_mesh(mesh), TrainOptions(**opts), simulate=False)


@pytest.mark.parametrize("mesh,opts,match", [
    ("pipeline=5", {}, "nearest valid choice is pipeline=4, or --no-simulate"),
    ("pipeline=4", {"microbatches": 4, "schedule": "interleaved"}, "nearest valid choice is 3 virtual"),
])
def test_uneven_stages_are_refused_by_the_simulation_only(mesh, opts, match):
    """12 layers over 5 stages (or 4 x 2 virtual ones) cannot be simulated, but the closed form prices them: its
    first device's chunks hold one layer more, so the step is no faster than the even stages' next size up."""
    cfg, plan = get_model("gpt2"), parse_plan_mesh(mesh)
    with pytest.raises(PlanError, match=match):
        train_plan(cfg, V5E, 8, 1024, plan, TrainOptions(**opts), simulate=True)
    uneven = train_plan(cfg, V5E, 8, 1024, plan, TrainOptions(**opts), simulate=False)
    assert uneven["closed_form_s"] > 0 and uneven["bubble_fraction"] > 0


# -- expert axis, multislice, GPU nodes, ZeRO stages -------------------------------------------------------------

def test_expert_axis_splits_the_routed_experts_and_pays_alltoalls():
    cfg = get_model("mixtral-8x7b").replace(n_layers=2, name="mixtral-2")
    d, e = cfg.d_model, cfg.n_experts
    routed = e * 3 * d * cfg.d_ff  # gated experts, no biases
    dense = cfg.params() - 2 * routed  # attention, norms, router and embeddings of the two layers
    out = _train(cfg, "expert=4,model=2", 16, 1024, checkpoint="full")
    assert out["memory_per_chip"]["params_bytes"] == pytest.approx((dense / 2 + 2 * routed / 8) * 2)
    assert out["exposed_comm_s"]["expert"] > 0
    assert out["step_time_s"] == pytest.approx(out["closed_form_s"], rel=0.15)


def test_multislice_puts_the_outer_data_axis_on_dcn():
    out = _train(get_model("gpt2"), "data=2,fsdp=4", 16, 1024, "multislice:2:2x2", chip=V5E)
    assert out["critical_batch_per_chip"]["data"] == pytest.approx(V5E.peak_bf16_flops_per_s /
                                                                   V5E.dcn_bandwidth_bytes_per_s)
    assert out["exposed_comm_s"]["data"] > 10 * out["exposed_comm_s"]["fsdp"]  # DCN is 14x slower than ICI here
    assert out["step_time_s"] == pytest.approx(out["closed_form_s"], rel=0.05)


def test_gpu_nodes_keep_the_model_axis_on_nvlink():
    from simulator.workloads.plans.links import axis_links, build_system

    h100 = get_chip("h100")
    system, mesh = build_system(h100, parse_plan_mesh("data=2,model=4"), "nodes:2:4", trace=False)
    links = axis_links(mesh, system.graph, h100)
    assert [s.bandwidth_bytes_per_s for s in links["model"].stages] == [18 * 25e9]  # the GPU's NVLink egress
    assert [s.bandwidth_bytes_per_s for s in links["data"].stages] == [50e9]  # one IB NIC per GPU
    out = _train(get_model("gpt2"), "data=2,model=4", 16, 1024, "nodes:2:4", chip=h100)
    assert out["step_time_s"] == pytest.approx(out["closed_form_s"], rel=0.15)


@pytest.mark.parametrize("zero", [1, 2])
def test_zero_1_and_2_shard_state_and_gather_the_updated_weights(zero):
    out = _train(UNIFORM, "fsdp=4", 8, 512, "ring:4", zero=zero)
    chip, p = out["memory_per_chip"], UNIFORM.params()
    assert chip["params_bytes"] == pytest.approx(2 * p)
    assert chip["grads_bytes"] == pytest.approx(2 * p / (4 if zero == 2 else 1))
    assert chip["optimizer_bytes"] == pytest.approx(12 * p / 4)
    regather = 3 / 4 * 2 * p / W  # AllGather of the whole model's bf16 weights over a bidirectional ring of 4
    assert out["exposed_comm_s"]["fsdp"] >= regather
