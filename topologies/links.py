"""One link: its one-way bandwidth, latency and technology, and how it becomes a pair of edges.

A link is full duplex: it is stored as two directed edges, one per direction, each carrying the link's
full one-way bandwidth. Timing assumption for consumers: a hop costs ``latency_s + bytes /
bandwidth_bytes_per_s`` on the edge it crosses.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

import networkx as nx

from topologies.validate import check_bandwidth, check_kind, check_latency


@dataclass(frozen=True)
class Link:
    """Validated parameters shared by every edge of one link family.

    Parameters
    ----------
    bandwidth_bytes_per_s : float
        One-way bandwidth of each direction (bytes/s); finite and > 0.
    latency_s : float
        Latency of one traversal (seconds); finite and >= 0.
    kind : str
        Link technology: one of ``"ici"``, ``"nvlink"``, ``"pcie"``, ``"dcn"``, ``"ib"``.

    Examples
    --------
    >>> Link(bandwidth_bytes_per_s=4.5e10, latency_s=1e-6, kind="ici").attrs()
    {'bandwidth_bytes_per_s': 45000000000.0, 'latency_s': 1e-06, 'kind': 'ici'}
    """

    bandwidth_bytes_per_s: float
    latency_s: float
    kind: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "bandwidth_bytes_per_s", check_bandwidth(self.bandwidth_bytes_per_s))
        object.__setattr__(self, "latency_s", check_latency(self.latency_s))
        object.__setattr__(self, "kind", check_kind(self.kind))

    def attrs(self) -> dict[str, object]:
        """Edge attributes common to both directions of this link."""
        return {
            "bandwidth_bytes_per_s": self.bandwidth_bytes_per_s,
            "latency_s": self.latency_s,
            "kind": self.kind,
        }


def add_link(G: nx.DiGraph, u: Hashable, v: Hashable, link: Link, **extra: object) -> None:
    """Add both directions of a link between ``u`` and ``v`` (no axis attributes)."""
    G.add_edge(u, v, **link.attrs(), **extra)
    G.add_edge(v, u, **link.attrs(), **extra)


def add_axis_link(G: nx.DiGraph, u: int, v: int, link: Link, axis: int, wrap: bool) -> None:
    """Add a torus-like link: ``u -> v`` steps +1 along ``axis``, ``v -> u`` steps -1."""
    G.add_edge(u, v, **link.attrs(), axis=axis, direction=1, wrap=wrap)
    G.add_edge(v, u, **link.attrs(), axis=axis, direction=-1, wrap=wrap)
