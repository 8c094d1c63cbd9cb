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


GPU_FAMILY = "Training step, GPU (published runs)"

GPU_NOTE = ('whole GPU training steps (`podsim model --mode train --calibrated` on a100/h100/h200/b200, '
            '`simulator.workloads.plans.calibrated_gpu`): the GPU kernel model (GEMMs by shape, FlashAttention, '
            "memory-bound kernels; fitted apart), collectives as NCCL's tuner picks them, and four constants fitted "
            'to the fit rows of gpu_training.csv: what an overlapped collective costs the compute beside it, a fixed '
            "cost per step, and per framework (megatron-lm, megatron-core, llm-foundry) its kernels' share of the "
            "kernel model; torchtitan and Meta's Llama 3 stack have no fit rows and take llm-foundry's and megatron-"
            "core's constants (fixed before any error was seen), so their rows are the independent check. The loss "
            "is priced at 52 HBM bytes per logit (its fp32 kernels, counted from first principles, not fitted) and "
            "gradients are reduced in the dtype each framework uses (the grad_reduce_dtype column: fp32 for "
            "Megatron under bf16, NeMo, torchtitan, Llama 3 and llm-foundry's DEFAULT mixed precision). The held-"
            "out set meets the 10% target and no row misses 25%. Worst held out: torchtitan's 64k-token 8B run (24% "
            "slow: context parallel 2 with FSDP 4 and full recompute), then torchtitan's 8B runs at 8k tokens "
            "(16-18% fast: 500 W power-limited 96 GB H100s, whose clocks the model does not know) and NeMo's 70B, "
            "175B and 340B runs (16-18% slow: the source does not say it overlapped tensor-parallel communication, "
            "so the forecast exposes it). Changes made after held-out errors were seen, never a constant tuned to "
            "them (the constants refitted on the fit rows alone): the step's collectives priced by NCCL's own tuner "
            "(it ran rings only), pipeline sends of 1/TP of the activations (Megatron's scatter-gather), an "
            "interleaved schedule of unstated depth taken as 2 virtual stages, torchtitan's 2.4 TB/s HBM (held out "
            "12.6%, worst 56.5% before those); then, with the loss bytes and fp32 gradient reductions (held out "
            "8.4%, worst 57.6% before these): the Llama 3 rows re-read as FSDP over the DP ranks with fp32 "
            "gradients reduce-scattered once per step and MFU in PaLM's FLOP count (the paper's MFU is Chowdhery "
            "et al.'s; its 131k-token row from 37% to 11% slow), and torchtitan's pipelined runs as FSDP without "
            "re-sharding after the forward (its apply_fsdp does so under pipeline parallelism; the interleaved "
            "405B run from 32% to 15% slow). A third mapping, torchtitan's pipelined runs reducing gradients once "
            "per step, was tried and reverted (not in its source)")


def gpu_training_cases() -> list[Case]:
    """One case per published GPU run (``gpu_training.csv``): the source's own metric (TFLOP/s per GPU as it
    counts FLOPs, tokens/s per GPU, MFU) against the calibrated GPU step's, fit and held out apart."""
    from simulator.workloads.plans.published_gpu import UNITS, predict_run, published_gpu_runs

    cases = []
    for run in published_gpu_runs():
        predicted = run.predicted(predict_run(run)["step_time_s"])
        cases.append(Case(GPU_FAMILY, run.run, run.measured, predicted, UNITS[run.metric], run.held_out))
    return cases


def _spearman(xs: list[float], ys: list[float]) -> float:
    """Rank correlation of two equal-length lists (no ties expected)."""
    def ranks(v: list[float]) -> list[int]:
        order = sorted(range(len(v)), key=v.__getitem__)
        out = [0] * len(v)
        for rank, i in enumerate(order):
            out[i] = rank
        return out

    rx, ry, n = ranks(xs), ranks(ys), len(xs)
    return 1 - 6 * sum((a - b) ** 2 for a, b in zip(rx, ry, strict=True)) / (n * (n * n - 1)) if n > 2 else 1.0


def gpu_size_trends(cases: list[Case]) -> list[str]:
    """Per source series (one source, chip, GPU count and sequence length, three sizes or more): does the forecast
    order the runs' per-GPU model FLOP/s by model size as the publication does? One line each: the rank
    correlation of per-GPU throughput with size, measured and forecast (tokens/s rows weighted by their model's
    FLOPs per token, so sizes compare)."""
    from simulator.workloads.plans.published_gpu import published_gpu_runs
    from simulator.workloads.plans.train import model_flops

    by_run = {c.name: c for c in cases}
    series: dict[str, list[tuple[float, float, float]]] = {}
    for run in published_gpu_runs():
        case = by_run.get(run.run)
        if case is None:
            continue
        weight = model_flops(run.cfg, 1, run.seq) / run.seq if run.metric.startswith("tokens") else 1.0
        gpus = "" if run.metric == "tflops_per_gpu" else f" {run.plan.chips} GPUs seq {run.seq}"
        key = f"{run.run.split()[0]} {run.chip.name}{gpus}"
        series.setdefault(key, []).append((float(run.cfg.params()), case.measured * weight, case.predicted * weight))
    lines = []
    for name, rows in series.items():
        if len(rows) < 3:
            continue
        rows.sort()
        size = [r[0] for r in rows]
        measured, forecast = _spearman(size, [r[1] for r in rows]), _spearman(size, [r[2] for r in rows])
        lines.append(f"{name} ({len(rows)} sizes): rank correlation of per-GPU FLOP/s with model size, measured "
                     f"{measured:+.2f}, forecast {forecast:+.2f}")
    return lines
