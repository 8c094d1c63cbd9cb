"""Broadcast and Reduce across GPU nodes in rounds along the rails (``rail_chains``).

On ``nodes:K:G`` every GPU has one NVLink port to its node's switch and one NIC to the InfiniBand switch.
Every node other than the root's must receive (Broadcast) or send (Reduce) V through its G NICs; the
chain or direct algorithms push it all through one or two NICs. Here the array goes in R rounds, each of
G - 1 pieces of p = V / (R (G - 1)) bytes, piece h of a round on rail h (the GPUs (k, h) of every node k;
the root (a, b) keeps rail b's NICs idle, so its own port carries each piece once):

Broadcast, round q:
- the root sends piece h to its node's GPU (a, h) over NVLink (its port: G - 1 pieces), which forwards it
  to the G - 2 other GPUs of the node when the next round's pieces leave the root -- as in `switch_relay`,
  a period ``t_nv = alpha_nv + (G - 1) p / W_nv`` a round (alpha: a route's latency, two links); so
  round q is at the rail GPUs of the root's node at ``n_q = q t_nv``;
- along each rail a chain over InfiniBand through the other nodes k_1 .. k_(K-1) in order, one piece at a
  time on each NIC, each step a split hop (`simulator.collectives.schedule.DELAY`: the piece's bytes leave once
  it has arrived and the previous piece's bytes have left, and it arrives the route's latency later, so the NIC
  sends round q + 1 while round q's latency passes): bytes gone at ``b1_q = max(n_q, b1_(q-1)) + p / W_ib``,
  ``bi_q = max(bi_q^arrived, bi_(q-1)) + p / W_ib`` with ``bi_q^arrived = b(i-1)_q + alpha_ib``;
- at node k_i every rail GPU forwards its piece to the node's G - 1 others over NVLink (each port out G - 1
  pieces, in at most G - 1): ``gi_q = max(bi_q + alpha_ib, gi_(q-1)) + t_nv``.

``T = max(g_R over the nodes, n_R + alpha_nv + (G - 2) p / W_nv)`` (the root's node's last forwards).

Reduce runs the rounds backwards, adding: at node k_i every GPU sends piece h of round q to the rail GPU
(k_i, h) (``u_q = q t_nv``); the rails' chains run from the farthest node in, split hops as above (bytes
gone at ``c(K-1)_q = max(u_q, c(K-1)_(q-1)) + p / W_ib``, ``ci_q = max(u_q, c(i+1)_q + alpha_ib, ci_(q-1)) +
p / W_ib``, arrived ``alpha_ib`` later); in the root's node the GPUs send
their pieces of round q + 1 to the rail GPUs while those send round q's sums to the root, both once round
q's chain and pieces have arrived (lock step as in `switch_relay`): ``s_1 = max(alpha_nv + (G - 2) p / W_nv,
c1_1 + alpha_ib)``, ``s_q = max(s_(q-1) + t_nv, c1_q + alpha_ib)``, ``T = s_R + t_nv``.

Equal messages that start together on a link end together (a link direction shares its bandwidth
fairly), every rail alike, so the recurrences are exact. The NVLink steps pay their route latency each
round (whole pieces, lock step), the InfiniBand steps only once along the chain: R minimises the closed form.
At 1 GB (ideal links) on nodes:4:8 this is 2.93 ms against the bound's 2.50 (1.17x; the rails carry V / 7 each,
2.86 ms, the root's rail idle); whole-piece InfiniBand steps, each round waiting out its latency, took 3.32 ms
(nodes:2:8: 2.88 against 3.16 ms). Timing mode rounds ``chunks``
up to whole rounds of G - 1 pieces; numeric data must split into them.
"""
from __future__ import annotations

from typing import Any

from simulator.collectives.algorithm import Algorithm, Job, register
from simulator.collectives.groups import Group
from simulator.collectives.rail_gather import RailGather, _route
from simulator.collectives.schedule import Schedule
from simulator.engine.network import Network
from simulator.errors import PodsimError

MAX_TRANSFERS = 50_000  #: default rounds stop where the schedule would pass this many transfers
MAX_ROUNDS = 256  #: rounds the default tries


def rail_time(kind: str, nodes: int, gpus: int, rounds: int, piece: float, links: tuple[Any, ...]) -> float:
    """The recurrences of the module docstring: ``nodes`` x ``gpus``, ``rounds`` of ``piece`` bytes per rail,
    ``links`` = (alpha_nv, W_nv, [(alpha, W) of each InfiniBand step of a rail's chain, from the root's node out])."""
    alpha_nv, w_nv, steps = links
    t_nv = alpha_nv + (gpus - 1) * piece / w_nv
    send = [piece / w for _, w in steps]  # an InfiniBand step's bytes (its latency follows, off the link)
    last_local = alpha_nv + (gpus - 2) * piece / w_nv
    chain = [0.0] * (nodes - 1)  # per node of the chain, when its last step's bytes left the link
    out = [0.0] * (nodes - 1)  # Broadcast: its forwards' end
    start = 0.0  # Reduce: when the root's node's period of round q starts
    arrived = 0.0
    for q in range(1, rounds + 1):
        if kind == "broadcast":
            ready = q * t_nv
            for i in range(nodes - 1):
                chain[i] = max(ready, chain[i]) + send[i]
                ready = chain[i] + steps[i][0]  # arrived
                out[i] = max(ready, out[i]) + t_nv
        else:
            ready = q * t_nv
            for i in reversed(range(nodes - 1)):
                chain[i] = max(ready, chain[i]) + send[i]
                arrived = chain[i] + steps[i][0]
                ready = max(q * t_nv, arrived)
            start = max(last_local if q == 1 else start + t_nv, arrived)
    if kind == "broadcast":
        return max([*out, rounds * t_nv + last_local])
    return start + t_nv


class RailChains(RailGather):
    """Broadcast / Reduce across GPU nodes: rounds of one piece per rail, chained over InfiniBand along each rail."""

    name = "rail_chains"
    summary = ("Broadcast, Reduce across GPU nodes: rounds of a piece per rail, relayed over NVLink in the root's "
               "node, chained over InfiniBand along each rail, spread over NVLink in every node (Reduce: adding)")
    kinds = ("broadcast", "reduce")
    topologies = ("nodes",)

    def unfit(self, kind: str, net: Network, groups: list[Group]) -> str | None:
        why = Algorithm.unfit(self, kind, net, groups)  # each chain hop is priced by its own route: any fat tree
        if why is None and (len(groups) != 1 or groups[0].n != len(net.chips)):
            return "it sends to every GPU of every node (a group of the whole system)"
        shape = net.graph.graph.get("shape", (1, 1))
        if why is None and (shape[0] < 2 or shape[1] < 2):
            return "it needs two nodes or more of two GPUs or more"
        return why

    def _chain_links(self, job: Job) -> tuple[Any, ...]:
        """(alpha_nv, W_nv, per InfiniBand step of the chains: the slowest latency and bandwidth over the rails)."""
        alpha_nv, w_nv, _, _ = self._links(job)
        root, at, a, b = self._plan(job)
        order = [a] + [k for k in sorted(at) if k != a]
        steps = []
        for u, v in zip(order, order[1:], strict=False):
            routes = [_route(job.net, at[u][h], at[v][h]) for h in at[a] if h != b]
            steps.append((max(r[0] for r in routes), min(r[1] for r in routes)))
        return alpha_nv, w_nv, steps

    def _rounds(self, job: Job) -> int:
        g = job.net.graph.graph["shape"][1]
        return -(-job.chunks // (g - 1))

    def default_chunks(self, kind: str, net: Network, groups: list[Group], nbytes: float | None) -> int:
        """R (G - 1) pieces, R the rounds (up to `MAX_ROUNDS`, within `MAX_TRANSFERS`) of the fastest closed form."""
        k, g = net.graph.graph["shape"]
        if nbytes is None:
            return g - 1
        probe = Job(kind, net, groups, [groups], 1, g - 1, (0,), 1.0)
        links = self._chain_links(probe)
        most = max(1, min(MAX_ROUNDS, MAX_TRANSFERS // (k * g * g)))
        best = min(range(1, most + 1), key=lambda r: (rail_time(kind, k, g, r, nbytes / (r * (g - 1)), links), r))
        return best * (g - 1)

    def prepare(self, job: Job) -> None:
        g = job.net.graph.graph["shape"][1]
        if job.numeric and job.chunks % (g - 1):
            raise PodsimError(f"rail_chains sends rounds of {g - 1} pieces (one per rail but the root's); numeric "
                              f"chunks={job.chunks} must be a multiple of {g - 1}")

    def _piece(self, job: Job) -> float:
        g = job.net.graph.graph["shape"][1]
        return job.key_bytes if job.numeric else job.nbytes / (self._rounds(job) * (g - 1))

    def closed_form(self, job: Job) -> float:
        k, g = job.net.graph.graph["shape"]
        return rail_time(job.kind, k, g, self._rounds(job), self._piece(job), self._chain_links(job))

    def build(self, job: Job, s: Schedule) -> None:
        root, at, a, b = self._plan(job)
        nodes = [k for k in sorted(at) if k != a]
        rails = [h for h in sorted(at[a]) if h != b]
        tag, piece = ("rail_chains", id(job.group)), None if job.numeric else self._piece(job)
        last: dict[tuple[Any, Any], int] = {}

        def add(src: Any, dst: Any, j: int, deps: list[int], op: str, split: bool = False) -> int:
            """A piece over NVLink (after the previous piece on the pair has arrived) or, ``split``, over InfiniBand
            as a split hop: its bytes once the previous piece's bytes have left, then the route's latency
            (`Schedule.add_split`: the NIC sends the next piece while this one's latency passes). Its arrival."""
            keys = (("piece", j),) if job.numeric else 1
            before = last.get((src, dst))
            if split:
                last[(src, dst)], arrived = s.add_split(src, dst, keys, op, deps, tag, dst,
                                                        [before] if before is not None else [], piece)
                return arrived
            last[(src, dst)] = s.add(src, dst, keys, op, deps + ([before] if before is not None else []), tag, dst,
                                     nbytes=piece)
            return last[(src, dst)]

        if job.kind == "broadcast":
            self._broadcast(job, at, root, a, nodes, rails, add)
        else:
            self._reduce(job, at, root, a, nodes, rails, add)

    def _broadcast(self, job: Job, at: dict, root: Any, a: int, nodes: list[int], rails: list[int], add: Any) -> None:
        for q in range(self._rounds(job)):
            for i, h in enumerate(rails):
                j = min(q * len(rails) + i, job.chunks - 1)  # timing mode: the last round's pieces repeat a key
                head = at[a][h]
                got = add(root, head, j, [], "copy")
                for x in rails:
                    if x != h:
                        add(head, at[a][x], j, [got], "copy")
                here = got
                for n, k in enumerate(nodes):
                    here = add(at[nodes[n - 1]][h] if n else head, at[k][h], j, [here], "copy", True)
                    for x in at[k]:
                        if x != h:
                            add(at[k][h], at[k][x], j, [here], "copy")

    def _reduce(self, job: Job, at: dict, root: Any, a: int, nodes: list[int], rails: list[int], add: Any) -> None:
        wait: dict[int, list[int]] = {}  # rail -> what its sum of the last round waited for (its pieces start then)
        for q in range(self._rounds(job)):
            for i, h in enumerate(rails):
                j = min(q * len(rails) + i, job.chunks - 1)
                came: list[int] = []
                for n, k in reversed(list(enumerate(nodes))):
                    adds = [add(at[k][x], at[k][h], j, [], "add") for x in at[k] if x != h]
                    came = [add(at[k][h], at[nodes[n - 1]][h] if n else at[a][h], j, adds + came, "add", True)]
                head = at[a][h]
                local = [add(at[a][x], head, j, list(wait.get(h, [])), "add") for x in rails if x != h]
                wait[h] = local + came
                add(head, root, j, wait[h], "add")

RAIL_CHAINS = register(RailChains())
