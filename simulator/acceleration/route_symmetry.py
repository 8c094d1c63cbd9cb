"""Routes of a node system by symmetry: a route from any scalable unit is a unit-0 route moved over.

(A multislice system likewise: every slice moves to the next, the DCN switch stays.)

A GPU node system (``nodes:K:G``, ``fattree:K:G``, ``superpod:N``) looks the same from every unit of
nodes: rotating every unit to the next one (its chips keep their rails; each node's NVLink switch and
each unit's leaves move with it; the spine and any other switch stay) maps every link onto a like one
(bandwidth, latency, kind), which `UnitRotation.of` checks link by link before it is used. The quickest
path between two chips, where it is the one quickest path by a clear margin (`simulator.engine.routing`),
is then the rotated quickest path between their images in unit 0: `Network.routes` searches from the
256 chips of one superpod unit instead of from all 25,600 of superpod:100, and moves the answer over.
Where the unit-0 search meets a tie, the pair is routed directly as before, so every route is the one
the direct search gives.

The engine reaches it through its `simulator.engine.speedups.RouteFinder` door: importing this module registers
`FINDER` there (`speedups.route_finder` imports it by name on first need), so the engine imports nothing above it.
"""
from __future__ import annotations

from typing import Any

import networkx as nx

from simulator.engine import speedups

_LINK_KEYS = ("bandwidth_bytes_per_s", "latency_s", "kind")


class UnitRotation:
    """Rotations of a node system by whole units of ``step`` nodes (``period`` of them), node by node."""

    def __init__(self, graph: nx.DiGraph, step: int) -> None:
        self.count, self.step = graph.graph["shape"][0], step
        self.period = self.count // step
        per_unit = graph.graph.get("nodes_per_unit") or self.count
        self._unit_step = step // per_unit if step % per_unit == 0 else None
        self.units = graph.graph.get("units", 1)
        self._chip = {d["coord"]: v for v, d in graph.nodes(data=True) if d.get("role") == "chip"}
        self._group = {d["group"]: v for v, d in graph.nodes(data=True) if d.get("role") == "switch" and "group" in d}
        self._leaf = {(d["unit"], d["rail"]): v for v, d in graph.nodes(data=True) if "unit" in d and "rail" in d}
        self._data = dict(graph.nodes(data=True))

    @classmethod
    def of(cls, graph: nx.DiGraph) -> UnitRotation | None:
        """The rotation of ``graph``'s units, checked to map every link onto a like one; None where ``graph``
        is not a node system of two or more units, or the rotation is not an automorphism."""
        shape, kind = graph.graph.get("shape", ()), graph.graph.get("kind")
        if not ((kind == "nodes" and len(shape) == 2) or (kind == "multislice" and len(shape) >= 2)) \
                or graph.graph.get("faults"):
            return None
        step = graph.graph.get("nodes_per_unit", 1) if graph.graph.get("fabric") == "fattree" else 1
        if not step or shape[0] % step or shape[0] // step < 2:
            return None
        rotation = cls(graph, step)
        try:
            images = {v: rotation.move(v, 1) for v in graph.nodes}
        except (KeyError, TypeError):
            return None
        if len(set(images.values())) != len(images):
            return None
        adj = graph.adj
        for u, links in graph.adjacency():  # every link u -> v onto a like link images[u] -> images[v]
            onto = adj[images[u]]
            for v, data in links.items():
                image = onto.get(images[v])
                if image is None or [*map(image.get, _LINK_KEYS)] != [*map(data.get, _LINK_KEYS)]:
                    return None
        return rotation

    def offset(self, chip: Any) -> int:
        """How many units on from unit 0 ``chip``'s node lies."""
        return self._data[chip]["coord"][0] // self.step

    def move(self, v: Any, units: int) -> Any:
        """Node ``v`` moved ``units`` units on (negative: back)."""
        d = self._data[v]
        if d.get("role") == "chip":
            k, *rest = d["coord"]
            moved = ((k + units * self.step) % self.count, *rest)  # a name: mypy reads x[(a, *b)] as 3.11 syntax
            return self._chip[moved]
        if d.get("role") == "switch" and "group" in d:
            return self._group[(d["group"] + units * self.step) % self.count]
        if "unit" in d and "rail" in d:
            if self._unit_step is None:
                raise KeyError(v)  # a rotation that splits a unit: no symmetry of its leaves
            return self._leaf[((d["unit"] + units * self._unit_step) % self.units, d["rail"])]
        if d.get("role") == "host":
            raise KeyError(v)  # hosts hang off particular nodes: not moved here
        return v


class _Finder:
    """The `simulator.engine.speedups.RouteFinder` this layer gives the engine: `UnitRotation.of`."""

    def symmetry(self, graph: nx.DiGraph) -> UnitRotation | None:
        """The rotation of ``graph``'s units (`UnitRotation.of`), or None."""
        return UnitRotation.of(graph)


FINDER = _Finder()
speedups.register(FINDER)
