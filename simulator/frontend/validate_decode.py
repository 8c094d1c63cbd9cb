"""`podsim validate`'s serving families: published decode and prefill measurements, on one GPU and tensor-parallel
over ``gpus`` (the model axis), against `simulator.workloads.served` (the simulator's per-layer ops priced at the
chip's fitted serving factors, plus each layer's AllReduces as the engine runs them on a mesh).

Each row of ``decode_latency.csv`` names its chip, model, dtypes, batch, prompt and output lengths and
what was measured: ``tpot`` (mean time per output token), ``request`` (a static batch's end-to-end
latency: prefill, then output - 1 decode steps), ``ttft`` (the prefill alone), ``throughput`` (output
tokens per second) or ``throughput_gain`` (throughput over the same setup's with one client). ``arrival``
says how requests reached the server: ``static`` (one batch, all at once: `served_request`) or
``closed_loop`` (``batch`` clients each sending a new request when their last ends, continuous batching:
`served_concurrent`, which folds the other clients' prefills into the decode steps). Rows the fit used and
rows kept apart are marked in the file.
"""
from __future__ import annotations

import csv
from typing import Any

from simulator.hardware.calibration import DATA
from simulator.hardware.decode_calibration import DecodeCalibration, get_decode_calibration
from simulator.hardware.specs import get_chip
from simulator.workloads.served import served_concurrent, served_request
from simulator.workloads.served_tp import (
    ONE_SHOT,
    AllReduceKernel,
    custom_s,
    link_bandwidth_bytes_per_s,
    nccl_ring_s,
)
from simulator.workloads.transformer import TransformerConfig, get_model

FILE = "decode_latency.csv"
KERNEL_FILE = "allreduce_kernels.csv"  #: published microbenchmarks of the engines' custom AllReduce kernels
UNITS = {"tpot": "ms/token", "request": "ms", "ttft": "ms", "throughput": "tokens/s",
         "throughput_gain": "x one client's"}


def decode_rows() -> list[dict[str, str]]:
    """The measurement rows, as read."""
    with (DATA / "calibration" / FILE).open() as f:
        return list(csv.DictReader(f))


def allreduce_kernel_rows() -> list[dict[str, str]]:
    """The custom AllReduce kernels' microbenchmark rows, as read."""
    with (DATA / "calibration" / KERNEL_FILE).open() as f:
        return list(csv.DictReader(f))


def kernel_features(row: dict[str, str]) -> list[float]:
    """A kernel row's terms in `simulator.workloads.served_tp.custom_s`: [1 (the latency), 1 if two-shot (the
    stage), seconds of the bytes each GPU moves at the chip's one-way NVLink rate (over the efficiency)]."""
    n, nbytes = int(row["gpus"]), float(row["bytes"])
    one = row["algorithm"] == ONE_SHOT
    moved = (n - 1) * nbytes if one else 2 * (n - 1) / n * nbytes
    return [1.0, 0.0 if one else 1.0, moved / link_bandwidth_bytes_per_s(get_chip(row["chip"]))]


def predict_kernel_row(row: dict[str, str], kernel: dict[str, Any]) -> float:
    """A kernel row's time (microseconds) at ``kernel``'s constants, as `served_tp.custom_s` prices it."""
    k = AllReduceKernel.from_dict(kernel)
    return 1e6 * custom_s(row["algorithm"], int(row["gpus"]), float(row["bytes"]),
                          link_bandwidth_bytes_per_s(get_chip(row["chip"])), k)


KERNELS_VLLM = "AllReduce kernel, vLLM custom (CUDA graph, H100)"
KERNELS_TORCH = "AllReduce kernel, PyTorch one-shot (per call, 8 x H100)"
#: the family of each kernel's microbenchmark rows, and the engine whose calibration carries its constants
KERNEL_FAMILIES = {"vllm-custom": (KERNELS_VLLM, "vllm"), "torch-one-shot": (KERNELS_TORCH, "gpt-fast")}


KERNELS_NCCL = "AllReduce, NCCL ring at decode sizes (H100)"


def kernel_cases(case: Any) -> list[Any]:
    """One ``case`` per kernel microbenchmark row, at the fitted constants of the engine that runs the kernel;
    NCCL's rows (held out whole) against NCCL's own ring latency model, with no synchronisation on top."""
    out = []
    for row in allreduce_kernel_rows():
        if row["kernel"] == "nccl":
            seconds, _ = nccl_ring_s(int(row["gpus"]), float(row["bytes"]),
                                     link_bandwidth_bytes_per_s(get_chip(row["chip"])))
            out.append(case(KERNELS_NCCL, f"tp{row['gpus']} {int(row['bytes']) // 1024} KiB "
                            f"({'graph' if row['harness'].startswith('CUDA graph') else 'per call'})",
                            float(row["measured_us"]), 1e6 * seconds, "us", True))
            continue
        family, engine = KERNEL_FAMILIES[row["kernel"]]
        kernel = get_decode_calibration(row["chip"], engine).allreduce_kernel
        assert kernel is not None and kernel["name"] == row["kernel"]
        size = f"{int(row['bytes']) // 1024} KiB"
        out.append(case(family, f"{row['algorithm']} tp{row['gpus']} {size}", float(row["measured_us"]),
                        predict_kernel_row(row, kernel), "us", row["set"] != "fit"))
    return out


#: measured models that are not presets: a preset's shapes, changed (Llama-2-70B: Llama-3-70B's with 32,000
#: words; Mistral-7B v0.3: 32,768 words)
VARIANTS = {"llama-2-70b": ("llama-3-70b", {"vocab_size": 32000}),
            "mistral-7b-v0.3": ("mistral-7b", {"vocab_size": 32768})}


def engine_of(row: dict[str, str]) -> str:
    """The fitted serving engine a row's software belongs to: ``vllm``, ``gpt-fast`` or ``tensorrt-llm`` (NeMo's
    too)."""
    name = row["engine"].lower()
    return "vllm" if "vllm" in name else "gpt-fast" if "gpt-fast" in name else "tensorrt-llm"


def model_of(row: dict[str, str]) -> TransformerConfig:
    """The row's model: a preset, or a `VARIANTS` entry."""
    base, changes = VARIANTS.get(row["model"], (row["model"], {}))
    return get_model(base).replace(**changes) if changes else get_model(base)


def predict(row: dict[str, str], calibration: DecodeCalibration | None = None) -> float:
    """The row's metric as the calibrated serving model predicts it (ms, or tokens/s for ``throughput``), with the
    chip's fitted factors or ``calibration`` (as the row's engine reaches them)."""
    spec = get_chip(row["chip"])
    if row["hbm_bytes_per_s"]:  # a variant of the preset (A100 40GB)
        spec = spec.replace(hbm_bandwidth_bytes_per_s=float(row["hbm_bytes_per_s"]))
    cal = (calibration or get_decode_calibration(row["chip"])).for_engine(engine_of(row))
    gpus = gpus_of(row)
    if row["arrival"] == "closed_loop":  # continuous batching under ``batch`` closed-loop clients
        args = (model_of(row), spec, int(row["batch"]), int(row["input_len"]), int(row["output_len"]),
                row["weight_dtype"], row["kv_dtype"])
        c = served_concurrent(*args, calibration=cal, model=gpus)
        if row["metric"] == "throughput_gain":  # over the same setup with one client
            return c["output_tokens_per_s"] / served_concurrent(args[0], spec, 1, *args[3:], calibration=cal,
                                                                model=gpus)["output_tokens_per_s"]
        return c["output_tokens_per_s"] if row["metric"] == "throughput" else 1e3 * c[f"{row['metric']}_s"]
    r = served_request(model_of(row), spec, int(row["batch"]), int(row["input_len"]),
                       int(row["output_len"]), row["weight_dtype"], row["kv_dtype"], calibration=cal, model=gpus)
    if row["metric"] == "throughput":
        return r["output_tokens_per_s"]
    return 1e3 * {"request": r["request_s"], "ttft": r["ttft_s"], "tpot": r["tpot_s"]}[row["metric"]]


def gpus_of(row: dict[str, str]) -> int:
    """The row's tensor-parallel GPUs (1 where the column is empty)."""
    return int(row.get("gpus") or 1)


MULTI_GPU = "Multi-GPU decode (tensor parallel)"  #: decode at batch 1-16 with gpus > 1
MULTI_GPU_PREFILL = "Multi-GPU prefill (first token, tensor parallel)"
MULTI_GPU_LARGE = "Multi-GPU decode, batch 32-64 (tensor parallel)"
SPEEDUP = "Multi-GPU decode speed-up, 1 -> 8 GPUs"  #: time on 1 GPU over time on 8, same source and setup
TARGETS = {MULTI_GPU: 0.15, SPEEDUP: 0.20}  #: issue 27's targets for these families


def family_of(row: dict[str, str]) -> str:
    """Prefill, decode at batch 1-16 (what the fit saw: 1 and 8) or decode at batch 32-64: per engine on one GPU,
    one family each for all engines tensor-parallel (`MULTI_GPU`, `MULTI_GPU_PREFILL`, `MULTI_GPU_LARGE`)."""
    if gpus_of(row) > 1:
        return (MULTI_GPU_PREFILL if row["metric"] == "ttft" else MULTI_GPU_LARGE if int(row["batch"]) >= 32
                else MULTI_GPU)
    kind = ("prefill (first token)" if row["metric"] == "ttft" else
            "decode, batch 32-64" if int(row["batch"]) >= 32 else "decode")
    return f"Serving {kind}, one GPU ({engine_of(row)})"


def decode_cases(case: Any) -> list[Any]:
    """One ``case`` (`simulator.frontend.validate.Case`) per measurement row, then one per 1 -> 8 GPU speed-up
    (`speedup_pairs`)."""
    out, predicted = [], {}
    for row in decode_rows():
        tp = f" tp{gpus_of(row)} {engine_of(row)}" if gpus_of(row) > 1 else ""
        name = (f"{row['chip']}{tp} {row['model']} {row['weight_dtype']} b{row['batch']} "
                f"{row['input_len']}/{row['output_len']}")
        predicted[row["row"]] = predict(row)
        out.append(case(family_of(row), f"{name} {row['metric']}", float(row["measured_ms"]), predicted[row["row"]],
                        UNITS[row["metric"]], row["set"] != "fit"))
    out += kernel_cases(case)
    for one, eight in speedup_pairs(decode_rows()):
        name = f"{one['chip']} {engine_of(one)} {one['model']} {one['weight_dtype']} b{one['batch']} {one['metric']}"
        out.append(case(SPEEDUP, name, float(one["measured_ms"]) / float(eight["measured_ms"]),
                        predicted[one["row"]] / predicted[eight["row"]], "x", "held_out" in (one["set"], eight["set"])))
    return out


#: what must match for two rows to be one setup on 1 and on 8 GPUs
SETUP = ("source", "engine", "chip", "hbm_bytes_per_s", "model", "weight_dtype", "kv_dtype", "batch", "input_len",
         "output_len", "arrival", "metric")


def speedup_pairs(rows: list[dict[str, str]]) -> list[tuple[dict[str, str], dict[str, str]]]:
    """(1-GPU row, 8-GPU row) of every setup measured on both (time metrics only); a pair is fit only when both
    rows are."""
    ones = {tuple(r[k] for k in SETUP): r for r in rows if gpus_of(r) == 1 and r["metric"] in ("tpot", "request")}
    return [(ones[key], r) for r in rows if gpus_of(r) == 8 and (key := tuple(r[k] for k in SETUP)) in ones]


NOTES = {
    MULTI_GPU: "meets its 15% target on held-out rows (9.7%, worst 24%; 10.0% on the 28 rows held out before "
        "gpt-fast's Llama-3.1 rows were added). Each engine's AllReduce is priced as it "
        "runs (simulator.workloads.served_tp): tensorrt-llm (NeMo's 2023 stack, TensorRT-LLM v0.5: the NCCL plugin, "
        "no CUDA graphs) by NCCL's ring LL latency plus its fitted synchronisation, 14.75 us per doubling of GPUs "
        "(the 4 NeMo 8-GPU fit rows); vLLM and gpt-fast by their custom kernels at constants fitted to those "
        "kernels' own published microbenchmarks, none to a decode row (allreduce_kernels.csv: vLLM's custom "
        "one-/two-shot in CUDA graphs on H100, 4.8 us a call and the bytes at 73% of NVLink; PyTorch's one-shot "
        "per call on 8 H100, 16.3 us and 62%, which gpt-fast's ENABLE_INTRA_NODE_COMM kernel is taken to cost on "
        "its A100s, named uncalibrated there). gpt-fast's step on each GPU is its one-GPU fit: bf16 weights at 83% "
        "of HBM (1.69 TB/s, the README's 'about 1700 GB/s' on its 330 W A100s), int8 weight-only at 67%, and 54.5 "
        "us a layer of fixed cost (launches, each kernel's start and drain), fitted to its README's one-GPU rows at "
        "two sizes in each dtype (Llama-2-7B and Llama-3.1-8B bf16, Llama-3.1-8B and Llama-2/3.1-70B int8); the "
        "fixed cost is what makes a GPU's eighth of a model stream at less of HBM (b / (b + B_half)). Before (one "
        "fraction for both dtypes, fitted to two rows: 66% and 3 us a layer) its 7B bf16 and 70B int8 on 8 A100 "
        "were 22% and 25% fast. The worst rows now: vLLM CI's Llama-3-70B batch of 8 on 4 H200 24% fast (likely "
        "the same per-step host cost as its one-GPU H200 row, 25% fast); gpt-fast's Llama-2-7B on 2/4/8 A100 14%, "
        "21% and 25% slow, where its Llama-3.1-8B on 2/4/8 (2024-09, same shapes but for the MLP and vocabulary) "
        "is 8-9% slow: the 2023-12 software's fixed cost a layer looks smaller than the 2024 rows that identify "
        "it; its Llama-3.1-70B bf16 on 2 A100 23% fast (141 GB of weights on 2 x 80 GB: the README's slowest "
        "bandwidth in that table, 1131 GB/s). gpt-fast's README node is a 'hybrid cube mesh' of 330 W A100s, not "
        "the NVSwitch node podsim prices. Disclosed: the gpt-fast Llama-2 and vLLM rows' errors had been seen "
        "before the AllReduce kernel model and before this fit's form were chosen, so they no longer check either "
        "independently; the seven Llama-3.1 rows were added held out before any error of theirs was computed; no "
        "constant is fitted to a multi-GPU gpt-fast row. "
        "NeMo's 8-GPU "
        "fit rows disagree with the one sync: 8 x A100 at batch 8 wants more (18% fast), 8 x H100 at batch 1 less "
        "(24% slow: the model has that step slower than on 4 GPUs, the measurement 9% faster); a per-chip or "
        "per-batch sync is not identified by one model size",
    MULTI_GPU_LARGE: "misses the 10% target, held out whole (rows added after the fit, their errors first seen "
        "here): TensorRT-LLM v0.5's own benchmark of LLaMA 70B FP8 on 4 x H100 at batch 64, as its single-GPU 7B "
        "rows at batch 32-64 miss: 128 in / 128 out is 25% slow (its C++ runtime's per-step cost and FP8 kernels "
        "beat NeMo's stack, which fitted the tensorrt-llm factors), 2048 in / 2048 out 38% fast (64 contexts "
        "up to 4,096 tokens: each GPU streams 8 GB of KV cache a step at the mean context beside 17 GB of weights, "
        "at the weights' fraction -- "
        "attention_fraction is not fitted, and the result names it uncalibrated); the two short-output rows are "
        "within 2%",
    SPEEDUP: "time on one GPU over time on 8, same source and setup (NeMo's Llama-2-7B at batch 1-8, gpt-fast's "
        "Llama-2-7B and Llama-3.1-8B bf16, Llama-2-70B and Llama-3.1-70B int8): meets its 20% target on held-out "
        "rows (9.8%, worst 19%; 11.5% on the 6 rows held out before the Llama-3.1 pairs were added). gpt-fast's "
        "Llama-2-7B bf16 2.5x against the published 3.1x (19% short), Llama-2-70B int8 4.1x against 4.2x, "
        "Llama-3.1-8B 2.7x against 2.9x, Llama-3.1-70B int8 4.1x against 4.2x: each GPU's eighth of the weights "
        "streams at the one-GPU fit's fraction with the same 54.5 us a layer of fixed cost, int8 weight-only "
        "kernels at their own fraction. Before, one fraction for both dtypes and 3 us a layer (fitted to two rows "
        "that confounded int8's dequantizing with the fixed cost) made 7B 4.2x (+33%) and 70B int8 5.5x (+31%); "
        "with NeMo's borrowed synchronisation 2.3x and 3.7x; with no synchronisation at all 7.0x, and the "
        "uncalibrated mode's 6.7x before any AllReduce was priced. Disclosed: the two Llama-2 gpt-fast pairs' "
        "errors were seen before the kernel model and this fit's form were chosen, so they no longer check those "
        "choices independently; the two Llama-3.1 pairs (8-GPU rows held out, added before any error of theirs "
        "was computed) do; no constant is fitted to a multi-GPU row",
    KERNELS_VLLM: "vLLM's custom AllReduce (csrc/custom_all_reduce.cuh) as vLLM's "
        "benchmarks/kernels/benchmark_device_communicators.py times it: 10 calls captured in a CUDA graph, "
        "replayed, wall time per call, H100, bf16 [rows, 8192], 0.5-4 MiB, one-shot (ca_1stage) and two-shot "
        "(ca_2stage) forced. Three constants fitted to vllm-project/vllm#24111's 4- and 6-GPU tables "
        "(2025-09-02): 4.8 us a call, 9.4 us more for two-shot's second stage, the bytes at 73% of NVLink. Held "
        "out: #24111's 2-GPU row and #24532's 4-GPU table (another engineer's run of the same script). One-shot "
        "lands within 14%; two-shot is 9-23% fast from 1.5 MiB on 4 GPUs, 11-15% slow at 0.5-1.5 MiB on 6 "
        "(its second stage is not one fixed cost), sizes vLLM's own dispatch runs one-shot or NCCL at. Decode "
        "AllReduces (16-160 KiB) lie below the measured sizes, so their price is the fitted latency extrapolated: "
        "vLLM's B300 tuning table (vllm-project/vllm#37756) shows its one-shot flat at 7-9 us from 16 to 256 KiB, "
        "but no H100 CUDA-graph row under 0.5 MiB was found. Nor a CUDA-graph row on 8 GPUs: the latency is "
        "taken as the same on 2-8 GPUs (one latency fits 2, 4 and 6 within 9%); sgl-project/sglang#2904's runs "
        "of the same kernel on H100 without CUDA graphs put 8 GPUs 1-3 us above 4 at 0.5-32 KiB, which this "
        "fit does not carry",
    KERNELS_NCCL: "misses the 10% target, held out whole (nothing fitted to it): NCCL's AllReduce at decode and "
        "small-prefill sizes on H100 against podsim's NCCL ring price (NCCL's own tuning-model latencies, "
        "simulator.collectives.protocol, the fastest of LL / LL128 / Simple, no synchronisation on top) -- the "
        "pynccl columns of vLLM's CUDA-graph benchmark (vllm-project/vllm#24111 on 4 and 6 GPUs, #24532 on 4; "
        "vLLM turns NVLS off) and torch.distributed.all_reduce per call on 8 H100 (pytorch/helion#245's nccl "
        "column). The model is 20-35% fast below 1 MiB: 15 us on 8 GPUs at 8-256 KiB where 21-25 us is measured "
        "per call. It is what vLLM falls back to (3, 5 or 7 GPUs; past 8 MiB) and tensorrt-llm's algorithm part; "
        "tensorrt-llm's fitted 14.75 us per doubling of GPUs comes on top (59 us an AllReduce on 8 GPUs, over "
        "twice the per-call measurement), so that fitted constant holds more of NeMo's tensor-parallel step than "
        "the AllReduce's own time",
    KERNELS_TORCH: "PyTorch's one-shot AllReduce (torch.ops.symm_mem.one_shot_all_reduce, the successor of the "
        "c10d IntraNodeComm one-shot kernel gpt-fast's ENABLE_INTRA_NODE_COMM=1 selects) as meta-pytorch/kraken's "
        "benchmark_all_reduce.py times it: one call between CUDA events after an L2 flush, no CUDA graph, 8 x "
        "H100, bf16, 8 KiB-2 MiB. Two constants fitted to the table in pytorch/helion#245 (2025-07-23): 16.3 us a "
        "call, the bytes at 62% of NVLink; held out: yifuwang/symm-mem-recipes#3 (2025-06-03; its text does not "
        "name the GPUs). Only 8 GPUs were measured, so the latency is taken as the same on 2 and 4 (vLLM's kernel "
        "shows no growth from 4 to 6 GPUs beyond the bytes). The per-call harness holds a launch that a CUDA "
        "graph hides, so gpt-fast's compiled decode may pay less than this",
    "Serving decode, batch 32-64, one GPU (tensorrt-llm)": "misses the 10% target, held out whole: the tensorrt-llm "
        "factors come from NeMo's served Llama-2-7B runs (batch 1-8, fp16), whose per-step costs include NeMo's "
        "serving stack; TensorRT-LLM v0.5's own benchmark at batch 32-64 with FP8 weights and KV cache is 16-20% "
        "faster than predicted: its per-layer cost is smaller and its FP8 kernels stream a larger share of HBM than "
        "the fp16 runs the fit saw. No fit row comes from TensorRT-LLM's own C++ benchmark at decode (its only fit "
        "rows are 2048-token prefills), so its own factors cannot be fitted apart from NeMo's",
    "Serving decode, one GPU (vllm)":
        "misses the 10% target on held-out rows. Fitted to one request on H100 and A100 40GB (Llama-3.1-8B, bf16) "
        "and to the 8-client throughput gain on A100 40GB, priced as closed-loop continuous batching (the other "
        "clients' prefills folded into the decode steps): that row gives vLLM its own batch slowdown, which "
        "falls to about zero (0.7% per doubling against NeMo's 7%; even zero leaves the published 6.6x gain 8% "
        "above the model, so some per-request cost of the one-client run overlaps at 8 clients). With it the "
        "three 4-client rows (Llama-3.1-8B, Qwen2.5-7B, Mistral-7B on H100) land within 0.1%, 2% and 11%. "
        "Two rows miss by far: the H200 batch of 8 (vLLM CI's offline latency test) is 25% fast -- its 6.5 ms "
        "per step equals H100's one-request step although H200 streams 43% faster, so that path has a per-step "
        "host cost (scheduling, sampling, detokenizing 8 sequences) that the GPU does not hide, and no fit row "
        "identifies it (every fitted vLLM step is bandwidth-bound); the 16-client point is 38% fast: its 48-token "
        "prompts add under 1% to the steps, so the jump from 6.6 ms at 4 clients to 10.9 ms at 16 is not the "
        "GPU's work (its closed-loop Python client and the server's per-stream output handling are the likely "
        "cost; neither is modelled). Before vLLM had its own slowdown, NeMo's 7% per doubling offset part of "
        "these two misses and overpredicted the 4-client rows by 9-12%",
    "Serving decode, one GPU (gpt-fast)": "meets the 10% target on its one held-out row (Llama-2-7B int8, 3% "
        "slow; it was 21% fast). gpt-fast's factors are fitted to its README's one-A100 rows at batch 1: Llama-2-7B "
        "and Llama-3.1-8B bf16 (2023-12, 2024-09-13), Llama-3.1-8B, Llama-2-70B and Llama-3.1-70B int8. Its int8 "
        "weight-only kernels convert and scale each weight inside the GEMV and reach 67% of HBM against bf16's "
        "83%; the two bf16 sizes of 32 layers and the int8 rows of 32 and 80 layers separate these fractions from "
        "the 54.5 us a layer of fixed cost. The A100 there is power-limited to 330 W",
    "Serving prefill (first token), one GPU (tensorrt-llm)": "misses the 10% target on held-out rows: the "
        "2048-token first tokens fit the matmul fractions; the 128-token H100 FP8 first token is 17% fast: at 128 "
        "tokens the step is mostly fixed costs (launches, one pass over the weights) that the per-layer decode "
        "overhead only partly covers; the two 128-token rows are the only short prefills and both are held out, so "
        "no prefill fixed cost is fitted",
}
