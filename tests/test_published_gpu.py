"""Published GPU training runs as podsim configurations, and the validate family built on them."""
from __future__ import annotations

import csv
import math

import pytest

from simulator.hardware.calibration import DATA
from simulator.workloads.plans.published_gpu import framework_of, published_gpu_runs


def _by_name() -> dict[str, object]:
    return {r.run: r for r in published_gpu_runs()}


def test_every_row_loads_and_its_layout_multiplies_to_its_gpus() -> None:
    with (DATA / "calibration" / "gpu_training.csv").open() as f:
        rows = list(csv.DictReader(f))
    runs = published_gpu_runs()
    assert len(runs) == len(rows) >= 40
    for row, run in zip(rows, runs, strict=True):
        assert run.plan.chips == int(row["gpus"]), run.run
        assert row["set"] in ("fit", "held_out") and row["url"].startswith("http")
    assert {r.framework for r in runs} >= {"megatron-lm", "megatron-core", "llm-foundry", "torchtitan"}


def test_megatron_flops_convention_by_hand() -> None:
    run = _by_name()["megatron2021 gpt-1.7b 32xa100"]
    b, s, l_, h, v = 512, 2048, 24, 2304, 51200
    flops = 96 * b * s * l_ * h * h * (1 + s / (6 * h) + v / (16 * l_ * h))  # Narayanan et al. eq. 3
    assert run.predicted(1.0) == pytest.approx(flops / 32 / 1e12)


def test_tokens_per_gpu_and_mfu_conventions() -> None:
    runs = _by_name()
    foundry = next(r for n, r in runs.items() if n.startswith("foundry"))
    assert foundry.predicted(2.0) == pytest.approx(foundry.batch * foundry.seq / (foundry.plan.chips * 2.0))
    korth = next(r for n, r in runs.items() if n.startswith("megatron2022"))
    b, s, l_, h, v = korth.batch, korth.seq, korth.cfg.n_layers, korth.cfg.d_model, korth.cfg.vocab_size
    flops = 72 * b * s * l_ * h * h * (1 + s / (6 * h) + v / (12 * l_ * h))
    assert korth.predicted(1.0) == pytest.approx(flops / (korth.plan.chips * 312e12))  # a fraction of peak


def test_framework_columns_map_to_the_constants_names() -> None:
    assert framework_of("nemo 24.07 (megatron-core)") == "megatron-core"
    assert framework_of("megatron-core r0.8.0") == "megatron-core"
    assert framework_of("llm-foundry (composer, pytorch fsdp)") == "llm-foundry"
    assert framework_of("meta internal (pytorch)") == "llama3-meta"


def test_distributed_optimizer_and_shard_grad_op_read_as_podsim_options() -> None:
    runs = _by_name()
    mcore = runs["mcore2024 gpt-1.7b 48xh100"]  # DP 48 with Megatron's distributed optimizer (ZeRO-1)
    assert mcore.plan.size("fsdp") == 48 and mcore.plan.size("data") == 1 and mcore.opts.zero == 1
    assert mcore.opts.tp_overlap  # the README says --tp-comm-overlap
    sgo = next(r for r in runs.values() if r.row["zero"] == "2" and "fsdp" in r.row["framework"])
    assert sgo.opts.zero == 3 and not sgo.opts.reshard_after_forward  # FSDP SHARD_GRAD_OP


def test_a_runs_own_hbm_reaches_the_kernel_model() -> None:
    from simulator.workloads.plans.calibrated_gpu import require_kernels

    titan = next(r for n, r in _by_name().items() if n.startswith("torchtitan"))
    assert titan.chip.hbm_bandwidth_bytes_per_s == 2.4e12  # H100 96GB HBM2e, as the source ran it
    assert require_kernels(titan.chip).hbm_bytes_per_s == 2.4e12


def test_validate_family_agrees_with_the_fit_report() -> None:
    """The fit report in train_calibration.json, recomputed from validate's own cases."""
    from simulator.frontend.validate_train import gpu_training_cases
    from simulator.hardware.train_calibration import gpu_fit_summary

    cases = gpu_training_cases()
    report = gpu_fit_summary()["fit"]
    for label, held in (("fit", False), ("held_out", True)):
        mine = [c for c in cases if c.held_out == held]
        geomean = math.exp(sum(abs(math.log(c.predicted / c.measured)) for c in mine) / len(mine)) - 1
        assert geomean == pytest.approx(report[label]["geomean_error"], rel=1e-9)
        assert sorted(c.name for c in mine) == sorted(report[label]["runs"])
