"""Host CPUs: each host owns a run of consecutive chips and reaches each over its own PCIe link.

Host ``k`` owns chips ``k * chips_per_host .. (k + 1) * chips_per_host - 1`` (in chip-id order); when the
chip count is not a multiple of ``chips_per_host`` the last host owns fewer. Each host-chip link is a
full-duplex pair of ``"pcie"`` edges carrying the per-chip PCIe bandwidth (REFERENCE.md: about 1.6e10
B/s per TPU, 3.2e10 on v6e); the host's own memory is not modelled as a bottleneck.
"""

from __future__ import annotations

import copy

import networkx as nx

from topologies.errors import TopologyError
from topologies.links import Link, add_link
from topologies.query import chips
from topologies.validate import check_count

DEFAULT_PCIE_BANDWIDTH_BYTES_PER_S = 1.6e10
"""Per-chip PCIe bandwidth each way (bytes/s) (REFERENCE.md)."""

DEFAULT_PCIE_LATENCY_S = 1e-6
"""Latency of one host-to-chip PCIe traversal (s); an assumption."""


def with_hosts(
    G: nx.DiGraph,
    chips_per_host: int,
    *,
    pcie_bandwidth_bytes_per_s: float = DEFAULT_PCIE_BANDWIDTH_BYTES_PER_S,
    latency_s: float = DEFAULT_PCIE_LATENCY_S,
    memory_bytes: float | None = None,
    memory_bandwidth_bytes_per_s: float | None = None,
) -> nx.DiGraph:
    """Return a copy of ``G`` with host nodes ``"host0"``, ``"host1"``, ... linked to their chips.

    Parameters
    ----------
    G : networkx.DiGraph
        A topology from this package; it is not modified.
    chips_per_host : int
        Chips per host, >= 1.
    pcie_bandwidth_bytes_per_s : float
        PCIe bandwidth each way of each host-chip link (bytes/s).
    latency_s : float
        Latency of one host-chip traversal (seconds).
    memory_bytes, memory_bandwidth_bytes_per_s : float, optional
        Each host's DRAM capacity (bytes) and bandwidth (bytes/s), set on the host nodes when given
        (the simulator assumes its defaults otherwise, `simulator.engine.host`).

    Returns
    -------
    networkx.DiGraph
        The copy, with ``role="host"`` nodes carrying ``chips`` (the tuple of chips each host owns) and
        ``graph["chips_per_host"]`` set.

    Examples
    --------
    >>> from topologies import torus
    >>> H = with_hosts(torus((4, 4)), 4)
    >>> H.nodes["host1"]["chips"], H.edges["host1", 5]["kind"]
    ((4, 5, 6, 7), 'pcie')
    """
    per_host = check_count(chips_per_host, "chips per host")
    pcie = Link(bandwidth_bytes_per_s=pcie_bandwidth_bytes_per_s, latency_s=latency_s, kind="pcie")
    members = chips(G)
    groups = [tuple(members[i : i + per_host]) for i in range(0, len(members), per_host)]
    _check_free(G, len(groups))
    H = copy.deepcopy(G)  # (G.copy() reorders each node's predecessors, which decides ties between routes)
    H.graph["chips_per_host"] = per_host
    for k, owned in enumerate(groups):
        H.add_node(f"host{k}", role="host", chips=owned)
        memory = {"memory_bytes": memory_bytes, "memory_bandwidth_bytes_per_s": memory_bandwidth_bytes_per_s}
        for key, value in memory.items():
            if value is not None:
                H.nodes[f"host{k}"][key] = _positive(value, key)
        for chip in owned:
            add_link(H, f"host{k}", chip, pcie)
    return H


def _positive(value: float, name: str) -> float:
    """``value`` if it is a finite number > 0, else a `TopologyError` naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise TopologyError(f"{name}={value!r} must be a finite number > 0")
    return float(value)


def _check_free(G: nx.DiGraph, n_hosts: int) -> None:
    taken = [f"host{k}" for k in range(n_hosts) if f"host{k}" in G]
    if taken:
        raise TopologyError(f"graph already has host node {taken[0]!r}; add hosts to a graph without hosts")
