"""Pictures of a served request stream: latency CDFs (TTFT, TPOT, end to end) and the batch / KV timeline.

matplotlib is imported lazily (`simulator.report.figure`). Each curve is labelled with what timed it:
``bound`` (ideal steps) or ``forecast`` (calibrated steps). Inputs are plain arrays and samples (no
simulator objects), so a notebook can draw its own runs side by side.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from simulator.report.figure import pyplot as _pyplot
from simulator.report.figure import title as _title

METRICS = (("ttft_s", "time to first token"), ("tpot_s", "time per output token"), ("e2e_s", "end-to-end latency"))

#: latencies of one kind (s): a list or a numpy array
Samples = Sequence[float] | np.ndarray


def latency_cdfs(runs: Mapping[str, Mapping[str, Samples]], axes: Sequence[Any] | None = None,
                 title: str = "", slo: Mapping[str, float | None] | None = None) -> list[Any]:
    """One CDF panel per metric of `METRICS`, a curve per entry of ``runs`` (label -> {metric: seconds per
    request}), the SLOs as dashed lines; the axes drawn on."""
    if axes is None:
        fig, axes = _pyplot().subplots(1, 3, figsize=(13, 3.8))
    for ax, (key, name) in zip(axes, METRICS, strict=True):
        for label, lat in runs.items():
            v = np.sort(np.asarray(lat.get(key, []), dtype=float))
            if v.size:
                ax.step(v * 1e3, np.arange(1, v.size + 1) / v.size, where="post", label=label)
        limit = slo.get(key) if slo else None
        if limit:
            ax.axvline(limit * 1e3, color="#C44E52", linestyle="--", linewidth=0.8, label="SLO")
        ax.set_xlabel(f"{name} (ms)")
        ax.set_ylim(0, 1.01)
        ax.grid(True, linewidth=0.3, alpha=0.5)
    axes[0].set_ylabel("fraction of requests")
    axes[0].legend(fontsize="small")
    if title:
        _title(axes[1], title)
    return list(axes)


def batch_timeline(samples: Mapping[str, Any], ax: Any = None, title: str = "") -> Any:
    """Running and waiting requests over time (left axis) and KV-cache occupancy (right axis) of one replica;
    ``samples`` has ``t_s``, ``running``, ``waiting``, ``kv`` lists."""
    if ax is None:
        _, ax = _pyplot().subplots(figsize=(13, 3.5))
    t = np.asarray(samples["t_s"], dtype=float)
    ax.step(t, samples["running"], where="post", label="running (batch)", linewidth=0.8)
    ax.step(t, samples["waiting"], where="post", label="waiting", linewidth=0.8)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("requests")
    ax.legend(loc="upper left", fontsize="small")
    kv = ax.twinx()
    kv.step(t, np.asarray(samples["kv"]) * 100, where="post", color="#8172B2", linewidth=0.8, label="KV occupancy")
    kv.set_ylabel("KV cache in use (%)")
    kv.set_ylim(0, 100)
    kv.legend(loc="upper right", fontsize="small")
    _title(ax, title)
    return ax


def serving_figure(runs: Mapping[str, Mapping[str, Samples]], samples: Mapping[str, Any], title: str = "",
                   slo: Mapping[str, float | None] | None = None) -> Any:
    """CDFs above, the first replica's timeline below, in one figure; returns its first axes."""
    plt = _pyplot()
    fig = plt.figure(figsize=(13, 7.5))
    grid = fig.add_gridspec(2, 3)
    cdf_axes = [fig.add_subplot(grid[0, i]) for i in range(3)]
    latency_cdfs(runs, cdf_axes, title, slo)
    batch_timeline(samples, fig.add_subplot(grid[1, :]), "replica 0: batch, queue and KV cache (forecast if "
                   "calibrated, else bound)")
    return cdf_axes[0]


def save_serving_figure(ax: Any, path: str | Path) -> Path:
    """Save the figure of ``ax`` (`simulator.report.plots.save`)."""
    from simulator.report.plots import save

    return save(ax, path)
