"""Two-level geometry: a group split into its fast domains (TPU slices, GPU nodes) and the rails between them.

A chip of a ``multislice`` or ``nodes`` graph carries ``group`` (its slice or node) and ``local_coord``.
`two_levels` splits a collective's group into K domains of m chips each, every domain holding the same
local positions: the inner level runs inside a domain on its fast links (the slice's ICI torus axes, or
the node's NVLink switch); the outer level joins the K chips that share a local position -- a rail --
each over its own uplink (its DCN port, its InfiniBand NIC: per-rail, as NCCL runs one ring per NIC) to
the one data-centre switch. Hierarchical algorithms (`simulator.collectives.hierarchical`) build on it.

`three_levels` splits the domains once more, where the topology has a tier above them: the GPU nodes of
one scalable unit of a fat tree (``fattree:K:G``, ``superpod:N``: one leaf per rail inside a unit, the
spine between units) or the slices of one pod (``multipod:P:K:AxB``: a DCN switch per pod, a slower
core between pods). Its `Levels` carries ``tiers`` (Q domains per unit or pod, P units or pods): outer
index k = q + Q p, and a rail of one tier is the chips at one inner position that differ in that tier's
digit only.
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
    tiers: tuple[int, ...] = ()  #: outer tiers, fastest first, their product ``outer`` (empty: one tier)

    def __post_init__(self) -> None:
        if not self.tiers:
            self.tiers = (self.outer,)

    def digits(self, k: int) -> tuple[int, ...]:
        """Domain ``k`` as one digit per tier (the fastest tier's digit first)."""
        out = []
        for size in self.tiers:
            k, d = divmod(k, size)
            out.append(d)
        return tuple(out)

    def index(self, digits: tuple[int, ...]) -> int:
        """The domain whose tier digits are ``digits``."""
        k = 0
        for d, size in zip(reversed(digits), reversed(self.tiers), strict=True):
            k = k * size + d
        return k

    def tier_ring(self, tier: int, k: int, b: tuple[int, ...]) -> Ring:
        """The chips at inner position ``b`` of the domains that differ from ``k`` in ``tier``'s digit only,
        in that digit's order, closed into a ring through the switches above them."""
        base = list(self.digits(k))
        devices = []
        for i in range(self.tiers[tier]):
            base[tier] = i
            devices.append(self.device[(self.index(tuple(base)), b)])
        return Ring(devices, True, devices)

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


def three_levels(net: Network, group: Group) -> Levels | str:
    """`two_levels` with the domains split into P units (fat tree) or pods (multipod) of Q each (see the
    module docstring), or why the group has no third level (a string)."""
    levels = two_levels(net, group)
    if isinstance(levels, str):
        return levels
    graph = net.graph.graph
    if graph.get("fabric") == "fattree":
        word, per = "scalable unit", graph["nodes_per_unit"]
        tier = lambda node: node // per  # noqa: E731  (nodes are numbered unit by unit)
    elif graph.get("pods"):
        word, per = "pod", graph["slices_per_pod"]
        tier = lambda s: s // per  # noqa: E731
    else:
        return f"it needs a third level (fattree:K:G, superpod:N or multipod:P:K:AxB), not {graph.get('kind')}"
    domains = sorted({net.graph.nodes[dev]["group"] for dev in group.members.values()})
    by_tier: dict[int, list[int]] = defaultdict(list)
    for d in domains:
        by_tier[tier(d)].append(d)
    sizes = {len(v) for v in by_tier.values()}
    if len(by_tier) < 2:
        return f"the group lies inside one {word}: there is no third level"
    if len(sizes) != 1 or min(sizes) < 2:
        return f"the {word}s hold {', '.join(str(len(v)) for v in by_tier.values())} domains of the group: " \
               "a third level needs two or more in each, the same in each"
    levels.tiers = (sizes.pop(), len(by_tier))  # domains are sorted tier by tier: k = q + Q p
    return levels


def _inner_wraps(net: Network, kind: str, varying: list[int], values: list[list[int]]) -> tuple[bool, ...]:
    """A node's GPUs ring through its switch; a slice axis wraps where the slice wraps and the group spans it."""
    if kind == "nodes":
        return tuple(True for _ in varying)
    shape, wrap = net.graph.graph["slice_shape"], net.graph.graph["wrap"][1:]
    return tuple(bool(wrap[a]) and len(v) == shape[a] for a, v in zip(varying, values, strict=True))
