"""Borrowed rings: a one-axis collective that also runs rings on idle neighbouring rows (issue 31, item 4).

A standalone collective only: inside a training or serving step the network is marked ``rows_in_use`` (the
step's other groups and stages run on every row), and the rows are not borrowed.

A group on one axis of a torus (a row) has two links per chip along that axis; its chips have more (six on a
3-D torus), whose far ends lie in the neighbouring rows. When no group runs on a neighbouring row (the
collective's groups leave it idle: one replica group, say), that row's ring links are free, and the row can
carry a share of the array: every member hands its shard of that share to its neighbour across (one hop
"up"), the neighbours run the ring among themselves, and each hands every shard back (one hop "down").
With H such helper rows and the row's own ring, each member receives over 2 + H links instead of 2.

Shares: the own ring gets weight 2 and each helper 1 (an AllGather's own ring carries (n - 1)/2 shards per
link direction, both ways into a member; a helper's down link carries n - 1 shards of its share), so all
2 + H links into a member carry (n - 1) units of V / (n (2 + H)): the per-chip ingress bound over every link,
(n - 1)/n x V / ((2 + H) b), from the own ring's (n - 1)/n x V / (2 b). ReduceScatter runs it backwards (each
member's contributions up, partial sums round the helper ring to the owner's neighbour, down onto the
owner, who adds its own); AllReduce is the ReduceScatter then the AllGather, the helper keeping the total
(every member's contributions go up, all n shards come down).

Measured (v5p slice:4x4x4, one row of 4 along axis 0, 1 GB; four idle neighbouring rows): AllGather 4.17 ms on
the row's own ring -> 1.51 ms (topology bound 1.39 ms); AllReduce 8.34 -> 2.78 ms (bound 2.78 ms). When every
row runs a group (``--axes 0``) no neighbour is idle and no algorithm can beat the rings: each row's shards must
cross 3 axis-0 links whatever their route (`simulator.collectives.bounds._axis_load_bound`: 4.17 ms).

Each share is cut into ``c`` chunks that flow independently, so the up, ring and down hops overlap.
Closed form (`BorrowedRings.closed_form`), from the loads by design: the busiest link direction's bytes
over its bandwidth -- own ring links (n - 1)/2 x 2 units a phase, helper ring links (n - 1)/2 units a phase,
down links (n - 1) (AllGather), 1 (ReduceScatter), n (AllReduce) units, up links the mirror -- plus the
latency of the longest chain of hops (up, the ring's ceil((n - 1)/2) steps each phase, down) and the fill
before the busiest link starts (one chunk up and one ring step). Timing only (numeric data is refused:
helpers are no members and hold no buffers); rings only (a wrapped axis, helpers' rows wrapped too).
Chosen by ``auto`` only where its closed form wins: where every row runs its own group, no neighbour is
idle and it does not apply.
"""
from __future__ import annotations

import math
from typing import Any

from simulator.collectives.algorithm import Algorithm, Capabilities, Job, register
from simulator.collectives.groups import Group
from simulator.collectives.schedule import Schedule
from simulator.collectives.timing import route_latency
from simulator.engine.network import Network
from simulator.errors import PodsimError

CHUNKS = 8  #: chunks per share (default)
OWN_WEIGHT = 2  #: the own ring's share, in units of a helper's


def _coords(net: Network) -> dict[Any, tuple[int, ...]]:
    return {v: tuple(c) for v, c in net.graph.nodes(data="coord") if c is not None}


def helper_rows(net: Network, groups: list[Group]) -> list[list[Any]] | None:
    """Per helper row, the chip across from each member (position order) of the one group; None where the
    collective cannot borrow (not one one-axis group on a grid ring)."""
    if not net.grid or len(groups) != 1 or len(groups[0].sizes) != 1 or not groups[0].wraps[0] or net.faulted \
            or net.rows_in_use:  # a step's other groups run there: no row is idle to borrow
        return None
    group = groups[0]
    coords = _coords(net)
    at = {c: v for v, c in coords.items()}
    row = [group.members[(i,)] for i in range(group.n)]
    axis_of = {a for u, w in zip(row, row[1:], strict=False) for a in range(len(net.shape))
               if coords[u][a] != coords[w][a]}
    if len(axis_of) != 1:
        return None
    (axis,) = axis_of
    busy = set(row)
    out = []
    for b in range(len(net.shape)):
        if b == axis or net.shape[b] < 2:
            continue
        for step in ((1, -1) if net.shape[b] > 2 else (1,)):
            across = []
            for chip in row:
                c = list(coords[chip])
                c[b] = (c[b] + step) % net.shape[b]
                across.append(at.get(tuple(c)))
            if None in across or busy.intersection(across) or not _is_ring(net, across):
                continue
            if not all(net.graph.has_edge(m, h) and net.graph.has_edge(h, m)
                       for m, h in zip(row, across, strict=True)):
                continue
            busy.update(across)
            out.append(across)
    return out or None


def _is_ring(net: Network, chips: list[Any]) -> bool:
    n = len(chips)
    pairs = [(chips[i], chips[(i + 1) % n]) for i in range(n)]
    return all(net.graph.has_edge(a, b) and net.graph.has_edge(b, a) for a, b in pairs)


class BorrowedRings(Algorithm):
    """A row's ring plus rings on idle neighbouring rows (see the module docstring)."""

    name = "borrowed_rings"
    summary = "one-axis ring that also borrows the rings of idle neighbouring rows: 2 + H links into each chip"
    kinds = ("all_gather", "reduce_scatter", "all_reduce")
    topologies = ("torus",)
    capabilities = Capabilities(numeric=False)  #: timing and bytes only (`prepare` refuses data)
    nic_rings = False

    def unfit(self, kind: str, net: Network, groups: list[Group]) -> str | None:
        why = super().unfit(kind, net, groups)
        if why is None and helper_rows(net, groups) is None:
            return ("it needs one group along one wrapped axis of a healthy torus, with a neighbouring row that "
                    "no group uses (every row busy: nothing to borrow)")
        return why

    def default_chunks(self, kind: str, net: Network, groups: list[Group], nbytes: float | None) -> int:
        return CHUNKS

    def prepare(self, job: Job) -> None:
        if job.numeric:
            raise PodsimError("borrowed_rings is timing only: its helper rows are no members and hold no data; "
                              "give nbytes, or another --algorithm")
        helpers = helper_rows(job.net, job.groups) or []
        job.cache["helpers"] = helpers
        # one unit of a share's chunk: a shard (V / n) over the (2 + H) weights and c chunks; the keys stay the
        # array's n shards (as `payload` cuts it), the transfers carry these bytes
        job.cache["unit_bytes"] = job.nbytes / (job.group.n * (OWN_WEIGHT + len(helpers)) * job.chunks)

    # -- the schedule ----------------------------------------------------------------------------------
    def build(self, job: Job, s: Schedule) -> None:
        group = job.group
        row = [group.members[(i,)] for i in range(group.n)]
        lanes = [(row, OWN_WEIGHT, False)] + [(h, 1, True) for h in job.cache["helpers"]]
        for lane, (chips, weight, helper) in enumerate(lanes):
            prior: dict[int, int] = {}  # member position -> its last up hop of the chunk before (chunks in turn)
            for chunk in range(job.chunks):
                prior = _Lane(job.kind, s, row, chips, weight, helper, ("borrowed", lane, chunk), prior,
                              job.cache["unit_bytes"]).build()

    # -- the closed form -------------------------------------------------------------------------------
    def closed_form(self, job: Job) -> float:
        net, n = job.net, job.group.n
        row = [job.group.members[(i,)] for i in range(n)]
        helpers = job.cache["helpers"]
        chunk = job.cache["unit_bytes"]  # one chunk of a weight-1 share of one shard
        unit = chunk * job.chunks  # all its chunks
        phases = 2 if job.kind == "all_reduce" else 1
        ring_units = phases * (n - 1) / 2
        down = {"all_gather": n - 1, "reduce_scatter": 1, "all_reduce": n}[job.kind]
        up = {"all_gather": 1, "reduce_scatter": n - 1, "all_reduce": n}[job.kind]
        bw = _bandwidth(net, row[0], row[1])
        busiest = OWN_WEIGHT * ring_units * unit / bw
        steps = phases * math.ceil((n - 1) / 2)
        alpha = route_latency(net, [(row[0], row[1])])
        chain = steps * alpha
        for h in helpers:
            b_ring, b_cross = _bandwidth(net, h[0], h[1]), _bandwidth(net, row[0], h[0])
            busiest = max(busiest, ring_units * unit / b_ring, max(down, up) * unit / b_cross)
            fill = chunk / b_cross + chunk / b_ring  # one chunk up and one ring step before the down link starts
            cross = route_latency(net, [(row[0], h[0])])
            chain = max(chain, 2 * cross + steps * alpha + fill)
        return chain + busiest


def _chains(n: int) -> tuple[tuple[int, int], ...]:
    """(direction, hops) of a shard's two chains round a ring of n: (n - 1)/2 each way, n/2 each way on an even
    ring (whose last hop, at the antipode, carries half)."""
    return ((1, (n - 1) // 2), (-1, (n - 1) // 2)) if n % 2 else ((1, n // 2), (-1, n // 2))


def _bandwidth(net: Network, u: Any, v: Any) -> float:
    return net.graph.edges[u, v]["bandwidth_bytes_per_s"]


class _Lane:
    """The transfers of one chunk of one lane (the own ring, or a helper row with its up and down hops)."""

    def __init__(self, kind: str, s: Schedule, row: list[Any], chips: list[Any], weight: int, helper: bool,
                 tag: Any, prior: dict[int, int], unit_bytes: float) -> None:
        self.kind, self.s, self.row, self.chips, self.w, self.unit_bytes = kind, s, row, chips, weight, unit_bytes
        self.helper, self.tag, self.prior = helper, tag, prior
        self.n = len(row)
        self.last_up: dict[int, int] = {}

    def build(self) -> dict[int, int]:
        """Add the chunk's transfers; returns each member's last up hop (the next chunk's go up after it)."""
        n = self.n
        if self.kind == "all_gather":
            ready = self._up_own() if self.helper else {i: [] for i in range(n)}
            have = self._gather(ready)
            if self.helper:
                self._down({j: {i: t for i, t in have[j].items() if i != j} for j in range(n)})
            return self.last_up
        ready_all = self._up_all() if self.helper else None
        sums = self._reduce(ready_all)
        if self.kind == "reduce_scatter":
            if self.helper:
                self._down({i: {i: sums[i]} for i in range(n)})
            return self.last_up
        have = self._gather({i: sums[i] for i in range(n)})
        if self.helper:
            have = {j: {**have[j], j: sums[j]} for j in range(n)}
            self._down(have)
        return self.last_up

    def _up(self, j: int, op: str) -> int:
        """Member j's hop up to its helper, after its hop up of the chunk before (the chunks go up in turn)."""
        deps = [self.last_up.get(j, self.prior.get(j))]
        t = self._add(self.row[j], self.chips[j], 1.0, op, [d for d in deps if d is not None])
        self.last_up[j] = t
        return t

    def _add(self, src: Any, dst: Any, units: float, op: str, deps: list[int]) -> int:
        return self.s.add(src, dst, 1, op, deps, self.tag, dst, nbytes=units * self.w * self.unit_bytes)

    def _up_own(self) -> dict[int, list[int]]:
        return {i: [self._up(i, "copy")] for i in range(self.n)}

    def _up_all(self) -> dict[tuple[int, int], list[int]]:
        """Every member's contribution to every shard (AllReduce: its own too; ReduceScatter: the others)."""
        out = {}
        for j in range(self.n):
            for i in range(self.n):
                if i != j or self.kind == "all_reduce":
                    out[(j, i)] = [self._up(j, "add")]
        return out

    def _gather(self, ready: dict[int, list[int]]) -> dict[int, dict[int, list[int]]]:
        """Bidirectional ring AllGather on the lane's chips: shard i from position i both ways (an even ring's
        antipode gets half from each side). Returns, per position j and shard i, the transfers delivering it."""
        n, chips = self.n, self.chips
        have: dict[int, dict[int, list[int]]] = {j: {} for j in range(n)}
        for i in range(n):
            for d, hops in _chains(n):
                prev = list(ready[i])
                for h in range(1, hops + 1):
                    a, b = (i + d * (h - 1)) % n, (i + d * h) % n
                    units = 0.5 if n % 2 == 0 and h == n // 2 else 1.0
                    t = self._add(chips[a], chips[b], units, "copy", prev)
                    have[b].setdefault(i, []).append(t)
                    prev = [t]
        return have

    def _reduce(self, ready: dict[tuple[int, int], list[int]] | None) -> dict[int, list[int]]:
        """Bidirectional ring ReduceScatter on the lane's chips: shard i's partial sums run toward position i
        from both sides (an even ring's antipode sends half each way). Returns, per owner i, the transfers
        whose arrival completes its sum at position i."""
        n, chips = self.n, self.chips

        def contribution(j: int, i: int) -> list[int]:
            return [] if ready is None else list(ready.get((j, i), []))

        done: dict[int, list[int]] = {}
        for i in range(n):
            last = list(contribution(i, i))
            for d, hops in _chains(n):
                start = (i - d * hops) % n
                prev = contribution(start, i)
                for h in range(hops):
                    a, b = (start + d * h) % n, (start + d * (h + 1)) % n
                    units = 0.5 if n % 2 == 0 and h == 0 else 1.0
                    prev = [self._add(chips[a], chips[b], units, "add", prev + contribution(b, i))]
                last += prev
            done[i] = last
        return done

    def _down(self, have: dict[int, dict[int, list[int]]]) -> None:
        for j, shards in have.items():
            for _, deps in sorted(shards.items()):
                self._add(self.chips[j], self.row[j], 1.0, "copy", deps)


BORROWED_RINGS = register(BorrowedRings())
