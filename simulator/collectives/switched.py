"""What the switched algorithms share: applicability, group order, and the price of one all-at-once step.

Direct, recursive and tree algorithms send every message straight to its peer through the switches: on a
switch (an NVLink node) or GPU nodes, where every route between two GPUs is two links (GPU -> switch ->
GPU: the NVLink switch inside a node, the InfiniBand fabric between nodes) and the switches never limit
bandwidth. On a torus the same messages would be multi-hop routes sharing ring links, which their
closed forms do not price, so they serve switched topologies only.
"""
from __future__ import annotations

from collections import Counter
from typing import Any

from simulator.collectives.algorithm import Job
from simulator.collectives.groups import Group
from simulator.collectives.timing import route_latency
from simulator.engine.network import Network

SWITCHED = ("switch", "nodes")


def members(group: Group) -> list[Any]:
    """The group's chips in position order (rank order)."""
    return [group.members[p] for p in group.positions()]


def edges(net: Network, a: Any, b: Any) -> list[tuple[Any, Any]]:
    """The link directions of the route from chip ``a`` to chip ``b``."""
    path = net.routes(a, b)[0]
    return list(zip(path, path[1:], strict=False))


def keys(job: Job, positions: list[tuple[int, ...]], parts: range | list[int]) -> tuple | int:
    """The keys (part, position) of ``positions``, or their count when timing only."""
    if job.numeric:
        return tuple((p, pos) for pos in positions for p in parts)
    return len(positions) * len(parts)


def all_pairs_time(net: Network, group: Group, nbytes: float) -> float:
    """Seconds for every chip of ``group`` to send ``nbytes`` to every other chip, all at once.

    Every route is two links through one switch; the flows leaving a chip by one link all start together
    and share it, and by symmetry as many enter each peer by its link from that switch. A cut-through
    message ends ``latency(route) + max over its links (flows x bytes / bandwidth)`` after the start.
    Exact on switches and GPU nodes (every chip sees the same counts of local and remote peers).
    """
    g = net.graph
    worst = 0.0
    chips = members(group)
    a = chips[0]  # every chip sees the same peers (a whole switch, or as many chips in every node)
    routes = {b: edges(net, a, b) for b in chips if b != a}
    flows = Counter(r[0] for r in routes.values())  # flows per egress link of a
    for r in routes.values():
        share = flows[r[0]] * nbytes  # the same count enters the peer from that switch
        load = max(share / g.edges[e]["bandwidth_bytes_per_s"] for e in (r[0], r[-1]))
        worst = max(worst, route_latency(net, r) + load)
    return worst


def pair_time(net: Network, a: Any, b: Any, nbytes: float) -> float:
    """Seconds for one message of ``nbytes`` from ``a`` to ``b`` with its route to itself."""
    r = edges(net, a, b)
    return route_latency(net, r) + max(nbytes / net.graph.edges[e]["bandwidth_bytes_per_s"] for e in r)
