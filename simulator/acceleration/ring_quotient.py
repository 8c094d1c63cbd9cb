"""The quotient of a ring collective built directly, without its full schedule (`simulator.acceleration.quotient`).

A flat NIC ring over a thousand GPUs (``nodes:128:8``: 8 rings of 1,024 positions, every shard n - 1 hops
each way) is 16.7 million transfers; building them takes longer than running their quotient. Where a node
system's rotation group G (one generator, `simulator.acceleration.automorphisms`) maps every ring of the job onto
itself shifted by a fixed number of positions, the chains of a ring phase (`simulator.collectives.chains`)
are G-equivariant as soon as each origin's chains are those of the origin one shift on, and the bundles are
alike (timing only). Then the transfers whose source is a representative chip are, hop by hop: hop h of
origin o's chain j, from position a = o + (h - 1) d to a + d, waiting on hop h - 1 of the chain whose hop
h - 1 leaves from the representative of a - d (that chain's origin moved by the same shift), and on the
stage's barrier as `multi_axis.build` makes them wait. This builds exactly what `quotient` would keep of
the full schedule (tests/test_quotient_nodes.py holds the two against each other), checking rather than
assuming what makes it valid: the shift of every ring, the chains of every origin, every route's image.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from simulator.acceleration.automorphisms import node_actions
from simulator.acceleration.quotient import Quotient, _rep_route, run_on_quotient
from simulator.collectives.algorithm import Job
from simulator.collectives.layout import RING_KINDS
from simulator.collectives.multi_axis import stage_sequence
from simulator.collectives.schedule import Transfer, _new_transfer
from simulator.engine.network import Network

if TYPE_CHECKING:  # annotations only: no import at run time (and no cycle)
    from simulator.engine.system import System


def ring_quotient(job: Job, algorithm: Any, net: Network, action: Any) -> Quotient | None:
    """The quotient by ``action`` of the schedule ``algorithm.build(job, ...)`` would make, or None where the
    job is not one this builder knows (a one-axis, timing-only AllGather, ReduceScatter or AllReduce of a
    ring algorithm without serial reductions) or the symmetry does not hold."""
    group = job.group
    if job.numeric or job.reduced or job.kind not in RING_KINDS or job.layout is None or len(group.sizes) != 1 \
            or len(getattr(action, "orders", ())) != 1:
        return None
    ring_algorithm = algorithm.on_axis(group.wraps[0])
    if ring_algorithm.serial_reduce or any(len(groups) != 1 for groups in job.rings):
        return None
    n = group.sizes[0]
    out: list[Transfer] = []
    routes: list[Any] = []
    used: dict[Any, None] = {}
    represented = [0]
    gather = [ring_algorithm.gather_chains(n, o) for o in range(n)]
    reduce = [ring_algorithm.reduce_chains(n, o) for o in range(n)]
    for groups in job.rings:
        devices = [groups[0].members[(i,)] for i in range(n)]
        shift = _shift(devices, action, n)
        steps = {d for chains in (*gather, *reduce) for d, _, _ in chains}
        if shift is None or not steps <= {1, -1} or any(gather[o] != gather[(o + shift) % n] or
                                                         reduce[o] != reduce[(o + shift) % n] for o in range(n)):
            return None
        if not _ring(job, net, action, devices, shift, gather, reduce, out, routes, used, represented):
            return None
    return Quotient(out, routes, action.order, tuple(used), represented[0])


def _shift(devices: list[Any], action: Any, n: int) -> int | None:
    """Positions the generator of ``action`` moves the ring ``devices`` by (the same for every position, and
    |G| shifts going round once), or None."""
    generator = (1,)
    where = {v: p for p, v in enumerate(devices)}
    image = where.get(action.apply(generator, devices[0]))
    if image is None or image == 0 or n % image or n // image != action.order:
        return None
    if any(where.get(action.apply(generator, v)) != (p + image) % n for p, v in enumerate(devices)):
        return None
    return image


def _ring(job: Job, net: Network, action: Any, devices: list[Any], shift: int, gather: list[Any], reduce: list[Any],
          out: list[Transfer], routes: list[Any], used: dict[Any, None], represented: list[int]) -> bool:
    """Add one ring's quotient transfers (every stage of `multi_axis.build`, one axis) to ``out``."""
    n, layout = len(devices), job.layout
    reps = [p for p, v in enumerate(devices) if action.offset(v) == action.identity]
    if reps != list(range(shift)):
        return False  # the representatives are not one block of positions (rep(p) = p mod shift below)
    pair_routes: dict[tuple[int, int], Any] = {}
    barrier: int | None = None
    for what, stage in stage_sequence(job.kind, layout.stages):
        if not layout.active(stage, 0):
            continue
        first, second = layout.bundle_units(stage, 0, job.group.sizes)
        piece = ((first + second) * layout.unit_bytes, first * layout.unit_bytes, second * layout.unit_bytes)
        start = () if barrier is None else (barrier,)
        chains = gather if what == "ag" else reduce
        hops_of: dict[tuple[int, int, int], int] = {}  # (origin, chain, hop) -> quotient transfer
        todo = []
        for o in range(n):
            for j, (d, hops, half) in enumerate(chains[o]):
                represented[0] += hops
                for r in reps:  # gather: hop h leaves o + (h - 1) d; reduce (to owner o): o - (hops - h + 1) d
                    h = (r - o) * d % n + 1 if what == "ag" else hops + 1 - (o - r) * d % n
                    if 1 <= h <= hops:
                        todo.append((h, o, j, d, hops, half, r))
        todo.sort()
        stage_ids = []
        for h, o, j, d, hops, half, a in todo:
            b = (a + d) % n
            deps = list(start) if what == "rs" or h == 1 else []
            if h > 1:
                back = (a - d) % n  # hop h - 1 left from here; its representative chain starts shifted by as much
                moved = back - back % shift
                prev = hops_of.get(((o - moved) % n, j, h - 1))
                if prev is None:
                    return False
                deps.append(prev)
            last = h == hops if what == "ag" else h == 1
            nbytes = piece[0] if half is None or not last else piece[1 + half]
            tid = len(out)
            out.append(_new_transfer(Transfer, (tid, devices[a], devices[b], (), "copy" if what == "ag" else "add",
                                                tuple(sorted(set(deps))), nbytes)))
            route = pair_routes.get((a, b))
            if route is None:
                route = pair_routes[(a, b)] = _checked_route(net, action, devices, a, b, shift, n)
                if route is False:
                    return False
                used.update(dict.fromkeys(route[0]))
            routes.append(route)
            hops_of[(o, j, h)] = tid
            stage_ids.append(tid)
        barrier = len(out)
        out.append(_new_transfer(Transfer, (barrier, None, None, (), "copy", tuple(stage_ids), 0.0)))
        routes.append(None)
        represented[0] += 1
    return True


def _checked_route(net: Network, action: Any, devices: list[Any], a: int, b: int, shift: int, n: int) -> Any:
    """The representative route of positions ``a -> b`` (`quotient._rep_route`), after checking that the
    route of every pair of its orbit is its image (False where not)."""
    paths = net.routes(devices[a], devices[b])
    for k in range(shift, n, shift):
        h = action.offset(devices[(a + k) % n])
        image = net.routes(devices[(a + k) % n], devices[(b + k) % n])
        if len(image) != len(paths) or [action.apply(h, v) for v in image[0]] != paths[0]:
            return False
    return _rep_route(net, devices[a], devices[b], action)


def plan_quotient(system: System, algorithm: Any, job: Job) -> Any:
    """(quotient, group) of a ring algorithm's schedule built without the schedule, by one of a node system's
    rotation groups; None where none applies (build it in full). `plan_collective` asks in mode ``auto``."""
    net = system.network
    if not algorithm.capabilities.direct_quotient or job.reduced:
        return None
    assert net is not None, "a collective's job runs on a system with a network"
    if not net.uniform or net.faulted:
        return None
    for action in node_actions(net, system.calibration is None):
        q = ring_quotient(job, algorithm, net, action)
        if q is not None:
            return q, action
    return None


def run_quotient(system: System, plan: Any, mode: str, timing: bool) -> Any:
    """(quotient, group) to run ``plan`` on in mode ``auto``: one built in place of its schedule, or that of a
    timing-only, aggregated run of every group on a uniform, fault-free node system whose schedule and routes
    are equivariant under one of its symmetry groups (`simulator.acceleration.quotient.run_on_quotient`);
    None: run every transfer."""
    if plan.quotient is not None:
        return plan.quotient
    net = system.network
    if mode != "auto" or not timing or plan.reduced:
        return None
    assert net is not None, "a collective's plan runs on a system with a network"
    if not net.uniform or net.faulted or not plan.algorithm.capabilities.quotient:
        return None
    return run_on_quotient(net, plan.schedule.transfers, system.calibration is None)
