"""Broadcast: the root's array, cut into ``chunks`` pieces, spreads axis by axis, each piece store and forward.

Phase j spreads every piece along axis j from each device that holds it (the root's line of devices
first); a holder forwards piece j the moment it has it, whichever earlier phase brought it, and every
link carries the pieces in order, so the pieces pipeline through the whole group.

Closed form (`closed_form`): the critical path runs from the root to the farthest device, axis by axis;
each hop costs its route latency ``a_h`` plus a piece's bytes over the hop's share of its slowest link, ``s_h`` (a
link that two chains of the ring cross, such as a root's switch port sending both ways, gives each a share).
One piece takes ``sum(a_h + s_h)``. Several pieces split every hop (`chains.broadcast_phase`): a piece's bytes
leave as soon as the piece before it has left the link, and the latency follows as a pure delay, so ``c`` pieces
take ``sum(a_h) + sum(s_h) + (c - 1) max(s_h)`` (`simulator.collectives.timing.split_chain_time`):
``H latency + (H + c - 1) piece / b`` for H equal hops -- a hop's latency paid once, not once a piece. A network
(InfiniBand) hop under LL or LL128 forwards whole NCCL steps, ``m`` pieces at once (``job.net_step_bytes``,
`network_group`), as NCCL's proxy does; the closed form is then the same tandem with that hop batching
(`simulator.collectives.timing.grouped_chain_time`).
NIC rings (GPU nodes) each start at their own position 0 and move in step: they are rotations of one another, so
at every instant ring r's hop k is in the state ring 0's hop k is in, and a GPU's NVLink port carries, at once, the
flows of all of a node's in-node hops of ring 0 (one of each of 7 rings). With several pieces the rings are then one
ring whose hops on a link share it fairly (`_shared_ports`, `simulator.collectives.timing.shared_chain_time`;
issue 27): calibrated H100 nodes:2:8 64 MB 341.76 us = the simulation (264.1 us while each ring was priced alone).
Exact on tori, lines and switches, and on GPU nodes (one piece, one NIC ring, or the rotated rings). The ring
Reduce (`reduce_closed_form`) prices the same rotated rings the same way (within 0.12% of its simulation there).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from simulator.collectives.algorithm import Job
from simulator.collectives.chains import broadcast_phase, reduce_to_phase
from simulator.collectives.groups import Group, Ring, ring_bases
from simulator.collectives.schedule import Schedule
from simulator.collectives.timing import (
    grouped_chain_time,
    hop_parts,
    link_use,
    shared_chain_time,
    shared_port_labels,
    step_edges,
)

OnAxis = Callable[[bool], Any]


def build(job: Job, groups: list[Group], on_axis: OnAxis, s: Schedule) -> None:
    """Add the broadcast of every group from its root position ``job.root_pos``."""
    for group in groups:
        axes = list(range(len(group.sizes)))
        tags: list[Any] = []
        for j, a in enumerate(axes):
            tag = ("bcast", id(group), j)
            fixed = {b: job.root_pos[b] for b in axes if b not in axes[:j]}
            for base in ring_bases(group, a, fixed, False):
                ring = group.ring(base, a, False)
                broadcast_phase(s, ring, job.root_pos[a], job.chunks, on_axis(ring.wrap),
                                _piece_start(s, list(tags), ring), tag, _grouping(job, ring))
            tags.append(tag)


def _piece_start(s: Schedule, earlier: list[Any], ring: Ring) -> Callable[[int, int], list[int]]:
    """A holder forwards piece j once it has received it, in whichever earlier phase that was."""
    def start(i: int, j: int) -> list[int]:
        for tag in reversed(earlier):
            got = s.arrivals.get(((tag, j), ring.slots[i]))
            if got:
                return got
        return []
    return start


def network_group(job: Job) -> int:
    """Pieces a network hop forwards at once: the whole pieces in one NCCL step of the job's protocol on the
    channels a ring stands for (``job.net_step_bytes``, `simulator.collectives.protocol.network_step_bytes`);
    1 (each piece as it lands) without one."""
    if job.net_step_bytes <= 0 or job.chunks <= 1 or job.key_bytes <= 0:
        return 1
    return max(1, min(job.chunks, int(job.net_step_bytes // job.key_bytes)))


def _is_network(net: Any, edges: list[tuple[Any, Any]]) -> bool:
    """Whether a hop's route crosses a network (InfiniBand) link, where NCCL's proxy moves whole steps."""
    return any(net.graph.edges[e].get("kind") == "ib" for e in edges)


def _grouping(job: Job, ring: Ring) -> Callable[[int, int], int] | None:
    """(position, direction) -> pieces the hop from there forwards at once on ``ring`` (None: one at a time)."""
    m = network_group(job)
    if m == 1:
        return None
    return lambda i, d: m if _is_network(job.net, step_edges(job.net, ring, i, d)) else 1


def _hops(job: Job, ring: Ring, chains: list[tuple[int, int, int]]) -> list[list[tuple[float, float, int]]]:
    """(latency, a piece's seconds, pieces forwarded at once) of every hop of each chain on ``ring``."""
    n, m = len(ring.devices), network_group(job)
    parts = hop_parts(job.net, ring, chains, job.key_bytes, link_use(job.net, ring, chains))
    return [[(a, s, m if m > 1 and _is_network(job.net, step_edges(job.net, ring, (origin + k * d) % n, d)) else 1)
             for k, (a, s) in enumerate(chain)] for (origin, d, _), chain in zip(chains, parts, strict=True)]


def closed_form(job: Job, on_axis: OnAxis) -> float:
    """Pieces pipelined along the critical path (see the module docstring)."""
    sizes, root = job.group.sizes, job.root_pos
    path: list[tuple[float, float, int]] = []
    for a, n_a in enumerate(sizes):
        algorithm = on_axis(job.group.wraps[a])
        chains = [(root[a], d, h) for d, h in algorithm.broadcast_reach(n_a, root[a]).items() if h > 0]
        rings = [groups[0].ring(root[:a] + (0,) + root[a + 1:], a) for groups in job.rings]
        if len(sizes) == 1 and len(chains) == 1 and len(rings) > 1 and job.chunks > 1:
            shared = _shared_ports(job, rings, chains[0])
            if shared is not None:
                return shared_chain_time(shared[0], shared[1], job.chunks)
        costs = [c for ring in rings for c in _hops(job, ring, chains)]
        path += max(costs, key=lambda c: grouped_chain_time(list(c), job.chunks), default=[])
    return grouped_chain_time(path, job.chunks)


def _shared_ports(job: Job, rings: list[Ring], chain: tuple[int, int, int]
                  ) -> tuple[list[tuple[float, float, int]], list[int]] | None:
    """Ring 0's hops of ``chain`` and a port label for each, for rings that are rotations of one another (NIC rings
    on GPU nodes): hops k and k' share a label when some ring's hop k' crosses a link ring 0's hop k crosses (so, the
    rings moving in step, their flows are on one link at once; `timing.shared_chain_time`). None (price each ring
    alone) unless every ring's hops cost the same (the rings then move in step) and every link carries all of its
    label's hops once each (one shared port; on H100 nodes a GPU's NVLink port, both ways, carries the node's 7
    in-node hops, one of each of 7 rings, and a NIC one ring's network hop)."""
    per_ring = [_hops(job, ring, [chain])[0] for ring in rings]
    if any(h != per_ring[0] for h in per_ring[1:]):
        return None
    origin, d, n_hops = chain
    users: dict[tuple[Any, Any], list[int]] = {}
    for ring in rings:
        n = len(ring.devices)
        for k in range(n_hops):
            for e in step_edges(job.net, ring, (origin + k * d) % n, d):
                users.setdefault(e, []).append(k)
    ports = shared_port_labels(n_hops, users)
    return None if ports is None else (per_ring[0], ports)


def build_reduce(job: Job, groups: list[Group], on_axis: OnAxis, s: Schedule) -> None:
    """Add the Reduce of every group (one axis: NCCL's ring Reduce) to its root position ``job.root_pos``."""
    for group in groups:
        ring = group.ring(tuple(job.root_pos), 0, False)
        reduce_to_phase(s, ring, job.root_pos[0], job.chunks, on_axis(ring.wrap), ("ring reduce", id(group)),
                        _grouping(job, ring))


def reduce_closed_form(job: Job, on_axis: OnAxis) -> float:
    """The slowest chain towards the root (one axis): `split_chain_time` of its hops, from the far end in."""
    n, root = job.group.sizes[0], job.root_pos[0]
    algorithm = on_axis(job.group.wraps[0])
    chains = [((root - hops * d) % n, d, hops) for d, hops in algorithm.reach_to(n, root) if hops > 0]
    rings = [groups[0].ring((0,), 0) for groups in job.rings]
    if len(chains) == 1 and len(rings) > 1 and job.chunks > 1:
        shared = _shared_ports(job, rings, chains[0])
        if shared is not None:
            return shared_chain_time(shared[0], shared[1], job.chunks)
    costs = [c for ring in rings for c in _hops(job, ring, chains)]
    return max((grouped_chain_time(list(c), job.chunks) for c in costs), default=0.0)
