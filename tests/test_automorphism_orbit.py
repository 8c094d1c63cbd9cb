"""`Automorphisms.orbit` (every image of a node at once, for unfolding a quotient run) against the images one
element at a time and against a rotation worked by hand."""
from simulator.acceleration.automorphisms import node_actions
from simulator.engine.system import System


def test_an_orbit_lists_the_images_in_element_order():
    """`Automorphisms.orbit` (every image at once, for unfolding) against the images one element at a time, and
    against the rotation worked by hand: on nodes:3:2 node k holds chips 2k, 2k + 1, the node rotation moves a
    chip on two ids (mod 6) and the rail rotation swaps a node's two chips."""
    net = System("h100", topology="nodes:3:2").network
    action = node_actions(net)[0]
    assert action.name == "nodes+rails" and action.order == 6
    for v in net.graph.nodes:
        assert action.orbit(v) == [action.apply(h, v) for h in action.elements()]
    assert action.orbit(0) == [0, 1, 2, 3, 4, 5]  # (node e0, rail e1), the rail fastest
    assert action.orbit(3) == [3, 2, 5, 4, 1, 0]
    assert action.orbit("ib0") == ["ib0"] * 6  # the InfiniBand switch stays
