"""Host time of vLLM's V0 engine (vLLM 0.6, multi-step scheduling): calibrated, outside the step model.

Three mechanisms, all forecast-only (the bound, ideal steps, has none):

- **host time per scheduler call** (one call per multi-step window, or per prefill iteration): the CPU work
  vLLM 0.6's engine does serially with the GPU -- scheduling the batch and preparing its inputs once per call,
  and processing the model outputs of each of the call's steps (appending the sampled tokens, detokenizing,
  stop checks, building the outputs the API server streams)::

      host(D sequences, K steps) = schedule(D) + prepare_inputs(D) + K x process_model_outputs(D)

  each term affine in ``D`` (``a + b D`` seconds), least squares on Vidur's CPU-overhead profile of its vLLM
  engine on one A100 node (``vllm_host_overhead.csv``: the Llama-2-7B rows fit, the CodeLlama-34B rows held
  out). The sampler (GPU work) and the model's launches are in the step model already and are not added.
- **front-end time per request**: what the API server adds between a request leaving the client and its
  reaching the engine's waiting queue (HTTP, the OpenAI request's validation, tokenization, the ZMQ hop to the
  engine process) and back (detokenized text streamed as server-sent events) -- one constant ``frontend_s``
  added before the request can be scheduled. Fitted to SGLang's published vLLM 0.6.0 runs on one A100
  (``serving_host_runs.csv``, the one-GPU rows' median TTFT): the mean of (measured - simulated) median TTFT
  with the host time above in place; a constant shift of every arrival shifts every first token by the same
  amount, so the fit is that closed form. The tensor-parallel runs are held out.
- **tensor-parallel worker sync per step** (``model`` > 1 GPUs): vLLM 0.6's driver broadcasts every step's
  inputs to its tensor-parallel worker processes (``broadcast_tensor_dict`` in ``_get_driver_input_and_broadcast``,
  on every step of a multi-step window too: the later steps broadcast the last sampled tokens) and the step
  starts when all have them. Sized from the same Vidur profile's barrier after input preparation
  (``POST_PREPARE_INPUTS_BARRIER``, ``component`` ``tp_barrier``, profiled at 1, 2 and 4 GPUs): one line
  ``a_t + b_t D`` per degree ``t``, least squares on the Llama-2-7B rows (CodeLlama-34B and Llama-2-70B held out),
  and the sync of ``t`` GPUs is what its line adds to the one-GPU line (one GPU has no peer to wait for)::

      sync(t, D) = (a_t - a_1) + (b_t - b_1) D          seconds per step

  A degree above the profiled ones takes the widest profiled line (8 GPUs: the 4-GPU line, a floor: no 8-GPU
  profile exists; a wider group waits at least as long).

vLLM's V1 engine (``--scheduler-steps 1``, what the decode family's vLLM factors were fitted to, vLLM
0.21-0.23) overlaps its host work with the GPU and its measured steps already hold what is left, so none
applies there: `host_applies` is False unless the engine is vLLM and ``num_steps`` > 1.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from simulator.hardware.calibration import DATA

COMPONENTS = ("schedule", "prepare_inputs", "process_model_outputs")
FRONTEND_SHAREGPT_RUN = "lambda-h100-llama3-8b-p80"  #: the ShareGPT lengths the SGLang runs are replayed with


@dataclass(frozen=True)
class HostCost:
    """Host seconds of one scheduler call of ``d`` sequences running ``k`` steps: ``call_s + call_seq_s d +
    k (step_s + sync_s + (step_seq_s + sync_seq_s) d)`` (all zero: no host time)."""

    call_s: float = 0.0
    call_seq_s: float = 0.0
    step_s: float = 0.0
    step_seq_s: float = 0.0
    sync_s: float = 0.0  #: tensor-parallel worker sync per step (s), part of every step like ``step_s``
    sync_seq_s: float = 0.0  #: its part per sequence (s)

    def seconds(self, d: int, k: int = 1) -> float:
        """Host seconds of a call of ``d`` sequences and ``k`` steps."""
        per_step = self.step_s + self.sync_s + (self.step_seq_s + self.sync_seq_s) * d
        return self.call_s + self.call_seq_s * d + k * per_step

    @property
    def zero(self) -> bool:
        return not (self.call_s or self.call_seq_s or self.step_s or self.step_seq_s or self.sync_s or self.sync_seq_s)


def _read(name: str) -> list[dict[str, str]]:
    with (DATA / "calibration" / name).open() as f:
        return list(csv.DictReader(f))


def host_rows() -> list[dict[str, str]]:
    """Vidur's CPU-overhead rows (ms per engine step by component and batch), as read."""
    return _read("vllm_host_overhead.csv")


def run_rows() -> list[dict[str, str]]:
    """SGLang's published vLLM 0.6.0 request-stream figures, as read."""
    return _read("serving_host_runs.csv")


@cache
def component_fits() -> dict[str, tuple[float, float]]:
    """Per component, (intercept s, slope s per sequence): least squares on the component's fit rows."""
    out = {}
    for comp in COMPONENTS:
        rows = [r for r in host_rows() if r["component"] == comp and r["set"] == "fit"]
        d = np.array([float(r["batch"]) for r in rows])
        y = np.array([float(r["measured_ms"]) * 1e-3 for r in rows])
        slope, intercept = np.polyfit(d, y, 1)
        out[comp] = (float(intercept), float(slope))
    return out


def component_s(comp: str, d: int) -> float:
    """Fitted seconds of ``comp`` for a batch of ``d`` sequences."""
    a, b = component_fits()[comp]
    return a + b * d


TP_BARRIER = "tp_barrier"  #: the component of Vidur's barrier rows (POST_PREPARE_INPUTS_BARRIER_MEDIAN)


@cache
def barrier_fits() -> dict[int, tuple[float, float]]:
    """Per profiled tensor-parallel degree, (intercept s, slope s per sequence) of the barrier after input
    preparation: least squares on that degree's fit rows."""
    rows = [r for r in host_rows() if r["component"] == TP_BARRIER and r["set"] == "fit"]
    out = {}
    for tp in sorted({int(r["tp"]) for r in rows}):
        d = np.array([float(r["batch"]) for r in rows if int(r["tp"]) == tp])
        y = np.array([float(r["measured_ms"]) * 1e-3 for r in rows if int(r["tp"]) == tp])
        slope, intercept = np.polyfit(d, y, 1)
        out[tp] = (float(intercept), float(slope))
    return out


def profiled_degree(tp: int) -> int:
    """The profiled degree whose barrier line ``tp`` GPUs take: the widest profiled one not above ``tp``."""
    if not (isinstance(tp, int) and tp >= 1):
        raise ValueError(f"tensor-parallel degree {tp!r} must be a whole number >= 1")
    return max(t for t in barrier_fits() if t <= tp)


def barrier_s(tp: int, d: int) -> float:
    """Fitted barrier seconds per step of ``tp`` GPUs (the line of `profiled_degree`) at ``d`` sequences."""
    a, b = barrier_fits()[profiled_degree(tp)]
    return a + b * d


def tp_sync(tp: int) -> tuple[float, float]:
    """(seconds per step, seconds per sequence per step) ``tp`` GPUs' worker sync adds: the line of
    `profiled_degree` less the one-GPU line; (0, 0) for one GPU."""
    fits = barrier_fits()
    a, b = fits[profiled_degree(tp)]
    a1, b1 = fits[1]
    return a - a1, b - b1


@cache
def vllm_v0_host(tp: int = 1) -> HostCost:
    """The fitted host cost per scheduler call of vLLM 0.6's engine on ``tp`` tensor-parallel GPUs."""
    f = component_fits()
    sync_s, sync_seq_s = tp_sync(tp)
    return HostCost(call_s=f["schedule"][0] + f["prepare_inputs"][0],
                    call_seq_s=f["schedule"][1] + f["prepare_inputs"][1],
                    step_s=f["process_model_outputs"][0], step_seq_s=f["process_model_outputs"][1],
                    sync_s=sync_s, sync_seq_s=sync_seq_s)


def run_requests(run: str) -> list[Any]:
    """The requests of a published ``run`` of serving_requests.csv as `Arrival` s (arrival s, prompt and output
    tokens; an output of 0 tokens counted by the benchmark served as 1)."""
    from simulator.workloads.serving.arrivals import Arrival

    return [Arrival(float(r["arrival_s"]), int(r["prompt_tokens"]), max(int(r["output_tokens"]), 1))
            for r in _read("serving_requests.csv") if r["run"] == run]


def sharegpt_stream(rate_per_s: float, n: int, seed: int = 1) -> list[Any]:
    """``n`` Poisson arrivals at ``rate_per_s``, (prompt, output) pairs drawn with replacement from the 80
    ShareGPT requests of ``FRONTEND_SHAREGPT_RUN`` (the lengths vLLM's benchmark sampled; the published runs
    name the dataset, not their requests)."""
    from simulator.workloads.serving.arrivals import Arrival

    pairs = [(a.prompt_tokens, a.output_tokens) for a in run_requests(FRONTEND_SHAREGPT_RUN)]
    rng = np.random.default_rng(seed)
    times = np.cumsum(rng.exponential(1.0 / rate_per_s, n))
    idx = rng.integers(0, len(pairs), n)
    return [Arrival(float(t), *pairs[i]) for t, i in zip(times, idx, strict=True)]


#: vLLM 0.6.0's --num-scheduler-steps of the replayed runs (SGLang's; LambdaLabs' benchmark_v0.md, ITLs 10 apart)
SCHEDULER_STEPS = 10


def vllm_replay(model: Any, chip: str, gpus: int, max_model_len: int, memory_fraction: float) -> Any:
    """The `ServeSetup` of a published vLLM 0.6.0 run replayed request by request: ``model`` (a
    `TransformerConfig`) tensor parallel over ``gpus`` of ``chip``, chunked prefill off with a prefill budget of
    max(``max_model_len``, 2048) tokens (vLLM V0's max_num_batched_tokens), 256 sequences, `SCHEDULER_STEPS`-step
    decode windows, and ``memory_fraction`` of each GPU's memory for weights and KV (--gpu-memory-utilization)."""
    from simulator.hardware.specs import get_chip
    from simulator.workloads.budget import Parallelism
    from simulator.workloads.serving.scheduler import SchedulerConfig
    from simulator.workloads.serving.simulate import ServeSetup

    sched = SchedulerConfig(max_batch=256, chunk_tokens=0, whole_budget_tokens=max(max_model_len, 2048),
                            num_steps=SCHEDULER_STEPS)
    return ServeSetup(model, get_chip(chip), Parallelism(1, gpus), sched=sched, max_model_len=max_model_len,
                      memory_fraction=memory_fraction, engine="vllm")


SGLANG_MEMORY_FRACTION = 0.9  #: vLLM 0.6's default --gpu-memory-utilization, what SGLang's runs are replayed with


@cache
def simulate_run(run: str, frontend_s: float) -> dict[str, float]:
    """Median TTFT and TPOT (ms) of SGLang's ``run`` replayed (host time per call in place, ``frontend_s``)."""
    from simulator.workloads.serving.metrics import summarize
    from simulator.workloads.serving.simulate import run_stream
    from simulator.workloads.transformer import get_model

    r = next(r for r in run_rows() if r["run"] == run)
    setup = vllm_replay(get_model(r["model"]), r["chip"], int(r["gpus"]), int(r["max_model_len"]),
                        SGLANG_MEMORY_FRACTION)
    arrivals = sharegpt_stream(float(r["request_rate"]), int(r["prompts"]))
    s = summarize(run_stream(setup, arrivals, "forecast", frontend_s=frontend_s).done)
    return {"median_ttft": 1e3 * s["ttft_s"]["p50"], "median_tpot": 1e3 * s["tpot_s"]["p50"]}


@cache
def vllm_v0_frontend_s() -> float:
    """The fitted front-end seconds per request: mean over the fit rows of measured - simulated median TTFT
    (simulated with no front-end time; a constant shift of every arrival shifts every first token by itself)."""
    fit = [r for r in run_rows() if r["set"] == "fit"]
    gaps = [float(r["measured"]) - simulate_run(r["run"], 0.0)[r["metric"]] for r in fit]
    return max(float(np.mean(gaps)) * 1e-3, 0.0)


def host_applies(engine: str | None, num_steps: int) -> bool:
    """Whether the forecast adds vLLM 0.6's host terms: the engine is vLLM and runs multi-step windows
    (``num_steps`` > 1, which only vLLM 0.6's V0 engine has); vLLM V1 and other engines: their fitted steps
    hold their host time."""
    from simulator.hardware.decode_calibration import DEFAULT_ENGINE

    return (engine or DEFAULT_ENGINE) == "vllm" and num_steps > 1


def describe(frontend_s: float, host: HostCost) -> list[str]:
    """The calibrated parts as one line each (empty when none applies)."""
    if not frontend_s and host.zero:
        return []
    sync = ([f"vLLM 0.6 tensor-parallel worker sync {1e3 * host.sync_s:.3f} + {1e3 * host.sync_seq_s:.4f} ms per "
             "sequence per step (the per-step input broadcast to the workers; fitted to Vidur's A100 barrier profile "
             "at 2 and 4 GPUs, wider groups take the 4-GPU line as a floor)"] if host.sync_s or host.sync_seq_s else [])
    return [f"vLLM 0.6 front-end {1e3 * frontend_s:.1f} ms per request before its prefill can be scheduled (fitted "
            "to SGLang's published vLLM 0.6.0 one-A100 runs' median TTFT)",
            f"vLLM 0.6 host time per scheduler call {1e3 * host.call_s:.2f} + {1e3 * host.call_seq_s:.3f} ms per "
            f"sequence, plus per step of the window {1e3 * host.step_s:.2f} + {1e3 * host.step_seq_s:.3f} ms per "
            "sequence (schedule, input preparation, output processing; fitted to Vidur's A100 CPU profile of vLLM)"
            ] + sync
