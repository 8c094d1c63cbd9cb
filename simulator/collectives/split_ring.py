"""A ring with one slow cable: part of the array round the ring, the rest along the line that avoids the cable.

Issue 31, item 1. A degraded cable (`simulator.engine.faults.LinkDegraded`, fraction f of its bandwidth W, both
directions) slows every ring through it to its pace, and avoiding it (the line that starts after it) gives up
a link. Both at once do better: a share x of the array runs the bidirectional ring, the rest 1 - x the line
(``line`` for AllGather and ReduceScatter, ``line_pipelined`` for AllReduce), concurrently, on the same links.

Loads per link direction, from first principles (V the array, n chips, a = (n - 1) / n): the bidirectional
ring carries a/2 x xV (AllGather, ReduceScatter) or a x xV (AllReduce) on every link, the slow cable too; the
line AllGather carries (p + 1)/n x (1 - x)V on its p-th link one way, (n - 1 - p)/n the other (a at the ends);
``line_pipelined`` V on every line link. Balancing the slow cable (ring share only, at f W) against the
line's ends (ring share plus the line's):

    AllGather, ReduceScatter:  x a / (2 f) = x a / 2 + (1 - x) a      ->  x = 2 f / (1 + f)
    AllReduce:                 x a / f = x a + (1 - x)                ->  x = 1 / (a / f + 1 - a)

and the bandwidth term is then x a / (2 f) V / W (x a / f V / W): on torus:8 with one cable at half speed,
7/12 V / W for an AllGather (12.96 ms at 1 GB on v5e, the topology bound) against 7/8 V / W on the line alone
(19.45 ms), and 0.933 V / W for an AllReduce (20.74 ms, the bound) against V / W. Closed form
(`SplitRing.closed_form`): the larger of that balanced load (each link direction's bytes of both shares over
its bandwidth, the hop latencies of the longer of the two) and the two shares' own closed forms. The ring
share's simulation runs slower than its closed form where one link is slow (the steps behind it wait:
`simulator.collectives.fault_routes.INEXACT_MARGIN`), so ``auto`` weighs this one as inexact.

Applies to one group on a one-axis ring (``ring:n``, ``torus:n``) crossing exactly one degraded cable;
timing only.
"""
from __future__ import annotations

from simulator.collectives.algorithm import Algorithm, Capabilities, Job, get_algorithm, register
from simulator.collectives.groups import Group
from simulator.collectives.schedule import _BARRIER, Schedule, Transfer, _new_transfer
from simulator.collectives.timing import route_latency
from simulator.engine.network import Network
from simulator.errors import PodsimError

LINE_FOR = {"all_gather": "line", "reduce_scatter": "line", "all_reduce": "line_pipelined"}


def ring_cables(net: Network, group: Group) -> list[float] | None:
    """Bytes/s of each cable i -> i + 1 of the group's one-axis ring, the slower of its two directions; None where
    a cable is missing either way."""
    n = group.n
    chips = [group.members[(i,)] for i in range(n)]
    bw = []
    for i in range(n):
        a, b = chips[i], chips[(i + 1) % n]
        if not (net.graph.has_edge(a, b) and net.graph.has_edge(b, a)):
            return None
        bw.append(min(net.graph.edges[a, b]["bandwidth_bytes_per_s"], net.graph.edges[b, a]["bandwidth_bytes_per_s"]))
    return bw


def slow_cable(net: Network, group: Group) -> tuple[int, float] | None:
    """(position i whose link to i + 1 is the one slower cable, its share f of the others' bandwidth) of the
    group's ring; None unless exactly one cable of the ring is slower than the rest (both ways)."""
    bw = ring_cables(net, group)
    if bw is None:
        return None
    top = max(bw)
    slow = [i for i, b in enumerate(bw) if b < top * (1 - 1e-9)]
    if len(slow) != 1 or any(abs(b - top) > top * 1e-9 for i, b in enumerate(bw) if i != slow[0]):
        return None
    return slow[0], bw[slow[0]] / top


def share(kind: str, n: int, f: float) -> float:
    """The ring's share x of the array (see the module docstring)."""
    a = (n - 1) / n
    return 2 * f / (1 + f) if kind != "all_reduce" else 1 / (a / f + 1 - a)


class SplitRing(Algorithm):
    """x of the array round the ring through the slow cable, 1 - x along the line that avoids it."""

    name = "split_ring"
    summary = "ring with one slow cable: a share round the ring, the rest on the line avoiding it, at once"
    kinds = tuple(LINE_FOR)
    topologies = ("ring", "torus")
    capabilities = Capabilities(numeric=False)  #: timing and bytes only (`prepare` refuses data)
    nic_rings = False

    def unfit(self, kind: str, net: Network, groups: list[Group]) -> str | None:
        why = super().unfit(kind, net, groups)
        if why is None and (len(groups) != 1 or len(groups[0].sizes) != 1 or groups[0].n < 3 or not net.grid
                            or not groups[0].wraps[0] or slow_cable(net, groups[0]) is None):
            return "it needs one group on a one-axis ring that crosses exactly one degraded cable"
        return why

    def prepare(self, job: Job) -> None:
        if job.numeric:
            raise PodsimError("split_ring is timing only; give nbytes, or another --algorithm")
        from simulator.collectives.api import _job  # (the api builds the two shares' jobs as its own)

        group = job.group
        n = group.n
        found = slow_cable(job.net, group)
        assert found is not None  # `applies` admitted the group for its one slow cable
        i, f = found
        x = share(job.kind, n, f)
        line_group = Group((n,), (False,), {(p,): group.members[((i + 1 + p) % n,)] for p in range(n)})
        ring = get_algorithm("bidirectional")
        line = get_algorithm(LINE_FOR[job.kind])
        job.cache["split"] = (i, f, x)
        job.cache["ring"] = _job(ring, job.kind, job.net, job.groups, x * job.nbytes, None, job.multi_axis, None,
                                 job.root_pos, None, None, None)
        job.cache["line"] = _job(line, job.kind, job.net, [line_group], (1 - x) * job.nbytes, None,
                                 job.multi_axis, None, job.root_pos, None, None, None)

    def build(self, job: Job, s: Schedule) -> None:
        for name, part in (("bidirectional", job.cache["ring"]), (LINE_FOR[job.kind], job.cache["line"])):
            sub = Schedule(part.key_bytes)
            get_algorithm(name).build(part, sub)
            _merge(s, sub)

    def closed_form(self, job: Job) -> float:
        if "split" not in job.cache:  # a job moved onto priced links (`protocol._on` empties the cache)
            self.prepare(job)
        net, group, kind = job.net, job.group, job.kind
        n = group.n
        i, _, x = job.cache["split"]
        a = (n - 1) / n
        chips = [group.members[(p,)] for p in range(n)]
        ring_load = (a if kind == "all_reduce" else a / 2) * x * job.nbytes
        worst = 0.0
        for p in range(n):  # ring link p -> p + 1 (d = 1) and back (d = -1), line position q of that link
            q = (p - i - 1) % n  # the line's link q joins its positions q and q + 1 (none across the cable)
            for d in (1, -1):
                u, v = (chips[p], chips[(p + 1) % n]) if d == 1 else (chips[(p + 1) % n], chips[p])
                line = 0.0
                if p != i:
                    line = (1 - x) * job.nbytes * (1.0 if kind == "all_reduce" else
                                                   ((q + 1) if d == 1 else (n - 1 - q)) / n)
                worst = max(worst, (ring_load + line) / net.graph.edges[u, v]["bandwidth_bytes_per_s"])
        alpha = max(route_latency(net, [(chips[p], chips[(p + 1) % n])]) for p in range(n))
        balanced = worst + (n - 1) * alpha
        ring_alone = get_algorithm("bidirectional").closed_form(job.cache["ring"])
        line_alone = get_algorithm(LINE_FOR[kind]).closed_form(job.cache["line"])
        return max(balanced, ring_alone, line_alone)


def _merge(s: Schedule, sub: Schedule) -> None:
    """Append ``sub``'s transfers to ``s``: ids and dependencies shifted, each with its own bytes (the two shares
    cut the array into keys of different sizes); barriers stay barriers."""
    offset = len(s.transfers)
    for t in sub.transfers:
        deps = [d + offset for d in t.deps]
        if t.src is None:  # a barrier (`Schedule.barrier`)
            s.transfers.append(_new_transfer(Transfer, (len(s.transfers), None, None, (), "copy", tuple(deps), 0.0)))
            s._where.append((_BARRIER, None))  # noqa: SLF001 - as `Schedule.barrier` records one
        else:
            s.add(t.src, t.dst, 1, t.op, deps, ("split_ring", offset), t.dst, nbytes=t.nbytes)


SPLIT_RING = register(SplitRing())
