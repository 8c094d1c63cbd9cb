"""Closed-form pieces shared by the ring algorithms, from the topology graph and first principles.

Nothing here looks at a built schedule. A ring algorithm states, by formula, how many units (shards,
chunks) each ring link carries at each step of a phase; this module lays the ring's neighbour steps on
the network's routes and prices them:

- a phase of chains (AllGather, ReduceScatter, AllToAll along one ring) lasts as long as the longer of
  its slowest chain of hops (each paying its route's latency and its bytes at the bandwidth share its
  step leaves it) and its busiest link's work (all its bytes over its bandwidth) (`chain_phase_time`).
  On a ring whose steps are all alike the slowest chain is ``steps x (latency + unit / b)``: exact;
- a pipelined broadcast of ``c`` pieces along a chain of hops costing ``t_h`` each (latency plus the
  piece's bytes over the hop's share of bandwidth) takes ``sum(t_h) + (c - 1) max(t_h)``
  (`pipeline_time`): the first piece crosses every hop, the others follow one slowest hop apart.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from simulator.collectives.groups import Ring
from simulator.engine.network import Network

Units = Callable[[int, int, int, int], float]
"""(ring size n, position i, direction d, step h) -> units ring link i -> i+d carries at step h (0: idle)."""


def step_edges(net: Network, ring: Ring, i: int, d: int) -> list[tuple[Any, Any]]:
    """The physical link directions of the route between ring positions i and i + d."""
    n = len(ring.devices)
    path = net.routes(ring.devices[i], ring.devices[(i + d) % n])[0]
    return list(zip(path, path[1:], strict=False))


def route_latency(net: Network, edges: list[tuple[Any, Any]]) -> float:
    """Seconds for the head of a message to cross ``edges`` (their latencies add)."""
    return sum(net.graph.edges[e]["latency_s"] for e in edges)


def ring_links(n: int, closed: bool) -> list[tuple[int, int]]:
    """Ring links (i, d) from position i to i + d: both ways round a closed ring, never off a line's ends."""
    return [(i, d) for d in (1, -1) for i in range(n) if closed or 0 <= i + d < n]


def chain_phase_time(net: Network, rings: list[Ring], closed: bool, steps: int, units: Units,
                     unit_bytes: float) -> float:
    """The longer of the slowest chain and the busiest link's work, for chains run along ``rings`` at once
    (one ring per NIC; they share the links their routes share).

    At step h ring link (i, d) carries ``units(n, i, d, h)`` units of ``unit_bytes``; a physical link
    carries what every ring link routed over it carries (both directions of a ring leave a chip by its
    one switch port). A chain starts at every position and goes on while its next link is busy at the
    next step; a hop costs its route's latency plus the bytes its busiest link carries that step over
    that link's bandwidth, and a chain's hops run one after another. The busiest link's work is its
    bytes over all steps over its bandwidth.
    """
    return chain_phase_profile(net, rings, closed, steps, units).time(unit_bytes)


@dataclass(frozen=True)
class PhaseProfile:
    """`chain_phase_time` for any unit size: each chain's latency and seconds per unit byte, and the busiest
    link's seconds per unit byte (both terms grow linearly with the unit)."""

    chains: tuple[tuple[float, float], ...]  #: (seconds of latency, seconds per byte of a unit)
    busiest: float  #: seconds per byte of a unit on the busiest link

    def time(self, unit_bytes: float) -> float:
        """Seconds of the phase when a unit is ``unit_bytes`` bytes."""
        slowest = max((latency + unit_bytes * per_byte for latency, per_byte in self.chains), default=0.0)
        return max(slowest, unit_bytes * self.busiest)


def chain_phase_profile(net: Network, rings: list[Ring], closed: bool, steps: int, units: Units) -> PhaseProfile:
    """The `PhaseProfile` of chains run along ``rings`` at once (see `chain_phase_time`)."""
    step_units: dict[tuple[int, Any], float] = defaultdict(float)  # (step, physical link) -> units
    laid = []
    for ring in rings:
        n = len(ring.devices)
        links = ring_links(n, closed)
        route = {(i, d): step_edges(net, ring, i, d) for i, d in links}
        carried = {(i, d, h): units(n, i, d, h) for i, d in links for h in range(1, steps + 1)}
        for (i, d, h), c in carried.items():
            for e in route[(i, d)]:
                step_units[(h, e)] += c
        latency = {key: route_latency(net, edges) for key, edges in route.items()}
        laid.append((n, route, latency, carried))
    bw = {e: net.graph.edges[e]["bandwidth_bytes_per_s"] for _, e in step_units}
    per_byte = {(h, e): u / bw[e] for (h, e), u in step_units.items()}  # seconds per unit byte, per step
    work: dict[Any, float] = defaultdict(float)
    for (_, e), t in per_byte.items():
        work[e] += t
    chains = {c for n, route, latency, carried in laid for c in _chains(n, route, latency, carried, steps, per_byte)}
    return PhaseProfile(tuple(sorted(chains)), max(work.values(), default=0.0))


def _chains(n: int, route: dict[tuple[int, int], list[Any]], latency: dict[tuple[int, int], float],
            carried: dict[tuple[int, int, int], float], steps: int,
            per_byte: dict[tuple[int, Any], float]) -> list[tuple[float, float]]:
    """(latency, seconds per unit byte) of every chain of one ring (see `chain_phase_time`)."""
    out = []
    for origin, d in ((o, d) for o in range(n) for d in (1, -1)):
        total, slope, i = 0.0, 0.0, origin
        for h in range(1, steps + 1):
            if carried.get((i, d, h), 0.0) <= 0:
                break
            total += latency[(i, d)]
            slope += max(per_byte[(h, e)] for e in route[(i, d)])
            i = (i + d) % n
        out.append((total, slope))
    return out


def hop_costs(net: Network, ring: Ring, chains: list[tuple[int, int, int]], piece_bytes: float,
              shared: dict[tuple[Any, Any], int]) -> list[list[float]]:
    """Seconds one piece spends on each hop of each chain ``(origin, direction, hops)``: route latency
    plus the piece's bytes over the slowest link's share (``shared[e]`` pieces cross link e per round)."""
    n = len(ring.devices)
    out = []
    for origin, d, hops in chains:
        costs = []
        for k in range(hops):
            edges = step_edges(net, ring, (origin + k * d) % n, d)
            share = min(net.graph.edges[e]["bandwidth_bytes_per_s"] / shared[e] for e in edges)
            costs.append(route_latency(net, edges) + piece_bytes / share)
        out.append(costs)
    return out


def link_use(net: Network, ring: Ring, chains: list[tuple[int, int, int]]) -> dict[tuple[Any, Any], int]:
    """How many hops of ``chains`` (one piece each) cross each physical link."""
    n = len(ring.devices)
    use: dict[tuple[Any, Any], int] = defaultdict(int)
    for origin, d, hops in chains:
        for k in range(hops):
            for e in step_edges(net, ring, (origin + k * d) % n, d):
                use[e] += 1
    return use


def pipeline_time(costs: list[float], pieces: int) -> float:
    """``pieces`` pieces store-and-forwarded along hops of ``costs`` seconds each."""
    return sum(costs) + (pieces - 1) * max(costs) if costs else 0.0
