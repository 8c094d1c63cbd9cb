"""The book's estimate of a collective on any topology (``book_s``): bytes over bandwidth, no algorithm.

Where every axis of the group wraps (tori, rings), `simulator.collectives.multi_axis.book_time` gives the
book's own ``max(latency x sum(n) / 2, V / (k W_ici))``. Everywhere else the estimate is the
bandwidth-only form the book writes for that network (V as `run_collective` defines it, n chips):

- grids with a line among the axes: ``(n - 1) / n x V / sum(W_a)`` for AllGather and ReduceScatter, W_a = 2b
  on an axis that wraps and b on one that does not (a line carries the array one way: "about twice a ring";
  the book's own v5e example, 34 MB over an unwrapped axis of 4, is 3/4 x 34 MB / 45 GB/s = 560 us);

Only on healthy hardware: under faults (a dead or slow link, a slow chip) the book has no formula, and
`book_estimate_under_faults` says why ``book_s`` is absent.
- one switch (an NVLink node; book, gpus): ``(n - 1) / n x V / W`` with W a chip's egress;
- two levels -- K domains (GPU nodes, TPU slices) of m chips -- the slower level (book, gpus: "bounded by
  the node level" or by the node egress): ``max(inner, (K - 1) / K x V / (m W_out))``, where ``m W_out`` is
  a domain's egress (8 x 50 GB/s = 400 GB/s for an H100 node) and the inner term is the switch form over a
  chip's fast links (its NVLink port, or a slice chip's ICI links together);
- AllReduce twice AllGather; AllToAll a quarter of AllGather on a grid (the book's ring rule) and, through
  switches, each chip's ``V / n^2`` to each of the others over its own links; Broadcast, Reduce, Gather
  and Scatter the root's bytes over the root's links (V, or ``(n - 1) / n x V`` for Gather and Scatter).
"""
from __future__ import annotations

from typing import Any

from simulator.collectives.groups import Group
from simulator.collectives.multi_axis import book_time
from simulator.engine.network import Network

ROOTED = ("broadcast", "reduce", "gather", "scatter")
NO_BOOK_UNDER_FAULTS = ("book_s absent: the book's formulas are for healthy hardware (every link alike), and this "
                        "system has faults or jitter")


def book_estimate(kind: str, group: Group, net: Network, parts: int, nbytes: float,
                  root_pos: tuple[int, ...] | None = None) -> float | None:
    """Seconds the book would estimate for ``kind`` of ``nbytes`` over ``group`` (see the module docstring);
    None for a kind it has no form for."""
    exact = book_time(kind, group, net, parts, nbytes)
    if exact is not None:
        return exact
    n = group.n
    if n <= 1:
        return 0.0
    root = group.members[root_pos if root_pos is not None else tuple(0 for _ in group.sizes)]
    domains = _domains(net, group)
    if len(domains) > 1:
        return _two_level(kind, net, group, domains, nbytes, root)
    if net.grid or net.graph.graph.get("kind") == "multislice":
        return _grid(kind, net, group, nbytes, root_pos)
    return _switch(kind, n, _egress(net, root, outer=False), nbytes)


def _gather_bytes(kind: str, n: int, nbytes: float) -> float | None:
    """Bytes the busiest chip's links carry (per chip), with the book's (n - 1) / n where it writes one."""
    share = (n - 1) / n * nbytes
    return {"all_gather": share, "reduce_scatter": share, "all_reduce": 2 * share, "all_to_all": share / n,
            "broadcast": nbytes, "reduce": nbytes, "gather": share, "scatter": share}.get(kind)


def _switch(kind: str, n: int, egress: float, nbytes: float) -> float | None:
    moved = _gather_bytes(kind, n, nbytes)
    return None if moved is None else moved / egress


def _grid(kind: str, net: Network, group: Group, nbytes: float, root_pos: tuple[int, ...] | None) -> float | None:
    zero = tuple(0 for _ in group.sizes)
    bandwidth = [_axis_bandwidth(net, group, a, zero) for a in range(len(group.sizes))]
    one_way = sum(bw * (2 if wrap else 1) for bw, wrap in zip(bandwidth, group.wraps, strict=True))
    gather = (group.n - 1) / group.n * nbytes / one_way  # the book's (N - 1) / N: each chip lacks all but its shard
    if kind in ROOTED:  # the root's out (or in) directions: 2 along an axis unless it sits at a line's end
        pos = root_pos or zero
        out = sum(bw * (2 if w or 0 < p < s - 1 else 1) for bw, w, p, s in
                  zip(bandwidth, group.wraps, pos, group.sizes, strict=True) if s > 1)
        return _gather_bytes(kind, group.n, nbytes) / out
    # the book's latency floor, T_min x the longest path: s/2 hops round an axis that wraps, s - 1 along a line
    # (its v5e example: a 32 kB shard over an unwrapped axis of 4 is "latency bound ... 3 hops, 3 us")
    hops = sum(s / 2 if w else s - 1 for s, w in zip(group.sizes, group.wraps, strict=True))
    floor = hops * _hop_latency(net, group)
    return {"all_gather": max(gather, floor), "reduce_scatter": max(gather, floor),
            "all_reduce": 2 * max(gather, floor), "all_to_all": nbytes / one_way / 4}.get(kind)


def _hop_latency(net: Network, group: Group) -> float:
    """A link's latency between two chips of ``group`` (seconds; the slowest link out of its first chip)."""
    members = set(group.members.values())
    first = group.members[tuple(0 for _ in group.sizes)]
    return max((data.get("latency_s", 0.0) for _, v, data in net.graph.out_edges(first, data=True) if v in members),
               default=0.0)


def _two_level(kind: str, net: Network, group: Group, domains: dict[Any, list[Any]], nbytes: float,
               root: Any) -> float | None:
    """max(inner, outer): the inner level on a domain's switch or grid, the outer over every chip's own NIC."""
    k, n = len(domains), group.n
    m = n // k
    out = _egress(net, root, outer=True)
    if kind == "all_to_all":  # each chip sends V/n^2 to each chip: m - 1 of them at home, n - m away
        inner = (m - 1) * nbytes / n**2 / _egress(net, root, outer=False) if m > 1 else 0.0  # one chip a domain
        return max(inner, (n - m) * nbytes / n**2 / out)
    moved = _gather_bytes(kind, k, nbytes)
    if moved is None:
        return None
    inner = _switch(kind, m, _egress(net, root, outer=False), nbytes) if m > 1 else 0.0
    return max(inner or 0.0, moved / (m * out))  # a domain's m chips leave by their m ports at once


def _domains(net: Network, group: Group) -> dict[Any, list[Any]]:
    """The group's chips by node or slice (one domain on single-level topologies)."""
    if net.graph.graph.get("kind") not in ("nodes", "multislice"):
        return {0: list(group.members.values())}
    out: dict[Any, list[Any]] = {}
    for chip in group.members.values():
        out.setdefault(net.graph.nodes[chip].get("group"), []).append(chip)
    return out


def _egress(net: Network, chip: Any, outer: bool) -> float:
    """A chip's one-way bandwidth out: its slow uplink (IB, DCN) with ``outer``, else its fast one."""
    slow = ("ib", "dcn")
    edges = [d for _, _, d in net.graph.out_edges(chip, data=True)
             if (d.get("kind") in slow) == outer and d.get("kind") != "pcie"]  # a host link carries no collective
    return sum(d["bandwidth_bytes_per_s"] for d in edges) if not outer else max(
        d["bandwidth_bytes_per_s"] for d in edges)


def _axis_bandwidth(net: Network, group: Group, axis: int, pos: tuple[int, ...]) -> float:
    """One-way bandwidth between neighbours along ``axis`` of the group (its route's slowest link)."""
    ring = group.ring(pos, axis)
    if len(ring.devices) < 2:
        return 0.0
    path = net.routes(ring.devices[0], ring.devices[1])[0]
    return min(net.graph.edges[u, v]["bandwidth_bytes_per_s"] for u, v in zip(path, path[1:], strict=False))
