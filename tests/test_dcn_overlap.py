"""The cross-slice gradient AllReduce: the ideal simulated step hides what it can behind the backward pass, the
calibrated step (fitted to MaxText's published multislice runs) leaves it exposed after the backward -- the
published MFU falls with the slice count by far more than the whole AllReduce takes at the DCN rate, which a
hidden AllReduce could not do. Closed forms from the ring formula: 2 (n - 1)/n x bytes / DCN rate per chip."""
import pytest

from simulator.hardware.specs import get_chip
from simulator.hardware.train_calibration import IDEAL
from simulator.workloads.plans import TrainOptions, parse_plan_mesh, train_plan
from simulator.workloads.plans.calibrated import calibrated_train_step
from simulator.workloads.plans.published import published_runs
from simulator.workloads.transformer import get_model

V5E = get_chip("tpu-v5e")
GPT2 = get_model("gpt2")


def ring_s(nbytes: float, n: int) -> float:
    return 2 * (n - 1) / n * nbytes / V5E.dcn_bandwidth_bytes_per_s


def test_calibrated_step_adds_the_whole_dcn_allreduce_the_ideal_simulation_hides_part_of_it():
    grads = GPT2.params() / 4 * 2  # bf16 gradient shard of fsdp=4
    whole = ring_s(grads, 2)
    one = calibrated_train_step(GPT2, V5E, parse_plan_mesh("fsdp=4"), TrainOptions(), 8, 1024, (2, 2),
                                constants=IDEAL, check_memory=False)
    two = calibrated_train_step(GPT2, V5E, parse_plan_mesh("data=2,fsdp=4"), TrainOptions(), 16, 1024, (2, 2),
                                constants=IDEAL, check_memory=False)
    assert two["factors"]["dcn_s"] == pytest.approx(whole, rel=1e-9)
    assert two["step_time_s"] - one["step_time_s"] == pytest.approx(whole, rel=1e-9)  # after the backward: all of it
    sim = train_plan(GPT2, V5E, 16, 1024, parse_plan_mesh("data=2,fsdp=4"), TrainOptions(), "multislice:2:2x2",
                     trace=False)
    # per layer, the shard's AllReduce starts when that layer's backward ends: the earlier layers' run beneath
    # the later layers' backward, so the step waits on less than the AllReduce's own duration
    assert 0 < sim["exposed_comm_s"]["data"] < 0.9 * whole


@pytest.mark.parametrize("model", ["16B", "64B"])
def test_published_multislice_mfu_falls_by_more_than_a_hidden_allreduce_allows(model):
    """MaxText v5e, 1 and 32 slices of 256 chips, the same per-chip work: the step grows by the published MFU
    ratio. The whole fp32 gradient shard (N / 256 x 4 B) AllReduced over 32 slices at the full DCN rate takes a
    fraction of that growth; hidden behind a backward pass of seconds, it would cost nothing."""
    runs = {r.plan.size("data"): r for r in published_runs() if r.run.startswith(f"v5e {model} x")}
    one, many = runs[1], runs[32]
    step_one = one.published_flops() / (one.plan.chips * V5E.peak_flops_per_s() * one.published_mfu)
    growth = step_one * (one.published_mfu / many.published_mfu - 1)
    allreduce = ring_s(one.cfg.params() / 256 * 4, 32)
    assert growth > 3 * allreduce and allreduce < 0.1 * step_one
