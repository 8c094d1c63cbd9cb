"""Closed-form pieces shared by the ring algorithms, from the topology graph and first principles.

Nothing here looks at a built schedule. A ring algorithm states, by formula, how many units (shards,
chunks) each ring link carries at each step of a phase; this module lays the ring's neighbour steps on
the network's routes and prices them:

- a phase of chains (AllGather, ReduceScatter, AllToAll along one ring) lasts as long as the longer of
  its slowest chain of hops (each paying its route's latency and its bytes at the bandwidth share its
  step leaves it) and its busiest link's work (all its bytes over its bandwidth) (`chain_phase_time`).
  On a ring whose steps are all alike the slowest chain is ``steps x (latency + unit / b)``: exact;
- a pipelined broadcast of ``c`` pieces along a chain of hops costing ``t_h`` each (latency plus the
  piece's bytes over the hop's share of bandwidth) takes ``sum(t_h) + (c - 1) max(t_h)``
  (`chain_time`): the first piece crosses every hop, the others follow one slowest hop apart;
- a ring phase over NIC rings whose hops differ in rate (NVLink and InfiniBand), where lock step is wrong
  (the fast hops run ahead and queue at the slow one; a port is shared by the flows in flight on it, not by
  every ring at every step), is followed flow by flow on the fair-shared links ring 0's hops cross, the
  other rings folded onto ring 0 (`fold_ring_ports`, `shared_flow_time`; `shared_ring_time` for hops
  labelled by port), as `shared_chain_time` follows a broadcast's pieces; a tree's chunks likewise on
  its group's links (`link_ports`).
"""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from heapq import heappop, heappush
from typing import Any

import numpy as np

from simulator.collectives.groups import Ring
from simulator.engine.memory_budget import check_memory
from simulator.engine.network import Network

COMPRESS_CELLS = 1 << 22  #: positions x steps above which a uniform table is priced on pieces (`_Pieces`)
DENSE_BYTES_PER_CELL = 48  #: peak bytes per position x step of dense pricing (the table, hop rows, the walk)

Units = Callable[[int, int, int, int], float]
"""(ring size n, position i, direction d, step h) -> units ring link i -> i+d carries at step h (0: idle)."""
Table = Callable[[int, int], "np.ndarray"]
"""(ring size n, direction d) -> `Units` of every position (rows) at every step h = 1.. (columns) at once."""


def step_edges(net: Network, ring: Ring, i: int, d: int) -> list[tuple[Any, Any]]:
    """The physical link directions of the route between ring positions i and i + d."""
    n = len(ring.devices)
    path = net.routes(ring.devices[i], ring.devices[(i + d) % n])[0]
    return list(zip(path, path[1:], strict=False))


def route_latency(net: Network, edges: list[tuple[Any, Any]]) -> float:
    """Seconds for the head of a message to cross ``edges`` (their latencies add)."""
    return sum(net.graph.edges[e]["latency_s"] for e in edges)


def ring_links(n: int, closed: bool) -> list[tuple[int, int]]:
    """Ring links (i, d) from position i to i + d: both ways round a closed ring, never off a line's ends."""
    return [(i, d) for d in (1, -1) for i in range(n) if closed or 0 <= i + d < n]


def chain_phase_time(net: Network, rings: list[Ring], closed: bool, steps: int, units: Units,
                     unit_bytes: float, *, windows: bool = False) -> float:
    """The longer of the slowest chain and the busiest link's work, for chains run along ``rings`` at once
    (one ring per NIC; they share the links their routes share).

    At step h ring link (i, d) carries ``units(n, i, d, h)`` units of ``unit_bytes``; a physical link
    carries what every ring link routed over it carries (both directions of a ring leave a chip by its
    one switch port). A chain starts at every position and goes on while its next link is busy at the
    next step; a hop costs its route's latency plus the bytes its busiest link carries that step over
    that link's bandwidth, and a chain's hops run one after another. The busiest link's work is its
    bytes over all steps over its bandwidth.
    """
    return chain_phase_profile(net, rings, closed, steps, units, windows=windows).time(unit_bytes)


@dataclass(frozen=True)
class PhaseProfile:
    """`chain_phase_time` for any unit size: each chain's latency and seconds per unit byte, and the busiest
    link's seconds per unit byte (both terms grow linearly with the unit)."""

    chains: tuple[tuple[float, float], ...]  #: (seconds of latency, seconds per byte of a unit)
    busiest: float  #: seconds per byte of a unit on the busiest link

    def time(self, unit_bytes: float) -> float:
        """Seconds of the phase when a unit is ``unit_bytes`` bytes."""
        slowest = max((latency + unit_bytes * per_byte for latency, per_byte in self.chains), default=0.0)
        return max(slowest, unit_bytes * self.busiest)


def chain_phase_profile(net: Network, rings: list[Ring], closed: bool, steps: int, units: Units,
                        table: Table | None = None, *, compress: bool | None = None, windows: bool = False,
                        serial: bool = False) -> PhaseProfile:
    """The `PhaseProfile` of chains run along ``rings`` at once (see `chain_phase_time`).

    ``windows``: also price, for each ring link, the chain through its busiest physical link (`_windows`): the
    hops that bring that link its first unit, all the link's work while the ring link is busy, its latency, and
    the hops that take its last unit on; ``serial``: the chains take each link one after another (a line's
    ReduceScatter), so that window pays the route's latency once per busy step.

    ``table(n, d)`` (optional) gives ``units(n, i, d, h)`` for every position i and step h = 1..steps as
    an (n, steps) array at once; without it each entry is evaluated through ``units``. Ring links whose
    steps carry the same units share a row and physical links carrying the same rows share a load, so
    the work in Python grows with the ring's positions, and only numpy's with positions times steps.

    A table that is one row for every position (``table.uniform``: a ring's links all alike) is held as
    that row; where positions times steps passes `COMPRESS_CELLS` (or ``compress`` is True) its steps are
    cut into the pieces where no row changes (`_Pieces`), so memory and work grow with positions times
    pieces, not times steps. A table of distinct rows whose dense pricing would pass the memory budget
    is refused up front (`simulator.engine.memory_budget.MemoryBudgetError`, naming the estimate).
    """
    if steps <= 0 or not rings:
        return PhaseProfile((), 0.0)
    sizes = sorted({len(r.devices) for r in rings})
    uniform = table is not None and getattr(table, "uniform", False)
    cells = sum(n * steps for n in sizes)
    if not uniform:
        check_memory(DENSE_BYTES_PER_CELL * cells, f"pricing chains over {max(sizes):,} ring positions x "
                     f"{steps:,} steps", "use fewer chips per axis, or another --algorithm")
    tables = {(n, d): _table(units, table, n, d, steps) for n in sizes for d in (1, -1)}
    pieces = None
    if uniform and (compress if compress is not None else cells > COMPRESS_CELLS):
        pieces = _Pieces.of([t[0] for t in tables.values()], steps)
        tables = {key: np.broadcast_to(t[0][pieces.starts], (t.shape[0], len(pieces.starts)))
                  for key, t in tables.items()}
    rows: list[np.ndarray] = []  # distinct per-step (or per-piece) unit rows of ring links
    row_of: dict[bytes, int] = {}
    laid = []  # per ring and direction: (n, d, row id, route) of each position (row -1: no such link)
    for ring in rings:
        n = len(ring.devices)
        for d in (1, -1):
            ids = _row_ids(tables[(n, d)], rows, row_of)
            routes: list[list[Any]] = []
            for i in range(n):
                if not (closed or 0 <= i + d < n):
                    ids[i] = -1
                    routes.append([])
                    continue
                routes.append(step_edges(net, ring, i, d))
            laid.append((n, d, ids, routes))
    users: dict[Any, dict[int, int]] = defaultdict(lambda: defaultdict(int))  # physical link -> row -> count
    for _, _, ids, routes in laid:
        for r, edges in zip(ids, routes, strict=True):
            for e in edges:
                users[e][r] += 1
    loads: list[np.ndarray] = []  # units a physical link carries at each step, one per distinct mix of rows
    load_of: dict[tuple[tuple[int, int], ...], int] = {}
    per_byte_of: dict[Any, tuple[int, float]] = {}  # physical link -> (its load, its bandwidth)
    work = 0.0
    for e, counts in users.items():
        key = tuple(sorted(counts.items()))
        if key not in load_of:
            load_of[key] = len(loads)
            loads.append(sum((c * rows[r] for r, c in key), np.zeros_like(rows[key[0][0]])))
        bw = net.graph.edges[e]["bandwidth_bytes_per_s"]
        per_byte_of[e] = (load_of[key], bw)
        total = loads[load_of[key]].sum() if pieces is None else loads[load_of[key]] @ pieces.lengths
        work = max(work, float(total) / bw)
    chains: set[tuple[float, float]] = set()
    columns = steps if pieces is None else len(pieces.starts)
    steady = all(np.all(row == row[0]) for row in rows) and steps <= min(sizes)  # alike steps
    made: dict[tuple[tuple[int, float], ...], np.ndarray] = {}  # a route's links -> its hop's row
    seen: set[Any] = set()
    for n, d, ids, routes in laid:
        if all(r < 0 or not np.any(rows[r] > 0) for r in ids):
            chains.add((0.0, 0.0))  # nothing goes this way
            continue
        keys = [tuple(sorted({per_byte_of[e] for e in edges})) for edges in routes]
        lat = [route_latency(net, edges) for edges in routes]
        signature = (d, tuple(ids), tuple(keys), tuple(lat))
        if signature in seen:  # every position like a ring already walked (NIC rings by symmetry): same chains
            continue
        seen.add(signature)
        hop = _hop_rows(keys, loads, 1 if steady else columns, made)
        latency = np.array(lat)
        active = np.array([rows[r][:hop.shape[1]] > 0 if r >= 0 else np.zeros(hop.shape[1], bool) for r in ids])
        if steady:
            walked = _steady_chains(n, d, steps, active, hop, latency)
        elif pieces is not None:
            walked = pieces.chains(n, d, active, hop, latency)
        else:
            walked = _chains(n, d, steps, active, hop, latency)
        chains.update(zip(*walked, strict=True))
        if windows and pieces is None:
            chains.update(_windows(n, d, steps, active, hop, latency, keys, loads, steady, serial))
    return PhaseProfile(tuple(sorted(chains)), work)


def _windows(n: int, d: int, steps: int, active: np.ndarray, hop: np.ndarray, latency: np.ndarray,
             keys: list[tuple[tuple[int, float], ...]], loads: list[np.ndarray], steady: bool,
             serial: bool) -> list[tuple[float, float]]:
    """(latency, seconds per unit byte) of the chain through each ring link's busiest physical link, in lock step.

    Ring link i -> i + d is busy from step f to step l. The unit it carries at step f came along the chain that
    started f - 1 hops behind it at step 1, and the unit it carries at step l goes on along the chain that reaches
    i at step l, for as long as that chain's next link is busy; between them a physical link of its route does all
    the work it has in steps f..l (its units over its bandwidth), and the route's latency is paid once (or once per
    busy step where the chains take the link one after another, ``serial``). So the window is the first chain's
    hops before step f, that work, the latency, and the second chain's hops after step l, each hop priced as in
    `_chains` (its latency plus its busiest link's bytes that step). Where the ring link is busy in every step
    (``steady``, or a unidirectional ring) the window is the link's work plus one latency.
    """
    out: list[tuple[float, float]] = []
    cols = np.arange(steps if not steady else 1)
    if steady:  # every step alike: every loaded link is busy throughout
        for i in range(n):
            if keys[i] and active[i, 0]:
                work = max(float(loads[load].sum()) / bw for load, bw in keys[i])
                out.append((latency[i] * (steps if serial else 1), work))
        return out
    pos = (np.arange(n)[:, None] + d * cols[None, :]) % n  # (chain origin, step) -> position
    alive = np.cumprod(active[pos, cols[None, :]], axis=1)
    cum_lat = np.concatenate([np.zeros((n, 1)), np.cumsum(alive * latency[pos], axis=1)], axis=1)
    cum_hop = np.concatenate([np.zeros((n, 1)), np.cumsum(alive * hop[pos, cols[None, :]], axis=1)], axis=1)
    for i in range(n):
        busy = np.flatnonzero(active[i])
        if not keys[i] or not len(busy):
            continue
        f, last = int(busy[0]), int(busy[-1])  # 0-based first and last busy step
        before, after = (i - f * d) % n, (i - last * d) % n  # origins of the chains at i at steps f and l
        work = max(float(loads[load][f:last + 1].sum()) / bw for load, bw in keys[i])
        times = float(np.count_nonzero(active[i, f:last + 1])) if serial else 1.0
        lat = cum_lat[before, f] + latency[i] * times + cum_lat[after, steps] - cum_lat[after, last + 1]
        per_byte = cum_hop[before, f] + work + cum_hop[after, steps] - cum_hop[after, last + 1]
        out.append((float(lat), float(per_byte)))
    return out


def _row_ids(table: np.ndarray, rows: list[np.ndarray], row_of: dict[bytes, int]) -> list[int]:
    """The id of each position's row of ``table`` among the distinct ``rows`` (added there when new); a
    table that is one row broadcast to every position (stride 0) is looked up once."""
    def row_id(row: np.ndarray) -> int:
        at = row_of.setdefault(row.tobytes(), len(row_of))
        if at == len(rows):
            rows.append(row)
        return at

    if table.shape[0] and table.strides[0] == 0:
        return [row_id(table[0])] * table.shape[0]
    return [row_id(row) for row in table]


@dataclass(frozen=True)
class _Pieces:
    """Steps 1..S cut where any of a phase's rows changes: piece j is steps ``starts[j]`` (0-based) up to
    the next start, ``lengths[j]`` of them; every row is constant on a piece, so a row is held as its
    value on each piece."""

    starts: np.ndarray
    lengths: np.ndarray
    steps: int

    @classmethod
    def of(cls, rows: list[np.ndarray], steps: int) -> _Pieces:
        change = np.zeros(steps, bool)
        change[0] = True
        for row in rows:
            change[1:] |= row[1:] != row[:-1]
        starts = np.flatnonzero(change)
        return cls(starts, np.diff(np.append(starts, steps)), steps)

    def chains(self, n: int, d: int, active: np.ndarray, hop: np.ndarray,
               latency: np.ndarray) -> tuple[list[float], list[float]]:
        """`_chains` on pieces (``active``, ``hop``: position x piece): the chain from o is at walking index
        s + k at step k (s = o's index; positions o, o + d, ... in walking order), and it goes on while
        its link is busy; per piece, prefix sums along the walk (tiled past the wrap) give its sums up to
        its first idle link."""
        order = np.arange(n) if d == 1 else np.arange(n)[::-1]  # walking index -> position
        reps = -(-(n + self.steps) // n)
        walk = np.tile(order, reps)  # walking index (any, up to n + steps) -> position
        start = np.arange(n)  # the chain that starts at walking index s
        alive = np.full(n, True)
        lat_sum, hop_sum = np.zeros(n), np.zeros(n)
        lat_prefix = np.concatenate([[0.0], np.cumsum(latency[walk])])
        for j, (a, length) in enumerate(zip(self.starts.tolist(), self.lengths.tolist(), strict=True)):
            busy = active[walk, j]
            idle_at = np.append(np.flatnonzero(~busy), len(walk))  # past the end: never idle
            first = idle_at[np.searchsorted(idle_at, start + a)] - start  # step of the first idle link from a
            end = np.where(alive, np.minimum(a + length, first), a)  # steps a..end-1 walked in this piece
            lo, hi = start + a, start + end
            hop_prefix = np.concatenate([[0.0], np.cumsum(hop[walk, j])])
            lat_sum += lat_prefix[hi] - lat_prefix[lo]
            hop_sum += hop_prefix[hi] - hop_prefix[lo]
            alive &= first >= a + length
        back = np.empty(n, int)
        back[order] = start  # position -> walking index of the chain starting there
        return lat_sum[back].tolist(), hop_sum[back].tolist()


def _chains(n: int, d: int, steps: int, active: np.ndarray, hop: np.ndarray,
            latency: np.ndarray) -> tuple[list[float], list[float]]:
    """(latency, seconds per unit byte) of the chain from every origin: it goes on while its next link is
    busy at the next step (``active``, ``hop``: position x step)."""
    cols = np.arange(steps)[None, :]
    pos = (np.arange(n)[:, None] + d * cols) % n  # (chain origin, step) -> position
    alive = np.cumprod(active[pos, cols], axis=1)
    return (alive * latency[pos]).sum(axis=1).tolist(), (alive * hop[pos, cols]).sum(axis=1).tolist()


def _steady_chains(n: int, d: int, steps: int, active: np.ndarray, hop: np.ndarray,
                   latency: np.ndarray) -> tuple[list[float], list[float]]:
    """`_chains` where every step is alike (one column): a chain from o crosses the positions o, o + d, ...
    up to its first idle link or ``steps`` of them, summed from prefix sums of the ring walked twice."""
    order = np.arange(n) if d == 1 else np.arange(n)[::-1]  # walking index j -> position
    busy = active[order, 0]
    idle_at = np.append(np.flatnonzero(~np.concatenate([busy, busy])), 2 * n)  # 2n: never idle
    start = np.arange(n)
    length = np.minimum(steps, idle_at[np.searchsorted(idle_at, start)] - start)  # up to the first idle link
    out = []
    for values in (latency[order], hop[order, 0]):
        prefix = np.concatenate([[0.0], np.cumsum(np.concatenate([values, values]))])
        out.append((prefix[start + length] - prefix[start]).tolist())
    back = np.empty(n, int)
    back[order] = start  # position -> walking index of the chain starting there
    return [out[0][j] for j in back], [out[1][j] for j in back]


def _table(units: Units, table: Table | None, n: int, d: int, steps: int) -> np.ndarray:
    """``units(n, i, d, h)`` for i = 0..n-1 (rows) and h = 1..steps (columns)."""
    if table is not None:
        return np.broadcast_to(np.asarray(table(n, d), dtype=float), (n, steps))
    return np.array([[units(n, i, d, h) for h in range(1, steps + 1)] for i in range(n)], dtype=float)


def _hop_rows(keys: list[tuple[tuple[int, float], ...]], loads: list[np.ndarray], steps: int,
              made: dict[tuple[tuple[int, float], ...], np.ndarray]) -> np.ndarray:
    """Seconds per unit byte of each position's hop at each step: the busiest of its route's links (``keys``:
    their (load, bandwidth)) then."""
    out = np.zeros((len(keys), steps))
    for i, key in enumerate(keys):
        if key and key not in made:
            made[key] = np.max([loads[load] / bw for load, bw in key], axis=0)
        if key:
            out[i] = made[key][:steps]
    return out


def hop_costs(net: Network, ring: Ring, chains: list[tuple[int, int, int]], piece_bytes: float,
              shared: dict[tuple[Any, Any], int]) -> list[list[float]]:
    """Seconds one piece spends on each hop of each chain ``(origin, direction, hops)``: route latency
    plus the piece's bytes over the slowest link's share (``shared[e]`` pieces cross link e per round)."""
    return [[latency + transfer for latency, transfer in parts]
            for parts in hop_parts(net, ring, chains, piece_bytes, shared)]


def hop_parts(net: Network, ring: Ring, chains: list[tuple[int, int, int]], piece_bytes: float,
              shared: dict[tuple[Any, Any], int]) -> list[list[tuple[float, float]]]:
    """`hop_costs` in its two parts: (route latency, the piece's bytes over the slowest link's share) in seconds
    for each hop of each chain (a split hop, `simulator.collectives.schedule.DELAY`, pays them apart)."""
    n = len(ring.devices)
    out = []
    for origin, d, hops in chains:
        parts = []
        for k in range(hops):
            edges = step_edges(net, ring, (origin + k * d) % n, d)
            share = min(net.graph.edges[e]["bandwidth_bytes_per_s"] / shared[e] for e in edges)
            parts.append((route_latency(net, edges), piece_bytes / share))
        out.append(parts)
    return out


def link_use(net: Network, ring: Ring, chains: list[tuple[int, int, int]]) -> dict[tuple[Any, Any], int]:
    """How many hops of ``chains`` (one piece each) cross each physical link."""
    n = len(ring.devices)
    use: dict[tuple[Any, Any], int] = defaultdict(int)
    for origin, d, hops in chains:
        for k in range(hops):
            for e in step_edges(net, ring, (origin + k * d) % n, d):
                use[e] += 1
    return use


def chain_time(costs: list[float], pieces: int) -> float:
    """``pieces`` pieces store-and-forwarded along hops of ``costs`` seconds each."""
    return sum(costs) + (pieces - 1) * max(costs) if costs else 0.0


def split_chain_time(hops: Sequence[tuple[float, float]], pieces: int) -> float:
    """``pieces`` pieces along split hops of (latency, bytes' seconds) each: a piece's bytes leave once it has
    arrived and the piece before it has left the link, and it arrives the latency later -- a tandem of
    deterministic servers with pure delays between them, ``sum(latency) + sum(s) + (pieces - 1) max(s)``.
    One piece is one plain hop each: ``chain_time`` of latency plus seconds."""
    if not hops:
        return 0.0
    if pieces == 1:
        return chain_time([a + t for a, t in hops], 1)
    sends = [t for _, t in hops]
    return sum(a for a, _ in hops) + sum(sends) + (pieces - 1) * max(sends)


def grouped_chain_time(hops: Sequence[tuple[float, float, int]], pieces: int) -> float:
    """`split_chain_time` where hop h forwards its pieces ``m_h`` at a time: (latency, one piece's bytes' seconds,
    ``m_h``) each. A group of ``m`` pieces leaves once all of them have arrived and the group before it has left the
    link, takes ``m`` pieces' seconds, and arrives the latency later (a network hop that moves whole NCCL steps,
    NVIDIA/nccl src/transport/net.cc ``sendProxyProgress``: the proxy posts a step once every line of it has landed).

    The tandem of deterministic servers evaluated exactly, a hop at a time over all pieces (numpy): departures
    ``D_g = max(ready_g, D_{g-1}) + size_g s`` unrolled as ``D_g = S_g + max_{k <= g}(ready_k - S_{k-1})`` with ``S``
    the running sum of the groups' seconds. Every ``m_h`` = 1 is `split_chain_time` (returned as it, exactly)."""
    if all(m == 1 for _, _, m in hops) or pieces == 1:
        return split_chain_time([(a, s) for a, s, _ in hops], pieces)
    arrive = np.zeros(pieces)
    for latency, seconds, m in hops:
        m = max(1, min(int(m), pieces))
        starts = np.arange(0, pieces, m)
        ready = np.maximum.reduceat(arrive, starts)
        sizes = np.diff(np.append(starts, pieces))
        busy = sizes * seconds
        total = np.cumsum(busy)
        leave = total + np.maximum.accumulate(ready - (total - busy))
        arrive = np.repeat(leave + latency, sizes)
    return float(arrive[-1])


def shared_chain_time(hops: Sequence[tuple[float, float, int]], ports: Sequence[int], pieces: int) -> float:
    """`grouped_chain_time` where the hops with one ``ports`` label share one fair-shared (processor-sharing) link:
    (latency, one piece's bytes' seconds on the link alone, pieces forwarded at once) each, seconds.

    The NIC rings of GPU nodes are rotations of one another and start together, so at every instant ring r's hop k
    is in the state ring 0's hop k is in; a GPU's NVLink port carries one hop of each ring, so it carries, at once,
    the flows of ring 0's hops that the rotation maps onto it -- all of a node's in-node hops of ring 0. The rings
    together are then one ring whose hops of a label share one port: with ``n`` groups' bytes in flight on it, each
    moves at 1/n of the port (`simulator.engine.channel.Channel`'s fair sharing). A group leaves once its pieces
    have arrived at the hop's sender and the group before it has left the hop, and arrives the latency later, as in
    `grouped_chain_time`. No sum in closed form: the port's sharing changes at every start and finish, so this
    follows those instants exactly (fluid, event by event: O(pieces x hops) events). All labels distinct is
    `grouped_chain_time` (returned as it)."""
    n_hops = len(hops)
    if n_hops == 0:
        return 0.0
    if len(set(ports)) == n_hops or pieces == 1:
        return grouped_chain_time(hops, pieces)
    spans = []
    for _, _, m in hops:
        m = max(1, min(int(m), pieces))
        spans.append([(g, min(g + m, pieces)) for g in range(0, pieces, m)])
    # waiting[h]: pieces that have arrived at hop h's sender and not yet left it (counted, they arrive in order)
    got = [pieces] + [0] * (n_hops - 1)
    nxt = [0] * n_hops
    flows: dict[int, dict[int, float]] = defaultdict(dict)  # port -> {hop: seconds of work left at the full port}
    arrivals: list[tuple[float, int, int]] = []  # (time, hop, pieces arriving at its sender)
    now, last = 0.0, 0.0

    def start(h: int) -> None:
        if h in flows[ports[h]] or nxt[h] >= len(spans[h]):
            return
        lo, hi = spans[h][nxt[h]]
        if got[h] >= hi:
            flows[ports[h]][h] = (hi - lo) * hops[h][1]

    for h in range(n_hops):
        start(h)
    while True:
        done_at, done = math.inf, -1
        for fl in flows.values():
            if fl:
                h = min(fl, key=fl.__getitem__)
                if now + fl[h] * len(fl) < done_at:
                    done_at, done = now + fl[h] * len(fl), h
        next_arrival = arrivals[0][0] if arrivals else math.inf
        if done < 0 and not arrivals:
            return last
        t = min(done_at, next_arrival)
        for fl in flows.values():
            for h in fl:
                fl[h] -= (t - now) / len(fl)
        now = t
        if done >= 0 and done_at <= next_arrival:
            del flows[ports[done]][done]
            lo, hi = spans[done][nxt[done]]
            nxt[done] += 1
            if done + 1 < n_hops:
                heappush(arrivals, (now + hops[done][0], done + 1, hi - lo))
            else:
                last = max(last, now + hops[done][0])
            start(done)
        else:
            while arrivals and arrivals[0][0] <= now:
                _, h, k = heappop(arrivals)
                got[h] += k
                start(h)


def fold_ring_ports(net: Network, rings: list[Ring], links: Sequence[tuple[int, int]], period: int = 0
                    ) -> PortFold | None:
    """Ring 0's ring links ``links`` ((i, d): position i to i + d) on the fair-shared ports of the network, for rings
    that are rotations of one another (NIC rings on GPU nodes), every ring folded onto ring 0 (`PortFold`).

    Each physical link carries the hops of every ring whose route crosses it; numbered as ring 0's hops (ring r's
    hop k moves as ring 0's hop k does: the rings start together and are alike), a link is the list of (hop, lead,
    tail) it carries -- lead: the route's latencies up to and including the link (when the head reaches it and its
    bytes join, `simulator.engine.network.Network._cut_through`), tail: the latencies after it. Links with the same
    list and rate are one port (a list shifted by a constant lead is the same port, that much later: a GPU's
    NVLink port out and in). None unless every ring's hop k crosses the same ports at the same offsets as ring
    0's (the folding then holds exactly). On H100 nodes a GPU's NVLink port carries the node's in-node hops of
    ring 0's rotations, one of each of 7 rings; a NIC's link one ring's network hop -- or, on a line across three
    nodes or more, a middle NIC's input one hop from each neighbour node (a forward and a backward hop of two
    rings), where its output carries one.

    ``period`` p > 0 (a closed ring's links i -> i + 1, ``links[k]`` = (k, 1)): also fold ring 0 onto itself moved
    p positions on (a node of GPUs, where the ring is one node's hops over and over): hop k is numbered k mod p,
    and the fold has the p hops 0..p-1; a chain from origin o stands for those from o + p, o + 2p, ... (None
    unless that too holds exactly, as above)."""
    rounding = 15  # digits of a second (femtoseconds) to which latencies are compared
    latency_of: dict[tuple[Any, Any], float] = {}
    users: dict[tuple[Any, Any], list[tuple[int, float, float]]] = defaultdict(list)
    crossed: list[list[list[tuple[tuple[Any, Any], int]]]] = []  # ring -> hop -> (link, its entry in users[link])
    for ring in rings:
        row = []
        for k, (i, d) in enumerate(links):
            edges = step_edges(net, ring, i, d)
            lat = []
            for e in edges:
                if e not in latency_of:
                    latency_of[e] = net.graph.edges[e]["latency_s"]
                lat.append(latency_of[e])
            total, lead, hop = sum(lat), 0.0, []
            for e, latency in zip(edges, lat, strict=True):
                lead += latency
                hop.append((e, len(users[e])))
                users[e].append((k % period if period else k, lead, total - lead))
            row.append(hop)
        crossed.append(row)
    Key = tuple[float, tuple[tuple[int, float, float], ...]]  # (rate, the hops carried)
    port_of_key: dict[Key, int] = {}
    keys: list[Key] = []
    port_of: dict[tuple[Any, Any], int] = {}
    shifted: dict[tuple[Any, Any], list[tuple[int, float, float]]] = {}  # users[link], leads from its first
    for e, used in users.items():
        first = min(lead for _, lead, _ in used)
        shifted[e] = [(k, round(lead - first, rounding), round(tail + first, rounding)) for k, lead, tail in used]
        key = (float(net.graph.edges[e]["bandwidth_bytes_per_s"]), tuple(sorted(shifted[e])))
        if key not in port_of_key:
            port_of_key[key] = len(keys)
            keys.append(key)
        port_of[e] = port_of_key[key]
    signatures = [[tuple(sorted({(port_of[e], *shifted[e][at][1:]) for e, at in hop})) for hop in row]
                  for row in crossed]
    ring0 = signatures[0][:period] if period else signatures[0]
    if any(row[k] != ring0[k % len(ring0)] for row in signatures for k in range(len(row))):
        return None  # the rings (or ring 0 moved by the period) do not move alike: no folding onto ring 0
    routes = tuple(tuple((port, lead, tail, keys[port][1].count((k, lead, tail))) for port, lead, tail in hop)
                   for k, hop in enumerate(ring0))
    return PortFold(tuple(bw for bw, _ in keys), routes)


def ring_period(net: Network, ring: Ring) -> int:
    """The fewest positions p < n (dividing n) after which ring 0's hops i -> i + 1 repeat their costs (route
    latency, slowest link's rate): a GPU node's NVLink hops and its InfiniBand crossing; 0 if none (a candidate
    period for `fold_ring_ports`, which checks it)."""
    n = len(ring.devices)
    costs = []
    for i in range(n):
        edges = step_edges(net, ring, i, 1)
        costs.append((route_latency(net, edges), min(net.graph.edges[e]["bandwidth_bytes_per_s"] for e in edges)))
    return next((p for p in range(1, n) if n % p == 0 and all(costs[i] == costs[i % p] for i in range(n))), 0)


def link_ports(net: Network, routes: Sequence[Sequence[tuple[Any, Any]]]) -> PortFold:
    """Each physical link of ``routes`` (each a hop's link directions, in order) its own fair-shared port, nothing
    folded (one group's flows, every one of them followed): a hop's bytes join each link of its route once the head
    has crossed the links before it, as a cut-through message's do (`simulator.engine.network.Network._cut_through`;
    lead: the latencies up to and including the link, tail: those after it)."""
    port_of: dict[tuple[Any, Any], int] = {}
    rate: list[float] = []
    out = []
    for route in routes:
        lat = [net.graph.edges[e]["latency_s"] for e in route]
        total, lead, hop = sum(lat), 0.0, []
        for e, latency in zip(route, lat, strict=True):
            if e not in port_of:
                port_of[e] = len(rate)
                rate.append(float(net.graph.edges[e]["bandwidth_bytes_per_s"]))
            lead += latency
            hop.append((port_of[e], lead, total - lead, 1))
        out.append(tuple(hop))
    return PortFold(tuple(rate), tuple(out))


def shared_port_labels(m: int, users: dict[Any, list[int]]) -> list[int] | None:
    """A port label for each of ring 0's hops 0..m-1, given the hops each link carries (``users``: link -> hop
    indices, every ring's hops folded onto ring 0's by the rings' rotation): hops share a label when one link
    carries both (joined transitively). None unless every link carries all of its label's hops once each, so that
    a label is one fair-shared port (`simulator.collectives.broadcast._shared_ports`)."""
    label = list(range(m))

    def find(k: int) -> int:
        while label[k] != k:
            k = label[k]
        return k

    for ks in users.values():
        for k in ks[1:]:
            label[find(k)] = find(ks[0])
    ports = [find(k) for k in range(m)]
    members: dict[int, list[int]] = defaultdict(list)
    for k, p in enumerate(ports):
        members[p].append(k)
    if any(sorted(ks) != members[ports[ks[0]]] for ks in users.values()):
        return None  # a link carrying only part of its label's hops, or one twice: not one shared port
    return ports


#: most hops n (n - 1) a ring phase may have to be followed flow by flow (else the profile): 128 positions (at 64, the
#: profile of ideal nodes:16:8's 128-GPU ring was 1.20x its simulation at 256 MB, and `auto` ran the slower nvls_tree)
RING_FLUID_HOPS = 1 << 15


def shared_ring_time(hops: Sequence[tuple[float, float]], ports: Sequence[int], nbytes: float,
                     chains: Sequence[Sequence[int]] | None = None,
                     sizes: Sequence[Sequence[float]] | None = None) -> float:
    """Seconds of a one-way ring phase (AllGather: every position's ``nbytes`` bundle goes n - 1 hops on; a
    ReduceScatter is the same chains towards each owner) over hops of (latency s, bandwidth B/s) whose hops with
    one ``ports`` label share one fair-shared (processor-sharing) port -- ring 0 of NIC rings that are rotations of
    one another, the other rings folded in by that symmetry as in `shared_chain_time`.

    No sum in closed form. A ring whose hops run at different rates (NVLink and InfiniBand) is not in lock step:
    the fast hops run ahead and queue at the slow one, and a GPU's port is shared by as many of its rings' flows
    as are in flight at that instant (between 1 and 7 on H100 nodes), not by all of them at every step. So this
    follows the instants exactly (`shared_flow_time`): a hop's bundle waits the route's latency, then joins its
    port, whose flows each move at the port's rate over their number (`simulator.engine.channel.Channel`); when it
    ends, the chain's next hop starts. The phase ends when the last chain's last hop ends. ``chains``: the hops
    (indices into ``hops``) each chain crosses in order (default the one-way ring's: from every position, n - 1
    hops on); ``sizes``: the bytes each chain's hops carry, in units of ``nbytes`` (default 1 each: alike bundles;
    an AllToAll's chain forwards fewer chunks at each hop)."""
    n = len(hops)
    if chains is None:
        chains = [[(o + k) % n for k in range(n - 1)] for o in range(n)]
    labels = sorted(set(ports))
    index = {p: j for j, p in enumerate(labels)}
    rate = [0.0] * len(labels)
    for (_, bw), p in zip(hops, ports, strict=True):
        rate[index[p]] = bw
    fold = PortFold(tuple(rate), tuple(((index[p], latency, 0.0, 1),) for (latency, _), p in zip(hops, ports,
                                                                                                strict=True)))
    return shared_flow_time(fold, chain_flows(chains, sizes), nbytes)


@dataclass(frozen=True)
class PortFold:
    """Ring 0's hops on fair-shared ports, every other ring folded onto ring 0 by the rings' rotation
    (`fold_ring_ports`): a port is a class of physical links that carry the same hops of ring 0's rotations at the
    same latencies, so one stands for all; ring 0's hop k crosses the ports of ``routes[k]``."""

    rate: tuple[float, ...]  #: bytes per second of each port
    #: per hop: (port, seconds from the hop's start until its bytes join the port, seconds after they leave it until
    #: the hop has arrived, flows of that hop the port carries: one per ring whose hop crosses one of its links there)
    routes: tuple[tuple[tuple[int, float, float, int], ...], ...]

    @property
    def shared(self) -> bool:
        """Whether some port carries more than one hop (of one ring or of several): where none does, and the hops
        are alike, the chains move in lock step and `chain_phase_profile` is exact."""
        carried = [0] * len(self.rate)
        for route in self.routes:
            for port, _, _, rings in route:
                carried[port] += rings
        return any(c > 1 for c in carried)


Flow = tuple[int, float, tuple[int, ...]]  #: (hop, bytes in units of the phase's bundle, flows it waits for)


def chain_flows(chains: Sequence[Sequence[int]], sizes: Sequence[Sequence[float]] | None = None) -> list[Flow]:
    """The flows of ``chains`` (hop indices crossed in order; ``sizes``: each hop's bytes in bundles, default 1):
    each hop of a chain waits for the one before it."""
    out: list[Flow] = []
    for c, chain in enumerate(chains):
        for h, k in enumerate(chain):
            out.append((k, 1.0 if sizes is None else sizes[c][h], (len(out) - 1,) if h else ()))
    return out


def shared_flow_time(fold: PortFold, flows: Sequence[Flow], nbytes: float) -> float:
    """Seconds until the last of ``flows`` has arrived, over the fair-shared ports of ``fold``.

    A flow starts when the flows it waits for have arrived. Its bytes (its size times ``nbytes``) then join each
    port of its hop's route at that port's lead, as a cut-through message's head reaches each link of its route
    after the latencies before it (`simulator.engine.network.Network._cut_through`), together with the flows of
    the other rings folded onto that port (the rotation's images of ring 0's hop, alike in every way); a port's
    flows each move at its rate over their number (`simulator.engine.channel.Channel`). The flow has arrived once
    it has left every port of its route and the latencies after each (its tail) have passed. No sum in closed
    form: the sharing changes at every join and end, so this follows those instants exactly (fluid, event by
    event). Every flow of a port receives the same bytes while they share it, so they end in the order of their
    bytes plus the port's bytes each flow had received when they joined (a virtual clock a port, a heap of those
    virtual ends: O(flows x ports a route, log) work a flow)."""
    if nbytes <= 0 or not flows:
        return 0.0
    rate, routes = fold.rate, fold.routes
    ports = len(rate)
    virtual = [0.0] * ports  # bytes every flow of the port has received since it last idled, as of ``updated``
    updated = [0.0] * ports
    #: per port, a heap of (virtual end, flow, tail, rings): a folded entry counts once a ring whose flow it stands for
    queue: list[list[tuple[float, int, float, int]]] = [[] for _ in range(ports)]
    count = [0] * ports  # flows on the port
    version = [0] * ports  # a port's next end, as last set (older entries of ``events`` are stale)
    n = len(flows)
    waits = [len(deps) for _, _, deps in flows]
    then: list[list[int]] = [[] for _ in range(n)]
    for f, (_, _, deps) in enumerate(flows):
        for d in deps:
            then[d].append(f)
    route_of = [routes[k] for k, _, _ in flows]
    nbytes_of = [nbytes * size for _, size, _ in flows]
    left = [len(r) if b > 0 else 0 for r, b in zip(route_of, nbytes_of, strict=True)]
    arrive = [0.0] * n
    ready = [0.0] * n  # the latest arrival of the flows a flow waits for, so far
    #: (time, 0: a port's next end | 1: a join, port, version | flow, tail, rings); ends first at one instant
    events: list[tuple[float, int, int, int, float, int]] = []
    starting = [f for f in range(n) if not waits[f]]

    def release(f: int, at: float) -> None:  # flow f arrived at ``at``: the flows waiting on it wait for one fewer
        for g in then[f]:
            if at > ready[g]:
                ready[g] = at
            waits[g] -= 1
            if not waits[g]:
                starting.append(g)

    while True:
        while starting:  # flows whose waits are over: their bytes join their ports (or, with none, they arrive)
            f = starting.pop()
            at = ready[f]
            if left[f]:
                for port, lead, tail, rings in route_of[f]:
                    heappush(events, (at + lead, 1, port, f, tail, rings))
                continue
            arrive[f] = at
            release(f, at)
        if not events:
            return max(arrive)
        now, kind, j, f, tail, rings = heappop(events)
        if kind == 0 and f != version[j]:
            continue  # stale: the port's sharing changed since
        if count[j]:
            virtual[j] += (now - updated[j]) * rate[j] / count[j]
        updated[j] = now
        q = queue[j]
        if kind == 0:
            _, g, tail, rings = heappop(q)
            count[j] -= rings
            end = now + tail
            if end > arrive[g]:
                arrive[g] = end
            left[g] -= 1
            if not left[g]:
                release(g, arrive[g])
        else:
            heappush(q, (virtual[j] + nbytes_of[f], f, tail, rings))
            count[j] += rings
        version[j] += 1
        if count[j]:
            heappush(events, (now + (q[0][0] - virtual[j]) * count[j] / rate[j], 0, j, version[j], 0.0, 0))
        else:
            virtual[j] = 0.0
