"""Symmetries of multislice systems (TPU slices joined over DCN) for `simulator.acceleration.quotient`.

``multislice:K:AxB`` is K identical slices whose chips each reach the DCN hub by one link each way. Two kinds of
commuting permutations map it onto itself, keeping every link's bandwidth, latency and kind:

- slice rotations, chip (s, c) -> (s + 1 mod K, c): the hub stays, and every chip-hub link is carried by its chip,
  which the rotation moves freely;
- translations inside every slice along a wrapped slice axis, (s, ..., x, ...) -> (s, ..., x + 1 mod n, ...):
  the hub stays too.

`slice_candidates` lists the groups they generate, largest first, each named and sized before it is built
(`Candidate.build` makes the `simulator.acceleration.automorphisms.Automorphisms` on first use, its generators each
built and checked once, by `LinkTable`): a step takes the first its collectives fit, so the others are never
built. `slice_actions` builds them all. A step's collectives whose schedules and routes are equivariant under one
then run one transfer per orbit (data=32 x fsdp=256 on 32 v5e-256 slices: 8,192 chips, one representative).
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from simulator.acceleration.automorphisms import Automorphisms
from simulator.engine.network import Network

_LINK_KEYS = ("bandwidth_bytes_per_s", "latency_s", "kind")  #: what a symmetry keeps (`check_automorphism`'s)


class LinkTable:
    """Every link of ``graph`` with the class of its (bandwidth, latency, kind), as arrays, so that `check` tests a
    node permutation against every link at once: what `simulator.acceleration.automorphisms.check_automorphism`
    tests link by link (the same `ValueError`s)."""

    def __init__(self, graph: Any) -> None:
        self.graph = graph
        self.nodes = list(graph.nodes)
        self.index = {v: i for i, v in enumerate(self.nodes)}
        classes: dict[tuple, int] = {}
        src, dst, kinds = [], [], []
        index = self.index
        bandwidth, latency, kind = _LINK_KEYS
        for u, out in graph.adjacency():  # (the order of graph.edges)
            i = index[u]
            for v, data in out.items():
                src.append(i)
                dst.append(index[v])
                key = (data.get(bandwidth), data.get(latency), data.get(kind))
                c = classes.get(key)
                if c is None:
                    c = classes[key] = len(classes)
                kinds.append(c)
        n = len(self.nodes)
        self.src, self.dst = np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64)
        self.cls = np.array(kinds, dtype=np.int64)
        keys = self.src * n + self.dst
        order = np.argsort(keys, kind="stable")
        self._keys, self._key_cls = keys[order], self.cls[order]

    def check(self, perm: dict[Any, Any]) -> None:
        """``perm`` is a bijection of the nodes mapping every link onto a link of the same bandwidth, latency and kind
        (`ValueError` naming the first link, in the graph's order, that it does not)."""
        nodes = set(self.nodes)
        if set(perm) != nodes or set(perm.values()) != nodes:
            raise ValueError("the permutation does not map the network's nodes one to one onto themselves")
        n, index = len(self.nodes), self.index
        image = np.fromiter((index[perm[v]] for v in self.nodes), dtype=np.int64, count=n)
        keys = image[self.src] * n + image[self.dst]
        at = np.minimum(np.searchsorted(self._keys, keys), len(self._keys) - 1)
        bad = np.flatnonzero((self._keys[at] != keys) | (self._key_cls[at] != self.cls))
        if bad.size:
            u, v = self.nodes[int(self.src[bad[0]])], self.nodes[int(self.dst[bad[0]])]
            raise ValueError(f"link {u}->{v} is not mapped onto a like link ({perm[u]}->{perm[v]})")


class Candidate:
    """A symmetry group known by its ``name`` and ``order`` before it is built: `build` makes it (once) with ``make``,
    None where it is not a group of that order (a generator that is not an automorphism, not of its order, or
    generators that do not commute)."""

    __slots__ = ("name", "order", "_make", "_built")

    def __init__(self, name: str, order: int, make: Callable[[], Automorphisms]) -> None:
        self.name, self.order = name, order
        self._make: Callable[[], Automorphisms] | None = make
        self._built: Automorphisms | None = None

    def build(self) -> Automorphisms | None:
        """The group (built on first call), or None (see the class)."""
        if self._make is not None:
            make, self._make = self._make, None
            try:
                self._built = make()
            except (ValueError, KeyError):
                self._built = None
        return self._built


class _Graph:
    """What `Automorphisms` reads of a network (its graph): a candidate keeps this, not the network's channels."""

    def __init__(self, graph: Any) -> None:
        self.graph = graph


def _shift(graph: Any, axis: int) -> dict[Any, Any]:
    """Chip coordinate ``axis`` (0: the slice index) moved by one, modulo its length; switches stay."""
    shape = graph.graph["shape"]
    at = {c: v for v, c in graph.nodes(data="coord") if c is not None}
    perm = {}
    for v, d in graph.nodes(data=True):
        if d.get("role") == "chip":
            coord = list(d["coord"])
            coord[axis] = (coord[axis] + 1) % shape[axis]
            perm[v] = at[tuple(coord)]
        else:
            perm[v] = v
    return perm


def slice_candidates(net: Network) -> list[Candidate]:
    """The symmetry groups of a multislice system (see the module docstring), largest first (of equal orders, more
    generators first), not yet built; none elsewhere (not a multislice system, faults)."""
    graph = net.graph
    if graph.graph.get("kind") != "multislice" or net.faulted:
        return []
    shape, wrap = graph.graph["shape"], graph.graph["wrap"]
    makers = [("slices", shape[0], 0)] if shape[0] > 1 else []
    makers += [(f"slice axis {a - 1}", shape[a], a) for a in range(1, len(shape)) if wrap[a] and shape[a] > 1]
    subsets = [c for r in range(len(makers), 0, -1) for c in itertools.combinations(makers, r)]
    perms: dict[int, dict[Any, Any] | None] = {}  #: each generator built and checked once (the subsets share them)
    table: list[LinkTable] = []

    def generator(axis: int) -> dict[Any, Any] | None:
        if axis not in perms:
            try:
                perm: dict[Any, Any] | None = _shift(graph, axis)
                if not table:
                    table.append(LinkTable(graph))
                table[0].check(perm)  # type: ignore[arg-type]
            except (ValueError, KeyError):
                perm = None
            perms[axis] = perm
        return perms[axis]

    def maker(chosen: tuple, name: str) -> Callable[[], Automorphisms]:
        def make() -> Automorphisms:
            generators = [(generator(axis), k) for _, k, axis in chosen]
            if any(perm is None for perm, _ in generators):
                raise ValueError(f"a generator of {name!r} is not an automorphism")
            action = Automorphisms(_Graph(graph), generators, name, checked=True)  # type: ignore[arg-type]
            action.scaled = None
            return action
        return make

    out = []
    for chosen in sorted(subsets, key=lambda c: -math.prod(k for _, k, _ in c)):  # stable: more generators first
        name = "+".join(n for n, _, _ in chosen)
        out.append(Candidate(name, math.prod(k for _, k, _ in chosen), maker(chosen, name)))
    return out


def slice_actions(net: Network) -> list[Automorphisms]:
    """Every group of `slice_candidates`, built, largest first; none where a candidate is not an automorphism."""
    return [action for c in slice_candidates(net) if (action := c.build()) is not None]
