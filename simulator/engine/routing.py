"""Quickest paths from one source to every node at once, for graphs routed by cost (not by grid order).

`Network.routes` asks networkx for one pair's quickest path (a bidirectional search in Python). Closed
forms that price every pair of a large switched fabric (1,024 GPUs under leaves and spines) ask for
tens of thousands of pairs, and each search crosses switches with a thousand ports: seconds to
minutes. `QuickestPaths` searches from a source once, in compiled code (SciPy's Dijkstra, when SciPy is
installed), and gives the path to any destination only where it is the one quickest path by a clear
margin: no node on it has a second way in whose cost is within a relative `TIE` of its own. Any exact
search returns that path too; on a tie (or without SciPy) it answers None and the caller asks
networkx, whose tie-breaking then decides as before.

Memory and time grow with what is asked, not with sources x nodes. A route first searches near its
source, in Python, stopping once everything within its destination's cost (and the tie margin) is
settled: a ring neighbour behind one NVLink switch or one leaf settles a few dozen nodes, where a
whole-graph search crosses a spine that reaches every chip. Past `LOCAL` links relaxed it hands over
to the compiled whole-graph search, of which only the latest `TREE_BYTES` worth are kept (keeping one per source
held 25,600 x 29,601 distances on superpod:100: 9 GB, and the run died in std::bad_alloc). Both are
exact: a node left unsettled costs more than the destination by the tie margin, so it can be no second
way in. A process's first whole-graph searches (`PYTHON_TREE_LINKS` links in all) run in Python, with the same
distances: a run that needs one or two (a multislice's first route across the DCN) does not pay SciPy's import.
"""
from __future__ import annotations

import functools
import heapq
import importlib.util
import sys
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import networkx as nx
import numpy as np

TIE = 1e-9  #: paths whose costs differ by less than this fraction are ties (networkx breaks them)
LOCAL = 1024  #: links a search near its source relaxes before it hands over to a whole-graph search
TREE_BYTES = 128 * 2**20  #: memory of the whole-graph searches kept (the latest; 12 bytes a node each)
#: links a process's whole-graph searches relax in Python before SciPy's compiled search takes over: about what
#: importing SciPy's csgraph costs (a fifth of a second; one search of 8,192 chips' links takes a fiftieth)
PYTHON_TREE_LINKS = 250_000
_python_links = [0]  #: links relaxed so far by whole-graph searches in Python (this process)


def _scipy_loaded() -> bool:
    """Whether this process imported SciPy's csgraph already (then its compiled search costs nothing to start)."""
    return "scipy.sparse.csgraph" in sys.modules


@functools.cache
def _has_scipy() -> bool:
    """Whether SciPy is installed (without importing it)."""
    return importlib.util.find_spec("scipy") is not None


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
        self._matrix: Any = None  #: SciPy's sparse matrix of the link costs (built on the first compiled search)
        self._rows: list[int] = []  #: the links as (source, destination, cost) index lists
        self._cols: list[int] = []
        self._costs: list[float] = []
        self._into_bounds: list[int] = []  #: node -> where its in-links start in the two arrays below (`_into`)
        self._into_rows: np.ndarray = np.zeros(0, dtype=int)  #: the in-links' sources, by destination
        self._into_costs: np.ndarray = np.zeros(0)  #: and their costs
        self._out: list[list[tuple[float, int]]] = []  # node -> (link cost, next node) of its links out
        #: source -> (distances, predecessors) of its whole-graph search, the latest `TREE_BYTES` of them
        self._trees: OrderedDict[Any, tuple[np.ndarray, np.ndarray]] = OrderedDict()

    def path(self, src: Any, dst: Any) -> list[Any] | None:
        """The quickest path ``src`` .. ``dst`` (None: a tie on the way, no path, or no SciPy: ask networkx)."""
        if src == dst or not _has_scipy():
            return None
        if not self._index:
            self._prepare()
        v, s = self._index[dst], self._index[src]
        near = None if src in self._trees else self._near(s, v)
        if near is not None:
            settled, before = near
            dist = lambda nodes: np.array([settled.get(int(u), np.inf) for u in nodes])  # noqa: E731
            pred = before.__getitem__
        else:
            tree, before_a = self._tree(src)
            dist, pred = tree.__getitem__, before_a.__getitem__
        if not np.isfinite(dist([v])[0]):
            return None
        out = [v]
        while v != s:
            into, costs = self._into(v)
            if np.count_nonzero(dist(into) + costs <= dist([v])[0] * (1 + TIE)) != 1:
                return None  # two ways in within the margin: networkx breaks the tie
            v = int(pred(v))
            out.append(v)
        return [self._nodes[i] for i in reversed(out)]

    def _near(self, s: int, v: int) -> tuple[dict[int, float], dict[int, int]] | None:
        """(settled distances, predecessors) of a search from ``s`` that settles every node within ``v``'s cost
        and the tie margin; None where that takes more than `LOCAL` links (a switch with a link to every chip:
        the compiled search is quicker)."""
        settled: dict[int, float] = {}
        before: dict[int, int] = {}
        best = {s: 0.0}
        heap = [(0.0, s)]
        bound, relaxed = np.inf, 0
        while heap:
            d, u = heapq.heappop(heap)
            if u in settled:
                continue
            if d > bound:
                return settled, before
            settled[u] = d
            if u == v:
                bound = d * (1 + 2 * TIE)
            relaxed += len(self._out[u])
            if relaxed > LOCAL:
                return None
            for cost, w in self._out[u]:
                nd = d + cost
                if nd < best.get(w, np.inf):
                    best[w] = nd
                    before[w] = u
                    heapq.heappush(heap, (nd, w))
        return (settled, before) if v in settled else None

    def _tree(self, src: Any) -> tuple[np.ndarray, np.ndarray]:
        """The whole-graph search from ``src`` (kept among the latest, `TREE_BYTES` in all)."""
        tree = self._trees.get(src)
        if tree is None:
            links = len(self._rows)
            if not _scipy_loaded() and _python_links[0] + links <= PYTHON_TREE_LINKS:
                _python_links[0] += links
                tree = self._python_tree(self._index[src])
            else:
                compiled = _scipy()
                assert compiled is not None  # `path` asks only with SciPy
                if self._matrix is None:
                    n = len(self._nodes)
                    self._matrix = compiled[0]((self._costs, (self._rows, self._cols)), shape=(n, n))
                tree = compiled[1](self._matrix, indices=self._index[src], return_predecessors=True)
            self._trees[src] = tree
            while len(self._trees) > max(8, TREE_BYTES // (12 * len(self._nodes))):
                self._trees.popitem(last=False)
        self._trees.move_to_end(src)
        return tree

    def _python_tree(self, s: int) -> tuple[np.ndarray, np.ndarray]:
        """The whole-graph search from ``s`` in Python, as SciPy's ``dijkstra`` gives it: (distances, inf where
        unreached; predecessors, -9999 for the source and the unreached). Each distance is the same sum of the
        same link costs in the same order as the compiled search's."""
        n = len(self._nodes)
        dist = np.full(n, np.inf)
        pred = np.full(n, -9999, dtype=np.int32)
        settled = [False] * n
        best = {s: 0.0}
        before: dict[int, int] = {}
        heap = [(0.0, s)]
        out = self._out
        while heap:
            d, u = heapq.heappop(heap)
            if settled[u]:
                continue
            settled[u] = True
            dist[u] = d
            for cost, w in out[u]:
                nd = d + cost
                if nd < best.get(w, np.inf):
                    best[w] = nd
                    before[w] = u
                    heapq.heappush(heap, (nd, w))
        if before:
            pred[np.fromiter(before, dtype=np.int64)] = np.fromiter(before.values(), dtype=np.int32)
        return dist, pred

    def _prepare(self) -> None:
        self._nodes = list(self.graph)
        index = self._index = {node: i for i, node in enumerate(self._nodes)}
        n, cost = len(self._nodes), self.cost
        rows: list[int] = []
        cols: list[int] = []
        costs: list[float] = []
        self._out = [[] for _ in range(n)]
        for u, links in self.graph.adjacency():  # (the order of graph.edges)
            i, out = index[u], self._out[index[u]]
            for v, data in links.items():
                j, c = index[v], cost(u, v, data)
                rows.append(i)
                cols.append(j)
                costs.append(c)
                out.append((c, j))
        self._rows, self._cols, self._costs = rows, cols, costs  # (SciPy's matrix of them: built on first use)
        cols_a = np.array(cols, dtype=int)
        order = np.argsort(cols_a, kind="stable")
        self._into_bounds = np.searchsorted(cols_a[order], np.arange(n + 1)).tolist()
        self._into_rows = np.array(rows, dtype=int)[order]
        self._into_costs = np.array(costs, dtype=float)[order]

    def _into(self, v: int) -> tuple[np.ndarray, np.ndarray]:
        """Node ``v``'s in-neighbours and their link costs (read only for the nodes on a route)."""
        a, b = self._into_bounds[v], self._into_bounds[v + 1]
        return self._into_rows[a:b], self._into_costs[a:b]
