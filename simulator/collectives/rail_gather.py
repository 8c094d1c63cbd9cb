"""Gather and Scatter across GPU nodes along the rails (``rail_gather``).

On ``nodes:K:G`` every GPU has one NVLink port to its node's switch (W_nv each way) and one NIC to the
InfiniBand switch (W_ib, far slower). Sent straight to the root (`root_direct`), the n - G shards of the
other nodes all cross the root's own NIC: (n - G) s / W_ib with s = V / n, 5x the bound on nodes:2:8.
Here they cross the NICs of the root's node, one per rail, then NVLink:

Gather, root (a, b) (node a, GPU b). The GPUs (k, b) of the root's rail send their shards straight to the
root over InfiniBand, all at once: ``alpha_ib + (K - 1) s / W_ib``. Every other GPU (k, h) of the other
nodes sends its shard to its rail's GPU (a, h) in the root's node, the nodes in turn (node k_j at step j,
its bytes once step j - 1's have left the NIC, then the route's latency: the step split in two,
`simulator.collectives.schedule.Schedule.add_split`, so the latency is paid once, not once a step), and
(a, h) forwards each to the root over NVLink as it arrives
(after its own shard, sent first, and its forward of step j - 1 have arrived). The G - 1 GPUs of the root's
node send alike, so the root's NVLink port takes G - 1 equal shards at a time:

    r_j = alpha_ib + j s / W_ib                                 (step j's shards at the rail GPUs)
    f_0 = alpha_nv + (G - 1) s / W_nv                           (their own shards at the root)
    f_j = max(r_j, f_(j-1)) + alpha_nv + (G - 1) s / W_nv       (step j's forwards at the root)
    T = max(f_(K-1), alpha_ib + (K - 1) s / W_ib)

(alpha: a route's latency, two links; a link direction shares its bandwidth fairly among its messages,
so equal messages that start together end together.) Scatter runs it backwards: the root sends the rail
GPUs of its node step j's shards over NVLink one step after another (``n_j = j (alpha_nv + (G - 1) s /
W_nv)``), each forwards over InfiniBand as they arrive, split the same way (``L_j = max(n_j, L_(j-1)) + s /
W_ib``, ``b_j = L_j + alpha_ib``),
then the root sends its node's own shards (``n_K``); its rail's shards go straight over its NIC at once:
``T = max(b_(K-1), n_K, alpha_ib + (K - 1) s / W_ib)``.

H100 nodes:2:8, 64 MB: 1.22x the bound (5.3x with root_direct); nodes:4:8: 1.25x (7.6x; 1.33x before the
steps were split): the rail GPUs' InfiniBand steps, a shard each after one route latency, set the pace.
"""
from __future__ import annotations

import math
from typing import Any

from simulator.collectives.algorithm import Algorithm, Job, register
from simulator.collectives.groups import Group
from simulator.collectives.schedule import Schedule
from simulator.engine.network import Network


def _coord(net: Network, device: Any) -> tuple[int, int]:
    return tuple(net.graph.nodes[device]["coord"])


def _route(net: Network, u: Any, v: Any) -> tuple[float, float]:
    """(route latency s, slowest link B/s) from ``u`` to ``v``."""
    path = net.routes(u, v)[0]
    edges = [net.graph.edges[e] for e in zip(path, path[1:], strict=False)]
    return sum(e["latency_s"] for e in edges), min(e["bandwidth_bytes_per_s"] for e in edges)


class RailGather(Algorithm):
    """Gather / Scatter across GPU nodes: the other nodes' shards over the rails of the root's node, then NVLink."""

    name = "rail_gather"
    summary = ("Gather, Scatter across GPU nodes: other nodes' shards over InfiniBand to the root node's GPU of "
               "their rail, a node at a time, forwarded over NVLink as they arrive; the root's rail straight")
    kinds = ("gather", "scatter")
    topologies = ("nodes",)
    nic_rings = False

    def unfit(self, kind: str, net: Network, groups: list[Group]) -> str | None:
        why = super().unfit(kind, net, groups)
        if why is None and (len(groups) != 1 or groups[0].n != len(net.chips)):
            return "it gathers over every GPU of every node (a group of the whole system)"
        if why is None and net.graph.graph.get("units", 1) > 1:
            return "its closed form takes every rail's route alike; across fat-tree units some cross the spine"
        return why

    def _plan(self, job: Job) -> tuple[Any, dict[int, dict[int, Any]], int, int]:
        """(root device, devices by [node][gpu], root's node, root's GPU)."""
        net, group = job.net, job.group
        root = group.members[job.root_pos]
        at: dict[int, dict[int, Any]] = {}
        for device in group.members.values():
            k, h = _coord(net, device)
            at.setdefault(k, {})[h] = device
        a, b = _coord(net, root)
        return root, at, a, b

    def _links(self, job: Job) -> tuple[float, float, float, float]:
        """(alpha_nv, W_nv, alpha_ib, W_ib): the slowest of the routes the algorithm uses."""
        net = job.net
        root, at, a, b = self._plan(job)
        nv = [_route(net, at[a][h], root) for h in at[a] if h != b]
        ib = [_route(net, at[k][h], at[a][h]) for k in at if k != a for h in at[k]]
        alpha_nv, w_nv = (max(x[0] for x in nv), min(x[1] for x in nv)) if nv else (0.0, math.inf)
        alpha_ib, w_ib = (max(x[0] for x in ib), min(x[1] for x in ib)) if ib else (0.0, math.inf)
        return alpha_nv, w_nv, alpha_ib, w_ib

    def closed_form(self, job: Job) -> float:
        """The recurrences of the module docstring."""
        _, at, a, b = self._plan(job)
        steps, peers = len(at) - 1, len(at[a]) - 1
        s = job.key_bytes
        alpha_nv, w_nv, alpha_ib, w_ib = self._links(job)
        nv = alpha_nv + peers * s / w_nv if peers else 0.0
        straight = alpha_ib + steps * s / w_ib if steps else 0.0
        if job.kind == "gather":
            f = nv
            for j in range(1, steps + 1):
                f = max(alpha_ib + j * s / w_ib, f) + nv
            return max(f, straight)
        left = 0.0
        for j in range(1, steps + 1):
            left = max(j * nv, left) + s / w_ib
        return max(left + alpha_ib if peers and steps else 0.0, (steps + 1) * nv, straight)

    def build(self, job: Job, s: Schedule) -> None:
        root, at, a, b = self._plan(job)
        group = job.group
        position = {device: p for p, device in group.members.items()}
        tag = ("rail_gather", id(group))

        def add(src: Any, dst: Any, owner: Any, deps: list[int]) -> int:
            keys = ((0, position[owner]),) if job.numeric else 1
            return s.add(src, dst, keys, "copy", deps, tag, dst)

        def split(src: Any, dst: Any, owner: Any, deps: list[int], behind: list[int]) -> tuple[int, int]:
            """An InfiniBand step split in two: its bytes once ``deps`` are in and ``behind`` (the rail's step
            before) has left the NIC, then the route's latency; (bytes, arrival)."""
            keys = ((0, position[owner]),) if job.numeric else 1
            return s.add_split(src, dst, keys, "copy", deps, tag, dst, behind)

        others = [k for k in sorted(at) if k != a]
        rails = [h for h in sorted(at[a]) if h != b]
        if job.kind == "gather":
            for k in others:
                add(at[k][b], root, at[k][b], [])
            for h in rails:
                head = at[a][h]
                forward = add(head, root, head, [])
                gone: list[int] = []
                for k in others:
                    left, arrived = split(at[k][h], head, at[k][h], [], gone)
                    gone = [left]
                    forward = add(head, root, at[k][h], [arrived, forward])
            return
        for k in others:
            add(root, at[k][b], at[k][b], [])
        sent: dict[int, int] = {}  # rail -> the root's last NVLink transfer to it
        onward: dict[int, int] = {}  # rail -> its GPU's last InfiniBand transfer
        for k in others:  # step by step: the root's port carries one shard per rail at a time
            for h in rails:
                head = at[a][h]
                sent[h] = add(root, head, at[k][h], [sent[h]] if h in sent else [])
                onward[h], _ = split(head, at[k][h], at[k][h], [sent[h]], [onward[h]] if h in onward else [])
        for h in rails:
            add(root, at[a][h], at[a][h], [sent[h]] if h in sent else [])


RAIL_GATHER = register(RailGather())
