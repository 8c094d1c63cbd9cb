"""The `Algorithm` interface and the registry of collective algorithms.

An algorithm says which collective kinds and topology kinds it serves (and, through `Algorithm.unfit`,
why it cannot run on a given group), builds its schedule (`Algorithm.build`) and gives its closed-form
time (`Algorithm.closed_form`), derived from first principles -- the bytes each link carries, hop counts
and latencies -- never by walking the schedule it builds. A new algorithm is one module that defines a
subclass and calls `register`; `podsim algorithms` lists the registry and ``--algorithm NAME`` picks
from it.

Each algorithm declares its `Capabilities`: which of podsim's fast paths (docs/acceleration.md) its schedule
builder supports. The registry checks them, and the collectives API takes a fast path only where the chosen
algorithm declares it; nothing is chosen from the topology behind an algorithm's back.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from simulator.collectives.groups import Group
from simulator.collectives.schedule import Schedule
from simulator.engine.network import Network
from simulator.errors import PodsimError

KINDS = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all", "broadcast", "gather", "scatter", "reduce")
#: topology kinds (``graph["kind"]``) of `topologies`; ``slice:`` specs build ``"torus"`` graphs
TOPOLOGY_KINDS = ("ring", "line", "torus", "mesh", "switch", "nodes", "multislice")
AUTO = "auto"
AUTO_RULE = ("the applicable algorithm with the fastest closed form at this size (ties: a ring that uses the "
             "wraparound before one that does not, then the first by name); "
             "every result lists the alternatives with theirs")


#: the kinds reduced mode serves (one representative ring per axis stands for every ring of that axis)
REDUCED_KINDS = ("all_gather", "reduce_scatter", "all_reduce")


@dataclass(frozen=True)
class Capabilities:
    """What an algorithm's schedule builder supports, beyond running every transfer of every group.

    The defaults are what an algorithm gets without saying anything: exact runs only (every group, every
    transfer), real data allowed, the verified quotient allowed (it checks equivariance before it is used,
    so it never changes a figure). Declaring more is a promise the registry checks where it can.
    """

    #: ``Job.reduced`` honoured: with it set, `Algorithm.build` builds the first group only (ring kinds: one
    #: representative ring per axis, arrivals recorded by position), and the API multiplies link bytes by
    #: the rings each one stands for. Only for `REDUCED_KINDS`, on wrapped, uniform, fault-free grids.
    reduced: bool = False
    #: the closed form prices every group's routes, so groups whose rings share links (a strided factor of a
    #: physical axis, `Group.shared`) may use it (Broadcast never: it is priced along one group)
    shared_links: bool = False
    #: its schedule may run on a quotient by a symmetry group of the network
    #: (`simulator.acceleration.quotient.run_on_quotient`, which verifies equivariance first)
    quotient: bool = True
    #: the quotient is built without the full schedule (`simulator.acceleration.ring_quotient`; needs the
    #: ring geometry ``on_axis``, ``gather_chains``, ``reduce_chains`` of `simulator.collectives.ring.RingAlgorithm`)
    direct_quotient: bool = False
    #: moves real data (``data=``, numeric mode: bundles are key lists); False: timing and bytes only
    numeric: bool = True

    def fast_paths(self) -> list[str]:
        """The names of the declared fast paths, for listings."""
        return [name for name in ("reduced", "shared_links", "quotient", "direct_quotient", "numeric")
                if getattr(self, name)]


@dataclass
class Job:
    """One validated collective, as an algorithm builds and prices it.

    ``rings`` lists the groups of each ring the array is spread over (one entry unless the topology
    runs several rings, one per NIC); ``key_bytes`` is the size of one key (see
    `simulator.collectives.payload`), already divided among those rings.
    """

    kind: str
    net: Network
    groups: list[Group]
    rings: list[list[Group]]
    parts: int
    chunks: int
    root_pos: tuple[int, ...]
    key_bytes: float
    reduced: bool = False  #: build one representative ring per axis (set only where `Capabilities.reduced`)
    numeric: bool = False  #: bundles are key lists (real data), not key counts
    nbytes: float = 0.0  #: V, the collective's array (see `simulator.collectives.run_collective`)
    multi_axis: str = "parallel"  #: parallel (every axis busy at once) or sequential
    shard_units: int | None = None  #: numeric ring kinds: elements per shard position (None: timing, bytes)
    unit_bytes: float = 1.0  #: bytes of one unit of `simulator.collectives.layout` (an element, or a byte)
    layout: Any = None  #: ring kinds: the `simulator.collectives.layout.Layout` `Algorithm.prepare` chose
    cache: dict[Any, Any] = field(default_factory=dict)  #: closed-form pieces an algorithm keeps between calls
    auto_chunks: bool = False  #: ``chunks`` was the algorithm's default (the caller gave none; timing mode)
    #: bytes of one NCCL step on the channels a ring stands for, which a network hop forwards whole (a calibrated
    #: ring Broadcast under LL or LL128, `simulator.collectives.protocol.network_step_bytes`; 0: none)
    net_step_bytes: float = 0.0

    @property
    def group(self) -> Group:
        """The first group (all groups have the same shape)."""
        return self.groups[0]


class Algorithm:
    """A collective algorithm (subclass it, then `register` an instance)."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""  #: one line: how data moves
    kinds: ClassVar[tuple[str, ...]] = ()
    topologies: ClassVar[tuple[str, ...]] = ()  #: topology kinds served (graphs of other kinds: by geometry)
    nic_rings: ClassVar[bool] = True  #: spread over one ring per NIC on GPU nodes (False: uses every NIC itself)
    capabilities: ClassVar[Capabilities] = Capabilities()  #: fast paths its builder supports (`register` checks)

    def unfit(self, kind: str, net: Network, groups: list[Group]) -> str | None:
        """Why this algorithm cannot run ``kind`` on ``groups`` (None: it can)."""
        if kind not in self.kinds:
            return f"it serves {', '.join(self.kinds)}, not {kind}"
        topology = net.graph.graph.get("kind")
        if topology in TOPOLOGY_KINDS and topology not in self.topologies:
            return f"it serves {', '.join(self.topologies)} topologies, not {topology}"
        return None

    def parts(self, kind: str, group: Group, multi_axis: str) -> int:
        """How many parts the array is split into (each part its own keys; see `payload`)."""
        return 1

    def prepare(self, job: Job) -> None:
        """Settle what the closed form and the schedule depend on beyond the job (e.g. `Job.layout`)."""

    def default_chunks(self, kind: str, net: Network, groups: list[Group], nbytes: float | None) -> int:
        """Pieces the array is cut into when the caller does not say (``chunks=None``); ``nbytes`` is None
        in numeric mode. One unless the algorithm pipelines (`simulator.collectives.spanning_trees`)."""
        return 1

    def priced_chunks(self, job: Job, piece_bytes: float = 0.0) -> int | None:
        """Pieces that minimise this algorithm's closed form on ``job``'s network (whose links a calibrated
        protocol has priced), where it pipelines pieces and ``job.auto_chunks``; None: keep ``job.chunks``.
        ``piece_bytes`` > 0: the protocol store-and-forwards pieces of that many bytes (none smaller)."""
        return None

    def build(self, job: Job, schedule: Schedule) -> None:
        """Add the transfers of ``job`` to ``schedule``."""
        raise NotImplementedError

    def closed_form(self, job: Job) -> float:
        """Seconds the algorithm takes by its own closed form (ideal links)."""
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        """Name, summary, kinds, topology kinds and capabilities, for listings."""
        caps = self.capabilities
        return {"name": self.name, "summary": self.summary, "kinds": list(self.kinds),
                "topologies": list(self.topologies),
                "capabilities": {f: getattr(caps, f) for f in caps.__dataclass_fields__}}


_REGISTRY: dict[str, Algorithm] = {}


def register(algorithm: Algorithm) -> Algorithm:
    """Add ``algorithm`` to the registry under its name (a name may be registered once)."""
    name = algorithm.name
    if not name or name == AUTO or name in _REGISTRY:
        raise PodsimError(f"algorithm name {name!r} is empty, reserved or already registered")
    check_capabilities(algorithm)
    _REGISTRY[name] = algorithm
    return algorithm


def check_capabilities(algorithm: Algorithm) -> None:
    """Refuse capabilities an algorithm cannot have: not a `Capabilities`, a field not a bool, reduced mode
    without a kind it serves, a direct quotient without the ring geometry it is built from, or a quotient
    that is direct but not allowed."""
    caps, name = algorithm.capabilities, algorithm.name
    if not isinstance(caps, Capabilities):
        raise PodsimError(f"algorithm {name!r}: capabilities={caps!r}; valid: a "
                          f"simulator.collectives.algorithm.Capabilities")
    for f in caps.__dataclass_fields__:
        if not isinstance(getattr(caps, f), bool):
            raise PodsimError(f"algorithm {name!r}: capabilities.{f}={getattr(caps, f)!r}; valid: True or False")
    if caps.reduced and not set(algorithm.kinds) & set(REDUCED_KINDS):
        raise PodsimError(f"algorithm {name!r} declares reduced mode but serves none of {', '.join(REDUCED_KINDS)} "
                          f"(the kinds reduced mode runs)")
    if caps.direct_quotient and not caps.quotient:
        raise PodsimError(f"algorithm {name!r} declares direct_quotient without quotient")
    missing = [m for m in ("on_axis", "gather_chains", "reduce_chains") if not callable(getattr(algorithm, m, None))]
    if caps.direct_quotient and missing:
        raise PodsimError(f"algorithm {name!r} declares direct_quotient but has no {', '.join(missing)} (the ring "
                          f"geometry simulator.acceleration.ring_quotient builds from)")


def unregister(name: str) -> None:
    """Remove the algorithm registered as ``name`` (tests of plug-ins use it to clean up)."""
    _REGISTRY.pop(name, None)


def algorithms() -> list[Algorithm]:
    """Every registered algorithm, by name."""
    return [_REGISTRY[name] for name in sorted(_REGISTRY)]


def names() -> list[str]:
    """``auto`` and every registered algorithm's name."""
    return [AUTO, *sorted(_REGISTRY)]


def get_algorithm(name: str) -> Algorithm:
    """The algorithm registered as ``name``."""
    if name not in _REGISTRY:
        raise PodsimError(f"algorithm={name!r}; valid: {', '.join(names())}")
    return _REGISTRY[name]


def applicable(kind: str, net: Network, groups: list[Group]) -> list[str]:
    """Names of the registered algorithms that can run ``kind`` on ``groups``."""
    return [a.name for a in algorithms() if _unfit(a, kind, net, groups) is None]


def _unfit(algorithm: Algorithm, kind: str, net: Network, groups: list[Group]) -> str | None:
    """`Algorithm.unfit`, and groups that share links (a strided mesh axis: `Group.shared`) only for closed
    forms that price every group's routes (`Capabilities.shared_links`; not Broadcast, priced along one group)."""
    if groups and groups[0].shared and (not algorithm.capabilities.shared_links or kind == "broadcast"):
        return ("a mesh axis on a strided factor of a physical axis shares its links with other groups; its "
                f"closed form prices one group's links{' (Broadcast)' if kind == 'broadcast' else ''}")
    return algorithm.unfit(kind, net, groups)


def choose(name: str, kind: str, net: Network, groups: list[Group]) -> Algorithm:
    """The algorithm ``name`` asks for (not ``auto``: see `simulator.collectives.tuner`); an error says which
    ones apply instead."""
    algorithm = get_algorithm(name)
    why = _unfit(algorithm, kind, net, groups)
    if why is not None:
        fits = applicable(kind, net, groups)
        raise PodsimError(f"algorithm {algorithm.name!r} cannot run {kind} here: {why}; algorithms that apply: "
                          f"{', '.join(fits) or 'none'}")
    return algorithm


def fastest(times: dict[str, float]) -> str:
    """The name with the smallest time (within a relative 1e-9: a ring that uses the wraparound link before one
    that does not, then the first by name). A closed ring's schedule is the same from every position, so the
    symmetry shortcuts apply to it (`simulator.acceleration.quotient`: a multislice step's FSDP collectives, where
    ``line`` and ``unidirectional`` tie, run on one representative chip instead of a whole slice)."""
    best = min(times.values())
    tied = [name for name, t in times.items() if t <= best * (1 + 1e-9)]
    closed = [name for name in tied if getattr(_REGISTRY.get(name), "closed", True)] if len(tied) > 1 else tied
    return min(closed or tied)


def listing() -> dict[str, Any]:
    """Every registered algorithm (name, summary, kinds, topology kinds, capabilities) and the ``auto`` rule."""
    return {"algorithms": [a.describe() for a in algorithms()], "auto": AUTO_RULE}


def render_listing() -> str:
    """`listing` as text: one algorithm per three lines."""
    lines = []
    for row in listing()["algorithms"]:
        fast = [f for f, on in row["capabilities"].items() if on]
        lines.append(f"{row['name']:<15} {row['summary']}")
        lines.append(f"{'':<15} kinds: {', '.join(row['kinds'])}; topologies: {', '.join(row['topologies'])}")
        lines.append(f"{'':<15} supports: {', '.join(fast) or 'exact runs only'}")
    return "\n".join([*lines, f"{AUTO:<15} {AUTO_RULE}"])
