"""Large GPU fabrics: GPU nodes under a two-level leaf/spine InfiniBand fat tree (DGX SuperPOD-like).

Model (REFERENCE.md, GPUs: H100 SuperPOD): nodes of ``gpus_per_node`` GPUs on an NVLink switch
``"sw<k>"``, as in `topologies.multilevel.nodes`; ``nodes_per_unit`` nodes form a scalable unit. The
fabric is rail-optimised: GPU ``g`` of every node of unit ``u`` has its own NIC (kind ``"ib"``) to leaf
switch ``"leaf<u>.<g>"`` (one leaf per rail, so a unit has ``gpus_per_node`` leaves); every leaf links
to every one of ``spines`` spine switches, each link carrying ``nodes_per_unit * ib / spines`` each way
by default, so a leaf's uplinks add up to its downlinks: the tree is non-blocking. The REFERENCE system
-- 32 nodes per unit under 8 leaves, 4 units under 16 spine switches, 50 GB/s per GPU NIC -- is
``superpod(4)``: 1,024 GPUs, 100 GB/s per leaf-spine link, 1.6 TB/s out of each leaf.

The spine switches are one node, ``"spine"``, whose link to each leaf carries all of that leaf's
uplinks together (``spines`` x the per-spine link). Timing assumption: the fabric spreads flows over
the spines perfectly (adaptive routing; ECMP on average), so a leaf's flows share its whole uplink
fairly. The simulator routes each pair of chips along one path, so separate spine nodes would carry
every flow of a leaf over the first spine; merged, they carry what a balanced fabric carries.

Levels, as a collective sees them: inside a node, the NVLink egress per GPU; between nodes of a unit on
the same rail, one leaf (GPU -> leaf -> GPU); across rails or units, leaf -> spine -> leaf. A GPU's
NIC (``ib``) is its limit at every level above the node. The graph has ``kind == "nodes"`` (shape
``(n_nodes, gpus_per_node)``, chips with ``group`` and ``local_coord``), so everything that runs on GPU
nodes -- NIC rings, hierarchical algorithms, meshes -- runs on it; ``graph["fabric"] == "fattree"``
and ``graph["level_bandwidth_bytes_per_s"]`` say what lies between the nodes.
"""

from __future__ import annotations

import math
from typing import Any

import networkx as nx

from topologies.links import Link, add_link
from topologies.multilevel import DEFAULT_IB_BANDWIDTH_BYTES_PER_S, DEFAULT_IB_LATENCY_S
from topologies.switch import DEFAULT_NVLINK_BANDWIDTH_BYTES_PER_S, DEFAULT_NVLINK_LATENCY_S
from topologies.validate import check_bandwidth, check_count, check_size

SUPERPOD_NODES_PER_UNIT = 32
"""DGX nodes per scalable unit (REFERENCE.md: 32 nodes under 8 leaf switches)."""

SUPERPOD_GPUS_PER_NODE = 8
"""GPUs per DGX H100 node."""

SUPERPOD_SPINES_PER_UNIT = 4
"""Spine switches per scalable unit (REFERENCE.md: 4 units under 16 spine switches)."""


def fattree(
    n_nodes: int,
    gpus_per_node: int = SUPERPOD_GPUS_PER_NODE,
    *,
    nodes_per_unit: int = SUPERPOD_NODES_PER_UNIT,
    spines: int | None = None,
    nvlink_bandwidth_bytes_per_s: float = DEFAULT_NVLINK_BANDWIDTH_BYTES_PER_S,
    ib_bandwidth_bytes_per_s: float = DEFAULT_IB_BANDWIDTH_BYTES_PER_S,
    spine_bandwidth_bytes_per_s: float | None = None,
    nvlink_latency_s: float = DEFAULT_NVLINK_LATENCY_S,
    ib_latency_s: float = DEFAULT_IB_LATENCY_S,
) -> nx.DiGraph:
    """Build ``n_nodes`` GPU nodes under a rail-optimised leaf/spine fat tree (see the module docstring).

    Parameters
    ----------
    n_nodes, gpus_per_node : int
        Nodes and GPUs per node, each >= 1. Node ``k`` is in scalable unit ``k // nodes_per_unit``.
    nodes_per_unit : int
        Nodes per scalable unit: the GPUs one leaf switch serves (one per node, on its rail).
    spines : int or None
        Spine switches; None: ``SUPERPOD_SPINES_PER_UNIT`` per unit (at least 1).
    nvlink_bandwidth_bytes_per_s : float
        Per-GPU NVLink egress each way inside a node (bytes/s).
    ib_bandwidth_bytes_per_s : float
        Per-GPU NIC bandwidth each way (bytes/s): the GPU-to-leaf link.
    spine_bandwidth_bytes_per_s : float or None
        Each leaf-to-spine link, each way (bytes/s); None: ``nodes_per_unit * ib / spines``, so every
        leaf's uplinks match its downlinks (non-blocking). Less oversubscribes the spine level.
    nvlink_latency_s, ib_latency_s : float
        Latency of one traversal of an NVLink or an InfiniBand link (seconds).

    Returns
    -------
    networkx.DiGraph
        GPUs ``0..n-1`` with ``coord == (node, gpu)``, ``group`` and ``local_coord``; switches ``"sw<k>"``,
        ``"leaf<u>.<g>"`` and ``"spine"`` (the spine switches merged, see the module docstring);
        ``graph["kind"] == "nodes"``, ``graph["fabric"] == "fattree"``, ``graph["shape"] == (n_nodes,
        gpus_per_node)``, ``graph["units"]``, ``graph["spines"]`` and ``graph["level_bandwidth_bytes_per_s"]``
        (``nvlink`` per GPU, ``leaf`` per GPU NIC, ``spine`` per leaf-spine link, ``leaf_uplink`` all of
        a leaf's spine links together).

    Examples
    --------
    >>> G = fattree(4, 2, nodes_per_unit=2, spines=2)
    >>> len([v for v, r in G.nodes(data="role") if r == "chip"]), G.graph["units"], G.graph["spines"]
    (8, 2, 2)
    >>> sorted(v for v in G.succ[5] if isinstance(v, str))  # node 2 (unit 1), GPU 1: its NVLink switch, its leaf
    ['leaf1.1', 'sw2']
    >>> G.graph["level_bandwidth_bytes_per_s"]["spine"]  # 2 nodes x 50 GB/s shared by 2 spines: non-blocking
    50000000000.0
    >>> G.edges["leaf0.1", "spine"]["bandwidth_bytes_per_s"]  # both spines' links from one leaf
    100000000000.0
    """
    count = check_count(n_nodes, "node count")
    per_node = check_count(gpus_per_node, "GPUs per node")
    per_unit = check_count(nodes_per_unit, "nodes per unit")
    check_size(count * per_node, f"fattree:{count}:{per_node}")
    units = math.ceil(count / per_unit)
    n_spines = check_count(spines, "spine count") if spines is not None else max(1, SUPERPOD_SPINES_PER_UNIT * units)
    uplink = min(per_unit, count) * ib_bandwidth_bytes_per_s / n_spines
    spine_bw = check_bandwidth(uplink if spine_bandwidth_bytes_per_s is None else spine_bandwidth_bytes_per_s,
                               "spine_bandwidth_bytes_per_s")
    nvlink = Link(bandwidth_bytes_per_s=nvlink_bandwidth_bytes_per_s, latency_s=nvlink_latency_s, kind="nvlink")
    ib = Link(bandwidth_bytes_per_s=ib_bandwidth_bytes_per_s, latency_s=ib_latency_s, kind="ib")
    up = Link(bandwidth_bytes_per_s=spine_bw * n_spines, latency_s=ib_latency_s, kind="ib")
    G = nx.DiGraph(kind="nodes", fabric="fattree", shape=(count, per_node), wrap=(False, False), n_nodes=count,
                   gpus_per_node=per_node, nodes_per_unit=per_unit, units=units, spines=n_spines,
                   level_bandwidth_bytes_per_s={"nvlink": nvlink.bandwidth_bytes_per_s,
                                                "leaf": ib.bandwidth_bytes_per_s, "spine": spine_bw,
                                                "leaf_uplink": up.bandwidth_bytes_per_s})
    for k in range(count):
        _add_node(G, k, per_node, nvlink)
    G.add_nodes_from((leaf_name(u, g), {"role": "switch", "unit": u, "rail": g})
                      for u in range(units) for g in range(per_node))
    G.add_node("spine", role="switch", switches=n_spines)
    for k in range(count):  # NICs before uplinks: the first "ib" edge is a GPU's own
        for g in range(per_node):
            add_link(G, k * per_node + g, leaf_name(k // per_unit, g), ib)
    for u in range(units):
        for g in range(per_node):
            add_link(G, leaf_name(u, g), "spine", up)
    return G


def superpod(units: int, **links: Any) -> nx.DiGraph:
    """``units`` DGX H100 scalable units (REFERENCE.md): 32 nodes x 8 GPUs each, 8 leaves per unit,
    4 spines per unit (16 for the 4-unit, 1,024-GPU SuperPOD), 50 GB/s per GPU NIC, 450 GB/s NVLink.
    ``links`` are `fattree`'s link keywords (bandwidths and latencies), e.g. a chip's own NVLink egress.

    Examples
    --------
    >>> G = superpod(4)
    >>> G.graph["shape"], G.graph["spines"], G.graph["level_bandwidth_bytes_per_s"]["spine"]
    ((128, 8), 16, 100000000000.0)
    """
    n = check_count(units, "scalable unit count")
    check_size(n * SUPERPOD_NODES_PER_UNIT * SUPERPOD_GPUS_PER_NODE, f"superpod:{n}")
    return fattree(n * SUPERPOD_NODES_PER_UNIT, SUPERPOD_GPUS_PER_NODE, **links)


def leaf_name(unit: int, rail: int) -> str:
    """The leaf switch of ``rail`` (GPU index in a node) in scalable ``unit``: ``"leaf<unit>.<rail>"``."""
    return f"leaf{unit}.{rail}"


def _add_node(G: nx.DiGraph, k: int, per_node: int, nvlink: Link) -> None:
    for g in range(per_node):
        G.add_node(k * per_node + g, coord=(k, g), role="chip", group=k, local_coord=(g,))
    G.add_node(f"sw{k}", role="switch", group=k)
    for g in range(per_node):
        add_link(G, k * per_node + g, f"sw{k}", nvlink)
