"""Faults and jitter as objects: what a dead link, a slow chip or noisy kernels do to a run.

A fault is a frozen dataclass in SI units naming a chip or a link of the topology (a chip by index, by
grid coordinate ``(0, 1)``, or a switch by name). Pass them to `System` --
``System(chip, topology="torus:8", faults=[LinkDown(0, 1), ChipSlow(3, 0.8)], jitter=Jitter(cv=0.05), seed=3)``
-- or open ``with applying(FaultPlan(...))`` around code that builds systems (a scenario, a Transformer
step): every `System` built inside takes the plan's faults and its own seed, spawned in build order.

Link faults hit the cable: both directions of ``src <-> dst`` (ICI and NVLink cables fail and train
together), so ``link:0->1`` and ``link:1->0`` name one cable. Each cable takes at most one fault of each kind
(one fraction, one extra latency) and a dead one nothing else; naming it again (either way round, or in
another notation) is refused with a `FaultError` naming both faults, where it once multiplied the fractions
(0.5 on each direction gave 0.25 on both). `apply_to_graph` writes them into a copy of the topology graph
before the links are built:

- `LinkDown` removes both directions, so routes avoid it. On a grid axis that wrapped, the axis no
  longer wraps (``graph["wrap"]``), so ring algorithms run the line on it and ``auto`` re-chooses among
  what still applies; its positions start after the break (``graph["origin"]``), so the line never needs
  the dead cable. ``graph["links_wrap"]`` keeps the cabling for routing.
- `LinkDegraded` scales the cable's bandwidth by ``fraction``; `LinkLatency` adds ``extra_s`` per hop.
- `ChipFail` at t = 0 marks the chip (``graph["failed_chips"]``): routes go round it where they can. Routes
  are chosen once, so a chip that fails later takes the messages crossing it down with it.
- `ChipSlow` with ``hbm`` among its units (the default: all units) also scales the bandwidth of every link
  direction into and out of the chip by its factor: a chip's DMA engines move what its links inject and
  eject (and the operands of a collective's reductions) through its HBM, so a chip whose HBM runs at f moves
  its collective traffic at f too. A link between two slow chips runs at the slower one's factor (times any
  `LinkDegraded` of its own).

Chip faults and jitter act on the running units (`simulator.engine.disturb`).

What each fault kind means in a collective (which moves bytes over links and nothing else: the adds of a
reduction are priced as hidden under the link time, as the book does): ``link=down`` removes the cable,
``link=FRACTION`` slows it, ``link=latency:T`` adds T per hop over it, ``chip=slow:F`` slows its links as
above (``slow:F:mxu`` or ``:vpu`` alone touches nothing a collective uses, and the run says so),
``chip=pause`` stops its links for the window, ``chip=fail`` loses what crosses it.
"""
from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from simulator.errors import FaultError
from simulator.units import check_derived, check_int, check_number, format_quantity, show

if TYPE_CHECKING:  # NetworkX, NumPy and topologies load where they are used: the CLI's parser reads this module
    import networkx as nx
    import numpy as np

Node = int | str | tuple[Any, ...]  #: a chip index, a grid coordinate, or a switch's name
CHIP_UNITS = ("mxu", "vpu", "hbm")
JITTER_UNITS = ("mxu", "vpu", "hbm", "link")
DISTRIBUTIONS = ("lognormal", "gamma", "uniform")  #: jitter factors, all of mean 1 and the given CV
MAX_CV = 10.0  #: more is a units mistake (5 rather than 5%)
UNIFORM_MAX_CV = 1 / math.sqrt(3)  #: uniform on [1 - sqrt(3) cv, 1 + sqrt(3) cv] stays positive below this
MAX_TIME_S = 1e6  #: fault times past this describe no run podsim simulates


MIN_SPEED = 1e-9  #: the least share of full speed the faults on one part may leave: slower is no working part


def check_speed(fraction: float, part: str, given: str) -> float:
    """``fraction`` of full speed that the faults ``given`` leave ``part`` (their product, where several act on
    it), refused below `MIN_SPEED`: a share that small (or one that underflowed to 0) prices nothing real."""
    return check_derived(fraction, what=f"{part}'s share of full speed", given=given, minimum=MIN_SPEED,
                         maximum=1.0, error=FaultError,
                         hint="for a part that does not work at all, use =down (a link) or =fail (a chip)")


def _fraction(value: Any, name: str) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= 1
    if not ok:
        raise FaultError(f"{name}={show(value)} must be a fraction in (0, 1]: the share of full speed left")
    return check_speed(float(value), f"the {name.split()[0]}", f"{name}={show(value)}")


def _time(value: Any, name: str) -> float:
    return check_number(value, name=name, minimum=0.0, maximum=MAX_TIME_S, unit="s", error=FaultError)


def _units(units: Any, valid: tuple[str, ...], what: str) -> tuple[str, ...]:
    given: tuple[Any, ...] = (units,) if isinstance(units, str) else tuple(units)
    bad = [u for u in given if u not in valid]
    if bad or not given:
        raise FaultError(f"{what} units {show(list(given))}: valid units are {', '.join(valid)}")
    return given


@dataclass(frozen=True)
class LinkDown:
    """The cable between ``src`` and ``dst`` is dead (both directions)."""

    src: Node
    dst: Node


@dataclass(frozen=True)
class LinkDegraded:
    """The cable between ``src`` and ``dst`` runs at ``fraction`` (0 < f <= 1) of its bandwidth."""

    src: Node
    dst: Node
    fraction: float

    def __post_init__(self) -> None:
        _fraction(self.fraction, "link fraction")


@dataclass(frozen=True)
class LinkLatency:
    """Every hop over the cable between ``src`` and ``dst`` takes ``extra_s`` seconds longer."""

    src: Node
    dst: Node
    extra_s: float

    def __post_init__(self) -> None:
        _time(self.extra_s, "link extra_s")


@dataclass(frozen=True)
class ChipSlow:
    """Chip ``chip`` runs ``units`` (mxu, vpu, hbm) at ``factor`` (0 < f <= 1) of their speed."""

    chip: Node
    factor: float
    units: tuple[str, ...] = CHIP_UNITS

    def __post_init__(self) -> None:
        _fraction(self.factor, "chip slow factor")
        object.__setattr__(self, "units", _units(self.units, CHIP_UNITS, "chip slow"))


@dataclass(frozen=True)
class ChipPause:
    """Chip ``chip`` -- its MXU, VPU, HBM and every link direction touching it -- stops from ``start_s`` for
    ``duration_s``; work in progress resumes where it stopped."""

    chip: Node
    start_s: float
    duration_s: float

    def __post_init__(self) -> None:
        _time(self.start_s, "pause start_s")
        _time(self.duration_s, "pause duration_s")


@dataclass(frozen=True)
class ChipFail:
    """Chip ``chip`` fails at ``at_s``: its units and links never finish anything after that (data in
    transit through it is lost with it); at t = 0 routes go round it."""

    chip: Node
    at_s: float = 0.0

    def __post_init__(self) -> None:
        _time(self.at_s, "fail at_s")


@dataclass(frozen=True)
class Jitter:
    """Per-operation duration noise: every matmul, vector op, DMA and link transfer on ``units`` takes its
    time times a factor drawn from ``distribution`` (lognormal, gamma or uniform), of mean 1 and coefficient
    of variation ``cv`` (0 = off); a link's latency is not scaled."""

    distribution: str = "lognormal"
    cv: float = 0.05
    units: tuple[str, ...] = JITTER_UNITS

    def __post_init__(self) -> None:
        if self.distribution not in DISTRIBUTIONS:
            raise FaultError(f"jitter distribution {show(self.distribution)}: valid distributions are "
                             f"{', '.join(DISTRIBUTIONS)}")
        check_number(self.cv, name="jitter cv", minimum=0.0, maximum=MAX_CV, error=FaultError)
        if self.distribution == "uniform" and self.cv >= UNIFORM_MAX_CV:
            raise FaultError(f"jitter cv={self.cv:g} is too large for the uniform distribution (its factors would "
                             f"reach 0); give cv below {UNIFORM_MAX_CV:.3f}, or use lognormal or gamma")
        object.__setattr__(self, "units", _units(self.units, JITTER_UNITS, "jitter"))

    @property
    def active(self) -> bool:
        return self.cv > 0


Fault = LinkDown | LinkDegraded | LinkLatency | ChipSlow | ChipPause | ChipFail
LINK_FAULTS = (LinkDown, LinkDegraded, LinkLatency)
CHIP_FAULTS = (ChipSlow, ChipPause, ChipFail)


def check_faults(faults: Sequence[Any]) -> tuple[Fault, ...]:
    """``faults`` as a tuple, each one a fault object."""
    if isinstance(faults, (str, bytes)) or not isinstance(faults, Sequence):
        raise FaultError(f"faults={show(faults)} must be a list of fault objects (LinkDown, ChipSlow, ...)")
    bad = [f for f in faults if not isinstance(f, LINK_FAULTS + CHIP_FAULTS)]
    if bad:
        names = ", ".join(t.__name__ for t in LINK_FAULTS + CHIP_FAULTS)
        raise FaultError(f"faults holds {show(bad[0])}, not a fault; valid: {names}")
    return tuple(faults)


# -- the ambient plan --------------------------------------------------------------------------------
@dataclass
class FaultPlan:
    """Faults, jitter and a seed for every `System` built while the plan is applied (`applying`).

    System k built under the plan draws from ``SeedSequence(seed, spawn_key=(*spawn_key, k))``, so a run is
    the same for the same seed whatever else ran before it. ``systems`` lists them, in build order.
    """

    faults: tuple[Fault, ...] = ()
    jitter: Jitter | None = None
    seed: int = 0
    spawn_key: tuple[int, ...] = ()
    systems: list[Any] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.faults = check_faults(self.faults)
        check_int(self.seed, name="seed", minimum=0, maximum=2**63, error=FaultError)

    def next_seed(self) -> np.random.SeedSequence:
        """The seed of the next system built under this plan."""
        import numpy as np

        return np.random.SeedSequence(self.seed, spawn_key=(*self.spawn_key, len(self.systems)))


_PLAN: contextvars.ContextVar[FaultPlan | None] = contextvars.ContextVar("podsim_fault_plan", default=None)


def current_plan() -> FaultPlan | None:
    """The plan applied now (None outside `applying`)."""
    return _PLAN.get()


@contextlib.contextmanager
def applying(plan: FaultPlan) -> Iterator[FaultPlan]:
    """Give every `System` built inside this block the faults, jitter and seeds of ``plan``."""
    token = _PLAN.set(plan)
    try:
        yield plan
    finally:
        _PLAN.reset(token)


# -- faults on the topology graph -------------------------------------------------------------------
def resolve_node(graph: nx.DiGraph, node: Any, what: str = "chip", chips_only: bool = True) -> Hashable:
    """The graph node that ``node`` names: a chip index, a grid coordinate, or (links) a switch's name."""
    import topologies
    from topologies import TopologyError

    chips = sorted(v for v, role in graph.nodes(data="role") if role == "chip")
    shape = tuple(graph.graph.get("shape", ()))
    key = node
    if isinstance(node, (tuple, list)):
        try:
            key = topologies.coord_to_node(graph, tuple(node))
        except TopologyError:
            key = None
    ok = key is not None and not isinstance(key, (bool, list, tuple)) and key in graph and \
        (graph.nodes[key].get("role") == "chip" or not chips_only)
    if not ok:
        where = f" (or coordinates {','.join('0' * len(shape))}..{','.join(str(n - 1) for n in shape)})" \
            if len(shape) > 1 and graph.graph.get("kind") in ("torus", "mesh", "multislice") else ""
        raise FaultError(f"{what} {_text(node)} is not a chip of {_name(graph)}; chips are "
                         f"{chips[0]}..{chips[-1]}{where}")
    found: Hashable = key
    return found


def link_ends(graph: nx.DiGraph, src: Any, dst: Any) -> tuple[Hashable, Hashable]:
    """The nodes of the cable ``src <-> dst``; `FaultError` naming ``src``'s links when there is none."""
    u = resolve_node(graph, src, "link end", chips_only=False)
    v = resolve_node(graph, dst, "link end", chips_only=False)
    if not graph.has_edge(u, v) and not graph.has_edge(v, u):
        peers = sorted({*graph.successors(u), *graph.predecessors(u)}, key=str)
        who = "chip " if graph.nodes[u].get("role") == "chip" else ""
        raise FaultError(f"link {_text(src)}->{_text(dst)} is not a link of {_name(graph)}; {who}{u} has links to "
                         f"{', '.join(map(str, peers)) or 'nothing'}")
    return u, v


def apply_to_graph(graph: nx.DiGraph, faults: Sequence[Fault]) -> tuple[nx.DiGraph, list[dict[str, Any]]]:
    """A copy of ``graph`` with the link faults (and the failed chips) written in, and what was applied: one
    record per fault (chips and links resolved to node ids, effects named)."""
    g = graph.copy()
    wrap = list(g.graph.get("wrap", ()))
    origin = [0] * len(wrap)
    applied: list[dict[str, Any]] = []
    failed = sorted({resolve_node(g, f.chip) for f in faults if isinstance(f, ChipFail) and f.at_s == 0}, key=str)
    speed: dict[frozenset[Any], float] = {}  # each cable's share of full bandwidth under the faults so far
    named: dict[tuple[frozenset[Any], str], Fault] = {}  # (cable, what it does) -> the fault that named it
    for f in faults:
        if isinstance(f, CHIP_FAULTS):
            applied.append(chip_record(f, resolve_node(g, f.chip)))
            continue
        u, v = link_ends(graph, f.src, f.dst)
        _check_once(named, frozenset((u, v)), f)
        record: dict[str, Any] = {"fault": _KIND[type(f)], "link": f"{u}->{v}", "directions": _directions(graph, u, v)}
        if isinstance(f, LinkDown):
            record["effect"] = _cut(graph, u, v, wrap, origin)
            g.remove_edges_from([(u, v), (v, u)])
        elif isinstance(f, LinkDegraded):
            record["fraction"] = f.fraction
            cable = frozenset((u, v))
            speed[cable] = check_speed(speed.get(cable, 1.0) * f.fraction, f"link {u}-{v}",
                                       "multiplying the --fault degradations of one link")
            for a, b in ((u, v), (v, u)):
                if g.has_edge(a, b):
                    _keep_healthy(g.edges[a, b])
                    g.edges[a, b]["bandwidth_bytes_per_s"] *= f.fraction
            record["bandwidth_bytes_per_s"] = g.edges[_some(g, u, v)]["bandwidth_bytes_per_s"] \
                if g.has_edge(u, v) or g.has_edge(v, u) else 0.0
        else:
            record["extra_latency_s"] = f.extra_s
            for a, b in ((u, v), (v, u)):
                if g.has_edge(a, b):
                    g.edges[a, b]["latency_s"] += f.extra_s
        applied.append(record)
    _slow_chip_links(g, faults)
    if wrap:
        g.graph.update(links_wrap=tuple(g.graph["wrap"]), wrap=tuple(wrap), origin=tuple(origin))
    g.graph.update(faults=True, failed_chips=tuple(failed))
    _check_reachable(g)
    return g, applied


def _check_once(named: dict[tuple[frozenset[Any], str], Fault], cable: frozenset[Any], f: Fault) -> None:
    """Refuse a second fault of one kind on one cable, and anything beside =down on a dead one: a link fault acts
    on both directions of its cable, so ``link:0->1=0.5`` with ``link:1->0=0.5`` (or the same cable in another
    notation) would otherwise multiply to 0.25 both ways."""
    what = "down" if isinstance(f, LinkDown) else "speed" if isinstance(f, LinkDegraded) else "latency"
    clash = named.get((cable, what)) or named.get((cable, "down")) or \
        (named.get((cable, "speed")) or named.get((cable, "latency")) if what == "down" else None)
    if clash is not None:
        ends = "<->".join(sorted(map(str, cable)))
        raise FaultError(f"{_fault_text(f)} names cable {ends} again, after {_fault_text(clash)}: a link fault acts "
                         "on both directions of its cable, so give each cable one fault of each kind (one fraction "
                         "for the cable, e.g. =0.25 rather than two of 0.5; a dead cable nothing else)")
    named[(cable, what)] = f


def _fault_text(f: Fault) -> str:
    """A link fault as ``--fault`` writes it (``link:0->1=0.5``)."""
    assert isinstance(f, LINK_FAULTS)
    value = "down" if isinstance(f, LinkDown) else f"{f.fraction:g}" if isinstance(f, LinkDegraded) else \
        "latency:" + format_quantity(f.extra_s, "s").replace(" ", "") if isinstance(f, LinkLatency) else "?"
    return f"link:{_text(f.src)}->{_text(f.dst)}={value}"


def slow_chip_factors(graph: nx.DiGraph, faults: Sequence[Fault]) -> dict[Hashable, float]:
    """Each chip whose HBM a `ChipSlow` slows, and the share of speed its DMA is left (the product of its faults)."""
    out: dict[Hashable, float] = {}
    for f in faults:
        if isinstance(f, ChipSlow) and "hbm" in f.units:
            chip = resolve_node(graph, f.chip)
            out[chip] = out.get(chip, 1.0) * f.factor
    return out


def _slow_chip_links(g: nx.DiGraph, faults: Sequence[Fault]) -> None:
    """Scale the links into and out of each HBM-slowed chip by its factor (the slower end's, where both are); the
    share of full speed a link is left (its own degradation times that factor) is refused below `MIN_SPEED`."""
    slow = slow_chip_factors(g, faults)
    for u, v, data in g.edges(data=True):
        factor = min(slow.get(u, 1.0), slow.get(v, 1.0))
        if factor < 1.0:
            _keep_healthy(data)
            check_speed(data["bandwidth_bytes_per_s"] * factor / data[HEALTHY_BANDWIDTH], f"link {u}-{v}",
                        "multiplying a link's --fault degradation by its chip's slow-down")
            data["bandwidth_bytes_per_s"] *= factor


HEALTHY_BANDWIDTH = "healthy_bandwidth_bytes_per_s"
"""The edge attribute a slowed link keeps its healthy bandwidth in (bytes/s): routes on switched fabrics are chosen
as on healthy hardware (`simulator.engine.network.Network`), so a slow link stays in use rather than abandoned."""


def _keep_healthy(data: dict[str, Any]) -> None:
    """Record a link's healthy bandwidth (bytes/s) before its first slowdown."""
    data.setdefault(HEALTHY_BANDWIDTH, data["bandwidth_bytes_per_s"])


_KIND = {LinkDown: "link_down", LinkDegraded: "link_degraded", LinkLatency: "link_latency",
         ChipSlow: "chip_slow", ChipPause: "chip_pause", ChipFail: "chip_fail"}


def chip_record(f: Any, chip: Hashable) -> dict[str, Any]:
    """What a chip fault applied: its kind, the chip's node id and its numbers."""
    record: dict[str, Any] = {"fault": _KIND[type(f)], "chip": chip}
    if isinstance(f, ChipSlow):
        record.update(factor=f.factor, units=list(f.units))
    elif isinstance(f, ChipPause):
        record.update(start_s=f.start_s, end_s=f.start_s + f.duration_s)
    else:
        record.update(at_s=f.at_s)
    return record


def _directions(graph: nx.DiGraph, u: Hashable, v: Hashable) -> list[str]:
    return [f"{a}->{b}" for a, b in ((u, v), (v, u)) if graph.has_edge(a, b)]


def _some(g: nx.DiGraph, u: Hashable, v: Hashable) -> tuple[Hashable, Hashable]:
    return (u, v) if g.has_edge(u, v) else (v, u)


def _cut(graph: nx.DiGraph, u: Hashable, v: Hashable, wrap: list[bool], origin: list[int]) -> str:
    """Record a dead cable on its grid axis: an axis that wrapped no longer does, counted from the chip after
    the break. Returns the effect, in words."""
    data = graph.edges[_some(graph, u, v)]
    axis = data.get("axis")
    if axis is None or axis >= len(wrap) or "coord" not in graph.nodes[u]:
        return "routes avoid it"
    n = graph.graph["shape"][axis]
    a, b = graph.nodes[u]["coord"][axis], graph.nodes[v]["coord"][axis]
    lower = n - 1 if data.get("wrap") else min(a, b)
    if graph.graph["wrap"][axis] and (wrap[axis] or origin[axis] == (lower + 1) % n):
        wrap[axis], origin[axis] = False, (lower + 1) % n
        return (f"axis {axis} no longer wraps: its rings run as lines from coordinate {origin[axis]} to "
                f"{(origin[axis] - 1) % n}; routes avoid it")
    return f"routes detour round it (axis {axis} already runs as a line)"


def _check_reachable(g: nx.DiGraph) -> None:
    import networkx as nx

    chips = sorted(v for v, role in g.nodes(data="role") if role == "chip")
    reach = nx.descendants(g, chips[0]) | {chips[0]}
    back = nx.ancestors(g, chips[0]) | {chips[0]}
    cut = [c for c in chips if c not in reach or c not in back]
    if cut:
        raise FaultError(f"the links down cut chip {cut[0]} off from chip {chips[0]} on {_name(g)}; every chip "
                         "must still reach every other (to take a chip out, fail it: chip:ID=fail)")


def _name(graph: nx.DiGraph) -> str:
    return str(graph.graph.get("spec") or graph.graph.get("kind") or "this topology")


def _text(node: Any) -> str:
    return ",".join(map(str, node)) if isinstance(node, (tuple, list)) else str(node)
