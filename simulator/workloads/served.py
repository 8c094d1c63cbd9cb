"""Calibrated serving on one accelerator: decode and prefill steps, and whole requests, as measured systems run them.

The ideal step (`simulator.workloads.simulate.simulate_decode`) streams every byte at the spec HBM
bandwidth and runs every FLOP at peak. A served model does not: its decode kernels reach a fraction of
HBM bandwidth (less as a step's skinny matmuls gain rows), each layer pays kernel launches and
synchronisation, and prefill's matmuls reach a fraction of peak. `served_step` prices the simulator's own
per-layer ops (`simulator.workloads.simulate.layer_ops`: weights, KV cache, FLOPs per layer) with the
chip's fitted factors as a serving engine reaches them (`simulator.hardware.decode_calibration`: vLLM,
TensorRT-LLM, gpt-fast), per op::

    memory   = weights / (B * eta_w) * (1 + beta * log2(rows)) + KV read / (B * eta * alpha) + KV write / (B * eta)
               (eta_w: eta, or the engine's own 8-bit fraction for 8-bit weights: gpt-fast's int8 weight-only)
    compute  = useful FLOPs / (peak * epsilon[dtype])   (the fitted epsilon absorbs tile padding)
    op       = max(memory, compute)                   (streaming overlaps compute, as double buffering does)
    step     = sum of ops + layers * tau_layer

and reports every factor's seconds beside its ideal (spec bandwidth and peak, no overhead). With ``model``
tensor-parallel GPUs (Megatron: heads and MLP columns split, weights and KV cache per GPU divided by
``model``) each layer also pays its two AllReduces of [tokens, d_model] as the engine runs them
(`simulator.workloads.served_tp`: the algorithm's latency from NCCL's protocol table plus the engine's
fitted synchronisation, or the engine's custom kernel at its fitted constants)::

    allreduce = layers * 2 * (algorithm(model, tokens * d_model * act bytes) + sync_s * log2(model))

Every result names what it prices without a fitted constant (``uncalibrated``). `served_request` adds up a
whole request: the prefill of ``input_len`` tokens per request (the first token), then ``output_len - 1``
decode steps as the context grows.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from simulator.hardware.decode_calibration import DecodeCalibration, get_decode_calibration
from simulator.hardware.specs import ChipSpec, get_chip
from simulator.units import check_int, positive_int
from simulator.workloads.budget import MAX_REQUESTS, Parallelism, check_layout, request_contexts, with_dtypes
from simulator.workloads.served_tp import AllReduceKernel, allreduce_cost, check_gpus, engine_comm, ideal_allreduce_s
from simulator.workloads.simulate import LayerOp, head_op, layer_ops, simulate_decode
from simulator.workloads.transformer import TransformerConfig

MAX_OUTPUT_TOKENS = 262_144  #: decode steps one request may add up (each priced on its own, ~0.1 ms of CPU)
FACTORS = ("weights", "kv_cache", "matmul", "overlap", "launch_sync", "allreduce")


@dataclass
class _Sums:
    """Seconds per factor over a step's ops."""

    weights: float = 0.0
    kv_cache: float = 0.0
    matmul: float = 0.0
    overlap: float = 0.0  # <= 0: time hidden because streaming and compute run at once
    launch_sync: float = 0.0
    allreduce: float = 0.0  # tensor-parallel AllReduces (0 on one GPU)

    def add(self, weights: float, kv: float, matmul: float, times: float = 1.0) -> None:
        self.weights += weights * times
        self.kv_cache += kv * times
        self.matmul += matmul * times
        self.overlap += (max(weights + kv, matmul) - (weights + kv + matmul)) * times

    @property
    def total(self) -> float:
        return self.weights + self.kv_cache + self.matmul + self.overlap + self.launch_sync + self.allreduce


def _chip(chip: str | ChipSpec) -> ChipSpec:
    return chip if isinstance(chip, ChipSpec) else get_chip(chip)


def _compute_dtype(cfg: TransformerConfig) -> str:
    return "int8" if cfg.weight_elem_bytes == 1 else "bf16"


def _step_sums(cfg: TransformerConfig, spec: ChipSpec, cal: DecodeCalibration, batch: int,
               context: int | Sequence[int], new_tokens: int, model: int = 1) -> tuple[_Sums, _Sums]:
    """(ideal, calibrated) seconds per factor of one step on each of ``model`` tensor-parallel GPUs: ``batch``
    requests at ``context`` (one for all, or one per request) each adding ``new_tokens`` (1: decode; the
    prompt length: prefill)."""
    contexts = request_contexts(batch, context)
    par = Parallelism(1, model)
    ops: list[LayerOp] = layer_ops(cfg, spec, par, contexts, new_tokens)
    head = head_op(cfg, spec, par, batch * new_tokens)
    dtype = _compute_dtype(cfg)
    bw, peak = spec.hbm_bandwidth_bytes_per_s, spec.peak_flops_per_s(dtype)
    eta, alpha, eps = cal.hbm_fraction, cal.attention_fraction, cal.matmul(dtype)
    eta_w = cal.weight_fraction(cfg.weight_elem_bytes)  # int8 weight-only kernels: their own fraction
    slow = cal.weight_slowdown(batch * new_tokens)
    ideal, real = _Sums(), _Sums()
    for op, times in [(u, cfg.n_layers) for u in ops] + [(head, 1)]:
        kv = op.kv_read_bytes + op.kv_write_bytes
        useful = op.flops if op.useful_flops is None else op.useful_flops
        # the bound prices the useful FLOPs at peak: small-batch GEMMs need not pad the token dimension to the
        # MXU's sublanes (swap-AB kernels put it on the narrow side), and the calibration's fraction is of those
        ideal.add(op.weight_bytes / bw, kv / bw, useful / peak, times)
        real.add(op.weight_bytes / (bw * eta_w) * slow,
                 op.kv_read_bytes / (bw * eta * alpha) + op.kv_write_bytes / (bw * eta), useful / (peak * eps), times)
    real.launch_sync = cfg.n_layers * cal.layer_overhead_s
    for op in ops:
        if op.sync_bytes:
            real.allreduce += cfg.n_layers * allreduce_cost(cal.engine, spec, model, op.sync_bytes,
                                                            cal.allreduce_sync_s or 0.0, _kernel(cal))["seconds"]
            ideal.allreduce += cfg.n_layers * ideal_allreduce_s(spec, model, op.sync_bytes)
    return ideal, real


def _kernel(cal: DecodeCalibration) -> AllReduceKernel | None:
    """The engine's fitted custom AllReduce kernel, None where the calibration has none."""
    return AllReduceKernel.from_dict(cal.allreduce_kernel) if cal.allreduce_kernel else None


def allreduce_summary(cfg: TransformerConfig, spec: ChipSpec, cal: DecodeCalibration, tokens: int,
                      model: int) -> dict[str, Any] | None:
    """One of a step's AllReduces (``tokens`` rows of d_model): bytes, count per step and its price
    (`simulator.workloads.served_tp.allreduce_cost`); None on one GPU."""
    if model <= 1:
        return None
    nbytes = tokens * cfg.d_model * cfg.act_elem_bytes
    kernel = _kernel(cal)
    cost = allreduce_cost(cal.engine, spec, model, nbytes, cal.allreduce_sync_s or 0.0, kernel)
    return {"bytes": nbytes, "per_step": 2 * cfg.n_layers, "cuda_graphs": engine_comm(cal.engine).cuda_graphs,
            "kernel": kernel.name if kernel and cost["protocol"] is None else None, **cost}


def uncalibrated(cal: DecodeCalibration, model: int, real: _Sums | None = None) -> list[str]:
    """The parts of a served step priced without a fitted constant of their own, one phrase each."""
    out = []
    if cal.borrowed_from:
        out.append(f"serving factors of {cal.chip} (none fitted to it: {cal.borrowed_from}'s)")
    if model > 1 and cal.allreduce_sync_s is None:
        out.append(f"tensor-parallel synchronisation for engine {cal.engine} (none fitted: each AllReduce at its "
                   "algorithm's latency alone)")
    elif model > 1 and cal.sync_fitted_to not in (None, cal.engine):  # None: a calibration given by hand
        mine, theirs = engine_comm(cal.engine), engine_comm(cal.sync_fitted_to)
        graphs = ("" if mine.cuda_graphs == theirs.cuda_graphs else
                  f", fitted {'with' if theirs.cuda_graphs else 'without'} CUDA graphs where {cal.engine} runs "
                  f"{'with' if mine.cuda_graphs else 'without'} them")
        out.append(f"tensor-parallel synchronisation for engine {cal.engine} (no multi-GPU fit rows: "
                   f"{cal.sync_fitted_to}'s fitted value{graphs})")
    kernel = _kernel(cal)
    if model > 1 and kernel is not None and kernel.chip != cal.chip:
        out.append(f"{cal.engine}'s AllReduce kernel ({kernel.name}) on {cal.chip} (its latency and NVLink efficiency "
                   f"fitted to {kernel.chip} measurements)")
    if real is not None and real.total > 0 and real.kv_cache > 0.1 * real.total:
        out.append("KV-cache streaming rate (attention_fraction not fitted: as fast as weight streaming)")
    return out


def _breakdown(ideal: _Sums, real: _Sums) -> dict[str, dict[str, float]]:
    return {f: {"ideal_s": getattr(ideal, f), "calibrated_s": getattr(real, f)} for f in FACTORS}


def served_step(cfg: TransformerConfig, chip: str | ChipSpec, batch: int = 1, context: int | Sequence[int] = 0,
                new_tokens: int = 1,
                weight_dtype: str | None = None, kv_dtype: str | None = None,
                calibration: DecodeCalibration | None = None, simulate: bool = True,
                engine: str | None = None, model: int = 1) -> dict[str, Any]:
    """One decode step (``new_tokens=1``) or prefill (``new_tokens`` = prompt length) on ``model`` tensor-parallel
    chips, calibrated; ``context``: cached positions, one number for every request or one per request.

    Returns ``step_time_s`` (calibrated, seconds), ``ideal_step_time_s`` (the simulated ideal step when
    ``simulate``, else the closed-form sum), ``closed_form_ideal_s`` and ``breakdown``: per factor
    (weights, kv_cache, matmul, overlap, launch_sync, allreduce) its ``ideal_s`` and ``calibrated_s``. ``calibration``
    defaults to the chip's fitted one as serving ``engine`` reaches it (`simulator.hardware.decode_calibration`;
    `PodsimError` naming the chips, or engines, that have one). With ``model`` > 1: ``allreduce`` (one of the
    step's AllReduces: `allreduce_summary`). ``uncalibrated``: what is priced without a fitted constant.
    """
    spec = _chip(chip)
    cal = calibration or get_decode_calibration(spec.name, engine)
    cfg = with_dtypes(cfg, weight_dtype, kv_dtype)
    contexts = request_contexts(batch, context)  # checks the batch and every context
    positive_int(new_tokens, name="new_tokens")
    check_layout(cfg, Parallelism(1, check_gpus(model)), batch)
    ideal, real = _step_sums(cfg, spec, cal, batch, contexts, new_tokens, model)
    simulated = (simulate_decode(cfg, spec, batch, contexts, Parallelism(1, model), new_tokens=new_tokens,
                                 trace=False).env.now if simulate else ideal.total)
    return {"chip": spec.name, "engine": cal.engine, "batch": batch, "context": context, "new_tokens": new_tokens,
            "model_parallel": model, "step_time_s": real.total, "ideal_step_time_s": simulated,
            "closed_form_ideal_s": ideal.total, "tokens_per_s": batch * new_tokens / real.total,
            "breakdown": _breakdown(ideal, real),
            "allreduce": allreduce_summary(cfg, spec, cal, batch * new_tokens, model),
            "uncalibrated": uncalibrated(cal, model, real)}


def served_request(cfg: TransformerConfig, chip: str | ChipSpec, batch: int, input_len: int, output_len: int,
                   weight_dtype: str | None = None, kv_dtype: str | None = None,
                   calibration: DecodeCalibration | None = None, engine: str | None = None,
                   model: int = 1) -> dict[str, Any]:
    """A static batch of ``batch`` requests, each ``input_len`` prompt tokens and ``output_len`` generated ones, on
    ``model`` tensor-parallel chips.

    ``ttft_s``: the prefill (it yields the first token); ``tpot_s``: the mean of the ``output_len - 1`` decode
    steps (context ``input_len + t`` at step t); ``request_s``: both; ``output_tokens_per_s``: batch x
    output_len / request_s. Each has its ideal beside it (``ideal_*``, closed form); ``breakdown`` sums
    the factors over the whole request.
    """
    spec = _chip(chip)
    cal = calibration or get_decode_calibration(spec.name, engine)
    cfg = with_dtypes(cfg, weight_dtype, kv_dtype)
    check_int(batch, name="batch", maximum=MAX_REQUESTS)
    positive_int(input_len, name="input_len")
    check_int(output_len, name="output_len", maximum=MAX_OUTPUT_TOKENS)
    check_layout(cfg, Parallelism(1, check_gpus(model)), batch)
    first_ideal, first = _step_sums(cfg, spec, cal, batch, 0, input_len, model)
    ideal, real = _Sums(), _Sums()
    for t in range(1, output_len):
        i, r = _step_sums(cfg, spec, cal, batch, input_len + t, 1, model)
        for f in FACTORS:
            setattr(ideal, f, getattr(ideal, f) + getattr(i, f))
            setattr(real, f, getattr(real, f) + getattr(r, f))
    steps = max(output_len - 1, 1)
    out: dict[str, Any] = {"chip": spec.name, "engine": cal.engine, "batch": batch, "input_len": input_len,
                           "output_len": output_len, "model_parallel": model,
                           "uncalibrated": uncalibrated(cal, model, real),
                           "ttft_s": first.total, "tpot_s": real.total / steps,
                           "request_s": first.total + real.total,
                           "ideal_ttft_s": first_ideal.total, "ideal_tpot_s": ideal.total / steps,
                           "ideal_request_s": first_ideal.total + ideal.total}
    out["output_tokens_per_s"] = batch * output_len / out["request_s"]
    out["ideal_output_tokens_per_s"] = batch * output_len / out["ideal_request_s"]
    for f in FACTORS:
        setattr(real, f, getattr(real, f) + getattr(first, f))
        setattr(ideal, f, getattr(ideal, f) + getattr(first_ideal, f))
    out["breakdown"] = _breakdown(ideal, real)
    return out


def served_concurrent(cfg: TransformerConfig, chip: str | ChipSpec, concurrency: int, input_len: int,
                      output_len: int, weight_dtype: str | None = None, kv_dtype: str | None = None,
                      calibration: DecodeCalibration | None = None, engine: str | None = None,
                      model: int = 1) -> dict[str, Any]:
    """Closed-loop continuous batching: ``concurrency`` clients, each sending its next request (``input_len`` prompt
    tokens, ``output_len`` generated) as soon as its last one ends, as serving benchmarks drive a server
    (``vllm bench serve --max-concurrency``, InferenceBench's closed-loop driver).

    The server runs ``concurrency`` requests' decode steps together and folds each new request's prefill into
    the running steps (vLLM's scheduler mixes prefill chunks into decode steps). Per request lifetime the
    other ``concurrency - 1`` clients start one request each, so a request's decode steps carry their
    prefills too::

        step   = mean decode step of ``concurrency`` requests (`served_request`'s tpot at that batch)
        extra  = prefill of one prompt - one decode step of one request (what a mixed step adds: the prompt's
                 matmuls and KV writes; the weights it streams and its launches the decode step pays already)
        tpot   = step + (concurrency - 1) * extra / (output_len - 1)
        ttft   = step + extra
        cycle  = ttft + (output_len - 1) * tpot = output_len * step + concurrency * extra
        output_tokens_per_s = concurrency * output_len / cycle

    The cycle holds whether the clients run out of step (the prefills land in other requests' tpot) or in
    waves (they land in each wave's ttft), so throughput does not depend on the arrival order; tpot assumes
    out of step. No fitted constant of its own: every term is `served_request` / `served_step`'s. Seconds and
    tokens per second; ``extra_s`` and ``decode_step_s`` beside them.
    """
    spec = _chip(chip)
    cal = calibration or get_decode_calibration(spec.name, engine)
    check_int(concurrency, name="concurrency", maximum=MAX_REQUESTS)
    check_int(output_len, name="output_len", minimum=2, maximum=MAX_OUTPUT_TOKENS)
    steady = served_request(cfg, spec, concurrency, input_len, output_len, weight_dtype, kv_dtype, calibration=cal,
                            model=model)
    cfg = with_dtypes(cfg, weight_dtype, kv_dtype)
    prefill = _step_sums(cfg, spec, cal, 1, 0, input_len, model)[1].total
    one = _step_sums(cfg, spec, cal, 1, input_len, 1, model)[1].total
    step, extra = steady["tpot_s"], max(prefill - one, 0.0)
    cycle = output_len * step + concurrency * extra
    return {"chip": spec.name, "engine": cal.engine, "concurrency": concurrency, "input_len": input_len,
            "output_len": output_len, "model_parallel": model, "uncalibrated": steady["uncalibrated"],
            "decode_step_s": step, "extra_s": extra, "ttft_s": step + extra,
            "tpot_s": step + (concurrency - 1) * extra / (output_len - 1), "cycle_s": cycle,
            "output_tokens_per_s": concurrency * output_len / cycle}
