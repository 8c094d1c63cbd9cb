"""Engine overhead: a long double-buffered pipeline through podsim vs the leanest plain-SimPy model of it.

Both models run the same pipeline (``--blocks`` blocks, two buffers, load then compute) in the same
process. The lean baseline is what a SimPy user would write by hand: one ``Container`` of buffer slots,
one ``Store`` of ready blocks, and plain timeouts for the DMA and the MXU (each is used by one process
only, so it never queues and needs no ``Resource``); it records nothing. podsim runs the pipeline through
its System, Chip, MemoryPool and pipeline helper with tracing on. Prints both wall times (best of
``--repeat`` interleaved rounds), checks that both reach the closed-form end time, and ends with
``ratio: X`` where
X = podsim speed / lean speed = lean wall / podsim wall (1.0 would mean podsim costs nothing over the
lean model; 0.25 means it is four times slower). It also prints the SimPy events each model processes a block
(from one untimed run of each): each event is a heap push and pop and, mostly, a process resumed.

    python benchmarks/engine.py [--blocks 10000] [--repeat 5]
"""
from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import simpy

from simulator import analytic
from simulator.engine.system import System
from simulator.workloads.pipeline import run_steps, uniform_steps

LOAD_S, COMPUTE_S = 2e-6, 1e-6  # per block
BUFFERS = 2
TARGET = 0.8  #: issue 29's keep-target: lean wall / podsim wall


def lean(blocks: int, env: simpy.Environment | None = None) -> float:
    """The pipeline in plain SimPy: a slot container, a ready store, timeouts; returns the end time (s)."""
    env = env if env is not None else simpy.Environment()
    slots = simpy.Container(env, capacity=BUFFERS, init=BUFFERS)
    ready = simpy.Store(env)

    def loader():
        for i in range(blocks):
            yield slots.get(1)
            yield env.timeout(LOAD_S)
            yield ready.put(i)

    def computer():
        for _ in range(blocks):
            yield ready.get()
            yield env.timeout(COMPUTE_S)
            yield slots.put(1)

    env.process(loader())
    done = env.process(computer())
    env.run(done)
    return env.now


def podsim(blocks: int) -> float:
    """The same pipeline through podsim's System, Chip, MemoryPool and pipeline helper, tracing on."""
    system = System("tpu-v5e", trace=True)
    spec = system.spec
    steps = uniform_steps(blocks, LOAD_S * spec.hbm_bandwidth_bytes_per_s, COMPUTE_S * spec.peak_flops_per_s())
    run_steps(system, steps, buffers=BUFFERS)
    end = system.run()
    assert len(system.trace.spans) == 2 * blocks
    return end


class _Counting(simpy.Environment):
    """SimPy's environment, counting the events it processes (`events_per_block`; never timed)."""

    def __init__(self) -> None:
        super().__init__()
        self.processed = 0

    def step(self) -> None:
        super().step()
        self.processed += 1


def events_per_block(blocks: int) -> tuple[float, float]:
    """SimPy events processed a block by the lean model and by podsim, from one untimed run of each."""
    env = _Counting()
    lean(blocks, env)
    system = System("tpu-v5e", trace=True)
    spec = system.spec
    run_steps(system, uniform_steps(blocks, LOAD_S * spec.hbm_bandwidth_bytes_per_s,
                                    COMPUTE_S * spec.peak_flops_per_s()), buffers=BUFFERS)
    system.run()
    return env.processed / blocks, system.events_processed / blocks


CPU_S: dict[str, float] = {}  #: fastest CPU time (s) of each model's runs, by function name (see best_of)


def count_events() -> list[int]:
    """Make every `System.run` add its processed events to the returned one-item list (the whole-step
    benchmarks build several Systems per step); reset it with ``counter[0] = 0``."""
    counter = [0]
    run = System.run

    def counting(self: System, until: float | None = None) -> float:
        end = run(self, until)
        counter[0] += self.events_processed
        return end

    System.run = counting  # type: ignore[method-assign]
    return counter


def best_of(fns: list[Callable[[int], float]], blocks: int, repeat: int) -> list[tuple[float, float]]:
    """For each of ``fns``: the fastest wall time (s) of ``repeat`` runs and the simulated end time (s) of the
    last. The runs are interleaved (each round runs every model once), so load from other processes on the
    machine falls on all of them alike; the fastest CPU time of each goes to `CPU_S` (steadier than wall time
    on a shared machine)."""
    times: list[list[float]] = [[] for _ in fns]
    cpu: list[list[float]] = [[] for _ in fns]
    results = [0.0] * len(fns)
    for _ in range(repeat):
        for k, fn in enumerate(fns):
            start, start_cpu = time.perf_counter(), time.process_time()
            results[k] = fn(blocks)
            times[k].append(time.perf_counter() - start)
            cpu[k].append(time.process_time() - start_cpu)
    CPU_S.update({fn.__name__: min(c) for fn, c in zip(fns, cpu, strict=True)})
    return [(min(t), r) for t, r in zip(times, results, strict=True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    expected = analytic.pipeline_time(args.blocks, LOAD_S, COMPUTE_S, BUFFERS)
    (lean_s, lean_end), (pod_s, pod_end) = best_of([lean, podsim], args.blocks, args.repeat)
    for name, end in (("lean", lean_end), ("podsim", pod_end)):
        if abs(end - expected) > 1e-9 * expected:
            raise SystemExit(f"{name} simulated {end} s, closed form {expected} s: the models disagree")
    print(f"blocks: {args.blocks}  simulated end: {pod_end * 1e3:.6g} ms (closed form {expected * 1e3:.6g} ms)")
    print(f"lean simpy wall: {lean_s * 1e3:.1f} ms  ({args.blocks / lean_s:,.0f} blocks/s, nothing recorded)")
    print(f"podsim wall:     {pod_s * 1e3:.1f} ms  ({args.blocks / pod_s:,.0f} blocks/s, tracing on)")
    print(f"podsim costs {pod_s / lean_s:.1f}x the lean model")
    lean_events, pod_events = events_per_block(args.blocks)
    print(f"SimPy events a block: lean {lean_events:.2f}, podsim {pod_events:.2f} (untimed runs)")
    print(f"cpu time: lean {CPU_S['lean'] * 1e3:.1f} ms, podsim {CPU_S['podsim'] * 1e3:.1f} ms, "
          f"cpu ratio: {CPU_S['lean'] / CPU_S['podsim']:.2f}")
    print(f"ratio: {lean_s / pod_s:.2f} (target >= {TARGET:g})")


if __name__ == "__main__":
    main()
