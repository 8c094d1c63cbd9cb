"""A fluid run of a dependency graph of flows over fair-shared ports: a closed form that follows the instants.

Some schedules' time has no sum in closed form: where a pipeline's pieces come in bursts, a port is shared by as
many flows as are in flight at that instant, not by a fixed count at every step (on an H100 node, NVLSTree's down
port carries a GPU's fetch of one chunk beside up to 14 multicasts of the chunk before). `fluid_time` follows
those instants exactly, with the network's own timing rules (`simulator.engine.channel`, `simulator.engine.network`):

- a flow crosses a route of ports cut-through: the head reaches port k after the latencies of ports 0..k, and
  the flow joins port k then; it has arrived when every port has carried its bytes and, port by port, no sooner
  than the previous port's end plus this port's latency;
- each port is processor-shared: its ``w`` flows in flight each move at ``bandwidth / w``;
- a flow starts the instant every flow it depends on has arrived.

One entry may stand for several identical flows that join one port at one instant (``weight``): a schedule
folded by a symmetry (one GPU of each node standing for its node's GPUs) keeps its exact times. O(events log events)
work: each port keeps a virtual clock (the bytes every flow in flight has received since the port last idled), so
a flow's end is fixed on that clock when it joins, and only the port a flow joins or leaves changes.
"""
from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from heapq import heappop, heappush
from typing import Any

#: a flow whose bytes left fall below this fraction of its size counts as finished (float rounding)
_DONE = 1e-9


@dataclass
class Flow:
    """One flow of a fluid run: ``nbytes`` over ``route`` (ports, in order), after ``deps`` (indices of earlier
    flows) have arrived; ``weight`` identical flows that move together."""

    route: Sequence[Hashable]
    nbytes: float
    deps: Sequence[int] = ()
    weight: int = 1


@dataclass
class _Port:
    latency_s: float
    rate: float  #: bytes/s
    clock: float = 0.0  #: bytes each flow in flight has received since the port last idled, as of ``at``
    at: float = 0.0  #: seconds
    weight: int = 0  #: flows in flight
    version: int = 0  #: bumped at each change (an older entry of the ends' heap is stale)
    heap: list = field(default_factory=list)  #: (clock at which it ends, sequence, flow, hop)

    def advance(self, now: float) -> None:
        if self.weight:
            self.clock += (now - self.at) * self.rate / self.weight
        self.at = now

    def next_end(self) -> float:
        return self.at + (self.heap[0][0] - self.clock) * self.weight / self.rate


def fluid_time(ports: dict[Hashable, tuple[float, float]], flows: Sequence[Flow]) -> float:
    """Seconds until the last of ``flows`` has arrived, on ``ports`` (port -> (latency s, bandwidth B/s)), every
    flow with no dependencies starting at 0 (see the module docstring). A flow's dependencies come before it."""
    state = {p: _Port(lat, bw) for p, (lat, bw) in ports.items()}
    waiting = [len(set(f.deps)) for f in flows]
    users: list[list[int]] = [[] for _ in flows]
    for i, f in enumerate(flows):
        for d in set(f.deps):
            users[d].append(i)
    left = [len(f.route) for f in flows]
    ends = [[0.0] * len(f.route) for f in flows]
    #: (instant, order, kind, a, b): kind 0 a flow's arrival (flow a), 1 a port's next end (port a, version b),
    #: 2 a flow joining a port (flow a, hop b); at one instant arrivals first, then ends, then joins
    events: list[tuple[float, int, int, Any, int]] = []
    seq, last = 0, 0.0

    def push(t: float, kind: int, a: Any, b: int) -> None:
        nonlocal seq
        seq += 1
        heappush(events, (t, kind, seq, a, b))

    def start(i: int, t: float) -> None:
        if not flows[i].route or flows[i].nbytes <= 0:
            push(t, 0, i, 0)
            return
        for k, port in enumerate(flows[i].route):
            t += state[port].latency_s
            push(t, 2, i, k)

    def changed(p: Hashable, port: _Port) -> None:
        port.version += 1
        if port.heap:
            push(port.next_end(), 1, p, port.version)

    for i, w in enumerate(waiting):
        if w == 0:
            start(i, 0.0)
    while events:
        now, kind, _, a, b = heappop(events)
        if kind == 0:
            last = max(last, now)
            for u in users[a]:
                waiting[u] -= 1
                if waiting[u] == 0:
                    start(u, now)
        elif kind == 1:
            port = state[a]
            if b != port.version:
                continue
            port.advance(now)
            _, _, i, k = heappop(port.heap)
            port.weight -= flows[i].weight
            if not port.heap:
                port.clock, port.weight = 0.0, 0
            changed(a, port)
            ends[i][k] = now
            left[i] -= 1
            if left[i] == 0:
                push(_arrival(state, flows[i].route, ends[i]), 0, i, 0)
        else:
            p = flows[a].route[b]
            port = state[p]
            port.advance(now)
            port.weight += flows[a].weight
            heappush(port.heap, (port.clock + flows[a].nbytes * (1 - _DONE), seq, a, b))
            changed(p, port)
    return last


def _arrival(state: dict[Hashable, _Port], route: Sequence[Hashable], ends: list[float]) -> float:
    """When a flow whose ports finished at ``ends`` has arrived: port by port, no sooner than the previous port's
    end plus this port's latency (`simulator.acceleration.aggregate._CutThrough`)."""
    done = 0.0
    for port, end in zip(route, ends, strict=True):
        done = max(end, done + state[port].latency_s)
    return done
