"""Broadcast and Reduce through one switch, pipelined in rounds of relayed pieces (``switch_relay``).

On a switch (`topologies.switch`) the root has one port: Broadcast's bound is V / W plus a route's
latency, and a chain through the switch that sends whole arrays hop by hop takes (n - 1)(alpha + V / W).
A chain pipelined in c pieces takes ``(n - 2 + c)(alpha + V / (c W))``: each piece waits for the one
before it to arrive, so the root's port idles a route latency alpha per piece, and the fill grows with
the n - 1 hops. Here the root's port idles once per *round* of n - 1 pieces instead, and the fill is one
relay step:

Broadcast. The array is cut into c = R (n - 1) pieces of p = V / c bytes; round k holds pieces
k (n - 1) .. k (n - 1) + n - 2, piece i of a round going to relay i (the i-th member other than the root).
In round k the root sends each relay its piece (after that relay's piece of round k - 1 has arrived),
and each relay forwards the piece it got in round k - 1 to the n - 2 other members. Every link then
carries equal pieces that start together (a link direction shares its bandwidth fairly among the
messages on it; latency does not occupy it), so the whole run moves in lock step, one period per round
plus one:

- period 1: the root's port carries n - 1 pieces;
- periods 2 .. R: the root's port n - 1 pieces, each member's port in n - 1 (its own piece from the root
  and n - 2 forwarded), each relay's port out n - 2;
- period R + 1: the last forwards, n - 2 pieces on each member's ports.

A period lasts ``alpha + (pieces on its busiest link) p / W`` (alpha: the route latency through the switch;
W: the link bandwidth), so

    T = (R + 1) alpha + V / W + (n - 2) V / ((n - 1) R W)        (n >= 3; n = 2: R alpha + V / W)

against the bound ``V / W + alpha``: R = sqrt((n - 2) V / ((n - 1) W alpha)) rounds minimise it, about
``2 sqrt(alpha V / W)`` above the bound (switch:8 H100: 1.22x at 64 MB, 1.06x at 1 GB).

Reduce runs the same pieces backwards: in round k each member sends its piece of round k to that piece's
relay, which adds them into its own and, once its round-k pieces have arrived, sends the sum to the root
(who adds its own). The periods are the broadcast's in reverse order (period 1: n - 2 pieces out of each
member; then n - 1; the last, the relays' sums: n - 1 into the root), so the same T.

Any count of pieces runs: a last round of q < n - 1 pieces goes to the first q relays, and `periods` counts
each port's pieces period by period (Broadcast: the partial round still waits for the full round's
forwards; Reduce: its last period carries q sums). Transfers: R (n - 1)^2 -- the rounds are capped at
`MAX_TRANSFERS` (a switch of more than about 450 members is left to the chain algorithms). Every member's
one port is both ways busy, the root's outgoing (Broadcast) or incoming (Reduce) port nearly all the time.
"""
from __future__ import annotations

import math
from typing import Any

from simulator.collectives.algorithm import Algorithm, Job, register
from simulator.collectives.groups import Group
from simulator.collectives.schedule import Schedule
from simulator.engine.network import Network

MAX_TRANSFERS = 200_000  #: rounds stop where the schedule would pass this many transfers (R (n - 1)^2 each)
MAX_PIECES = 10_000  #: as `simulator.collectives.api.MAX_CHUNKS`


def periods(kind: str, n: int, pieces: int) -> list[int]:
    """Pieces on the busiest port in each period of ``kind`` over ``n`` members in ``pieces`` pieces (periods
    without a piece left out). Round k takes the next n - 1 pieces (the last round may hold fewer, q: its
    relays are the first q); in a period every port's pieces start together (module docstring).

    Broadcast, period k: the root's port out carries round k's pieces; a member's port in its own piece of
    round k and the forwards of round k - 1 from the other relays of that round; a relay's port out its
    forwards of round k - 1 (n - 2). Reduce, period k: a relay's port in the n - 2 pieces the others send
    it in round k; a member's port out its pieces of round k to the round's other relays and its sum of
    round k - 1 to the root; the root's port in the sums of round k - 1."""
    relays = n - 1
    rounds = [list(range(min(relays, pieces - k * relays))) for k in range(-(-pieces // relays))] + [[]]
    out = []
    for k, now in enumerate(rounds):
        before = rounds[k - 1] if k else []
        if kind == "broadcast":
            ports = [len(now)] + [(r in now) + len(before) - (r in before) for r in range(relays)]
            ports += [n - 2 for r in before]
        else:
            ports = [len(before)] + [n - 2 for r in now]
            ports += [len(now) - (r in now) + (r in before) for r in range(relays)]
        busiest = max(ports)
        if busiest:
            out.append(busiest)
    return out


def relay_time(kind: str, n: int, pieces: int, piece: float, alpha: float, bandwidth: float) -> float:
    """Seconds of ``pieces`` pieces of ``piece`` bytes (module docstring): each period alpha plus its busiest
    port's pieces over ``bandwidth``."""
    return sum(alpha + k * piece / bandwidth for k in periods(kind, n, pieces))


class SwitchRelay(Algorithm):
    """Broadcast / Reduce through a switch: rounds of one piece per member, relayed on to (gathered from) all."""

    name = "switch_relay"
    summary = ("Broadcast, Reduce through a switch: rounds of one piece per member from the root, each relayed "
               "to all (Reduce: the reverse, adding); the root's port idles one latency a round; near V/W")
    kinds = ("broadcast", "reduce")
    topologies = ("switch",)
    nic_rings = False

    def unfit(self, kind: str, net: Network, groups: list[Group]) -> str | None:
        why = super().unfit(kind, net, groups)
        if why is None and net.graph.graph.get("kind") != "switch":
            return "it sends through one switch (switch:N)"
        if why is None and (groups[0].n - 1) ** 2 > MAX_TRANSFERS:
            n = groups[0].n
            return f"one round of {n} members is {(n - 1) ** 2:,} transfers (at most {MAX_TRANSFERS:,})"
        return why

    def default_chunks(self, kind: str, net: Network, groups: list[Group], nbytes: float | None) -> int:
        """R (n - 1) pieces, R the rounds that minimise the closed form within `MAX_TRANSFERS` (numeric: one round)."""
        n = groups[0].n
        if n <= 1:
            return 1
        if nbytes is None:
            return n - 1
        alpha, bandwidth = _links(net, groups[0])
        most = max(1, min(MAX_TRANSFERS // (n - 1) ** 2, MAX_PIECES // (n - 1)))
        guess = math.sqrt(max(n - 2, 1) * nbytes / ((n - 1) * bandwidth * alpha)) if alpha > 0 else most
        tries = {min(most, max(1, r)) for r in (math.floor(guess), math.ceil(guess), 1)}
        best = min(tries, key=lambda r: (relay_time(kind, n, r * (n - 1), math.ceil(nbytes / (r * (n - 1))),
                                                    alpha, bandwidth), r))
        return best * (n - 1)

    def closed_form(self, job: Job) -> float:
        n = job.group.n
        if n <= 1:
            return 0.0
        alpha, bandwidth = _links(job.net, job.group)
        return relay_time(job.kind, n, job.chunks, job.key_bytes, alpha, bandwidth)

    def build(self, job: Job, s: Schedule) -> None:
        for group in job.groups:
            root = group.members[job.root_pos]
            relays = [group.members[p] for p in group.positions() if p != job.root_pos]
            if not relays:
                continue
            tag = ("switch_relay", id(group))
            last: dict[Any, int] = {}  # (stream) -> its previous transfer, so a stream's pieces go in order
            for j in range(job.chunks):
                r = relays[j % len(relays)]  # round j // (n - 1)
                keys = (("piece", j),) if job.numeric else 1
                if job.kind == "broadcast":
                    got = _add(s, last, (root, r), root, r, keys, [], tag)
                    for m in relays:
                        if m != r:
                            _add(s, last, (r, m), r, m, keys, [got], tag)
                else:
                    sums = [_add(s, last, (m, r), m, r, keys, [], tag, "add") for m in relays if m != r]
                    _add(s, last, (r, root), r, root, keys, sums, tag, "add")


def _add(s: Schedule, last: dict[Any, int], stream: tuple[Any, Any], src: Any, dst: Any, keys: Any,
         deps: list[int], tag: Any, op: str = "copy") -> int:
    """A transfer on ``stream`` after ``deps`` and the stream's previous transfer."""
    before = last.get(stream)
    last[stream] = s.add(src, dst, keys, op, deps + ([before] if before is not None else []), tag, dst)
    return last[stream]


def _links(net: Network, group: Group) -> tuple[float, float]:
    """(slowest route latency s, slowest link bandwidth B/s) between the group's members through the switch."""
    members = list(group.members.values())
    alpha, bandwidth = 0.0, math.inf
    for u, v in zip(members, members[1:] + members[:1], strict=True):  # every member's port both ways
        if u == v:
            continue
        path = net.routes(u, v)[0]
        edges = [net.graph.edges[e] for e in zip(path, path[1:], strict=False)]
        alpha = max(alpha, sum(e["latency_s"] for e in edges))
        bandwidth = min(bandwidth, *(e["bandwidth_bytes_per_s"] for e in edges))
    return alpha, bandwidth


SWITCH_RELAY = register(SwitchRelay())
