"""The calibrated GPU step's breakdown accounts for the step: its factors (the slowest pipeline stage's layers, head
and exposed collectives, its idle bubble, and the per-step terms) add up to the step time, forecast and bound, on
every published row -- no part counted twice (the head once per microbatch on its own stage, not on every stage)."""
from __future__ import annotations

import pytest

from simulator.workloads.plans.calibrated_gpu import calibrated_gpu_step
from simulator.workloads.plans.published_gpu import published_gpu_runs

RUNS = published_gpu_runs()


@pytest.mark.parametrize("run", RUNS, ids=[r.run for r in RUNS])
def test_factors_add_up_to_the_step(run):
    out = calibrated_gpu_step(run.cfg, run.chip, run.plan, run.opts, run.batch, run.seq, framework=run.framework,
                              attention=run.attention or None, dtype=run.dtype,
                              grad_reduce_bytes=run.grad_reduce_bytes)
    for part in (out, out["ideal"]):
        factors = dict(part["factors"])
        assert factors.pop("launch_s") == 0.0  # no fitted framework has a dispatch floor: nothing inside to split
        assert all(v >= 0 for v in factors.values())
        assert sum(factors.values()) == pytest.approx(part["step_time_s"], rel=1e-9)
    assert out["ideal"]["step_time_s"] < out["step_time_s"]
