"""The highest arrival rate a setup serves within its SLOs: bisection on simulated runs.

A rate passes when at least ``attainment`` of its requests meet every SLO (TTFT and TPOT; DistServe's
90% rule). Starting at ``start`` requests/s the rate doubles (or halves) until one passes and the next
fails, then bisects until the bracket is within ``tolerance`` of its low end. Each probe draws its own
stream from the same seed (`simulator.workloads.serving.arrivals.poisson_arrivals`), so the answer is
deterministic. Past the server's capacity the queue grows for the whole run and attainment falls, so the
pass/fail edge is where the queue stops draining.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from simulator.errors import PodsimError
from simulator.workloads.serving.arrivals import Arrival
from simulator.workloads.serving.metrics import summarize
from simulator.workloads.serving.simulate import ServeSetup, check_stream, run_stream

MAX_PROBES = 40


class _TooLow(Exception):
    """A probe's stream holds no request."""


def find_rate(setup: ServeSetup, stream: Callable[[float], list[Arrival]], kind: str, slo_ttft_s: float | None,
              slo_tpot_s: float | None, attainment: float = 0.9, start: float = 1.0, tolerance: float = 0.02,
              transfer: tuple[float, float] | None = None) -> dict[str, Any]:
    """``rate_per_s``: the highest rate passing (None when even the lowest probed fails), its summary,
    and every probe (rate, attainment, pass)."""
    if slo_ttft_s is None and slo_tpot_s is None:
        raise PodsimError("--find-rate needs a target: give --slo-ttft T and/or --slo-tpot T")
    probes: list[dict[str, Any]] = []

    def probe(rate: float) -> tuple[bool, dict[str, Any]]:
        arrivals = stream(rate)
        if not arrivals:  # halved below one request in the run: nothing lower can be told apart
            raise _TooLow
        check_stream(setup, arrivals)
        summary = summarize(run_stream(setup, arrivals, kind, transfer).done, slo_ttft_s, slo_tpot_s)
        ok = summary["slo_attainment"] >= attainment
        probes.append({"rate_per_s": rate, "slo_attainment": summary["slo_attainment"], "passes": ok})
        return ok, summary

    try:
        ok, best = probe(start)
    except _TooLow:
        raise PodsimError(f"--find-rate: no request arrives at {start:g} req/s in the run; raise --duration") from None
    lo, hi = (start, None) if ok else (None, start)
    while len(probes) < MAX_PROBES and (lo is None or hi is None):
        rate = lo * 2 if hi is None else hi / 2  # type: ignore[operator]
        try:
            ok, summary = probe(rate)
        except _TooLow:
            break
        if ok:
            lo, best = rate, summary
        else:
            hi = rate
    while lo is not None and hi is not None and hi - lo > tolerance * lo and len(probes) < MAX_PROBES:
        mid = (lo + hi) / 2
        ok, summary = probe(mid)
        if ok:
            lo, best = mid, summary
        else:
            hi = mid
    return {"kind": kind, "rate_per_s": lo, "attainment_target": attainment, "at_rate": best if lo else None,
            "probes": probes}
