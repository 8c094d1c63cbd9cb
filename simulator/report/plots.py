"""Pictures: Gantt timelines, timeline diffs, rooflines, sweeps and link heat maps.

The only module that touches matplotlib, imported lazily (Agg backend, no screen needed). Every
function takes an optional ``ax`` and returns the axes it drew on; ``save`` writes any of them.
Times are drawn in readable units (s, ms, µs, ns) and every span is coloured by its kind: loads and
stores (data into and out of HBM), compute (MXU and VPU), sends (link traffic of collectives and
messages); idle time is the white background.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.engine.trace import COMPUTE_KINDS, Span, Trace
from simulator.errors import PodsimError
from simulator.report.export import live_steps, open_for_write, track_ids, used_pools, writing
from simulator.report.figure import CHAR_WIDTH_IN, axes_width_in, time_scale
from simulator.report.figure import axes as _axes
from simulator.report.figure import pyplot as _pyplot
from simulator.report.figure import title as _title
from simulator.report.heatmap import link_heatmap
from simulator.units import format_quantity, show

__all__ = ["KIND_COLORS", "MAX_LANES", "gantt", "link_heatmap", "plan_scatter", "roofline", "save", "save_gantt",
           "sweep", "time_scale", "timeline_diff"]

#: Colour by span kind; idle is the white background.
KIND_COLORS = {"load": "#4C72B0", "store": "#8172B2", "compute": "#DD8452", "send": "#55A868",
               "collective": "#55A868", "transfer": "#937860"}
#: Above this many lanes a Gantt chart collapses to one summary lane per chip.
MAX_LANES = 24


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


def _legend(ax: Any, kinds: set[str], memory: bool = False) -> None:
    plt = _pyplot()
    names = sorted(kinds)
    handles = [plt.Rectangle((0, 0), 1, 1, color=KIND_COLORS.get(k, "#999999")) for k in names]
    if memory:
        handles.append(plt.Rectangle((0, 0), 1, 1, color=MEMORY_COLOR))
        names.append("live bytes")
    if handles:
        ax.legend(handles, names, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small", frameon=False)


def gantt(trace: Trace, ax: Any = None, title: str = "", collapse: bool | None = None,
          memory: bool = True) -> Any:
    """One lane per (chip, unit) and per link direction, spans coloured by kind and labelled by block or
    tensor where the bar is wide enough; below them, with ``memory``, a lane per memory pool that held
    bytes (its live bytes over time, scaled to its peak).

    ``collapse`` (default: when there are more than `MAX_LANES` lanes) draws one lane per chip with
    its compute on the upper half and its data movement (HBM and links) on the lower half, so 64
    chips stay readable; where both halves are filled, compute and data movement overlap. Past
    `MAX_MEMORY_LANES` pools, or when collapsed, one memory lane per kind of pool shows the most any chip
    holds at each time. A fast run's trace is unfolded first (`Trace.whole`): every chip a representative stood
    for is drawn computing.
    """
    trace = trace.whole()
    spans = trace.spans
    if collapse is None:
        collapse = len({(s.chip, s.unit) for s in spans}) > MAX_LANES
    lanes, labels, key = _lanes(spans, collapse)
    mem = memory_lanes(trace, many=len({s.chip for s in spans}) > 1, per_chip=not collapse) if memory else []
    lane_in = 0.16 if collapse else 0.32
    tall = max(1, round(0.45 / lane_in))  # a memory lane is about 0.45 inch tall, however thin the span lanes
    rows = [len(labels) - 0.5 + tall * (i + 0.5) for i in range(len(mem))]
    bottom = len(labels) - 0.5 + tall * len(mem)
    ax = _axes(ax, (10, max(2.4, 1.2 + lane_in * (bottom + 0.5))))
    end = max([s.end for s in spans] + [t for lane in mem for t, _ in lane.steps], default=0.0)
    scale, unit = time_scale(end)
    xmax = end / scale if end > 0 else 1
    _draw_spans(ax, spans, lanes, key, scale, 0, collapse)
    for lane, row in zip(mem, rows, strict=True):
        _draw_memory(ax, lane, row, 0.4 * tall, scale, xmax)
    if mem and labels:
        ax.axhline(len(labels) - 0.5, color="#888888", linewidth=0.6)
    size = "small" if len(labels) < 40 else "x-small"
    ax.set_yticks(list(range(len(labels))) + rows, labels + [lane.label for lane in mem], fontsize=size)
    ax.set_ylim(bottom, -0.5)
    ax.set_xlabel(f"time ({unit})")
    ax.set_xlim(0, xmax)
    if not collapse:
        _label_spans(ax, spans, lanes, key, scale, xmax)
    _legend(ax, {s.kind for s in spans}, memory=bool(mem))
    _title(ax, title + (" (per chip: compute above, data movement below)" if collapse else ""))
    return ax


#: Above this many memory pools that held bytes, the Gantt shows one lane per kind of pool (the max over chips).
MAX_MEMORY_LANES = 8
#: Most spans a Gantt labels (the widest first); past that, labels would only clutter.
MAX_SPAN_LABELS = 400
MEMORY_COLOR = "#64B5CD"


@dataclass(frozen=True)
class MemoryLane:
    """Live bytes of one pool (or the most any chip's pool held) as ``(time s, bytes)`` steps."""

    label: str
    steps: list[tuple[float, float]]
    peak_bytes: float
    capacity_bytes: float


def memory_lanes(trace: Trace, many: bool = True, per_chip: bool = True) -> list[MemoryLane]:
    """A lane per memory pool that held bytes (``chip C vmem``; ``vmem`` alone unless ``many`` chips), or,
    past `MAX_MEMORY_LANES` pools or without ``per_chip``, one per kind of pool: at each time the most
    any chip held."""
    pools = used_pools(trace)
    if per_chip and len(pools) <= MAX_MEMORY_LANES:
        return [_memory_lane(f"chip {p.chip} {p.name} live" if many else f"{p.name} live", live_steps(p),
                             p.capacity_bytes)
                for p in pools]
    lanes = []
    for name in sorted({p.name for p in pools}):
        group = [p for p in pools if p.name == name]
        lanes.append(_memory_lane(f"{name} live, max of {len(group)} chips", _max_steps(group),
                                  max(p.capacity_bytes for p in group)))
    return lanes


def _memory_lane(name: str, steps: list[tuple[float, float]], capacity: float) -> MemoryLane:
    peak = max(live for _, live in steps)
    text = f"{name}\npeak {format_quantity(peak, 'B')} of {format_quantity(capacity, 'B')}"
    return MemoryLane(text, steps, peak, capacity)


def _max_steps(pools: list[Any]) -> list[tuple[float, float]]:
    """At each time any pool changed, the most live bytes any of them held."""
    import numpy as np

    steps = [np.array(live_steps(p)) for p in pools]
    times = np.unique(np.concatenate([s[:, 0] for s in steps]))
    held = [s[np.searchsorted(s[:, 0], times, side="right") - 1, 1] for s in steps]
    return list(zip(times.tolist(), np.max(held, axis=0).tolist(), strict=True))


def _draw_memory(ax: Any, lane: MemoryLane, row: float, half: float, scale: float, xmax: float) -> None:
    """Filled step curve of live bytes between ``row + half`` (none) and ``row - half`` (the peak)."""
    xs = [t / scale for t, _ in lane.steps] + [xmax]
    tops = [row + half - 2 * half * live / lane.peak_bytes for _, live in lane.steps]
    tops.append(tops[-1])
    ax.fill_between(xs, row + half, tops, step="post", color=MEMORY_COLOR, linewidth=0)
    ax.step(xs, tops, where="post", color="#2F6F8F", linewidth=0.8)


def _label_spans(ax: Any, spans: list[Span], lanes: dict[Any, int], key: Any, scale: float, xmax: float,
                 offset: float = 0) -> None:
    """Write each span's label (its block or tensor) inside its bar where the bar is wide enough."""
    inches_per_unit = axes_width_in(ax) / xmax
    fits = [s for s in spans if s.label and
            (s.end - s.start) / scale * inches_per_unit > len(s.label) * CHAR_WIDTH_IN + 0.06]
    if len(fits) > MAX_SPAN_LABELS:
        fits = sorted(fits, key=lambda s: s.start - s.end)[:MAX_SPAN_LABELS]
    for s in fits:
        ax.text((s.start + s.end) / 2 / scale, offset + lanes[key(s)], s.label, ha="center", va="center",
                fontsize="x-small", color="white", clip_on=True)


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
    xmax = max(ends) / scale * 1.02 if max(ends) > 0 else 1
    ax.set_xlim(0, xmax)
    if not collapse:
        _label_spans(ax, a.spans, la, key_a, scale, xmax)
        _label_spans(ax, b.spans, lb, key_b, scale, xmax, gap)
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
    from simulator.engine.system import resolve_chip

    chip = resolve_chip(chip)
    ax = _axes(ax, (9.5 if points else 7, 4.5))
    peak = chip.peak_flops_per_s(dtype)
    bandwidths = {"hbm": chip.hbm_bandwidth_bytes_per_s, "vmem": chip.vmem_bandwidth_bytes_per_s,
                  "ici": chip.ici_bandwidth_bytes_per_s}
    ridges = {m: peak / bandwidths[m] for m in memories}
    lo = min([0.1] + [p["flops"] / p["bytes"] / 10 for p in points if p.get("bytes")])
    hi = max([max(ridges.values()) * 30] + [p["flops"] / p["bytes"] * 10 for p in points if p.get("bytes")])
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    roofs = ax.plot(xs, [peak] * len(xs), color="black", linewidth=1.5,
                    label=f"compute {format_quantity(peak, 'FLOP/s')}")
    for m, color in zip(memories, ("#4C72B0", "#8172B2", "#55A868"), strict=False):
        bw = bandwidths[m]
        roofs += ax.plot(xs, [min(peak, bw * x) for x in xs], color=color, linewidth=1.2,
                         label=f"{m.upper()} {format_quantity(bw, 'B/s')} (ridge {ridges[m]:.3g} FLOP/B)")
        ax.plot([ridges[m]], [peak], marker="o", color=color)
    ops = [_roofline_point(ax, p, i, peak, bandwidths[memories[0]]) for i, p in enumerate(points)]
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("FLOP/s")
    _title(ax, title or f"{chip.name} roofline ({dtype})")
    if ops:  # beside the plot, so no label sits on a roof or on another point
        legend = ax.legend(handles=roofs, fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1.0),
                           title="roofs", title_fontsize="x-small")
        ax.add_artist(legend)
        ax.legend(handles=ops, fontsize="x-small", loc="lower left", bbox_to_anchor=(1.01, 0.0),
                  title="ops", title_fontsize="x-small")
    else:
        ax.legend(fontsize="x-small", loc="lower right")
    ax.grid(True, which="both", linewidth=0.3, alpha=0.5)
    return ax


#: Marker and colour of each op on a roofline, in turn (shape and colour both differ, for colour-blind readers).
POINT_STYLES = (("D", "#C44E52"), ("s", "#DD8452"), ("^", "#937860"), ("v", "#DA8BC3"), ("P", "#8C8C8C"),
                ("X", "#CCB974"), ("o", "#64B5CD"), ("*", "#2F4B7C"))


def _roofline_point(ax: Any, p: dict[str, Any], i: int, peak: float, bandwidth: float) -> Any:
    """Plot one op at its intensity (and achieved rate) and return its legend handle."""
    from simulator import analytic

    intensity = p["flops"] / p["bytes"]
    roof = analytic.roof_flops_per_s(intensity, peak, bandwidth)
    rate = p["flops"] / p["time_s"] if p.get("time_s") else roof
    text = p.get("name", "") or f"op {i + 1}"
    if p.get("time_s"):
        text += (f": {analytic.percent_of_peak(rate, peak):.0f}% of peak, "
                 f"{analytic.percent_of_roof(rate, intensity, peak, bandwidth):.0f}% of roof")
    marker, color = POINT_STYLES[i % len(POINT_STYLES)]
    (handle,) = ax.plot([intensity], [rate], marker=marker, color=color, linestyle="none", markersize=7,
                        markeredgecolor="black", markeredgewidth=0.5, label=text)
    return handle


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


def plan_scatter(plans: Sequence[dict[str, Any]], capacity_bytes: float | None = None, ax: Any = None,
                 title: str = "", labels: Sequence[str] = ()) -> Any:
    """Step time (the bound) against the memory verdict per chip (``memory_peak_bytes``: simulated peak, else the
    closed form) for every candidate layout of a plan search; simulated ones marked and numbered by rank, with
    ``labels`` (one per simulated row: its mesh and options) in the legend, layouts that do not fit greyed, the
    chip's HBM capacity as a line. An axis whose values span more than a decade is logarithmic (`_scale`)."""
    ax = _axes(ax, (8, 5))
    memory = [p.get("memory_peak_bytes", p["memory_per_chip_bytes"]) / 2**30 for p in plans]
    for simulated, marker, label in ((False, "o", "closed form"), (True, "*", "simulated")):
        chosen = [(p, m) for p, m in zip(plans, memory, strict=True) if p["simulated"] == simulated]
        colors = ["#4C72B0" if p["fits"] else "#BBBBBB" for p, _ in chosen]
        ax.scatter([m for _, m in chosen], [p["step_time_s"] * 1e3 for p, _ in chosen],
                   marker=marker, s=120 if simulated else 25, c=colors, edgecolors="#C44E52" if simulated else "none",
                   label=label, zorder=3 if simulated else 2)
    ranked = [(i, p, m) for i, (p, m) in enumerate(zip(plans, memory, strict=True), 1) if p["simulated"]]
    for (i, p, m), text in zip(ranked, labels, strict=False):
        ax.annotate(str(i), (m, p["step_time_s"] * 1e3), textcoords="offset points", xytext=(6, 4), fontsize="small")
        ax.plot([], [], " ", label=f"{i}: {text}")  # a legend row naming the simulated layout
    if capacity_bytes:
        ax.axvline(capacity_bytes / 2**30, color="#C44E52", linewidth=0.8, linestyle="--", label="HBM per chip")
    ax.set_xscale(_scale(memory + ([capacity_bytes / 2**30] if capacity_bytes else [])))
    ax.set_yscale(_scale([p["step_time_s"] * 1e3 for p in plans]))
    if ax.get_yscale() == "linear":
        ax.set_ylim(bottom=0)
    ax.set_xlabel("memory per chip, peak (GiB)" + (", log" if ax.get_xscale() == "log" else ""))
    ax.set_ylabel("step time, bound (ms)" + (", log" if ax.get_yscale() == "log" else ""))
    ax.legend(fontsize="x-small")
    ax.grid(True, which="both", linewidth=0.3, alpha=0.5)
    _title(ax, title)
    return ax


DECADE_SPAN = 10.0  #: an axis whose positive values span more than this ratio is drawn logarithmic


def _scale(values: Sequence[float]) -> str:
    """``"log"`` when the positive ``values`` span more than a decade (max / min > `DECADE_SPAN`), else
    ``"linear"``."""
    positive = [v for v in values if v > 0]
    return "log" if positive and max(positive) / min(positive) > DECADE_SPAN else "linear"


def picture_formats() -> list[str]:
    """File suffixes matplotlib can draw to (png, pdf, svg, ...), sorted."""
    _pyplot()
    from matplotlib.backend_bases import FigureCanvasBase

    return sorted(FigureCanvasBase.get_supported_filetypes())


def check_picture_path(path: str | Path) -> Path:
    """``path`` if it can be written and its suffix names a picture format; one `PodsimError` listing the
    formats otherwise (``--gantt db.txt``). Commands call this before a run."""
    path = open_for_write(path)
    suffix = path.suffix.lower().lstrip(".")
    formats = picture_formats()
    if suffix not in formats:
        what = f"{suffix!r} is not a picture format" if suffix else "it has no picture suffix"
        raise PodsimError(f"cannot draw {show(str(path), 80)}: {what}; use one of {', '.join(formats)}")
    return path


def save(ax: Any, path: str | Path, dpi: int = 100) -> Path:
    """Save the figure holding ``ax`` at ``path`` (the suffix picks the format: png, svg, pdf, ...) and close it."""
    path = check_picture_path(path)
    fig = ax.figure
    fig.tight_layout()
    try:
        with writing(path):
            fig.savefig(path, dpi=dpi)
    finally:
        _pyplot().close(fig)
    return path


def save_gantt(trace: Trace, path: str | Path, title: str = "") -> Path:
    """Draw `gantt` and save it as a PNG at ``path``."""
    return save(gantt(trace, title=title), path)
