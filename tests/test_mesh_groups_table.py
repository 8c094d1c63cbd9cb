"""`collective_groups` over a mesh's logical axes: the groups it gives partition the chips exactly as the logical
coordinates say (two chips share a group iff they agree on every axis the collective is not over), and each group
places its chips where the plain digit-by-digit form of the mesh's row-major factors puts them (`_mesh_groups` reads
a chip's logical coordinates from per-axis tables made once: the same chips in the same places)."""
from __future__ import annotations

import itertools
import math

import pytest

from simulator import get_chip
from simulator.collectives.groups import _mesh_node, collective_groups
from simulator.engine.system import System
from simulator.workloads.mesh import Mesh, parse_mesh

CASES = [
    ("tpu-v5p", "slice:4x4x4", "data=8,model=8"),  # y split 2x2
    ("tpu-v5p", "slice:4x4x4", "data=2,fsdp=4,model=8"),  # x split, y split
    ("tpu-v5p", "slice:4x8x8", "fsdp=128,model=2"),
    ("tpu-v5p", "slice:4x4x4", "data=4,model=16"),  # whole axes
    ("tpu-v5e", "slice:4x4", "data=2,model=8"),
    ("tpu-v5e", "slice:8x8", "data=4,fsdp=4,model=4"),
    ("tpu-v5e", "multislice:2:4x4", "data=2,fsdp=16"),
]


def _plain_node(mesh: Mesh, spans: list, coord: tuple[int, ...]) -> tuple[int, ...]:
    """The logical coordinates of a grid coordinate, digit by digit (the form the tables replace)."""
    logical = [0] * len(mesh.sizes)
    for parts, c in zip(spans, coord, strict=True):
        digits = []
        for _, q in reversed(parts):
            digits.append(c % q[1])
            c //= q[1]
        for (i, q), d in zip(parts, reversed(digits), strict=True):
            logical[i] = logical[i] * q[1] + d
    return tuple(logical)


@pytest.mark.parametrize("chip,topology,spec", CASES)
def test_groups_partition_the_chips_by_their_other_coordinates(chip, topology, spec):
    system = System(get_chip(chip), topology=topology, trace=False)
    mesh = Mesh(parse_mesh(spec), system.graph)
    names = list(mesh.names)
    for r in range(1, len(names) + 1):
        for axes in itertools.combinations(names, r):
            groups = collective_groups(system.network, list(axes), mesh)
            rest = [mesh.index(n) for n in names if n not in axes]
            seen: set = set()
            for group in groups:
                chips = list(group.members.values())
                assert len(set(chips)) == len(chips) == group.n
                keys = {tuple(mesh.coords(c)[i] for i in rest) for c in chips}
                assert len(keys) == 1  # one value of the other axes a group ...
                seen |= keys
                assert len(chips) == math.prod(mesh.sizes[mesh.index(n)] for n in axes)
            assert len(seen) == len(groups)  # ... and a different one each


@pytest.mark.parametrize("chip,topology,spec", CASES)
def test_each_chip_sits_where_the_plain_digit_form_puts_it(chip, topology, spec):
    """`_mesh_node`'s tables against the digit-by-digit form at every grid coordinate: on the mesh's own factors
    one a grid axis, and with each logical axis's factors run together (the coarsest grid a group may use)."""
    system = System(get_chip(chip), topology=topology, trace=False)
    mesh = Mesh(parse_mesh(spec), system.graph)
    if not mesh.shape:
        pytest.skip("no grid")
    single = [[(i, q)] for i, pieces in enumerate(mesh.pieces) for q in pieces]
    joined = [[(i, q) for q in pieces] for i, pieces in enumerate(mesh.pieces)]
    for spans in (single, joined):
        shape = [math.prod(q[1] for _, q in parts) for parts in spans]
        node = _mesh_node(mesh, spans, shape)
        chips = [node(list(coord)) for coord in itertools.product(*map(range, shape))]
        assert chips == [mesh.device(_plain_node(mesh, spans, coord))
                         for coord in itertools.product(*map(range, shape))]
        assert sorted(chips, key=str) == sorted(system.network.chips, key=str)  # every chip once
