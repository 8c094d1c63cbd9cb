"""The book's closed form of a collective over a multi-level GPU fat tree, its levels overlapped.

How To Scale Your Model, ch. gpus ("Cross-node collectives", the precise derivation): a ring reduction at
each level of the tree, the levels mostly overlapped, so an AllGather or ReduceScatter of V bytes takes

    T = V x max over levels i of (D_i - 1) / (D_i x W_i)

with D_i the children of a level-i switch and W_i the bandwidth each child has up to it: a GPU's NVLink
egress inside a node (D = 8, 450 GB/s), a node's egress to its leaves (D = 32 nodes per scalable unit,
8 x 50 GB/s = 400 GB/s), a unit's uplinks to the spine (D = units, 8 leaves x their uplink). On the
1,024-GPU SuperPOD that is min(514, 413, 17,100) GB/s = 413 GB/s, bounded at the leaf. AllReduce is twice
that (no SHARP). This is a bound with no latency and perfect overlap of the levels; podsim's simulated
algorithms run the levels' phases with their own dependencies, so they are slower (``superpod:4``: about
295 GB/s for a 1 GB AllGather). It can sit a little below ``topology_bound_s``: its leaf term counts
the 32 nodes of one unit, while on 128 nodes each node must take in 127/128 V through its 400 GB/s. Only
whole-fabric groups of AllGather, ReduceScatter and AllReduce.
"""
from __future__ import annotations

from typing import Any

_FACTOR = {"all_gather": 1.0, "reduce_scatter": 1.0, "all_reduce": 2.0}


def fabric_levels(graph_attrs: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The levels (name, degree D, bandwidth W per child) of a fat-tree graph's attributes; None otherwise."""
    if graph_attrs.get("fabric") != "fattree":
        return None
    bw = graph_attrs["level_bandwidth_bytes_per_s"]
    per_node, per_unit, units = graph_attrs["gpus_per_node"], graph_attrs["nodes_per_unit"], graph_attrs["units"]
    levels = [{"level": "node", "degree": per_node, "bandwidth_bytes_per_s": bw["nvlink"]},
              {"level": "leaf", "degree": min(per_unit, graph_attrs["n_nodes"]),
               "bandwidth_bytes_per_s": per_node * bw["leaf"]}]
    if units > 1:
        levels.append({"level": "spine", "degree": units, "bandwidth_bytes_per_s": per_node * bw["leaf_uplink"]})
    return [lv for lv in levels if lv["degree"] > 1]


def book_levels(kind: str, graph_attrs: dict[str, Any], group_size: int, nbytes: float) -> dict[str, Any] | None:
    """``book_levels_s`` (seconds), ``book_levels_bandwidth_bytes_per_s`` (V over it, AllGather sense) and the
    levels with each one's D W / (D - 1), for ``kind`` over the whole fabric; None where the form does not
    apply (another kind, a group smaller than the fabric, not a fat tree)."""
    levels = fabric_levels(graph_attrs)
    chips = graph_attrs.get("n_nodes", 0) * graph_attrs.get("gpus_per_node", 0)
    if levels is None or kind not in _FACTOR or group_size != chips or nbytes <= 0:
        return None
    for lv in levels:
        lv["collective_bandwidth_bytes_per_s"] = lv["degree"] * lv["bandwidth_bytes_per_s"] / (lv["degree"] - 1)
    narrowest = min(levels, key=lambda lv: lv["collective_bandwidth_bytes_per_s"])
    bandwidth = narrowest["collective_bandwidth_bytes_per_s"]
    return {"book_levels_s": _FACTOR[kind] * nbytes / bandwidth, "book_levels_bandwidth_bytes_per_s": bandwidth,
            "book_levels_bottleneck": narrowest["level"], "book_levels": levels}
