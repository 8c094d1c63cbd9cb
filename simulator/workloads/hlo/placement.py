"""Which chip runs each device of a compiled program, and how its replica groups map onto the topology.

An SPMD program names its devices 0 .. n-1 in the order of the JAX mesh it was compiled for (row-major
over the mesh axes). By default podsim lays those ids on the topology as ``--mesh`` lays a mesh:
device d has the mesh coordinates of d in row-major order, and `simulator.workloads.mesh.Mesh` places
the coordinates on chips (without a mesh: one axis per physical axis, so device d is chip d).
An explicit placement lists the chip of every device instead.

Replica groups that are exactly the groups of some mesh axes run as podsim's multi-axis collectives
over those axes (the algorithms `run_collective` uses for ``--axes``); any other groups run as explicit
rings of chips in the group's order, closed where the last chip links straight to the first.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from simulator.collectives import Group
from simulator.errors import PodsimError
from simulator.workloads.mesh import Mesh, MeshSpec, parse_mesh

if TYPE_CHECKING:  # annotations only: no import at run time (and no cycle)
    from simulator.engine.system import System


class Placement:
    """Device ids of a program -> chips of ``system``'s topology, with the mesh used to match groups."""

    def __init__(self, system: System, n_devices: int, mesh: str | MeshSpec | None = None,
                 chips: Sequence[Any] | None = None) -> None:
        graph = system.graph
        self.system = system
        self.n_devices = n_devices
        if system.network is None:
            raise PodsimError("an HLO placement needs a system with a topology (System(chip, topology=...))")
        topology_chips = list(system.network.chips)
        if mesh is not None and chips is not None:
            raise PodsimError("give a mesh or an explicit placement of devices on chips, not both")
        if chips is not None:
            self.chips = _check_chips(list(chips), n_devices, topology_chips)
            self.mesh: Mesh | None = None
            return
        if n_devices != len(topology_chips):
            raise PodsimError(f"the program runs on {n_devices} device(s) but the topology has "
                              f"{len(topology_chips)} chips; choose a topology of {n_devices} chips (e.g. "
                              f"--topology ring:{n_devices}) or place the devices explicitly")
        spec = parse_mesh(mesh) if isinstance(mesh, str) else mesh or _physical_spec(graph, n_devices)
        if spec.n_devices != n_devices:
            raise PodsimError(f"mesh {','.join(f'{a}={s}' for a, s in zip(spec.names, spec.sizes, strict=True))} "
                              f"has {spec.n_devices} devices but the program runs on {n_devices}")
        self.mesh = Mesh(spec, graph)
        self.chips = [self.mesh.device(tuple(int(c) for c in np.unravel_index(d, self.mesh.sizes)))
                      for d in range(n_devices)]
        self._axis_groups = self._all_axis_groups()

    def chip(self, device: int) -> Any:
        """The chip that runs program device ``device``."""
        return self.chips[device]

    def describe(self) -> str:
        """One line: how devices sit on chips."""
        if self.mesh is None:
            return f"explicit placement of {self.n_devices} devices"
        return f"mesh {self.mesh.text} laid on the topology in order (device d = row-major mesh index d)"

    def collective_kwargs(self, groups: list[list[int]]) -> dict[str, Any]:
        """Keyword arguments of `start_collective` that run a collective over ``groups`` (device ids):
        ``axes`` and ``mesh`` when they are the groups of some mesh axes, else explicit ``groups``."""
        chip_groups = frozenset(frozenset(self.chips[d] for d in g) for g in groups)
        if self.mesh is not None and len(groups) * len(groups[0]) == self.n_devices:
            axes = self._axis_groups.get(chip_groups)
            if axes is not None:
                return {"axes": list(axes), "mesh": self.mesh}
        return {"groups": [self._ring(g) for g in groups], "mode": "full"}

    def _ring(self, devices: list[int]) -> Group:
        chips = [self.chips[d] for d in devices]
        graph = self.system.graph
        wrap = len(chips) <= 2 or (graph is not None and graph.has_edge(chips[-1], chips[0]))
        return Group((len(chips),), (wrap,), {(i,): c for i, c in enumerate(chips)})

    def _all_axis_groups(self) -> dict[frozenset, tuple[str, ...]]:
        """For every set of mesh axes (size > 1), its groups as a set of chip sets -> the axis names."""
        mesh = self.mesh
        assert mesh is not None
        names = [n for n, s in zip(mesh.names, mesh.sizes, strict=True) if s > 1]
        out: dict[frozenset, tuple[str, ...]] = {}
        for r in range(1, len(names) + 1):
            for axes in itertools.combinations(names, r):
                key = frozenset(frozenset(members) for members in _mesh_groups(mesh, axes))
                out.setdefault(key, axes)
        return out


def _mesh_groups(mesh: Mesh, axes: tuple[str, ...]) -> list[list[Any]]:
    idx = [mesh.index(a) for a in axes]
    groups: dict[tuple[int, ...], list[Any]] = {}
    for coords in itertools.product(*map(range, mesh.sizes)):
        rest = tuple(c for k, c in enumerate(coords) if k not in idx)
        groups.setdefault(rest, []).append(mesh.device(coords))
    return list(groups.values())


def _physical_spec(graph: Any, n: int) -> MeshSpec:
    """One mesh axis per physical axis of a grid topology (``d0``, ``d1``, ...), or one axis of n chips."""
    shape = tuple(graph.graph.get("shape", ()))
    if graph.graph.get("kind") in ("torus", "ring", "line", "mesh") and shape and math.prod(shape) == n:
        return MeshSpec(tuple(f"d{k}" for k in range(len(shape))), shape, tuple(None for _ in shape))
    return MeshSpec(("devices",), (n,), (None,))


def _check_chips(chips: list[Any], n_devices: int, known: list[Any]) -> list[Any]:
    if len(chips) != n_devices:
        raise PodsimError(f"placement lists {len(chips)} chip(s) but the program runs on {n_devices} devices; "
                          "give one chip per device, in device order")
    bad = [c for c in chips if c not in set(known)]
    if bad or len(set(chips)) != len(chips):
        raise PodsimError(f"placement must name distinct chips of the topology (0..{len(known) - 1}); bad or "
                          f"repeated: {bad or sorted({c for c in chips if chips.count(c) > 1})}")
    return chips
