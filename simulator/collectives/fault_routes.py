"""Ways round a fault: the networks ``auto`` also prices a collective on when links are degraded or down.

A fault changes what the fastest collective is, and the fault as written into the graph
(`simulator.engine.faults.apply_to_graph`) gives only one answer: a dead cable unwraps its axis (every
ring on that axis runs as a line) and a slow cable stays in every ring that crosses it. Hardware can do
better, and two alternatives are always available:

- **avoid** a degraded cable: plan as if it were down (the axis runs as a line starting after it, routes
  go round it). Whatever runs with the cable removed can run with it merely slow, byte for byte the same,
  so with this alternative priced a degraded link never makes ``auto`` slower than a dead one;
- **detour** round a dead (or avoided) cable: keep the axis a ring, whose step across the missing cable
  takes the quickest surviving route (over other axes). Every group's rings are priced together
  (`simulator.collectives.groups.rings_along`), so the detour's bytes count on the links they share.

Closed forms price unlike links only roughly (a ring through a slow cable runs up to 40% over its own; the split
ring up to 29%), so ranking the ways by them alone picked the dead cable's line for a cable at 95% speed. Where
the faults are all written in the graph (`trials_apply`), ``auto`` therefore simulates its first `TRIALS`
candidates on a fresh copy of the network (`trial_system`) and runs the fastest; the alternatives carry each
trial's ``simulated_s``. Whatever runs on a way round a fault runs on the faulted system byte for byte the same,
so a degraded cable is never slower than a dead one, by construction and not by a closed form's accuracy.

Each alternative is a `Network.sibling` of the system's network: same channels, its own graph (cables left
out, or an axis's wrap and origin changed), so the collective's bytes land on the real links and the
bound and link counts are the system's own. Only on grids (tori, meshes, slices) with link faults, for
collectives over axes (not a mesh or explicit groups).

On switched fabrics (GPU nodes) there is no way round a fault but the network as faulted, and its closed forms are
as rough (ideal H100 nodes:2:8, 64 MB, chip 0's NVLink at half speed: ``unidirectional`` ReduceScatter priced
235.3 us, simulated 299.1 us; that NVLink dead: ``hierarchical_pipelined`` AllGather priced 1,130 us, simulated
1,969 us, where ``direct`` takes 1,205 us). So the way as faulted counts as over unlike links there, and ``auto``
simulates its first `TRIALS` candidates by closed form (`api._round_faults`) as it does round faults on grids.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simulator.collectives.book import NO_BOOK_UNDER_FAULTS
from simulator.engine.faults import (
    ChipSlow,
    LinkDegraded,
    LinkDown,
    LinkLatency,
    _check_reachable,
    _cut,
    link_ends,
    slow_chip_factors,
)
from simulator.engine.network import Network
from simulator.engine.system import System
from simulator.errors import FaultError

AS_FAULTED = ""  #: the label of the network as the faults left it


INEXACT_MARGIN = 0.25
"""How much faster by closed form a way over non-uniform links (a ring through a degraded cable, a detour) must
be to be chosen over one whose links are all alike. The ring closed forms price a phase as the longer of its
slowest chain and its busiest link's work (`simulator.collectives.timing`); on alike links that is exact, but
where one link is slower or carries a detour the steps behind it wait on it and the simulation runs longer:
16.7% on torus:4x4 (``--axes 1`` AllGather, one link at half speed: 19.45 ms simulated, 16.67 ms priced), 14%
on torus:8 AllReduce (44.45 ms, 38.89 ms). A margin above those keeps ``auto`` from trading an exactly priced
plan for one that only looks faster."""


TRIALS = 4
"""How many candidates ``auto`` simulates round faults (`trials_apply`) before it chooses: the first by score
(`Route.score`) of each way's best two by closed form. Four covers the way as faulted, the way avoiding a degraded
cable and the detoured ring on the shapes of docs/collective_bounds.md at one trial run each."""


TRIAL_SPAN = 1.5
"""Candidates whose closed form is more than this many times the best one's are not simulated (but for the best of
a way over like links, whose closed form is exact): the closed forms over unlike links run up to 1.4x short of
their simulation (the ring through a chip at half speed: 38.9 ms priced, 54.2 ms simulated)."""


TRIAL_TIE = 0.0
"""Trial runs this close (relative) to the fastest are a tie, settled by closed-form score. Zero: the simulation is
the forecast, so the fastest run wins. It was 2% (a plan over unlike links had to win by more than the latency
effects of the model's grain), which let `auto` run AllGather on torus:4x4 at 64 MB with a link at 0.797 of its
speed in 715.6 us (bidirectional) where the same link dead ran in 711.2 us (`multi_detour`): against the invariant
that degrading a link never makes a collective slower than removing it (tests/test_multi_detour.py's sweep)."""


@dataclass(frozen=True)
class Route:
    """One network a collective may be planned on, what it does about the faults (in words), and whether its
    links are all alike (closed forms exact) or not (a degraded cable or a detour on the way)."""

    net: Network | None  #: None: a system without links (its one route, as it is)
    label: str
    exact: bool = True

    def score(self, time_s: float) -> float:
        """The closed form ``time_s`` as ``auto`` ranks it on this way (see `INEXACT_MARGIN`)."""
        return time_s if self.exact else time_s * (1 + INEXACT_MARGIN)


AVOIDS = "avoids the degraded link"  #: how the label of the way without the degraded cables begins


def alternatives(system: System) -> list[Route]:
    """The system's network as faulted, then each way round its link faults (see the module docstring)."""
    net = system.network
    if net is None or not net.faulted or system.faults is None:
        return [Route(net, AS_FAULTED)]
    return ways(net, system.faults.faults)


def _cable_names(net: Network, cables: Any) -> str:
    """Cables as a user writes them in ``--fault link:A->B``: grid coordinates on a grid of two axes or more
    ("0,0-0,1"), chip ids on one axis ("0-1")."""
    def name(chip: Any) -> str:
        coord = net.graph.nodes[chip].get("coord")
        return ",".join(map(str, coord)) if coord is not None and len(coord) > 1 else str(chip)

    return ", ".join(f"{name(u)}-{name(v)}" for u, v in cables)


def ways(net: Network, faults: Any) -> list[Route]:
    """`alternatives` on ``net`` (a grid whose graph has ``faults`` written in): the same ways, in the same order,
    for the system's network or for a `trial_system`'s copy of it."""
    if not net.grid:  # switched fabrics (GPU nodes): a slow link kept in use, or avoided as if dead
        routes = [Route(net, AS_FAULTED, exact=False)]
        slow = _degraded_cables(net, faults, on_axis=False)
        avoided = _without(net, slow) if slow else None
        if avoided is not None:
            routes.append(Route(avoided, f"{AVOIDS}{'s' if len(slow) > 1 else ''} {_cable_names(net, slow)}",
                                exact=False))
        return routes
    slow = _degraded_cables(net, faults)
    chips = slow_chip_factors(net.graph, faults)
    routes = [Route(net, AS_FAULTED, exact=not slow and not chips)]
    if slow:
        avoided = _without(net, slow)
        if avoided is not None:
            names = _cable_names(net, slow)
            routes.append(Route(avoided, f"{AVOIDS}{'s' if len(slow) > 1 else ''} {names}"))
    ends = _slow_chip_cables(net, chips)
    if ends:
        avoided = _without(net, ends)
        if avoided is not None:
            names = _cable_names(net, ends)
            routes.append(Route(avoided, f"puts the slow chip{'s' if len(chips) > 1 else ''} at a line's end "
                                         f"(avoids {names})", exact=False))
    for route in list(routes):
        assert route.net is not None  # the routes of a network
        ring = _rewrapped(route.net)
        if ring is not None:
            label = f"{route.label}; " if route.label else ""
            routes.append(Route(ring, f"{label}keeps every axis a ring, detouring round the missing links",
                                exact=False))
    return routes


def trials_apply(system: System, data: Any) -> bool:
    """Whether ``auto`` may settle its choice round ``system``'s faults by simulating its candidates (`trial_system`):
    timing only, and faults the graph holds entirely (link faults and HBM-slowed chips; not a pause, a failure
    or jitter, which act while a run goes on)."""
    model = getattr(system, "faults", None)
    if data is not None or model is None or model.jitter is not None or system.calibration is not None:
        return False
    return all(isinstance(f, (LinkDown, LinkDegraded, LinkLatency)) or (isinstance(f, ChipSlow) and "hbm" in f.units)
               for f in model.faults)


def trial_system(system: System) -> System:
    """A fresh, idle copy of ``system``'s network for a trial run: its faulted graph (faults already written in) in a
    new untraced `System` of the same chip, nothing else applied (``seed=0``: no `applying` plan either)."""
    assert system.network is not None  # trials run only under link faults, on a network
    return System(system.spec, topology=system.graph, trace=False, switching=system.network.switching, seed=0)


def _degraded_cables(net: Network, faults: Any, on_axis: bool = True) -> list[tuple[Any, Any]]:
    """The cables (u, v) a `LinkDegraded` slows that lie on a grid axis (any, ``on_axis`` False); each once, as
    `simulator.engine.faults.degrade` refuses a second speed fault on one cable."""
    out: list[tuple[Any, Any]] = []
    for f in faults:
        if not isinstance(f, LinkDegraded):
            continue
        u, v = link_ends(net.graph, f.src, f.dst)
        edge = net.graph.edges[(u, v) if net.graph.has_edge(u, v) else (v, u)]
        if edge.get("axis") is not None or not on_axis:
            out.append((u, v))
    return out


def _slow_chip_cables(net: Network, chips: dict[Any, float]) -> list[tuple[Any, Any]]:
    """For each HBM-slowed chip, its cable to the next chip along each axis that still wraps (one per ring through
    it): left out, the ring runs as a line with the slow chip at its end, its other cable the only slow one."""
    out: list[tuple[Any, Any]] = []
    for chip in chips:
        coord = net.graph.nodes[chip].get("coord")
        if coord is None:
            continue
        for axis, n in enumerate(net.shape):
            if not net.wrap[axis] or n < 3:
                continue
            nxt = net.chip_at(tuple((c + 1) % n if a == axis else c for a, c in enumerate(coord)))
            if net.graph.has_edge(chip, nxt) and {chip, nxt} not in [set(c) for c in out]:
                out.append((chip, nxt))
    return out


def _without(net: Network, cables: list[tuple[Any, Any]]) -> Network | None:
    """``net`` with ``cables`` out, each unwrapping its axis as a dead cable does (None: they cut a chip off)."""
    g = net.graph.copy()
    wrap = list(g.graph.get("wrap", ()))
    origin = list(g.graph.get("origin", (0,) * len(wrap)))
    g.graph["wrap"] = tuple(g.graph.get("links_wrap", wrap))  # `_cut` asks whether the cabling wrapped
    for u, v in cables:
        _cut(g, u, v, wrap, origin)
    g.remove_edges_from([e for u, v in cables for e in ((u, v), (v, u))])
    g.graph.update(links_wrap=g.graph["wrap"], wrap=tuple(wrap), origin=tuple(origin))
    try:
        _check_reachable(g)
    except FaultError:
        return None
    return net.sibling(g)


def _rewrapped(net: Network) -> Network | None:
    """``net`` with every axis the cabling wraps kept a ring (origin 0); None where no axis was unwrapped."""
    cabled = tuple(net.graph.graph.get("links_wrap", net.wrap))
    if cabled == net.wrap and not any(net.origin):
        return None
    g = net.graph.copy()
    g.graph.update(wrap=cabled, origin=(0,) * len(cabled))
    return net.sibling(g)


def fault_note(system: System, plan: Any, link_bytes: dict[str, float]) -> str | None:
    """How the run went round link faults (`CollectivePlan.route`), and each fault that touches nothing it used: a link
    that carried none of its bytes, a chip slowed only on units a collective never runs (its MXU, VPU), a chip
    fault on a chip whose links carried nothing. None where there is nothing to say."""
    tried = sum("simulated_s" in alt for alt in plan.alternatives)
    how = f"the fastest of {tried} candidates simulated" if tried else "chosen by closed form"
    notes = [f"around the link faults: {plan.route} ({how}, against the network as faulted)"] if plan.route else []
    if system.network is not None and system.network.faulted:
        notes.append(NO_BOOK_UNDER_FAULTS)
    model = getattr(system, "faults", None)
    for record in getattr(model, "applied", []):
        if "link" in record and record["fault"] == "link_down":  # a dead cable carries nothing: is it the groups'?
            ends = set(record["link"].split("->"))
            if not any(ends <= {str(c) for c in g.members.values()} for g in plan.groups):
                notes.append(f"fault link_down on link {record['link']} joins no two chips of one group: it took "
                             "none of the groups' own links (only ways round it)")
            continue
        if "link" in record:
            if not plan.route and not any(d in link_bytes for d in record["directions"]):  # (a route avoids it)
                notes.append(f"fault {record['fault']} on link {record['link']} touches nothing this collective "
                             "uses (the link carried none of its bytes)")
            continue
        chip = record["chip"]
        if record["fault"] == "chip_slow" and "hbm" not in record["units"]:
            notes.append(f"fault chip_slow on chip {chip} ({'+'.join(record['units'])}) touches nothing this "
                         "collective uses: a collective moves bytes over links through HBM (slow:F:hbm slows them)")
        elif not any(k.startswith(f"{chip}->") or k.endswith(f"->{chip}") for k in link_bytes):
            notes.append(f"fault {record['fault']} on chip {chip} touches nothing this collective uses (none "
                         "of its links carried bytes)")
    return "; ".join(notes) or None
