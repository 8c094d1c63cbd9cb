"""Serving plans: tensor-parallel layouts of a model ranked by the chips they need to serve a rate within SLOs.

For each model-axis width that divides the model (1, 2, 4, ... up to ``max_model``) the highest rate one
replica sustains within the SLOs is found by `simulator.workloads.serving.findrate.find_rate` (simulated runs);
the layout then needs ``ceil(rate / per_replica_rate)`` replicas -- round-robin routing splits Poisson
arrivals into independent Poisson streams of rate / replicas, so replicas add up -- and
``replicas x model`` chips. Layouts whose replica cannot hold one request, or meets the SLOs at no rate,
are listed with the reason. Ranked by chips needed, then by per-replica rate.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from simulator.errors import PodsimError
from simulator.workloads.budget import Parallelism, check_layout
from simulator.workloads.serving.arrivals import Arrival
from simulator.workloads.serving.findrate import find_rate
from simulator.workloads.serving.simulate import ServeSetup


def model_widths(setup: ServeSetup, max_model: int) -> list[int]:
    """Powers of two up to ``max_model`` that the model's heads and MLP divide."""
    out = []
    m = 1
    while m <= max_model:
        try:
            check_layout(setup.cfg, Parallelism(1, m), 1)
            out.append(m)
        except PodsimError:
            pass
        m *= 2
    return out


def plan_serving(setup: ServeSetup, stream: Callable[[float], list[Arrival]], rate_per_s: float, kind: str,
                 slo_ttft_s: float | None, slo_tpot_s: float | None, max_model: int = 8,
                 attainment: float = 0.9) -> list[dict[str, Any]]:
    """One row per layout: ``mesh``, ``per_replica_rate_per_s``, ``replicas``, ``chips_needed`` (None with a
    ``reason`` when it cannot serve), ranked by chips needed."""
    rows: list[dict[str, Any]] = []
    for m in model_widths(setup, max_model):
        one = replace(setup, mesh=Parallelism(1, m))
        try:
            found = find_rate(one, stream, kind, slo_ttft_s, slo_tpot_s, attainment, start=max(rate_per_s / 4, 0.05))
        except PodsimError as err:
            if "needs a target" in str(err):
                raise
            rows.append({"mesh": {"data": None, "model": m}, "chips_needed": None, "reason": str(err)})
            continue
        per = found["rate_per_s"]
        if not per:
            rows.append({"mesh": {"data": None, "model": m}, "chips_needed": None,
                         "reason": "meets the SLOs at no rate probed"})
            continue
        replicas = math.ceil(rate_per_s / per)
        at = found["at_rate"]
        rows.append({"mesh": {"data": replicas, "model": m}, "per_replica_rate_per_s": per, "replicas": replicas,
                     "chips_needed": replicas * m, "kind": kind,
                     "ttft_p50_s": at["ttft_s"]["p50"], "tpot_p50_s": at["tpot_s"]["p50"],
                     "probes": len(found["probes"])})
    return sorted(rows, key=lambda r: (r["chips_needed"] is None, r["chips_needed"] or 0,
                                       -(r.get("per_replica_rate_per_s") or 0)))
