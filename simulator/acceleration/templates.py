"""A `Template`: the recorded lone run of a group of collectives that `simulator.acceleration.replay` replays."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from simulator.engine.channel import Channel
from simulator.engine.trace import merge_intervals


@dataclass(frozen=True)
class Template:
    """A lone run of a group of collectives that started at one instant on overlapping links: ``durations_s``,
    each one's from the start to its completion; ``links``: per link (a `Channel`),
    its bytes, the last end of its busy intervals and those intervals ``(start, end, bytes)``, offsets from the
    start in seconds; ``kinds``: bytes per link kind (the trace's interface counters)."""

    durations_s: tuple[float, ...]
    links: tuple[tuple[Channel, float, float, tuple[tuple[float, float, float], ...]], ...]
    kinds: tuple[tuple[str, float], ...]
    order: tuple[int, ...]  #: the members in the order they completed
    # derived in `__post_init__` (not compared, not shown): the metrics' stand-ins and the spans' columns
    columns: tuple[tuple[Any, ...], ...] = field(init=False, repr=False, compare=False)  #: chip unit start end bytes
    union: tuple[tuple[float, ...], tuple[float, ...]] = field(init=False, repr=False, compare=False)  #: starts, ends s
    busy: tuple[tuple[Any, str, float], ...] = field(init=False, repr=False, compare=False)  #: chip, unit, busy s
    window_s: float = field(init=False, repr=False, compare=False)  #: the last busy end or completion, s

    def __post_init__(self) -> None:  # the intervals of every link as columns, and the metrics' stand-ins
        rows = [(c.chip, c.name, a, b, nb) for c, _, _, intervals in self.links for a, b, nb in intervals]
        object.__setattr__(self, "columns", tuple(zip(*rows, strict=True)) if rows else ((),) * 5)
        union = merge_intervals((a, b) for _, _, _, intervals in self.links for a, b, _ in intervals)
        object.__setattr__(self, "union", tuple(zip(*union, strict=True)) if union else ((), ()))
        object.__setattr__(self, "busy", tuple((c.chip, c.name, sum(b - a for a, b, _ in intervals))
                                               for c, _, _, intervals in self.links))
        object.__setattr__(self, "window_s", max((last for _, _, last, _ in self.links), default=max(self.durations_s)))


def _union(spans: list[tuple[float, float, float]], origin: float) -> tuple[tuple[float, float, float], ...]:
    """The union of ``(start, end, bytes)`` spans as disjoint ``(start, end, bytes)`` intervals, offsets from
    ``origin``, each with the bytes of the spans it covers (`merge_intervals`, carrying bytes)."""
    out: list[tuple[float, float, float]] = []
    lo = hi = total = 0.0
    started = False
    for start, end, nbytes in sorted(spans):
        if end <= start:
            continue
        if started and start <= hi:
            hi, total = max(hi, end), total + nbytes
            continue
        if started:
            out.append((lo - origin, hi - origin, total))
        started, lo, hi, total = True, start, end, nbytes
    if started:
        out.append((lo - origin, hi - origin, total))
    return tuple(out)

