"""Capacity pools (HBM, VMEM): labelled allocations, back-pressure, live bytes over time, peak.

A `MemoryPool` is a fuel tank measured in bytes. `allocate` returns an event that fires once the
bytes are reserved; requests are served strictly first come first served, so a large request is not
starved by later small ones (back-pressure). A request larger than the whole pool can never be met
and raises `CapacityError` at once, naming the label and the capacity.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import simpy

from simulator.errors import CapacityError, PodsimError
from simulator.units import format_quantity, positive


@dataclass(eq=False)
class Allocation:
    """``nbytes`` held in ``pool`` under ``label`` since ``start_s``."""

    pool: MemoryPool
    label: str
    nbytes: float
    start_s: float = 0.0
    freed: bool = False


class MemoryPool:
    """A pool of ``capacity_bytes`` with labelled allocations and a live-bytes timeline."""

    def __init__(self, env: simpy.Environment, name: str, capacity_bytes: float, *, chip: int | str = 0) -> None:
        self.env = env
        self.name = name
        self.chip = chip
        self.capacity_bytes = positive(capacity_bytes, name=f"{name} capacity_bytes")
        self.live_bytes = 0.0
        self.peak_bytes = 0.0
        self.peak_time_s = 0.0
        self.timeline: list[tuple[float, float]] = [(0.0, 0.0)]  #: (time s, live bytes) after each change
        self.live: dict[int, Allocation] = {}
        self._waiting: deque[tuple[simpy.Event, Allocation]] = deque()

    def check_fits(self, nbytes: float, label: str) -> None:
        """Raise `CapacityError` if ``nbytes`` could never fit in this pool."""
        positive(nbytes, name=f"{label} nbytes", allow_zero=True)
        if nbytes > self.capacity_bytes:
            raise CapacityError(
                f"{label!r} needs {format_quantity(nbytes, 'B')} ({nbytes:.0f} bytes) but chip "
                f"{self.chip} {self.name} holds only {format_quantity(self.capacity_bytes, 'B')} "
                f"({self.capacity_bytes:.0f} bytes); use smaller blocks or a larger {self.name}")

    def allocate(self, nbytes: float, label: str) -> simpy.Event:
        """Reserve ``nbytes``; the event's value is the `Allocation` once it is granted."""
        self.check_fits(nbytes, label)
        event = self.env.event()
        event.podsim_waits_for = (f"{nbytes:.0f} bytes of {self.name} on chip {self.chip} for {label!r} "
                                  f"(capacity {self.capacity_bytes:.0f} bytes)")
        self._waiting.append((event, Allocation(self, label, nbytes)))
        self._grant()
        return event

    def free(self, allocation: Allocation) -> None:
        """Return ``allocation``'s bytes to the pool and wake waiting requests in order."""
        if allocation.freed or allocation.pool is not self:
            raise PodsimError(f"allocation {allocation.label!r} freed twice or in the wrong pool ({self.name})")
        allocation.freed = True
        del self.live[id(allocation)]
        self._change(-allocation.nbytes)
        self._grant()

    def _grant(self) -> None:
        while self._waiting and self.live_bytes + self._waiting[0][1].nbytes <= self.capacity_bytes:
            event, allocation = self._waiting.popleft()
            allocation.start_s = self.env.now
            self.live[id(allocation)] = allocation
            self._change(allocation.nbytes)
            event.succeed(allocation)

    def _change(self, delta: float) -> None:
        self.live_bytes += delta
        if self.live_bytes > self.peak_bytes:
            self.peak_bytes = self.live_bytes
            self.peak_time_s = self.env.now
        self.timeline.append((self.env.now, self.live_bytes))

    def live_by_label(self) -> dict[str, float]:
        """Bytes currently held per label."""
        out: dict[str, float] = {}
        for alloc in self.live.values():
            out[alloc.label] = out.get(alloc.label, 0.0) + alloc.nbytes
        return out
