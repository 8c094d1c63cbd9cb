"""Pictures of traces. The only module that touches matplotlib, imported lazily (Agg backend).

Every function takes an optional ``ax`` and returns the axes it drew on.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from simulator.export import open_for_write, track_ids
from simulator.trace import Trace

#: Colour by span kind; idle is the white background.
KIND_COLORS = {"load": "#4C72B0", "store": "#8172B2", "compute": "#DD8452", "send": "#55A868",
               "collective": "#55A868", "transfer": "#937860"}


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _time_scale(end_s: float) -> tuple[float, str]:
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")):
        if end_s >= scale:
            return scale, unit
    return 1e-9, "ns"


def gantt(trace: Trace, ax: Any = None, title: str = "") -> Any:
    """One lane per (chip, unit), spans coloured by kind, time axis in readable units."""
    plt = _pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 1.2 + 0.45 * max(1, len({(s.chip, s.unit) for s in trace.spans}))))
    pids, tids = track_ids(trace.spans)
    end = max((s.end for s in trace.spans), default=0.0)
    scale, unit = _time_scale(end)
    lanes = {}
    for (chip, u), tid in tids.items():
        lanes[tid] = f"chip {chip} {u}" if len(pids) > 1 else u
    for s in trace.spans:
        ax.barh(tids[(s.chip, s.unit)], (s.end - s.start) / scale, left=s.start / scale, height=0.7,
                color=KIND_COLORS.get(s.kind, "#999999"), edgecolor="white", linewidth=0.3)
    ax.set_yticks(list(lanes), [lanes[t] for t in lanes])
    ax.invert_yaxis()
    ax.set_xlabel(f"time ({unit})")
    ax.set_xlim(0, end / scale if end > 0 else 1)
    kinds = sorted({s.kind for s in trace.spans})
    handles = [plt.Rectangle((0, 0), 1, 1, color=KIND_COLORS.get(k, "#999999")) for k in kinds]
    if handles:
        ax.legend(handles, kinds, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small", frameon=False)
    ax.set_title(title)
    return ax


def save_gantt(trace: Trace, path: str | Path, title: str = "") -> Path:
    """Draw `gantt` and save it as a PNG at ``path``."""
    path = open_for_write(path)
    plt = _pyplot()
    ax = gantt(trace, title=title)
    ax.figure.tight_layout()
    ax.figure.savefig(path, dpi=100)
    plt.close(ax.figure)
    return path
