"""Published GPU training runs (``data/calibration/gpu_training.csv``) as podsim configurations.

Each row names a model's dimensions, the GPUs and their layout (data, fsdp with its ZeRO stage, model =
tensor parallel, pipeline with virtual stages, sequence = context parallel, expert), the device
microbatch, global batch and sequence, the recompute policy, the dtype, what the source measured
(``metric``) and whether the fit uses it (``set``, decided by the file's rule before any error was
computed). `predicted` turns a predicted step time into the source's own metric, so the comparison is
like for like:

- ``tflops_per_gpu`` with the ``megatron`` convention (Narayanan et al. 2021, eq. 3): 96 B s l h^2
  (1 + s / 6h + V / 16 l h) FLOPs per iteration, counting the recomputed forward; with Megatron-Core's
  model FLOPs (``megatron-core``), the same without recomputation: 72 B s l h^2 (1 + s / 6h + V / 12 l h);
  with the ``palm`` convention (Chowdhery et al. 2022, appendix B, the definition of MFU): 6 N + 12 L H Q T
  per token (N every parameter, attention counted without the causal half), the TPU family's PaLM count;
  with no convention named, podsim's own model FLOPs (`simulator.workloads.plans.train.model_flops`);
- ``tokens_per_s_per_gpu``: B s / (GPUs x step); ``tokens_per_s``: B s / step; ``mfu`` (a fraction): the
  source's model FLOPs (Korthikanti et al. 2022: the Megatron-Core count above) over GPUs x bf16 peak x step.

Where a row leaves a field empty, the reading is stated here and nowhere tuned: no device microbatch
with a pipeline means one sequence per microbatch (Megatron's usual), without one the whole per-GPU batch
at once; no virtual stages means 1F1B, or 2 virtual stages where ``schedule`` says interleaved; no
recompute policy means Megatron's selective recomputation for Megatron-Core rows and none otherwise.
Megatron's distributed optimizer (``zero`` >= 1 with the ``data`` ranks unsharded) is podsim's fsdp axis
at that ZeRO stage; ``tp_comm_overlap`` (the source says ``--tp-comm-overlap``) is ``tp_overlap``;
``grad_reduce_dtype`` is the dtype the framework reduces gradients in (fp32: 4 bytes per element, else the
weights' 2), decided per source from its framework's defaults (calibration/gpu_training_sources.md); a
``hbm_bytes_per_s`` replaces the preset's HBM bandwidth (the part the run had).

Each row's ``framework`` column names its training framework; `framework_of` maps it to the constants' name
(`simulator.hardware.train_calibration.gpu_step_constants`): ``megatron-lm`` (the 2021-2022 papers' code:
attention before FlashAttention), ``megatron-core`` (Megatron-Core, NeMo, Megatron-Bridge: fused attention),
``llm-foundry`` (PyTorch FSDP, FlashAttention-2); ``torchtitan`` and Meta's internal Llama 3 stack have no fit
rows and take, by a rule fixed before any error was seen, the constants of the nearest fitted family
(torchtitan: PyTorch FSDP, llm-foundry's; Llama 3's 4-D parallel stack: megatron-core's).
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from typing import Any

from simulator.hardware.calibration import DATA
from simulator.hardware.specs import ChipSpec, get_chip
from simulator.workloads.plans.calibrated_gpu import GRAD_REDUCE_DTYPES
from simulator.workloads.plans.layout import MeshPlan, TrainOptions
from simulator.workloads.plans.train import model_flops, palm_flops
from simulator.workloads.transformer import TransformerConfig

CSV_PATH = DATA / "calibration" / "gpu_training.csv"
METRICS = ("tflops_per_gpu", "mfu", "tokens_per_s_per_gpu", "tokens_per_s")
UNITS = {"tflops_per_gpu": "TFLOP/s per GPU", "mfu": "MFU", "tokens_per_s_per_gpu": "tokens/s per GPU",
         "tokens_per_s": "tokens/s"}


def _int(value: str, default: int) -> int:
    return int(value) if value.strip() else default


@dataclass(frozen=True)
class PublishedGpuRun:
    """One published GPU training configuration and what its source measured."""

    run: str
    chip: ChipSpec
    cfg: TransformerConfig
    plan: MeshPlan
    opts: TrainOptions
    batch: int
    seq: int
    dtype: str  #: the GEMMs' compute dtype: bf16 (fp16 runs at the same peak) or fp8
    grad_reduce_bytes: float | None  #: bytes per gradient element reduced (None: the weights' bytes)
    attention: str  #: "" (the framework's kernel), or one of `calibrated_gpu.ATTENTION`
    metric: str
    measured: float
    held_out: bool
    row: dict[str, str]

    @property
    def framework(self) -> str:
        """The constants' framework name (`framework_of` the row's framework column)."""
        return framework_of(self.row.get("framework", ""))

    def _source_flops(self) -> float:
        """FLOPs of one step as the source counts them (``tflops_per_gpu`` rows)."""
        cfg, b, s = self.cfg, self.batch, self.seq
        h, l_, v = cfg.d_model, cfg.n_layers, cfg.vocab_size
        convention = self.row.get("flops_convention", "")
        if convention.startswith("megatron:"):
            return 96 * b * s * l_ * h * h * (1 + s / (6 * h) + v / (16 * l_ * h))
        if convention.startswith("megatron-core") or convention.startswith("korthikanti"):
            return 72 * b * s * l_ * h * h * (1 + s / (6 * h) + v / (12 * l_ * h))
        if convention.startswith("palm"):
            return palm_flops(cfg, b, s)
        return model_flops(cfg, b, s)

    def predicted(self, step_time_s: float) -> float:
        """The source's metric for a step of ``step_time_s`` (the units of ``measured``)."""
        gpus, tokens = self.plan.chips, self.batch * self.seq
        if self.metric == "tflops_per_gpu":
            return self._source_flops() / (gpus * step_time_s) / 1e12
        if self.metric == "tokens_per_s_per_gpu":
            return tokens / (gpus * step_time_s)
        if self.metric == "tokens_per_s":
            return tokens / step_time_s
        return self._source_flops() / (gpus * self.chip.peak_flops_per_s("bf16") * step_time_s)  # a fraction


#: the FLOP conventions rows may name (``flops_convention``'s first word); others count podsim's model FLOPs
CONVENTIONS = ("megatron:", "megatron-core", "korthikanti", "palm", "nemo", "llm-foundry", "none")
GRAD_REDUCE_BYTES = GRAD_REDUCE_DTYPES  #: a row's grad_reduce_dtype -> bytes per element


FRAMEWORKS = {"megatron-core": "megatron-core", "nemo": "megatron-core", "megatron-lm": "megatron-lm",
              "llm-foundry": "llm-foundry", "torchtitan": "torchtitan", "meta": "llama3-meta"}  #: column prefix


def framework_of(column: str) -> str:
    """The framework name of a row's ``framework`` column (its first word decides)."""
    text = column.strip().lower()
    for prefix, name in FRAMEWORKS.items():
        if text.startswith(prefix):
            return name
    return text.split(" ")[0] if text else ""


def _run(r: dict[str, str]) -> PublishedGpuRun:
    n_heads = int(r["n_heads"])
    cfg = TransformerConfig(name=r["model"], d_model=int(r["d_model"]), d_ff=int(r["d_ff"]),
                            n_layers=int(r["n_layers"]), n_heads=n_heads, n_kv_heads=_int(r["n_kv_heads"], n_heads),
                            head_dim=_int(r["head_dim"], int(r["d_model"]) // n_heads), vocab_size=int(r["vocab"]),
                            gated_mlp=r["gated_mlp"].strip() == "1",
                            tied_embeddings=r["tied_embeddings"].strip() == "1",
                            norm="layernorm" if r["gated_mlp"].strip() != "1" else "rmsnorm")
    sizes = {a: _int(r[c], 1) for a, c in (("data", "data"), ("fsdp", "fsdp"), ("model", "model_axis"),
                                           ("pipeline", "pipeline"), ("sequence", "sequence"), ("expert", "expert"))}
    if _int(r["zero"], 0) >= 1 and sizes["fsdp"] == 1:  # Megatron's distributed optimizer shards over the data
        sizes["fsdp"], sizes["data"] = sizes["data"], 1  # ranks: podsim's fsdp axis at that ZeRO stage
    plan = MeshPlan({a: n for a, n in sizes.items() if n > 1})
    batch, seq = int(r["global_batch"]), int(r["seq"])
    per_replica = batch // plan.batch_ways
    device_mb = _int(r["microbatch"], 1 if plan.size("pipeline") > 1 else per_replica)
    v = _int(r["virtual_stages"], 2 if r.get("schedule", "") == "interleaved" else 1)
    # not stated: none, Megatron's default (--recompute-granularity, TransformerConfig.recompute_granularity: None)
    remat = r["remat"].strip() or "none"
    zero = _int(r["zero"], 3 if plan.size("fsdp") > 1 else 0)
    # PyTorch FSDP's SHARD_GRAD_OP (the file's zero = 2 for FSDP runs, torchtitan's included) shards the weights
    # outside computation: gathered for each forward and kept to the backward -- ZeRO-3 without re-sharding after
    # the forward
    fsdp_framework = "fsdp" in r.get("framework", "").lower() or framework_of(r.get("framework", "")) == "torchtitan"
    sgo = zero == 2 and fsdp_framework
    opts = TrainOptions(microbatches=max(1, per_replica // max(1, device_mb)), checkpoint=remat,
                        zero=3 if sgo else zero, reshard_after_forward=not sgo,
                        tp_overlap=r.get("tp_comm_overlap", "").strip() == "1",
                        schedule="interleaved" if v > 1 else "1f1b", virtual_stages=max(2, v))
    attention = ""  # the framework's kernel (its constants' ``attention``)
    dtype = "fp8" if r["dtype"].strip() == "fp8" else "bf16"
    reduce = r.get("grad_reduce_dtype", "").strip()
    if reduce and reduce not in GRAD_REDUCE_BYTES:
        raise ValueError(f"{r['run']}: grad_reduce_dtype {reduce!r}; valid: {', '.join(GRAD_REDUCE_BYTES)} or empty")
    chip = get_chip(r["chip"])
    if r.get("hbm_bytes_per_s", "").strip():  # the part the run had (e.g. H100 96GB HBM2e), not the preset's
        chip = chip.replace(hbm_bandwidth_bytes_per_s=float(r["hbm_bytes_per_s"]))
    return PublishedGpuRun(r["run"], chip, cfg, plan, opts, batch, seq, dtype, GRAD_REDUCE_BYTES.get(reduce), attention,
                           r["metric"], float(r["measured"]), r["set"].strip() == "held_out", r)


def published_gpu_runs() -> list[PublishedGpuRun]:
    """Every row of the GPU training file, in file order."""
    if not CSV_PATH.exists():
        return []
    with CSV_PATH.open() as f:
        return [_run(r) for r in csv.DictReader(f)]


def predict_run(run: PublishedGpuRun, constants: Any = None, kernels: Any = None) -> dict[str, Any]:
    """The calibrated GPU step of ``run`` (``constants`` None: its framework's fitted ones)."""
    from simulator.hardware.train_calibration import gpu_step_constants
    from simulator.workloads.plans.calibrated_gpu import gpu_step_factors, require_kernels

    c = constants if constants is not None else gpu_step_constants(run.chip.name, run.framework)
    return gpu_step_factors(run.cfg, run.chip, run.plan, run.opts, run.batch, run.seq, c,
                            kernels or require_kernels(run.chip), run.attention or c.attention, run.dtype,
                            run.grad_reduce_bytes)


__all__ = ["CONVENTIONS", "CSV_PATH", "GRAD_REDUCE_BYTES", "METRICS", "UNITS", "PublishedGpuRun", "palm_flops",
           "predict_run", "published_gpu_runs"]
