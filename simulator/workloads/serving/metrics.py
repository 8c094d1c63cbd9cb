"""Serving metrics from finished requests: latency percentiles, throughput and goodput, as ``vllm bench serve``
reports them.

Per request (arrival: when the client sent it, before any front-end time): TTFT = first token - arrival;
TPOT = (finish - first token) / (output tokens - 1) (requests of one output token have none); end-to-end =
finish - arrival. Throughput over the run's span (first arrival to last finish): requests/s, output tokens/s,
total (prompt + output) tokens/s. Goodput: requests per second meeting every SLO given (TTFT <= ``slo_ttft_s``
and TPOT <= ``slo_tpot_s``), with the fraction that met them.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from simulator.workloads.serving.scheduler import Request

PERCENTILES = (50, 90, 99)


def distribution(values: Sequence[float] | np.ndarray) -> dict[str, float | None]:
    """``p50``, ``p90``, ``p99``, ``max`` and ``mean`` (seconds) of ``values`` (None each when empty)."""
    v = np.asarray(values, dtype=float)
    if not v.size:
        return {"p50": None, "p90": None, "p99": None, "max": None, "mean": None}
    out: dict[str, float | None] = {f"p{q}": float(np.percentile(v, q)) for q in PERCENTILES}
    out.update(max=float(v.max()), mean=float(v.mean()))
    return out


def latencies(done: Sequence[Request]) -> dict[str, np.ndarray]:
    """Per-request ``ttft_s``, ``tpot_s`` (requests of two or more output tokens) and ``e2e_s`` arrays."""
    arrival = np.array([r.sent_s for r in done])
    first = np.array([r.first_token_s for r in done], dtype=float)
    finish = np.array([r.finish_s for r in done], dtype=float)
    out = np.array([r.output for r in done])
    many = out > 1
    return {"ttft_s": first - arrival, "tpot_s": (finish - first)[many] / (out[many] - 1), "e2e_s": finish - arrival}


def summarize(done: Sequence[Request], slo_ttft_s: float | None = None,
              slo_tpot_s: float | None = None) -> dict[str, Any]:
    """Every metric of the module docstring for ``done`` (finished requests)."""
    lat = latencies(done)
    start = min(r.sent_s for r in done)
    span = max(r.finish_s or 0.0 for r in done) - start
    out_tokens = sum(r.output for r in done)
    prompt_tokens = sum(r.prompt for r in done)
    ok = np.ones(len(done), dtype=bool)
    if slo_ttft_s is not None:
        ok &= lat["ttft_s"] <= slo_ttft_s
    if slo_tpot_s is not None:
        tpot = np.zeros(len(done))
        many = np.array([r.output > 1 for r in done])
        tpot[many] = lat["tpot_s"]
        ok &= tpot <= slo_tpot_s
    span = max(span, 1e-12)
    return {"requests": len(done), "span_s": span,
            "ttft_s": distribution(lat["ttft_s"]), "tpot_s": distribution(lat["tpot_s"]),
            "e2e_s": distribution(lat["e2e_s"]),
            "requests_per_s": len(done) / span, "output_tokens_per_s": out_tokens / span,
            "total_tokens_per_s": (out_tokens + prompt_tokens) / span,
            "slo_attainment": float(ok.mean()), "goodput_requests_per_s": float(ok.sum()) / span,
            "preemptions": sum(r.preemptions for r in done)}


def meets_slo(summary: dict[str, Any], attainment: float = 0.9) -> bool:
    """Whether at least ``attainment`` of the requests met the SLOs (DistServe's 90% attainment rule)."""
    return summary["slo_attainment"] >= attainment
