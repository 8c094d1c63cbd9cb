"""Quickest paths from one source to every node at once, for graphs routed by cost (not by grid order).

`Network.routes` asks networkx for one pair's quickest path (a bidirectional search in Python). Closed
forms that price every pair of a large switched fabric (1,024 GPUs under leaves and spines) ask for
tens of thousands of pairs, and each search crosses switches with a thousand ports: seconds to
minutes. `QuickestPaths` searches from a source once, in compiled code (SciPy's Dijkstra, when SciPy is
installed), and gives the path to any destination only where it is the one quickest path by a clear
margin: no node on it has a second way in whose cost is within a relative `TIE` of its own. Any exact
search returns that path too; on a tie (or without SciPy) it answers None and the caller asks
networkx, whose tie-breaking then decides as before.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import networkx as nx
import numpy as np

TIE = 1e-9  #: paths whose costs differ by less than this fraction are ties (networkx breaks them)


@functools.cache
def _scipy() -> tuple[Any, Any] | None:
    """SciPy's ``(csr_matrix, dijkstra)``, imported on first use (a tenth of a second that a run without a
    cost-routed fabric never pays); None without SciPy -- an accelerator only: every route is then networkx's."""
    try:
        from scipy.sparse import csr_matrix
        from scipy.sparse.csgraph import dijkstra
    except ImportError:  # pragma: no cover - scipy comes with the dev tools
        return None
    return csr_matrix, dijkstra


class QuickestPaths:
    """Single-source quickest paths of ``graph`` under ``cost(u, v, edge data)`` (seconds, > 0)."""

    def __init__(self, graph: nx.DiGraph, cost: Callable[[Any, Any, dict[str, Any]], float]) -> None:
        self.graph, self.cost = graph, cost
        self._nodes: list[Any] = []
        self._index: dict[Any, int] = {}
        self._matrix: Any = None
        self._into: list[tuple[np.ndarray, np.ndarray]] = []  # node -> (its in-neighbours, their link costs)
        self._trees: dict[Any, tuple[np.ndarray, np.ndarray]] = {}  # source -> (distances, predecessors)

    def path(self, src: Any, dst: Any) -> list[Any] | None:
        """The quickest path ``src`` .. ``dst`` (None: a tie on the way, no path, or no SciPy: ask networkx)."""
        if src == dst or _scipy() is None:
            return None
        dijkstra = _scipy()[1]
        if self._matrix is None:
            self._prepare()
        if src not in self._trees:
            dist, pred = dijkstra(self._matrix, indices=self._index[src], return_predecessors=True)
            self._trees[src] = (dist, pred)
        dist, pred = self._trees[src]
        v, s = self._index[dst], self._index[src]
        if not np.isfinite(dist[v]):
            return None
        out = [v]
        while v != s:
            into, costs = self._into[v]
            if np.count_nonzero(dist[into] + costs <= dist[v] * (1 + TIE)) != 1:
                return None  # two ways in within the margin: networkx breaks the tie
            v = int(pred[v])
            out.append(v)
        return [self._nodes[i] for i in reversed(out)]

    def _prepare(self) -> None:
        self._nodes = list(self.graph)
        self._index = {node: i for i, node in enumerate(self._nodes)}
        rows, cols, costs = [], [], []
        for u, v, data in self.graph.edges(data=True):
            rows.append(self._index[u])
            cols.append(self._index[v])
            costs.append(self.cost(u, v, data))
        n = len(self._nodes)
        self._matrix = _scipy()[0]((costs, (rows, cols)), shape=(n, n))
        rows_a, cols_a, costs_a = np.array(rows, dtype=int), np.array(cols, dtype=int), np.array(costs, dtype=float)
        order = np.argsort(cols_a, kind="stable")
        bounds = np.searchsorted(cols_a[order], np.arange(n + 1))
        self._into = [(rows_a[order[bounds[i]:bounds[i + 1]]], costs_a[order[bounds[i]:bounds[i + 1]]])
                      for i in range(n)]
