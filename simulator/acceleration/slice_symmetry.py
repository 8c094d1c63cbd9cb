"""Symmetries of multislice systems (TPU slices joined over DCN) for `simulator.acceleration.quotient`.

``multislice:K:AxB`` is K identical slices whose chips each reach the DCN hub by one link each way. Two kinds of
commuting permutations map it onto itself, keeping every link's bandwidth, latency and kind:

- slice rotations, chip (s, c) -> (s + 1 mod K, c): the hub stays, and every chip-hub link is carried by its chip,
  which the rotation moves freely;
- translations inside every slice along a wrapped slice axis, (s, ..., x, ...) -> (s, ..., x + 1 mod n, ...):
  the hub stays too.

`slice_actions` lists the groups they generate (`simulator.acceleration.automorphisms.Automorphisms`, which checks each
permutation), largest first: a step's collectives whose schedules and routes are equivariant under one then run
one transfer per orbit (data=32 x fsdp=256 on 32 v5e-256 slices: 8,192 chips, one representative).
"""
from __future__ import annotations

import itertools
import math
from typing import Any

from simulator.acceleration.automorphisms import Automorphisms, check_automorphism
from simulator.engine.network import Network


def _shift(net: Network, axis: int) -> dict[Any, Any]:
    """Chip coordinate ``axis`` (0: the slice index) moved by one, modulo its length; switches stay."""
    graph = net.graph
    shape = graph.graph["shape"]
    at = {c: v for v, c in graph.nodes(data="coord") if c is not None}
    perm = {}
    for v, d in graph.nodes(data=True):
        if d.get("role") == "chip":
            coord = list(d["coord"])
            coord[axis] = (coord[axis] + 1) % shape[axis]
            perm[v] = at[tuple(coord)]
        else:
            perm[v] = v
    return perm


def slice_actions(net: Network) -> list[Automorphisms]:
    """The symmetry groups of a multislice system (see the module docstring), largest first; none elsewhere (not
    a multislice system, hosts, faults) or where a candidate is not an automorphism."""
    graph = net.graph
    if graph.graph.get("kind") != "multislice" or net.faulted:
        return []
    shape, wrap = graph.graph["shape"], graph.graph["wrap"]
    makers = [("slices", shape[0], 0)] if shape[0] > 1 else []
    makers += [(f"slice axis {a - 1}", shape[a], a) for a in range(1, len(shape)) if wrap[a] and shape[a] > 1]
    subsets = [c for r in range(len(makers), 0, -1) for c in itertools.combinations(makers, r)]
    perms: dict[int, dict[Any, Any] | None] = {}  #: each generator built and checked once (the subsets share them)
    for _, _, axis in makers:
        try:
            perm = _shift(net, axis)
            check_automorphism(graph, perm)
        except (ValueError, KeyError):
            perm = None
        perms[axis] = perm
    out = []
    for chosen in sorted(subsets, key=lambda c: -math.prod(k for _, k, _ in c)):  # stable: more generators first
        generators = [(perm, k) for _, k, axis in chosen if (perm := perms[axis]) is not None]
        if len(generators) < len(chosen):  # a generator that is not an automorphism
            continue
        try:
            action = Automorphisms(net, generators, "+".join(n for n, _, _ in chosen), checked=True)
        except (ValueError, KeyError):  # not of its order, or generators that do not commute
            continue
        action.scaled = None
        out.append(action)
    return out
