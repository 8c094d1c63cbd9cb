"""Root collectives: Gather, Scatter and Reduce, beside Broadcast.

V is the gathered array (Gather: each member holds V/n, the root ends with all V), the root's array
(Scatter: member p ends with shard p of it, V/n) or each member's array (Reduce: the root ends with the
sum of the n arrays, V). Two algorithms:

- ``root_chains`` (rings, lines, tori, meshes): axis by axis, as Broadcast runs, along the root's lines.
  Gather and Reduce take the axes last to first, each line delivering to the member at the root's
  coordinate; Scatter takes them first to last, out from it. On an axis a ring splits its members at the
  antipode, each half using the links of its own direction; a line is split at the root. A link carries
  one message at a time, each after the one before it has arrived (a hop: route latency alpha plus its bytes
  over the link bandwidth b).

  Gather / Scatter: on axis a the members of a side forward bundles of B_a = (V/n) prod_(b>a) n_b bytes
  (everything their line of the later axes gathered) hop by hop, nearest first (Gather; Scatter sends the
  farthest first), so the link next to the root carries the m_a bundles of its side back to back:

      T = sum_a m_a (alpha_a + B_a / b_a),  m_a = ceil((n_a - 1) / 2) on a ring, max(r, n_a - 1 - r) on a line.

  Reduce (Broadcast reversed, adding on the way): the array cut into c pieces; each member adds the
  partial sums that reach it into its own piece and forwards it, so the pieces pipeline along the critical
  path of H = sum_a m_a hops: ``sum(t_h) + (c - 1) max(t_h)``, t_h = alpha + V / (c b)
  (`simulator.collectives.timing.chain_time`), c chosen to minimise it.

- ``root_rings`` (Reduce on rings and tori whose axes all wrap): pieces j < c/2 go all the way round one way,
  the others the other way, each along n_a - 1 hops per axis, so each of the root's links carries V/2 and the
  halves never share a link: ``chain_time`` of c/2 pieces of V/c along sum_a (n_a - 1) hops. Slower than
  root_chains for small arrays (twice the hops), up to twice as fast for large ones; auto picks by size.

- ``root_direct`` (switches, GPU nodes): every member sends its shard (Gather), or the root sends each
  member its shard (Scatter), or every member sends its whole array to be added (Reduce), straight through
  the switch, all at once: T = route latency + (bytes through the busiest link) / its bandwidth -- the root's
  port carries (n - 1) V / n (Gather, Scatter) or (n - 1) V (Reduce).
"""
from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, ClassVar

from simulator.collectives.algorithm import Algorithm, Job, register
from simulator.collectives.groups import Group
from simulator.collectives.schedule import Schedule
from simulator.collectives.timing import chain_time
from simulator.engine.network import Network

ROOT_KINDS = ("gather", "scatter", "reduce")
MAX_PIECES = 1024  #: pieces Reduce may cut its array into (the closed form picks the best power of two)
NUMERIC_PIECES = 8  #: pieces of a numeric Reduce when the caller does not say (a divisor of the row if need be)


def sides(n: int, wrap: bool, r: int) -> list[tuple[int, int]]:
    """(direction, members) of each side of root coordinate ``r`` on an axis of ``n``: a ring splits at
    the antipode (the +1 side takes the odd one out), a line at the root."""
    if n <= 1:
        return []
    if wrap and n > 2:
        return [(1, n // 2), (-1, (n - 1) // 2)]
    return [(d, m) for d, m in ((1, n - 1 - r), (-1, r)) if m > 0]


def _hop(net: Network, u: Any, v: Any) -> tuple[float, float]:
    """(route latency s, slowest bandwidth B/s) of the route from ``u`` to ``v``."""
    path = net.routes(u, v)[0]
    edges = [net.graph.edges[e] for e in zip(path, path[1:], strict=False)]
    return sum(e["latency_s"] for e in edges), min(e["bandwidth_bytes_per_s"] for e in edges)


def _lines(group: Group, axis: int, root: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Bases of the lines along ``axis`` this phase uses: later axes at the root's coordinates, earlier any."""
    return [p for p in group.positions() if p[axis] == root[axis] and p[axis + 1:] == root[axis + 1:]]


def _along(p: tuple[int, ...], axis: int, k: int, n: int) -> tuple[int, ...]:
    return p[:axis] + (k % n,) + p[axis + 1:]


class RootChains(Algorithm):
    """Gather, Scatter and Reduce axis by axis along the root's lines (see the module docstring)."""

    name = "root_chains"
    summary = "Gather, Scatter, Reduce axis by axis along the root's lines (Reduce pipelined in pieces, adding)"
    kinds: ClassVar[tuple[str, ...]] = ROOT_KINDS
    topologies: ClassVar[tuple[str, ...]] = ("ring", "line", "torus", "mesh")
    nic_rings = False

    def default_chunks(self, kind: str, net: Network, groups: list[Group], nbytes: float | None) -> int:
        if kind != "reduce":
            return 1
        if nbytes is None:
            return NUMERIC_PIECES
        costs = [(c, self._reduce_time(net, groups[0], (0,) * len(groups[0].sizes), nbytes / c, c))
                 for c in (2**i for i in range(11))]
        return min(costs, key=lambda tc: (tc[1], tc[0]))[0]

    def _axis_hops(self, net: Network, group: Group, root: tuple[int, ...], a: int) -> tuple[int, float, float]:
        """(members of the longer side, slowest hop latency, slowest hop bandwidth) toward the root on axis a."""
        n = group.sizes[a]
        longest = max((m for _, m in sides(n, group.wraps[a], root[a])), default=0)
        if not longest:
            return 0, 0.0, math.inf
        hops = [_hop(net, group.members[_along(root, a, root[a] + d * k, n)],
                     group.members[_along(root, a, root[a] + d * (k - 1), n)])
                for d, m in sides(n, group.wraps[a], root[a]) for k in range(1, m + 1)]
        return longest, max(h[0] for h in hops), min(h[1] for h in hops)

    def _reduce_time(self, net: Network, group: Group, root: tuple[int, ...], piece: float, c: int) -> float:
        path: list[float] = []
        for a in range(len(group.sizes)):
            m, lat, bw = self._axis_hops(net, group, root, a)
            path += [lat + piece / bw] * m
        return chain_time(path, c)

    def closed_form(self, job: Job) -> float:
        group, root = job.group, job.root_pos
        if job.kind == "reduce":
            return self._reduce_time(job.net, group, root, job.key_bytes, job.chunks)
        total, bundle = 0.0, job.key_bytes * group.n
        for a in range(len(group.sizes)):
            bundle /= group.sizes[a]  # B_a = (V/n) prod_(b>a) n_b
            m, lat, bw = self._axis_hops(job.net, group, root, a)
            total += m * (lat + bundle / bw)
        return total

    def build(self, job: Job, s: Schedule) -> None:
        for group in job.groups:
            if job.kind == "reduce":
                _reduce(job, group, s, self.reduce_chains)
            else:
                _gather_scatter(job, group, s)

    def reduce_chains(self, n: int, wrap: bool, r: int, j: int, pieces: int) -> list[tuple[int, int]]:
        """(direction, members) of the chains piece ``j`` of ``pieces`` takes toward coordinate ``r``."""
        return sides(n, wrap, r)


def _keys(job: Job, positions: list[tuple[int, ...]]) -> tuple | int:
    return tuple((0, q) for q in positions) if job.numeric else len(positions)


def _gather_scatter(job: Job, group: Group, s: Schedule) -> None:
    """Bundles hop along each side, one message per link at a time (see the module docstring)."""
    root, k = job.root_pos, len(group.sizes)
    arrived: dict[Any, list[int]] = defaultdict(list)  # device -> transfers that brought it its bundles
    gather = job.kind == "gather"
    for a in (reversed(range(k)) if gather else range(k)):
        for base in _lines(group, a, root):
            n = group.sizes[a]
            for d, m in sides(n, group.wraps[a], root[a]):
                at = [_along(base, a, root[a] + d * i, n) for i in range(m + 1)]  # at[0] is the line's root
                bundle = {i: [q for q in group.positions() if q[:a + 1] == at[i][:a + 1]] for i in range(1, m + 1)}
                behind: dict[int, int] = {}  # hop i (between at[i] and at[i-1]) -> its last message
                order = range(1, m + 1) if gather else range(m, 0, -1)
                for origin in order:
                    ready = list(arrived[group.members[at[origin if gather else 0]]])
                    hops = range(origin, 0, -1) if gather else range(1, origin + 1)
                    for i in hops:
                        src, dst = (at[i], at[i - 1]) if gather else (at[i - 1], at[i])
                        deps = ready + ([behind[i]] if i in behind else [])
                        behind[i] = s.add(group.members[src], group.members[dst], _keys(job, bundle[origin]),
                                          "copy", deps, ("root", id(group), a, origin), group.members[dst])
                        ready = [behind[i]]
                    arrived[group.members[at[0] if gather else at[origin]]].append(ready[0])


def _reduce(job: Job, group: Group, s: Schedule, chains: Any) -> None:
    """Pieces flow toward the root's coordinate axis by axis (last first), added into each member's own,
    along the chains ``chains(n, wrap, r, j, pieces)`` gives piece j."""
    root, k = job.root_pos, len(group.sizes)
    arrived: dict[tuple[Any, int], list[int]] = defaultdict(list)  # (device, piece) -> transfers added into it
    for a in reversed(range(k)):
        for base in _lines(group, a, root):
            n = group.sizes[a]
            behind: dict[tuple[int, int], int] = {}  # (direction, hop) -> the last piece sent there
            for j in range(job.chunks):
                for d, m in chains(n, group.wraps[a], root[a], j, job.chunks):
                    at = [group.members[_along(base, a, root[a] + d * i, n)] for i in range(m + 1)]
                    for i in range(m, 0, -1):  # from the far end in
                        deps = list(arrived[(at[i], j)]) + ([behind[d, i]] if (d, i) in behind else [])
                        keys = (("piece", j),) if job.numeric else 1
                        behind[d, i] = s.add(at[i], at[i - 1], keys, "add", deps, ("reduce", id(group), a, j),
                                             at[i - 1])
                        arrived[(at[i - 1], j)].append(behind[d, i])


class RootRings(RootChains):
    """Reduce on rings both ways round: half the pieces go all the way round each way (see the module docstring)."""

    name = "root_rings"
    summary = "Reduce on tori: half the pieces all the way round each way, so both of the root's links carry V/2"
    kinds = ("reduce",)
    topologies = ("ring", "torus")

    def unfit(self, kind: str, net: Network, groups: list[Group]) -> str | None:
        why = super().unfit(kind, net, groups)
        if why is None and not all(w and n > 2 for n, w in zip(groups[0].sizes, groups[0].wraps, strict=True)):
            return "every axis must be a ring of more than two members"
        return why

    def reduce_chains(self, n: int, wrap: bool, r: int, j: int, pieces: int) -> list[tuple[int, int]]:
        return [(1 if j < pieces // 2 else -1, n - 1)]

    def default_chunks(self, kind: str, net: Network, groups: list[Group], nbytes: float | None) -> int:
        if nbytes is None:
            return NUMERIC_PIECES
        hops = [self._ring_hop(net, groups[0], a) for a in range(len(groups[0].sizes))]
        times = {c: self._time(groups[0], hops, nbytes / c, c) for c in (2**i for i in range(1, 12))}
        return min(times, key=lambda c: (times[c], c))

    def closed_form(self, job: Job) -> float:
        """Each half: c/2 pieces pipelined along sum_a (n_a - 1) hops, on links the other half does not use."""
        hops = [self._ring_hop(job.net, job.group, a) for a in range(len(job.group.sizes))]
        return self._time(job.group, hops, job.key_bytes, job.chunks)

    @staticmethod
    def _time(group: Group, hops: list[tuple[float, float]], piece: float, c: int) -> float:
        path = [lat + piece / bw for (lat, bw), n in zip(hops, group.sizes, strict=True) for _ in range(n - 1)]
        return chain_time(path, math.ceil(c / 2))

    @staticmethod
    def _ring_hop(net: Network, group: Group, a: int) -> tuple[float, float]:
        """(slowest latency, slowest bandwidth) of the neighbour hops round axis ``a``'s ring through position 0."""
        n, base = group.sizes[a], (0,) * len(group.sizes)
        hops = [_hop(net, group.members[_along(base, a, i, n)], group.members[_along(base, a, i + d, n)])
                for i in range(n) for d in (1, -1)]
        return max(h[0] for h in hops), min(h[1] for h in hops)


class RootDirect(Algorithm):
    """Every member straight to the root (Gather, Reduce) or the root straight to each (Scatter)."""

    name = "root_direct"
    summary = "Gather, Scatter, Reduce in one step straight through the switch, to or from the root"
    kinds = ROOT_KINDS
    topologies = ("switch", "nodes", "multislice")
    nic_rings = False

    def unfit(self, kind: str, net: Network, groups: list[Group]) -> str | None:
        why = super().unfit(kind, net, groups)
        if why is None and net.grid:
            return "it sends through a switch; grids have none"
        return why

    def _messages(self, job: Job, group: Group) -> list[tuple[Any, Any, tuple[int, ...]]]:
        root = group.members[job.root_pos]
        others = [p for p in group.positions() if p != job.root_pos]
        if job.kind == "scatter":
            return [(root, group.members[p], p) for p in others]
        return [(group.members[p], root, p) for p in others]

    def closed_form(self, job: Job) -> float:
        net, latency = job.net, 0.0
        load: defaultdict[Any, float] = defaultdict(float)
        each = job.key_bytes * (job.chunks if job.kind == "reduce" else 1)
        for src, dst, _ in self._messages(job, job.group):
            path = net.routes(src, dst)[0]
            edges = list(zip(path, path[1:], strict=False))
            latency = max(latency, sum(net.graph.edges[e]["latency_s"] for e in edges))
            for e in edges:
                load[e] += each
        return latency + max(b / net.graph.edges[e]["bandwidth_bytes_per_s"] for e, b in load.items())

    def build(self, job: Job, s: Schedule) -> None:
        for group in job.groups:
            for src, dst, p in self._messages(job, group):
                if job.kind == "reduce":
                    keys = tuple(("piece", j) for j in range(job.chunks)) if job.numeric else job.chunks
                    op = "add"
                else:
                    keys, op = _keys(job, [p]), "copy"
                s.add(src, dst, keys, op, [], ("root_direct", id(group)), dst)


ROOT_CHAINS = register(RootChains())
ROOT_DIRECT = register(RootDirect())
ROOT_RINGS = register(RootRings())
