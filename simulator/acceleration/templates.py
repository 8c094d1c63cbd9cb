"""A `Template`: the recorded lone run of a group of collectives that `simulator.acceleration.replay` replays."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from simulator.engine.channel import Channel
from simulator.engine.trace import merge_intervals, total_length


@dataclass(frozen=True)
class Template:
    """A lone run of a group of collectives that started at one instant on overlapping links: ``durations_s``,
    each one's from the start to its completion; ``links``: per link (a `Channel`), its bytes, the last end of
    its spans and those spans ``(start, end, bytes, label, kind)``, one per transfer as the run recorded them,
    offsets from the start in seconds; ``kinds``: bytes per link kind (the trace's interface counters)."""

    durations_s: tuple[float, ...]
    links: tuple[tuple[Channel, float, float, tuple[tuple[float, float, float, str, str], ...]], ...]
    kinds: tuple[tuple[str, float], ...]
    order: tuple[int, ...]  #: the members in the order they completed
    # derived in `__post_init__` (not compared, not shown): the metrics' stand-ins and the spans' columns
    #: chip, unit, label, start, end, kind, bytes: the columns of every span, for `Span`s built in C
    columns: tuple[tuple[Any, ...], ...] = field(init=False, repr=False, compare=False)
    union: tuple[tuple[float, ...], tuple[float, ...]] = field(init=False, repr=False, compare=False)  #: starts, ends s
    busy: tuple[tuple[Any, str, float], ...] = field(init=False, repr=False, compare=False)  #: chip, unit, busy s
    window_s: float = field(init=False, repr=False, compare=False)  #: the last busy end or completion, s

    def __post_init__(self) -> None:  # the spans of every link as columns, and the metrics' stand-ins
        rows = [(c.chip, c.name, label, a, b, kind, nb) for c, _, _, spans in self.links
                for a, b, nb, label, kind in spans]
        object.__setattr__(self, "columns", tuple(zip(*rows, strict=True)) if rows else ((),) * 7)
        union = merge_intervals((a, b) for _, _, _, spans in self.links for a, b, _, _, _ in spans)
        object.__setattr__(self, "union", tuple(zip(*union, strict=True)) if union else ((), ()))
        object.__setattr__(self, "busy", tuple(
            (c.chip, c.name, total_length(merge_intervals((a, b) for a, b, _, _, _ in spans)))
            for c, _, _, spans in self.links))
        object.__setattr__(self, "window_s", max((last for _, _, last, _ in self.links), default=max(self.durations_s)))


def offsets(spans: list[tuple[float, float, float, str, str]],
            origin: float) -> tuple[tuple[float, float, float, str, str], ...]:
    """``(start, end, bytes, label, kind)`` spans with their times as offsets from ``origin`` (seconds)."""
    return tuple((a - origin, b - origin, nb, label, kind) for a, b, nb, label, kind in spans)
