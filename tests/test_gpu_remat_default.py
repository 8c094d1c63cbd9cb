"""A published GPU row that does not state its recompute policy is read without recompute: Megatron-LM's
``--recompute-granularity`` and Megatron-Core's ``TransformerConfig.recompute_granularity`` default to None
(core_v0.8.0: ``training/arguments.py``, ``transformer/transformer_config.py``), and none of the Megatron-Core,
NeMo or Megatron-Bridge sources names one. So such a row's forecast recomputes nothing: no forward pass, no
attention kernel again."""
from __future__ import annotations

import csv

from simulator.workloads.plans.published_gpu import CSV_PATH, predict_run, published_gpu_runs


def test_rows_without_a_stated_policy_recompute_nothing():
    with CSV_PATH.open(newline="") as f:
        blank = {r["run"] for r in csv.DictReader(f) if not r["remat"].strip()}
    runs = [r for r in published_gpu_runs() if r.run in blank]
    assert any(r.run.startswith("mcore2024") for r in runs) and any(r.run.startswith("nemo2407") for r in runs)
    for run in runs:
        assert run.opts.checkpoint == "none", run.run
        assert predict_run(run)["factors"]["recompute_s"] == 0.0, run.run
