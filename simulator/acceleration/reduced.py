"""Reduced mode: one ring per axis stands for every ring of that axis (wrapped, uniform, fault-free grids).

The algorithm builds it (`simulator.collectives.algorithm.Job.reduced`: the first group only, where it declares
`Capabilities.reduced`); this module decides when a job may be reduced and counts the bytes of the rings that did
not run, and names on the trace the links they stood for (`stand_in_rings`). Moved here from
`simulator.collectives.api` (issue 28), which asks through `simulator.collectives.fast_path`.
"""
from __future__ import annotations

import itertools
import math
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from simulator.acceleration.unfolding import Translates, stand_ins
from simulator.collectives.algorithm import REDUCED_KINDS, Algorithm, algorithms
from simulator.errors import PodsimError

if TYPE_CHECKING:  # annotations only
    from simulator.collectives.groups import Group
    from simulator.engine.network import Network


def eligible(mode: str, kind: str, data: Any, group: Group, net: Network, one_to_one: bool = True) -> bool:
    """Whether the network and job allow one representative ring per axis: every ring of an axis behaves alike
    where every axis wraps or has two chips (both ways are then the one link)."""
    symmetric = all(w or n == 2 for n, w in zip(group.sizes, group.wraps, strict=True))
    eligible = data is None and kind in REDUCED_KINDS and net.grid \
        and symmetric and one_to_one and net.uniform and not group.shared  # faults, jitter, shared links: differ
    if mode == "reduced" and not eligible:
        raise PodsimError("mode='reduced' needs a timing-only AllGather, ReduceScatter or AllReduce over axes that "
                          "all wrap (or have two chips), none a strided factor of a physical axis; use mode='full'")
    return eligible


def use(mode: str, eligible: bool, algorithm: Algorithm, auto: bool = False) -> bool:
    """Reduced mode where the job allows it and ``algorithm`` declares it (`Capabilities.reduced`): an
    algorithm that builds every group whatever ``Job.reduced`` says would have its bytes counted again
    for rings it built already. ``mode='reduced'`` with an algorithm asked for by name that does not declare
    it is an error; with ``auto`` (the fastest algorithm, whichever it is) it runs that algorithm in full."""
    if mode == "reduced" and not algorithm.capabilities.reduced and not auto:
        able = [a.name for a in algorithms() if a.capabilities.reduced]
        raise PodsimError(f"mode='reduced': algorithm {algorithm.name!r} does not declare reduced mode "
                          f"(capabilities.reduced=False); algorithms that do: {', '.join(able)}; or use mode='full'")
    return eligible and mode != "full" and algorithm.capabilities.reduced


def total_link_bytes(net: Network, groups: list[Group], group: Group, link_bytes: dict[str, float]) -> float:
    """Bytes over all links of the full system, from the representative rings of a reduced run:
    each link of axis a stands for the ``groups * n / n_a`` rings along that axis."""
    total = 0.0
    for u, v in net.links:
        n_axis = net.shape[net.graph.edges[u, v]["axis"]]
        total += link_bytes.get(f"{u}->{v}", 0.0) * len(groups) * group.n / n_axis
    return total


def ring_stand_ins(net: Network, groups: list[Group],
                   ran: set[tuple[Any, Any]]) -> dict[tuple[Any, Any], tuple[Any, Any]]:
    """After a reduced run, each link (u, v) between chips of ``groups`` that did not run, mapped to the ring link
    in ``ran`` it is a translate of across the other axes: the same axis, the same coordinates along it (so a line
    never lands on the wraparound it does not use). Each ring of an axis is such a translate of the one that ran."""
    members = {c for g in groups for c in g.members.values()}
    coord = dict(net.graph.nodes(data="coord"))

    def key(u: Any, v: Any) -> tuple[Any, Any, Any] | None:
        axis = net.graph.edges[u, v].get("axis")
        return None if axis is None or coord.get(u) is None or coord.get(v) is None else \
            (axis, coord[u][axis], coord[v][axis])
    reps: dict[tuple[Any, Any, Any], tuple[Any, Any]] = {}
    for u, v in ran:
        if (k := key(u, v)) is not None:
            reps.setdefault(k, (u, v))
    out: dict[tuple[Any, Any], tuple[Any, Any]] = {}
    for u, v in net.graph.edges:  # `net.links` holds only the links made so far (made on first use)
        if (u, v) not in ran and u in members and v in members:
            k = key(u, v)
            rep = None if k is None else reps.get(k)
            if rep is not None:
                out[u, v] = rep
    return out


def every_link_bytes(net: Network, groups: list[Group], link_bytes: dict[str, float]) -> dict[str, float]:
    """A reduced run's bytes per link (``"u->v"``) on every link of the system: each link of a ring that did not
    run carries what the ring link it is a translate of carried (`ring_stand_ins`; the rings of an axis run alike
    on their own links, `eligible`). ``link_bytes`` (what ran) is kept as it is."""
    ran = {pair for pair in net.links if f"{pair[0]}->{pair[1]}" in link_bytes}
    out = dict(link_bytes)
    for (u, v), (ru, rv) in ring_stand_ins(net, groups, ran).items():
        out[f"{u}->{v}"] = link_bytes[f"{ru}->{rv}"]
    return out


_GRID_TRANSLATIONS: weakref.WeakKeyDictionary[Any, tuple[Any, Translates]] = weakref.WeakKeyDictionary()


def grid_translations(net: Network) -> Translates:
    """Every translation of ``net``'s grid (a wrapped torus, or axes of two chips: there ``+1`` is the one link back),
    as `Translates`: move ``k`` adds the k-th offset (row-major) to every chip's coordinates, modulo the shape. One
    object a network and graph (its memo of orbits serves every caller of the same run)."""
    known = _GRID_TRANSLATIONS.get(net)
    if known is not None and known[0] is net.graph:
        return known[1]
    moves = _grid_translations(net)
    _GRID_TRANSLATIONS[net] = (net.graph, moves)
    return moves


def _grid_translations(net: Network) -> Translates:
    shape = net.shape
    coord = {v: tuple(c) for v, c in net.graph.nodes(data="coord") if c is not None}
    at = {c: v for v, c in coord.items()}
    deltas = list(itertools.product(*map(range, shape)))

    def translate(k: int, chip: Any) -> Any:
        return at[tuple((x + d) % n for x, d, n in zip(coord[chip], deltas[k], shape, strict=True))]

    if not all(len(c) == len(shape) and all(0 <= x < n for x, n in zip(c, shape, strict=True)) for c in at):
        return Translates(len(deltas), translate, group=True)
    cell = np.full(math.prod(shape), None, dtype=object)  # the chip at each flat (row-major) coordinate, or None
    for c, v in at.items():
        cell[np.ravel_multi_index(c, shape)] = v
    offsets, sizes = np.array(deltas, dtype=np.int64).reshape(len(deltas), len(shape)), np.array(shape)

    def every(chip: Any) -> list[Any]:
        """``[translate(k, chip) for k ...]`` in one step (a chip without coordinates: None for each move)."""
        if chip not in coord:
            return [None] * len(deltas)
        moved = (np.array(coord[chip], dtype=np.int64) + offsets) % sizes
        return cell[np.ravel_multi_index(tuple(moved.T), shape)].tolist()
    return Translates(len(deltas), translate, every, group=True)


def stand_in_rings(net: Network, groups: list[Group], link_bytes: dict[str, float]) -> None:
    """After a reduced run, name on the trace (`simulator.acceleration.unfolding.Unfolding`) the links of the rings
    that did not run, each stood for by the ring link it is a translate of (``link_bytes``: what the run carried
    per link, ``"u->v"``): every ring of an axis runs alike on its own links (`eligible`), so its spans are the
    representative ring's. Only links between chips of ``groups`` are named."""
    trace = net.trace
    if trace is None or not trace.enabled:
        return
    ran = {pair for pair in net.links if f"{pair[0]}->{pair[1]}" in link_bytes}
    stood_for: dict[tuple[Any, Any], list[tuple[Any, Any]]] = {}
    for pair, rep in ring_stand_ins(net, groups, ran).items():
        stood_for.setdefault(rep, []).append(pair)
    unfolding = stand_ins(trace)
    for rep_pair, images in stood_for.items():
        link = net.links[rep_pair]
        unfolding.add_links((link.chip, link.name), [(c.chip, c.name) for c in (net.link(u, v) for u, v in images)])
