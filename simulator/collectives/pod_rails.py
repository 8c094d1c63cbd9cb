"""Broadcast and Reduce on multipod (three levels: chips over ICI, slices over their pod's DCN switch, pods over
the core): `simulator.collectives.slice_rails` with the rails' chain in pod order (``pod_rails``).

Topology (`topologies.multilevel.multipod`): P pods of S slices of m chips; every chip has one DCN link each way
(W_d) to its pod's switch, every pod switch one core link each way of C = S m c (c a chip's share of it,
W_d / 4 by default). What the bound asks (`simulator.collectives.bounds`): besides multislice's terms, every pod
but the root's must receive V (Reduce: send it) through its one core link: ``V / C`` (tpu-v5e multipod:2:2:4x4:
C = 25 GB/s, 40 ms, where the slice cut V / (m W_d) is 20 ms).

Structure: slice_rails' trees in the root's slice, rails, gathers and batches, the chain of slices ordered by
`simulator.collectives.slice_rails.chain_order` (the root's slice, the rest of its pod, then each other pod in
turn), so each rail leaves a pod once: a pod's core link carries V into it and V on out of it, the bound's V / C
each way. On a chain hop that leaves a pod all m rails' messages of a batch cross the core together: a barrier
waits for every one to be ready (and for the batch before to be across), they start at once, and a second
barrier waits for them all to land before any goes on.

Closed form: slice_rails' (`simulator.collectives.slice_rails.slice_rails_time`), but on a crossing hop, where m
equal messages start together on routes sharing the core links, each moves at ``r = min over its route's links of
bandwidth / (rails on that link)`` (fair shares: every rail has the same bottleneck, so each gets exactly r; on
multipod:2:2:4x4 r = C / m = W_d / 2) and all land at once: ``X(q) = max(max_b D(b, q), X(q - 1)) + route
latency + |B_q| A P / r`` for the hop's batch q, every rail's next hop starting from X(q). The rails' other hops,
the trees and the gathers as slice_rails.

Against the bound (tpu-v5e multipod:2:2:4x4, 1 GB): the core link of the root's pod carries V at C, the bound;
the chain's other hops (inside a pod, at m W_d = 2 C) keep ahead of it; the time over it is the fill (the first
batch through the root slice's trees and the first DCN hop) and the drain (the last batch's hop inside the far
pod and its gather).
"""
from __future__ import annotations

import math

from simulator.collectives.algorithm import register
from simulator.collectives.groups import Group
from simulator.collectives.slice_gather import SliceGather
from simulator.collectives.slice_rails import SliceRails
from simulator.engine.network import Network


class PodRails(SliceRails):
    """Broadcast / Reduce on multipod: slice_rails with the rails' chain in pod order and the core crossed in step."""

    name = "pod_rails"
    summary = ("Broadcast, Reduce on multipod: trees in the root's slice, each chip's share along its DCN rail "
               "through the slices pod by pod (every rail across the core at once), gathered in each slice; "
               "pipelined in batches (Reduce: reversed, adding)")
    kinds = ("broadcast", "reduce")
    topologies = ("multislice",)
    nic_rings = False

    def unfit(self, kind: str, net: Network, groups: list[Group]) -> str | None:
        return _unfit(self, kind, net, groups, "slice_rails")


class PodGather(SliceGather):
    """Gather / Scatter on multipod: slice_gather, its DCN steps from another pod priced at their core share."""

    name = "pod_gather"
    summary = ("Gather, Scatter on multipod: every shard over its chip's DCN link (and the core, from another pod) "
               "to its counterpart in the root's slice, then up (down) that slice's arc-disjoint trees, in rounds")
    kinds = ("gather", "scatter")
    topologies = ("multislice",)
    nic_rings = False

    def unfit(self, kind: str, net: Network, groups: list[Group]) -> str | None:
        return _unfit(self, kind, net, groups, "slice_gather")


def _unfit(algorithm: SliceRails, kind: str, net: Network, groups: list[Group], two_levels: str) -> str | None:
    """Why ``algorithm`` (multipod only) cannot run ``kind`` on ``groups`` (None: it can)."""
    why = super(SliceRails, algorithm).unfit(kind, net, groups)
    if why is not None:
        return why
    graph = net.graph.graph
    if not graph.get("pods"):
        return f"it orders its DCN messages by pods under a core (multipod); {two_levels} serves multislice"
    if len(groups) != 1 or groups[0].n != len(net.chips):
        return "it sends to every chip of every slice (a group of the whole system)"
    if graph["shape"][0] < 2 or math.prod(graph["shape"][1:]) < 2:
        return "it needs two slices or more of two chips or more"
    return None


POD_RAILS = register(PodRails())
POD_GATHER = register(PodGather())
