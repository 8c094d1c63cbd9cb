"""A plan's mesh on a topology, and the closed-form cost of each collective along each of its axes.

`build_system` lays the plan's axes on the topology (the chip's slice of the mesh's shape when none
is given), innermost-fastest: in order when the physical axes allow it, otherwise by the first
permutation of the physical axes that fits (the identity first, so the outermost axis keeps the
slowest -- DCN -- links). `AxisLink` describes one logical axis by the physical axes under it.

Closed forms (first principles, as `simulator.analytic`): a logical axis over k physical axes splits
the array into k parts, each gathered over the axes in a different order at once, and takes the
slowest part; each stage is a ring (both ways where the axis wraps, one way through a switch) or a
line. AllReduce is twice AllGather; AllToAll runs phase by phase over the physical axes. A switch
(NVLink) axis runs a ring through the switch at the GPU's egress; an axis that crosses GPU nodes or
TPU slices runs at the per-chip InfiniBand / DCN bandwidth.

Where those forms would not follow the simulation -- a logical axis on a factor of a physical axis (a strided
factor's groups share links), an AllReduce along a line of more than two chips (``line_pipelined``,
``grid_pipelined``) -- `Tuned` prices the collective as the simulated step runs it: the least of every applicable
algorithm's own closed form over the mesh's groups, as `simulator.collectives.tuner` chooses.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import networkx as nx
import simpy

from simulator import analytic
from simulator.collectives import payload
from simulator.collectives.algorithm import Algorithm, Job, applicable, get_algorithm
from simulator.collectives.groups import collective_groups
from simulator.collectives.layout import RING_KINDS
from simulator.collectives.ring import RingAlgorithm
from simulator.engine.network import Network, check_graph
from simulator.engine.system import System, resolve_topology
from simulator.errors import PodsimError, one_line
from simulator.hardware.specs import ChipSpec
from simulator.workloads.mesh import Mesh, MeshSpec, Piece, default_topology_for, is_grid, place_in_order
from simulator.workloads.plans.layout import MeshPlan
from topologies import TopologyError

TUNED_KINDS = ("torus", "mesh", "ring", "line")  #: graph kinds whose collectives `Tuned` prices (grids of ICI links)


def build_system(chip: ChipSpec, plan: MeshPlan, topology: str | None = None, trace: bool = True,
                 calibrated: bool = False) -> tuple[System, Mesh | None]:
    """The system a plan runs on and its mesh (None on one chip without a topology)."""
    if plan.chips == 1 and topology is None:
        return System(chip, trace=trace, calibrated=calibrated), None

    def make(spec_text: str) -> tuple[System, Mesh]:
        system = System(chip, topology=spec_text, trace=trace, calibrated=calibrated)
        return system, place(plan.mesh_spec(), system.graph)
    return _first_fit(chip, plan, topology, make)


def build_layout(chip: ChipSpec, plan: MeshPlan, topology: str | None = None) -> tuple[nx.DiGraph | None, Mesh | None]:
    """`build_system`'s topology graph and mesh without the system (its chips, channels and routing): what the
    closed forms read (`train.train_plan` without a simulation). The same topologies are tried in the same order
    and refused for the same reasons: the graph is checked as the system's network checks it
    (`simulator.engine.network.check_graph`). None, None on one chip without a topology. Under a fault plan, whose
    system prepares its own graph, use `build_system`."""
    if plan.chips == 1 and topology is None:
        return None, None

    def make(spec_text: str) -> tuple[nx.DiGraph, Mesh]:
        graph = resolve_topology(spec_text, chip)
        check_graph(graph)
        return graph, place(plan.mesh_spec(), graph)
    return _first_fit(chip, plan, topology, make)


def _first_fit(chip: ChipSpec, plan: MeshPlan, topology: str | None, make: Callable[[str], Any]) -> Any:
    """``make(spec)`` of ``topology``, else of the first default topology it does not refuse."""
    last: Exception = PodsimError("no topology to try")  # (there is always one: the mesh's own shape)
    for spec_text in [topology] if topology else _default_topologies(plan.mesh_spec(), chip):
        try:
            return make(spec_text)
        except (PodsimError, TopologyError) as err:
            if topology:
                raise
            last = err
    raise PodsimError(f"mesh {plan.text} fits no slice of {plan.chips} {chip.name} chips ({one_line(last)}); give "
                      "--topology, or fewer mesh axes than the torus has dimensions")


def _default_topologies(spec: MeshSpec, chip: ChipSpec) -> list[str]:
    """The chip's slice of the mesh's own shape, then every real slice shape of that many chips."""
    from topologies.shapes import orientations, slice_shapes

    out = [default_topology_for(spec, chip)]
    if chip.wraparound != "switch":
        out += ["slice:" + "x".join(map(str, o)) for s in slice_shapes(spec.n_devices, chip.wraparound)
                for o in orientations(s)]
    return list(dict.fromkeys(out))


def place(spec: MeshSpec, graph: nx.DiGraph, split: bool = True) -> Mesh:
    """A `Mesh` of ``spec`` on ``graph``: whole physical axes in order, else in the first permutation that fits,
    else (``split``) factors of the physical axes in order (`simulator.workloads.mesh.place_split`). A training
    plan splits on a given ``--topology`` as on its default slice, so `podsim plan` (`price.Pricer`) and
    `podsim model` lay a mesh the same way; a 2-D serving grid keeps whole axes of a given topology."""
    shape = tuple(graph.graph.get("shape", ())) if is_grid(graph) else ()
    chips = sum(1 for _, role in graph.nodes(data="role") if role == "chip")
    if any(p is not None for p in spec.placement) or not shape or spec.n_devices != chips or \
            place_in_order(spec.sizes, shape) is not None:
        return Mesh(spec, graph)
    for order in itertools.permutations(range(len(shape))):
        placement = _consume(spec.sizes, [shape[a] for a in order], order)
        if placement is not None:
            return Mesh(MeshSpec(spec.names, spec.sizes, placement), graph)
    try:
        if split:
            return Mesh(spec, graph)  # factors of the physical axes
    except PodsimError:
        pass
    raise PodsimError(f"mesh {','.join(f'{n}={s}' for n, s in zip(spec.names, spec.sizes, strict=True))} cannot be "
                      f"laid on the physical axes {'x'.join(map(str, shape))}: each axis must take whole physical axes "
                      "whose lengths multiply to its size") from None


def _consume(sizes: tuple[int, ...], lengths: list[int], order: tuple[int, ...]) -> tuple[tuple[int, ...], ...] | None:
    """`place_in_order` on physical axes taken in ``order``, every one of them used; None if it does not fit."""
    placement = place_in_order(sizes, tuple(lengths))
    if placement is None or sum(map(len, placement)) != len(lengths):
        return None
    return tuple(tuple(order[j] for j in taken) for taken in placement)


@dataclass(frozen=True)
class Stage:
    """One physical dimension under a logical axis: its length, wraparound, one-way bandwidth, hop latency,
    and whether a ring on it can send both ways at once."""

    length: int
    wrap: bool
    bandwidth_bytes_per_s: float
    latency_s: float
    bidirectional: bool = True


@dataclass(frozen=True)
class AxisLink:
    """A logical axis as the physical dimensions under it (``stages``); ``n`` devices in all."""

    name: str
    n: int
    stages: tuple[Stage, ...]
    hierarchical: bool = False  #: levels of unequal speed (GPU nodes): one pass, slowest level first

    def all_gather_s(self, nbytes: float) -> float:
        """AllGather of a ``nbytes`` array (V, gathered) over the axis."""
        if self.n <= 1 or nbytes <= 0:
            return 0.0
        if self.hierarchical:  # each GPU moves only its small shard over the slow level, then gathers fast
            return self._gather(nbytes, tuple(sorted(self.stages, key=lambda s: s.bandwidth_bytes_per_s)))
        k = len(self.stages)
        return max(self._gather(nbytes / k, self.stages[r:] + self.stages[:r]) for r in range(k))

    def _gather(self, nbytes: float, stages: tuple[Stage, ...]) -> float:
        total, held = 0.0, 1
        for s in stages:
            held *= s.length
            total += analytic.all_gather_time(nbytes * held / self.n, s.length, s.bandwidth_bytes_per_s, s.latency_s,
                                              s.wrap, s.bidirectional)
        return total

    def reduce_scatter_s(self, nbytes: float) -> float:
        return self.all_gather_s(nbytes)

    def all_reduce_s(self, nbytes: float) -> float:
        return 2 * self.all_gather_s(nbytes)

    def all_to_all_s(self, nbytes: float) -> float:
        """AllToAll of a ``nbytes`` array spread over the axis, one physical dimension after another."""
        if self.n <= 1 or nbytes <= 0:
            return 0.0
        return sum(analytic.all_to_all_time(nbytes * s.length / self.n, s.length, s.bandwidth_bytes_per_s,
                                            s.latency_s, s.wrap, s.bidirectional) for s in self.stages)

    def time_s(self, kind: str, nbytes: float) -> float:
        return {"all_gather": self.all_gather_s, "reduce_scatter": self.reduce_scatter_s,
                "all_reduce": self.all_reduce_s, "all_to_all": self.all_to_all_s}[kind](nbytes)

    @property
    def bandwidth_bytes_per_s(self) -> float:
        """W of the axis in the book's sense: what a chip moves per second along it (both ways, all dims; on
        GPU nodes what a large AllGather achieves, (n - 1)/n V over its time)."""
        if self.hierarchical:
            big = 1e15  # bytes: latency negligible
            return (self.n - 1) / self.n * big / self.all_gather_s(big)
        return sum(s.bandwidth_bytes_per_s * (2 if s.bidirectional and s.wrap else 1) for s in self.stages)


class AxisLinks(dict):
    """`AxisLink` of every mesh axis (name -> link), and, on a torus or mesh, the collectives priced as the
    simulation runs them (`Tuned`): what `estimate.comm_s` reads."""

    def __init__(self, links: dict[str, AxisLink], tuned: Tuned | None = None) -> None:
        super().__init__(links)
        self.tuned = tuned
        self.memo: dict[tuple[str, tuple[str, ...], float], float] = {}  #: (kind, axes, bytes) -> seconds
        self._flows: dict[tuple[str, ...], tuple[int, int] | None] = {}

    def flows(self, axes: tuple[str, ...]) -> tuple[int, int] | None:
        """(its flows, fsdp's flows) on a link that a collective over ``axes`` shares with fsdp's collectives, where
        a split physical axis holds factors of both (None: no link shared). A factor of stride s crosses each link
        of its physical axis with s flows a direction (the s interleaved groups' s-hop steps), a block of stride 1
        with one; the channels share a link's bandwidth equally among its flows."""
        if axes not in self._flows:
            self._flows[axes] = None
            mesh = self.tuned.mesh if self.tuned is not None else None
            if mesh is not None and "fsdp" in mesh.names and "fsdp" not in axes and mesh.is_split():
                fsdp = {a: stride for a, n, stride in mesh.pieces[mesh.index("fsdp")] if n > 1}
                for name in axes:
                    if name in mesh.names and name != "fsdp":
                        for a, n, stride in mesh.pieces[mesh.index(name)]:
                            if n > 1 and a in fsdp:
                                self._flows[axes] = (stride, fsdp[a])
        return self._flows[axes]


class Tuned:
    """A mesh's collectives priced by the tuner (`simulator.collectives.tuner.tune`): every applicable algorithm's
    own closed form over the mesh's groups of the axes, the fastest taken -- the algorithm and the figure of the
    simulated step's ``start_collective`` (a strided factor's groups priced over every group's routes, a grid
    without wraparound by ``grid_pipelined`` where that is faster). ``cache`` (shared by the meshes of one search)
    keeps seconds by (topology, the axes' pieces, kind, bytes) and each algorithm's phase profiles by geometry, so
    one geometry's rings are routed once whatever the bytes."""

    def __init__(self, net: Network, mesh: Mesh, cache: dict[Any, Any] | None = None,
                 everywhere: bool = False) -> None:
        self.net, self.mesh = net, mesh
        self.cache = {} if cache is None else cache
        self.where = (net.graph.graph.get("spec"), net.shape, net.wrap, mesh.origin)
        self.everywhere = everywhere  #: False: only where `_needs_tuner` (else None: `AxisLink` prices it)

    def joint(self, axes: tuple[str, ...]) -> bool:
        """Whether one collective runs over ``axes`` at once (`collective_groups`; else the simulated step runs it
        axis by axis: `simulator.workloads.plans.ops.in_turn`)."""
        mesh = self.mesh
        axes = tuple(a for a in axes if a in mesh.names and mesh.size(a) > 1)
        if len(axes) < 2:
            return True
        return self._groups(axes, (self.where, tuple(mesh.pieces[mesh.index(a)] for a in axes))) is not None

    def _groups(self, axes: tuple[str, ...], geometry: Any) -> list[Any] | None:
        """The mesh's groups over ``axes`` (cached by ``geometry``); None where they cannot form."""
        if (geometry, "groups") not in self.cache:
            try:
                self.cache[(geometry, "groups")] = collective_groups(self.net, list(axes), self.mesh)
            except PodsimError:
                self.cache[(geometry, "groups")] = None
        return self.cache[(geometry, "groups")]

    def time_s(self, kind: str, axes: tuple[str, ...], nbytes: float) -> float | None:
        """Seconds of collective ``kind`` of ``nbytes`` (V, as `simulator.collectives.run_collective`) over ``axes``;
        None where the axes form no groups (factors of one physical axis around another axis's)."""
        mesh = self.mesh
        axes = tuple(a for a in axes if a in mesh.names and mesh.size(a) > 1)
        if not axes or nbytes <= 0:
            return 0.0
        pieces = tuple(mesh.pieces[mesh.index(a)] for a in axes)
        if not self.everywhere and not _needs_tuner(mesh, kind, pieces):
            return None
        geometry = (self.where, pieces)
        key = (geometry, kind, nbytes)
        if key not in self.cache:
            groups = self._groups(axes, geometry)
            if groups is None:
                return None
            net = self.net
            root = tuple(0 for _ in groups[0].sizes)

            def make_job(algorithm: Algorithm) -> Job:  # `simulator.collectives.api` plans a timing-only job so
                by_layout = isinstance(algorithm, RingAlgorithm) and kind in RING_KINDS
                parts = 1 if by_layout else algorithm.parts(kind, groups[0], "parallel")
                chunks = algorithm.default_chunks(kind, net, groups, nbytes)
                keys = payload.n_keys(kind, groups[0].n, parts, chunks)
                job = Job(kind, net, groups, [groups], parts, chunks, root, math.ceil(nbytes / keys), nbytes=nbytes,
                          cache=self.cache.setdefault((geometry, algorithm.name), {}), auto_chunks=True)
                algorithm.prepare(job)
                return job

            self.cache[key] = _fastest(kind, net, groups, nbytes, make_job,
                                       self.cache.setdefault((geometry, kind, "priced"), {}))
        return self.cache[key]


def _fastest(kind: str, net: Network, groups: list[Any], nbytes: float, make_job: Any,
             priced: dict[str, list[tuple[float, float]]]) -> float:
    """The tuner's figure (`simulator.collectives.tuner.tune`, ``auto``): the least of every applicable algorithm's
    closed form -- skipping a ring algorithm whose closed form at a size priced before already bounds it above the
    best so far. Its multi-axis form is, per candidate plan, a sum of maxima of latency + bytes / bandwidth terms
    (latencies >= 0), minimised over plans: it never falls as bytes grow, and at ``nbytes`` <= V it is at least
    ``nbytes`` / V of its time at V. ``priced`` (per geometry and kind) keeps (bytes, seconds) per algorithm."""
    if groups[0].n <= 1:
        return 0.0

    def bound(name: str) -> float:
        return max((t * min(1.0, nbytes / v) for v, t in priced.get(name, ())), default=0.0)

    best = math.inf
    for name in sorted(applicable(kind, net, groups), key=bound):
        if bound(name) > best * (1 + 1e-9):
            break
        algorithm = get_algorithm(name)
        try:
            job = make_job(algorithm)
        except PodsimError:
            continue
        seconds = algorithm.closed_form(job)
        if isinstance(algorithm, RingAlgorithm) and kind in RING_KINDS:
            priced.setdefault(name, []).append((nbytes, seconds))
        best = min(best, seconds)
    if best == math.inf:
        raise PodsimError(f"no algorithm can run {kind} over these groups")
    return best


def _needs_tuner(mesh: Mesh, kind: str, pieces: tuple[tuple[Piece, ...], ...]) -> bool:
    """Whether `AxisLink` misprices the collective: the axes take a factor of a physical axis (a strided factor's
    groups share links; the multi-axis plan is the tuner's), or an AllReduce runs along a line of more than two
    chips (``line_pipelined``, ``grid_pipelined``). On whole axes otherwise `AxisLink` keeps today's figures."""
    if any(n != mesh.shape[a] for p in pieces for a, n, _ in p):
        return True
    return kind == "all_reduce" and any(n > 2 and not mesh.piece_wraps((a, n, s)) for p in pieces for a, n, s in p)


def axis_links(mesh: Mesh | None, graph: nx.DiGraph | None, chip: ChipSpec, net: Network | None = None,
               cache: dict[Any, Any] | None = None) -> AxisLinks:
    """`AxisLink` of every mesh axis of size > 1, with `Tuned` pricing on a torus or mesh (``net``: a `Network` of
    ``graph`` to route on, made when not given; ``cache``: `Tuned`'s, shared between meshes)."""
    if mesh is None:
        return AxisLinks({})
    links = {name: _axis_link(mesh, graph, name, chip) for name, size in zip(mesh.names, mesh.sizes, strict=True)
             if size > 1}
    tuned = None
    if mesh.shape:
        assert graph is not None, "a mesh with a shape lies on a topology graph"
        if graph.graph.get("kind") in TUNED_KINDS:
            tuned = Tuned(net if net is not None else Network(simpy.Environment(), graph), mesh, cache)
    return AxisLinks(links, tuned)


def _axis_link(mesh: Mesh, graph: nx.DiGraph, name: str, chip: ChipSpec) -> AxisLink:
    n = mesh.size(name)
    if not mesh.shape:  # a switch, or GPU nodes: rings through the NVLink switch, then over InfiniBand
        switch = _switch_stages(mesh, graph, name, n)
        return AxisLink(name, n, switch, hierarchical=len(switch) > 1)
    stages: list[Stage] = []
    for p, length, stride in mesh.pieces[mesh.index(name)]:
        if graph.graph.get("kind") == "multislice" and p == 0:
            dcn = _edge(graph, lambda d: d.get("kind") == "dcn")
            stages.append(Stage(mesh.shape[0], True, dcn["bandwidth_bytes_per_s"], 2 * dcn["latency_s"], False))
            continue
        # a factor of stride s: each step crosses s links, each shared by the s interleaved groups' routes
        ici = _edge(graph, lambda d, p=p: d.get("axis") == p)
        stages.append(Stage(length, mesh.piece_wraps((p, length, stride)), ici["bandwidth_bytes_per_s"] / stride,
                            ici["latency_s"] * stride))
    return AxisLink(name, n, tuple(stages))


def _switch_stages(mesh: Mesh, graph: nx.DiGraph, name: str, n: int) -> tuple[Stage, ...]:
    """The GPUs of one node on their NVLink switch; across nodes, each GPU's own InfiniBand NIC."""
    i = mesh.index(name)
    members = [mesh.device(tuple(k if a == i else 0 for a in range(len(mesh.sizes)))) for k in range(n)]
    nodes = len({graph.nodes[m].get("group") for m in members})
    out = []
    if n // nodes > 1:
        nvlink = _edge(graph, lambda d: d.get("kind") != "ib")
        out.append(Stage(n // nodes, True, nvlink["bandwidth_bytes_per_s"], 2 * nvlink["latency_s"], False))
    if nodes > 1:
        ib = _edge(graph, lambda d: d.get("kind") == "ib")
        out.append(Stage(nodes, True, ib["bandwidth_bytes_per_s"], 2 * ib["latency_s"], False))
    return tuple(out)


def _edge(graph: nx.DiGraph, match: Any) -> dict[str, Any]:
    for _, _, data in graph.edges(data=True):
        if match(data):
            return data
    raise PodsimError("topology has no link of the kind this mesh axis needs")


def p2p_s(graph: nx.DiGraph | None, src: Any, dst: Any, nbytes: float) -> float:
    """Point to point over the shortest route of topology ``graph``: hops x latency + bytes / the slowest link on it."""
    if src == dst or nbytes <= 0:
        return 0.0
    assert graph is not None, "a point-to-point message runs on a topology"
    path = nx.shortest_path(graph, src, dst)
    edges = [graph.edges[u, v] for u, v in zip(path, path[1:], strict=False)]
    bandwidth = min(e["bandwidth_bytes_per_s"] for e in edges)
    return sum(e["latency_s"] for e in edges) + nbytes / bandwidth
