"""Binary and double binary tree AllReduce (NCCL's tree), pipelined in chunks, for switched topologies.

Ranks 0..n-1 (group order, so a GPU node's ranks are consecutive) form an in-order binary tree: with
i = rank + 1, a rank's level is the number of trailing zero bits of i, its children are i -/+ 2^(level-1)
and its parent the nearest existing ancestor; the leaves are the even ranks, and the subtrees of low
levels stay inside a node, so only the upper levels cross the network, each on the crossing GPU's own
NIC. ``double_binary_tree`` adds the mirrored tree (rank r <-> n-1-r), whose leaves are the odd ranks:
every rank is a leaf in one tree and interior in the other, and each tree carries half the array --
NCCL's double binary tree, whose bandwidth no rank's port limits more than twice V. For an odd count the second
tree is the first shifted by one rank (NCCL's ``ncclGetDtree``; a mirror would keep the same leaves), so one
rank is a leaf in both and every other rank is interior in at most one.

The array is cut into ``CHUNKS`` chunks per tree; a chunk is summed up the tree (a rank sends its
partial sum once both children's have arrived) and broadcast back down, and each tree edge carries the
chunks in order (chunk c+1 once chunk c has arrived), so the chunks pipeline. Closed form
(`BinaryTree.closed_form`): the chunks' sends followed on the group's fair-shared links
(`simulator.collectives.timing.shared_flow_time`), equal to the simulation. The lock-step form it replaced,
``2 D (a + S / b) + (c - 1)(a + k S / b)`` for depth D, chunk S and k chunk streams (up and down, both trees)
on the busiest link, was 10-11% above the simulation on calibrated nodes:4:8 (issue 31): the first chunks share
ports less than the steady state does and the streams drift out of step. It stays for trees of more than
`FLUID_SENDS` sends (groups of more than 128 ranks), whose flows would cost too much to follow.
"""
from __future__ import annotations

from collections import Counter

from simulator.collectives.algorithm import Algorithm, Job, register
from simulator.collectives.groups import Group
from simulator.collectives.schedule import Schedule
from simulator.collectives.switched import SWITCHED, edges, keys, members, pair_time
from simulator.collectives.timing import Flow, link_ports, route_latency, shared_flow_time
from simulator.engine.network import Network

CHUNKS = 8  #: pipeline chunks per tree
FLUID_SENDS = 1 << 12  #: most sends (chunks x tree edges x 2 ways) whose flows the closed form follows (else lock step)


def parents(n: int) -> dict[int, int]:
    """rank -> parent rank in the in-order binary tree of ``n`` ranks (the root has none)."""
    out = {}
    for r in range(n):
        i = r + 1
        while True:
            level = (i & -i).bit_length() - 1
            up = i - (1 << level) if i >> (level + 1) & 1 else i + (1 << level)
            if up == i or up <= 0 or level >= n.bit_length():
                break
            if up <= n:
                out[r] = up - 1
                break
            i = up
    return out


def trees(n: int, double: bool) -> list[dict[int, int]]:
    """Parent maps of the tree (and, for the double tree, of its second tree: the mirror image r <-> n-1-r for an
    even ``n``, the tree shifted by one rank, r -> r+1 mod n, for an odd one, as NCCL's ``ncclGetDtree`` builds
    them). The mirror of an odd count maps the even ranks onto themselves, so both trees would share every leaf
    and every interior rank (n = 7: ranks 1, 3, 5 interior in both, each carrying both trees' halves); shifted, the
    trees share one leaf and every other rank is interior in at most one."""
    one = parents(n)
    if not double:
        return [one]
    if n % 2:
        return [one, {(r + 1) % n: (p + 1) % n for r, p in one.items()}]
    return [one, {n - 1 - r: n - 1 - p for r, p in one.items()}]


class BinaryTree(Algorithm):
    """AllReduce: chunks summed up an in-order binary tree and broadcast back down, pipelined."""

    name = "binary_tree"
    summary = "AllReduce up and down one binary tree of ranks, in pipelined chunks (log2(n) depth)"
    kinds = ("all_reduce",)
    topologies = SWITCHED
    nic_rings = False
    double = False

    def unfit(self, kind: str, net: Network, groups: list[Group]) -> str | None:
        why = super().unfit(kind, net, groups)
        if why is None and groups[0].n < 3:
            return f"a tree of {groups[0].n} chips is a single exchange; use one_shot or a ring"
        return why

    def parts(self, kind: str, group: Group, multi_axis: str) -> int:
        return CHUNKS * (2 if self.double else 1)

    def build(self, job: Job, s: Schedule) -> None:
        for group in job.groups:
            ranks, every = members(group), group.positions()
            ids: list[int] = []
            for t, c, way, a, b, deps in sends(group.n, self.double):
                ids.append(s.add(ranks[a], ranks[b], keys(job, every, [t * CHUNKS + c]), "add" if way == "up" else
                                 "copy", [ids[d] for d in deps], (way, id(group), t, c), ranks[b]))

    def closed_form(self, job: Job) -> float:
        """The tree's chunks followed on the group's fair-shared links (`timing.shared_flow_time`): each of
        `sends` waits for the sends it names, then its route's latency, and shares each link with the sends on it
        at that instant (an interior GPU's NVLink port carries its chunks up and down, and its children's, at
        once; the first chunks share less than the steady state). No sum in closed form: the lock-step form
        ``2 D (a + S / b) + (c - 1)(a + k S / b)`` (k: the streams on the busiest link) puts every stream on every
        link at every step, 10-11% above the simulation on calibrated nodes:4:8 at 64 MB (issue 31); it stays for
        trees of more sends than `FLUID_SENDS`."""
        ranks, n = members(job.group), job.group.n
        if 2 * CHUNKS * len(trees(n, self.double)) * (n - 1) > FLUID_SENDS:
            return _lock_step(job, ranks, n, self.double)
        index: dict[tuple[int, int], int] = {}  # (rank, rank) -> its hop
        flows: list[Flow] = [(index.setdefault((a, b), len(index)), 1.0, deps)
                             for _, _, _, a, b, deps in sends(n, self.double)]
        routes = [edges(job.net, ranks[a], ranks[b]) for a, b in sorted(index, key=index.__getitem__)]
        return shared_flow_time(link_ports(job.net, routes), flows, job.key_bytes * n)


class DoubleBinaryTree(BinaryTree):
    """Two mirrored binary trees, each carrying half the array (NCCL's double binary tree)."""

    name = "double_binary_tree"
    summary = "AllReduce over two mirrored binary trees (each rank a leaf in one), half the array each"
    double = True


def sends(n: int, double: bool) -> list[tuple[int, int, str, int, int, tuple[int, ...]]]:
    """Every send of the AllReduce on ``n`` ranks, in order: (tree, chunk, ``"up"`` or ``"down"``, from rank, to
    rank, the earlier sends it waits for, by index). Up: a rank's partial sum of a chunk goes to its parent once
    its children's have arrived and its previous chunk has left for the parent (each link carries the chunks in
    order). Down: the root's sum comes back, each rank forwarding it to a child once it has it and its previous
    chunk has gone to that child. The schedule (`BinaryTree.build`) and the closed form are both made from it."""
    out: list[tuple[int, int, str, int, int, tuple[int, ...]]] = []
    for t, parent in enumerate(trees(n, double)):
        children: dict[int, list[int]] = {r: [] for r in range(n)}
        for r, p in parent.items():
            children[p].append(r)
        order = _bottom_up(parent, n)
        root = next(r for r in range(n) if r not in parent)
        up_prev: dict[int, int] = {}  # rank -> its previous chunk's send to its parent (link order)
        down_prev: dict[tuple[int, int], int] = {}
        for c in range(CHUNKS):
            sent: dict[int, int] = {}
            for r in order:
                if r in parent:
                    deps = [sent[k] for k in children[r]] + ([up_prev[r]] if r in up_prev else [])
                    out.append((t, c, "up", r, parent[r], tuple(deps)))
                    sent[r] = up_prev[r] = len(out) - 1
            have = {root: [sent[k] for k in children[root]]}
            for r in reversed(order):
                for k in children[r]:
                    deps = have[r] + ([down_prev[(r, k)]] if (r, k) in down_prev else [])
                    out.append((t, c, "down", r, k, tuple(deps)))
                    down_prev[(r, k)] = len(out) - 1
                    have[k] = [down_prev[(r, k)]]
    return out


def _bottom_up(parent: dict[int, int], n: int) -> list[int]:
    """Ranks ordered so that every child comes before its parent."""
    depth = {}
    for r in range(n):
        d, x = 0, r
        while x in parent:
            x, d = parent[x], d + 1
        depth[r] = d
    return sorted(range(n), key=lambda r: -depth[r])


def _lock_step(job: Job, ranks: list, n: int, double: bool) -> float:
    """The lock-step form ``2 D (a + S / b) + (c - 1)(a + k S / b)``: the first chunk up the deepest path and
    down, hop by hop, then the others one slowest edge apart, k the chunk streams (up and down, every tree) on
    the edge's busiest link."""
    chunk = job.key_bytes * n
    streams: Counter = Counter()  # link -> chunk streams crossing it (up and down, every tree)
    hops = []
    for parent in trees(n, double):
        for r, p in parent.items():
            for a, b in ((r, p), (p, r)):
                route = edges(job.net, ranks[a], ranks[b])
                hops.append(route)
                streams.update(route)
    first = max(2 * _path_time(job, ranks, parent, r, chunk) for parent in trees(n, double) for r in range(n))
    g = job.net.graph
    period = max(route_latency(job.net, route) + max(streams[e] * chunk / g.edges[e]["bandwidth_bytes_per_s"]
                                                      for e in route) for route in hops)
    return first + (CHUNKS - 1) * period


def _path_time(job: Job, ranks: list, parent: dict[int, int], r: int, chunk: float) -> float:
    """One chunk from rank ``r`` up to the root, hop by hop."""
    total = 0.0
    while r in parent:
        total += pair_time(job.net, ranks[r], ranks[parent[r]], chunk)
        r = parent[r]
    return total


BINARY_TREE = register(BinaryTree())
DOUBLE_BINARY_TREE = register(DoubleBinaryTree())
