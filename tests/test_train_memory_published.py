"""Training memory against MaxText's published TPU runs (data/calibration/tpu_training_mfu.csv): the runs
that ran must fit, per chip, counted by hand here from the model's dimensions and the stated assumptions
(fp32 weights as their own master copy, bf16 gathers, MaxText's remat policies)."""
import pytest

from simulator.workloads.plans.memory import train_memory
from simulator.workloads.plans.published import published_runs

GiB = 2**30
RUNS = {r.run: r for r in published_runs()}


def by_hand(run) -> dict[str, float]:
    """Per chip, from first principles: 16 B of state per parameter sharded over a slice (fsdp x model; slices
    over DCN hold copies); saved activations
    per token per layer (full: the layer input; minimal: the input and the seven matmul outputs q, k, v, o,
    gate, up, down) over the chip's tokens, split by the model axis; three bf16 layers (two gathered, one of
    gradients) split by the model axis; the rest of a rebuilt layer; fp32 logits."""
    c, plan = run.cfg, run.plan
    d, f, q, kv, v = c.d_model, c.d_ff, c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim, c.vocab_size
    layer = 2 * d * q + 2 * d * kv + 3 * d * f + 2 * d  # q, k, v, o, gate, up, down and two norms
    params = c.n_layers * layer + 2 * v * d + d  # untied embedding and head, final norm
    chips, model = plan.size("fsdp") * plan.size("model"), plan.size("model")
    tokens = run.batch * run.seq / (plan.size("data") * plan.size("fsdp"))  # a model-axis group's tokens
    every = 4 * d + q + 2 * kv + 3 * f  # all a layer computes (the budget's saved_activation_elements)
    kept = d if run.opts.checkpoint == "full" else 3 * d + q + 2 * kv + 2 * f
    acts = kept * tokens * c.n_layers * 2 / model
    temp = 3 * layer * 2 / model + (every - kept) * tokens * 2 / model + tokens * v / model * 4
    return {"state": params * 16 / chips, "acts": acts, "temp": temp, "peak": params * 16 / chips + acts + temp}


FITS = ["v5e 16B x1", "v5e 32B x1", "v5e 32B x32", "v5e 64B x1", "v5e 64B x16", "v5p 64B v5p-128",
        "v5p 128B v5p-256", "v5p 256B v5p-1024", "v5p 512B v5p-1024"]


@pytest.mark.parametrize("name", FITS)
def test_published_runs_fit(name):
    run = RUNS[name]
    mem = train_memory(run.cfg, run.chip, run.plan, run.opts, run.batch, run.seq)
    hand = by_hand(run)
    assert mem["memory_per_chip_bytes"] == pytest.approx(hand["peak"], rel=1e-6)
    assert hand["peak"] <= run.chip.hbm_capacity_bytes and mem["fits"]


def test_v5e_32b_fit_rests_on_bf16_gathers():
    """Three fp32 layers of 32B (973 M parameters each, unsplit: model=1) are 10.9 GiB, bf16 5.4 GiB: counting
    the gathers at 4 B puts the run that MaxText published 3.8 GiB over a v5e's 16 GiB."""
    run = RUNS["v5e 32B x1"]
    hand = by_hand(run)
    layer = 4 * 8192 * 8192 + 3 * 8192 * 28672 + 2 * 8192
    assert hand["peak"] + 3 * layer * 2 > run.chip.hbm_capacity_bytes >= hand["peak"]


def test_the_runs_that_cannot_fit_here_and_why():
    """v5e 128B: the published script keeps matmul outputs in host memory (minimal_offloaded): in HBM they alone
    are over 16 GiB, the rest fits. v5p 32B: MaxText's minimal policy keeps 26,624 elements per token per layer
    on a model=4 chip, 28 sequences x 2048 tokens x 32 layers x 2 B = 91 GiB of saved matmul outputs; it ran
    because XLA's rematerialization recomputes past the policy when HBM is short, which this count does not."""
    big = RUNS["v5e 128B x1"]
    mem = train_memory(big.cfg, big.chip, big.plan, big.opts, big.batch, big.seq)
    per = mem["memory_per_chip"]
    assert per["activations_bytes"] > big.chip.hbm_capacity_bytes > per["peak_bytes"] - per["activations_bytes"]
    run = RUNS["v5p 32B v5p-128"]
    kept = (3 * 8192 + 8192 + 2 * 8192 + 2 * 28672) / 4
    acts = kept * 28 * 2048 * 32 * 2
    assert acts / GiB == pytest.approx(91.0, abs=0.05) and not train_memory(run.cfg, run.chip, run.plan, run.opts,
                                                                             run.batch, run.seq)["fits"]
