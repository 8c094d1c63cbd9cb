"""`System`: the SimPy environment, its chips, and the trace of one run.

Phases as in desmod: build (chips from a spec, later links from a topology graph) -> start processes
-> `run` -> collect `metrics`. A run that ends with started processes still waiting is a deadlock and
raises `DeadlockError` naming each stuck process, what it waits for, and the time it stopped at.
"""
from __future__ import annotations

import time
from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from simulator.engine.chip import Chip
from simulator.engine.disturb import model_for
from simulator.engine.environment import Environment, api_misuse
from simulator.engine.faults import Fault, Jitter
from simulator.engine.gcpause import gc_paused
from simulator.engine.simpy_door import run_until_empty
from simulator.engine.trace import Trace, compute_metrics
from simulator.engine.watch import TICK, RunWatch, current_watch
from simulator.engine.what_if import topology_notes
from simulator.errors import DeadlockError, PodsimError, RunawayError, SimulationInterrupted
from simulator.hardware.specs import ChipSpec, get_chip
from simulator.units import positive, positive_int

if TYPE_CHECKING:  # annotations only (host imports system; NetworkX and the network load with a topology)
    import networkx as nx

    from simulator.engine.host import HostMemory
    from simulator.engine.network import Network


def resolve_chip(chip: str | ChipSpec) -> ChipSpec:
    """A `ChipSpec` from a preset name or a spec."""
    return chip if isinstance(chip, ChipSpec) else get_chip(chip)


def resolve_topology(topology: str | nx.DiGraph, chip: ChipSpec) -> nx.DiGraph:
    """A topology graph from a spec string (links take ``chip``'s bandwidth and latency) or a graph."""
    import networkx as nx

    import topologies

    if isinstance(topology, nx.DiGraph):
        return topology
    if not isinstance(topology, str):
        raise PodsimError(f"topology={topology!r} must be a spec string such as 'torus:4x4' or a networkx DiGraph")
    return topologies.parse_spec(topology, chip)


class System:
    """Chips of one spec in one SimPy environment, sharing one `Trace`.

    Either ``n_chips`` unconnected chips, or the chips of ``topology`` (a spec string such as
    ``"torus:4x4"`` or a graph from `topologies`) joined by its links (`simulator.engine.network`).
    ``calibrated`` applies the preset's fitted efficiency models (`simulator.hardware.calibration`) instead of
    ideal peaks. ``faults`` (`simulator.engine.faults`: LinkDown, LinkDegraded, LinkLatency, ChipSlow,
    ChipPause, ChipFail), ``jitter`` (a `Jitter`) and ``seed`` disturb the run; left all None, they come
    from the plan applied now (`simulator.engine.faults.applying`), if any.
    """

    def __init__(self, chip: str | ChipSpec = "tpu-v5e", n_chips: int = 1, *, topology: str | nx.DiGraph | None = None,
                 trace: bool = True, switching: str = "cut_through", max_events: int = 50_000_000,
                 wall_clock_limit_s: float = 600.0, calibrated: bool = False, faults: Sequence[Fault] | None = None,
                 jitter: Jitter | None = None, seed: int | np.random.SeedSequence | None = None) -> None:
        positive_int(n_chips, name="n_chips")
        self.max_events = positive_int(max_events, name="max_events")
        self.wall_clock_limit_s = positive(wall_clock_limit_s, name="wall_clock_limit_s")
        self.events_processed = 0
        self.spec = resolve_chip(chip)
        self.calibration = _calibration(self.spec) if calibrated else None
        self.env = Environment()  # SimPy's, with a podsim error for env.process(chip.matmul(...))
        self.env.podsim_pulse = self.pulse  # work done inside few events reports here (`pulse`)
        self._run_started: float | None = None  # perf_counter at the start of the current `run`
        self.trace = Trace(enabled=trace)
        self.network: Network | None = None
        self.graph: nx.DiGraph | None = None
        self.faults, plan = model_for(faults, jitter, seed)  #: None: nothing disturbs this run
        if topology is not None:
            self.graph = resolve_topology(topology, self.spec)
            if self.faults is not None:
                self.graph = self.faults.prepare_graph(self.graph)
            from simulator.engine.network import Network

            self.network = Network(self.env, self.graph, self.trace, switching)
            self.network.chip = self.spec
            ids: list[int] = self.network.chips
        else:
            ids = list(range(n_chips))
        self.notes = topology_notes(self.spec, self.graph)  #: a topology that is not the chip's own, in words
        self.chips = [Chip(self.env, self.spec, i, self.trace, self.calibration) for i in ids]
        if self.faults is not None:
            self.faults.attach(self)
        if plan is not None:
            plan.systems.append(self)
        self._processes: list[tuple[str, simpy.Process]] = []
        self._host_memory: HostMemory | None = None
        #: a finished training step's `metrics` where `train_step(simulate=True)` ran on this system, else None
        self.step_metrics: dict[str, Any] | None = None

    @property
    def chip(self) -> Chip:
        """The first chip (the only one in single-chip systems)."""
        return self.chips[0]

    def process(self, generator: Generator[Any, Any, Any], name: str) -> simpy.Process:
        """Start ``generator`` as a named process; `run` checks that it finished."""
        proc = self.env.process(generator)
        self._processes.append((name, proc))
        return proc

    def run(self, until: float | None = None) -> float:
        """Run to completion (or ``until`` seconds); returns the simulated end time in seconds.

        Guards against runaway runs: more than ``max_events`` events, or more than
        ``wall_clock_limit_s`` seconds of real time, raise `RunawayError` naming the limit.
        """
        if until is not None:
            self.env.run(until=until)
            return self.env.now
        self._guarded_run()
        if self.faults is not None:  # a failed chip: say what it made impossible
            self.faults.check_complete(self.env.now, self._stuck())
        self._check_finished()
        return self.env.now

    def _guarded_run(self) -> None:
        watch = current_watch()
        try:
            with gc_paused():
                self._run_loop(watch)
        except RuntimeError as err:  # SimPy's "invalid yield value": say what a process must yield
            misuse = api_misuse(err)
            if misuse is None:
                raise
            raise misuse from None
        except KeyboardInterrupt:  # Ctrl-C: say how far the simulation got
            if watch is not None:
                watch.clock(self.env.now, id(self))
            metrics = compute_metrics(self.trace, self.env.now) if self.trace.enabled else None
            progress = watch.so_far(metrics) if watch is not None else f"t={self.env.now:.6g} s of simulated time"
            raise SimulationInterrupted(f"interrupted; simulated so far: {progress}") from None
        finally:
            self._run_started = None  # `pulse` outside a guarded run checks no wall clock

    def _run_loop(self, watch: RunWatch | None) -> None:
        """Run the events (`simpy_door.run_until_empty`: SimPy's step, inlined), reporting every `TICK`."""
        limit, wall = self.max_events, self.wall_clock_limit_s
        start = self._run_started = time.perf_counter()

        def tick() -> None:
            self._tick(watch, limit, wall, start)

        def interrupted(events: int) -> None:
            if watch is not None:  # count the events since the last report
                watch.events += events

        left = run_until_empty(self.env, TICK, tick, interrupted)
        self.events_processed += left
        if watch is not None:
            watch.tick(self.env.now, left, id(self))

    def _tick(self, watch: RunWatch | None, limit: int, wall: float, start: float) -> None:
        """Every `TICK` events: count them, report to the watch, enforce the event and wall-clock limits."""
        self.events_processed += TICK
        if watch is not None:  # the command's budget, progress bar and estimate
            watch.tick(self.env.now, TICK, id(self))
        if self.events_processed > limit:
            raise RunawayError(f"simulation passed max_events={limit:,} events at t={self.env.now:.6g} s; "
                               "use fewer, larger blocks or raise System(max_events=...)")
        if time.perf_counter() - start > wall:
            raise RunawayError(f"simulation ran past wall_clock_limit_s={wall:g} s of real time at "
                               f"t={self.env.now:.6g} s; use a smaller problem or raise the limit")

    def pulse(self, units: int) -> None:
        """Work done inside events rather than as events (an aggregated collective runs thousands of transfers
        in one timer event: `simulator.collectives.schedule.execute`) reports ``units`` of it here every so
        often: counted by the command's watch (progress bar, estimate, budget), and the wall-clock limit
        enforced, which `_tick` checks only every `TICK` events."""
        watch = current_watch()
        if watch is not None:
            watch.tick(self.env.now, units, id(self))
        started = self._run_started
        if started is not None and time.perf_counter() - started > self.wall_clock_limit_s:
            raise RunawayError(f"simulation ran past wall_clock_limit_s={self.wall_clock_limit_s:g} s of real time "
                               f"at t={self.env.now:.6g} s; use a smaller problem or raise the limit")

    def _stuck(self) -> list[str]:
        return [f"{name} waits for {_describe(proc.target)}" for name, proc in self._processes if proc.is_alive]

    def _check_finished(self) -> None:
        parts = self._stuck()
        if not parts:
            return
        raise DeadlockError(f"simulation stopped at t={self.env.now:.6g} s with {len(parts)} process(es) "
                            f"blocked: {'; '.join(parts)}")

    def offload(self, chip: Any, nbytes: float, label: str = "offload") -> simpy.Event:
        """Copy ``nbytes`` from ``chip``'s HBM to its host's memory over PCIe; the event fires (value: the time)
        when they have landed (`simulator.engine.host`; the topology needs hosts, e.g. ``torus:4x4+hosts:4``)."""
        return self.host_memory.offload(chip, nbytes, label)

    def reload(self, chip: Any, nbytes: float, label: str = "reload") -> simpy.Event:
        """Copy ``nbytes`` that ``chip`` offloaded back from its host over PCIe; the event fires on arrival."""
        return self.host_memory.reload(chip, nbytes, label)

    @property
    def host_memory(self) -> HostMemory:
        """The hosts' memory (`simulator.engine.host.HostMemory`), built on first use."""
        if self._host_memory is None:
            from simulator.engine.host import HostMemory

            self._host_memory = HostMemory(self)
        return self._host_memory

    def metrics(self, upper_bound: Any = None) -> dict[str, Any]:
        """Standard metrics of the finished run (see `simulator.engine.trace.compute_metrics`, which takes
        ``upper_bound``), and ``notes`` when the topology is not the chip's own (`simulator.engine.what_if`)."""
        metrics = compute_metrics(self.trace, self.env.now, upper_bound)
        return {**metrics, "notes": list(self.notes)} if self.notes else metrics


def _calibration(spec: ChipSpec) -> Any:
    from simulator.hardware.calibration import get_calibration

    return get_calibration(spec.name)


def _describe(event: simpy.Event | None) -> str:
    if event is None:
        return "nothing (not started)"
    what = getattr(event, "podsim_waits_for", None)
    return str(what) if what is not None else type(event).__name__
