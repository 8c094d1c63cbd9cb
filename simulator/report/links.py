"""Links for people: group link directions by kind (ICI axis and direction, DCN, NVLink, IB, PCIe) and
measure each link's load over time.

A 64-chip step keeps a few hundred link directions busy; one line each hides the pattern. `link_groups`
folds them into one row per kind of link with the count, the min / median / max busy time and the
busiest three by name. `link_load` turns one link's spans into its utilisation over time.
"""
from __future__ import annotations

import bisect
import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from simulator.engine.trace import Span, merge_intervals

#: Display names of link technologies (graph edge attribute ``kind``), in display order.
KIND_NAMES = {"ici": "ICI", "nvlink": "NVLink", "pcie": "PCIe", "ib": "IB", "dcn": "DCN"}


def is_link(unit: str) -> bool:
    """Whether a trace unit is a link direction (units named ``"link u->v"``)."""
    return unit.startswith("link ")


def _node_key(text: str) -> tuple[int, int, str]:
    return (0, int(text), "") if text.isdigit() else (1, 0, text)


def link_sort_key(unit: str) -> tuple[Any, ...]:
    """Sort key putting ``link 2->3`` before ``link 10->11`` (chips by number, then switches by name)."""
    src, _, dst = unit.removeprefix("link ").partition("->")
    return _node_key(src), _node_key(dst)


def group_of(info: dict[str, Any] | None) -> tuple[tuple[Any, ...], str]:
    """(sort key, label) of a link's group from its edge attributes (`Trace.links`); None: unknown."""
    if info is None:
        return (len(KIND_NAMES), 0, 0), "links"
    kind = info.get("kind", "ici")
    rank = list(KIND_NAMES).index(kind) if kind in KIND_NAMES else len(KIND_NAMES)
    name = KIND_NAMES.get(kind, kind)
    axis, direction = info.get("axis"), info.get("direction")
    if axis is not None and direction is not None:
        return (rank, axis, -direction), f"{name} axis {axis} {'+' if direction > 0 else '-'}"
    src, dst = info.get("src_role"), info.get("dst_role")
    if src == "chip" and dst != "chip":  # a host (PCIe) is named as such; any other far end is a switch
        return (rank, 0, 0, dst == "host"), f"{name} chip->{'host' if dst == 'host' else 'switch'}"
    if dst == "chip" and src != "chip":
        return (rank, 0, 1, src == "host"), f"{name} {'host' if src == 'host' else 'switch'}->chip"
    return (rank, 0, 2), name


@dataclass(frozen=True)
class LinkGroup:
    """Busy time (seconds) of the link directions of one group, busiest first."""

    label: str
    busy_s: list[tuple[str, float]]  #: (link unit name, busy seconds), busiest first, then by name

    @property
    def count(self) -> int:
        return len(self.busy_s)

    @property
    def min_s(self) -> float:
        return self.busy_s[-1][1]

    @property
    def median_s(self) -> float:
        return statistics.median(b for _, b in self.busy_s)

    @property
    def max_s(self) -> float:
        return self.busy_s[0][1]

    def busiest(self, n: int = 3) -> list[str]:
        """Names (``u->v``) of the ``n`` busiest links."""
        return [unit.removeprefix("link ") for unit, _ in self.busy_s[:n]]


def link_groups(busy_s: dict[str, float], links: dict[str, dict[str, Any]]) -> list[LinkGroup]:
    """The link units of ``busy_s`` grouped by kind, axis and direction (``links``: `Trace.links`)."""
    members: dict[tuple[Any, ...], tuple[str, list[tuple[str, float]]]] = {}
    for unit, busy in busy_s.items():
        if is_link(unit):
            key, label = group_of(links.get(unit))
            members.setdefault(key, (label, []))[1].append((unit, busy))
    groups = []
    for key in sorted(members):
        label, rows = members[key]
        rows.sort(key=lambda row: (-row[1], link_sort_key(row[0])))
        groups.append(LinkGroup(label, rows))
    return groups


def link_load(spans: list[Span], bandwidth_bytes_per_s: float | None = None) -> list[tuple[float, float, float]]:
    """Busy periods of one link direction as ``(start s, end s, utilisation)``.

    A link direction shares its bandwidth fairly among the messages on it, so while any message moves
    it runs at its (possibly derated) full rate: within one busy period (a union of overlapping spans)
    the bytes carried over the period's length is that rate. Utilisation is the rate over
    ``bandwidth_bytes_per_s`` (the link's nominal rate), or 1.0 when that is unknown.
    """
    periods = merge_intervals((s.start, s.end) for s in spans)
    carried = [0.0] * len(periods)
    starts = [a for a, _ in periods]
    for s in spans:
        if s.end > s.start:
            carried[bisect.bisect_right(starts, s.start) - 1] += s.nbytes
    out = []
    for (start, end), nbytes in zip(periods, carried, strict=True):
        rate = nbytes / (end - start)
        out.append((start, end, rate / bandwidth_bytes_per_s if bandwidth_bytes_per_s else 1.0))
    return out


def spans_by_link(spans: list[Span]) -> dict[str, list[Span]]:
    """The link spans of a trace, by link unit name, in natural link order."""
    out: dict[str, list[Span]] = defaultdict(list)
    for s in spans:
        if is_link(s.unit):
            out[s.unit].append(s)
    return {unit: out[unit] for unit in sorted(out, key=link_sort_key)}
