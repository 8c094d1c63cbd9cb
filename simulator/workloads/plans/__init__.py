"""Parallelism plans at pod scale: mesh axes and layout, memory, pipeline schedules, step time, plan search.

One module per concept: ``layout`` (the six axes, options, divisibility rules), ``links`` (a mesh on a
topology and per-axis collective closed forms), ``memory`` (training state per chip), ``schedules``
(GPipe, 1F1B, interleaved), ``ops`` (one layer's work and collectives), ``estimate`` (closed-form step),
``step`` (simulated step), ``train`` (the numbers of one step), ``inference`` (KV sharding for prefill
and decode), ``search`` (`podsim plan`).
"""
from __future__ import annotations

import importlib
from typing import Any

from simulator.workloads.plans.layout import (
    AXES,
    KV_SHARDINGS,
    POLICIES,
    SCHEDULES,
    MeshPlan,
    PlanError,
    TrainOptions,
    check_train_plan,
    parse_plan_mesh,
)

__all__ = ["AXES", "KV_SHARDINGS", "POLICIES", "SCHEDULES", "MeshPlan", "PlanError", "TrainOptions",
           "check_train_plan", "parse_plan_mesh", "train_plan"]


def __getattr__(name: str) -> Any:
    """`train_plan` loads on first use: it pulls in the collectives (NetworkX, SciPy), which a parser reading
    `SCHEDULES` does not need."""
    if name == "train_plan":
        value = importlib.import_module("simulator.workloads.plans.train").train_plan
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
