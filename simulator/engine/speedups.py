"""The engine's one door to the acceleration layer (`simulator.acceleration`): dependency inversion, as
`simulator.collectives.fast_path` is the collectives layer's.

Two shortcuts of the acceleration layer change what the engine does without changing a figure:

- `RouteFinder`: a node system's routes found from one unit of nodes and moved over by a rotation that maps
  every link onto a like one (`simulator.acceleration.route_symmetry`). `Network` asks `route_finder()` for
  a `RouteSymmetry` of its graph; the provider registers itself when `PROVIDER` is imported, which this module
  does by name the first time (the engine never imports a layer above it).
- `StandIns`: the links and chips a fast run's representatives stood for, kept on `Trace.stood_for` and set by
  the acceleration layer (`simulator.acceleration.unfolding`); the trace asks it to unfold spans, busy times and
  memory timelines onto every chip and link (`Trace.unfolded`, `compute_metrics`). Nothing is loaded for it:
  only a fast run sets one.

tests/test_layers.py holds that this module and `simulator.collectives.fast_path` are the only modules below the
acceleration layer that name it, each only its own provider.
"""
from __future__ import annotations

import importlib
from collections.abc import Hashable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # annotations only
    import networkx as nx

    from simulator.engine.trace import PoolTimeline, Span

#: the module that implements `RouteFinder` and registers it on import (loaded on first need, by name); it is
#: light (NetworkX only), unlike the executor, so an engine-only script on a node system does not import the layer
PROVIDER = "simulator.acceleration.route_symmetry"


class RouteSymmetry(Protocol):
    """Rotations of a node system by whole units (``period`` of them) that map every link onto a like one."""

    period: int

    def offset(self, chip: Any) -> int:
        """How many units on from unit 0 ``chip``'s node lies."""
        ...

    def move(self, v: Any, units: int) -> Any:
        """Node ``v`` moved ``units`` units on (negative: back)."""
        ...


class RouteFinder(Protocol):
    """What `simulator.engine.network.Network` asks of the acceleration layer for its route searches."""

    def symmetry(self, graph: nx.DiGraph) -> RouteSymmetry | None:
        """The rotation of ``graph``'s units, checked link by link; None where there is none to use."""
        ...


class StandIns(Protocol):
    """The links and chips a fast run's representatives stood for (`Trace.stood_for`): what the trace asks to
    show a fast run as the exact run records it (`simulator.acceleration.unfolding.Unfolding` implements it)."""

    def __bool__(self) -> bool:
        """Whether anything stood for anything."""
        ...

    def extra_spans(self, spans: Iterable[Span]) -> int:
        """How many spans `unfold_spans` would add to ``spans``."""
        ...

    def unfold_spans(self, spans: Iterable[Span]) -> list[Span]:
        """The spans of every chip and link ``spans``' representatives stood for (the copies only)."""
        ...

    def unfold_pools(self, pools: list[PoolTimeline]) -> list[PoolTimeline]:
        """The memory timelines of every chip a representative stood for (the copies only)."""
        ...

    def unfold_busy(self, per_chip: dict[Hashable, dict[str, float]]) -> None:
        """Give every link a representative link stood for its busy seconds in ``per_chip`` (in place)."""
        ...


_registered: list[RouteFinder] = []


def register(finder: RouteFinder) -> None:
    """Make ``finder`` the engine's route finder (`PROVIDER` calls this on import)."""
    _registered[:] = [finder]


def route_finder() -> RouteFinder:
    """The registered route finder, loading `PROVIDER` (which registers it) the first time."""
    if not _registered:
        importlib.import_module(PROVIDER)
    assert _registered, f"{PROVIDER} registers a RouteFinder when imported"
    return _registered[0]
