"""Which collective algorithm ``auto`` runs at each size: every applicable algorithm's closed form against the
array size, the automatic choice on top, and the sizes where the choice changes (crossovers).

Nothing here simulates: each point is `simulator.collectives.plan_collective`'s pricing -- the closed form of
every applicable algorithm (on a calibrated GPU system, with the NCCL protocol its tuner picks for it) -- so a sweep of
dozens of sizes takes seconds. tests/test_algorithm_curves.py holds spot points against simulation.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from simulator.collectives import plan_collective
from simulator.report.figure import pyplot as _pyplot

if TYPE_CHECKING:  # annotations only: no import at run time (and no cycle)
    from simulator.engine.system import System


def _choice(kind: str, system: System, nbytes: float) -> tuple[str, str | None, list[dict[str, Any]]]:
    plan = plan_collective(kind, system, nbytes)
    assert plan.algorithm is not None  # compared on groups of two or more devices
    return plan.algorithm.name, plan.protocol, plan.alternatives


def curves(kind: str, system: System, sizes: Sequence[float]) -> dict[str, Any]:
    """For each size (bytes): every applicable algorithm's predicted seconds (None where it does not apply) and
    auto's choice (``{"algorithm", "protocol", "time_s"}``)."""
    times: dict[str, list[float | None]] = {}
    auto = []
    for i, nbytes in enumerate(sizes):
        name, protocol, alternatives = _choice(kind, system, nbytes)
        for a in alternatives:
            times.setdefault(a["algorithm"], [None] * len(sizes))[i] = a["time_s"]
        chosen = next(a for a in alternatives if a["algorithm"] == name)
        auto.append({"algorithm": name, "protocol": protocol, "time_s": chosen["time_s"]})
    return {"kind": kind, "sizes": list(sizes), "algorithms": dict(sorted(times.items())), "auto": auto}


def crossovers(kind: str, system: System, data: dict[str, Any], rel: float = 0.01) -> list[dict[str, Any]]:
    """The sizes where auto's choice of algorithm (and protocol) changes between neighbouring points of ``data``
    (`curves`), each found by bisection in log size to within ``rel``: ``{"size_bytes", "from", "to"}``."""
    out = []
    sizes, auto = data["sizes"], data["auto"]
    for i in range(1, len(sizes)):
        before, after = _label(auto[i - 1]), _label(auto[i])
        if before == after:
            continue
        lo, hi = sizes[i - 1], sizes[i]
        while hi / lo > 1 + rel:
            mid = math.sqrt(lo * hi)
            name, protocol, _ = _choice(kind, system, mid)
            if _label({"algorithm": name, "protocol": protocol}) == before:
                lo = mid
            else:
                hi = mid
        out.append({"size_bytes": math.sqrt(lo * hi), "from": before, "to": after})
    return out


def _label(choice: dict[str, Any]) -> str:
    return choice["algorithm"] + (f" ({choice['protocol']})" if choice.get("protocol") else "")


def figure(panels: Sequence[tuple[str, dict[str, Any], list[dict[str, Any]]]], columns: int = 2) -> Any:
    """One panel per ``(title, curves, crossovers)``: each algorithm's closed form against size (thin lines, one
    colour per algorithm in every panel), auto's choice drawn over them (thick), dotted lines at the crossovers.
    Returns the first panel's axes (`simulator.report.plots.save` saves its figure)."""
    plt = _pyplot()
    rows = math.ceil(len(panels) / columns)
    fig, grid = plt.subplots(rows + 1, columns, figsize=(6.2 * columns, 4.2 * rows + 0.9), squeeze=False,
                             gridspec_kw={"height_ratios": [4.2] * rows + [0.9]})
    key = fig.add_subplot(grid[rows, 0].get_gridspec()[rows, :])  # the legend's row, across the columns
    for ax in grid[rows]:
        ax.remove()
    grid = grid[:rows]
    names = sorted({n for _, data, _ in panels for n in data["algorithms"]})
    cmap = plt.get_cmap("tab20")
    colour = {n: cmap(i % 20) for i, n in enumerate(names)}
    for ax, (title, data, cuts) in zip(grid.flat, panels, strict=False):
        sizes = data["sizes"]
        for name, times in data["algorithms"].items():
            pts = [(s, t) for s, t in zip(sizes, times, strict=True) if t is not None]
            ax.plot([s for s, _ in pts], [t for _, t in pts], color=colour[name], lw=1.2, label=name)
        ax.plot(sizes, [a["time_s"] for a in data["auto"]], color="black", lw=5, alpha=0.25, label="auto",
                solid_capstyle="round")
        for cut in cuts:
            ax.axvline(cut["size_bytes"], color="grey", ls=":", lw=1)
            ax.annotate(f"{_bytes(cut['size_bytes'])}: {cut['to']}", (cut["size_bytes"], 1.0),
                        xycoords=("data", "axes fraction"), rotation=90, ha="right", va="top", fontsize=7,
                        color="dimgrey")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ticks = [2.0**k for k in range(0, 64, 5) if sizes[0] <= 2.0**k <= sizes[-1]]
        ax.set_xticks(ticks, [_binary(t) for t in ticks])
        ax.set_xlabel("array size V")
        ax.set_ylabel("time (s)")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
    for ax in list(grid.flat)[len(panels):]:
        ax.set_visible(False)
    handles = [plt.Line2D([], [], color=colour[n], lw=1.5) for n in names]
    handles.append(plt.Line2D([], [], color="black", lw=5, alpha=0.25))
    key.axis("off")
    key.legend(handles, [*names, "auto (the fastest)"], loc="center", ncol=min(6, len(names) + 1), fontsize=8,
               frameon=False)
    return grid.flat[0]


def _bytes(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.3g} B"


def _binary(n: float) -> str:
    for unit, k in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 2**k:
            return f"{n / 2**k:g} {unit}"
    return f"{n:g} B"
