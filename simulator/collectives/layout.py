"""How the array of a ring AllGather, ReduceScatter or AllReduce is cut into keys, and the arrays that move.

The array is cut per shard position (one of the n positions of a group): an AllGather's shard is one
device's whole array (V / n bytes), a ReduceScatter's or AllReduce's one n-th of every device's array.
A shard holds ``shard_units`` units -- bytes in timing mode, elements in numeric mode -- divided among
the parts of the multi-axis plan (`simulator.collectives.stages`), part p taking ``parts[p].units``, and
each part in two halves, the first ``ceil(units / 2)`` units and the rest: an even bidirectional ring
sends the piece for its antipode half one way round and half the other. Key ``(p, s, h)`` is half h of
part p of shard s. In timing mode every part has an even number of units, so the halves are equal.

Numeric mode needs nothing to divide evenly but the n shards of a ReduceScatter or AllReduce row;
parts and halves take whole elements (a part may get none, a half may be empty).
"""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from simulator.collectives.groups import Group
from simulator.errors import PodsimError

RING_KINDS = ("all_gather", "reduce_scatter", "all_reduce")


@dataclass(frozen=True)
class Part:
    """One part of the array: the group axes in the order it gathers them (a reduction takes them in
    reverse), the gather stage of its first step, and the units of every shard it holds."""

    order: tuple[int, ...]
    start: int
    units: int

    @property
    def halves(self) -> tuple[int, int]:
        """Units of its two halves (the first takes the odd unit)."""
        return (self.units + 1) // 2, self.units // 2

    def step(self, stage: int) -> int | None:
        """Which of its steps (index into ``order``) it takes at gather stage ``stage`` (None: idle)."""
        j = stage - self.start
        return j if 0 <= j < len(self.order) else None


@dataclass(frozen=True)
class Layout:
    """The parts of a collective's array, the stages they run in, and the bytes of a unit."""

    parts: tuple[Part, ...]
    stages: int
    shard_units: int
    unit_bytes: float

    def active(self, stage: int, axis: int) -> list[tuple[int, int]]:
        """(part, step) of every part that crosses ``axis`` at gather stage ``stage``."""
        out = []
        for p, part in enumerate(self.parts):
            j = part.step(stage)
            if j is not None and part.order[j] == axis:
                out.append((p, j))
        return out

    def bundle_units(self, stage: int, axis: int, sizes: Sequence[int]) -> tuple[int, int]:
        """Units (first halves, second halves) one device sends over ``axis`` at ``stage``: each part
        crossing it holds one piece of every shard position it has gathered so far."""
        first = second = 0
        for p, j in self.active(stage, axis):
            part = self.parts[p]
            held = math.prod(sizes[b] for b in part.order[:j])
            first += held * part.halves[0]
            second += held * part.halves[1]
        return first, second


def timing_units(nbytes: float, n: int, rings: int, halves: bool) -> int:
    """Whole bytes per shard position: V / (rings x n) rounded up, and up to an even number where a ring
    splits pieces in halves (the difference is reported as padding)."""
    units = math.ceil(nbytes / (rings * n))
    return units + (units % 2 if halves else 0)


def integer_parts(plan: Sequence[tuple[tuple[int, ...], int, float]], units: int, quantum: int) -> tuple[Part, ...]:
    """Whole-unit parts in proportion to the plan's weights (largest remainders; multiples of ``quantum``
    units, the rest to the largest part); parts left with no units are dropped."""
    slots = units // quantum
    exact = [w * slots for _, _, w in plan]
    counts = [math.floor(x) for x in exact]
    by_remainder = sorted(range(len(plan)), key=lambda i: (counts[i] - exact[i], i))
    for i in by_remainder[:slots - sum(counts)]:
        counts[i] += 1
    sized = [c * quantum for c in counts]
    sized[max(range(len(plan)), key=lambda i: (exact[i], -i))] += units - slots * quantum
    return tuple(Part(tuple(order), start, c) for (order, start, _), c in zip(plan, sized, strict=True) if c > 0)


def check_data(kind: str, data: np.ndarray, n_chips: int, n: int) -> tuple[float, int]:
    """Validate numeric input; return (V in bytes, elements per shard position)."""
    if not isinstance(data, np.ndarray) or data.ndim != 2 or data.shape[0] != n_chips:
        shape = getattr(data, "shape", None)
        raise PodsimError(f"data must be a 2-D numpy array with one row per chip ({n_chips} rows); got shape {shape}")
    m = data.shape[1]
    if kind == "all_gather":
        return float(m * data.itemsize * n), m
    if m % n:
        raise PodsimError(f"data rows of {m} elements do not split into {n} equal shards for {kind}; "
                          f"use a multiple of {n}")
    return float(m * data.itemsize), m // n


def _pieces(shard: np.ndarray, layout: Layout) -> dict[tuple[int, int], np.ndarray]:
    """(part, half) -> the elements of ``shard`` they hold, in order."""
    out, at = {}, 0
    for p, part in enumerate(layout.parts):
        for h, size in enumerate(part.halves):
            out[(p, h)] = shard[at:at + size]
            at += size
    return out


def initial_buffers(kind: str, groups: list[Group], data: np.ndarray, layout: Layout) -> dict[Any, dict[Any, Any]]:
    """Each device's keys before the collective (device -> key -> array), cut from its row of ``data``."""
    buffers: dict[Any, dict[Any, np.ndarray]] = defaultdict(dict)
    for g in groups:
        positions = g.positions()
        for pos, dev in g.members.items():
            row = data[dev]
            shards = {pos: row} if kind == "all_gather" else dict(zip(positions, np.split(row, len(positions)),
                                                                      strict=True))
            for s, shard in shards.items():
                for (p, h), piece in _pieces(shard, layout).items():
                    buffers[dev][(p, s, h)] = piece
    return buffers


def outputs(kind: str, groups: list[Group], buffers: dict[Any, dict[Any, np.ndarray]], layout: Layout) -> dict:
    """Each device's result (device -> array), assembled from its keys after the collective."""
    out = {}
    keys = [(p, h) for p in range(len(layout.parts)) for h in (0, 1)]
    for g in groups:
        positions = g.positions()
        for pos, dev in g.members.items():
            shards = [pos] if kind == "reduce_scatter" else positions
            out[dev] = np.concatenate([buffers[dev][(p, s, h)] for s in shards for p, h in keys])
    return out
