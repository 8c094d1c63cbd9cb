"""Group geometry: which devices run one collective together, their positions, and their rings.

A collective over some axes runs in independent groups, one per combination of the other axes' coordinates;
a `Group` maps each position tuple (over the group's axes) to a device, and `Group.ring` gives the
devices along one axis. Non-grid topologies (a switch, GPU nodes, slices over DCN) form one group of all
chips in id order, closed into a ring through their switches.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from simulator.engine.network import Network
from simulator.errors import PodsimError
from simulator.units import positive_int


@dataclass
class Ring:
    """Devices along one axis in position order; ``wrap`` says whether the last links to the first."""

    devices: list[Any]
    wrap: bool
    slots: list[Any]  #: per position, the key under which arrivals are recorded (device, or position)


@dataclass
class Group:
    """Devices of one collective: position tuple (over the group axes) -> device."""

    sizes: tuple[int, ...]
    wraps: tuple[bool, ...]
    members: dict[tuple[int, ...], Any]
    shared: bool = False  #: its rings share links with other groups' (a strided factor of a physical axis)

    @property
    def n(self) -> int:
        """Devices in the group."""
        return math.prod(self.sizes)

    def ring(self, pos: tuple[int, ...], axis: int, reduced: bool = False) -> Ring:
        """The ring along ``axis`` through ``pos``; ``reduced`` records arrivals by position, not device."""
        positions = [pos[:axis] + (i,) + pos[axis + 1:] for i in range(self.sizes[axis])]
        devices = [self.members[p] for p in positions]
        slots = list(range(len(devices))) if reduced else devices
        return Ring(devices, self.wraps[axis], slots)

    def positions(self) -> list[tuple[int, ...]]:
        """Every position tuple, in row-major order."""
        return list(itertools.product(*(range(s) for s in self.sizes)))


def collective_groups(net: Network, axes: Sequence[Any] | None, mesh: Any = None) -> list[Group]:
    """The independent groups a collective over ``axes`` runs in (size-1 axes dropped).

    Axes are physical axis indices, or logical axis names when a `simulator.workloads.mesh.Mesh` is given.
    """
    if mesh is not None:
        return _mesh_groups(mesh, axes)
    if not net.grid and not (axes is not None and _slices_over_dcn(net)):
        if axes is not None:
            raise PodsimError(f"axes={list(axes)!r}: topology {net.graph.graph.get('kind')!r} has no axes; "
                              "omit --axes to use all chips as one ring")
        return [Group((len(net.chips),), (True,), {(i,): c for i, c in enumerate(net.chips)})]
    ndim = len(net.shape)
    axes = list(range(ndim)) if axes is None else list(axes)
    for a in axes:
        if isinstance(a, bool) or not isinstance(a, int) or not 0 <= a < ndim:
            raise PodsimError(f"axis {a!r} is not an axis of shape {'x'.join(map(str, net.shape))}; "
                              f"valid axes: {', '.join(map(str, range(ndim)))}")
    wrap = [True, *net.wrap[1:]] if _slices_over_dcn(net) else list(net.wrap)  # slices ring through the DCN
    return _grid_groups(list(net.shape), wrap, axes, lambda coord: net.chip_at(tuple(coord)))


def _slices_over_dcn(net: Network) -> bool:
    """Multislice axes: 0 the slices (over the DCN switch), then the slice's own (issue 14)."""
    return net.graph.graph.get("kind") == "multislice"


def _mesh_groups(mesh: Any, axes: Sequence[Any] | None) -> list[Group]:
    """Groups over logical axes: on a grid, each logical axis stands for the physical axes it is laid on
    (``model=16`` on a 4x4 slice is a 4x4 group, run over both axes at once, not a snake through them);
    without axes (a switch) each logical axis is one ring."""
    names = list(mesh.names) if axes is None else list(axes)
    idx = [mesh.index(name) for name in names]
    if not mesh.shape:
        wraps = [mesh.is_ring(name) for name in mesh.names]
        return _grid_groups(list(mesh.sizes), wraps, idx, mesh.device)
    # (logical axis, factor of a physical axis) per grid axis: a split physical axis gives each of its logical
    # axes one factor (`Mesh.pieces`); a strided factor's ring steps are multi-hop routes
    spans = [[(i, q)] for i, pieces in enumerate(mesh.pieces) for q in pieces]
    chosen = {g for g, ((i, _),) in enumerate(spans) if i in idx}
    for g in range(len(spans) - 1, 0, -1):  # a group holding a physical axis's factors in turn holds the axis
        (i, (a, _, stride)), (j, (b, inner, step)) = spans[g - 1][-1], spans[g][0]
        if {g - 1, g} <= chosen and a == b and stride == inner * step and (i == j or idx.index(j) == idx.index(i) + 1):
            spans[g - 1:g + 1] = [spans[g - 1] + spans[g]]
            chosen = {h - (h >= g) for h in chosen}
    whole = [(parts[0][1][0], math.prod(q[1] for _, q in parts), parts[-1][1][2]) for parts in spans]
    shape = [n for _, n, _ in whole]
    wrap = [mesh.piece_wraps(q) for q in whole]

    node = _mesh_node(mesh, spans, shape)

    grid_axes = [g for i in idx for g, parts in enumerate(spans) if parts[0][0] == i and g in chosen]
    physical = [whole[g][0] for g in grid_axes if shape[g] > 1]
    if len(set(physical)) != len(physical):
        order = ", ".join(n for n in mesh.names if n in names)
        raise PodsimError(f"axes={names!r}: two of them hold factors of one physical axis out of order, whose "
                          f"routes would cross; give them in mesh order ({order})")
    groups = _grid_groups(shape, wrap, grid_axes, node)
    if any(whole[g][2] > 1 and shape[g] > 1 for g in grid_axes):
        for group in groups:
            group.shared = True
    return groups


def _mesh_node(mesh: Any, spans: list[list[tuple[int, tuple[int, int, int]]]],
               shape: list[int]) -> Callable[[list[int]], Any]:
    """The chip at a grid coordinate of ``spans`` (each grid axis a run of (logical axis, factor) pieces, of
    ``shape[g]`` positions): row-major over a logical axis's factors, a coordinate's digits (one a factor of its
    span, the last fastest) each add digit x weight to their logical axis, the weight being the product of that
    axis's later factors' sizes. So grid axis g at c adds ``adds[g][c]`` (logical axis, amount) pairs, made once."""
    later = [1] * len(mesh.sizes)
    weights: list[list[int]] = [[] for _ in spans]
    for g in range(len(spans) - 1, -1, -1):
        for i, q in reversed(spans[g]):
            weights[g].append(later[i])  # (reversed: the span's last factor first)
            later[i] *= q[1]
    adds: list[list[list[tuple[int, int]]]] = []
    for parts, weight, n in zip(spans, weights, shape, strict=True):
        table = []
        for c in range(n):
            pairs = []
            for (i, q), w in zip(reversed(parts), weight, strict=True):
                c, d = divmod(c, q[1])
                if d:
                    pairs.append((i, d * w))
            table.append(pairs)
        adds.append(table)
    device, n_logical = mesh.device, len(mesh.sizes)

    def node(coord: list[int]) -> Any:
        logical = [0] * n_logical
        for table, c in zip(adds, coord, strict=True):
            for i, x in table[c]:
                logical[i] += x
        return device(tuple(logical))
    return node


def _grid_groups(shape: list[int], wrap: list[bool], axes: list[int], node: Callable[[list[int]], Any]) -> list[Group]:
    if len(set(axes)) != len(axes):
        raise PodsimError(f"axes={axes!r} names an axis twice")
    axes = [a for a in axes if shape[a] > 1]
    others = [a for a in range(len(shape)) if a not in axes]
    groups = []
    for base in itertools.product(*(range(shape[a]) for a in others)):
        members = {}
        for pos in itertools.product(*(range(shape[a]) for a in axes)):
            coord = [0] * len(shape)
            for a, v in zip(others, base, strict=True):
                coord[a] = v
            for a, v in zip(axes, pos, strict=True):
                coord[a] = v
            members[pos] = node(coord)
        groups.append(Group(tuple(shape[a] for a in axes), tuple(wrap[a] for a in axes), members))
    return groups


def rings_along(groups: list[Group], pos: tuple[int, ...], axis: int, every: bool = False) -> list[Ring]:
    """The rings a closed form prices for ``axis``: the one through ``pos`` in the first group, or, where the
    groups are `Group.shared` (a strided factor of a physical axis) or ``every`` is asked for (a faulted network,
    whose rings differ: one crosses a slow link, another carries a detour), every ring of every group along
    it, as their routes share links."""
    if not groups[0].shared and not every:
        return [groups[0].ring(pos, axis)]
    return [g.ring(base, axis) for g in groups for base in ring_bases(g, axis, {}, False)]


def keys_where(sizes: tuple[int, ...], fixed: dict[int, int]) -> list[tuple[int, ...]]:
    """Every position tuple whose entries on ``fixed`` axes take the fixed values."""
    ranges = [(fixed[a],) if a in fixed else range(n) for a, n in enumerate(sizes)]
    return list(itertools.product(*ranges))


def ring_bases(group: Group, axis: int, fixed: dict[int, int], reduced: bool) -> list[tuple[int, ...]]:
    """Base positions (axis entry 0) of the rings along ``axis`` whose other entries match ``fixed``."""
    sizes = tuple(1 if a == axis else n for a, n in enumerate(group.sizes))
    bases = keys_where(sizes, {a: v for a, v in fixed.items() if a != axis})
    return bases[:1] if reduced else bases


def root_position(groups: list[Group], root: Any) -> tuple[int, ...]:
    """Position of device ``root`` in its group (position 0 when ``root`` is None)."""
    if root is None:
        return tuple(0 for _ in groups[0].sizes)
    for g in groups:
        for pos, dev in g.members.items():
            if dev == root:
                return pos
    chips = [c for g in groups for c in g.members.values()]
    shown = ", ".join(map(str, chips[:8])) + (f", ... ({len(chips)} chips)" if len(chips) > 8 else "")
    raise PodsimError(f"root={root!r} is not a chip of this collective's groups; give one of {shown}")


def nic_rings(net: Network, groups: list[Group], rings: int | None, data: Any, axes: Any,
              mesh: Any) -> list[list[Group]]:
    """The groups of each ring the array is spread over (one list per ring).

    GPU nodes over InfiniBand (``nodes:K:G``) default to one ring per GPU of a node, as NCCL runs one
    ring per NIC: ring c rotates each node's GPUs by c, so every ring crosses between nodes on a
    different NIC, and each carries 1/G of the array. Elsewhere one ring (the groups themselves).
    """
    gpus = net.graph.graph.get("gpus_per_node", 1) if net.graph.graph.get("kind") == "nodes" else 1
    count = gpus if rings is None else positive_int(rings, name="rings")
    if count == 1 or data is not None or axes is not None or mesh is not None or net.grid:
        if rings not in (None, 1):
            raise PodsimError(f"rings={rings} needs a timing-only collective over all chips of a non-torus "
                              "topology (GPU nodes, a switch)")
        return [groups]
    (group,) = groups
    order = [group.members[(i,)] for i in range(group.n)]
    per_node = max(1, min(count, gpus))
    out = []
    for c in range(count):
        rotated = [order[(k // per_node) * per_node + (k % per_node + c) % per_node] for k in range(len(order))]
        out.append([Group(group.sizes, group.wraps, {(i,): d for i, d in enumerate(rotated)})])
    return out
