"""Recursive halving-doubling (Rabenseifner) and recursive doubling, for power-of-two groups on switches.

Chips are ranks 0..n-1 in group order; at a step over bit k each rank exchanges with rank ``r XOR 2^k``.

- ``recursive_halving_doubling``: ReduceScatter by recursive halving over bits 0, 1, ..., log2(n)-1 --
  at bit k a rank keeps the shards that agree with it on bits 0..k and sends the partial sums of the
  others (V / 2^(k+1)) to its partner, so it ends holding shard r; AllGather by recursive doubling over
  bits log2(n)-1, ..., 0 (the data doubling each step); AllReduce is the two. The largest messages go
  to the nearest partners (bit 0: the same GPU node). log2(n) steps each way instead of a ring's n - 1,
  the same bytes per port;
- ``recursive_doubling`` AllReduce: log2(n) steps, each exchanging the whole partial array with the
  partner and adding it (latency-optimal, V per step: for small messages).

Closed form: each step, every rank sends one message and receives one, each over its own port or NIC,
so a step costs its route's latency plus its bytes over the route's slowest link; the steps add (a rank
starts a step once its own and its partner's previous messages have arrived). Exact in the simulation.
"""
from __future__ import annotations

from typing import Any

from simulator.collectives.algorithm import Algorithm, Job, register
from simulator.collectives.groups import Group
from simulator.collectives.schedule import Schedule
from simulator.collectives.switched import SWITCHED, keys, members, pair_time
from simulator.engine.network import Network


class _Recursive(Algorithm):
    topologies = SWITCHED
    nic_rings = False

    def unfit(self, kind: str, net: Network, groups: list[Group]) -> str | None:
        why = super().unfit(kind, net, groups)
        n = groups[0].n
        if why is None and n & (n - 1):
            return f"it needs a power-of-two group, not {n} chips"
        return why

    def _step_time(self, job: Job, bit: int, nbytes: float) -> float:
        """The slowest exchange over ``bit`` (one message per rank, each on its own links)."""
        ranks = members(job.group)
        return max(pair_time(job.net, ranks[r], ranks[r ^ (1 << bit)], nbytes) for r in range(len(ranks)))


def _bits(n: int) -> int:
    return n.bit_length() - 1


def _shards(positions: list, rank: int, low_bits: int, flip: int | None = None) -> list:
    """Positions of the shards that agree with ``rank`` on bits below ``low_bits`` (bit ``flip`` flipped)."""
    target = rank if flip is None else rank ^ (1 << flip)
    mask = (1 << low_bits) - 1
    return [pos for s, pos in enumerate(positions) if s & mask == target & mask]


class RecursiveHalvingDoubling(_Recursive):
    """ReduceScatter by recursive halving, AllGather by recursive doubling; AllReduce is both."""

    name = "recursive_halving_doubling"
    summary = "log2(n) exchanges each way with partners r xor 2^k, halving then doubling the data"
    kinds = ("all_gather", "reduce_scatter", "all_reduce")

    def build(self, job: Job, s: Schedule) -> None:
        for group in job.groups:
            n = group.n
            last: dict[int, list[int]] = {r: [] for r in range(n)}  # rank -> the transfer that last reached it
            bits = _bits(n)
            if job.kind != "all_gather":
                for k in range(bits):  # keep the shards agreeing on bits 0..k, send the partner's
                    last = _exchange(job, s, group, last, k, ("rh", id(group), k), flip=True)
            if job.kind != "reduce_scatter":
                for k in reversed(range(bits)):  # send every shard held: those agreeing on bits 0..k
                    last = _exchange(job, s, group, last, k, ("rd", id(group), k), flip=False)

    def closed_form(self, job: Job) -> float:
        n, total = job.group.n, 0.0
        shard = job.key_bytes * job.parts
        for k in range(_bits(n)):
            step = self._step_time(job, k, shard * n / 2 ** (k + 1))
            total += step * (2 if job.kind == "all_reduce" else 1)
        return total


def _exchange(job: Job, s: Schedule, group: Group, last: dict[int, list[int]], bit: int, tag: tuple,
              flip: bool) -> dict[int, list[int]]:
    """Every rank sends to ``rank xor 2^bit``: the partner's shards, added (``flip``), or its own, copied."""
    ranks, at, out = members(group), group.positions(), {}
    for r in range(len(ranks)):
        p = r ^ (1 << bit)
        what = keys(job, _shards(at, r, bit + 1, flip=bit if flip else None), range(job.parts))
        out[p] = [s.add(ranks[r], ranks[p], what, "add" if flip else "copy", last[r], tag, ranks[p])]
    return out


class RecursiveDoubling(_Recursive):
    """AllReduce in log2(n) steps, each exchanging and adding the whole array."""

    name = "recursive_doubling"
    summary = "AllReduce in log2(n) exchanges of the whole array with partners r xor 2^k (small messages)"
    kinds = ("all_reduce",)

    def build(self, job: Job, s: Schedule) -> None:
        for group in job.groups:
            ranks, n = members(group), group.n
            every = keys(job, group.positions(), range(job.parts))
            last: dict[int, list[Any]] = {r: [] for r in range(n)}
            for k in range(_bits(n)):
                # both partners start together: a rank's snapshot is taken before its partner's message lands
                nxt = {r: [s.add(ranks[r], ranks[r ^ (1 << k)], every, "add", last[r] + last[r ^ (1 << k)],
                                 ("rdbl", id(group), k), ranks[r ^ (1 << k)])] for r in range(n)}
                last = {r: nxt[r ^ (1 << k)] for r in range(n)}

    def closed_form(self, job: Job) -> float:
        full = job.key_bytes * job.parts * job.group.n
        return sum(self._step_time(job, k, full) for k in range(_bits(job.group.n)))


RECURSIVE_HALVING_DOUBLING = register(RecursiveHalvingDoubling())
RECURSIVE_DOUBLING = register(RecursiveDoubling())
