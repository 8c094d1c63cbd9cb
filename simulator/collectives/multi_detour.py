"""One row broken by a dead cable, its traffic spread over detours through every other row (issue 31, item 1).

torus:4x4 ``--axes 1`` with cable (0,0)-(0,1) dead: four rows run AllGathers at once, one of them (row 0) has
lost a link. `simulator.collectives.detour_split` sends the broken row's missing step round through row 1
alone, whose link then carries twice a ring's load. Here every hop of the broken row (the missing one and the
live ones next to it) may be split over several routes: direct (a live link), or a detour down the column to
another row r, along row r's link that joins the same two columns, and back up (2 |r| + 1 links, |r| the rows
between). Each detour borrows a little of one link of row r (whose own ring fills it to a/2 V), and the
columns' links, which nothing else uses.

What each row sends: each shard j goes out over trees, each the ring with one link e left out (two chains from
j, clockwise to e and counter-clockwise to e + 1), a weight w[j, e] of the shard per tree. A healthy row keeps
its ring's own trees (`centred`: the link opposite j left out, what the bidirectional ring sends) but cut into
chunks like the broken row's; on the broken row e = the dead link is the line, any other e crosses the dead
link once (on a detour). The broken row's weights and the split of every one of its hops over its routes are a
small linear programme (`plan`, scipy's HiGHS): minimise the busiest link direction's time over every row's
bytes at once (then, among plans as fast, the shallowest trees and shortest routes). ReduceScatter runs the
trees backwards (partial sums toward the owner), AllReduce the ReduceScatter then the AllGather of each piece.
Each tree's share is cut into `CHUNKS` chunks; a chain's chunks leave its first chip in turn.

torus:4x4 of tpu-v5e, 1 GB over axis 1, cable (0,0)-(0,1) dead (healthy 8.335 ms = a/2 V / b, a = 3/4):

| kind | bound (cut) | programme | closed form | simulated | detour_split simulated |
|---|---|---|---|---|---|
| AllGather (8 chunks) | 9.524 ms | 9.524 ms | 10.72 ms | 10.71 ms | 15.28 ms |
| ReduceScatter (16 chunks, 64 on the broken row) | 9.524 ms | 9.524 ms | 9.873 ms | 9.924 ms | 13.43 ms |
| AllReduce (32 chunks, 128 on the broken row) | 17.78 ms | 17.78 ms | 18.13 ms | 18.66 ms | 21.23 ms |

The cut bound: column 0 must take in 4 x 3/4 V over its 7 surviving links in, 3/7 V / b (tests/test_multi_detour.py;
AllReduce's column is `topology_bound_s`). The programme reaches both; the simulation runs
longer where a chain's last hops wait on pieces that came round a detour sharing a borrowed link fairly with that
row's own ring (AllGather: the broken row's link 0,1->0,2 ends 1.2 ms after most). ReduceScatter runs each tree
hop backwards over that hop's own routes reversed, as the programme prices it (it once took the opposite hop's
split, 13.80 ms, and ``auto`` ran detour_split). AllReduce (each chunk's AllGather half after that chunk's
ReduceScatter, the chunks leaving in turn in both) runs in 32 chunks, ReduceScatter in 16 (`KIND_CHUNKS`; at 8,
AllReduce took 21.66 ms against a closed form of 19.64, slower than detour_split, so ``auto``, which simulates its
leading candidates round faults, `simulator.collectives.fault_routes`, ran detour_split). The broken row's trees are
cut `BROKEN_FINER` times finer (ReduceScatter, AllReduce): its links, as loaded as the busiest, idled on pieces that
come round detours (AllReduce's link 0,2->0,1 1.67 ms at one cut, then 1.065x its closed form); finer pieces keep them
fed, and AllReduce runs 1.029x its closed form (open: a floor of about 18.55 ms, 1.043x the programme, stays however
fine the cut, the borrowed links shared fairly with the rows' own rings).

Closed form (`MultiDetour.closed_form`): the programme's busiest link time plus the deepest chain's latencies
(each hop's longest route) and fill (one chunk over each link of that chain). Timing only (numeric data is
refused). Only on a 2-D grid whose groups are rows along one wrapped axis, exactly one of them crossing one
missing cable (the network `simulator.collectives.fault_routes` keeps a ring by detouring round the dead links).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from simulator.collectives.algorithm import Algorithm, Capabilities, Job, register
from simulator.collectives.detour_split import broken_step
from simulator.collectives.groups import Group
from simulator.collectives.schedule import Schedule
from simulator.collectives.timing import route_latency
from simulator.engine.network import Network
from simulator.errors import PodsimError

CHUNKS = 8  #: pieces each tree's share is cut into (default; they follow each other down the chains)
#: the default for the kinds whose ramp more chunks shorten (torus:4x4 at 1 GB, simulated: ReduceScatter 10.50 ms at
#: 8 chunks, 10.14 at 16; AllReduce 21.66 at 8, 20.15 at 16, 19.45 at 32; AllGather stays 10.71 -> 10.64 at 32)
KIND_CHUNKS = {"reduce_scatter": 16, "all_reduce": 32}
#: the broken row's trees cut this many times finer than the healthy rows' (by kind; default 1): its chains run
#: through detours whose borrowed links its pieces share fairly with the rows' own rings, and finer pieces keep its
#: links fed (torus:4x4, 1 GB, simulated against the closed form: AllReduce at 32 chunks 19.45 / 18.26 ms at 1x,
#: 18.93 at 2x, 18.66 / 18.13 at 4x, 18.55 / 18.13 at 8x; ReduceScatter at 16 10.14 / 10.13 at 1x, 9.92 / 9.87 at 4x;
#: AllGather 10.71 / 10.72 at 1x, 10.58 / 10.22 at 2x, its closed form then 3.5% short: kept at 1x)
BROKEN_FINER = {"reduce_scatter": 4, "all_reduce": 4}
MIN_SHARE = 1e-6  #: tree weights and route fractions below this are dropped (the programme's round-off)

Link = tuple[Any, Any]
Hop = tuple[int, int]  #: (position p, direction d): the broken row's hop from position p to p + d


def _coord(net: Network, chip: Any) -> tuple[int, ...]:
    return tuple(net.graph.nodes[chip]["coord"])


def _column_path(net: Network, axis: int, start: tuple[int, ...], row: int) -> list[Any] | None:
    """Chips from ``start`` to coordinate ``row`` along ``axis`` the short way (the wrap where it is cabled), or
    None where a link on the way is missing."""
    n = net.shape[axis]
    here = start[axis]
    up, down = (row - here) % n, (here - row) % n
    wraps = bool(net.wrap[axis])
    steps = [(up, 1), (down, -1)] if wraps else [(abs(row - here), 1 if row > here else -1)]
    for count, d in sorted(steps):
        coords, c = [start], list(start)
        for _ in range(count):
            c[axis] = (c[axis] + d) % n
            coords.append(tuple(c))
        chips = [net.chip_at(x) for x in coords]
        if all(net.graph.has_edge(a, b) and net.graph.has_edge(b, a) for a, b in zip(chips, chips[1:], strict=False)):
            return chips
    return None


def layout(net: Network, groups: list[Group]) -> dict[str, Any] | None:
    """Every group's lane: {"lanes": [{"row": its chips by ring position, "routes": hop -> {route name: link
    list}}], "broken": the index of the one that crosses the missing cable}; the broken row's hops go direct
    (where the link lives) or round through another row (``("via", r)``), every other row's only direct. None
    where the algorithm does not apply."""
    if not net.grid or not net.faulted or len(net.shape) != 2 or not groups:
        return None
    if any(len(g.sizes) != 1 or not g.wraps[0] or g.n < 3 for g in groups):
        return None
    found = broken_step(net, groups)
    if found is None:
        return None
    broken = found[0]
    lanes = []
    for k, group in enumerate(groups):
        n = group.n
        row = [group.members[(p,)] for p in range(n)]
        coords = [_coord(net, c) for c in row]
        along = {a for a in range(2) if len({c[a] for c in coords}) > 1}
        if len(along) != 1:
            return None
        other = 1 - next(iter(along))
        home = coords[0][other]
        routes: dict[Hop, dict[Any, list[Link]]] = {}
        for p in range(n):
            for d in (1, -1):
                u, v = row[p], row[(p + d) % n]
                options: dict[Any, list[Link]] = {}
                if net.graph.has_edge(u, v):
                    options["direct"] = [(u, v)]
                for r in range(net.shape[other]) if k == broken else ():
                    down = _column_path(net, other, coords[p], r) if r != home else None
                    up = _column_path(net, other, _coord(net, v), r) if r != home else None
                    if down is None or up is None or not net.graph.has_edge(down[-1], up[-1]):
                        continue
                    path = down + list(reversed(up))
                    options[("via", r)] = list(zip(path, path[1:], strict=False))
                if not options:
                    return None
                routes[(p, d)] = options
        lanes.append({"row": row, "routes": routes})
    return {"lanes": lanes, "broken": broken}


def tree_hops(n: int, j: int, e: int) -> tuple[list[Hop], list[Hop]]:
    """Shard j's two chains round a ring of n with link e (positions e, e + 1) left out: clockwise from j to e,
    counter-clockwise from j to e + 1 (n - 1 hops in all)."""
    cw = [((j + k) % n, 1) for k in range((e - j) % n)]
    ccw = [((j - k) % n, -1) for k in range((j - e - 1) % n)]
    return cw, ccw


def centred(n: int, j: int) -> dict[int, float]:
    """The trees of a healthy ring's shard j (left-out link e -> weight): the link opposite j, the two chains
    (n - 1)/2 hops each way; on an even ring half each of the two links opposite (n/2 hops one way, n/2 - 1 the
    other), as the bidirectional ring sends it."""
    if n % 2:
        return {(j + (n - 1) // 2) % n: 1.0}
    return {(j + n // 2 - 1) % n: 0.5, (j + n // 2) % n: 0.5}


def plan(job: Job, where: dict[str, Any]) -> dict[str, Any]:
    """The linear programme of the module docstring: every lane's tree weights w[l, j, e] and each hop's bytes per
    route, minimising the busiest link direction's time ``t`` (seconds)."""
    from scipy.optimize import linprog

    kind, net, lanes = job.kind, job.net, where["lanes"]
    ref = max(d["bandwidth_bytes_per_s"] for _, _, d in net.graph.edges(data=True))
    names: list[Any] = []
    for lane_no, lane in enumerate(lanes):
        n = len(lane["row"])
        names += [("w", lane_no, j, e) for j in range(n) for e in range(n)]
        names += [("g", lane_no, h, r) for h, options in lane["routes"].items() for r in options]
    index = {v: i for i, v in enumerate(names)}
    t_col = len(names)
    size = t_col + 1
    a_eq, b_eq = [], []
    load: dict[Link, dict[int, float]] = {}
    for lane_no, lane in enumerate(lanes):
        n, routes = len(lane["row"]), lane["routes"]
        shard = 1.0 / n  # bytes in units of V, times in units of V / (the fastest link's bandwidth)
        for j in range(n):
            fixed = centred(n, j) if lane_no != where["broken"] else {}
            for e in range(n) if fixed else ():  # a healthy row: its ring's own trees
                row = np.zeros(size)
                row[index[("w", lane_no, j, e)]] = 1.0
                a_eq.append(row)
                b_eq.append(fixed.get(e, 0.0))
            row = np.zeros(size)
            for e in range(n):
                row[index[("w", lane_no, j, e)]] = 1.0
            a_eq.append(row)
            b_eq.append(1.0)
        uses: dict[Hop, list[tuple[int, int]]] = {h: [] for h in routes}
        for j in range(n):
            for e in range(n):
                cw, ccw = tree_hops(n, j, e)
                for h in cw + ccw:
                    uses[h].append((j, e))
        for h, options in routes.items():  # a hop's bytes (shards over their trees through it) = its routes' bytes
            row = np.zeros(size)
            for j, e in uses[h]:
                row[index[("w", lane_no, j, e)]] += shard
            for r, links in options.items():
                col = index[("g", lane_no, h, r)]
                row[col] -= 1.0
                carried = {"all_gather": links, "reduce_scatter": [(v, u) for u, v in links],
                           "all_reduce": links + [(v, u) for u, v in links]}[kind]
                for link in carried:
                    load.setdefault(link, {})
                    load[link][col] = load[link].get(col, 0.0) + 1.0
            a_eq.append(row)
            b_eq.append(0.0)
    a_ub, b_ub = [], []
    for link in sorted(load, key=str):
        speed = net.graph.edges[link]["bandwidth_bytes_per_s"] / ref
        row = np.zeros(size)
        for col, c in load[link].items():
            row[col] = c / speed
        row[t_col] = -1.0
        a_ub.append(row)
        b_ub.append(0.0)
    cost = np.zeros(size)
    cost[t_col] = 1.0
    res = linprog(cost, A_ub=np.array(a_ub), b_ub=np.array(b_ub), A_eq=np.array(a_eq), b_eq=np.array(b_eq),
                  bounds=[(0, None)] * size, method="highs")
    if not res.success:  # pragma: no cover - the programme is always feasible (every tree has a route)
        raise PodsimError(f"multi_detour: its routing programme failed ({res.message})")
    # among the plans as fast, the shallowest: least tree depth (deepest chain) and fewest route links, in V
    t_best = res.x[t_col]
    depth = np.zeros(size)
    for lane_no, lane in enumerate(lanes):
        n = len(lane["row"])
        for j in range(n):
            for e in range(n):
                depth[index[("w", lane_no, j, e)]] = max(len(c) for c in tree_hops(n, j, e)) / n
        for h, options in lane["routes"].items():
            for r, links in options.items():
                depth[index[("g", lane_no, h, r)]] = len(links)
    bounds = [(0, None)] * t_col + [(0, t_best * (1 + 1e-9))]
    second = linprog(depth, A_ub=np.array(a_ub), b_ub=np.array(b_ub), A_eq=np.array(a_eq), b_eq=np.array(b_eq),
                     bounds=bounds, method="highs")
    x = second.x if second.success else res.x
    out = []
    for lane_no, lane in enumerate(lanes):
        n = len(lane["row"])
        weights = {(j, e): float(x[index[("w", lane_no, j, e)]]) for j in range(n) for e in range(n)
                   if x[index[("w", lane_no, j, e)]] > MIN_SHARE}
        split: dict[Hop, list[tuple[list[Link], float]]] = {}
        for h, options in lane["routes"].items():
            total = sum(x[index[("g", lane_no, h, r)]] for r in options)
            if total > 0:
                split[h] = [(links, float(x[index[("g", lane_no, h, r)]] / total)) for r, links in options.items()
                            if x[index[("g", lane_no, h, r)]] > MIN_SHARE * total]
        out.append({"weights": weights, "split": split, "n": n})
    return {"t": float(x[t_col]) * job.nbytes / ref, "lanes": out, "broken": where["broken"]}


def lane_chunks(job: Job, lane_no: int) -> int:
    """Pieces each tree's share of lane ``lane_no`` is cut into: ``job.chunks``, times `BROKEN_FINER` on the broken
    row."""
    c = max(1, job.chunks)
    return c * BROKEN_FINER.get(job.kind, 1) if lane_no == job.cache["plan"]["broken"] else c


class MultiDetour(Algorithm):
    """The broken row's trees, every hop spread over direct and detour routes; the other rows: rings."""

    name = "multi_detour"
    summary = ("one ring broken by a dead cable: its hops spread over detours through every other row (a linear "
               "programme balances the links); rings elsewhere")
    kinds = ("all_gather", "reduce_scatter", "all_reduce")
    topologies = ("torus",)
    capabilities = Capabilities(numeric=False)  #: timing and bytes only (`prepare` refuses data)
    nic_rings = False

    def unfit(self, kind: str, net: Network, groups: list[Group]) -> str | None:
        why = super().unfit(kind, net, groups)
        if why is None and layout(net, groups) is None:
            return ("it needs the rows along one wrapped axis of a 2-D torus, exactly one of them crossing a missing "
                    "cable (a detour)")
        return why

    def default_chunks(self, kind: str, net: Network, groups: list[Group], nbytes: float | None) -> int:
        return KIND_CHUNKS.get(kind, CHUNKS)

    def prepare(self, job: Job) -> None:
        if job.numeric:
            raise PodsimError("multi_detour is timing only; give nbytes, or another --algorithm")
        where = layout(job.net, job.groups)
        assert where is not None  # `unfit` admitted the groups
        job.cache["plan"] = plan(job, where)

    # -- the schedule ----------------------------------------------------------------------------------
    def build(self, job: Job, s: Schedule) -> None:
        for lane_no, lane in enumerate(job.cache["plan"]["lanes"]):
            n, c = lane["n"], lane_chunks(job, lane_no)
            for (j, e), w in sorted(lane["weights"].items()):
                piece = w * job.nbytes / n / c
                chains = [ch for ch in tree_hops(n, j, e) if ch]
                first: dict[int, list[list[int]]] = {}  # chain -> the chunk before's hops (chunks follow in turn)
                again: dict[int, list[list[int]]] = {}  # the same for AllReduce's AllGather half
                for k in range(c):
                    tag = ("multi_detour", lane_no, j, e, k)
                    if job.kind == "all_gather":
                        for m, chain in enumerate(chains):
                            first[m] = _chain(s, lane, chain, piece, "copy", [], tag, first.get(m))
                        continue
                    ends = []
                    for m, chain in enumerate(chains):  # ReduceScatter: each chain backwards, toward the owner j
                        # hop h = (q, d) run from q + d to q over h's own routes reversed: the programme priced
                        # a ReduceScatter's hop h on its routes' links reversed (not hop (q + d, -d)'s split)
                        hops = _chain(s, lane, chain, piece, "add", [], tag, first.get(m), backwards=True)
                        first[m] = hops
                        ends += hops[-1]
                    if job.kind == "all_reduce":
                        for m, chain in enumerate(chains):
                            again[m] = _chain(s, lane, chain, piece, "copy", ends, tag, again.get(m))

    # -- the closed form -------------------------------------------------------------------------------
    def closed_form(self, job: Job) -> float:
        net, p = job.net, job.cache["plan"]
        phases = 2 if job.kind == "all_reduce" else 1
        depth = 0.0
        for lane_no, lane in enumerate(p["lanes"]):
            n, c = lane["n"], lane_chunks(job, lane_no)
            for (j, e), w in lane["weights"].items():
                piece = w * job.nbytes / n / c
                for chain in tree_hops(n, j, e):
                    lat, fill = 0.0, 0.0
                    for h in chain:
                        longest = max(lane["split"][h], key=lambda lf: route_latency(net, lf[0]))
                        lat += route_latency(net, longest[0])
                        fill += sum(longest[1] * piece / net.graph.edges[link]["bandwidth_bytes_per_s"]
                                    for link in longest[0])
                    depth = max(depth, phases * (lat + fill))
        return p["t"] + depth


def _chain(s: Schedule, lane: dict[str, Any], chain: list[Hop], piece: float, op: str, start: list[int],
           tag: Any, before: list[list[int]] | None = None, backwards: bool = False) -> list[list[int]]:
    """One chunk down ``chain``: each hop over its routes (fractions of ``piece``), each route link after link; a
    hop starts when every route of the hop before has arrived, and after ``before`` (the chunk before's same hop,
    where given: the chunks leave in turn). ``backwards`` (ReduceScatter): the chain from its tip back to its first
    chip, each hop over its own routes reversed, as the programme prices it. Returns each hop's last transfers."""
    out: list[list[int]] = []
    deps = list(start)
    for k, h in enumerate(reversed(chain) if backwards else chain):
        arrived = []
        if before is not None and k == 0:
            deps = deps + before[k]
        routes = lane["split"][h]
        if backwards:  # from h's far end back to its start: h's own routes, link order and direction reversed
            routes = [([(v, u) for u, v in reversed(links)], frac) for links, frac in routes]
        for links, frac in routes:
            prev = deps
            for u, v in links:
                prev = [s.add(u, v, 1, op, prev, tag, v, nbytes=frac * piece)]
            arrived += prev
        out.append(arrived)
        deps = arrived
    return out


MULTI_DETOUR = register(MultiDetour())
