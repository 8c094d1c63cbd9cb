"""Broadcast and Reduce on multislice: trees in the root's slice, each chip's share along its DCN rail, and an
AllGather (Reduce: every dependency reversed) in every other slice, pipelined in batches (``slice_rails``).

Topology (`topologies.multilevel.multislice`): K slices of m chips (ICI links of bandwidth W, latency alpha) and
one DCN link per chip each way (bandwidth W_d) to one switch; a chip-to-chip DCN message crosses two links.

What the bound asks (`simulator.collectives.bounds`). Broadcast: every non-root slice must receive V, and only
through its m DCN links: ``V / (m W_d)``; the root must send V through its ICI and DCN links: ``V / (d W + W_d)``
(d ICI links). Which one binds depends on the shape (tpu-v5e, m W_d against d W: 4x4 the DCN, 8x8 the root).

Structure that meets both (the array cut into R rows of m A pieces of P = V / (R m A) bytes; A the slice axes
longer than one; piece ``j(r, b, p) = (r m + b) A + p``, b a local position's row-major index; the rows go in
batches, `ramp`: 1, 2, 4, ... rows up to a cap, batches of the cap, then down again, so the first shares leave
early and the last gather is short):

1. Root slice: `simulator.collectives.spanning_trees` pipelines all pieces over its d arc-disjoint trees, g
   consecutive pieces a message (message u = j // g on tree u mod d): its root's ICI links carry V / d each,
   the root-egress bound's ICI part.
2. DCN: chip (root slice, b) holds batch q's share b (its A pieces of each row of the batch) once the trees
   brought them, and sends it (one message) along its rail -- the chips at local position b of the slices in
   turn from the root's, a chain (each slice's up- and downlink carry V / m: the DCN bound; K - 2 hops of fill).
3. Every other slice gathers batch q once its m shares have come: part p of every share goes along the slice's
   axes in the order rotated by p (axis a_(p + phase mod A) in each phase, so the A parts of a phase use
   different axes), each axis as a bidirectional line (every chip's bundle goes both ways, own first, then
   what came from behind; on a wrapped axis n // 2 hops one way round and (n - 1) // 2 the other), a barrier
   between phases and batches: the slice's corner receives (m - 1) P A a row
   over its links, its ingress bound for the batch.

Closed form (first principles; every link direction carries one message at a time, each after the one before it
has arrived, so a message costs its route's latency plus bytes over its slowest link, ``h(bytes)``):

- a chain of hops of costs t_1..t_h delivers its i-th message (from 0) at ``sum t + i max t``; in tree t a
  position x gets message u (the ``u // d``-th of its tree) at ``a(x, u) = sum + (u // d) max`` over its path;
- share b of batch q (rows of B_q) is ready at ``r(b, q) = max a(b, j(r, b, p) // g)`` over its rows and parts
  (0 at the root); along the rail (hop k from slice k - 1 to slice k of the chain) each hop is split in two
  (`simulator.collectives.schedule.Schedule.add_split`): batch q's bytes leave once its share is in and batch
  q - 1's bytes have left, then the route's latency, ``L_k(b, q) = max(D_(k-1)(b, q), L_k(b, q - 1)) + |B_q| A P
  / W_d`` and ``D_k(b, q) = L_k(b, q) + alpha_k`` (a hop's latency is paid once, not once a batch);
- a line of n, bundles of B bytes: chip n - 1 gets chip 0's bundle last, at ``(n - 1) h(B)`` (by induction: the
  i-th link delivers chip j's bundle at (i - j + 1) h(B)); a ring, the same induction, at ``(n // 2) h(B)``;
  phase time ``max over parts``, the batch's ``T_ag(q) = sum over phases max_p reach(a_p) h(|B_q| P prod of
  the axes gathered before)``, reach n - 1 (line) or n // 2 (ring);
- slice k starts batch q at ``S_k(q) = max(max_b D_k(b, q), S_k(q - 1) + T_ag(q - 1))``;
  ``T = max(trees' end (their deepest chain, all messages), max_k S_k(Q - 1) + T_ag(Q - 1))``.

Reduce runs this DAG backwards, adding (each chip receives each piece once in Broadcast, so reversed every chip
sends each piece's partial sum once: the root ends with the sum), every link direction carrying the reversed
messages of the opposite direction in the reverse order: the same longest path, the same T.

Against the bound (time / bound at 64 MB, 256 MB, 1 GB; tpu-v5e): 2 x 4x4 1.06, 1.02, 1.007; 2 x 8x8 1.57, 1.28,
1.15; 4 x 4x4 1.11, 1.04, 1.03; tpu-v5p 4 x 4x4x4 2.13, 1.50, 1.23. On 8x8 slices the root's ICI links carry
V / (2W) (its DCN link idles: 1.035x the bound), the trees add their depth and a latency a message
(`spanning_trees` alone is 1.29x its bound at 64 MB on 8x8), the gathers keep pace with the trees, the last
batch's DCN message and gather come after. On 4x4 slices the DCN binds: a rail carries V / m in Q batches whose
bytes follow each other at once, and over K slices the chain adds K - 2 of its largest message and the latency
of each hop once. Before the hops were split (issue 31) every batch paid 2 DCN latencies one after another on
its link (at least ``2 sqrt(2 alpha_d (K - 2) V / (m W_d))`` over the bound: 4 x 4x4x4 at 1 GB 1.38x, 2 x 4x4
1.05x); relaying sub-shares two hops deep instead (each slice forwarding a (K - 1)-th to the others) puts K - 1
messages a batch on every link and measured no better by this closed form. What remains on v5p 4 x 4x4x4 (0.57
ms over the bound at 1 GB, at 28 rows) is not broken down further. R minimises the closed form within
`MAX_TRANSFERS`; g and the ramp's cap are the fastest by closed form for that R (`RailPlan.layout`).
"""
from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from simulator.collectives.algorithm import Algorithm, Job, register
from simulator.collectives.groups import Group
from simulator.collectives.schedule import Schedule
from simulator.collectives.slice_dag import broadcast_dag
from simulator.collectives.spanning_trees import shape_trees
from simulator.collectives.timing import route_latency
from simulator.engine.network import Network
from simulator.errors import PodsimError

Pos = tuple[int, ...]
MAX_TRANSFERS = 200_000  #: default rows stop where the schedule would pass this many transfers
MAX_ROWS = 256  #: rows (of m A pieces) the default tries


def hop_time(net: Network, src: Any, dst: Any, nbytes: float) -> float:
    """Seconds one message of ``nbytes`` takes from ``src`` to ``dst`` alone: route latency plus bytes over the
    slowest link of the route."""
    path = net.routes(src, dst)[0]
    edges = list(zip(path, path[1:], strict=False))
    return route_latency(net, edges) + nbytes / min(net.graph.edges[e]["bandwidth_bytes_per_s"] for e in edges)


class RailPlan:
    """The geometry of one job: slices in chain order, local positions, the root slice's trees, the parts' axes."""

    def __init__(self, net: Network, group: Group, root_pos: Pos) -> None:
        self.net, graph = net, net.graph
        k, local = graph.graph["shape"][0], tuple(graph.graph["shape"][1:])
        self.at = {(graph.nodes[c]["group"], tuple(graph.nodes[c]["local_coord"])): c for c in group.members.values()}
        root = graph.nodes[group.members[root_pos]]
        self.root_slice, self.root = root["group"], tuple(root["local_coord"])
        self.order = chain_order(graph.graph, k, self.root_slice)  # the chain: the root's slice first
        self.local = local
        self.positions = list(itertools.product(*(range(n) for n in local)))
        self.index = {x: i for i, x in enumerate(self.positions)}
        self.m = len(self.positions)
        wraps = tuple(graph.graph["wrap"][1:])
        self.axes = [a for a, n in enumerate(local) if n > 1]
        self.forest = _trees(local, wraps, self.axes, self.root)
        self.parts = len(self.axes)
        self.rotations = [self.axes[p:] + self.axes[:p] for p in range(self.parts)]
        self.rings = [bool(w) and n >= 3 for n, w in zip(local, wraps, strict=True)]  # gathered both ways round
        self._layouts: dict[tuple[int, float], tuple[list[int], int]] = {}
        self._routes: dict[tuple[Any, Any], tuple[float, float]] = {}
        pod = {s: s // graph.graph["slices_per_pod"] for s in self.order} if graph.graph.get("pods") else {}
        #: chain hops i (slice order[i - 1] -> order[i]) that leave a pod: the m rails' messages cross its core
        #: link together, each at ``rail_rate`` (a barrier before and after starts and ends them at once)
        self.crossings = {i for i in range(1, k) if pod and pod[self.order[i - 1]] != pod[self.order[i]]}
        self.pods = bool(pod)  #: multipod: `pod_gather` rotates its DCN steps and barriers each
        self._rates: dict[tuple[int, int], tuple[float, float]] = {}

    def hop(self, src: Any, dst: Any, nbytes: float) -> float:
        """`hop_time`, the route's latency and slowest bandwidth looked up once."""
        route = self._routes.get((src, dst))
        if route is None:
            base = hop_time(self.net, src, dst, 0.0)
            route = self._routes[(src, dst)] = (base, 1.0 / (hop_time(self.net, src, dst, 1.0) - base))
        return route[0] + nbytes / route[1]

    def chain_hop(self, i: int, nbytes: float) -> float:
        """Seconds of one rail message of ``nbytes`` on chain hop ``i``: `hop` but on a hop that leaves a pod,
        where all m rails' messages cross at once, each at the least over its route of a link's bandwidth over
        the rails that share it (fair shares: every rail alike, so each gets exactly that)."""
        if i not in self.crossings:
            x0 = self.positions[0]
            return self.hop(self.chip(self.order[i - 1], x0), self.chip(self.order[i], x0), nbytes)
        return self.together(self.order[i - 1], self.order[i], nbytes)

    def together(self, src: int, dst: int, nbytes: float) -> float:
        """Seconds of m messages of ``nbytes`` that start at once, from every chip of slice ``src`` to the chip at
        the same position of slice ``dst`` (equal routes, bar the chips' own links): the route's latency plus the
        bytes at the least over the route of a link's bandwidth over the messages on it (fair shares, every
        message alike: each gets exactly that); `hop` where no link carries two."""
        x0 = self.positions[0]
        if (src, dst) not in self._rates:
            count: dict[tuple[Any, Any], int] = {}
            for x in self.positions:
                path = self.net.routes(self.chip(src, x), self.chip(dst, x))[0]
                for e in zip(path, path[1:], strict=False):
                    count[e] = count.get(e, 0) + 1
            edges = self.net.graph.edges
            rate = min(edges[e]["bandwidth_bytes_per_s"] / count[e] for e in count)
            shared = max(count.values()) > 1
            self._rates[(src, dst)] = (self.hop(self.chip(src, x0), self.chip(dst, x0), 0.0), rate if shared else 0.0)
        base, rate = self._rates[(src, dst)]
        return base + nbytes / rate if rate else self.hop(self.chip(src, x0), self.chip(dst, x0), nbytes)

    def step_time(self, flows: list[tuple[int, Pos]], dst: int, nbytes: float) -> float:
        """Seconds of messages of ``nbytes`` that start at once, one from each (slice, position) of ``flows`` to
        the chip at that position of slice ``dst``, till the last lands: each its route's latency plus the bytes at
        the least over its route of a link's bandwidth over the messages on it (the fair share where every message
        on a shared link has it as its tightest, as between pods: the core's); `hop` where no link carries two."""
        routes = [self.net.routes(self.chip(s, x), self.chip(dst, x))[0] for s, x in flows]
        count: dict[tuple[Any, Any], int] = {}
        for path in routes:
            for e in zip(path, path[1:], strict=False):
                count[e] = count.get(e, 0) + 1
        edges = self.net.graph.edges
        worst = 0.0
        for (s, x), path in zip(flows, routes, strict=True):
            hops = list(zip(path, path[1:], strict=False))
            if max(count[e] for e in hops) == 1:
                worst = max(worst, self.hop(self.chip(s, x), self.chip(dst, x), nbytes))
                continue
            rate = min(edges[e]["bandwidth_bytes_per_s"] / count[e] for e in hops)
            worst = max(worst, self.hop(self.chip(s, x), self.chip(dst, x), 0.0) + nbytes / rate)
        return worst

    def chip(self, s: int, x: Pos) -> Any:
        """The chip at local position ``x`` of slice ``s``."""
        return self.at[(s, x)]

    def piece(self, row: int, x: Pos, p: int) -> int:
        """Piece index of part ``p`` of position ``x``'s share of ``row``."""
        return (row * self.m + self.index[x]) * self.parts + p

    def rows(self, chunks: int) -> int:
        """R: whole rows of m A pieces (timing mode rounds ``chunks`` up)."""
        return -(-chunks // (self.m * self.parts))

    def layout(self, rows: int, piece: float) -> tuple[list[int], int]:
        """(rows of each batch, g): g from `tree_keys`, then the `ramp` cap (1, 2, 4, ... up to ``rows``) of the
        fastest closed form (ties: the smallest)."""
        key = (rows, piece)
        if key not in self._layouts:
            g = self.tree_keys(rows, piece)
            caps = [2**i for i in range(rows.bit_length()) if 2**i <= rows]
            cap = min(caps, key=lambda c: (_time(self, ramp(rows, c), piece, g), c))
            self._layouts[key] = (ramp(rows, cap), g)
        return self._layouts[key]

    def line_hop(self, nbytes: float) -> float:
        """h(nbytes) of one ICI hop in a slice (every ICI link of a slice alike)."""
        s = self.order[0]
        a = self.axes[0]
        x = tuple(0 for _ in self.local)
        y = x[:a] + (1,) + x[a + 1:]
        return self.hop(self.chip(s, x), self.chip(s, y), nbytes)

    def tree_keys(self, rows: int, piece: float) -> int:
        """g, the pieces one tree message carries: of 1 and the divisors of m A on either side of the g that makes a
        tree's message count about ``sqrt((depth - 1) V / (d W alpha))`` (as `spanning_trees` pipelines), the one
        of the fastest closed form (ties: the smallest)."""
        each, d = self.m * self.parts, len(self.forest)
        alpha = self.line_hop(0.0)
        seconds = self.line_hop(piece) - alpha  # P / W
        depth = max(max(ds.values()) for _, ds in self.forest)
        per_tree = math.sqrt((depth - 1) * rows * each * seconds / (d * alpha)) if alpha > 0 else math.inf
        want = rows * each / max(1.0, d * per_tree)
        divisors = [g for g in range(1, each + 1) if each % g == 0]
        below = max([g for g in divisors if g <= want], default=1)
        above = min([g for g in divisors if g >= want], default=each)
        return min({1, below, above}, key=lambda g: (_time(self, [1] * rows, piece, g), g))

    def bundle(self, p: int, phase: int) -> int:
        """Pieces in one chip's bundle of part ``p`` in ``phase``: the product of the axes gathered before."""
        return math.prod(self.local[a] for a in self.rotations[p][:phase])

    def gather_time(self, piece: float) -> float:
        """T_ag of the module docstring: one batch's gather in a slice."""
        return sum(max(self.reach(self.rotations[p][f]) * self.line_hop(piece * self.bundle(p, f))
                       for p in range(self.parts)) for f in range(self.parts))

    def reach(self, axis: int) -> int:
        """Hops a bundle goes along ``axis`` in a gather: n - 1 on a line, n // 2 one way round a ring (the
        other way (n - 1) // 2)."""
        n = self.local[axis]
        return n // 2 if self.rings[axis] else n - 1

    def transfers(self, rows: int, batches: int, g: int = 1) -> int:
        """Transfers of a schedule of ``rows`` rows in ``batches`` batches, tree messages of ``g`` pieces (trees,
        rails: two a split hop, one a crossing between pods and its two barriers; gathers with their barriers)."""
        k, m, a, c = len(self.order), self.m, self.parts, len(self.crossings)
        lines = sum(m * (self.local[ax] - 1) for ax in self.axes)  # one part's line messages over all phases
        rails = m * (2 * (k - 1 - c) + c) + 2 * c
        return rows * m * a * (m - 1) // g + batches * (rails + (k - 1) * (a * lines + a + 1))


def chain_order(graph: dict, k: int, root_slice: int) -> list[int]:
    """The slices in rail-chain order: the root's first, then the next ones round; on multipod the rest of the
    root's pod, then each other pod in turn (from the root's pod round), every pod's slices from the root's offset
    in its pod round, so a rail leaves every pod once and crosses its core link once each way at most."""
    if not graph.get("pods"):
        return [(root_slice + i) % k for i in range(k)]
    per, pods = graph["slices_per_pod"], graph["pods"]
    home = root_slice // per
    return [p * per + (root_slice + i) % per for j in range(pods) for p in [(home + j) % pods] for i in range(per)]


def ramp(rows: int, cap: int) -> list[int]:
    """Rows of each batch: 1, 2, 4, ... below ``cap`` (while both ends fit), then batches of ``cap`` (and one of
    what is left), then the same ramp down (``cap`` 1: every batch one row)."""
    up: list[int] = []
    u = 1
    while u < cap and 2 * (sum(up) + u) <= rows:
        up.append(u)
        u *= 2
    rest = rows - 2 * sum(up)
    return up + [cap] * (rest // cap) + ([rest % cap] if rest % cap else []) + up[::-1]


def _trees(local: Pos, wraps: tuple[bool, ...], axes: list[int], root: Pos) -> tuple[tuple[dict, dict], ...]:
    """`shape_trees` of the slice over its axes longer than one (a 1x2 slice is a line of two), positions given
    back in the slice's own coordinates."""
    def full(y: Pos) -> Pos:
        out = [0] * len(local)
        for a, c in zip(axes, y, strict=True):
            out[a] = c
        return tuple(out)

    squeezed = shape_trees(Group(tuple(local[a] for a in axes), tuple(wraps[a] for a in axes), {}),
                           tuple(root[a] for a in axes))
    return tuple(({full(x): full(p) for x, p in parents.items()}, {full(x): h for x, h in depth.items()})
                 for parents, depth in squeezed)


def slice_rails_time(plan: RailPlan, rows: int, piece: float) -> float:
    """The closed form of the module docstring for ``rows`` rows of pieces of ``piece`` bytes (batches and tree
    messages as `RailPlan.layout` lays them)."""
    sizes, g = plan.layout(rows, piece)
    return _time(plan, sizes, piece, g)


def _time(plan: RailPlan, sizes: list[int], piece: float, g: int) -> float:
    """`slice_rails_time` with batches of ``sizes`` rows and tree messages of ``g`` pieces."""
    m, a, d = plan.m, plan.parts, len(plan.forest)
    chunks = sum(sizes) * m * a // g  # tree messages
    s0 = plan.order[0]
    paths: list[dict[Pos, tuple[float, float]]] = []  # per tree: position -> (sum, max) of its path's hop costs
    end = 0.0
    for t, (parents, depth) in enumerate(plan.forest):
        cost: dict[Pos, tuple[float, float]] = {plan.root: (0.0, 0.0)}
        for x in sorted(parents, key=depth.__getitem__):
            h = plan.hop(plan.chip(s0, parents[x]), plan.chip(s0, x), g * piece)
            total, top = cost[parents[x]]
            cost[x] = (total + h, max(top, h))
        paths.append(cost)
        count = len(range(t, chunks, d))
        if count:
            end = max(end, max(total + (count - 1) * top for total, top in cost.values()))

    # a(x, j) for every piece j of every row (numpy): piece j comes in tree message u = j // g, the (u // d)-th of
    # tree u mod d; a share is ready when its last piece is in (the root holds them all)
    rows = sum(sizes)
    totals = np.array([[paths[t][x][0] for x in plan.positions] for t in range(d)])
    tops = np.array([[paths[t][x][1] for x in plan.positions] for t in range(d)])
    j = (np.arange(rows)[:, None, None] * m + np.arange(m)[None, :, None]) * a + np.arange(a)[None, None, :]
    u = j // g
    at = np.arange(m)[None, :, None]
    arrival = (totals[u % d, at] + (u // d) * tops[u % d, at]).max(axis=2)  # (row, position): its share's last piece
    arrival[:, plan.index[plan.root]] = 0.0
    ends = np.cumsum(sizes)
    ready_at = np.maximum.reduceat(arrival, ends - np.asarray(sizes), axis=0).tolist()  # (batch, position)

    hops = range(1, len(plan.order))
    rail = [[0.0] * len(plan.order) for _ in plan.positions]  # per position, per chain hop: its last arrival
    start = [-math.inf] * len(plan.order)  # per slice of the chain: its last batch's start
    t_ag = 0.0
    x0 = plan.positions[0]
    latency = [0.0] + [plan.hop(plan.chip(plan.order[i - 1], x0), plan.chip(plan.order[i], x0), 0.0) for i in hops]
    for q, u_rows in enumerate(sizes):
        dcn = [plan.chain_hop(i, u_rows * a * piece) for i in hops]
        came = [0.0] * len(plan.order)
        ready = list(ready_at[q])
        for i in hops:
            if i in plan.crossings:  # a barrier before (every rail's message in, the last batch's across) and after
                ready = [max(max(ready), rail[0][i]) + dcn[i - 1]] * len(ready)
                for line in rail:
                    line[i] = ready[0]
            else:  # split: the bytes once in and the last batch's bytes gone, then the latency
                for b, line in enumerate(rail):
                    line[i] = max(ready[b], line[i]) + dcn[i - 1] - latency[i]
                    ready[b] = line[i] + latency[i]
            came[i] = max(ready)
        for i in hops:
            start[i] = max(came[i], start[i] + t_ag)
        t_ag = plan.gather_time(u_rows * piece)
    return max(end, max(start[1:]) + t_ag)


class SliceRails(Algorithm):
    """Broadcast / Reduce on multislice: trees in the root's slice, shares along DCN rails, gathers in the others."""

    name = "slice_rails"
    summary = ("Broadcast, Reduce on multislice: trees in the root's slice, each chip's share along its DCN rail "
               "through the slices, gathered in each slice; pipelined in batches (Reduce: reversed, adding)")
    kinds = ("broadcast", "reduce")
    topologies = ("multislice",)
    nic_rings = False

    def unfit(self, kind: str, net: Network, groups: list[Group]) -> str | None:
        why = super().unfit(kind, net, groups)
        if why is not None:
            return why
        graph = net.graph.graph
        if graph.get("pods"):
            return "its DCN chains assume one DCN switch (multislice), not pods under a core"
        if len(groups) != 1 or groups[0].n != len(net.chips):
            return "it sends to every chip of every slice (a group of the whole system)"
        if graph["shape"][0] < 2 or math.prod(graph["shape"][1:]) < 2:
            return "it needs two slices or more of two chips or more"
        return None

    def _plan(self, job: Job) -> RailPlan:
        key = ("slice_rails", job.root_pos)
        if key not in job.cache:
            job.cache[key] = RailPlan(job.net, job.group, job.root_pos)
        return job.cache[key]

    def default_chunks(self, kind: str, net: Network, groups: list[Group], nbytes: float | None) -> int:
        """R m A pieces, R (up to `MAX_ROWS`, within `MAX_TRANSFERS`) the rows of the fastest closed form (each
        laid out by `RailPlan.layout`); numeric mode: one row."""
        plan = RailPlan(net, groups[0], tuple(0 for _ in groups[0].sizes))  # the default root's; others differ little
        each = plan.m * plan.parts
        if nbytes is None:
            return each
        times = {}
        for rows in sorted({max(1, round(MAX_ROWS ** (i / 20))) for i in range(21)}):
            sizes, g = plan.layout(rows, nbytes / (rows * each))
            if rows > 1 and plan.transfers(rows, len(sizes), g) > MAX_TRANSFERS:
                continue  # not monotone in rows: more rows may batch into fewer, larger messages (g > 1)
            times[rows] = slice_rails_time(plan, rows, nbytes / (rows * each))
        return min(times, key=lambda r: (times[r], r)) * each

    def prepare(self, job: Job) -> None:
        plan = self._plan(job)
        each = plan.m * plan.parts
        if job.numeric and job.chunks % each:
            raise PodsimError(f"slice_rails sends rows of {each} pieces (a share of {plan.parts} per chip of a "
                              f"slice); numeric chunks={job.chunks} must be a multiple of {each}")

    def _piece(self, job: Job, plan: RailPlan) -> float:
        return job.key_bytes if job.numeric else job.nbytes / (plan.rows(job.chunks) * plan.m * plan.parts)

    def closed_form(self, job: Job) -> float:
        plan = self._plan(job)
        return slice_rails_time(plan, plan.rows(job.chunks), self._piece(job, plan))

    def build(self, job: Job, s: Schedule) -> None:
        plan = self._plan(job)
        piece = self._piece(job, plan)
        dag = broadcast_dag(plan, *plan.layout(plan.rows(job.chunks), piece))
        tag = ("slice_rails", id(job.group))

        def emit(src: Any, dst: Any, pieces: tuple[int, ...], op: str, deps: list[int]) -> int:
            keys: tuple | int = tuple(("piece", j) for j in pieces) if job.numeric else len(pieces)
            return s.add(src, dst, keys, op, deps, tag, dst, nbytes=None if job.numeric else len(pieces) * piece)

        def emit_split(src: Any, dst: Any, pieces: tuple[int, ...], op: str, deps: list[int],
                       left: list[int]) -> tuple[int, int]:
            keys: tuple | int = tuple(("piece", j) for j in pieces) if job.numeric else len(pieces)
            return s.add_split(src, dst, keys, op, deps, tag, dst, left,
                               nbytes=None if job.numeric else len(pieces) * piece)

        arrive = [0] * len(dag.ops)  # per op: its transfer that arrives (a split hop's delay)
        gone = [0] * len(dag.ops)  # per op: its transfer whose bytes have left (a split hop's bytes)
        if job.kind == "broadcast":
            for i, (src, dst, pieces, deps, left) in enumerate(dag.ops):
                if left is None:
                    arrive[i] = gone[i] = emit(src, dst, pieces, "copy", [arrive[k] for k in deps])
                else:
                    gone[i], arrive[i] = emit_split(src, dst, pieces, "copy", [arrive[k] for k in deps],
                                                    [gone[k] for k in left])
            return
        waited: list[list[int]] = [[] for _ in dag.ops]  # reversed dependencies: who waited for each message
        follows: list[list[int]] = [[] for _ in dag.ops]  # reversed order on a split hop: who followed each one
        for i, (_, _, _, deps, left) in enumerate(dag.ops):
            for dep in deps:
                waited[dep].append(i)
            for k in left or ():
                follows[k].append(i)
        for i in range(len(dag.ops) - 1, -1, -1):
            src, dst, pieces, _, left = dag.ops[i]
            deps = [arrive[k] for k in waited[i]]
            if left is None:
                arrive[i] = gone[i] = emit(dst, src, pieces, "add", deps)
            else:
                gone[i], arrive[i] = emit_split(dst, src, pieces, "add", deps, [gone[k] for k in follows[i]])


SLICE_RAILS = register(SliceRails())
