"""A ring through one slow chip: the others run a line, the slow chip feeds both its ends (AllReduce, AllGather, RS).

A chip whose HBM runs at f (`simulator.engine.faults.ChipSlow`) moves its links' bytes at f: both its ring cables
carry f W. The ring through it runs every step at the slow chip's pace (torus:8 AllReduce of 1 GB on tpu-v5e at
f = 0.5: 54.2 ms, healthy 19.45 ms), and the pipelined line with the slow chip at one end (`line_pipelined`, the
slow chip's cable to one neighbour left out) sends the whole array each way over its one slow cable: V / (f W),
44.4 ms. Yet the slow chip need only send its array and take the sum back, V each way over its two cables:
V / (2 f W) = 22.2 ms (the topology bound).

Here the n - 1 other chips run `line_pipelined`'s AllReduce on the line between the slow chip's neighbours
e0 = s + 1 and e1 = s - 1 (piece j added hop by hop from both ends toward the middle chip and its total copied back
out), and the slow chip s takes part in every piece through one end: piece j's contribution goes s -> e_(j mod 2)
as an ``add`` before that end sends its sum on, and the total comes back e_(j mod 2) -> s once that end holds it.
Each of s's cables carries every other piece, V / 2 each way; each line link carries V each way as on a plain line.

Closed form (`SlowChipLine.closed_form`), from first principles: a hop costs t = alpha + (V / c) / b for c pieces
over a link of bandwidth b. A piece's longest chain runs from s through its end to the middle and back out, to s
again if it leaves by the same end; the pieces pipeline behind the busiest link, which works c t (a line link) or
(c / 2) t_s (a cable of s, t_s = alpha + (V / c) / (f W)), so

    T = max over chains (sum of their hops' t) + max(c t, (c / 2) t_s) - (that link's one piece),

about max(V / W, V / (2 f W)) plus the fill: 1 GB on torus:8 at f = 0.5, 23.6 ms against 44.4 and 54.2 ms.
AllGather (ReduceScatter: the same hops reversed in time, each an ``add`` the other way). The others' line passes
every shard, in two halves, both ways along it (each chip's own first, then nearer shards before farther ones);
the slow chip sends one half of its shard into each end, which the line passes on last; and each end forwards to the
slow chip the n - 1 halves nearest it (shards 0, 1, ... from e0; ..., n - 2 from e1). Each slow cable then carries
(n - 1)/(2n) V at f W and the line's busiest links n - 2 shards and a half, (n - 3/2)/n V at W, so

    T = max((n - 1) V / (2 n f W), (n - 3/2) V / (n W)) + (n - 1) alpha,

the slow chip's bound (it must take in the other (n - 1)/n V over its two cables) wherever f <= (n - 1)/(2n - 3):
torus:8 at f = 0.5, 19.45 ms against 27.8 ms round the ring through it.

Timing only; groups on one wrapped axis of four chips or more, one of them a ring whose links are all alike but for
the two cables of one chip (both slower by the same factor), every other a ring of alike links, which runs the
bidirectional ring alongside (torus:4x4 ``--axes 1`` with a slow chip: its row so, the other rows as rings).
"""
from __future__ import annotations

from typing import Any

from simulator.collectives.algorithm import Algorithm, Capabilities, Job, get_algorithm, register
from simulator.collectives.groups import Group
from simulator.collectives.line_pipelined import LINE_PIPELINED, middle
from simulator.collectives.schedule import Schedule
from simulator.collectives.split_ring import _merge, ring_cables
from simulator.collectives.timing import route_latency
from simulator.engine.network import Network
from simulator.errors import PodsimError


def _slow_group(net: Network, groups: list[Group]) -> int | None:
    """The index of the one group whose ring runs through one slow chip (`slow_chip`), every other group's ring
    links all alike; None otherwise."""
    found = [k for k, g in enumerate(groups) if slow_chip(net, g) is not None]
    if len(found) != 1:
        return None
    for k, group in enumerate(groups):
        chips = [group.members[(i,)] for i in range(group.n)]
        pairs = [(chips[i], chips[(i + 1) % group.n]) for i in range(group.n)]
        if k == found[0]:
            continue
        if not all(net.graph.has_edge(a, b) and net.graph.has_edge(b, a) for a, b in pairs):
            return None
        bw = {net.graph.edges[e]["bandwidth_bytes_per_s"] for a, b in pairs for e in ((a, b), (b, a))}
        if max(bw) > min(bw) * (1 + 1e-9):
            return None
    return found[0]


def slow_chip(net: Network, group: Group) -> tuple[int, float] | None:
    """(ring position s of the one chip whose two ring cables are slower than every other cable of the ring, their
    share f of the others' bandwidth); None unless exactly that."""
    n = group.n
    bw = ring_cables(net, group)
    if bw is None:
        return None
    top = max(bw)
    slow = [i for i, x in enumerate(bw) if x < top * (1 - 1e-9)]
    if len(slow) != 2 or (slow[0] + 1) % n != slow[1] and (slow[1] + 1) % n != slow[0]:
        return None
    if abs(bw[slow[0]] - bw[slow[1]]) > top * 1e-9:
        return None
    s = slow[1] if (slow[0] + 1) % n == slow[1] else slow[0]  # the chip between the two slow cables
    return s, bw[slow[0]] / top


class SlowChipLine(Algorithm):
    """The others' pipelined line, the slow chip feeding each piece into one of its ends (see the module)."""

    name = "slow_chip_line"
    summary = ("a ring through one slow chip: the others run a line, the slow chip feeds both its ends and takes "
               "what it needs from them (about half its bytes over each slow cable)")
    kinds = ("all_gather", "reduce_scatter", "all_reduce")
    topologies = ("ring", "torus")
    capabilities = Capabilities(numeric=False)  #: timing and bytes only (`prepare` refuses data)
    nic_rings = False

    def unfit(self, kind: str, net: Network, groups: list[Group]) -> str | None:
        why = super().unfit(kind, net, groups)
        if why is None and (not net.grid or len(groups[0].sizes) != 1 or not groups[0].wraps[0] or groups[0].n < 4
                            or _slow_group(net, groups) is None):
            return ("it needs rings on one wrapped axis (four chips or more), exactly one of them through one slow "
                    "chip and every other ring's links alike")
        return why

    def default_chunks(self, kind: str, net: Network, groups: list[Group], nbytes: float | None) -> int:
        """AllReduce: `line_pipelined`'s pieces for the line of the other chips, made even (one end each in turn);
        AllGather, ReduceScatter: two halves of every shard."""
        if kind != "all_reduce":
            return 2
        c = max(2, LINE_PIPELINED.default_chunks(kind, net, groups, nbytes))
        return c + c % 2  # even: the two ends take as many pieces each

    def prepare(self, job: Job) -> None:
        if job.numeric:
            raise PodsimError("slow_chip_line is timing only; give nbytes, or another --algorithm")
        from simulator.collectives.api import _job  # (the api builds the other rings' job as its own)

        g = _slow_group(job.net, job.groups)
        assert g is not None  # `applies` admitted the groups for their slow chip
        group = job.groups[g]
        found = slow_chip(job.net, group)
        assert found is not None
        s, f = found
        n = group.n
        line = [group.members[((s + 1 + p) % n,)] for p in range(n - 1)]  # e0 = s + 1 ... e1 = s - 1
        job.cache["slow"] = (group.members[(s,)], f, line)
        others = [grp for k, grp in enumerate(job.groups) if k != g]
        ring = get_algorithm("bidirectional")
        job.cache["others"] = _job(ring, job.kind, job.net, others, job.nbytes, None, job.multi_axis, None,
                                   job.root_pos, None, None, None) if others else None

    def build(self, job: Job, sch: Schedule) -> None:
        others = job.cache["others"]
        if others is not None:  # every other ring: the bidirectional ring, alongside
            sub = Schedule(others.key_bytes)
            get_algorithm("bidirectional").build(others, sub)
            _merge(sch, sub)
        if job.kind != "all_reduce":
            _build_gather(job, sch)
            return
        slow, _, dev = job.cache["slow"]
        n, piece = len(dev), job.nbytes / job.chunks
        m = middle(n)
        behind: dict[tuple[Any, Any], int] = {}  # link (from, to) -> its last transfer

        def send(src: Any, dst: Any, op: str, deps: list[int], j: int) -> int:
            deps = deps + ([behind[(src, dst)]] if (src, dst) in behind else [])
            behind[(src, dst)] = sch.add(src, dst, 1, op, deps, ("slow chip line", j), dst, nbytes=piece)
            return behind[(src, dst)]

        for j in range(job.chunks):
            end = 0 if j % 2 == 0 else n - 1
            added: dict[int, list[int]] = {end: [send(slow, dev[end], "add", [], j)]}
            for side in (range(m), range(n - 1, m, -1)):  # each end in toward m
                for i in side:
                    k = i + 1 if i < m else i - 1
                    added.setdefault(k, []).append(send(dev[i], dev[k], "add", added.get(i, []), j))
            got = {m: added.get(m, [])}
            for side in (range(m, 0, -1), range(m, n - 1)):  # the total back out to each end
                for i in side:
                    k = i - 1 if side.step < 0 else i + 1
                    got[k] = [send(dev[i], dev[k], "copy", got[i], j)]
            send(dev[end], slow, "copy", got[end], j)

    def closed_form(self, job: Job) -> float:
        """The slow chip's ring as below; the other rings (on links of their own) as the bidirectional ring."""
        if "others" not in job.cache:  # a job moved onto priced links (`protocol._on` empties the cache)
            self.prepare(job)
        others = job.cache["others"]
        rest = get_algorithm("bidirectional").closed_form(others) if others is not None else 0.0
        return max(rest, self._slow_ring(job))

    def _slow_ring(self, job: Job) -> float:
        if job.kind != "all_reduce":
            return _gather_closed_form(job)
        slow, f, dev = job.cache["slow"]
        net, c = job.net, job.chunks
        n, piece = len(dev), job.nbytes / job.chunks
        m = middle(n)

        def hop(a: Any, b: Any) -> float:
            edge = net.graph.edges[a, b]
            return route_latency(net, [(a, b)]) + piece / edge["bandwidth_bytes_per_s"]

        into = {0: [(dev[i], dev[i + 1]) for i in range(m)],
                n - 1: [(dev[i], dev[i - 1]) for i in range(n - 1, m, -1)]}
        out = {0: [(dev[i], dev[i - 1]) for i in range(m, 0, -1)],
               n - 1: [(dev[i], dev[i + 1]) for i in range(m, n - 1)]}
        chains = []
        for a in (0, n - 1):  # the piece enters at end a, from s
            for b in (0, n - 1):  # ... starts (or not) at end b, leaves at end b (to s if b == a)
                for start in (a, b if b != a else a):
                    chain = ([(slow, dev[a])] if start == a else []) + into[start] + out[b]
                    chain += [(dev[b], slow)] if b == a else []
                    chains.append(chain)
        first = max(sum(hop(u, v) for u, v in chain) for chain in chains)
        line_links = [(dev[i], dev[i + d]) for i in range(n) for d in (1, -1) if 0 <= i + d < n]
        busiest = [(c * hop(u, v), hop(u, v)) for u, v in line_links]
        busiest += [(((c + 1) // 2) * hop(u, v), hop(u, v)) for u, v in ((slow, dev[0]), (dev[0], slow))]
        busiest += [((c // 2) * hop(u, v), hop(u, v)) for u, v in ((slow, dev[-1]), (dev[-1], slow))]
        work, one = max(busiest)
        return first + work - one


Hop = tuple[Any, Any, float, list[int]]  #: (from chip, to chip, bytes, indices of the hops it waits for)


def gather_hops(job: Job) -> list[Hop]:
    """The AllGather's hops in an order every link keeps (see the module docstring): shard halves along the line both
    ways (each chip's own first, then nearer shards before farther ones, the slow chip's halves last), the slow
    chip's halves into the two ends, and each end forwarding to the slow chip its side's shards (the middle shard of
    an odd line half from each end)."""
    slow, _, dev = job.cache["slow"]
    m, half = len(dev), job.nbytes / (2 * job.group.n)
    hops: list[Hop] = []
    at: dict[tuple[Any, int, int], int] = {}  # (chip, shard, half) -> the hop that brought it (absent: its own)

    behind: dict[tuple[Any, Any], int] = {}  # link -> its last hop (a link sends its hops one after another)

    def hop(src: Any, dst: Any, shard: int, h: int) -> None:
        deps = [at[(src, shard, h)]] if (src, shard, h) in at else []
        deps += [behind[(src, dst)]] if (src, dst) in behind else []
        hops.append((src, dst, half, deps))
        at[(dst, shard, h)] = behind[(src, dst)] = len(hops) - 1

    s_shard = m  # the slow chip's shard: half 0 enters at end 0, half 1 at end m - 1
    for h, end in ((0, 0), (1, m - 1)):
        hop(slow, dev[end], s_shard, h)
    for q in range(m - 1):  # rightward link q -> q + 1: shards q, q - 1, ..., 0, then the slow chip's half 0
        for shard in [*range(q, -1, -1), s_shard]:
            for h in ((0, 1) if shard != s_shard else (0,)):
                hop(dev[q], dev[q + 1], shard, h)
    for q in range(m - 1, 0, -1):  # leftward link q -> q - 1: shards q, ..., m - 1, then the slow chip's half 1
        for shard in [*range(q, m), s_shard]:
            for h in ((0, 1) if shard != s_shard else (1,)):
                hop(dev[q], dev[q - 1], shard, h)
    halves = [(shard, h) for shard in range(m) for h in (0, 1)]  # the slow chip takes the first m from end 0
    for shard, h in halves[:m]:  # ... nearest first
        hop(dev[0], slow, shard, h)
    for shard, h in reversed(halves[m:]):  # and the rest from end m - 1, nearest first
        hop(dev[m - 1], slow, shard, h)
    return hops


def _build_gather(job: Job, sch: Schedule) -> None:
    """AllGather as `gather_hops`; ReduceScatter as the same hops reversed in time (each an ``add`` the other way,
    waiting for the hops that waited for it)."""
    hops = gather_hops(job)
    ids: list[int] = []
    if job.kind == "all_gather":
        for src, dst, nbytes, deps in hops:
            ids.append(sch.add(src, dst, 1, "copy", [ids[d] for d in deps], ("slow chip line",), dst, nbytes=nbytes))
        return
    after: list[list[int]] = [[] for _ in hops]
    for i, (_, _, _, deps) in enumerate(hops):
        for d in deps:
            after[d].append(i)
    done: dict[int, int] = {}
    for i in range(len(hops) - 1, -1, -1):
        src, dst, nbytes, _ = hops[i]
        done[i] = sch.add(dst, src, 1, "add", [done[k] for k in after[i]], ("slow chip line",), src, nbytes=nbytes)


def _gather_closed_form(job: Job) -> float:
    """The busiest link's bytes over its bandwidth plus n - 1 hops' latency (the longest chain: a far shard along
    the line to the end that hands it to the slow chip, or the slow chip's half across the line). Each slow cable
    carries half of the n - 1 other shards, (n - 1) / (2n) V at f W; the line's busiest links (next to its ends)
    carry n - 2 shards and the slow chip's half: (n - 3/2) / n V at W. The same for ReduceScatter, reversed."""
    slow, f, dev = job.cache["slow"]
    net, n = job.net, job.group.n
    full = net.graph.edges[dev[0], dev[1]]["bandwidth_bytes_per_s"]
    alpha = max(net.graph.edges[e]["latency_s"] for e in ((slow, dev[0]), (dev[0], dev[1])))
    slow_s = (n - 1) / (2 * n) * job.nbytes / (f * full)
    line_s = (n - 1.5) / n * job.nbytes / full
    return max(slow_s, line_s) + (n - 1) * alpha


SLOW_CHIP_LINE = register(SlowChipLine())
