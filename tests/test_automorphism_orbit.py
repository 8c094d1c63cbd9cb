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


def test_an_offset_takes_a_freely_moved_node_to_its_orbits_representative():
    """`Automorphisms.offset` against the definition, element by element: a node whose images under the |G|
    elements are all different has the one element taking it to its orbit's smallest member (chips by id, before
    switches by name); any other node has none. On nodes:3:2 by hand: chip 3 is node 1's rail 1, so two node
    rotations back and one rail swap, (2, 1), take it to chip 0; the switches stay."""
    from simulator.acceleration.slice_symmetry import slice_actions

    for topology, actions in (("nodes:3:2", node_actions), ("nodes:4:8", node_actions)):
        net = System("h100", topology=topology).network
        for action in actions(net):
            _check_offsets(net, action)
    net = System("tpu-v5e", topology="multislice:2:4x4").network
    for action in slice_actions(net):
        _check_offsets(net, action)
    action = node_actions(System("h100", topology="nodes:3:2").network)[0]
    assert action.offset(3) == (2, 1) and action.offset(0) == (0, 0) and action.offset("ib0") is None


def _check_offsets(net, action):
    def key(x):
        return (isinstance(x, str), str(x) if isinstance(x, str) else x)

    elements = list(action.elements())
    for v in net.graph.nodes:
        images = [action.apply(h, v) for h in elements]
        if len(set(images)) < action.order:
            assert action.offset(v) is None, (action.name, v)
            continue
        rep = min(images, key=key)
        (h,) = [h for h, w in zip(elements, images, strict=True) if w == rep]  # the one element taking v there
        assert action.offset(v) == h, (action.name, v)
