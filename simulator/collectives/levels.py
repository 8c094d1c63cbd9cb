"""Two-level geometry: a group split into its fast domains (TPU slices, GPU nodes) and the rails between them.

A chip of a ``multislice`` or ``nodes`` graph carries ``group`` (its slice or node) and ``local_coord``.
`two_levels` splits a collective's group into K domains of m chips each, every domain holding the same
local positions: the inner level runs inside a domain on its fast links (the slice's ICI torus axes, or
the node's NVLink switch); the outer level joins the K chips that share a local position -- a rail --
each over its own uplink (its DCN port, its InfiniBand NIC: per-rail, as NCCL runs one ring per NIC) to
the one data-centre switch. Hierarchical algorithms (`simulator.collectives.hierarchical`) build on it.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from simulator.collectives.algorithm import get_algorithm
from simulator.collectives.groups import Group, Ring
from simulator.collectives.ring import RingAlgorithm
from simulator.engine.network import Network

TWO_LEVEL_KINDS = ("nodes", "multislice")
_DOMAIN = {"nodes": "node", "multislice": "slice"}


@dataclass
class Levels:
    """K domains of the same inner grid, and where each (domain, inner position) sits in the job's group."""

    kind: str  #: topology kind (nodes, multislice)
    outer: int  #: K, domains (slices or nodes)
    sizes: tuple[int, ...]  #: inner axes (one for a node's GPUs, the slice's axes for TPUs)
    wraps: tuple[bool, ...]  #: whether each inner axis closes into a ring (always, through a node's switch)
    device: dict[tuple[int, tuple[int, ...]], Any]  #: (domain, inner position) -> chip
    position: dict[tuple[int, tuple[int, ...]], tuple[int, ...]]  #: (domain, inner position) -> group position

    @property
    def inner(self) -> int:
        """m, chips per domain."""
        return math.prod(self.sizes)

    def inner_ring(self, k: int, base: tuple[int, ...], axis: int) -> Ring:
        """The chips of domain ``k`` along inner ``axis`` through inner position ``base``."""
        devices = [self.device[(k, base[:axis] + (i,) + base[axis + 1:])] for i in range(self.sizes[axis])]
        return Ring(devices, self.wraps[axis], devices)

    def rail(self, b: tuple[int, ...]) -> Ring:
        """The K chips at inner position ``b``, one per domain, closed into a ring through the switch."""
        devices = [self.device[(k, b)] for k in range(self.outer)]
        return Ring(devices, True, devices)

    def inner_algorithm(self, axis: int) -> RingAlgorithm:
        """The ring algorithm of an inner axis: a one-way ring through a node's switch (one port per GPU),
        a bidirectional ring on a wrapped torus axis, the line on one that does not wrap."""
        name = "unidirectional" if self.kind == "nodes" else "bidirectional"
        algorithm = get_algorithm(name)
        assert isinstance(algorithm, RingAlgorithm)
        return algorithm.on_axis(self.wraps[axis])


def two_levels(net: Network, group: Group) -> Levels | str:
    """The `Levels` of ``group``, or why it has none (a string)."""
    kind = net.graph.graph.get("kind")
    if kind not in TWO_LEVEL_KINDS:
        return f"it needs a two-level topology ({', '.join(TWO_LEVEL_KINDS)}), not {kind}"
    word = _DOMAIN[kind]
    by_domain: dict[Any, dict[tuple[int, ...], tuple[Any, tuple[int, ...]]]] = defaultdict(dict)
    for pos, dev in group.members.items():
        node = net.graph.nodes[dev]
        by_domain[node["group"]][tuple(node["local_coord"])] = (dev, pos)
    domains = sorted(by_domain)
    coords = set(by_domain[domains[0]])
    if len(domains) < 2:
        return f"the group lies inside one {word}: there is no second level"
    if any(set(by_domain[d]) != coords for d in domains):
        return f"the {word}s hold chips at different local positions"
    if len(coords) < 2:
        return f"one chip per {word}: nothing to reduce inside a {word}"
    ndim = len(next(iter(coords)))
    varying = [a for a in range(ndim) if len({c[a] for c in coords}) > 1]
    values = [sorted({c[a] for c in coords}) for a in varying]
    sizes = tuple(len(v) for v in values)
    if math.prod(sizes) != len(coords):
        return f"the chips of a {word} do not form a full grid"
    wraps = _inner_wraps(net, kind, varying, values)
    device, position = {}, {}
    for k, d in enumerate(domains):
        for coord, (dev, pos) in by_domain[d].items():
            b = tuple(vals.index(coord[a]) for a, vals in zip(varying, values, strict=True))
            device[(k, b)], position[(k, b)] = dev, pos
    return Levels(kind, len(domains), sizes, wraps, device, position)


def _inner_wraps(net: Network, kind: str, varying: list[int], values: list[list[int]]) -> tuple[bool, ...]:
    """A node's GPUs ring through its switch; a slice axis wraps where the slice wraps and the group spans it."""
    if kind == "nodes":
        return tuple(True for _ in varying)
    shape, wrap = net.graph.graph["slice_shape"], net.graph.graph["wrap"][1:]
    return tuple(bool(wrap[a]) and len(v) == shape[a] for a, v in zip(varying, values, strict=True))
