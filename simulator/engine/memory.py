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

from simulator.engine.simpy_door import clock, init_pending, succeed_urgent
from simulator.errors import CapacityError, PodsimError
from simulator.units import format_quantity, positive


@dataclass(eq=False, slots=True)
class Allocation:
    """``nbytes`` held in ``pool`` under ``label`` since ``start_s``."""

    pool: MemoryPool
    label: str
    nbytes: float
    start_s: float = 0.0
    freed: bool = False


class _Request(simpy.Event):
    """The event of one `MemoryPool.allocate`; says what it waits for (for deadlock messages) only when asked."""

    def __init__(self, env: simpy.Environment, allocation: Allocation) -> None:
        init_pending(self, env)  # simpy.Event.__init__, inlined
        self.allocation = allocation

    @property
    def podsim_waits_for(self) -> str:
        """What the request waits for (the protocol `System` reads when a process is stuck)."""
        a, pool = self.allocation, self.allocation.pool
        return (f"{a.nbytes:.0f} bytes of {pool.name} on chip {pool.chip} for {a.label!r} "
                f"(capacity {pool.capacity_bytes:.0f} bytes)")


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
        self.live: dict[Allocation, Allocation] = {}  #: by identity (eq=False), in the order granted
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
        if nbytes.__class__ is not float or not 0.0 <= nbytes <= self.capacity_bytes:
            self.check_fits(nbytes, label)  # the hot path skips the call; anything odd is checked in full
        allocation = Allocation(self, label, nbytes)
        event = _Request(self.env, allocation)
        if not self._waiting and self.live_bytes + nbytes <= self.capacity_bytes:
            succeed_urgent(event, self._hold(allocation))  # nobody queued and it fits: granted now
        else:
            self._waiting.append((event, allocation))
            self._grant()
        return event

    def take(self, nbytes: float, label: str) -> Allocation | None:
        """`allocate` without its event, where it would be granted at once: the `Allocation` when ``nbytes`` (a
        plain float within the capacity) fit now and nobody is queued, else None (nothing changed; `allocate`
        then queues it or says why it is refused). The caller knows the grant event would not be waited for:
        the pipeline's loader takes this when the event would be the next one popped (`simpy_door.pops_next`)."""
        if nbytes.__class__ is not float or not 0.0 <= nbytes <= self.capacity_bytes or self._waiting or \
                self.live_bytes + nbytes > self.capacity_bytes:
            return None
        allocation = Allocation(self, label, nbytes)  # what _hold does, inlined (the pipeline's hot path)
        now = allocation.start_s = clock(self.env)
        self.live[allocation] = allocation
        live = self.live_bytes = self.live_bytes + nbytes
        if live > self.peak_bytes:
            self.peak_bytes, self.peak_time_s = live, now
        self.timeline.append((now, live))
        return allocation

    def _hold(self, allocation: Allocation) -> Allocation:
        """What _grant (_take, _change) does for a request granted at once, inlined; returns ``allocation``."""
        now = allocation.start_s = clock(self.env)
        self.live[allocation] = allocation
        live = self.live_bytes = self.live_bytes + allocation.nbytes
        if live > self.peak_bytes:
            self.peak_bytes, self.peak_time_s = live, now
        self.timeline.append((now, live))
        return allocation

    def free(self, allocation: Allocation) -> None:
        """Return ``allocation``'s bytes to the pool and wake waiting requests in order."""
        if allocation.freed or allocation.pool is not self:
            raise PodsimError(f"allocation {allocation.label!r} freed twice or in the wrong pool ({self.name})")
        allocation.freed = True
        del self.live[allocation]
        self.live_bytes -= allocation.nbytes  # what _change does for a decrease
        self.timeline.append((clock(self.env), self.live_bytes))
        if self._waiting:
            self._grant()

    def _grant(self) -> None:
        while self._waiting and self.live_bytes + self._waiting[0][1].nbytes <= self.capacity_bytes:
            self._take(*self._waiting.popleft())

    def _take(self, event: simpy.Event, allocation: Allocation) -> None:
        allocation.start_s = self.env.now
        self.live[allocation] = allocation
        self._change(allocation.nbytes)
        event.succeed(allocation)

    def _change(self, delta: float) -> None:
        self.live_bytes += delta
        now = self.env.now
        if self.live_bytes > self.peak_bytes:
            self.peak_bytes = self.live_bytes
            self.peak_time_s = now
        self.timeline.append((now, self.live_bytes))

    def live_by_label(self) -> dict[str, float]:
        """Bytes currently held per label."""
        out: dict[str, float] = {}
        for alloc in self.live.values():
            out[alloc.label] = out.get(alloc.label, 0.0) + alloc.nbytes
        return out
