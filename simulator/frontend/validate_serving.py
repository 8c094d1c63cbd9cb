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
"""
from __future__ import annotations

import csv
from functools import cache
from typing import Any

from simulator.frontend.validate_decode import VARIANTS
from simulator.hardware.calibration import DATA
from simulator.hardware.specs import get_chip
from simulator.workloads.budget import Parallelism
from simulator.workloads.serving.arrivals import Arrival
from simulator.workloads.serving.metrics import summarize
from simulator.workloads.serving.scheduler import SchedulerConfig
from simulator.workloads.serving.simulate import ServeSetup, run_stream
from simulator.workloads.transformer import get_model

FAMILY = "Serving request streams (vLLM, one GPU)"
TP_FAMILY = "Serving request streams (vLLM, tensor parallel)"
UNITS = {"median_ttft": "ms", "median_tpot": "ms", "output_throughput": "tokens/s"}
SCHEDULER_STEPS = 10  #: vLLM 0.6.0 --num-scheduler-steps of the LambdaLabs runs (benchmark_v0.md; ITLs 10 apart)
MEMORY_FRACTION = 0.95  #: LambdaLabs benchmark.py's --gpu-memory-utilization default
TARGETS = {FAMILY: 0.15, TP_FAMILY: 0.15}  #: issue 33: held-out throughput and p50 latencies within 15% geomean


def _read(name: str) -> list[dict[str, str]]:
    with (DATA / "calibration" / name).open() as f:
        return list(csv.DictReader(f))


def serving_rows() -> list[dict[str, str]]:
    """The published figures, as read."""
    return _read("serving_latency.csv")


def run_requests(run: str) -> list[Arrival]:
    """The requests of ``run`` (an output of 0 tokens counted by the benchmark served as 1)."""
    return [Arrival(float(r["arrival_s"]), int(r["prompt_tokens"]), max(int(r["output_tokens"]), 1))
            for r in _read("serving_requests.csv") if r["run"] == run]


def _model(name: str) -> Any:
    base, changes = VARIANTS.get(name, (name, {}))
    return get_model(base).replace(**changes) if changes else get_model(base)


@cache
def predict_run(run: str, chip: str, model: str, gpus: int, max_model_len: int) -> dict[str, float]:
    """The forecast of ``run``: median TTFT and TPOT (ms) and output tokens/s."""
    sched = SchedulerConfig(max_batch=256, chunk_tokens=0, whole_budget_tokens=max(max_model_len, 2048),
                            num_steps=SCHEDULER_STEPS)
    setup = ServeSetup(_model(model), get_chip(chip), Parallelism(1, gpus), sched=sched, max_model_len=max_model_len,
                       memory_fraction=MEMORY_FRACTION, engine="vllm")
    s = summarize(run_stream(setup, run_requests(run), "forecast").done)
    return {"median_ttft": 1e3 * s["ttft_s"]["p50"], "median_tpot": 1e3 * s["tpot_s"]["p50"],
            "output_throughput": s["output_tokens_per_s"]}


def predict(row: dict[str, str]) -> float:
    """The row's metric as forecast."""
    out = predict_run(row["run"], row["chip"], row["model"], int(row["gpus"] or 1), int(row["max_model_len"]))
    return out[row["metric"]]


def serving_cases(case: Any) -> list[Any]:
    """One ``case`` (`simulator.frontend.validate.Case`) per published figure."""
    return [case(FAMILY if int(r["gpus"] or 1) == 1 else TP_FAMILY, f"{r['run']} {r['metric']}", float(r["measured"]),
                 predict(r), UNITS[r["metric"]], r["set"] != "fit") for r in serving_rows()]


NOTES = {FAMILY: (
    "misses the 15% target on its held-out rows (every row is held out: the serving simulator fits nothing, its "
    "steps are the decode family's fitted vLLM factors, fitted to vLLM 0.23 rows). LambdaLabs' vLLM 0.6.0 runs of "
    "10 and 80 ShareGPT requests sent at once on one H100 / A100, replayed request by request with the run's "
    "10-step scheduler windows: output throughput 9-17% high and median TPOT 8-11% low (the files' ITLs put a "
    "10-step window of 10 sequences at 72 ms on H100, 7.2 ms a step, where the step model gives 6.5: the host "
    "time of vLLM 0.6's windows is not modelled), median TTFT 25-61% low: the measured first token is 31-38 ms "
    "later than the forecast on every 10-request run, on both chips, and the 80-request run's first tokens come "
    "in clusters from 267 ms on, out of send order -- a per-request front-end cost (HTTP, tokenizing, the hop "
    "to the engine process) that no step model holds and no fit row identifies; the prefill matmul fraction "
    "itself is fitted to TensorRT-LLM's first tokens, not vLLM's. Two changes were made after these rows' "
    "errors were seen, and are disclosed: (1) the first error seen (TTFT 51-82% low) came from a defect -- the "
    "prefill chunks of one iteration were priced chunk by chunk, so many short prompts cost less than the "
    "ideal bound; pricing them as one prefill step (the forecast is now never below the bound, a test checks); "
    "(2) the runs are replayed with --num-scheduler-steps 10 (a setting of the published run, named in "
    "benchmark_v0.md and visible in the files' ITLs, read after the errors were seen: median TPOT error 13.4% -> "
    "10.3% geomean) and decode batches at vLLM's CUDA-graph sizes (vLLM's model_runner.py; 1-2% on TPOT). "
    "Neither fits a constant, so the rows still check the step model, not a fit to them"),
    TP_FAMILY: (
    "misses the 15% target on its held-out rows (all held out; added with their set written before any error "
    "on them was computed). LambdaLabs' vLLM 0.6.0 runs of the same 10 ShareGPT requests on 2-8 H100 SXM of one "
    "node (Llama-3-8B TP2, Llama-3-70B TP2 / TP4 / TP8), replayed as the one-GPU family is, the AllReduces as "
    "simulator.workloads.served_tp prices them for vLLM: its custom one-shot kernel at constants fitted to "
    "vLLM's own CUDA-graph microbenchmark of that kernel (allreduce_kernels.csv, about 5 us a call plus the bytes "
    "at 73% of NVLink; none to these rows). Median TPOT 23% low on 8B TP2, 4% high, 8% and 18% low on 70B TP2 / "
    "TP4 / TP8, output throughput to match; median TTFT 38-69% low, the same fixed first-token gap as on one GPU "
    "(37 ms on 8B TP2, 61-83 ms on 70B). Before the kernel fit these AllReduces took NeMo + TensorRT-LLM's "
    "fitted 14.75 us per doubling of GPUs on top (TPOT 9% low on 8B TP2, 10-35% high on 70B, worst at TP8: "
    "17.0% geomean, now 15.5%). Those errors had been seen before the kernel model was chosen (a published "
    "microbenchmark per engine kernel, fitted apart), so these rows no longer check that choice independently; "
    "no constant is fitted to them, so what they still check is whether the kernels' measured constants, "
    "carried into a served step, give the published per-token time. What the step model still lacks at TP2 "
    "(8B: the published median TPOT is 5.3 ms, the model's 4.1: half the one-GPU weight time plus 64 one-shot "
    "AllReduces, 0.32 ms) is not AllReduce time by the kernel's own measurements: vLLM 0.6's per-step work "
    "across its tensor-parallel worker processes is the likely cost, and no fit row identifies it")}
