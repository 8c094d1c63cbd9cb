"""The topology's lower bound on a collective's time, from the graph alone (no algorithm involved).

Facts used, those of `simulator.engine.network`: a link direction carries at most its bandwidth, and
moves no byte of a message before the latencies of its own and the earlier links of the route have
passed; switches and chips outside a group forward data, they never add it (the exception: an NVLink
SHARP switch adds data itself -- `simulator.collectives.nvls.reduces_in_switch` -- and there the
group-together terms below are dropped). With V as `run_collective` defines it and n devices per
group, the collective needs at least:

- each chip to receive what it lacks through its incoming links: AllGather (n-1)V/n, AllReduce V,
  AllToAll (n-1)V/n^2, Broadcast V (but the root), ReduceScatter V/n, Gather (n-1)V/n and Reduce V (the
  root), Scatter V/n (but the root);
- each chip to send what only it holds through its outgoing links: ReduceScatter (n-1)V/n (its part
  of every other shard), AllReduce V, AllToAll (n-1)V/n^2, AllGather V/n, Broadcast V (the root), Gather
  V/n and Reduce V (but the root), Scatter (n-1)V/n (the root);
- the chips of a group together to receive (n-1)V for ReduceScatter and 2(n-1)V for AllReduce (summing
  one element onto all of n devices takes 2(n-1) one-way messages at least);
- AllToAll: every chunk to cross at least as many links as the fewest-hop route between its ends, all
  links together carrying the chunks' byte-hops (the link-load bound); and on grids, for every slab of
  coordinates along an axis (a prefix of a line, an arc of a ring), the chunks between the members
  inside and those outside to leave the slab through the links that cross its boundary (the cut bound:
  on a line the middle links, on a torus with axes of different lengths the longest axis's links, which
  the link-load bound averages with the idle short axes);
- on grids, each slab one coordinate thick along an axis (a column across the groups' axis) to receive and send
  what its members need from and owe to the members outside it, every group's at once, through the links into
  and out of the slab (`_slab_bound`: a dead cable in one row leaves a column 2R - 1 links in for R chips);
- the farthest member's data (the root's, for Broadcast) to arrive: its route's latency;
- on multi-level systems (GPU nodes, slices over DCN), the K nodes or slices a group spans, whose fabric
  between them cannot add, to receive together (K - 1)V (ReduceScatter) or 2(K - 1)V (AllReduce) through
  the links into them (`_levels_together`); on a multipod the same cuts around each pod, whose links in and
  out are its core links (an AllGather over 2 pods takes V/2 into each pod through its one core link).

A link that can first move bytes at time d, with bandwidth b, carries at most b (T - d) by time T; each
bound is the smallest T at which its links can have carried its bytes. The result is the largest.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import networkx as nx
import numpy as np

from simulator.collectives.groups import Group
from simulator.collectives.nvls import reduces_in_switch
from simulator.engine.network import Network

Link = tuple[float, float]  #: (first time it can move bytes s, bandwidth bytes/s)
ROOTED = ("broadcast", "gather", "scatter", "reduce")  #: kinds with a root (``root_pos``)


def topology_bound(kind: str, net: Network, groups: list[Group], nbytes: float, root_pos: tuple[int, ...]) -> float:
    """Seconds below which no algorithm can finish ``kind`` of ``nbytes`` on these groups (0 for one chip)."""
    n = groups[0].n
    if n <= 1:
        return 0.0
    g = _fabric(net)
    first_in = _Quickest(g.pred)  # a node's quickest incoming link: data from elsewhere arrives no sooner
    first_out = _Quickest(g.succ)
    bound = _latency_bound(kind, net, groups[0], root_pos)
    together = {"reduce_scatter": (n - 1) * nbytes, "all_reduce": 2 * (n - 1) * nbytes}.get(kind, 0.0)
    if reduces_in_switch(net):  # the exception: an NVLS switch adds data itself (`simulator.collectives.nvls`)
        together = 0.0
    for group in groups:
        members = set(group.members.values())
        root = group.members[root_pos] if kind in ROOTED else None
        holders = {root} if kind in ("broadcast", "scatter") else members
        into_group: list[Link] = []
        for c in members:
            receive, send = _chip_bytes(kind, n, nbytes, c == root)
            into = _in_links(g, c, holders, first_in)
            into_group += into
            bound = max(bound, fill(into, receive), fill(_out_links(g, c, members, first_out), send))
        bound = max(bound, fill(into_group, together))  # holders are the members for these kinds
    bound = max(bound, _region_bound(kind, net, groups, nbytes, root_pos))
    if net.graph.graph.get("pods", 0) > 1:  # the pods of a multipod: a second cut, through the slower core
        bound = max(bound, _region_bound(kind, net, groups, nbytes, root_pos, "pod"))
    bound = max(bound, _axis_load_bound(kind, net, groups, nbytes))
    bound = max(bound, _slab_bound(kind, net, groups, nbytes, root_pos))
    if kind in ROOTED and len(groups) > 1:
        bound = max(bound, _roots_together(kind, g, groups, nbytes, root_pos))
    if kind == "all_to_all":
        bound = max(bound, _link_load_bound(net, groups, nbytes / n**2))
        if net.grid:
            bound = max(bound, _cut_bound(net, groups, nbytes / n**2))
    return bound


#: axis-a byte-hops per byte of V and per step between coordinate classes (see `_axis_load_bound`)
AXIS_CROSSINGS = {"all_gather": 1.0, "reduce_scatter": 1.0, "all_reduce": 2.0, "broadcast": 1.0}


def _axis_load_bound(kind: str, net: Network, groups: list[Group], nbytes: float,
                     own: bool = False) -> float:
    """Hop-weighted link load along each grid axis, over every group that runs at once (issue 31).

    Only a link of axis a changes a chip's coordinate along a, by one. Class a group's members by their
    coordinate along a (k_a classes); a tree reaching all k_a classes has at least k_a - 1 axis-a links. An
    AllGather shard reaches every class from its own (a copy that detours through chips outside the group still
    steps along a on axis-a links), so each of the group's V bytes crosses at least k_a - 1 axis-a links;
    ReduceScatter is the AllGather reversed (each output needs inputs from every class), Broadcast the root's V
    to every class; AllReduce sums onto every class, with classes as members that add inside themselves for
    free: 2 (k_a - 1) one-way messages per element (the gossip bound of the module docstring), each crossing an
    axis-a link. All groups' byte-hops share every axis-a link of the system (``own``: only links between two
    members of one group, the links of algorithms that stay on their group's axes).
    """
    per = AXIS_CROSSINGS.get(kind)
    if per is None or not net.grid:
        return 0.0
    g = net.graph
    where = {c: i for i, group in enumerate(groups) for c in group.members.values()} if own else {}
    links: dict[int, list[Link]] = {}
    for u, v, data in g.edges(data=True):
        a = data.get("axis")
        if a is None or (own and (u not in where or where.get(v, -1) != where[u])):
            continue
        links.setdefault(a, []).append((data["latency_s"], data["bandwidth_bytes_per_s"]))
    bound = 0.0
    for a, along in links.items():
        crossings = sum(len({g.nodes[c]["coord"][a] for c in group.members.values()}) - 1 for group in groups)
        bound = max(bound, fill(along, per * crossings * nbytes))
    return bound


def _slab_bound(kind: str, net: Network, groups: list[Group], nbytes: float, root_pos: tuple[int, ...]) -> float:
    """The cut round each slab of a grid one coordinate thick (issue 31): the chips at coordinate x along an axis
    hold m of a group's n members; what those must receive from (send to) the other n - m crosses the links into
    (out of) the slab (`_region_bytes`), every group's at once. On a healthy torus a slab across the groups' axis
    has two links in per chip and gives the rings' own time; a dead cable leaves it 2R - 1 links in for R chips
    (torus:4x4 ``--axes 1``, cable (0,0)-(0,1) down: 4 x 3/4 V over 7 links, 3/7 V / b, where each chip's own
    links in allow 3/4 V over 3)."""
    if not net.grid:
        return 0.0
    g = net.graph
    coord = {v: c for v, c in g.nodes(data="coord") if c is not None}
    into: dict[tuple[int, int], list[Link]] = {}
    out: dict[tuple[int, int], list[Link]] = {}
    for u, v, data in g.edges(data=True):
        if u not in coord or v not in coord:
            continue
        link = (data["latency_s"], data["bandwidth_bytes_per_s"])
        for a, (x, y) in enumerate(zip(coord[u], coord[v], strict=True)):
            if x != y:
                out.setdefault((a, x), []).append(link)
                into.setdefault((a, y), []).append(link)
    need: dict[tuple[int, int], list[float]] = {}
    for group in groups:
        root = group.members[root_pos] if kind in ROOTED else None
        count: dict[tuple[int, int], int] = {}
        for c in group.members.values():
            for a, x in enumerate(coord.get(c, ())):
                count[(a, x)] = count.get((a, x), 0) + 1
        for key, m in count.items():
            has_root = root is not None and coord[root][key[0]] == key[1]
            receive, send = _region_bytes(kind, group.n, m, nbytes, has_root)
            total = need.setdefault(key, [0.0, 0.0])
            total[0] += receive
            total[1] += send
    return max((max(fill(into.get(k, []), r), fill(out.get(k, []), t)) for k, (r, t) in need.items()), default=0.0)


def _roots_together(kind: str, g: nx.DiGraph, groups: list[Group], nbytes: float, root_pos: tuple[int, ...]) -> float:
    """The roots of all groups at once (issue 31): groups are disjoint, so every other member of a group lies
    outside the set R of roots. What the roots must receive from their members (Gather (n-1)V/n, Reduce V) enters
    R through the links into it, and what they must give (Scatter (n-1)V/n; Broadcast V, one copy per group at
    least) leaves through the links out of it. When every group's root sits in one plane (position 0 of an axis
    across a cube) those links are the plane's few axis links, not each root's six."""
    n = groups[0].n
    roots = {group.members[root_pos] for group in groups}
    per = {"gather": (n - 1) * nbytes / n, "reduce": nbytes, "scatter": (n - 1) * nbytes / n, "broadcast": nbytes}[kind]
    inward = kind in ("gather", "reduce")
    links = [(d["latency_s"], d["bandwidth_bytes_per_s"]) for u, v, d in g.edges(data=True)
             if ((v if inward else u) in roots) and ((u if inward else v) not in roots)]
    return fill(links, per * len(groups))


def own_links_bound(kind: str, net: Network, groups: list[Group], nbytes: float,
                    root_pos: tuple[int, ...]) -> float | None:
    """Seconds below which no algorithm whose every hop joins two members of one group (rings and lines on the
    group's own axes) can finish: the per-chip and group-together bounds of `topology_bound` over those links
    alone, and `_axis_load_bound` on them. None off grids (where every link is a group's own). Beside the
    topology bound it shows what borrowing other chips' links could win."""
    n = groups[0].n
    if n <= 1 or not net.grid:
        return None
    g = _fabric(net)
    bound = _axis_load_bound(kind, net, groups, nbytes, own=True)
    together = {"reduce_scatter": (n - 1) * nbytes, "all_reduce": 2 * (n - 1) * nbytes}.get(kind, 0.0)
    for group in groups:
        members = set(group.members.values())
        root = group.members[root_pos] if kind in ROOTED else None
        into_group: list[Link] = []
        for c in members:
            receive, send = _chip_bytes(kind, n, nbytes, c == root)
            into = [(d["latency_s"], d["bandwidth_bytes_per_s"]) for u, d in g.pred[c].items() if u in members]
            out = [(d["latency_s"], d["bandwidth_bytes_per_s"]) for v, d in g.succ[c].items() if v in members]
            into_group += into
            bound = max(bound, fill(into, receive), fill(out, send))
        bound = max(bound, fill(into_group, together))
    return bound


class _Quickest(dict):
    """Node -> latency of its quickest link in ``adjacency`` (computed when first asked for)."""

    def __init__(self, adjacency: Any) -> None:
        super().__init__()
        self.adjacency = adjacency

    def __missing__(self, v: Any) -> float:
        self[v] = min((data["latency_s"] for data in self.adjacency[v].values()), default=0.0)
        return self[v]


def _chip_bytes(kind: str, n: int, nbytes: float, is_root: bool) -> tuple[float, float]:
    """(bytes one chip must receive, bytes it must send) for ``kind`` (see the module docstring)."""
    if kind == "broadcast":
        return (0.0, nbytes) if is_root else (nbytes, 0.0)
    if kind in ("gather", "scatter", "reduce"):
        root_side = {"gather": ((n - 1) * nbytes / n, 0.0), "scatter": (0.0, (n - 1) * nbytes / n),
                     "reduce": (nbytes, 0.0)}[kind]
        member = {"gather": (0.0, nbytes / n), "scatter": (nbytes / n, 0.0), "reduce": (0.0, nbytes)}[kind]
        return root_side if is_root else member
    return {"all_gather": ((n - 1) * nbytes / n, nbytes / n),
            "reduce_scatter": (nbytes / n, (n - 1) * nbytes / n),
            "all_reduce": (nbytes, nbytes),
            "all_to_all": ((n - 1) * nbytes / n**2, (n - 1) * nbytes / n**2)}[kind]


def _in_links(g: nx.DiGraph, c: Any, holders: set[Any], first_in: _Quickest) -> list[Link]:
    """Links into ``c``: a holder's data moves after the link's latency; anyone else's must reach it first."""
    return [(data["latency_s"] + (0.0 if u in holders and u != c else first_in[u]), data["bandwidth_bytes_per_s"])
            for u, data in g.pred[c].items()]


def _out_links(g: nx.DiGraph, c: Any, members: set[Any], first_out: _Quickest) -> list[Link]:
    """Links out of ``c``: bytes must also get from the link's far end to a member before the end."""
    return [(data["latency_s"] + (0.0 if v in members else first_out[v]), data["bandwidth_bytes_per_s"])
            for v, data in g.succ[c].items()]


def fill(links: Iterable[Link], nbytes: float) -> float:
    """Smallest T with sum(b * max(0, T - d)) >= ``nbytes`` over ``links`` of (d, b); 0 for no bytes."""
    if nbytes <= 0:
        return 0.0
    t, rate, carried = 0.0, 0.0, 0.0
    for d, b in sorted(links):
        if rate > 0 and carried + rate * (d - t) >= nbytes:
            break
        carried += rate * (d - t)
        t, rate = d, rate + b
    return t + (nbytes - carried) / rate if rate > 0 else float("inf")


def _latency_bound(kind: str, net: Network, group: Group, root_pos: tuple[int, ...]) -> float:
    """Latency of the quickest route from one member (the root, for Broadcast) to the farthest other member."""
    source = group.members[root_pos if kind in ROOTED else tuple(0 for _ in group.sizes)]
    dist = nx.single_source_dijkstra_path_length(_fabric(net), source, weight="latency_s")
    return max(dist[c] for c in group.members.values())


def _link_load_bound(net: Network, groups: list[Group], chunk_bytes: float) -> float:
    """Every chunk crosses at least its fewest-hop distance; all links together carry the byte-hops."""
    fabric = _fabric(net)
    hops = sum(_grid_hops(net, list(group.members.values())) if net.grid and not net.faulted
               else _graph_hops(fabric, list(group.members.values())) for group in groups)  # faults: the graph run
    links = [(data["latency_s"], data["bandwidth_bytes_per_s"]) for _, _, data in fabric.edges(data=True)]
    return fill(links, hops * chunk_bytes)


def _fabric(net: Network) -> nx.DiGraph:
    """The graph without its hosts (their PCIe links carry no collective)."""
    g = net.graph
    if all(role != "host" for _, role in g.nodes(data="role")):
        return g  # the graph itself: a filtered view costs a filter call per node visited
    return nx.subgraph_view(g, filter_node=lambda v: g.nodes[v].get("role") != "host")


def _grid_hops(net: Network, members: list[Any]) -> int:
    """Fewest links summed over every ordered pair of ``members`` of a grid, by coordinates: per axis, the
    distance between two positions (the shorter way round on a ring) times the members at each."""
    coords = np.array([net.graph.nodes[c]["coord"] for c in members], dtype=np.int64).reshape(len(members), -1)
    total = 0
    for axis, (k, wrap) in enumerate(zip(net.shape, net.wrap, strict=True)):
        at, count = np.unique(coords[:, axis], return_counts=True)
        d = np.abs(at[:, None] - at[None, :])
        if wrap:
            d = np.minimum(d, k - d)
        total += int(count @ d @ count)
    return total


def _graph_hops(fabric: nx.DiGraph, members: list[Any]) -> int:
    """Fewest links summed over every ordered pair of ``members``, by breadth-first search from each."""
    total = 0
    for x in members:
        reach = nx.single_source_shortest_path_length(fabric, x)
        total += sum(reach[y] for y in members)
    return total


def _cut_bound(net: Network, groups: list[Group], chunk_bytes: float) -> float:
    """Chunks from inside a slab of coordinates to members outside it leave through the links that cross the
    slab's boundary: slabs ``[0, m)`` along each axis (on a ring, arcs from position 0 cross two boundaries)."""
    g = net.graph
    bound = 0.0
    for axis, k in enumerate(net.shape):
        steps: dict[tuple[int, int], list[Link]] = {}  # (from, to) coordinate on the axis -> its links
        for u, v, data in g.edges(data=True):
            if data.get("axis") == axis:
                ends = (g.nodes[u]["coord"][axis], g.nodes[v]["coord"][axis])
                steps.setdefault(ends, []).append((data["latency_s"], data["bandwidth_bytes_per_s"]))
        at = [[g.nodes[c]["coord"][axis] for c in group.members.values()] for group in groups]
        for m in range(1, k):
            inside = [sum(x < m for x in xs) for xs in at]
            crossing = sum(i * (len(xs) - i) for i, xs in zip(inside, at, strict=True)) * chunk_bytes
            links = [link for (a, b), ls in steps.items() if a < m <= b for link in ls]  # from inside to outside
            bound = max(bound, fill(links, crossing))
    return bound


def _region_bytes(kind: str, n: int, m: int, nbytes: float, has_root: bool) -> tuple[float, float]:
    """(bytes that must enter, bytes that must leave) a region holding ``m`` of a group's ``n`` members (and the
    root, for rooted kinds) when the other n - m are outside it; data crosses once and may be combined inside."""
    if m == 0 or m == n:
        return 0.0, 0.0
    if kind == "broadcast":
        return (0.0, nbytes) if has_root else (nbytes, 0.0)
    if kind == "scatter":
        return (0.0, (n - m) * nbytes / n) if has_root else (m * nbytes / n, 0.0)
    if kind == "gather":
        return ((n - m) * nbytes / n, 0.0) if has_root else (0.0, m * nbytes / n)
    if kind == "reduce":
        return (nbytes, 0.0) if has_root else (0.0, nbytes)
    return {"all_gather": ((n - m) * nbytes / n, m * nbytes / n),
            "reduce_scatter": (m * nbytes / n, (n - m) * nbytes / n),
            "all_reduce": (nbytes, nbytes),
            "all_to_all": (m * (n - m) * nbytes / n**2, m * (n - m) * nbytes / n**2)}[kind]


def _region_bound(kind: str, net: Network, groups: list[Group], nbytes: float, root_pos: tuple[int, ...],
                  attribute: str = "group") -> float:
    """The cut around each node of a multi-level system (chips and switches sharing a ``group`` attribute:
    ``nodes:``, ``fattree:``, multislice; with ``attribute="pod"``, each pod of a multipod, its slices and its
    DCN switch, whose only links out run to the core): what its members must receive from / send to members
    outside it crosses the links into / out of it (each able to move bytes once its own latency has passed)."""
    g = _fabric(net)
    region = {v: k for v, k in g.nodes(data=attribute) if k is not None}
    if len(set(region.values())) < 2:
        return 0.0
    need: dict[Any, list[float]] = {k: [0.0, 0.0] for k in set(region.values())}
    for group in groups:
        root = group.members[root_pos] if kind in ROOTED else None
        inside: dict[Any, int] = {}
        for c in group.members.values():
            inside[region.get(c)] = inside.get(region.get(c), 0) + 1
        for k, m in inside.items():
            if k is None:
                continue
            receive, send = _region_bytes(kind, group.n, m, nbytes, root is not None and region.get(root) == k)
            need[k][0] += receive
            need[k][1] += send
    into: dict[Any, list[Link]] = {k: [] for k in need}
    out: dict[Any, list[Link]] = {k: [] for k in need}
    for u, v, data in g.edges(data=True):
        a, b = region.get(u), region.get(v)
        if a != b:
            link = (data["latency_s"], data["bandwidth_bytes_per_s"])
            if b is not None:
                into[b].append(link)
            if a is not None:
                out[a].append(link)
    each = max(max(fill(into[k], receive), fill(out[k], send)) for k, (receive, send) in need.items())
    return max(each, _levels_together(kind, groups, region, into, nbytes))


def _levels_together(kind: str, groups: list[Group], region: dict[Any, Any], into: dict[Any, list[Link]],
                     nbytes: float) -> float:
    """The regions together (issue 31): a fabric between nodes or slices forwards data, it never adds it, so
    the K regions a group spans act as K members of a ReduceScatter (which needs (K - 1) V to enter them) or an
    AllReduce (2 (K - 1) V: summing one element onto all of K holders takes 2 (K - 1) one-way messages), all
    through the links into the regions at once: 2 (K - 1) / K x V over a region's ingress, where the per-region
    cut above gives V."""
    per = {"reduce_scatter": 1.0, "all_reduce": 2.0}.get(kind)
    if per is None:
        return 0.0
    total = 0.0
    for group in groups:
        k = len({region.get(c) for c in group.members.values()} - {None})
        total += per * max(k - 1, 0) * nbytes
    return fill([link for links in into.values() for link in links], total)
