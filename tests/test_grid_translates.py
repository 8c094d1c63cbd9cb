"""The grid's translations image a chip under every move at once (`Translates.every`, NumPy) exactly as moving it
one translation at a time does, and a link's images are the same set either way, also where the memo of orbits
(`Translates.group`) answers (oracle: the plain coordinate sum)."""
from __future__ import annotations

import itertools

import pytest

from simulator.acceleration.reduced import grid_translations
from simulator.acceleration.unfolding import Translates
from simulator.engine.system import System


@pytest.mark.parametrize("topology", ["torus:4x4", "slice:2x4x4", "ring:8", "mesh:3x4"])
def test_every_move_at_once_equals_one_at_a_time(topology):
    net = System("tpu-v5p", topology=topology).network
    assert net is not None
    moves = grid_translations(net)
    coord = dict(net.graph.nodes(data="coord"))
    at = {tuple(c): v for v, c in coord.items() if c is not None}
    deltas = list(itertools.product(*map(range, net.shape)))
    assert moves.every is not None and moves.count == len(deltas)
    for chip, c in coord.items():
        if c is None:
            continue
        # oracle: add each offset to the coordinates, modulo the shape, and look the chip up
        assert moves.every(chip) == [at.get(tuple((x + d) % n for x, d, n in zip(c, delta, net.shape, strict=True)))
                                     for delta in deltas]
    plain = Translates(moves.count, moves.move)  # the same moves, one at a time, no memo of orbits
    ran = set(list(net.links)[:3])
    assert moves.group and not plain.group
    for pair in list(net.graph.edges):  # every link: most are in an orbit imaged before (the memo answers)
        fast, slow = moves.images(net, pair, ran), plain.images(net, pair, ran)
        assert set(fast) == set(slow) and len(fast) == len(slow)
        # oracle: every translate of the link's ends that is a link and did not run
        shifted = [tuple(at.get(tuple((x + d) % n for x, d, n in zip(coord[c], delta, net.shape, strict=True)))
                         for c in pair) for delta in deltas]
        oracle = {image for image in shifted if image not in ran and net.graph.has_edge(*image)}
        assert set(slow) == oracle
