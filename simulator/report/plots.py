"""Pictures: Gantt timelines, timeline diffs, rooflines, sweeps and link heat maps.

The only module that touches matplotlib, imported lazily (Agg backend, no screen needed). Every
function takes an optional ``ax`` and returns the axes it drew on; ``save`` writes any of them.
Times are drawn in readable units (s, ms, µs, ns) and every span is coloured by its kind: loads and
stores (data into and out of HBM), compute (MXU and VPU), sends (link traffic of collectives and
messages); idle time is the white background.
"""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from simulator.engine.trace import COMPUTE_KINDS, Span, Trace
from simulator.report.export import open_for_write, track_ids

#: Colour by span kind; idle is the white background.
KIND_COLORS = {"load": "#4C72B0", "store": "#8172B2", "compute": "#DD8452", "send": "#55A868",
               "collective": "#55A868", "transfer": "#937860"}
#: Above this many lanes a Gantt chart collapses to one summary lane per chip.
MAX_LANES = 24


def _pyplot() -> Any:
    """pyplot, on the Agg backend unless a backend was chosen (Jupyter's inline one, MPLBACKEND)."""
    import os
    import sys

    import matplotlib

    if "matplotlib.pyplot" not in sys.modules and not os.environ.get("MPLBACKEND"):
        matplotlib.use("Agg")  # no screen needed; notebooks keep their inline backend
    import matplotlib.pyplot as plt

    return plt


def _axes(ax: Any, figsize: tuple[float, float]) -> Any:
    if ax is not None:
        return ax
    _, ax = _pyplot().subplots(figsize=figsize)
    return ax


def time_scale(end_s: float) -> tuple[float, str]:
    """(seconds per unit, unit name) that makes ``end_s`` read as a number between 1 and 1000."""
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")):
        if end_s >= scale:
            return scale, unit
    return 1e-9, "ns"


def _lanes(spans: list[Span], collapse: bool) -> tuple[dict[Any, int], list[str], Any]:
    """Lane index per span key and lane labels: (chip, unit) lanes, or one summary lane per chip."""
    pids, tids = track_ids(spans)
    if collapse:
        labels = [f"chip {c}" for c in pids]
        return pids, labels, lambda s: s.chip
    many = len(pids) > 1
    labels = [f"chip {c} {u}" if many else u for (c, u) in tids]
    return tids, labels, lambda s: (s.chip, s.unit)


def _draw_spans(ax: Any, spans: list[Span], lanes: dict[Any, int], key: Any, scale: float, offset: float,
                collapse: bool) -> None:
    """Broken bars per (lane, kind); a collapsed lane draws compute on top, data movement below."""
    groups: dict[tuple[int, str], list[tuple[float, float]]] = defaultdict(list)
    for s in spans:
        groups[(lanes[key(s)], s.kind)].append((s.start / scale, max((s.end - s.start) / scale, 0.0)))
    for (lane, kind), bars in groups.items():
        y, h = offset + lane - 0.35, 0.7
        if collapse:
            y, h = (offset + lane - 0.4, 0.38) if kind in COMPUTE_KINDS else (offset + lane + 0.02, 0.38)
        ax.broken_barh(bars, (y, h), facecolors=KIND_COLORS.get(kind, "#999999"), edgecolor="white",
                       linewidth=0.2)


def _title(ax: Any, text: str, **kwargs: Any) -> None:
    """Set a title wrapped to the figure's width (about 11 characters per inch), so none is cut off."""
    import textwrap

    width = max(40, int(ax.figure.get_figwidth() * 11))
    ax.set_title("\n".join(textwrap.wrap(text, width)), fontsize="medium", **kwargs)


def _legend(ax: Any, kinds: set[str]) -> None:
    plt = _pyplot()
    kinds = sorted(kinds)
    handles = [plt.Rectangle((0, 0), 1, 1, color=KIND_COLORS.get(k, "#999999")) for k in kinds]
    if handles:
        ax.legend(handles, kinds, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small", frameon=False)


def gantt(trace: Trace, ax: Any = None, title: str = "", collapse: bool | None = None) -> Any:
    """One lane per (chip, unit) and per link direction, spans coloured by kind.

    ``collapse`` (default: when there are more than `MAX_LANES` lanes) draws one lane per chip with
    its compute on the upper half and its data movement (HBM and links) on the lower half, so 64
    chips stay readable; where both halves are filled, compute and data movement overlap.
    """
    spans = trace.spans
    if collapse is None:
        collapse = len({(s.chip, s.unit) for s in spans}) > MAX_LANES
    lanes, labels, key = _lanes(spans, collapse)
    ax = _axes(ax, (10, max(2.4, 1.2 + (0.16 if collapse else 0.32) * len(labels))))
    end = max((s.end for s in spans), default=0.0)
    scale, unit = time_scale(end)
    _draw_spans(ax, spans, lanes, key, scale, 0, collapse)
    ax.set_yticks(range(len(labels)), labels, fontsize="small" if len(labels) < 40 else "x-small")
    ax.set_ylim(len(labels) - 0.5, -0.5)
    ax.set_xlabel(f"time ({unit})")
    ax.set_xlim(0, end / scale if end > 0 else 1)
    _legend(ax, {s.kind for s in spans})
    _title(ax, title + (" (per chip: compute above, data movement below)" if collapse else ""))
    return ax


def timeline_diff(a: Trace, b: Trace, labels: Sequence[str] = ("A", "B"), ax: Any = None, title: str = "") -> Any:
    """Two strategies' timelines stacked on one time axis, end-to-end times marked, difference annotated."""
    collapse = len({(s.chip, s.unit) for s in a.spans + b.spans}) > MAX_LANES
    la, names_a, key_a = _lanes(a.spans, collapse)
    lb, names_b, key_b = _lanes(b.spans, collapse)
    ax = _axes(ax, (10, 1.8 + 0.32 * (len(names_a) + len(names_b))))
    ends = [max((s.end for s in t.spans), default=0.0) for t in (a, b)]
    scale, unit = time_scale(max(ends))
    _draw_spans(ax, a.spans, la, key_a, scale, 0, collapse)
    gap = len(names_a) + 1
    _draw_spans(ax, b.spans, lb, key_b, scale, gap, collapse)
    ax.set_yticks(list(range(len(names_a))) + [gap + i for i in range(len(names_b))],
                  [f"{labels[0]}: {n}" for n in names_a] + [f"{labels[1]}: {n}" for n in names_b], fontsize="small")
    ax.axhline(gap - 1, color="#444444", linewidth=0.8)
    for end, name, color in zip(ends, labels, ("#C44E52", "#2F4B7C"), strict=True):
        ax.axvline(end / scale, color=color, linestyle="--", linewidth=1)
        ax.text(end / scale, 1.005, f"{name}: {end / scale:.4g} {unit}", color=color, fontsize="small",
                ha="right", va="bottom", transform=ax.get_xaxis_transform())
    diff = ends[1] - ends[0]
    rel = f" ({diff / ends[0] * 100:+.1f}%)" if ends[0] > 0 else ""
    _title(ax, (title + ": " if title else "") + f"{labels[1]} - {labels[0]} = {diff / scale:+.4g} {unit}{rel}",
           pad=16)
    ax.set_ylim(gap + len(names_b) - 0.5, -0.8)
    ax.set_xlim(0, max(ends) / scale * 1.02 if max(ends) > 0 else 1)
    ax.set_xlabel(f"time ({unit})")
    _legend(ax, {s.kind for s in a.spans + b.spans})
    return ax


def roofline(chip: Any, points: Sequence[dict[str, Any]] = (), ax: Any = None, dtype: str = "bf16",
             memories: Sequence[str] = ("hbm", "vmem", "ici"), title: str = "") -> Any:
    """Log-log roofline of ``chip``: the compute roof, one roof per bandwidth, ridge points marked.

    ``points`` are ops as dicts with ``name``, ``flops`` and ``bytes`` (placed at their intensity on the
    first memory's roof), and optionally ``time_s`` (then placed at their achieved rate and labelled
    with percent of peak and percent of their own roof).
    """
    from simulator import analytic
    from simulator.engine.system import resolve_chip

    chip = resolve_chip(chip)
    ax = _axes(ax, (7, 4.5))
    peak = chip.peak_flops_per_s(dtype)
    bandwidths = {"hbm": chip.hbm_bandwidth_bytes_per_s, "vmem": chip.vmem_bandwidth_bytes_per_s,
                  "ici": chip.ici_bandwidth_bytes_per_s}
    ridges = {m: peak / bandwidths[m] for m in memories}
    lo = min([0.1] + [p["flops"] / p["bytes"] / 10 for p in points if p.get("bytes")])
    hi = max([max(ridges.values()) * 30] + [p["flops"] / p["bytes"] * 10 for p in points if p.get("bytes")])
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(xs, [peak] * len(xs), color="black", linewidth=1.5, label=f"compute {peak / 1e12:.4g} TFLOP/s")
    for m, color in zip(memories, ("#4C72B0", "#8172B2", "#55A868"), strict=False):
        bw = bandwidths[m]
        ax.plot(xs, [min(peak, bw * x) for x in xs], color=color, linewidth=1.2,
                label=f"{m.upper()} {bw / 1e9:.4g} GB/s (ridge {ridges[m]:.3g} FLOP/B)")
        ax.plot([ridges[m]], [peak], marker="o", color=color)
    for p in points:
        intensity = p["flops"] / p["bytes"]
        roof = analytic.roof_flops_per_s(intensity, peak, bandwidths[memories[0]])
        rate = p["flops"] / p["time_s"] if p.get("time_s") else roof
        ax.plot([intensity], [rate], marker="D", color="#C44E52")
        text = p.get("name", "")
        if p.get("time_s"):
            text += (f"\n{analytic.percent_of_peak(rate, peak):.0f}% of peak, "
                     f"{analytic.percent_of_roof(rate, intensity, peak, bandwidths[memories[0]]):.0f}% of roof")
        ax.annotate(text, (intensity, rate), textcoords="offset points", xytext=(6, -14), fontsize="x-small")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("FLOP/s")
    _title(ax, title or f"{chip.name} roofline ({dtype})")
    ax.legend(fontsize="x-small", loc="lower right")
    ax.grid(True, which="both", linewidth=0.3, alpha=0.5)
    return ax


def sweep(points: Sequence[dict[str, Any]], x: str, simulated: str, closed_form: str | None = None, ax: Any = None,
          xlabel: str = "", ylabel: str = "", logx: bool = True, logy: bool = True, title: str = "") -> Any:
    """A metric against a parameter: simulated points beside the closed-form line."""
    ax = _axes(ax, (7, 4))
    xs = [p[x] for p in points]
    ax.plot(xs, [p[simulated] for p in points], marker="o", linestyle="none", color="#C44E52", label="simulated")
    if closed_form:
        ax.plot(xs, [p[closed_form] for p in points], color="#4C72B0", linewidth=1.2, label="closed form")
    ax.set_xscale("log" if logx else "linear")
    ax.set_yscale("log" if logy else "linear")
    ax.set_xlabel(xlabel or x)
    ax.set_ylabel(ylabel or simulated)
    ax.legend(fontsize="small")
    ax.grid(True, which="both", linewidth=0.3, alpha=0.5)
    _title(ax, title)
    return ax


def link_heatmap(graph: Any, values: dict[str, float], ax: Any = None, label: str = "bytes",
                 title: str = "") -> Any:
    """Per-link values (``"u->v"`` keys, e.g. `Network.link_bytes`) on a 2D torus or mesh.

    Chips sit at their coordinates; each link direction is a line offset to one side of the pair, so
    both directions show; wraparound links are drawn as stubs leaving and entering the grid edge.
    """
    import matplotlib

    shape = tuple(graph.graph.get("shape", ()))
    if len(shape) != 2:
        raise ValueError(f"link_heatmap draws 2-D tori and meshes; this topology has shape {shape}")
    ax = _axes(ax, (1.2 + 1.1 * shape[1], 1.0 + 1.1 * shape[0]))
    vmax = max(values.values(), default=0.0) or 1.0
    cmap = matplotlib.colormaps["viridis"]
    for u, v, data in graph.edges(data=True):
        (y0, x0), (y1, x1) = graph.nodes[u]["coord"], graph.nodes[v]["coord"]
        frac = values.get(f"{u}->{v}", 0.0) / vmax
        _draw_link(ax, (x0, y0), (x1, y1), bool(data.get("wrap")), cmap(frac) if frac > 0 else "#DDDDDD")
    for _, data in graph.nodes(data=True):
        if data.get("role") == "chip":
            y, x = data["coord"]
            ax.plot([x], [y], "o", color="black", markersize=5)
    sm = matplotlib.cm.ScalarMappable(cmap=cmap, norm=matplotlib.colors.Normalize(0, vmax))
    ax.figure.colorbar(sm, ax=ax, label=label, shrink=0.8)
    ax.set_xlim(-0.8, shape[1] - 0.2)
    ax.set_ylim(shape[0] - 0.2, -0.8)
    ax.set_aspect("equal")
    ax.set_xticks(range(shape[1]))
    ax.set_yticks(range(shape[0]))
    _title(ax, title or "bytes per link direction")
    return ax


def _draw_link(ax: Any, a: tuple[float, float], b: tuple[float, float], wrap: bool, color: Any) -> None:
    dx, dy = b[0] - a[0], b[1] - a[1]
    if wrap:  # draw a stub from a outwards, against the direction of b
        dx, dy = -math.copysign(1, dx) if dx else 0.0, -math.copysign(1, dy) if dy else 0.0
        b = (a[0] + 0.45 * dx, a[1] + 0.45 * dy)
    length = math.hypot(dx, dy) or 1.0
    ox, oy = -dy / length * 0.08, dx / length * 0.08  # each direction on its own side
    ax.annotate("", xy=(b[0] + ox - dx / length * 0.12, b[1] + oy - dy / length * 0.12),
                xytext=(a[0] + ox + dx / length * 0.12, a[1] + oy + dy / length * 0.12),
                arrowprops={"arrowstyle": "-|>", "color": color, "linewidth": 2.2, "shrinkA": 0, "shrinkB": 0})


def save(ax: Any, path: str | Path, dpi: int = 100) -> Path:
    """Save the figure holding ``ax`` as a PNG at ``path`` and close it."""
    path = open_for_write(path)
    fig = ax.figure
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    _pyplot().close(fig)
    return path


def save_gantt(trace: Trace, path: str | Path, title: str = "") -> Path:
    """Draw `gantt` and save it as a PNG at ``path``."""
    return save(gantt(trace, title=title), path)
