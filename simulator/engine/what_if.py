"""Notes on a topology that is not the chip's own: what-ifs are allowed, but the output says so.

A GPU preset on a torus or ring (GPUs hang off NVLink switches), a TPU on a switch (TPUs link to their
torus neighbours), a torus of more axes than the chip's slices have, or a ``slice:`` shape no real
slice has (`topologies.shapes.slice_shapes` lists the shapes Cloud TPU sells) all simulate as given;
`topology_notes` words each for the run's output (`System.notes`, shown by `Result.summary`).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from simulator.hardware.specs import ChipSpec

if TYPE_CHECKING:  # annotations only: a lone chip's System loads no NetworkX
    import networkx as nx

_SWITCHED = ("switch", "nodes")  #: graph kinds whose chips meet in a switch


def topology_notes(chip: ChipSpec, graph: nx.DiGraph | None) -> list[str]:
    """One sentence per way ``graph`` is not a topology ``chip`` is built into (empty when it is)."""
    if graph is None:
        return []
    kind, shape = graph.graph.get("kind"), tuple(graph.graph.get("shape", ()))
    spec = graph.graph.get("spec", kind)
    notes = []
    if chip.wraparound == "switch" and kind not in _SWITCHED:
        notes.append(f"{chip.name} GPUs connect through NVLink switches, not by {kind} links between "
                     f"neighbours: {spec} is a what-if (each link at the chip's per-link bandwidth)")
    elif chip.wraparound != "switch" and kind in _SWITCHED:
        notes.append(f"{chip.name} chips link to their torus neighbours over ICI, not through a switch: {spec} is "
                     "a what-if (each chip's switch port at its total ICI bandwidth)")
    elif chip.torus_dims and kind != "multislice" and len([n for n in shape if n > 1]) > chip.torus_dims:
        notes.append(f"{chip.name} slices are {chip.torus_dims}-D tori: {spec} ({len(shape)} axes) is a what-if")
    notes += _slice_notes(chip, graph)
    return notes


def _slice_notes(chip: ChipSpec, graph: nx.DiGraph) -> list[str]:
    """A slice (or a multislice's slice) of a shape Cloud TPU does not sell."""
    rule = graph.graph.get("slice_rule")
    if rule not in ("length16", "multiple4"):
        return []
    shape = tuple(graph.graph.get("slice_shape") or graph.graph.get("shape", ()))
    if is_real_slice(shape, rule):
        return []
    from topologies.shapes import slice_shapes

    n = math.prod(shape)
    real = slice_shapes(n, rule)
    offer = f"real {n}-chip slices: {', '.join(_x(s) for s in real)}" if real else f"no real slice has {n} chips"
    return [f"no real {chip.name} slice is {_x(shape)} ({offer}); simulated as given, a what-if"]


def is_real_slice(shape: tuple[int, ...], rule: str) -> bool:
    """Whether ``shape`` (any axis order, size-1 axes ignored) is a slice Cloud TPU offers under ``rule``.

    >>> is_real_slice((8, 2, 1), "length16"), is_real_slice((3, 8), "length16")
    (False, False)
    >>> is_real_slice((4, 2), "length16"), is_real_slice((4, 4, 8), "multiple4")
    (True, True)
    """
    def core(s: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(sorted(n for n in s if n > 1))

    from topologies.shapes import slice_shapes

    return core(shape) in {core(s) for s in slice_shapes(math.prod(shape), rule)}


def _x(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape))
