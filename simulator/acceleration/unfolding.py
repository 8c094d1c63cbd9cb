"""A fast run's trace shown as the exact run records it: the chips and links its representatives stood for.

A fast run simulates representatives: a quotient run one link per orbit (`simulator.acceleration.quotient`), a
symmetric step one chip per pipeline stage and, on a grid, the collectives of the representative's neighbourhood
only (`simulator.acceleration.step_symmetry`). Before its figures leave the layer, the run names on its trace
(`Trace.stood_for`, the engine's `simulator.engine.speedups.StandIns` protocol) what each representative stood
for, as an `Unfolding`:

- ``links``: each representative link (chip, unit) -> the links it stood for. Their spans are the
  representative's, same times and bytes: the orbit of a quotient's link under its group, and the translates
  (`Translates`) of the links a fast step ran onto the groups it did not run;
- ``copies``: a representative link that stood for ``m`` flows at once on one link (a link a quotient's group
  maps onto itself: `quotient.shared`, run as a copy at 1/m of its bandwidth) holds one span where the exact run
  holds ``m`` alike; each of its spans, and of its images, counts ``m`` times;
- ``chips``: each representative chip -> the chips it stood for: their spans on chip units (every unit but
  links) and their memory timelines are its own.

`Trace.unfolded` (exports, CSV, Gantt, Perfetto) and `compute_metrics` (busy times) ask it; tests/test_unfolding.py
holds the unfolded fast run's per-link busy time and spans equal to the exact run's.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from simulator.engine.network import Network
from simulator.engine.trace import PoolTimeline, Span, Trace

Key = tuple[Any, str]  #: a link direction as the trace names it: (chip, unit)


@dataclass
class Unfolding:
    """What a fast run's representatives stood for (the `simulator.engine.speedups.StandIns` of its trace)."""

    links: dict[Key, list[Key]] = field(default_factory=dict)  #: representative link -> the links it stood for
    copies: dict[Key, int] = field(default_factory=dict)  #: representative link -> flows each of its spans stands for
    chips: dict[Any, list[Any]] = field(default_factory=dict)  #: representative chip -> the chips it stood for

    def __bool__(self) -> bool:
        return bool(self.links or self.chips or any(m > 1 for m in self.copies.values()))

    def add_links(self, key: Key, images: Iterable[Key], copies: int = 1) -> None:
        """``key`` stood for ``images`` too (kept once each, in order), each of its spans for ``copies`` flows."""
        self.links[key] = list(dict.fromkeys([*self.links.get(key, ()), *(i for i in images if i != key)]))
        if copies > 1:
            self.copies[key] = copies

    def _link_copies(self, s: Span) -> int:
        """Spans ``s`` (on a link) unfolds to, itself included."""
        key = (s.chip, s.unit)
        return (1 + len(self.links.get(key, ()))) * self.copies.get(key, 1)

    def extra_spans(self, spans: Iterable[Span]) -> int:
        """How many spans `unfold_spans` adds to ``spans``."""
        chips = self.chips
        extra = 0
        for s in spans:
            if s.unit.startswith("link "):
                extra += self._link_copies(s) - 1
            elif s.chip in chips:
                extra += len(chips[s.chip])
        return extra

    def unfold_spans(self, spans: Iterable[Span]) -> list[Span]:
        """The copies of ``spans`` onto every link and chip their representatives stood for (not ``spans``)."""
        links, copies, chips = self.links, self.copies, self.chips
        out: list[Span] = []
        for s in spans:
            if s.unit.startswith("link "):
                key = (s.chip, s.unit)
                m = copies.get(key, 1)
                out += [s] * (m - 1)
                for chip, unit in links.get(key, ()):
                    out += [s._replace(chip=chip, unit=unit)] * m
            elif s.chip in chips:
                out += [s._replace(chip=chip) for chip in chips[s.chip]]
        return out

    def unfold_pools(self, pools: list[PoolTimeline]) -> list[PoolTimeline]:
        """The memory timelines of every chip a representative stood for (copies of its own)."""
        return [replace(p, chip=chip) for p in pools for chip in self.chips.get(p.chip, ())]

    def unfold_busy(self, per_chip: dict[Hashable, dict[str, float]]) -> None:
        """Give every link a representative link stood for the representative's busy seconds in ``per_chip``
        (`simulator.engine.trace.busy_by_chip`'s form; in place). Chip units are not copied: a step's figures are
        maxima over chips, which the representatives attain."""
        for (chip, unit), images in self.links.items():
            seconds = per_chip.get(chip, {}).get(unit)
            if seconds is None:
                continue
            for image in images:
                per_chip.setdefault(image[0], {})[image[1]] = seconds


def stand_ins(trace: Trace) -> Unfolding:
    """``trace``'s `Unfolding`, set on it (empty) if it has none yet."""
    if trace.stood_for is None:
        trace.stood_for = Unfolding()
    assert isinstance(trace.stood_for, Unfolding), "the acceleration layer sets a trace's stand-ins"
    return trace.stood_for


@dataclass(frozen=True)
class Translates:
    """Symmetries of a network that map the links a fast step ran onto those of the groups it did not run:
    ``count`` moves, ``move(k, chip)`` the image of ``chip`` under the k-th (a translation of the grid, so that a
    link's image is the link between its ends' images, alike in bandwidth, latency and kind). Move 0 may be the
    identity; images that are links the step ran keep their own spans (`images` leaves them out). ``every``, where
    given, is ``[move(k, chip) for k in range(count)]`` at once (None where ``move`` raises KeyError): the grid's
    translations compute it in one NumPy step (the 8,960-chip pod unfolds 256 links through 8,960 moves each)."""

    count: int
    move: Callable[[int, Any], Any]
    every: Callable[[Any], list[Any]] | None = None
    #: the moves form a group (every translation of a grid): a link in an orbit already imaged has that orbit's
    #: images, as a set; `images` returns them as found for the first link (memo below, per set ``ran``)
    group: bool = False
    _orbits: dict[tuple[Any, Any], tuple[set[tuple[Any, Any]], list[tuple[Any, Any]]]] = field(
        default_factory=dict, compare=False, repr=False)

    def images(self, net: Network, ends: tuple[Any, Any], ran: set[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
        """The ends of every link ``ends`` (u, v) stands for: its images under every move that exist, are not
        links that ran, each once."""
        u, v = ends
        if self.group:
            known = self._orbits.get(ends)
            if known is not None and known[0] is ran:
                return known[1]
        orbit: dict[tuple[Any, Any], None] = {}  # the images that are links, ran or not
        if self.every is not None:  # (an image with a None end, off the grid, is no link)
            # ``b in succ[a]`` is ``has_edge(a, b)`` on NetworkX's own dict of successors (2.3 M images on the pod;
            # the public ``graph.succ`` view builds a view a lookup); a graph without it takes has_edge
            succ = getattr(net.graph, "_succ", None)
            has_edge = net.graph.has_edge
            for image in zip(self.every(u), self.every(v), strict=True):
                if image[1] in succ.get(image[0], ()) if succ is not None else has_edge(*image):
                    orbit[image] = None
        else:
            for k in range(self.count):
                try:
                    image = (self.move(k, u), self.move(k, v))
                except KeyError:  # off the grid (a line without wraparound): no such link
                    continue
                if net.graph.has_edge(*image):
                    orbit[image] = None
        out = [image for image in orbit if image not in ran]
        if self.group:  # every link of the orbit has these images (as a set)
            entry = (ran, out)
            self._orbits[ends] = entry
            for pair in orbit:
                self._orbits[pair] = entry
        return out
