"""The DAG of `simulator.collectives.slice_rails`' Broadcast: trees in the root's slice, shares along the DCN rails,
gathers in the other slices (Reduce adds it backwards). A list of messages (src, dst, pieces, deps, after) with
every dependency first; barriers have no ends; the rails' hops inside a pod are split (bytes, then latency). Its
timing is `simulator.collectives.slice_rails.slice_rails_time`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from simulator.collectives.slice_rails import RailPlan

Pos = tuple[int, ...]


class _Dag:
    """Broadcast's messages as a DAG (src, dst, pieces, deps), to be added as they are or reversed (Reduce)."""

    def __init__(self) -> None:
        #: (src, dst, pieces, deps, after): ``after`` None for a plain message (its latency, then its bytes), else
        #: a hop split in two (`simulator.collectives.schedule.Schedule.add_split`): its bytes once ``deps`` have
        #: arrived and the messages ``after`` (the hop's earlier ones) have left the link, then the latency
        self.ops: list[tuple[Any, Any, tuple[int, ...], list[int], list[int] | None]] = []

    def add(self, src: Any, dst: Any, pieces: tuple[int, ...], deps: list[int], after: list[int] | None = None) -> int:
        self.ops.append((src, dst, pieces, deps, after))
        return len(self.ops) - 1

    def barrier(self, deps: list[int]) -> int:
        return self.add(None, None, (), deps)


def broadcast_dag(plan: RailPlan, sizes: list[int], g: int) -> _Dag:
    """The messages of the module docstring's Broadcast (batches of ``sizes`` rows, tree messages of ``g`` pieces),
    in an order where every dependency comes first."""
    dag, m, a, d = _Dag(), plan.m, plan.parts, len(plan.forest)
    chunks = sum(sizes) * m * a // g
    batches = [range(sum(sizes[:q]), sum(sizes[:q + 1])) for q in range(len(sizes))]
    s0 = plan.order[0]
    got: dict[tuple[Pos, int], int] = {}  # (root-slice position, tree message) -> the message that brought it
    for t, (parents, depth) in enumerate(plan.forest):
        for x in sorted(parents, key=depth.__getitem__):
            p, behind = parents[x], list[Any]()
            for u in range(t, chunks, d):
                up = [got[(p, u)]] if p != plan.root else []
                got[(x, u)] = behind_id = dag.add(plan.chip(s0, p), plan.chip(s0, x), tuple(range(u * g, u * g + g)),
                                                  up + behind)
                behind = [behind_id]
    rail: dict[tuple[int, Pos], int] = {}  # (chain hop, position) -> its last message
    came: dict[tuple[int, int], list[int]] = {}  # (chain hop, batch) -> the messages that brought its shares
    after: dict[int, int] = {}  # crossing chain hop -> the barrier after its last batch's messages
    for q, rows in enumerate(batches):
        shares = {x: tuple(plan.piece(row, x, p) for row in rows for p in range(a)) for x in plan.positions}
        ready = {x: sorted({got[(x, j // g)] for j in shares[x]}) if x != plan.root else [] for x in plan.positions}
        for i in range(1, len(plan.order)):
            if i in plan.crossings:  # every rail's message of the batch leaves the pod at once, and lands at once
                before = dag.barrier([d for x in plan.positions for d in ready[x]] + ([after[i]] if i in after
                                                                                     else []))
            for x in plan.positions:
                behind = [rail[(i, x)]] if (i, x) in rail else []
                src, dst = plan.chip(plan.order[i - 1], x), plan.chip(plan.order[i], x)
                if i in plan.crossings:
                    msg = dag.add(src, dst, shares[x], [before])
                else:  # split: the batch's bytes follow the last one's at once, the hop's latency paid once
                    msg = dag.add(src, dst, shares[x], ready[x], behind)
                rail[(i, x)] = msg
                came.setdefault((i, q), []).append(msg)
                ready[x] = [msg]
            if i in plan.crossings:
                after[i] = dag.barrier(came[(i, q)])
                ready = {x: [after[i]] for x in plan.positions}
    for i in range(1, len(plan.order)):
        done: list[int] = []
        for q, rows in enumerate(batches):
            start = dag.barrier(came[(i, q)] + done)
            for f in range(a):
                start = dag.barrier(_gather_phase(dag, plan, plan.order[i], rows, f, start))
            done = [start]
    return dag


def _gather_phase(dag: _Dag, plan: RailPlan, s: int, rows: range, f: int, start: int) -> list[int]:
    """Phase ``f`` of the gather of the batch of ``rows`` in slice ``s``: every part's bidirectional lines; the
    messages sent."""
    sent: list[int] = []
    for p, axes in enumerate(plan.rotations):
        axis, before = axes[f], axes[:f]
        n = plan.local[axis]
        for base in (x for x in plan.positions if x[axis] == 0):
            line = [base[:axis] + (i,) + base[axis + 1:] for i in range(n)]
            bundles = [tuple(plan.piece(row, y, p) for row in rows for y in plan.positions
                             if all(y[c] == x[c] for c in range(len(x)) if c not in before)) for x in line]
            if plan.rings[axis]:
                _ring_ways(dag, plan, s, line, bundles, start, sent)
                continue
            for way in (line, line[::-1]):
                got: dict[tuple[int, int], int] = {}  # (position on the way, origin) -> the message that brought it
                for i in range(n - 1):
                    behind: list[int] = []
                    for j in range(i, -1, -1):  # own bundle first, then those that came from behind
                        deps = ([got[(i, j)]] if j < i else [start]) + behind
                        got[(i + 1, j)] = msg = dag.add(plan.chip(s, way[i]), plan.chip(s, way[i + 1]),
                                                        bundles[line.index(way[j])], deps)
                        behind = [msg]
                        sent.append(msg)
    return sent


def _ring_ways(dag: _Dag, plan: RailPlan, s: int, ring: list[Pos], bundles: list[tuple[int, ...]], start: int,
               sent: list[int]) -> None:
    """A wrapped axis: every bundle n // 2 hops one way round, (n - 1) // 2 the other; link i -> i + 1 sends its own
    bundle, then the one from 1 behind, 2 behind, ... (by induction the k-th is in at (k + 1) h: no gap)."""
    n = len(ring)
    for step, reach in ((1, n // 2), (-1, (n - 1) // 2)):
        got: dict[tuple[int, int], int] = {}  # (place, origin) -> the message that brought it there
        behind: dict[int, int] = {}  # place -> the last message on its link the way ``step``
        for k in range(reach):
            for i in range(n):
                o, nxt = (i - step * k) % n, (i + step) % n
                deps = ([got[(i, o)]] if k else [start]) + ([behind[i]] if i in behind else [])
                got[(nxt, o)] = behind[i] = msg = dag.add(plan.chip(s, ring[i]), plan.chip(s, ring[nxt]), bundles[o],
                                                          deps)
                sent.append(msg)
