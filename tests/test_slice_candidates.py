"""Issue 29's set-up cuts on multislice systems, each against the slower path it replaces: the slice symmetry groups
built only when tried (`slice_candidates`), generators checked against every link at once (`LinkTable`, against
`check_automorphism` link by link), and routes moved by a symmetry where they are the one quickest path
(`Network.route_is_unique`, against the routes themselves)."""
from __future__ import annotations

import itertools
import random

import pytest

from simulator.acceleration.automorphisms import check_automorphism
from simulator.acceleration.slice_symmetry import LinkTable, _shift, slice_actions, slice_candidates
from simulator.engine.system import System


def _net(topology: str = "multislice:3:16x16"):
    return System("tpu-v5e", topology=topology, trace=False).network


def _error(check, *args) -> str | None:
    try:
        check(*args)
    except ValueError as e:
        return str(e)
    return None


def test_candidates_are_named_and_sized_before_they_are_built_and_build_the_slice_actions():
    net = _net()
    candidates = slice_candidates(net)
    assert [c.order for c in candidates] == sorted((c.order for c in candidates), reverse=True)
    assert candidates[0].name == "slices+slice axis 0+slice axis 1" and candidates[0].order == 3 * 16 * 16
    assert all(c._built is None for c in candidates)  # nothing built yet
    first = candidates[0].build()
    assert first is not None and first.order == 768 and candidates[0].build() is first  # built once
    assert all(c._built is None for c in candidates[1:])  # the others still not
    built = slice_actions(net)
    assert [(a.name, a.order) for a in built] == [(c.name, c.order) for c in candidates]
    chips = net.chips
    for a, b in zip(built, [c.build() for c in candidates], strict=True):  # the same group, element by element
        assert all(a.apply(h, v) == b.apply(h, v) for h in itertools.islice(a.elements(), 50) for v in chips[::37])


def test_link_table_rejects_what_check_automorphism_rejects_with_the_same_message():
    net = _net("multislice:2:4x4")
    graph = net.graph
    table = LinkTable(graph)
    rotation = _shift(graph, 0)
    swapped = dict(rotation)
    swapped[0], swapped[1] = rotation[1], rotation[0]  # two neighbours' images swapped: not an automorphism
    to_hub = {v: v for v in graph.nodes}
    to_hub[0], to_hub["dcn0"] = "dcn0", 0  # a chip and the hub swapped
    short = {v: v for v in graph.nodes if v != 5}  # not onto
    cases = [rotation, _shift(graph, 1), swapped, to_hub, short]
    found = [(_error(table.check, perm), _error(check_automorphism, graph, perm)) for perm in cases]
    assert [fast for fast, _ in found] == [slow for _, slow in found]
    assert found[0][0] is None and all(slow is not None for _, slow in found[2:])  # (1: an unwrapped axis's shift)


def test_a_unique_route_moves_with_every_slice_symmetry_and_a_tie_is_not_unique():
    net = _net()
    action = slice_candidates(net)[0].build()
    rng = random.Random(29)
    chips = net.chips
    pairs = [(0, 1), (0, 16), (0, 256), (0, 256 + 17), (5, 512 + 5)] + \
        [tuple(rng.sample(chips, 2)) for _ in range(40)]
    elements = list(action.elements())
    unique = 0
    for src, dst in pairs:
        if not net.route_is_unique(src, dst):
            continue
        unique += 1
        (path,) = net.routes(src, dst)
        for h in rng.sample(elements, 25):
            assert net.routes(action.apply(h, src), action.apply(h, dst)) == [[action.apply(h, v) for v in path]]
    assert unique >= 5
    assert net.route_is_unique(0, 1) and net.route_is_unique(0, 256)  # a neighbour; the twin in the next slice
    assert not net.route_is_unique(0, 17)  # (0,0) -> (1,1) inside a slice: two quickest paths (a tie)


@pytest.mark.parametrize("topology", ["torus:4x4", "nodes:2:8"])
def test_route_is_unique_only_on_unfaulted_cost_routed_fabrics(topology):
    net = System("h100" if topology.startswith("nodes") else "tpu-v5p", topology=topology, trace=False).network
    assert net.route_is_unique(0, 1) == (not net.grid)  # a grid's routes are dimension order, not searched
