"""The size trend of per-GPU throughput (issue 27): within each published series of GPU training runs (one source,
chip, GPU count, sequence and dtype; three model sizes or more), the calibrated forecast must order throughput by
model size the way the publication does -- the sign of the rank correlation of per-GPU FLOP/s with model size.

The oracle is the published rows themselves (gpu_training.csv's measured column), ranked here with numpy; the
forecast is each row's calibrated step (`predict_run`) in the source's own metric. Tokens/s rows are weighted by
their model's FLOPs per token so sizes compare; TFLOP/s rows are compared as printed."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.workloads.plans.published_gpu import predict_run, published_gpu_runs
from simulator.workloads.plans.train import model_flops


def _rank_correlation(x: list[float], y: list[float]) -> float:
    rx, ry = np.argsort(np.argsort(x)), np.argsort(np.argsort(y))
    return float(np.corrcoef(rx, ry)[0, 1])


def _series() -> dict[str, list[tuple[float, float, float]]]:
    out: dict[str, list[tuple[float, float, float]]] = {}
    for run in published_gpu_runs():
        if run.metric not in ("tflops_per_gpu", "tokens_per_s_per_gpu"):
            continue
        weight = 1.0 if run.metric == "tflops_per_gpu" else model_flops(run.cfg, 1, run.seq) / run.seq
        gpus = "" if run.metric == "tflops_per_gpu" else f" {run.plan.chips} seq {run.seq}"
        key = f"{run.run.split()[0]} {run.chip.name}{gpus} {run.dtype}"
        forecast = run.predicted(predict_run(run)["step_time_s"])
        out.setdefault(key, []).append((float(run.cfg.params()), run.measured * weight, forecast * weight))
    return {k: v for k, v in out.items() if len({r[0] for r in v}) >= 3}


SERIES = _series()


def test_the_series_are_there():
    """Megatron-Core's H100 weak-scaling table (9 sizes, TFLOP/s per GPU) among them."""
    assert len(SERIES["mcore2024 h100 bf16"]) == 9 and len(SERIES) >= 6


@pytest.mark.parametrize("name", sorted(SERIES))
def test_forecast_orders_sizes_as_published(name):
    rows = sorted(SERIES[name])
    size = [r[0] for r in rows]
    measured = _rank_correlation(size, [r[1] for r in rows])
    forecast = _rank_correlation(size, [r[2] for r in rows])
    assert np.sign(forecast) == np.sign(measured), (name, measured, forecast)
