"""Link heat maps: a value per link direction (bytes, busy time) drawn on the chips' grid.

Rings and lines draw as one row, 2-D tori and meshes as one grid, 3-D tori as one panel per plane
of axis 0 (chip ``(z, y, x)`` in panel z at row y, column x). Each link direction is an arrow offset
to one side of its chip pair, so both directions show; wraparound links are stubs leaving and entering
the grid edge; links along axis 0 of a 3-D torus leave each chip diagonally (up and right to the
next plane, down and left to the previous one). Links to switches (NVLink, IB, DCN) have no place on
a grid: the title says how many were left out.
"""
from __future__ import annotations

import math
import textwrap
from typing import Any

from simulator.errors import PodsimError
from simulator.report.figure import axes, pyplot
from simulator.report.figure import title as set_title

#: Largest panel width in inches a 3-D map draws (the figure stays on one screen).
MAX_FIGURE_WIDTH_IN = 16.0


def link_heatmap(graph: Any, values: dict[str, float], ax: Any = None, label: str = "bytes",
                 title: str = "") -> Any:
    """Per-link values (``"u->v"`` keys, e.g. `Network.link_bytes`) on a ring, line, 2-D or 3-D grid.

    Returns the axes drawn on; for a 3-D torus, the first plane's panel (all panels share its figure,
    labelled ``plane 0``, ``plane 1``, ...). A given ``ax`` is replaced by the panels in its place.
    """
    shape = tuple(graph.graph.get("shape", ()))
    if not 1 <= len(shape) <= 3:
        raise PodsimError(f"link_heatmap draws rings, lines and 2-D or 3-D tori and meshes; this topology "
                          f"has shape {shape}")
    drawn, skipped = _grid_edges(graph)
    if not drawn:
        raise PodsimError(f"link_heatmap: topology {graph.graph.get('kind')!r} has no chip-to-chip links to "
                          "draw (its links go through switches)")
    vmax = max(values.values(), default=0.0) or 1.0
    shape3 = (1,) * (3 - len(shape)) + shape
    note = f" ({skipped} not drawn)" if skipped else ""
    text = (title or "bytes per link direction") + note
    if shape3[0] == 1:
        ax = axes(ax, (1.2 + 1.1 * shape3[2], 1.0 + 1.1 * shape3[1]))
        _panel(ax, graph, drawn, values, vmax, shape3, 0)
        ax.figure.colorbar(_mappable(vmax), ax=ax, label=label, shrink=0.8)
        set_title(ax, text)
        return ax
    panels, cax = _panels(ax, shape3)
    for z, pax in enumerate(panels):
        _panel(pax, graph, drawn, values, vmax, shape3, z)
        pax.set_label(f"plane {z}")
        pax.set_title(f"axis 0 = {z}", fontsize="small")
    panels[0].figure.colorbar(_mappable(vmax), cax=cax, label=label)
    if any(_coord(graph, u, 0)[0] != _coord(graph, v, 0)[0] for u, v, _ in drawn):
        text += "; diagonal arrows: links along axis 0 (up-right to the next plane, down-left to the previous)"
    width = max(40, int(panels[0].figure.get_figwidth() * 11))
    panels[0].figure.suptitle("\n".join(textwrap.wrap(text, width)), fontsize="medium")
    return panels[0]


def _grid_edges(graph: Any) -> tuple[list[tuple[Any, Any, dict[str, Any]]], str]:
    """Edges between two chips with coordinates, and the others counted by kind ("64 DCN links")."""
    from collections import Counter

    from simulator.report.links import KIND_NAMES

    drawn: list[Any] = []
    others: Counter[str] = Counter()
    for u, v, d in graph.edges(data=True):
        if "coord" in graph.nodes[u] and "coord" in graph.nodes[v]:
            drawn.append((u, v, d))
        else:
            others[KIND_NAMES.get(d.get("kind"), d.get("kind"))] += 1
    return drawn, ", ".join(f"{n} {kind} link directions" for kind, n in others.items())


def _mappable(vmax: float) -> Any:
    import matplotlib

    return matplotlib.cm.ScalarMappable(cmap=matplotlib.colormaps["viridis"],
                                        norm=matplotlib.colors.Normalize(0, vmax))


def _panels(ax: Any, shape: tuple[int, int, int]) -> tuple[list[Any], Any]:
    """One axes per plane on a grid of at most four columns, and a colour-bar axes beside them."""
    n, rows, cols = shape
    ncols = min(n, 4)
    nrows = math.ceil(n / ncols)
    cell = min(0.8, MAX_FIGURE_WIDTH_IN / (ncols * (cols + 0.6) + 1))
    ratios = [1.0] * ncols + [0.06]
    if ax is None:
        fig = pyplot().figure(figsize=(ncols * (cols + 0.6) * cell + 1.0, nrows * (rows + 0.8) * cell + 0.8))
        grid = fig.add_gridspec(nrows, ncols + 1, width_ratios=ratios)
    else:
        spec = ax.get_subplotspec()
        if spec is None:
            raise PodsimError("link_heatmap of a 3-D topology needs an ax made by subplots (or no ax)")
        fig = ax.figure
        ax.remove()
        grid = spec.subgridspec(nrows, ncols + 1, width_ratios=ratios)
    panels = [fig.add_subplot(grid[i // ncols, i % ncols]) for i in range(n)]
    return panels, fig.add_subplot(grid[:, ncols])


def _panel(ax: Any, graph: Any, edges: list[tuple[Any, Any, dict[str, Any]]], values: dict[str, float],
           vmax: float, shape: tuple[int, int, int], z: int) -> None:
    """Draw plane ``z``: its chips, the links inside it, and diagonal stubs for links leaving it."""
    import matplotlib

    cmap = matplotlib.colormaps["viridis"]
    pad = len(shape) - len(graph.graph["shape"])
    for u, v, data in edges:
        a, b = _coord(graph, u, pad), _coord(graph, v, pad)
        if a[0] != z:
            continue
        frac = values.get(f"{u}->{v}", 0.0) / vmax
        color = cmap(frac) if frac > 0 else "#DDDDDD"
        if b[0] != z:  # along axis 0: out of this plane
            step = data.get("direction") or (1 if (b[0] - a[0]) % shape[0] == 1 else -1)
            _stub(ax, (a[2], a[1]), (0.3 * step, -0.3 * step), color)
        else:
            _draw_link(ax, (a[2], a[1]), (b[2], b[1]), bool(data.get("wrap")), color)
    for node, data in graph.nodes(data=True):
        if data.get("role") == "chip" and _coord(graph, node, pad)[0] == z:
            _, y, x = _coord(graph, node, pad)
            ax.plot([x], [y], "o", color="black", markersize=5)
    ax.set_xlim(-0.8, shape[2] - 0.2)
    ax.set_ylim(shape[1] - 0.2, -0.8)
    ax.set_aspect("equal")
    ndim = len(graph.graph["shape"])
    ax.set_xticks(range(shape[2]))
    ax.set_xlabel(f"axis {ndim - 1}", fontsize="small")
    ax.set_yticks(range(shape[1]) if ndim > 1 else [])
    if ndim > 1:
        ax.set_ylabel(f"axis {ndim - 2}", fontsize="small")


def _coord(graph: Any, node: Any, pad: int) -> tuple[int, int, int]:
    return (0,) * pad + tuple(graph.nodes[node]["coord"])


def _stub(ax: Any, a: tuple[float, float], d: tuple[float, float], color: Any) -> None:
    ax.annotate("", xy=(a[0] + d[0], a[1] + d[1]), xytext=(a[0] + 0.25 * d[0], a[1] + 0.25 * d[1]),
                arrowprops={"arrowstyle": "-|>", "color": color, "linewidth": 2.2, "shrinkA": 0, "shrinkB": 0})


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
