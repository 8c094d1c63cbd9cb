"""`Mesh`: named logical axes laid on the physical axes of a topology.

A logical mesh is only names: ``X=4,Y=2`` says there are 8 devices indexed by (x, y). Bandwidth
comes from the links underneath, so the placement matters -- the same logical axis laid on a
wrapped physical axis is a ring, on an unwrapped one a line (about twice as slow for collectives).

Placement: logical axes take the topology's physical axes in order, each consuming consecutive
physical axes whose lengths multiply to its size (``X=16`` on a 4x4 torus spans both axes, row-major);
``X=4@1,Y=4@0`` places them explicitly (``@0+1`` for several physical axes). On a switch (or any
topology without axes) logical coordinates enumerate the chips in index order. Size-1 logical axes
take no physical axis. On slices over DCN (``multislice:K:AxB``) physical axis 0 is the slices, so the
first logical axis of size K (e.g. ``dcn=2`` or ``data=2``) is data parallelism over slices.

Without a topology (`default_topology_for`) a mesh is laid on hardware that exists: the chip's real slice
shapes (``model=4`` on a v5e is a 2x2 slice, ``model=16`` on a v5p a 2x2x4 slice) or NVLink nodes of 8 GPUs.

Split axes: where the sizes do not fall on physical axis boundaries (``data=8,model=8`` on a v5p's 4x4x4
cube), logical axes take factors of a physical axis (`place_split`), as JAX's ``create_device_mesh`` does.
Each physical axis is consumed from its outer end: a factor ``f`` of what is left (``r`` positions) takes
positions ``0, r/f, 2r/f, ...`` (stride ``r/f``); the innermost factor is a contiguous block of neighbours.
On a 4-ring split 2x2 the inner pairs {0,1}, {2,3} are linked; the outer pairs {0,2}, {1,3} are two hops
apart, and the two outer groups share those links. A `Piece` (axis, length, stride) names one factor.
"""
from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from simulator.errors import PodsimError
from simulator.units import parse_int, show

if TYPE_CHECKING:  # the topologies package (NetworkX) loads where a mesh meets a graph, not for a parser's constants
    import networkx as nx

_AXIS = re.compile(r"^\s*(?P<name>[A-Za-z][A-Za-z0-9_]*)\s*=\s*(?P<size>\d+)\s*(?:@\s*(?P<phys>\d+(?:\+\d+)*))?\s*$",
                   re.ASCII)  # ASCII digits only: "X=²" is not a size
MAX_DEVICES = 10**6  #: devices a mesh may have; more chips than any topology podsim builds


GPUS_PER_NODE = 8  #: GPUs an NVLink switch joins in one node (H100/H200/B200 HGX)
Piece = tuple[int, int, int]  #: (physical axis, length, stride): one factor of a physical axis under a logical axis

@dataclass(frozen=True)
class MeshSpec:
    """Parsed ``--mesh`` text: axis names, sizes, and optional explicit physical placement."""

    names: tuple[str, ...]
    sizes: tuple[int, ...]
    placement: tuple[tuple[int, ...] | None, ...]

    @property
    def n_devices(self) -> int:
        return math.prod(self.sizes)


def parse_mesh(text: str) -> MeshSpec:
    """Parse ``"X=4,Y=2"`` (optionally ``"X=4@1,Y=2@0"``) into a `MeshSpec`."""
    if not isinstance(text, str) or not text.strip():
        raise PodsimError(f"mesh spec {show(text)} is empty; expected e.g. X=4,Y=2")
    names, sizes, placement = [], [], []
    shown = show(text, 60)
    for part in text.split(","):
        m = _AXIS.match(part)
        if not m:
            raise PodsimError(f"mesh spec {shown}: {show(part.strip())} must look like NAME=SIZE (e.g. X=4) "
                              "or NAME=SIZE@AXIS (e.g. X=4@1)")
        name = m.group("name")
        if name in names:
            raise PodsimError(f"mesh spec {shown} names axis {name!r} twice")
        where = f"mesh spec {shown}: "
        size = parse_int(m.group("size"), name=f"axis {name}", maximum=MAX_DEVICES, error=PodsimError, where=where)
        names.append(name)
        sizes.append(size)
        placement.append(_physical_axes(m.group("phys"), name, where))
    if math.prod(sizes) > MAX_DEVICES:
        raise PodsimError(f"mesh spec {shown} has {math.prod(sizes):,} devices; at most {MAX_DEVICES:,} are supported")
    return MeshSpec(tuple(names), tuple(sizes), tuple(placement))


def _physical_axes(text: str | None, name: str, where: str) -> tuple[int, ...] | None:
    """``"0+1"`` -> (0, 1): the physical axes one logical axis spans, each named once."""
    if not text:
        return None
    parts = text.split("+")  # ASCII digits (the pattern says so)
    if any(len(p) > 3 for p in parts):
        raise PodsimError(f"{where}axis {name} is placed on physical axis {show(text)}; no topology has that many axes")
    axes = tuple(int(p) for p in parts)
    if len(set(axes)) != len(axes):
        raise PodsimError(f"{where}axis {name} is placed on physical axes {'+'.join(map(str, axes))}, one of them "
                          "twice; name each physical axis once (e.g. @0+1)")
    return axes


class MeshAxes:
    """A mesh's axis names and sizes, without a topology (what a sharding spec is checked against)."""

    def __init__(self, spec: MeshSpec) -> None:
        self.spec = spec

    @property
    def names(self) -> tuple[str, ...]:
        return self.spec.names

    @property
    def sizes(self) -> tuple[int, ...]:
        return self.spec.sizes

    @property
    def text(self) -> str:
        return ",".join(f"{n}={s}" for n, s in zip(self.names, self.sizes, strict=True))

    def size(self, name: str) -> int:
        return self.sizes[self.index(name)]

    def index(self, name: str) -> int:
        """Position of logical axis ``name``; `PodsimError` listing the axes if unknown."""
        if name not in self.names:
            raise PodsimError(f"axis {name!r} is not in mesh {self.text}; mesh axes: {', '.join(self.names)}")
        return self.names.index(name)


class Mesh(MeshAxes):
    """Logical axes of ``spec`` placed on ``graph``; maps logical coordinates to chips and back."""

    def __init__(self, spec: MeshSpec | str, graph: nx.DiGraph) -> None:
        self.spec = parse_mesh(spec) if isinstance(spec, str) else spec
        self.graph = graph
        self.chips = sorted(v for v, role in graph.nodes(data="role") if role == "chip")
        if self.spec.n_devices != len(self.chips):
            raise PodsimError(f"mesh {self.text} has {self.spec.n_devices} devices but the topology has "
                              f"{len(self.chips)} chips; the axis sizes must multiply to the chip count")
        self.shape: tuple[int, ...] = tuple(graph.graph.get("shape", ())) if is_grid(graph) else ()
        self.wrap: tuple[bool, ...] = tuple(graph.graph.get("wrap", ())) if self.shape else ()
        if graph.graph.get("kind") == "multislice":  # axis 0 is the slices: a ring through the DCN switch
            self.wrap = (True, *self.wrap[1:])
        self.origin = tuple(graph.graph.get("origin", ())) if self.shape else ()  #: a dead cable's axis starts
        # after the break (`simulator.engine.faults`), so the line laid on it never needs the cable
        self.pieces: tuple[tuple[Piece, ...], ...] = self._place()
        self.placement = tuple(tuple(a for a, _, _ in p) for p in self.pieces)  #: physical axes per logical axis
        self._device = {coords: self._locate(coords) for coords in itertools.product(*map(range, self.sizes))}
        self._coords = {dev: c for c, dev in self._device.items()}

    def device(self, coords: tuple[int, ...]) -> Any:
        """The chip at logical ``coords``."""
        return self._device[tuple(coords)]

    def coords(self, device: Any) -> tuple[int, ...]:
        """Logical coordinates of ``device``."""
        return self._coords[device]

    def is_ring(self, name: str) -> bool:
        """Whether neighbours along logical axis ``name`` close into a ring over the links.

        A logical axis on one wrapped physical axis, on several physical axes, or on a switch is a
        ring; on one physical axis without wraparound it is a line.
        """
        pieces = self.pieces[self.index(name)]
        return not self.shape or len(pieces) != 1 or self.piece_wraps(pieces[0])

    def piece_wraps(self, piece: Piece) -> bool:
        """Whether the devices along ``piece`` close into a ring: a whole wrapped axis, or the outermost
        strided factor (of more than 2) of one, whose last device reaches the first through the wrap link;
        an inner block that is not the whole axis is a line."""
        axis, length, stride = piece
        return bool(self.wrap[axis]) and length * stride == self.shape[axis] and (stride == 1 or length > 2)

    def is_split(self) -> bool:
        """Whether some logical axis takes only a factor of a physical axis."""
        return any(length != self.shape[a] for p in self.pieces for a, length, _ in p)

    def describe(self) -> dict[str, Any]:
        """Where the mesh lies, for results: the topology as a spec string and each logical axis's physical
        axes (``[]`` for a size-1 axis, or on a topology without axes, where chips go in index order). A factor
        of a physical axis shows as ``{"axis": a, "size": f, "stride": s}`` (positions 0, s, ..., (f-1)s of
        what the axes laid inside it leave)."""
        def show_piece(piece: Piece) -> Any:
            a, length, stride = piece
            return a if length == self.shape[a] else {"axis": a, "size": length, "stride": stride}
        return {"topology": self.graph.graph.get("spec"),
                "placement": {n: [show_piece(q) for q in p] for n, p in zip(self.names, self.pieces, strict=True)}}

    def physical_axes(self, name: str) -> tuple[int, ...]:
        return self.placement[self.index(name)]

    def _place(self) -> tuple[tuple[Piece, ...], ...]:
        if not self.shape:
            return tuple(() for _ in self.names)
        whole = self._explicit() if any(p is not None for p in self.spec.placement) else \
            place_in_order(self.sizes, self.shape)
        if whole is not None:
            return tuple(tuple((a, self.shape[a], 1) for a in p) for p in whole)
        return self._split()

    def _split(self) -> tuple[tuple[Piece, ...], ...]:
        placement = place_split(self.sizes, self.shape)
        if placement is not None and self.graph.graph.get("kind") == "multislice":  # the slices stay whole
            placement = None if any(a == 0 and n != self.shape[0] for p in placement for a, n, _ in p) else placement
        if placement is None:
            fits = "x".join(str(s) for s in self.sizes if s > 1) or "1"
            raise PodsimError(f"mesh {self.text} does not match the physical axes {'x'.join(map(str, self.shape))}"
                              " in order (each logical axis takes whole consecutive physical axes, or factors of them)"
                              f"; place it explicitly (e.g. {self.names[0]}={self.sizes[0]}@1) or use a topology of "
                              f"shape {fits} (e.g. torus:{fits})")
        return placement

    def _explicit(self) -> tuple[tuple[int, ...], ...]:
        out: list[Any] = []
        used: set[int] = set()
        for name, size, phys in zip(self.names, self.sizes, self.spec.placement, strict=True):
            phys = phys or ()
            bad = [a for a in phys if a >= len(self.shape) or a in used]
            if bad or math.prod(self.shape[a] for a in phys) != size:
                raise PodsimError(f"mesh {self.text}: axis {name}={size} placed on physical axes {list(phys)} "
                                  f"of {'x'.join(map(str, self.shape))}; give unused axes whose lengths multiply "
                                  f"to {size}")
            used.update(phys)
            out.append(phys)
        return tuple(out)

    def _locate(self, coords: tuple[int, ...]) -> Any:
        if not self.shape:
            index = 0
            for c, n in zip(coords, self.sizes, strict=True):
                index = index * n + c
            return self.chips[index]
        phys = [0] * len(self.shape)
        for c, pieces in zip(coords, self.pieces, strict=True):
            for a, length, stride in reversed(pieces):  # row-major over the factors a logical axis spans
                phys[a], c = phys[a] + (c % length) * stride, c // length
        if any(self.origin):
            phys = [(c + o) % n for c, o, n in zip(phys, self.origin, self.shape, strict=True)]
        index = 0
        for c, n in zip(phys, self.shape, strict=True):
            index = index * n + c
        return index


def is_grid(graph: nx.DiGraph) -> bool:
    """Whether ``graph`` has physical axes a mesh is laid on (a torus, ring, line, mesh or slices over DCN)."""
    return graph.graph.get("kind") in ("torus", "ring", "line", "mesh", "multislice") and bool(graph.graph.get("shape"))


def place_in_order(sizes: tuple[int, ...], shape: tuple[int, ...]) -> tuple[tuple[int, ...], ...] | None:
    """Physical axes of ``shape`` each logical axis takes, in order: consecutive axes whose lengths
    multiply to its size (a size-1 axis takes none). None when the sizes do not fall on axis boundaries."""
    out, axis = [], 0
    for size in sizes:
        taken: list[int] = []
        while math.prod(shape[a] for a in taken) < size and axis < len(shape):
            taken.append(axis)
            axis += 1
        if math.prod(shape[a] for a in taken) != size:
            return None
        out.append(tuple(taken))
    return tuple(out)


def place_split(sizes: tuple[int, ...], shape: tuple[int, ...]) -> tuple[tuple[Piece, ...], ...] | None:
    """Factors of the physical axes of ``shape`` each logical axis takes, in order, slowest first.

    Each physical axis is consumed from its outer end: with ``r`` positions left, a factor ``f`` takes
    stride ``r // f`` and leaves ``r // f`` to the axes after it (the last factor is a contiguous block).
    A logical axis takes the largest factor the axis has left, then moves on. None when some size shares no
    factor with what is left (``data=3`` on a 4x4 slice).

    >>> place_split((8, 8), (4, 4, 4))
    (((0, 4, 1), (1, 2, 2)), ((1, 2, 1), (2, 4, 1)))
    """
    out, axis, left = [], 0, list(shape)
    for size in sizes:
        need, taken = size, []
        while need > 1:
            while axis < len(shape) and left[axis] == 1:
                axis += 1
            factor = math.gcd(need, left[axis]) if axis < len(shape) else 1
            if factor == 1:
                return None
            left[axis] //= factor
            taken.append((axis, factor, left[axis]))
            need //= factor
        out.append(tuple(taken))
    return tuple(out) if all(n == 1 for n in left) else None


def default_topology_for(mesh: MeshSpec, chip: Any) -> str:
    """The topology a mesh runs on when none is given: hardware that exists, holding the mesh's axes.

    - GPUs: one NVLink switch of up to 8; beyond that, NVLink nodes of 8 joined by InfiniBand.
    - TPUs: the most cube-like real slice of that many chips (`topologies.shapes.slice_shapes`: v5e/v6e
      2-D up to 16x16, v4/v5p/tpu7x 3-D with wraparound on full cubes), in the first axis order whose
      axes the mesh's logical axes take in order (``model=4`` on a v5e is a 2x2 slice, not a 1x4 line).
    - Explicit placement (``X=4@1,Y=2@0``): physical axis k gets the length of the axis placed on it.
    - Else the most cube-like real slice whose axes the logical axes can share (`place_split`: ``data=8,model=8``
      on a v5p is the 4x4x4 cube, its y axis split 2x2 between them).
    - Otherwise (no real slice of that size holds the mesh's axes): a slice of the mesh's own shape, size-1
      axes dropped.
    """
    n = mesh.n_devices
    rule = getattr(chip, "wraparound", "")
    if rule == "switch":
        return f"switch:{n}" if n <= GPUS_PER_NODE or n % GPUS_PER_NODE else f"nodes:{n // GPUS_PER_NODE}:8"
    if any(p is not None for p in mesh.placement):
        return "slice:" + "x".join(map(str, _explicit_lengths(mesh)))
    from topologies.shapes import orientations, slice_shapes

    real = [laid for shape in (slice_shapes(n, rule) if rule in ("length16", "multiple4") else [])
            for laid in orientations(tuple(a for a in shape if a > 1) or (1,))]
    for fits in (place_in_order, place_split):
        for laid in real:
            if fits(mesh.sizes, laid) is not None:
                return "slice:" + "x".join(map(str, laid))
    return "slice:" + "x".join(str(s) for s in mesh.sizes if s > 1) if n > 1 else "slice:1"


def _explicit_lengths(mesh: MeshSpec) -> list[int]:
    """Physical axis lengths an explicitly placed mesh asks for (each axis on exactly one physical axis)."""
    lengths: dict[int, int] = {}
    for size, phys in zip(mesh.sizes, mesh.placement, strict=True):
        if phys is None or len(phys) != 1:
            raise PodsimError(f"mesh {','.join(mesh.names)}: with explicit placement and no --topology, place "
                              "every axis on exactly one physical axis (e.g. X=4@1,Y=2@0)")
        lengths[phys[0]] = size
    if sorted(lengths) != list(range(len(lengths))):
        raise PodsimError(f"mesh placement uses physical axes {sorted(lengths)}; without --topology they must "
                          f"be 0..{len(lengths) - 1}")
    return [lengths[k] for k in range(len(lengths))]
