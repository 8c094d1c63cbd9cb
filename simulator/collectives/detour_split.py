"""One ring among many broken by a dead cable: a share of it detours, the rest runs the line (issue 31, item 1).

A dead cable on one row of a torus (torus:4x4 ``--axes 1``, cable (0,0)-(0,1)) unwraps the axis for every
row: all rows run lines (2x the rings' time), though only one row lost a link. Kept a ring, the broken row's
step across the missing cable detours over the idle links of another axis and one link of a neighbouring
row, which its own ring already fills: the borrowed link carries twice a ring's load (2x again). Between the
two: every other row keeps its ring; the broken row runs a share x of its array as the ring with the detour
and 1 - x as the line that starts after the missing cable (``line`` for AllGather and ReduceScatter,
``line_pipelined`` for AllReduce), all at once.

Loads per link direction, from first principles (a = (n - 1)/n, V the array of each group): a ring carries
a/2 x V_g on each of its ring links (AllReduce: a x V_g), laid on the link's route (the detour's links for the
missing step), V_g = V for the whole rows and xV for the broken one; the broken row's line carries (q + 1)/n
x (1 - x)V on its q-th link one way and (n - 1 - q)/n the other (AllReduce: (1 - x)V on every link). With the
borrowed link at a/2 V (1 + x) and the line's ends at a/2 x V + a (1 - x) V, an AllGather balances at x = 1/2:
0.75 a V / b, against a V / b for the lines (torus:4x4, 1 GB on v5e: 12.5 ms against 16.67 ms).
Closed form (`DetourSplit.closed_form`): the busiest link direction's bytes over its bandwidth under those
loads plus (n - 1) times the longest step's route latency, or the shares' own closed forms if longer; x is
the best of a grid of shares by that closed form. Timing only; groups on one wrapped axis of a grid, one of
them crossing one missing cable (the detour network of `simulator.collectives.fault_routes`).
"""
from __future__ import annotations

from typing import Any

from simulator.collectives.algorithm import Algorithm, Capabilities, Job, get_algorithm, register
from simulator.collectives.groups import Group
from simulator.collectives.schedule import Schedule
from simulator.collectives.split_ring import LINE_FOR, _merge
from simulator.collectives.timing import route_latency, step_edges
from simulator.engine.network import Network
from simulator.errors import PodsimError

SHARES = tuple(k / 20 for k in range(1, 20))  #: the ring shares x the closed form is tried at


def broken_step(net: Network, groups: list[Group]) -> tuple[int, int] | None:
    """(group index, ring position i) of the one missing cable i -> i + 1 among the groups' rings (None unless
    exactly one is missing and every other step is one link)."""
    found = []
    for g, group in enumerate(groups):
        n = group.n
        chips = [group.members[(i,)] for i in range(n)]
        for i in range(n):
            a, b = chips[i], chips[(i + 1) % n]
            if not (net.graph.has_edge(a, b) and net.graph.has_edge(b, a)):
                found.append((g, i))
    return found[0] if len(found) == 1 else None


class DetourSplit(Algorithm):
    """The broken row: a share round its ring with the detour, the rest on its line; the other rows: rings."""

    name = "detour_split"
    summary = "one ring broken by a dead cable: a share detours round it, the rest runs the line; rings elsewhere"
    kinds = tuple(LINE_FOR)
    topologies = ("torus",)
    capabilities = Capabilities(numeric=False)  #: timing and bytes only (`prepare` refuses data)
    nic_rings = False

    def unfit(self, kind: str, net: Network, groups: list[Group]) -> str | None:
        why = super().unfit(kind, net, groups)
        if why is None and (not net.grid or not net.faulted or any(len(g.sizes) != 1 or not g.wraps[0] or g.n < 3
                                                                   for g in groups)
                            or broken_step(net, groups) is None):
            return "it needs rings on one wrapped axis, exactly one of them crossing a missing cable (a detour)"
        return why

    def prepare(self, job: Job) -> None:
        if job.numeric:
            raise PodsimError("detour_split is timing only; give nbytes, or another --algorithm")
        found = broken_step(job.net, job.groups)
        assert found is not None  # `applies` admitted the groups for their one missing cable
        g, i = found
        broken = job.groups[g]
        n = broken.n
        line_group = Group((n,), (False,), {(p,): broken.members[((i + 1 + p) % n,)] for p in range(n)})
        job.cache["broken"] = (g, i, line_group)
        best = None
        for x in SHARES:
            self._shares(job, x)
            t = self.closed_form(job)
            if best is None or t < best[0] * (1 - 1e-9):
                best = (t, x)
        assert best is not None
        self._shares(job, best[1])

    def _shares(self, job: Job, x: float) -> None:
        from simulator.collectives.api import _job  # (the api builds the shares' jobs as its own)

        g, _, line_group = job.cache["broken"]
        others = [grp for k, grp in enumerate(job.groups) if k != g]
        ring = get_algorithm("bidirectional")
        job.cache["x"] = x
        job.cache["jobs"] = [
            ("bidirectional", _job(ring, job.kind, job.net, [job.groups[g]], x * job.nbytes, None, job.multi_axis,
                                   None, job.root_pos, None, None, None)),
            (LINE_FOR[job.kind], _job(get_algorithm(LINE_FOR[job.kind]), job.kind, job.net, [line_group],
                                      (1 - x) * job.nbytes, None, job.multi_axis, None, job.root_pos, None, None,
                                      None)),
        ] + ([("bidirectional", _job(ring, job.kind, job.net, others, job.nbytes, None, job.multi_axis, None,
                                     job.root_pos, None, None, None))] if others else [])

    def build(self, job: Job, s: Schedule) -> None:
        for name, part in job.cache["jobs"]:
            sub = Schedule(part.key_bytes)
            get_algorithm(name).build(part, sub)
            _merge(s, sub)

    def closed_form(self, job: Job) -> float:
        if "x" not in job.cache:  # a job moved onto priced links (`protocol._on` empties the cache)
            self.prepare(job)
        net, kind = job.net, job.kind
        g, _, line_group = job.cache["broken"]
        x = job.cache["x"]
        n = job.group.n
        a = (n - 1) / n
        per_link = a if kind == "all_reduce" else a / 2
        load: dict[Any, float] = {}
        latency = 0.0
        for k, group in enumerate(job.groups):
            share = x * job.nbytes if k == g else job.nbytes
            ring = group.ring((0,), 0)
            for i in range(n):
                for d in (1, -1):
                    edges = step_edges(net, ring, i, d)
                    latency = max(latency, route_latency(net, edges))
                    for e in edges:
                        load[e] = load.get(e, 0.0) + per_link * share
        line = line_group.ring((0,), 0)
        for q in range(n - 1):
            for d in (1, -1):
                u, v = (line.devices[q], line.devices[q + 1]) if d == 1 else (line.devices[q + 1], line.devices[q])
                part = 1.0 if kind == "all_reduce" else ((q + 1) if d == 1 else (n - 1 - q)) / n
                load[(u, v)] = load.get((u, v), 0.0) + part * (1 - x) * job.nbytes
        busiest = max(b / net.graph.edges[e]["bandwidth_bytes_per_s"] for e, b in load.items())
        alone = max(get_algorithm(name).closed_form(part) for name, part in job.cache["jobs"])
        return max(busiest + (n - 1) * latency, alone)


DETOUR_SPLIT = register(DetourSplit())
