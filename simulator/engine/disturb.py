"""Faults and jitter at run time: the units and channels of disturbed chips and links, and what was lost.

`FaultModel` is what a `System` holds when it has faults or jitter (`simulator.engine.faults`); with
neither, the System never builds one and every unit is the plain `Channel` or `SerialUnit`, so an
undisturbed run is bit for bit what it was. The model

- writes link faults into the graph (`simulator.engine.faults.apply_to_graph`) before the network is built;
- swaps in a `FaultUnit` for the MXU / VPU and a `FaultChannel` for the HBM DMA of each chip it touches,
  and builds a `FaultChannel` for each link it touches (through `Network.make_channel`);
- records every operation a failed chip makes impossible, and after the run raises `IncompleteRunError`
  naming them (a failed chip ends the run -- nothing is left to happen -- rather than hanging it).

Timing rules: a slowed unit takes ``duration / factor`` (HBM: bandwidth times factor); jitter multiplies
an operation's duration (a transfer's bytes-over-bandwidth time, not its latency) by a factor of mean 1;
a paused unit or channel makes no progress in its pause window and resumes where it stopped; a failed
one finishes nothing that would end after its failure time.
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from simulator.engine.channel import Channel, SerialUnit
from simulator.engine.fault_channel import FaultChannel, Lost, Noise, OnLost, Window, _windows
from simulator.engine.faults import (
    CHIP_FAULTS,
    LINK_FAULTS,
    ChipFail,
    ChipPause,
    ChipSlow,
    Fault,
    FaultPlan,
    Jitter,
    apply_to_graph,
    check_faults,
    check_speed,
    chip_record,
    current_plan,
    resolve_node,
)
from simulator.engine.trace import Span, Trace
from simulator.errors import FaultError, IncompleteRunError

if TYPE_CHECKING:  # annotations only: no import at run time (and no cycle; NetworkX loads with a topology)
    import networkx as nx

    from simulator.engine.system import System

__all__ = ["FaultChannel", "FaultModel", "FaultUnit", "Noise", "model_for"]


class FaultUnit(SerialUnit):
    """A `SerialUnit` whose operations take ``duration / speed`` times a jitter factor, skip its pause
    windows (an operation caught by one resumes after it, as split spans) and die at ``fail_at``."""

    def __init__(self, env: simpy.Environment, name: str, *, chip: int | str = 0, trace: Trace | None = None,
                 speed: float = 1.0, noise: Noise | None = None, pauses: Sequence[Window] = (),
                 fail_at: float = math.inf, on_lost: OnLost | None = None) -> None:
        super().__init__(env, name, chip=chip, trace=trace)
        self.speed, self.noise, self.fail_at, self.on_lost = speed, noise, fail_at, on_lost
        self.pauses = _windows(pauses)

    def run(self, duration_s: float, label: str = "", flops: float = 0.0, kind: str = "compute") -> simpy.Event:
        duration = duration_s / self.speed
        if self.noise is not None and duration > 0:
            duration *= self.noise()
        pieces = self._place(max(self.env.now, self._free_at), duration)
        end = pieces[-1][1]
        if end > self.fail_at or pieces[0][0] >= self.fail_at:
            self._free_at = math.inf
            pieces = [(a, min(b, self.fail_at)) for a, b in pieces if a < self.fail_at]
            self._record(pieces, label, 0.0, kind)
            if self.on_lost is not None:
                self.on_lost(f"chip {self.chip} {self.name}", label or kind)
            return Lost(self.env, f"chip {self.chip} {self.name} ({label or kind}; the chip failed)")
        self._free_at = end
        self._record(pieces, label, flops, kind)
        return self.env.timeout(end - self.env.now)

    def _place(self, start: float, duration: float) -> list[Window]:
        """The working intervals of an operation of ``duration`` s that may start at ``start``."""
        t, left, pieces = start, duration, []
        for a, b in self.pauses:
            if b <= t:
                continue
            if a <= t:
                t = b
                continue
            if t + left <= a:
                break
            pieces.append((t, a))
            left, t = left - (a - t), b
        pieces.append((t, t + left))
        return pieces

    def _record(self, pieces: list[Window], label: str, flops: float, kind: str) -> None:
        if self.trace is None:
            return
        total = sum(b - a for a, b in pieces)
        done = 0.0
        for k, (a, b) in enumerate(pieces):
            share = flops - done if k == len(pieces) - 1 else (flops * (b - a) / total if total else 0.0)
            done += share
            self.trace.add(Span(self.chip, self.name, label, a, b, kind, 0.0, share))


class FaultModel:
    """The faults and jitter of one `System`: applied to its graph, units and links; what they made impossible."""

    def __init__(self, faults: Sequence[Fault], jitter: Jitter | None, seed: Any) -> None:
        self.faults = check_faults(faults)
        if jitter is not None and not isinstance(jitter, Jitter):
            raise FaultError(f"jitter={jitter!r} must be a Jitter (e.g. Jitter('lognormal', cv=0.05)) or None")
        self.jitter = jitter if jitter is not None and jitter.active else None
        self.seed = seed
        rng = np.random.default_rng(seed)
        self.noise = Noise(rng, self.jitter.distribution, self.jitter.cv) if self.jitter is not None else None
        self.applied: list[dict[str, Any]] = []
        self.lost: Counter[str] = Counter()
        self.failed: dict[Hashable, float] = {}
        self._pauses: dict[Hashable, list[Window]] = {}

    # -- building ---------------------------------------------------------------------------------------
    def prepare_graph(self, graph: nx.DiGraph) -> nx.DiGraph:
        """The topology with the link faults written in (see `apply_to_graph`)."""
        graph, self.applied = apply_to_graph(graph, self.faults)
        return graph

    def attach(self, system: System) -> None:
        """Swap in disturbed units on the chips the faults or jitter touch; hook the network's link builder."""
        graph = system.graph if system.network is not None else self._chip_graph(system)
        chip_faults = [(f, resolve_node(graph, f.chip)) for f in self.faults if isinstance(f, CHIP_FAULTS)]
        for f, chip in chip_faults:
            if isinstance(f, ChipPause):
                self._pauses.setdefault(chip, []).append((f.start_s, f.start_s + f.duration_s))
            elif isinstance(f, ChipFail):
                self.failed[chip] = min(f.at_s, self.failed.get(chip, math.inf))
        for chip in system.chips:
            self._disturb_chip(chip, [f for f, c in chip_faults if c == chip.index and isinstance(f, ChipSlow)])
        net = system.network
        if net is not None:
            self._env_trace = (system.env, system.trace)
            net.make_channel = self._link_channel
            net.uniform = not (self._jittered("link") or self._pauses or self.failed
                               or any(isinstance(f, LINK_FAULTS) for f in self.faults)
                               or any(isinstance(f, ChipSlow) and "hbm" in f.units for f in self.faults))

    def _chip_graph(self, system: System) -> nx.DiGraph:
        """A graph of the system's unconnected chips, to resolve chip names against; link faults are refused."""
        links = [f for f in self.faults if isinstance(f, LINK_FAULTS)]
        if links:
            f = links[0]
            raise FaultError(f"link {f.src}->{f.dst}: this system has no links ({len(system.chips)} chip(s), no "
                             "topology); link faults need a topology such as torus:8")
        import networkx as nx

        graph = nx.DiGraph(spec=f"{len(system.chips)} unconnected chip(s)")
        graph.add_nodes_from((c.index, {"role": "chip"}) for c in system.chips)
        self.applied = [chip_record(f, resolve_node(graph, f.chip)) for f in self.faults if isinstance(f, CHIP_FAULTS)]
        return graph

    def _jittered(self, unit: str) -> bool:
        return self.jitter is not None and unit in self.jitter.units

    def _disturb_chip(self, chip: Any, slows: list[ChipSlow]) -> None:
        i = chip.index
        factor = {u: check_speed(math.prod(f.factor for f in slows if u in f.units), f"chip {i} {u}",
                                 "multiplying the --fault slow factors of one chip") for u in ("mxu", "vpu", "hbm")}
        pauses, fail_at = self._pauses.get(i, []), self.failed.get(i, math.inf)
        timed = bool(pauses) or fail_at < math.inf
        for unit in ("mxu", "vpu"):
            if factor[unit] != 1.0 or timed or self._jittered(unit):
                setattr(chip, unit, FaultUnit(chip.env, unit, chip=i, trace=chip.trace, speed=factor[unit],
                                              noise=self.noise if self._jittered(unit) else None, pauses=pauses,
                                              fail_at=fail_at, on_lost=self._on_lost))
        bandwidth = chip.dma.bandwidth_bytes_per_s * factor["hbm"]
        if timed or self._jittered("hbm"):
            chip.dma = FaultChannel(chip.env, "hbm", bandwidth, chip=i, trace=chip.trace,
                                    noise=self.noise if self._jittered("hbm") else None, pauses=pauses,
                                    fail_at=fail_at, on_lost=self._on_lost)
        else:
            chip.dma.bandwidth_bytes_per_s = bandwidth

    def _link_channel(self, u: Any, v: Any, data: dict[str, Any]) -> Channel:
        env, trace = self._env_trace
        pauses = self._pauses.get(u, []) + self._pauses.get(v, [])
        fail_at = min(self.failed.get(u, math.inf), self.failed.get(v, math.inf))
        args = (env, f"link {u}->{v}", data["bandwidth_bytes_per_s"], data["latency_s"])
        if not pauses and fail_at == math.inf and not self._jittered("link"):
            return Channel(*args, chip=u, trace=trace)
        return FaultChannel(*args, chip=u, trace=trace, noise=self.noise if self._jittered("link") else None,
                            pauses=pauses, fail_at=fail_at, on_lost=self._on_lost)

    # -- after the run -----------------------------------------------------------------------------------
    def _on_lost(self, where: str, label: str) -> None:
        self.lost[label] += 1

    def check_complete(self, now: float, stuck: list[str]) -> None:
        """Raise `IncompleteRunError` if a failed chip made any operation impossible."""
        if not self.lost:
            return
        chips = ", ".join(f"chip {c} at t={t:.6g} s" for c, t in sorted(self.failed.items(), key=str))
        what = "; ".join(f"{label} ({n} transfer(s) or op(s) lost)" for label, n in self.lost.most_common(6))
        more = f" and {len(self.lost) - 6} more" if len(self.lost) > 6 else ""
        blocked = f"; {len(stuck)} process(es) blocked: {'; '.join(stuck[:3])}" if stuck else ""
        raise IncompleteRunError(f"failed {chips}: these can no longer complete: {what}{more}; the run stopped at "
                                 f"t={now:.6g} s{blocked}", dict(self.lost), dict(self.failed), now)


def model_for(faults: Sequence[Fault] | None, jitter: Jitter | None, seed: Any) -> tuple[FaultModel | None,
                                                                                       FaultPlan | None]:
    """The fault model of a new `System` (None when there is nothing to apply) and the plan it came from
    (when faults, jitter and seed are all None, the plan applied now, `simulator.engine.faults.applying`)."""
    plan = None
    if faults is None and jitter is None and seed is None:
        plan = current_plan()
        if plan is None:
            return None, None
        faults, jitter, seed = plan.faults, plan.jitter, plan.next_seed()
    faults = check_faults(faults or [])
    if not faults and (jitter is None or (isinstance(jitter, Jitter) and not jitter.active)):
        return None, plan
    return FaultModel(faults, jitter, 0 if seed is None else seed), plan
