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

import bisect
import math
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import networkx as nx
import numpy as np
import simpy

from simulator.engine.channel import Channel, ListChannel, SerialUnit, _Flow, _remaining
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
    chip_record,
    current_plan,
    resolve_node,
)
from simulator.engine.trace import Span, Trace
from simulator.errors import FaultError, IncompleteRunError

Window = tuple[float, float]
OnLost = Callable[[str, str], None]


class Noise:
    """Jitter factors of mean 1 and coefficient of variation ``cv`` from ``rng``, drawn in blocks.

    lognormal: ``exp(N(mu, s))`` with ``s**2 = ln(1 + cv**2)``, ``mu = -s**2 / 2``; gamma: shape ``1 / cv**2``,
    scale ``cv**2``; uniform: ``1 +- sqrt(3) cv``.
    """

    BLOCK = 4096

    def __init__(self, rng: np.random.Generator, distribution: str, cv: float) -> None:
        self.rng, self.distribution, self.cv = rng, distribution, cv
        self._buffer: list[float] = []
        self._next = 0

    def draw(self, n: int) -> np.ndarray:
        """``n`` factors."""
        cv = self.cv
        if self.distribution == "lognormal":
            s = math.sqrt(math.log1p(cv * cv))
            return self.rng.lognormal(-s * s / 2, s, n)
        if self.distribution == "gamma":
            return self.rng.gamma(1 / (cv * cv), cv * cv, n)
        half = math.sqrt(3) * cv
        return self.rng.uniform(1 - half, 1 + half, n)

    def __call__(self) -> float:
        if self._next == len(self._buffer):
            self._buffer, self._next = self.draw(self.BLOCK).tolist(), 0
        self._next += 1
        return self._buffer[self._next - 1]


class Lost(simpy.Event):
    """An event that never fires: the operation it stands for died with a failed chip."""

    def __init__(self, env: simpy.Environment, what: str) -> None:
        super().__init__(env)
        self.what = what

    @property
    def podsim_waits_for(self) -> str:
        return self.what


def _windows(pauses: Sequence[Window]) -> list[Window]:
    """Pause windows sorted and merged where they overlap."""
    out: list[Window] = []
    for a, b in sorted(pauses):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        elif b > a:
            out.append((a, b))
    return out


class FaultChannel(ListChannel):
    """A `Channel` that may be jittered (``noise``), paused in ``pauses`` windows and failed at ``fail_at``.

    Its rate is the bandwidth, or zero inside a pause and from the failure on; a timer is set at each rate
    change while transfers are in flight, so between events the rate is constant and the fluid model holds.
    """

    def __init__(self, env: simpy.Environment, name: str, bandwidth_bytes_per_s: float, latency_s: float = 0.0, *,
                 chip: int | str = 0, trace: Trace | None = None, noise: Noise | None = None,
                 pauses: Sequence[Window] = (), fail_at: float = math.inf, on_lost: OnLost | None = None) -> None:
        super().__init__(env, name, bandwidth_bytes_per_s, latency_s, chip=chip, trace=trace)
        self.noise, self.fail_at, self.on_lost = noise, fail_at, on_lost
        self.pauses = _windows(pauses)
        self._breaks = sorted({t for w in self.pauses for t in w} | ({fail_at} if fail_at < math.inf else set()))

    def transfer(self, nbytes: float, label: str = "", kind: str = "transfer") -> simpy.Event:
        if nbytes <= 0:
            return self.env.event().succeed(self.env.now)
        flow = _Flow(nbytes, Lost(self.env, f"{self.name} ({label or kind})"), label, kind)
        if self.noise is not None:
            flow.remaining = nbytes * self.noise()
        if self.latency_s > 0:
            self.env.timeout(self.latency_s).callbacks.append(lambda _e: self._admit(flow))
        else:
            self._admit(flow)
        return flow.event

    def _admit(self, flow: _Flow) -> None:
        if self.env.now >= self.fail_at:
            self._lose(flow)
            return
        super()._admit(flow)

    def rate(self, t: float) -> float:
        """Bytes per second the channel moves from time ``t`` on (until the next rate change)."""
        if t >= self.fail_at:
            return 0.0
        i = bisect.bisect_right(self.pauses, (t, math.inf)) - 1
        return 0.0 if i >= 0 and self.pauses[i][0] <= t < self.pauses[i][1] else self.bandwidth_bytes_per_s

    def _advance(self) -> None:
        now = self.env.now
        if self._flows and now > self._last_update:
            moved = (now - self._last_update) * self.rate(self._last_update) / len(self._flows)
            for flow in self._flows:
                flow.remaining -= moved
        self._last_update = now

    def _schedule(self) -> None:
        self._generation += 1
        if not self._flows:
            return
        now, generation = self.env.now, self._generation
        if now >= self.fail_at:
            flows, self._flows = self._flows, []
            for flow in flows:
                self._lose(flow)
            return
        rate = self.rate(now)
        i = bisect.bisect_right(self._breaks, now)
        change = self._breaks[i] if i < len(self._breaks) else math.inf
        if rate > 0:
            first = min(self._flows, key=_remaining)
            delay = max(0.0, first.remaining) * len(self._flows) / rate
            if now + delay <= change:
                self.env.timeout(delay).callbacks.append(lambda _e: self._on_timer(generation, first))
                return
        self.env.timeout(change - now).callbacks.append(lambda _e: self._on_change(generation))

    def _on_change(self, generation: int) -> None:
        if generation == self._generation:
            self._advance()
            self._schedule()

    def _lose(self, flow: _Flow) -> None:
        if self.on_lost is not None:
            self.on_lost(self.name, flow.label or flow.kind)


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

    def attach(self, system: Any) -> None:
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
                               or any(isinstance(f, LINK_FAULTS) for f in self.faults))

    def _chip_graph(self, system: Any) -> nx.DiGraph:
        """A graph of the system's unconnected chips, to resolve chip names against; link faults are refused."""
        links = [f for f in self.faults if isinstance(f, LINK_FAULTS)]
        if links:
            f = links[0]
            raise FaultError(f"link {f.src}->{f.dst}: this system has no links ({len(system.chips)} chip(s), no "
                             "topology); link faults need a topology such as torus:8")
        graph = nx.DiGraph(spec=f"{len(system.chips)} unconnected chip(s)")
        graph.add_nodes_from((c.index, {"role": "chip"}) for c in system.chips)
        self.applied = [chip_record(f, resolve_node(graph, f.chip)) for f in self.faults]
        return graph

    def _jittered(self, unit: str) -> bool:
        return self.jitter is not None and unit in self.jitter.units

    def _disturb_chip(self, chip: Any, slows: list[ChipSlow]) -> None:
        i = chip.index
        factor = {u: math.prod(f.factor for f in slows if u in f.units) for u in ("mxu", "vpu", "hbm")}
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
