"""Gather and Scatter on multislice: every shard over its own chip's DCN link to its counterpart in the root's slice,
then up the root slice's trees, in rounds (``slice_gather``; Scatter: every dependency reversed).

Topology as in `simulator.collectives.slice_rails`: K slices of m chips, ICI links (bandwidth W, latency alpha) and
one DCN link per chip each way (W_d). Each of the n = K m chips holds a shard of s = V / n bytes (Gather).

What the bound asks (`simulator.collectives.bounds`): the root receives (n - 1) s through its ICI and DCN links;
the root's slice receives the other slices' (K - 1) m s = (K - 1) V / K through its m DCN downlinks.

Structure: the chip at local position b of slice k sends its shard to (root slice, b) in R messages of s / R
(at the root's own position straight to the root: its DCN link carries (K - 1) s); the m DCN downlinks of the
root's slice carry the (K - 1) V / K at once. In the root's slice, `simulator.collectives.tree_gather`'s
arc-disjoint trees carry what each chip holds to the root in rounds: round 0 the slice's own shards, round
j + 1 what the j-th DCN message into each chip brought (one item a chip), each item cut into d parts (one per
tree). A barrier ends each round; round j + 1 starts once round j ended and every j-th DCN message has come.

Closed form (a message costs its route's latency plus bytes over its slowest link, ``h(bytes)``; every link
carries one message at a time, each after the one before has arrived):

- the DCN messages into one chip come one after another (pieces in order, the slices in chain order within a
  piece), every chip of the root's slice in step, so the j-th is in at ``D_j = D_(j-1) + h_j(s / R)``, j < R (K - 1):
  ``(j + 1) h_dcn(s / R)`` where every route is alike (multislice); on multipod (`pod_gather`) the m messages
  from a slice of another pod cross its core link at once, each at its fair share
  (`simulator.collectives.slice_rails.RailPlan.step_time`);
- a round in which each chip holds one item of b bytes: link x -> parent(x) sends x's own item first, then its
  children's merged round-robin (as `tree_gather`): a child's i-th item arrives at (i + 1) h, never after its
  place in x's order, so every link is busy without a gap and the round lasts ``top h(b / d)``, top the most
  items on one of the root's links in a tree (m - 1 where the root has one child per tree);
  ``E_0 = top h(s / d)``, ``E_(j+1) = max(E_j, D_j) + top h(s / (R d))``;
- ``T = max(E_(R (K - 1)), D_(R (K - 1) - 1))`` (the root's own DCN messages end at the last D).

Scatter runs the same DAG backwards (each shard from the root down the trees, then out over the DCN): the same T.
Against the bound: the root's ICI links carry (m - 1) K s / d each, the bound's share of them where the root's DCN
link carries its (K - 1) s alongside; the rounds add the last round's items, (m - 1) s / (R d W), and R (K - 1)
DCN latencies (one a message; one item a round rather than K - 1 keeps the last round short). R minimises the
closed form. Numeric mode moves whole shards (keys ``(0, position)``): R = 1, each item on the tree of its
origin's chip id modulo d (the data checked against numpy; its time that of the unequal split).
"""
from __future__ import annotations

from typing import Any

from simulator.collectives.algorithm import Job, register
from simulator.collectives.groups import Group
from simulator.collectives.schedule import Schedule
from simulator.collectives.slice_rails import RailPlan, SliceRails
from simulator.engine.network import Network
from simulator.errors import PodsimError

Pos = tuple[int, ...]
MAX_ROUNDS = 64  #: DCN rounds the default tries


def _orders(plan: RailPlan, parents: dict[Pos, Pos], depth: dict[Pos, int],
            own: dict[Pos, list[Any]]) -> dict[Pos, list]:
    """Per position x, the items link x -> parent(x) carries, in order: x's own, then its children's merged
    round-robin."""
    kids: dict[Pos, list[Pos]] = {}
    for x in sorted(parents):
        kids.setdefault(parents[x], []).append(x)
    order: dict[Pos, list[Any]] = {}
    for x in sorted(parents, key=lambda y: -depth[y]):
        lists = [order[c] for c in kids.get(x, [])]
        merged = [lst[j] for j in range(max(map(len, lists), default=0)) for lst in lists if j < len(lst)]
        order[x] = list(own.get(x, [])) + merged
    return order


def gather_time(plan: RailPlan, rounds: int, shard: float) -> float:
    """The closed form of the module docstring (timing mode: every item in d parts, one per tree)."""
    k, d = len(plan.order), len(plan.forest)
    dcn = [plan.step_time([(source(plan, x, j), x) for x in plan.positions], plan.order[0], shard / rounds)
           for j in range(k - 1)]  # the steps of one round (the rounds repeat them)

    def top(items: int) -> int:  # most items on one of the root's links in a tree
        return max(max((len(_orders(plan, parents, depth, {x: [0] * items for x in parents})[x])
                        for x, p in parents.items() if p == plan.root), default=0) for parents, depth in plan.forest)

    end = top(1) * plan.line_hop(shard / d)  # every ICI hop of a slice alike
    step = top(1) * plan.line_hop(shard / (rounds * d))
    came = 0.0  # D_j: the j-th DCN message into every chip of the root's slice (all in step)
    for j in range(rounds * (k - 1)):
        came += dcn[j % (k - 1)]
        end = max(end, came) + step
    return max(end, came)


def source(plan: RailPlan, x: Pos, j: int) -> int:
    """The slice whose chip sends its shard's ``j``-th DCN message to position ``x`` of the root's slice: the other
    slices in chain order, each position's order rotated by its index on multipod (`pod_gather`), so every step
    brings each of them about m / (K - 1) messages and the core links carry their share of every step."""
    others = plan.order[1:]
    return others[(j + (plan.index[x] if plan.pods else 0)) % len(others)]


class SliceGather(SliceRails):
    """Gather / Scatter on multislice: shards over DCN to their counterparts in the root's slice, then its trees."""

    name = "slice_gather"
    summary = ("Gather, Scatter on multislice: every shard over its chip's DCN link to its counterpart in the root's "
               "slice, then up (down) that slice's arc-disjoint trees, in rounds")
    kinds = ("gather", "scatter")
    topologies = ("multislice",)
    nic_rings = False

    def default_chunks(self, kind: str, net: Network, groups: list[Group], nbytes: float | None) -> int:
        """R, the DCN rounds of the fastest closed form (up to `MAX_ROUNDS`); numeric mode: 1."""
        if nbytes is None:
            return 1
        plan = RailPlan(net, groups[0], tuple(0 for _ in groups[0].sizes))
        shard = nbytes / groups[0].n
        return min(range(1, MAX_ROUNDS + 1), key=lambda r: (gather_time(plan, r, shard), r))

    def prepare(self, job: Job) -> None:
        if job.numeric and job.chunks != 1:
            raise PodsimError(f"slice_gather moves whole shards in numeric mode; chunks={job.chunks} must be 1")

    def closed_form(self, job: Job) -> float:
        return gather_time(self._plan(job), job.chunks, job.key_bytes)

    def build(self, job: Job, s: Schedule) -> None:
        plan = self._plan(job)
        ops = _gather_dag(job, plan)
        tag = ("slice_gather", id(job.group))
        where = {c: p for p, c in job.group.members.items()}

        def emit(src: Any, dst: Any, origins: tuple, nbytes: float, deps: list[int]) -> int:
            keys: tuple | int = tuple((0, where[c]) for c in origins) if job.numeric else len(origins)
            return s.add(src, dst, keys, "copy", deps, tag, dst, nbytes=None if job.numeric else nbytes)

        if job.kind == "gather":
            for src, dst, origins, nbytes, deps in ops:
                emit(src, dst, origins, nbytes, deps)
            return
        after: list[list[int]] = [[] for _ in ops]
        for i, op in enumerate(ops):
            for dep in op[4]:
                after[dep].append(i)
        ids = [0] * len(ops)
        for i in range(len(ops) - 1, -1, -1):
            src, dst, origins, nbytes, _ = ops[i]
            ids[i] = emit(dst, src, origins, nbytes, [ids[k] for k in after[i]])


def _gather_dag(job: Job, plan: RailPlan) -> list[tuple[Any, Any, tuple, float, list[int]]]:
    """Gather's messages (src, dst, origin chips, bytes, deps), every dependency first; barriers have no ends."""
    ops: list[tuple[Any, Any, tuple, float, list[int]]] = []

    def add(src: Any, dst: Any, origins: tuple, nbytes: float, deps: list[int]) -> int:
        ops.append((src, dst, origins, nbytes, deps))
        return len(ops) - 1

    rounds, d, shard = job.chunks, len(plan.forest), job.key_bytes
    s0, others = plan.order[0], plan.order[1:]
    into: dict[Pos, int] = {}  # position of the root's slice -> the last DCN message into it
    came: list[list[int]] = []  # per DCN message into every position: its messages into all but the root
    after: list[int] = []  # multipod: the barrier after the step before (each step starts and ends at once)
    for j in range(rounds * len(others)):
        came.append([])
        step: list[int] = []
        for x in plan.positions:
            sl = source(plan, x, j)
            behind = after if plan.pods else [into[x]] if x in into else []
            into[x] = add(plan.chip(sl, x), plan.chip(s0, x), (plan.chip(sl, x),), shard / rounds, behind)
            step.append(into[x])
            if x != plan.root:
                came[-1].append(into[x])
        if plan.pods:
            after = [add(None, None, (), 0.0, step)]
            came[-1] = after
    start = add(None, None, (), 0.0, [])
    for j in range(len(came) + 1):
        if j:
            start = add(None, None, (), 0.0, came[j - 1] + [start])
        own = {x: [plan.chip(s0 if not j else source(plan, x, j - 1), x)] for x in plan.positions if x != plan.root}
        sent = _tree_round(plan, own, (shard if not j else shard / rounds) / d, start, job.numeric, add)
        start = add(None, None, (), 0.0, sent + [start])
    return ops


def _tree_round(plan: RailPlan, own: dict[Pos, list[Any]], part: float, start: int, numeric: bool,
                add: Any) -> list[int]:
    """One round up the trees: items (origin chips) of each position, a part of each per tree (numeric: the whole
    item on the tree of its origin's chip id modulo d); the messages sent."""
    d, s0 = len(plan.forest), plan.order[0]
    sent: list[int] = []
    for t, (parents, depth) in enumerate(plan.forest):
        mine = {x: [c for c in items if not numeric or c % d == t] for x, items in own.items()}
        order = _orders(plan, parents, depth, mine)
        here: dict[tuple[Pos, Any], int] = {}  # (position, origin) -> the message that brought its part there
        for x in sorted(parents, key=lambda y: -depth[y]):
            p, behind = parents[x], list[Any]()
            for c in order[x]:
                deps = ([here[(x, c)]] if (x, c) in here else [start]) + behind
                here[(p, c)] = msg = add(plan.chip(s0, x), plan.chip(s0, p), (c,), part if not numeric else 0.0, deps)
                behind = [msg]
                sent.append(msg)
    return sent


SLICE_GATHER = register(SliceGather())
