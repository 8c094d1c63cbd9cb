"""Tails of many draws: summary statistics, the critical chip or link of a run, and the picture of both.

`tail_stats` reduces the end-to-end times of Monte Carlo draws to mean, p50, p90, p99 and max (quantiles
by linear interpolation between order statistics, numpy's default, so p99 >= p90 >= p50 always).

`critical_element` walks a run's critical path backwards through its trace: from the span that ends last,
to the span that ended latest at or before it started (on the same unit when several end together:
the op queued behind it), and so on to t = 0. Each span's time is charged to its owner -- ``chip N`` for
its MXU, VPU and HBM, ``link u->v`` for a link direction -- and the owner with the most time on the path
is the run's critical element: the straggler everyone waited for. Without dependency records this is the
latest-finishing-predecessor heuristic; it names the unit that set the pace, not a proof.
"""
from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from simulator.engine.trace import Span, Trace
from simulator.report.figure import axes as _axes
from simulator.report.figure import pyplot as _pyplot
from simulator.report.figure import time_scale
from simulator.report.figure import title as _title

QUANTILES = {"p50_s": 0.5, "p90_s": 0.9, "p99_s": 0.99}


def tail_stats(times: Sequence[float] | np.ndarray) -> dict[str, Any]:
    """``samples``, ``mean_s``, ``p50_s``, ``p90_s``, ``p99_s`` and ``max_s`` of ``times`` (seconds)."""
    t = np.asarray(times, dtype=float)
    out: dict[str, Any] = {"samples": int(t.size), "mean_s": float(t.mean())}
    out.update({k: float(v) for k, v in zip(QUANTILES, np.quantile(t, list(QUANTILES.values())), strict=True)})
    out["max_s"] = float(t.max())
    return out


def owner(span: Span) -> str:
    """Who a span's time belongs to: ``link u->v`` for a link direction, else ``chip N``."""
    return span.unit if span.unit.startswith("link ") else f"chip {span.chip}"


def critical_path(trace: Trace) -> list[Span]:
    """The spans of the run's critical path, last first (see the module docstring); empty without spans."""
    spans = sorted(trace.spans, key=lambda s: s.end)
    if not spans:
        return []
    ends = [s.end for s in spans]
    tol = 1e-12 * max(ends[-1], 1e-30)
    current, path, seen = spans[-1], [spans[-1]], {id(spans[-1])}
    while current.start > tol:
        j = bisect.bisect_right(ends, current.start + tol) - 1
        while j >= 0 and id(spans[j]) in seen:
            j -= 1
        if j < 0:
            break
        best, k = spans[j], j
        while k >= 0 and ends[k] >= ends[j] - tol:  # among the spans that end latest, prefer the same unit
            s = spans[k]
            if id(s) not in seen and (s.chip, s.unit) == (current.chip, current.unit):
                best = s
                break
            k -= 1
        current = best
        seen.add(id(best))
        path.append(best)
    return path


def critical_element(trace: Trace) -> str | None:
    """The chip or link with the most time on the critical path (None without spans)."""
    charge: dict[str, float] = {}
    for s in critical_path(trace):
        charge[owner(s)] = charge.get(owner(s), 0.0) + (s.end - s.start)
    return max(charge, key=lambda k: (charge[k], k)) if charge else None


def critical_shares(elements: Sequence[str | None]) -> list[dict[str, Any]]:
    """How often each element was critical over the draws: ``{"element", "count", "share"}``, most often first."""
    counts = Counter(e for e in elements if e is not None)
    total = len(elements)
    return [{"element": e, "count": n, "share": n / total} for e, n in sorted(counts.items(), key=lambda kv: (-kv[1],
                                                                                                             kv[0]))]


def tail_figure(times: Sequence[float], worst: Trace, straggler: str | None, title: str = "") -> Any:
    """Two panels: the distribution of the draws' times (p50, p90, p99 marked) and the Gantt of the worst draw
    with the straggler's lanes shaded red. Returns the Gantt's axes (save it with `plots.save`)."""
    from simulator.report.plots import gantt

    plt = _pyplot()
    lanes = len({(s.chip, s.unit) for s in worst.spans})
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 3.2 + 0.3 * min(lanes, 24)),
                                      gridspec_kw={"height_ratios": [1, max(1.5, 0.25 * min(lanes, 24))]})
    distribution(times, ax=top)
    gantt(worst, ax=bottom, memory=False, title=f"worst draw ({_fmt(max(times))})")
    if straggler is not None:
        mark(bottom, straggler)
    if title:
        fig.suptitle(title, fontsize="medium")
    return bottom


def distribution(times: Sequence[float], ax: Any = None) -> Any:
    """Histogram of the draws' times with p50, p90 and p99 as vertical lines."""
    ax = _axes(ax, (8, 3))
    t = np.asarray(times, dtype=float)
    scale, unit = time_scale(float(t.max()) if t.size else 1.0)
    ax.hist(t / scale, bins=min(40, max(5, t.size // 5)), color="#8fa8c8", edgecolor="white")
    stats = tail_stats(t)
    for key, style in (("p50_s", ":"), ("p90_s", "--"), ("p99_s", "-")):
        ax.axvline(stats[key] / scale, color="#c0392b", linestyle=style, linewidth=1,
                   label=f"{key[:-2]} {_fmt(stats[key])}")
    ax.set_xlabel(f"time ({unit})")
    ax.set_ylabel("draws")
    ax.legend(fontsize="small", frameon=False)
    _title(ax, f"{t.size} draws: mean {_fmt(stats['mean_s'])}, max {_fmt(stats['max_s'])}")
    return ax


def mark(ax: Any, element: str) -> None:
    """Shade the Gantt lanes of ``element`` (``chip N`` or ``link u->v``: its own lane, or chip u's where the
    Gantt has one lane per chip) and name it in the title as the straggler."""
    labels = [t.get_text() for t in ax.get_yticklabels()]
    lanes = _lanes_of(labels, element)
    if not lanes and element.startswith("link "):  # collapsed: the link's data movement is on its source chip
        lanes = _lanes_of(labels, f"chip {element[5:].split('->')[0]}")
    for y in lanes:
        ax.axhspan(y - 0.5, y + 0.5, color="#e74c3c", alpha=0.18, zorder=0)
        ax.get_yticklabels()[y].set_color("#c0392b")
    ax.set_title(f"{ax.get_title()}; straggler: {element}", fontsize="medium")


def _lanes_of(labels: list[str], element: str) -> list[int]:
    if element.startswith("link "):
        return [y for y, text in enumerate(labels) if text.endswith(element)]
    return [y for y, text in enumerate(labels) if text == element or (text.startswith(element + " ")
                                                                       and " link " not in text)]


def growth(points: Sequence[dict[str, Any]], ax: Any = None, title: str = "") -> Any:
    """How much later than nominal the slowest chip finishes its compute, at p50 and p99, against the chip count
    (``straggler_tail``'s points): simulated dots beside the closed-form lines."""
    ax = _axes(ax, (7, 4))
    chips = [p["chips"] for p in points]
    for q, color in (("p50", "#4C72B0"), ("p99", "#C44E52")):
        ax.plot(chips, [100 * p[f"closed_compute_{q}_over_nominal"] for p in points], color=color, linewidth=1.2,
                label=f"{q} closed form")
        ax.plot(chips, [100 * p[f"compute_{q}_over_nominal"] for p in points], marker="o", linestyle="none",
                color=color, label=f"{q} simulated")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("chips")
    ax.set_ylabel("slowest chip's compute over nominal (%)")
    ax.grid(True, which="both", linewidth=0.3, alpha=0.5)
    ax.legend(fontsize="small")
    _title(ax, title)
    return ax


def save_tail_figure(times: Sequence[float], worst: Trace, straggler: str | None, path: str | Path,
                     title: str = "") -> Path:
    """`tail_figure`, saved at ``path`` (the suffix picks the format)."""
    from simulator.report.plots import save

    return save(tail_figure(times, worst, straggler, title), path)


def _fmt(seconds: float) -> str:
    from simulator.units import format_quantity

    return format_quantity(seconds, "s")
