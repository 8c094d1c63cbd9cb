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
Each tree's share is cut into chunks (`KIND_CHUNKS`); a tree's chunks cross every link in turn, and a hop's
routes carry consecutive bytes of a chunk, which go on as soon as they have come (`_chain`).

torus:4x4 of tpu-v5e, 1 GB over axis 1, cable (0,0)-(0,1) dead (healthy 8.335 ms = a/2 V / b, a = 3/4; AllReduce
16.67 ms), simulated; before: main at cd1ae68:

| kind | bound (cut) | programme | closed form | simulated | before | detour_split |
|---|---|---|---|---|---|---|
| AllGather (64 chunks) | 9.524 ms | 9.524 ms | 9.679 ms | 9.548 ms (1.146x healthy) | 10.71 | 15.28 |
| ReduceScatter (32 chunks, 64 on the broken row) | 9.524 ms | 9.524 ms | 9.699 ms | 9.589 ms | 9.924 | 13.43 |
| AllReduce (32, 128 on the broken row) | 17.78 ms | 17.78 ms | 18.13 ms | 18.09 ms (1.085x healthy) | 18.66 | 21.23 |

torus:8x8, 1 GB (healthy 9.722 ms, AllReduce 19.44 ms; the cut: 8 x 7/8 V over 15 links, 7/15 V / b = 10.37 ms):
AllGather 10.49 ms (closed form 10.54; before 11.83), ReduceScatter 10.68 ms (10.55; before 12.19), AllReduce
20.59 ms (20.11, the programme 19.75; before 20.78).

The cut bound: column 0 must take in 4 x 3/4 V over its 7 surviving links in, 3/7 V / b (tests/test_multi_detour.py;
AllReduce's column is `topology_bound_s`). The programme reaches both. What kept the simulation off it, and the
cure of each:
- a tree's chunks waited for the whole of the chunk before's first hop, so a detour of 3 to 5 links carried one
  chunk at a time, and each chunk paid every link's latency: each chunk's bytes now follow the chunk before's out
  of each link (`Schedule.add_split`), and the chunks stream down the detours;
- a hop waited for every route of the hop before, so a chain ran at the pace of its slowest detour (torus:8x8's
  ReduceScatter: 11.87 ms, its first hops over 9-link detours): a hop's routes carry consecutive bytes of the
  chunk, shortest route first, and the next hop sends what came by each route once it has come (`PARTS`);
- AllReduce: fair sharing gives each flow on a link the same rate, whatever its tree's weight, so the shallow
  trees ran ahead and the broken row's links starved mid-run for the deep trees' AllGather halves (its link
  0,2->0,1 idled 0.87 ms; 18.65 ms, a floor however fine the cut): `window` keeps the broken row's chunks in step.
ReduceScatter runs each tree hop backwards over that hop's own routes reversed, as the programme prices it (it once
took the opposite hop's split, 13.80 ms, and ``auto`` ran detour_split). AllReduce runs each chunk's AllGather
half after that chunk's ReduceScatter, each byte once both chains' partial sums of it are in (`_meet`). The broken
row's trees are cut `BROKEN_FINER` times finer (ReduceScatter, AllReduce): its links are as loaded as the busiest
and carry the detours' pieces.

Closed form (`MultiDetour.closed_form`): the programme's busiest link time plus the deepest chain's latencies
(each hop's longest route) and fill (one chunk over each link of that chain). Timing only (numeric data is
refused). Only on a 2-D grid whose groups are rows along one wrapped axis, exactly one of them crossing one
missing cable (the network `simulator.collectives.fault_routes` keeps a ring by detouring round the dead links).
"""
from __future__ import annotations

import math
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
#: the default by kind (torus:4x4 at 1 GB, simulated against the closed form: AllGather 9.806 / 10.72 ms at 8 chunks,
#: 9.571 / 9.827 at 32, 9.548 / 9.679 at 64, 9.538 / 9.604 at 128; ReduceScatter at 2x finer 9.589 / 9.699 at 32;
#: AllReduce at 4x finer 18.40 / 18.48 at 16, 18.09 / 18.13 at 32)
KIND_CHUNKS = {"all_gather": 64, "reduce_scatter": 32, "all_reduce": 32}
#: the broken row's trees cut this many times finer than the healthy rows' (by kind; default 1): its links are as
#: loaded as the busiest and carry the detours' pieces (torus:4x4, 1 GB, simulated against the closed form:
#: ReduceScatter at 32 chunks 9.652 / 9.827 ms at 1x, 9.589 / 9.699 at 2x; AllReduce at 32 chunks 19.00 / 18.26
#: at 1x, 18.40 / 18.13 at 2x, 18.09 / 18.13 at 4x, 17.94 / 18.13 at 8x, twice the transfers: kept at 4x)
BROKEN_FINER = {"reduce_scatter": 2, "all_reduce": 4}
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
        whole: list[Part] = [(0.0, 1.0, [])]
        plan_ = job.cache["plan"]
        lanes = plan_["lanes"]
        counts = [lane_chunks(job, no) for no in range(len(lanes))]
        lag = window(job)
        finished: dict[int, list[int]] = {}  # the broken row's chunk -> its last arrivals, all trees
        state: dict[Any, dict[Any, Any]] = {}  # (lane, tree, phase, chain) -> the chunk before's transfers
        # every lane's chunks in order of progress (chunk k of c at k / c)
        order = sorted((k / counts[no], no, k) for no in range(len(lanes)) for k in range(counts[no]))
        for _, lane_no, k in order:
            lane = lanes[lane_no]
            n, c = lane["n"], counts[lane_no]
            begin = whole
            if lag is not None and lane_no == plan_["broken"] and k >= lag:
                begin = [(0.0, 1.0, finished[k - lag])]
            ends: list[int] = []
            for (j, e), w in sorted(lane["weights"].items()):
                piece = w * job.nbytes / n / c
                chains = [ch for ch in tree_hops(n, j, e) if ch]
                tag = ("multi_detour", lane_no, j, e, k)
                if job.kind == "all_gather":
                    for m, chain in enumerate(chains):
                        key = (lane_no, j, e, 0, m)
                        state[key] = _chain(s, lane, chain, piece, "copy", begin, tag, state.get(key))
                        ends += [t for _, _, tids in state[key]["parts"] for t in tids]
                    continue
                for m, chain in enumerate(chains):  # ReduceScatter: each chain backwards, toward the owner j
                    # hop h = (q, d) run from q + d to q over h's own routes reversed: the programme priced
                    # a ReduceScatter's hop h on its routes' links reversed (not hop (q + d, -d)'s split)
                    key = (lane_no, j, e, 0, m)
                    state[key] = _chain(s, lane, chain, piece, "add", begin, tag, state.get(key), backwards=True)
                    if job.kind == "reduce_scatter":
                        ends += [t for _, _, tids in state[key]["parts"] for t in tids]
                if job.kind == "all_reduce":  # each byte of the piece goes out once both chains brought it in
                    reduced = _meet([state[(lane_no, j, e, 0, m)]["parts"] for m in range(len(chains))])
                    for m, chain in enumerate(chains):
                        key = (lane_no, j, e, 1, m)
                        state[key] = _chain(s, lane, chain, piece, "copy", reduced, tag, state.get(key))
                        ends += [t for _, _, tids in state[key]["parts"] for t in tids]
            if lane_no == plan_["broken"]:
                finished[k] = ends

    # -- the closed form -------------------------------------------------------------------------------
    def closed_form(self, job: Job) -> float:
        if "plan" not in job.cache:  # a job moved onto priced links (`protocol._on` empties the cache)
            self.prepare(job)
        p = job.cache["plan"]
        depth = max(_depth(job, lane_no) for lane_no in range(len(p["lanes"])))
        return p["t"] + depth


def _depth(job: Job, lane_no: int) -> float:
    """Seconds of lane ``lane_no``'s deepest chain (AllReduce: its ReduceScatter and AllGather, each): each hop's
    longest route's latencies and one chunk over each of its links."""
    net, p = job.net, job.cache["plan"]
    lane = p["lanes"][lane_no]
    phases = 2 if job.kind == "all_reduce" else 1
    n, c = lane["n"], lane_chunks(job, lane_no)
    depth = 0.0
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
    return depth


def window(job: Job) -> int | None:
    """AllReduce: how many chunks of the broken row may be under way at once (chunk k's ReduceScatter starts once
    chunk k - W's AllGather has ended, on every tree of the row); None: no window (other kinds, or a window as
    long as the row's chunks). In the steady state a tree's chunk spends about one chunk's turn (the programme's
    time over the row's chunks) on each hop, so the pipeline holds about as many chunks as its deepest chain has
    hops, both halves: W is that, plus two, plus the chunks that pass during the chain's latencies (every route at
    its longest). Without it the shallow trees' chunks ran ahead (fair sharing gives every flow the same rate,
    whatever its tree's weight) and the broken row's links then starved for the deep trees' AllGather halves
    (torus:4x4, 1 GB: its link 0,2->0,1 idled 0.87 ms mid-run, 18.65 ms against the programme's 17.78; with the
    window 18.08). Too short a window starves the pipeline (4 there: 18.89 ms); at 1 MB the latencies outlast
    the row's chunks and there is none."""
    if job.kind != "all_reduce":
        return None
    net, p = job.net, job.cache["plan"]
    broken = p["broken"]
    lane = p["lanes"][broken]
    c = lane_chunks(job, broken)
    turn = p["t"] / c
    hops, lat = 0, 0.0
    for j, e in lane["weights"]:
        for chain in tree_hops(lane["n"], j, e):
            hops = max(hops, len(chain))
            lat = max(lat, sum(max(route_latency(net, links) for links, _ in lane["split"][h]) for h in chain))
    if turn <= 0:
        return None
    w = 2 * hops + 2 + math.ceil(2 * lat / turn)
    return w if w < c else None


Part = tuple[float, float, list[int]]  #: bytes [a, b) of a piece (fractions of it), and the transfers they arrive by


def _meet(partitions: list[list[Part]]) -> list[Part]:
    """The bytes of a piece as several partitions of it arrive together: the pieces between every breakpoint of
    any of them, each arrived once every part covering it has (AllReduce's owner has a byte of its reduced piece
    once both chains' partial sums of that byte are in)."""
    cuts = sorted({x for parts in partitions for a, b, _ in parts for x in (a, b)})
    out: list[Part] = []
    for lo, hi in zip(cuts, cuts[1:], strict=False):
        if hi - lo <= _EPS:
            continue
        deps = [t for parts in partitions for a, b, tids in parts if a < hi - _EPS and b > lo + _EPS for t in tids]
        out.append((lo, hi, deps))
    return out


#: parts a chunk's bytes go on in after a hop (its first routes' bytes each on their own, the rest together), so the
#: transfers do not multiply hop after hop (torus:8x8 ReduceScatter at 1 GB: 10.70 ms at 2, 10.68 at 3 and at no
#: limit, which makes 231,680 transfers against 193,280; one part, every route waited for, 11.88 ms)
PARTS = 3
_EPS = 1e-12  #: bytes (fractions of a piece) below this are round-off


def _chain(s: Schedule, lane: dict[str, Any], chain: list[Hop], piece: float, op: str, start: list[Part],
           tag: Any, before: dict[Any, Any] | None = None, backwards: bool = False) -> dict[Any, Any]:
    """One chunk down ``chain``: each hop over its routes, each route link after link, each link a hop split in two
    (`Schedule.add_split`: the bytes, then the link's latency). A hop's routes carry consecutive bytes of the piece
    (shortest route first, each its fraction); the bytes a route carries go on as soon as they have arrived: each
    route of the next hop sends its bytes in parts, one for each route of this hop they came by, each part after
    its own bytes' arrival (``start``: the bytes the first hop sends and what each waits for). Before, a hop waited
    for all of the hop before's routes: on torus:8x8 a ReduceScatter's chain ran at the pace of its first hop's
    9-link detour (11.87 ms against 10.37 by the programme). ``before`` (the chunk before's transfers, where given):
    this chunk's bytes over each link follow the chunk before's same bytes out of that link, so a tree's chunks
    cross every link in turn and stream down a detour link by link. (Before, only a chain's first hop waited for
    the chunk before, and for its whole arrival: a detour of 3 to 5 links carried one chunk at a time and paid
    every chunk's latency; torus:4x4 AllGather at 1 GB ran 10.71 ms, 1.124x the cut.) ``backwards``
    (ReduceScatter): the chain from its tip back to its first chip, each hop over its own routes reversed, as the
    programme prices it. Returns {"parts": the bytes as the last hop delivers them, key: the bytes' transfer}."""
    ids: dict[Any, Any] = {}
    parts = start
    for k, h in enumerate(reversed(chain) if backwards else chain):
        routes = sorted(lane["split"][h], key=lambda lf: len(lf[0]))
        if backwards:  # from h's far end back to its start: h's own routes, link order and direction reversed
            routes = [([(v, u) for u, v in reversed(links)], frac) for links, frac in routes]
        came: list[Part] = []
        lo = 0.0
        for r, (links, frac) in enumerate(routes):
            hi = 1.0 if r == len(routes) - 1 else lo + frac
            for q, (a, b, deps) in enumerate(parts):
                x, y = max(a, lo), min(b, hi)
                if y - x <= _EPS:
                    continue
                prev = deps
                for i, (u, v) in enumerate(links):
                    key = (k, r, q, i)
                    again = before.get(key) if before is not None else None
                    sent, arrived_at = s.add_split(u, v, 1, op, prev, tag, v, [] if again is None else [again],
                                                   nbytes=(y - x) * piece)
                    ids[key] = sent  # (the next chunk's same bytes over this link follow these out)
                    prev = [arrived_at]
                came.append((x, y, prev))
            lo = hi
        came.sort(key=lambda part: part[0])
        if len(came) > PARTS:  # the bytes that came round detours (the last parts) go on together
            rest = came[PARTS - 1:]
            came = came[:PARTS - 1] + [(rest[0][0], 1.0, [t for _, _, tids in rest for t in tids])]
        parts = came
    ids["parts"] = parts
    return ids


MULTI_DETOUR = register(MultiDetour())
