"""`podsim validate`'s whole-training-step family: published TPU MFU against the calibrated step.

Each published run (``tpu_training_mfu.csv``: MaxText's v5e and v5p tables, PaLM on v4) is priced by
`simulator.workloads.plans.calibrated` and turned into the MFU its publication would print (each
counts model FLOPs its own way); fitted and held-out rows are reported apart, as every family is.
"""
from __future__ import annotations

from simulator.frontend.validate import Case
from simulator.workloads.plans.calibrated import calibrated_train_step
from simulator.workloads.plans.published import published_runs

FAMILY = "Training step MFU, TPU (published runs)"

NOTE = ("whole training steps (`podsim model --mode train --calibrated`): six constants fitted to 9 published "
        "runs (MXU share and its shape dependence, flash attention's share, what overlapped FSDP collectives still "
        "cost, DCN efficiency and per-ring-step cost), 22 held out. Worst held out: v5p 512B with full remat "
        "(MaxText prints 64% MFU, i.e. 85% of peak counting the recomputed forward; podsim's full remat plus exposed "
        "tensor-parallel AllReduces gives 53%) and v5e 32B (7-8% slow on every slice count: MaxText prints 6-7 points "
        "more MFU for 32B than for 16B or 64B, which podsim's per-matmul and per-layer costs do not reproduce)")


def training_cases() -> list[Case]:
    """One case per published run: its MFU against the calibrated step's, in the publication's FLOP count."""
    cases = []
    for run in published_runs():
        out = calibrated_train_step(run.cfg, run.chip, run.plan, run.opts, run.batch, run.seq, check_memory=False)
        predicted = run.predicted_published_mfu(out["step_time_s"])
        cases.append(Case(FAMILY, run.run, run.published_mfu * 100, predicted * 100, "% MFU", run.held_out))
    return cases
