"""A switched node: every chip has one full-duplex link to a single non-blocking switch ``"sw0"``.

This is how an NVLink node (8 GPUs on NVSwitches) looks to the simulator: the switch never limits
bandwidth, so each chip's link carries its whole egress (REFERENCE.md: H100, 18 NVLink 4 links x 25e9
B/s = 4.5e11 B/s each way). A chip-to-chip transfer crosses two links (chip -> sw0 -> chip), so its
latency is ``2 * latency_s``.
"""

from __future__ import annotations

import networkx as nx

from topologies.links import Link, add_link
from topologies.validate import check_count, check_size

DEFAULT_NVLINK_BANDWIDTH_BYTES_PER_S = 4.5e11
"""Per-GPU NVLink egress each way (bytes/s): H100 / H200 (REFERENCE.md chip table)."""

DEFAULT_NVLINK_LATENCY_S = 1e-6
"""Latency of one chip-to-switch traversal (s); a chip-to-chip path costs twice this."""


def switch(
    n: int,
    *,
    bandwidth_bytes_per_s: float = DEFAULT_NVLINK_BANDWIDTH_BYTES_PER_S,
    latency_s: float = DEFAULT_NVLINK_LATENCY_S,
    kind: str = "nvlink",
) -> nx.DiGraph:
    """Build ``n`` chips around one non-blocking switch.

    Parameters
    ----------
    n : int
        Number of chips, >= 1.
    bandwidth_bytes_per_s : float
        Per-chip egress each way (bytes/s): the bandwidth of each chip's link to the switch.
    latency_s : float
        Latency of one chip-to-switch traversal (seconds).
    kind : str
        Link technology recorded on every edge.

    Returns
    -------
    networkx.DiGraph
        Chips ``0..n-1`` (``coord == (i,)``) plus switch node ``"sw0"`` (``role="switch"``); ``2 * n``
        edges; ``graph["kind"] == "switch"``, ``graph["shape"] == (n,)``, ``graph["wrap"] == (False,)``.

    Examples
    --------
    >>> G = switch(8)
    >>> G.number_of_nodes(), G.number_of_edges(), G.edges[0, "sw0"]["bandwidth_bytes_per_s"]
    (9, 16, 450000000000.0)
    """
    size = check_size(check_count(n, "switch size"), f"switch:{n}")
    link = Link(bandwidth_bytes_per_s=bandwidth_bytes_per_s, latency_s=latency_s, kind=kind)
    G = nx.DiGraph(kind="switch", shape=(size,), wrap=(False,))
    G.add_nodes_from((i, {"coord": (i,), "role": "chip"}) for i in range(size))
    G.add_node("sw0", role="switch")
    for i in range(size):
        add_link(G, i, "sw0", link)
    return G
