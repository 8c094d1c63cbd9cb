"""Published TPU training runs (``data/calibration/tpu_training_mfu.csv``) as podsim configurations.

Each row names a model's dimensions, the chips, slices and mesh, the batch and sequence, the remat
policy, the published MFU and whether the fit uses it (``set``: fit or held_out). Publications count
model FLOPs their own way (``flops_convention``): MaxText 6 N per token (N: every parameter, both
embedding tables included) plus causal attention 6 L h d S; PaLM 6 N plus 12 L h d S (attention
counted without the causal half). `predicted_published_mfu` turns a predicted step time into the MFU
the publication would have printed, so the comparison is like for like.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from typing import Any

from simulator.hardware.calibration import DATA
from simulator.hardware.specs import ChipSpec, get_chip
from simulator.workloads.plans.layout import MeshPlan, TrainOptions
from simulator.workloads.transformer import TransformerConfig

CSV_PATH = DATA / "calibration" / "tpu_training_mfu.csv"


@dataclass(frozen=True)
class PublishedRun:
    """One published training configuration and its MFU."""

    run: str
    chip: ChipSpec
    cfg: TransformerConfig
    plan: MeshPlan
    opts: TrainOptions
    batch: int
    seq: int
    convention: str
    published_mfu: float
    held_out: bool
    row: dict[str, str]

    def published_flops(self) -> float:
        """Model FLOPs of one step as the publication counts them."""
        cfg, tokens, s = self.cfg, self.batch * self.seq, self.seq
        attention = cfg.n_layers * cfg.q_width * s * tokens
        return 6 * cfg.params() * tokens + (6 if self.convention == "maxtext" else 12) * attention

    def predicted_published_mfu(self, step_time_s: float) -> float:
        """The MFU the publication would report for a step of ``step_time_s``."""
        return self.published_flops() / (self.plan.chips * self.chip.peak_flops_per_s() * step_time_s)


def _run(r: dict[str, str]) -> PublishedRun:
    cfg = TransformerConfig(name=r["model"], d_model=int(r["d_model"]), d_ff=int(r["d_ff"]),
                            n_layers=int(r["n_layers"]), n_heads=int(r["n_heads"]), n_kv_heads=int(r["n_kv_heads"]),
                            head_dim=int(r["head_dim"]), vocab_size=int(r["vocab"]), gated_mlp=r["gated_mlp"] == "1",
                            tied_embeddings=r["tied_embeddings"] == "1", weight_elem_bytes=float(r["weight_bytes"]))
    plan = MeshPlan({"data": int(r["slices"]), "fsdp": int(r["fsdp"]), "model": int(r["model_axis"])})
    # fp32 weights (MaxText's default) are their own master copy: 4 + 4 + 8 bytes of state per parameter
    opts = TrainOptions(checkpoint=r["remat"], master_copy=float(r["weight_bytes"]) < 4)
    return PublishedRun(r["run"], get_chip(r["chip"]), cfg, plan, opts, int(r["batch"]), int(r["seq"]),
                        r["flops_convention"], float(r["published_mfu"]), r["set"] == "held_out", r)


def published_runs() -> list[PublishedRun]:
    """Every row of the published-runs file, in file order."""
    with CSV_PATH.open() as f:
        return [_run(r) for r in csv.DictReader(f)]


def run_summary(run: PublishedRun) -> dict[str, Any]:
    """The row's configuration in a few JSON-ready fields."""
    return {"run": run.run, "chip": run.chip.name, "chips": run.plan.chips, "slices": run.plan.size("data"),
            "mesh": run.plan.text, "batch": run.batch, "seq": run.seq, "remat": run.opts.checkpoint,
            "published_mfu": run.published_mfu, "set": "held out" if run.held_out else "fit",
            "source": run.row["url"], "date": run.row["date"]}
