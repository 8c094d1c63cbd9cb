"""`podsim validate`'s request-stream family: published serving benchmarks (median TTFT, median TPOT and output
throughput of a whole request stream) against `simulator.workloads.serving` forecasts.

``serving_latency.csv`` holds one row per published figure (source, engine version, chip, model, the run it
belongs to, the engine's settings, the metric, the measured value, ``set``); ``serving_requests.csv`` the
requests of each run (arrival, prompt and output tokens as the benchmark sent and counted them). Each run is
replayed through the iteration-level scheduler with the engine's settings (chunked prefill off and a prefill
budget of max(max_model_len, 2048) tokens, as vLLM 0.6 ran with a 2,048-token context; 256 sequences) and
every step priced by the calibrated served model for the row's engine. vLLM 0.6.0 ran with
``--num-scheduler-steps 10`` (the files' ITLs come 10 tokens apart; LambdaLabs' benchmark_v0.md), replayed as
10-step decode windows whose tokens reach the client at the window's end, and with benchmark.py's
``--gpu-memory-utilization 0.95``. Runs on one GPU and tensor parallel over 2-8 GPUs of one node are two
families. Metrics as ``vllm bench serve`` reports them: medians over requests, output tokens over the run's span.
The forecast of these vLLM 0.6 multi-step runs includes vLLM 0.6's host time (`simulator.workloads.serving.host`);
three more families hold its mechanisms' own sources: Vidur's per-step CPU profile, the same profile's
tensor-parallel barrier, and SGLang's vLLM 0.6.0 runs.
"""
from __future__ import annotations

import csv
from functools import cache
from typing import Any

from simulator.frontend.validate_decode import VARIANTS
from simulator.hardware.calibration import DATA
from simulator.workloads.serving.host import run_requests, vllm_replay
from simulator.workloads.serving.metrics import summarize
from simulator.workloads.serving.simulate import run_stream
from simulator.workloads.transformer import get_model

FAMILY = "Serving request streams (vLLM, one GPU)"
TP_FAMILY = "Serving request streams (vLLM, tensor parallel)"
HOST_FAMILY = "vLLM host time per engine step (Vidur, one A100)"
SYNC_FAMILY = "vLLM tensor-parallel worker sync"
FRONTEND_FAMILY = "Serving request streams (vLLM 0.6, SGLang's runs)"
UNITS = {"median_ttft": "ms", "median_tpot": "ms", "output_throughput": "tokens/s"}
MEMORY_FRACTION = 0.95  #: LambdaLabs benchmark.py's --gpu-memory-utilization default
TARGETS = {FAMILY: 0.15, TP_FAMILY: 0.15, FRONTEND_FAMILY: 0.15}  #: issue 33: held-out throughput, p50 latencies in 15%


def _read(name: str) -> list[dict[str, str]]:
    with (DATA / "calibration" / name).open() as f:
        return list(csv.DictReader(f))


def serving_rows() -> list[dict[str, str]]:
    """The published figures, as read."""
    return _read("serving_latency.csv")


def _model(name: str) -> Any:
    base, changes = VARIANTS.get(name, (name, {}))
    return get_model(base).replace(**changes) if changes else get_model(base)


@cache
def predict_run(run: str, chip: str, model: str, gpus: int, max_model_len: int) -> dict[str, float]:
    """The forecast of ``run``: median TTFT and TPOT (ms) and output tokens/s."""
    setup = vllm_replay(_model(model), chip, gpus, max_model_len, MEMORY_FRACTION)
    s = summarize(run_stream(setup, run_requests(run), "forecast").done)
    return {"median_ttft": 1e3 * s["ttft_s"]["p50"], "median_tpot": 1e3 * s["tpot_s"]["p50"],
            "output_throughput": s["output_tokens_per_s"]}


def predict(row: dict[str, str]) -> float:
    """The row's metric as forecast."""
    out = predict_run(row["run"], row["chip"], row["model"], int(row["gpus"] or 1), int(row["max_model_len"]))
    return out[row["metric"]]


def host_cases(case: Any) -> list[Any]:
    """The vLLM 0.6 host-time mechanisms' own sources (`simulator.workloads.serving.host`): Vidur's per-step CPU
    times and its barrier after input preparation at 1-4 GPUs against the fitted lines, and SGLang's vLLM 0.6.0
    request streams replayed with the host time (the one-GPU front-end time fitted from them)."""
    from simulator.workloads.serving import host

    rows = host.host_rows()
    out = [case(HOST_FAMILY, r["row"], float(r["measured_ms"]), 1e3 * host.component_s(r["component"], int(r["batch"])),
                "ms", r["set"] != "fit") for r in rows if r["component"] in host.COMPONENTS]
    out += [case(SYNC_FAMILY, r["row"], float(r["measured_ms"]), 1e3 * host.barrier_s(int(r["tp"]), int(r["batch"])),
                 "ms", r["set"] != "fit") for r in rows if r["component"] == host.TP_BARRIER]
    fe = 1e3 * host.vllm_v0_frontend_s()
    out += [case(FRONTEND_FAMILY, r["row"], float(r["measured"]),
                 host.simulate_run(r["run"], 0.0)[r["metric"]] + (fe if r["metric"] == "median_ttft" else 0.0), "ms",
                 r["set"] != "fit") for r in host.run_rows()]
    return out


def serving_cases(case: Any) -> list[Any]:
    """One ``case`` (`simulator.frontend.validate.Case`) per published figure."""
    return [case(FAMILY if int(r["gpus"] or 1) == 1 else TP_FAMILY, f"{r['run']} {r['metric']}", float(r["measured"]),
                 predict(r), UNITS[r["metric"]], r["set"] != "fit") for r in serving_rows()] + host_cases(case)


_HOST_DISCLOSURE = (
    "Since session h33serve the forecast adds vLLM 0.6's host time (simulator.workloads.serving.host, for vLLM run "
    "with multi-step windows only; the bound is unchanged): a front-end time per request before its prefill can be "
    "scheduled (HTTP, tokenizing, the hop to the engine process and back; 22.6 ms, 25.1 ms before the eager prefill "
    "below, fitted to SGLang's published "
    "vLLM 0.6.0 one-A100 runs' median TTFT) and a host time per scheduler call (scheduling and input preparation "
    "once, output processing per step of the window, affine in the sequences; fitted to Vidur's A100 CPU profile "
    "of vLLM) -- both sized from sources other than these rows, but built after these rows' errors had been seen "
    "(this note named the first-token gap and the 72-vs-65 ms window before), so these rows check the mechanisms' "
    "size, not their presence. Since session h33tp every prefill step of these vLLM 0.6 runs is priced kernel by "
    "kernel as vLLM 0.6 runs it, eagerly (simulator.workloads.serving.eager: vLLM V0's model runner replays CUDA "
    "graphs for decode batches only, 'Currently cuda graph is only supported by the decode phase'): each layer's "
    "GEMMs at their tensor-parallel shapes, FlashAttention, the RMSNorms and residual adds over the whole "
    "activation on every GPU, SiLU-and-multiply, rotary and the KV-cache write, on the GPU kernel model (fitted to "
    "XLA's H100 table, mamf-finder and Vidur's operator profiles; its layer sums match Vidur's held-out "
    "CodeLlama-34B operators within 12%, a test), in place of the decode-fitted factors' one share of peak for all "
    "prefill FLOPs; no constant of it is fitted to any serving run. Disclosed: chosen after these rows' errors were "
    "seen (the brief of that session named eager prefill as a candidate), so these rows check its size, not the "
    "choice")

NOTES = {FAMILY: (
    "meets the 15% target on its held-out rows (12.5%; 15.0% before the eager prefill of session h33tp below, "
    "36.1% before the host time; "
    "every row is held out: the step model is the decode family's fitted vLLM factors, fitted to vLLM 0.23 rows). "
    "LambdaLabs' vLLM 0.6.0 runs of 10 and 80 ShareGPT requests sent at once on one H100 / A100, replayed request "
    "by request with the run's 10-step scheduler windows. " + _HOST_DISCLOSURE + ". By metric, before -> host time "
    "-> eager prefill: median TTFT 104.8% -> 34.0% -> 24.3%, median TPOT 10.3% -> 9.3% -> 10.1%, output "
    "throughput 11.5% -> 3.8% -> 4.1% (geomean). The 10-request runs: TTFT 7-8% low (4-17% before the eager "
    "prefill), TPOT 1-6% low, throughput 3-7% high. The 80-request run is what is left: its median TTFT is still "
    "47% low (55% before the eager prefill; its first tokens come in clusters from 267 ms on, out of send order, "
    "which a "
    "constant front-end time does not make) and its median TPOT went from 8% low to 30% high (34% with the eager "
    "prefill: its prefill steps between windows are longer) -- the output "
    "processing of a window of 80 sequences is priced serially (about 54 ms a window), where vLLM 0.6's "
    "asynchronous output processor (the v0.6.0 blog) overlaps it with the next steps; that overlap is not modelled "
    "(no source read sizes it). Earlier changes, also made after these rows' errors were seen: (1) the first error "
    "seen (TTFT 51-82% low) came from a defect -- the prefill chunks of one iteration were priced chunk by chunk, "
    "so many short prompts cost less than the ideal bound; pricing them as one prefill step (the forecast is now "
    "never below the bound, a test checks); (2) the runs are replayed with --num-scheduler-steps 10 (a setting of "
    "the published run, named in benchmark_v0.md and visible in the files' ITLs, read after the errors were seen: "
    "median TPOT error 13.4% -> 10.3% geomean) and decode batches at vLLM's CUDA-graph sizes (vLLM's "
    "model_runner.py; 1-2% on TPOT). None fits a constant to these rows"),
    TP_FAMILY: (
    "meets the 15% target on its held-out rows (12.1%; 16.6% before the eager prefill of session h33tp below, "
    "18.3% before the tensor-parallel worker sync, 40.1% before the host time and the kernel-priced AllReduces; "
    "all held out, added with their set written before any error on them was computed). LambdaLabs' "
    "vLLM 0.6.0 runs of the same 10 ShareGPT requests on 2-8 H100 SXM of one node (Llama-3-8B TP2, Llama-3-70B "
    "TP2 / TP4 / TP8), replayed as the one-GPU family is. " + _HOST_DISCLOSURE + ". The AllReduces are priced as "
    "simulator.workloads.served_tp prices them for vLLM: its custom one-shot kernel at constants fitted to vLLM's "
    "own CUDA-graph microbenchmark of that kernel (allreduce_kernels.csv, about 5 us a call plus the bytes at 73% "
    "of NVLink; none to these rows), in place of NeMo + TensorRT-LLM's borrowed 14.75 us per doubling of GPUs "
    "(TPOT 10-35% high on 70B with it, worst at TP8). Those errors had been seen before the kernel model was "
    "chosen, so these rows no longer check that choice independently; no constant is fitted to them. Since "
    "session h33serve (second pass) every step also pays vLLM 0.6's tensor-parallel worker sync (the family "
    "'vLLM tensor-parallel worker sync': Vidur's A100 barrier, 0.055 ms a step on 2 GPUs, 0.36 + 0.021 ms per "
    "sequence on 4, the 4-GPU line on 8 as a floor); disclosed: this note named that per-step work as the likely "
    "cost before the mechanism was built, so these rows' errors had been seen and they check its size, not the "
    "choice to add it. Now: median TPOT 10% low on 8B TP2, 6% high, 2% and 10% low on 70B TP2 / TP4 / TP8 "
    "(before the sync: 11% low, 5% high, 5% and 14% low); output throughput 3-15% off; median TTFT 15%, 16%, 12% "
    "and 23% low on 8B TP2 and 70B TP2 / TP4 / TP8 (20-34% low before the eager prefill: the prefill step of the "
    "10 prompts went from 16.6 to 21.3 ms on 8B TP2 and from 135.6 / 80.0 / 54.0 to 159.4 / 98.9 / 69.9 ms on 70B "
    "-- the GEMMs at their sharded shapes below the one share of peak, and about 8 ms of RMSNorms and residual "
    "adds on 70B that do not shrink with the degree; the sync adds under 1 ms to a first token). "
    "Diagnosed from the result files' per-request timings (not fitted): the first tokens are "
    "not clustered -- every request with text gets its first token within 1.7 ms of the others (one prefill "
    "iteration of all 10 prompts, as replayed); two requests returned no text (TTFT 0 in the files, in the "
    "published median, which the equal others leave at their common value). The gap left is 8 ms on 8B TP2 and "
    "36 / 17 / 28 ms on 70B TP2 / TP4 / TP8 (10 and 57 / 34 / 41 ms before the eager prefill), +22%, +17% and "
    "+40% of the eager prefill; the files' first decode window after the prefill is also 4-16 ms longer than the "
    "later ones, which the replay lacks. Candidates no source read sizes, so not modelled: the host's Python "
    "dispatch of an eager layer beyond one launch per kernel, the driver's broadcast of the prefill inputs to the "
    "workers (Vidur's barrier rows are decode steps), and sampling / detokenizing the first tokens"),
    HOST_FAMILY: (
    "misses the 10% target on its held-out rows (the fit rows meet it); the source of the host time per "
    "scheduler call (simulator.workloads.serving.host): Vidur's profile of its "
    "vLLM engine's CPU time per step on one A100 (data/profiling/a100/cpu_overheads.csv: schedule, prepare inputs, "
    "process model outputs, medians, batches 8-64, tensor parallel 1), one line a + b x batch per component, least "
    "squares on the Llama-2-7B rows (fit: 2.4% geomean); the CodeLlama-34B rows are held out (set by model before "
    "any error was computed) and miss: schedule 2-15% off, but prepare inputs 43-61% and output processing 17-28% "
    "low -- these costs grow with the model (48 layers against 32), which the line, fitted on one model, does not "
    "hold; so the host time is low for models larger than Llama-2-7B / Llama-3-8B"),
    SYNC_FAMILY: (
    "misses the 10% target on its held-out rows (15.5%; the fit rows meet it: 3.9%); the source of the "
    "tensor-parallel worker sync per step (simulator.workloads.serving.host): Vidur's profile of its vLLM "
    "engine on A100s (data/profiling/a100/cpu_overheads.csv at 0633efae, column POST_PREPARE_INPUTS_BARRIER_MEDIAN: "
    "the barrier the tensor-parallel workers pass after a step's inputs are prepared; batches 8-64 at 1, 2 and 4 "
    "GPUs), one line a + b x batch per degree, least squares on the Llama-2-7B rows; the CodeLlama-34B (1, 2, 4 "
    "GPUs) and Llama-2-70B (2, 4 GPUs) rows are held out (set by model, as the host-time rows were, before any "
    "error was computed). The sync of t GPUs is its line less the one-GPU line (0.055 ms a step on 2 GPUs; "
    "0.36 ms + 0.021 ms per sequence on 4); 8 GPUs take the 4-GPU line, a floor: Vidur profiled no 8-GPU "
    "barrier. Held out by group (geomean): 34B 1 GPU 8.8%, 2 GPUs 22.4% (its barrier grows with the batch from "
    "40 on: at 64 it is 64% above the flat 7B line), 4 GPUs 12.4%; 70B 2 GPUs 10.1%, 4 GPUs 18.0% (scattered: "
    "24% below to 84% above the line, not monotone in the batch). Disclosed: the brief of this session quoted "
    "an earlier, lost attempt's fit and held-out errors for this same split before it was rebuilt; nothing was "
    "tuned after them. Vidur's RAY_COMM_TIME (3-10 ms a step at 2-4 GPUs) is not used: vLLM 0.6 runs one node's "
    "workers as processes, not Ray actors"),
    FRONTEND_FAMILY: (
    "meets issue 33's 15% target on its held-out rows (10.5%; 13.1% before the eager prefill of session h33tp, "
    "16.6% before the tensor-parallel worker sync of "
    "session h33serve's second pass, 8.7% before the kernel-priced tensor-parallel AllReduces of "
    "simulator.workloads.served_tp were merged, which made the 4 x H100 70B steps faster); the source "
    "of the front-end time per request and a "
    "check of the host time per scheduler call "
    "(simulator.workloads.serving.host): SGLang's published vLLM 0.6.0 runs (benchmark/benchmark_vllm_060: "
    "--num-scheduler-steps 10, ShareGPT, Poisson at 4 and 8 requests/s; Llama 3.1 8B on one A100, 70B on 4 x "
    "H100), replayed with lengths drawn from the 80 ShareGPT requests of serving_requests.csv (the runs name the "
    "dataset, not their requests: the lengths, not any measured value of those rows, are used). The one-A100 "
    "median TTFTs fit the front-end time (22.6 ms, 25.1 ms before the eager prefill: the mean of measured - "
    "simulated; a constant delay of every arrival delays every first token by itself, so this is the closed-form "
    "fit); every median TPOT and the "
    "4 x H100 TTFTs are held out. Disclosed: the split (one-GPU TTFT fit, the rest held out) was written after "
    "a first replay of all four runs without host time had been seen (TTFT 23-35% low, TPOT 15-20% low on A100 "
    "and +0% to -9% on 4 x H100); no constant was tuned after it. The 4 x H100 rows' errors (TPOT 10-14% low, "
    "TTFT 21-24% low) had also been seen before the worker sync was added, so they do not check that choice "
    "independently; its constants come from Vidur's profile alone. Held out: median TPOT 4-6% low on A100 (6-8% "
    "before the eager prefill), 8% low and 0% on 4 x H100 (5-10% low before it, 10-14% before the sync); median "
    "TTFT 18-19% low on 4 x H100 (20% before the eager prefill, 21-24% before the sync)")}
