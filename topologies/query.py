"""Questions the simulator asks of a topology: which chips, where a coordinate lives, rings, link counts."""

from __future__ import annotations

import operator
from collections.abc import Sequence

import networkx as nx

from topologies.errors import TopologyError
from topologies.validate import format_shape


def chips(G: nx.DiGraph) -> list[int]:
    """Return the chip nodes of ``G`` (``role == "chip"``), sorted.

    Examples
    --------
    >>> from topologies import switch
    >>> chips(switch(4))
    [0, 1, 2, 3]
    """
    return sorted(v for v, role in G.nodes(data="role") if role == "chip")


def coord_to_node(G: nx.DiGraph, coord: Sequence[int]) -> int:
    """Return the chip at ``coord`` (a tuple of ints, one per axis of ``G.graph["shape"]``).

    Examples
    --------
    >>> from topologies import torus
    >>> coord_to_node(torus((4, 4)), (1, 2))
    6
    """
    shape = tuple(G.graph.get("shape", ()))
    point = _as_point(coord)
    index = None if point is None else _row_major_index(point, shape)
    if index is None or G.nodes.get(index, {}).get("coord") != point:
        raise TopologyError(
            f"coordinate {coord!r} is not a chip of shape {format_shape(shape)!r}; each entry must "
            "be an integer from 0 to its axis length - 1"
        )
    return index


def axis_ring(G: nx.DiGraph, node: int, axis: int) -> list[int]:
    """Return the chips along ``axis`` through chip ``node``, in coordinate order.

    Whether the last wraps to the first is ``G.graph["wrap"][axis]``.

    Examples
    --------
    >>> from topologies import torus
    >>> axis_ring(torus((4, 4)), 6, 0)
    [2, 6, 10, 14]
    """
    coord = _chip_coord(G, node)
    shape = tuple(G.graph["shape"])
    if isinstance(axis, bool) or not isinstance(axis, int) or not 0 <= axis < len(shape):
        last = len(shape) - 1
        raise TopologyError(
            f"axis {axis!r} is out of range for shape {format_shape(shape)!r}; valid axes are 0 to {last}"
        )
    return [coord_to_node(G, coord[:axis] + (i,) + coord[axis + 1 :]) for i in range(shape[axis])]


def num_links(G: nx.DiGraph, kind: str | None = None) -> int:
    """Count links (a link is a pair of opposite directed edges), optionally only those of ``kind``.

    Examples
    --------
    >>> from topologies import ring
    >>> num_links(ring(8)), num_links(ring(8), "pcie")
    (8, 0)
    """
    pairs = {frozenset((u, v)) for u, v, k in G.edges(data="kind") if kind is None or k == kind}
    return len(pairs)


def _chip_coord(G: nx.DiGraph, node: object) -> tuple[int, ...]:
    if node not in G or G.nodes[node].get("role") != "chip":
        last = len(chips(G)) - 1
        raise TopologyError(f"node {node!r} is not a chip of this topology; chips are 0 to {last}")
    return tuple(G.nodes[node]["coord"])


def _as_point(coord: object) -> tuple[int, ...] | None:
    """``coord`` as a tuple of ints, or None when it is not a sequence of integers."""
    if not isinstance(coord, Sequence) or isinstance(coord, str) or any(isinstance(c, bool) for c in coord):
        return None
    try:
        return tuple(operator.index(c) for c in coord)
    except TypeError:
        return None


def _row_major_index(point: tuple[int, ...], shape: tuple[int, ...]) -> int | None:
    if len(point) != len(shape) or not all(0 <= c < n for c, n in zip(point, shape, strict=True)):
        return None
    index = 0
    for c, n in zip(point, shape, strict=True):
        index = index * n + c
    return index
