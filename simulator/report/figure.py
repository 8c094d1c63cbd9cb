"""What every picture shares: lazy pyplot on the Agg backend, a fresh or given axes, readable time units,
titles wrapped to the figure's width. Only `plots`, `heatmap` and `serving_plots` import this module.
"""
from __future__ import annotations

import textwrap
from typing import Any


def pyplot() -> Any:
    """pyplot, on the Agg backend unless a backend was chosen (Jupyter's inline one, MPLBACKEND)."""
    import os
    import sys

    import matplotlib

    if "matplotlib.pyplot" not in sys.modules and not os.environ.get("MPLBACKEND"):
        matplotlib.use("Agg")  # no screen needed; notebooks keep their inline backend
    import matplotlib.pyplot as plt

    return plt


def axes(ax: Any, figsize: tuple[float, float]) -> Any:
    """``ax``, or the axes of a new figure of ``figsize`` inches."""
    if ax is not None:
        return ax
    _, ax = pyplot().subplots(figsize=figsize)
    return ax


def time_scale(end_s: float) -> tuple[float, str]:
    """(seconds per unit, unit name) that makes ``end_s`` read as a number between 1 and 1000."""
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")):
        if end_s >= scale:
            return scale, unit
    return 1e-9, "ns"


def title(ax: Any, text: str, **kwargs: Any) -> None:
    """Set a title wrapped to the figure's width (about 11 characters per inch), so none is cut off."""
    width = max(40, int(ax.figure.get_figwidth() * 11))
    ax.set_title("\n".join(textwrap.wrap(text, width)), fontsize="medium", **kwargs)


def axes_width_in(ax: Any) -> float:
    """Width of ``ax`` in inches before layout (tight_layout only widens it: estimates stay safe)."""
    return ax.figure.get_figwidth() * ax.get_position().width


#: Width of one character at fontsize "x-small" (5.8 pt), in inches: about 0.55 em.
CHAR_WIDTH_IN = 0.55 * 5.8 / 72
