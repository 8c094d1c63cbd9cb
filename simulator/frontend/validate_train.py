"""`podsim validate`'s whole-training-step family: published TPU MFU against the calibrated step.

Each published run (``tpu_training_mfu.csv``: MaxText's v5e and v5p tables, PaLM on v4) is priced by
`simulator.workloads.plans.calibrated` and turned into the MFU its publication would print (each
counts model FLOPs its own way); fitted and held-out rows are reported apart, as every family is.
"""
from __future__ import annotations

import math

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
            "to the fit rows of gpu_training.csv: what an overlapped collective costs the compute beside it per unit "
            "of the SMs its kernels hold (NCCL's channels for the algorithm its tuner picks, one SM each: 2 for a "
            "ring across nodes with one member per node, 8-12 inside an H100 node; Transformer Engine's userbuffers "
            "8.5 under --tp-comm-overlap; fitted 7.0x the SMs' share, the rest HBM and L2 contention), a fixed "
            "cost per step, and per framework (megatron-lm, megatron-core, llm-foundry) its kernels' share of the "
            "kernel model; torchtitan and Meta's Llama 3 stack have no fit rows and take llm-foundry's and megatron-"
            "core's constants (fixed before any error was seen), so their rows are the independent check. The loss "
            "is priced at 52 HBM bytes per logit (its fp32 kernels, counted from first principles, not fitted) and "
            "gradients are reduced in the dtype each framework uses (the grad_reduce_dtype column: fp32 for "
            "Megatron under bf16, NeMo, torchtitan, Llama 3 and llm-foundry's DEFAULT mixed precision). Under an "
            "interleaved schedule each model chunk's gradient reduction starts after that chunk's last backward "
            "and its weight gather with the previous chunk's first forward (Megatron-Core's grad_sync_func and "
            "param_sync_func), queued on one NIC behind the other chunks' passes. Megatron-Core's 2024 pipelined "
            "rows are read interleaved at one layer per virtual stage (the README's pipeline-communication overlap "
            "exists only under interleaving, arguments.py; one layer is the only depth every row allows), and FP8 "
            "casts are priced as Transformer Engine runs them: fused cast-transposes of each GEMM's input forward "
            "and output gradient backward, each weight once a step under Megatron-Core (is_first_microbatch), the "
            "output head in 16 bits; in the steady state 1F1B waits on each microbatch's two pipeline exchanges "
            "(p2p_communication: wait_on_reqs, then torch.cuda.synchronize), while Megatron-Core's interleaved "
            "schedule overlaps them (overlap_p2p_comm) and pays their SMs' interference. Under --tp-comm-overlap "
            "(which Megatron allows only with sequence parallelism) a layer's backward gathers the inputs of its "
            "two column-parallel GEMMs again for their weight gradients (Megatron-Core's tensor_parallel/layers.py; "
            "Transformer "
            "Engine's bulk dgrad overlap): 6 AllGathers and 4 ReduceScatters a layer, not 4 AllReduces' worth. A row "
            "that does not state its recompute policy (Megatron-Core's, NeMo's, Megatron-Bridge's) recomputes "
            "nothing, Megatron's default (recompute_granularity None). "
            "The held-out set meets the "
            "10% target and no row misses 25%. Worst held out: torchtitan's 64k-token 8B run (19% slow: context "
            "parallel 2 with FSDP 4 and full recompute), torchtitan's 8B runs at 8k tokens (15-18% fast: 500 W "
            "power-limited 96 GB H100s, whose clocks the model does not know), Megatron-Bridge's 8B on 8 H100 (15% "
            "slow: the only Megatron FSDP row, at FP8; not analysed) and Llama 3's 131k-token run (16% slow). "
            "Megatron-Core's size trend now has the published sign (the size-trend note: rank correlation +0.70 "
            "against +0.18) but is too steep (+8.8 TFLOP/s per doubling against +1.7): 16B and 32B 5% slow, "
            "119B-462B 8-12% fast, and the 177B strong-scaling run on 96 GPUs (almost no bubble or data-parallel "
            "traffic) 10% fast, so the per-microbatch step of those rows is what is fast; the fitted interference "
            "does not set the slope (megatron-core's compute fraction refitted on the series' five TFLOP/s fit rows "
            "at each sm_interference from 0 to 12, session h27scale's constants: their slope stays +9.3 to +10.3 "
            "against +2.9 published). "
            "Changes made after held-out "
            "errors were seen, never a constant tuned to them (the constants refitted on the fit rows alone): the "
            "step's collectives priced by NCCL's own tuner "
            "(it ran rings only), pipeline sends of 1/TP of the activations (Megatron's scatter-gather), an "
            "interleaved schedule of unstated depth taken as 2 virtual stages, torchtitan's 2.4 TB/s HBM (held out "
            "12.6%, worst 56.5% before those); then, with the loss bytes and fp32 gradient reductions (held out "
            "8.4%, worst 57.6% before these): the Llama 3 rows re-read as FSDP over the DP ranks with fp32 "
            "gradients reduce-scattered once per step and MFU in PaLM's FLOP count (the paper's MFU is Chowdhery "
            "et al.'s; its 131k-token row from 37% to 11% slow), and torchtitan's pipelined runs as FSDP without "
            "re-sharding after the forward (its apply_fsdp does so under pipeline parallelism; the interleaved "
            "405B run from 32% to 15% slow). A third mapping, torchtitan's pipelined runs reducing gradients once "
            "per step, was tried and reverted (not in its source). Then, prompted by the size trend of Megatron-"
            "Core's rows (held-out ones among them; held out 7.8%, worst 24.3% before): the interference priced by "
            "the SMs each collective holds instead of one share of every collective's time (a ring across nodes "
            "with one member per node, Megatron's data-parallel gradients under TP 8, had cost as much per second "
            "as one inside a node), and the fitter's last rounds in 1-2% steps (its coarse grid had left the "
            "compute fractions on grid points); refitted on the fit rows alone. Then, prompted by the interleaved "
            "NeMo and Megatron-Bridge rows (fit and held out, 9-18% slow, their gradient reductions exposed almost "
            "whole behind one chunk's window): the per-chunk reduction and gather windows above (held out 7.5%, worst "
            "23.5% before); the first refit stopped its coordinate descent at sm_interference 3.0 with a worse fit "
            "loss (6.87%) than a scan of the fit rows found near 6 (6.72%), and its held-out result (7.9%, worst "
            "25.6%) was seen before the fitter was given several starting points (1, 2, 4, 8; the lowest fit loss "
            "wins), which gives 7.6 and the fit-row loss 6.81%. Then, reading the source for the size trend: a trial "
            "script printed the held-out Megatron-Core rows under two trial changes (one layer per virtual stage, "
            "and Transformer Engine's userbuffer GEMMs in chunks); neither was kept and no constant changed. Then "
            "the two ends of that strong-scaling figure became rows (sets written before any forecast of them: 96 "
            "GPUs fit, the only pipelined TP 8 run without a bubble, its forecast seen before; 4608 GPUs held out), "
            "and the constants were refitted with the 96-GPU row among the fit rows (sm_interference 7.6 -> 5.6, "
            "megatron-core 0.926 -> 0.900, llm-foundry 0.826 -> 0.810; fit 6.81% -> 7.14%; held out 7.11% -> "
            "7.57%, worst 22.5% -> 24.6%, seen after the refit, nothing tuned to them). The 96-GPU row stays 20% "
            "fast: the 2304-GPU run reaches 0.93 of its MFU and the forecast 0.78, a ratio no per-microbatch "
            "mechanism moves (same microbatch), so the 1F1B reading's bubble is what is wrong; Transformer "
            "Engine's userbuffer chunks and exposed last ReduceScatter chunk, priced from initialize_ub's defaults "
            "(4.5% of that step) and refitted on the fit rows, raised the fit loss to 7.30% and were not kept "
            "(calibration/gpu_training_sources.md). Then (session h27scale; the held-out rows' errors had been seen in "
            "every earlier stop): the interleaved reading above with the FP8 casts, refitted on the fit rows alone "
            "(sm_interference 5.63 -> 8.45, step overhead 0.075 -> 0.052 s, megatron-core 0.900 -> 0.834, "
            "llm-foundry 0.810 -> 0.826; fit 7.14% -> 7.42%; held out 7.57% -> 7.91%, worst 24.6% -> 22.4%, seen "
            "after the refit, nothing tuned to them): the 2304 / 96-GPU MFU ratio 0.78 -> 0.95 (published 0.93); then "
            "the pipeline's steady-state exchanges above, refitted on the fit rows alone (sm_interference 8.45 -> "
            "8.14, step overhead 0.052 -> 0.067 s, megatron-core 0.834 -> 0.855; fit 7.42% -> 7.34%, held out "
            "7.91% -> 7.80%, worst 22.5%; Megatron-Core's slope +8.9 -> +10.0 TFLOP/s per doubling); then (session "
            "h27slope) sequence parallelism's second gathers above, refitted on the fit rows alone (sm_interference "
            "8.14 -> 7.01, step overhead 0.067 -> 0.069 s, llm-foundry 0.826 -> 0.818, megatron-core 0.855 "
            "unchanged; fit 7.34% -> 7.25%, held out 7.80% -> 7.73%, worst 22.5% -> 23.6%, seen after the refit; "
            "slope +10.0 -> +9.5). Tried in that session and not kept: the weight gradients' accumulation into "
            "Megatron-Core's fp32 main_grad every microbatch (gradient_accumulation_fusion, on by default: the "
            "weight-gradient GEMM's epilogue reads and writes the fp32 buffer, 6 bytes a weight more than a 16-bit "
            "store) priced unhidden: at the fitted constants the series' five fit rows' slope went +10.3 -> +8.0, "
            "but refitted on every fit row the FP8 NeMo and Megatron-Bridge rows, which share megatron-core's "
            "compute fraction, pull it up (0.855 -> 0.891): fit 7.34% -> 7.56%, slope +9.6 (the fitter printed "
            "the held-out result, 7.80%, worst 22.5%); FlashAttention-2 in place of FlashAttention-3 (which did "
            "not exist for these July 2024 runs, but Transformer Engine's cuDNN attention did) steepens the slope "
            "(+13.7) and was not pursued; then the recompute reading above (blank had been read as selective for "
            "the megatron-core family, a choice of the first GPU session with no source named), refitted on the "
            "fit rows alone (step overhead 0.069 -> 0.075 s, megatron-core 0.855 -> 0.846; fit 7.25% -> 7.29%, "
            "held out 7.73% -> 7.87%, worst 23.6%, seen after the refit; slope +9.5 -> +8.8)")


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


def _slope_per_doubling(sizes: list[float], values: list[float]) -> float:
    """Least-squares slope of ``values`` against log2(``sizes``): the change per doubling of model size."""
    xs = [math.log2(s) for s in sizes]
    mx, my = sum(xs) / len(xs), sum(values) / len(values)
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, values, strict=True)) / var if var else 0.0


def gpu_size_trends(cases: list[Case]) -> list[str]:
    """Per source series (one source, chip, GPU count, sequence length and compute dtype, three model sizes or more):
    does the forecast order the runs' per-GPU model FLOP/s by model size as the publication does? One line each: the
    rank correlation of per-GPU throughput with size, measured and forecast, and the least-squares slope of per-GPU
    TFLOP/s per doubling of size (tokens/s rows weighted by their model's FLOPs per token, so sizes compare; an FP8
    row has its own series: its FLOP/s run against another peak)."""
    from simulator.workloads.plans.published_gpu import published_gpu_runs
    from simulator.workloads.plans.train import model_flops

    by_run = {c.name: c for c in cases}
    series: dict[str, list[tuple[float, float, float]]] = {}
    for run in published_gpu_runs():
        case = by_run.get(run.run)
        if case is None:
            continue
        weight = 1.0  # TFLOP/s per GPU as the source counts them
        if run.metric.startswith("tokens"):
            weight = model_flops(run.cfg, 1, run.seq) / run.seq / 1e12
        elif run.metric == "mfu":
            weight = run.chip.peak_flops_per_s("bf16") / 1e12
        gpus = "" if run.metric == "tflops_per_gpu" else f" {run.plan.chips} GPUs seq {run.seq}"
        key = f"{run.run.split()[0]} {run.chip.name}{gpus}" + ("" if run.dtype == "bf16" else f" {run.dtype}")
        series.setdefault(key, []).append((float(run.cfg.params()), case.measured * weight, case.predicted * weight))
    lines = []
    for name, rows in series.items():
        if len({r[0] for r in rows}) < 3:  # a trend needs three model sizes (not one model at three scales)
            continue
        rows.sort()
        size = [r[0] for r in rows]
        measured, forecast = _spearman(size, [r[1] for r in rows]), _spearman(size, [r[2] for r in rows])
        slopes = [_slope_per_doubling(size, [r[i] for r in rows]) for i in (1, 2)]
        lines.append(f"{name} ({len(rows)} sizes): rank correlation of per-GPU FLOP/s with model size, measured "
                     f"{measured:+.2f}, forecast {forecast:+.2f} (slope {slopes[0]:+.1f} against {slopes[1]:+.1f} "
                     "TFLOP/s per doubling)")
    return lines
