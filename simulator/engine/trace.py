"""Spans (flat records of busy intervals) and the metrics computed from them.

A `Span` is one busy interval of one unit of one chip: an HBM transfer, an MXU matmul, a link
direction carrying a message. A `Trace` collects spans plus byte counters per interface and per
tensor label; the metric functions here are pure functions of those records.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, NamedTuple

from simulator.analytic import exposed_s

if TYPE_CHECKING:  # annotations only
    from simulator.engine.speedups import StandIns

#: Span kinds that count as compute; every other kind is data movement.
COMPUTE_KINDS = frozenset({"compute"})


class Span(NamedTuple):
    """One busy interval: ``unit`` of ``chip`` worked on ``label`` from ``start`` to ``end`` (seconds).

    An immutable record (a named tuple: about a third of a frozen dataclass's cost to build, and the
    engine records one per transfer and per operation); the hot paths build it with `new_span`.
    """

    chip: int | str
    unit: str  #: hbm, vmem, mxu, vpu, or a link name such as "link 0->1"
    label: str
    start: float
    end: float
    kind: str = "compute"  #: compute, load, store, send, collective
    nbytes: float = 0.0
    flops: float = 0.0

    @property
    def duration_s(self) -> float:
        return self.end - self.start


#: ``new_span(Span, (chip, unit, label, start, end, kind, nbytes, flops))``: a `Span` from all eight fields
#: without the keyword handling of ``Span(...)`` (the engine's hot paths).
new_span = tuple.__new__


@dataclass(frozen=True, slots=True)
class PoolTimeline:
    """Live bytes of one memory pool (``name`` hbm or vmem) of ``chip`` over the run.

    ``timeline`` is the pool's own list of ``(time s, live bytes)`` after each change, shared, not copied.
    """

    chip: int | str
    name: str
    capacity_bytes: float
    timeline: list[tuple[float, float]]


@dataclass
class Trace:
    """Spans and byte counters of one run. ``enabled=False`` keeps counters but drops spans.

    ``links`` describes each link direction used (by unit name: its edge attributes ``kind``, ``axis``,
    ``direction``, ``bandwidth_bytes_per_s``, ..., and ``src_role`` / ``dst_role``; tracing on only: they group
    the links' busy times, and with tracing off there are none); ``pools`` holds
    the memory pools' live-bytes timelines (tracing on only).
    """

    enabled: bool = True
    spans: list[Span] = field(default_factory=list)
    bytes_by_interface: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    bytes_by_tensor: dict[str, dict[str, float]] = field(
        default_factory=lambda: defaultdict(lambda: {"read": 0.0, "written": 0.0}))
    flops_total: float = 0.0
    padded_flops_total: float = 0.0
    links: dict[str, dict[str, Any]] = field(default_factory=dict)
    pools: list[PoolTimeline] = field(default_factory=list)
    #: what a fast run's representatives stood for (the chips and links it did not simulate), set by the
    #: acceleration layer (`simulator.acceleration.unfolding`); None: an exact run, every span its own
    stood_for: StandIns | None = None

    def unfolded(self, limit: int = 2_000_000) -> Trace | None:
        """This trace as the exact run records it, for exports and pictures: with ``stood_for``, the spans of every
        link and chip the representatives stood for (copies of theirs, same times and bytes) and the memory
        timelines of every chip (tests/test_unfolding.py); itself where nothing stood for anything; None where
        the copies would exceed ``limit`` spans (a thousand GPUs: tens of millions)."""
        stood_for = self.stood_for
        if not stood_for:
            return self
        if len(self.spans) + stood_for.extra_spans(self.spans) > limit:
            return None
        spans = list(self.spans) + stood_for.unfold_spans(self.spans)
        spans.sort(key=lambda s: (s.start, s.end))
        return replace(self, spans=spans, pools=list(self.pools) + stood_for.unfold_pools(self.pools), stood_for=None)

    def whole(self) -> Trace:
        """`unfolded`, or (past its limit) this trace itself: what exports and pictures show."""
        return self.unfolded() or self

    def add(self, span: Span) -> None:
        """Record ``span`` (kept only when tracing is enabled) and count its FLOPs."""
        self.flops_total += span.flops
        if self.enabled:
            self.spans.append(span)

    def add_pool(self, pool: Any) -> None:
        """Keep ``pool``'s live-bytes timeline (a `MemoryPool`: chip, name, capacity_bytes, timeline)."""
        if self.enabled:
            self.pools.append(PoolTimeline(pool.chip, pool.name, pool.capacity_bytes, pool.timeline))

    def count(self, interface: str, nbytes: float, label: str | None = None, direction: str = "") -> None:
        """Count ``nbytes`` over ``interface``; with a label, also per tensor (direction read/written)."""
        self.bytes_by_interface[interface] += nbytes
        if label is not None and direction:
            self.bytes_by_tensor[label][direction] += nbytes


def merge_intervals(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Union of half-open intervals as a sorted list of disjoint ``(start, end)`` pairs."""
    merged: list[tuple[float, float]] = []
    started, lo, hi = False, 0.0, 0.0  # the interval being built
    for start, end in sorted(intervals):
        if end <= start:
            continue
        if started and start <= hi:
            if end > hi:
                hi = end
        else:
            if started:
                merged.append((lo, hi))
            started, lo, hi = True, start, end
    if started:
        merged.append((lo, hi))
    return merged


def total_length(intervals: list[tuple[float, float]]) -> float:
    """Summed length (seconds) of disjoint intervals."""
    return sum(b - a for a, b in intervals)


def intersection_length(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Length of the intersection of two sorted disjoint interval lists (two-pointer sweep)."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0.0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def busy_by_chip(spans: Iterable[Span]) -> dict[Any, dict[str, float]]:
    """Busy seconds (union of spans) of each unit of each chip: ``{chip: {unit: s}}``."""
    groups: dict[tuple[Any, str], list[tuple[float, float]]] = defaultdict(list)
    for s in spans:
        groups[(s.chip, s.unit)].append((s.start, s.end))
    out: dict[Any, dict[str, float]] = defaultdict(dict)
    for (chip, unit), ivs in sorted(groups.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        out[chip][unit] = total_length(merge_intervals(ivs))
    return dict(out)


def compute_metrics(trace: Trace, end_to_end_s: float | None = None,
                    upper_bound: Callable[[dict[Any, dict[str, float]]], float] | None = None) -> dict[str, Any]:
    """The standard metrics of a run.

    - ``end_to_end_s``: last span end (or the given run length); simulations start at t = 0.
    - ``busy_s``: per unit, the busy time of that unit on its busiest chip.
    - ``overlap_s``: time in which some compute span and some data-movement span are both active.
    - ``exposed_s``: ``end_to_end_s`` minus the time any compute unit is busy (`simulator.analytic.exposed_s`).
    - ``lower_bound_s``: the busiest single resource; ``upper_bound_s``: on the chip with the most
      work, the sum of every unit's busy time (nothing overlapped).
    - ``utilization``: ``busy_s / end_to_end_s`` per unit.

    The bounds count resource busy time only. Link latency (wire and switch delay) occupies no
    resource, so a latency-bound run -- a small collective -- can take longer than ``upper_bound_s``.
    With tracing off there are no spans: the busy-time metrics are then None (unknown), not zero.
    ``upper_bound``: computes ``upper_bound_s`` from the busy seconds of each unit of each chip (a run that
    simulated some chips for all: `simulator.acceleration.step_symmetry.Symmetry.upper_bound`).
    """
    spans = trace.spans
    e2e = end_to_end_s if end_to_end_s is not None else max((s.end for s in spans), default=0.0)
    if not trace.enabled:
        return {"end_to_end_s": e2e, "busy_s": None, "bytes": dict(trace.bytes_by_interface),
                "flops": trace.flops_total, "overlap_s": None, "exposed_s": None, "lower_bound_s": None,
                "upper_bound_s": None, "utilization": None}
    per_chip = busy_by_chip(spans)
    if trace.stood_for:  # the links a fast run's representatives stood for: theirs
        trace.stood_for.unfold_busy(per_chip)
    busy: dict[str, float] = {}
    for units in per_chip.values():
        for unit, seconds in units.items():
            busy[unit] = max(busy.get(unit, 0.0), seconds)
    compute = merge_intervals((s.start, s.end) for s in spans if s.kind in COMPUTE_KINDS)
    movement = merge_intervals((s.start, s.end) for s in spans if s.kind not in COMPUTE_KINDS)
    compute_s = total_length(compute)
    return {
        "end_to_end_s": e2e,
        "busy_s": busy,
        "bytes": dict(trace.bytes_by_interface),
        "flops": trace.flops_total,
        "overlap_s": intersection_length(compute, movement),
        "exposed_s": exposed_s(e2e, compute_s),
        "lower_bound_s": max((v for u in per_chip.values() for v in u.values()), default=0.0),
        "upper_bound_s": upper_bound(per_chip) if upper_bound is not None else
        max((sum(u.values()) for u in per_chip.values()), default=0.0),
        "utilization": {unit: (v / e2e if e2e > 0 else 0.0) for unit, v in busy.items()},
    }
