"""Tori, meshes, rings and lines: chips on a grid, linked to their neighbours along each axis.

Chips are ints ``0..n-1`` in row-major order of their coordinates (the last axis varies fastest), with
node attributes ``coord`` and ``role="chip"``. Each neighbour link is a pair of directed edges with
attributes ``axis``, ``direction`` (+1 towards the higher coordinate, -1 back; a wraparound edge from
the last chip to the first counts as +1) and ``wrap``.

Small axes, decided explicitly:

- A size-1 axis has no links along it (no self loops) and its effective wrap is False.
- A size-2 axis has ONE link (one edge per direction) between its two chips. A wraparound requested on
  it adds nothing: both neighbours are the same chip and a DiGraph holds no parallel edges. Its
  effective wrap is therefore recorded as False, so ``G.graph["wrap"]`` never claims a ring that would
  double the bandwidth between the pair.
- An axis of size >= 3 with wrap requested gets the wraparound link pair, marked ``wrap=True``.

``G.graph["wrap"]`` holds the effective wraparound per axis; ``G.graph["shape"]`` the axis lengths.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence

import networkx as nx

from topologies.errors import TopologyError
from topologies.links import Link
from topologies.validate import check_count, check_shape, check_size, format_shape

DEFAULT_ICI_BANDWIDTH_BYTES_PER_S = 4.5e10
"""One-way ICI bandwidth per link (bytes/s): tpu-v4 / tpu-v5e (REFERENCE.md chip table)."""

DEFAULT_ICI_LATENCY_S = 1e-6
"""ICI hop latency (s): about 1 µs (REFERENCE.md)."""


def torus(
    shape: Sequence[int],
    wrap: bool | Sequence[bool] = True,
    *,
    bandwidth_bytes_per_s: float = DEFAULT_ICI_BANDWIDTH_BYTES_PER_S,
    latency_s: float = DEFAULT_ICI_LATENCY_S,
    kind: str = "ici",
) -> nx.DiGraph:
    """Build a torus (or mesh) of chips with per-axis wraparound.

    Parameters
    ----------
    shape : sequence of int
        Axis lengths, each >= 1; at most `MAX_CHIPS` chips in all.
    wrap : bool or sequence of bool
        Wraparound requested on every axis (bool) or per axis. Size-1 and size-2 axes never get an
        extra wraparound link (see the module docstring).
    bandwidth_bytes_per_s : float
        One-way bandwidth of each link direction (bytes/s).
    latency_s : float
        Latency of one hop (seconds).
    kind : str
        Link technology recorded on every edge.

    Returns
    -------
    networkx.DiGraph
        ``graph["kind"] == "torus"``; ``graph["wrap"]`` is the effective wraparound per axis.

    Examples
    --------
    >>> G = torus((4, 4, 4))
    >>> G.number_of_nodes(), G.number_of_edges(), G.graph["wrap"]
    (64, 384, (True, True, True))
    >>> torus((2, 8), wrap=(True, False)).graph["wrap"]
    (False, False)
    """
    axes = check_shape(shape, "torus shape")
    link = Link(bandwidth_bytes_per_s=bandwidth_bytes_per_s, latency_s=latency_s, kind=kind)
    wrap_eff = effective_wrap(axes, requested_wrap(wrap, axes))
    check_size(math.prod(axes), f"torus shape {format_shape(axes)!r}")
    G = nx.DiGraph(kind="torus", shape=axes, wrap=wrap_eff)
    add_grid(G, axes, wrap_eff, link)
    return G


def mesh(
    shape: Sequence[int],
    *,
    bandwidth_bytes_per_s: float = DEFAULT_ICI_BANDWIDTH_BYTES_PER_S,
    latency_s: float = DEFAULT_ICI_LATENCY_S,
    kind: str = "ici",
) -> nx.DiGraph:
    """Build a mesh: a torus with no wraparound on any axis (``graph["kind"] == "mesh"``).

    Parameters are those of `torus` without ``wrap``.

    Examples
    --------
    >>> G = mesh((4, 4))
    >>> G.number_of_edges(), G.out_degree(0), G.graph["wrap"]
    (48, 2, (False, False))
    """
    G = torus(shape, False, bandwidth_bytes_per_s=bandwidth_bytes_per_s, latency_s=latency_s, kind=kind)
    G.graph["kind"] = "mesh"
    return G


def ring(
    n: int,
    *,
    bandwidth_bytes_per_s: float = DEFAULT_ICI_BANDWIDTH_BYTES_PER_S,
    latency_s: float = DEFAULT_ICI_LATENCY_S,
    kind: str = "ici",
) -> nx.DiGraph:
    """Build a ring of ``n`` chips: a 1-D torus (``graph["kind"] == "ring"``).

    ``ring(1)`` has no edges and ``ring(2)`` one link pair, both with effective wrap False.

    Examples
    --------
    >>> G = ring(8)
    >>> G.number_of_edges(), G.graph["shape"], G.graph["wrap"]
    (16, (8,), (True,))
    """
    size = check_count(n, "ring size")
    G = torus((size,), True, bandwidth_bytes_per_s=bandwidth_bytes_per_s, latency_s=latency_s, kind=kind)
    G.graph["kind"] = "ring"
    return G


def line(
    n: int,
    *,
    bandwidth_bytes_per_s: float = DEFAULT_ICI_BANDWIDTH_BYTES_PER_S,
    latency_s: float = DEFAULT_ICI_LATENCY_S,
    kind: str = "ici",
) -> nx.DiGraph:
    """Build a line of ``n`` chips: a 1-D mesh, ``n - 1`` link pairs (``graph["kind"] == "line"``).

    Examples
    --------
    >>> G = line(8)
    >>> G.number_of_edges(), G.graph["wrap"]
    (14, (False,))
    """
    size = check_count(n, "line size")
    G = torus((size,), False, bandwidth_bytes_per_s=bandwidth_bytes_per_s, latency_s=latency_s, kind=kind)
    G.graph["kind"] = "line"
    return G


def requested_wrap(wrap: bool | Sequence[bool], shape: tuple[int, ...]) -> tuple[bool, ...]:
    """Expand ``wrap`` (one bool, or one per axis) to a tuple of bools, one per axis of ``shape``."""
    if isinstance(wrap, bool):
        return (wrap,) * len(shape)
    if not isinstance(wrap, Sequence) or isinstance(wrap, str) or len(wrap) != len(shape):
        raise TopologyError(
            f"wrap {wrap!r} does not fit shape {format_shape(shape)!r}; "
            f"pass True, False or a tuple of {len(shape)} bools"
        )
    if not all(isinstance(w, bool) for w in wrap):
        raise TopologyError(f"wrap {wrap!r} must hold only True or False, one per axis")
    return tuple(wrap)


def effective_wrap(shape: tuple[int, ...], wrap: tuple[bool, ...]) -> tuple[bool, ...]:
    """Wraparound that actually exists: requested, and the axis has at least 3 chips."""
    return tuple(w and n >= 3 for n, w in zip(shape, wrap, strict=True))


def add_grid(
    G: nx.DiGraph,
    shape: tuple[int, ...],
    wrap: tuple[bool, ...],
    link: Link,
    prefix: tuple[int, ...] = (),
) -> None:
    """Add the chips of one grid and its neighbour links to ``G``.

    With a ``prefix`` (a group index such as a slice number) the chips take global coordinates
    ``prefix + local``, ids continuing the row-major order of the global shape, edge ``axis`` values
    offset by ``len(prefix)``, and node attributes ``group`` and ``local_coord``.
    """
    base = _row_major_offset(prefix, math.prod(shape))
    for i, local in enumerate(itertools.product(*(range(n) for n in shape))):
        G.add_node(base + i, **_chip_attrs(prefix, local))
    for axis, w in enumerate(wrap):
        _add_axis(G, shape, axis, w, link, base, len(prefix))


def _row_major_offset(prefix: tuple[int, ...], grid_size: int) -> int:
    # Groups are laid out one after another; only a one-level prefix is used in this package.
    return prefix[0] * grid_size if prefix else 0


def _chip_attrs(prefix: tuple[int, ...], local: tuple[int, ...]) -> dict[str, object]:
    attrs: dict[str, object] = {"coord": prefix + local, "role": "chip"}
    if prefix:
        attrs.update(group=prefix[0], local_coord=local)
    return attrs


def _add_axis(
    G: nx.DiGraph, shape: tuple[int, ...], axis: int, wrap: bool, link: Link, base: int, offset: int
) -> None:
    """Every link along ``axis`` (`add_axis_link`'s two directions each, in the same order), added at once."""
    a = axis + offset
    G.add_edges_from((edge for u, v, is_wrap in _axis_pairs(shape, axis, wrap)
                      for edge in ((base + u, base + v, {"axis": a, "direction": 1, "wrap": is_wrap}),
                                   (base + v, base + u, {"axis": a, "direction": -1, "wrap": is_wrap}))),
                     **link.attrs())


def _axis_pairs(shape: tuple[int, ...], axis: int, wrap: bool) -> Iterator[tuple[int, int, bool]]:
    """Yield ``(u, v, is_wrap)`` for each link along ``axis``, ``v`` one step above ``u`` (mod length)."""
    n, stride = shape[axis], math.prod(shape[axis + 1 :])
    for i in range(math.prod(shape)):
        if (i // stride) % n + 1 < n:
            yield i, i + stride, False
        elif wrap and n >= 3:
            yield i, i - (n - 1) * stride, True
