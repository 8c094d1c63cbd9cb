"""Engine overhead: a long double-buffered pipeline through podsim vs a minimal bare-SimPy model.

Both models run the same pipeline (``--blocks`` blocks, two buffers, load then compute) in the same
process; podsim traces every span, the bare model records nothing. Prints both wall times, checks
that both reach the closed-form end time, and ends with ``ratio: X`` where X = bare / podsim
(target X >= 0.5: podsim costs at most twice a bare model). Best of ``--repeat`` runs each.

    python benchmarks/engine.py [--blocks 10000] [--repeat 3]
"""
from __future__ import annotations

import argparse
import time

import simpy

from simulator import analytic
from simulator.engine.system import System
from simulator.workloads.pipeline import run_steps, uniform_steps

LOAD_S, COMPUTE_S = 2e-6, 1e-6  # per block


def bare(blocks: int) -> float:
    """Two resources and a two-slot buffer store in plain SimPy, no tracing."""
    env = simpy.Environment()
    dma, mxu = simpy.Resource(env, 1), simpy.Resource(env, 1)
    slots = simpy.Container(env, capacity=2, init=2)
    ready = simpy.Store(env)

    def loader():
        for i in range(blocks):
            yield slots.get(1)
            with dma.request() as req:
                yield req
                yield env.timeout(LOAD_S)
            yield ready.put(i)

    def computer():
        for _ in range(blocks):
            yield ready.get()
            with mxu.request() as req:
                yield req
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
    run_steps(system, steps, buffers=2)
    end = system.run()
    assert len(system.trace.spans) == 2 * blocks
    return end


def best_of(fn, blocks: int, repeat: int) -> tuple[float, float]:
    times, result = [], 0.0
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn(blocks)
        times.append(time.perf_counter() - start)
    return min(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    expected = analytic.pipeline_time(args.blocks, LOAD_S, COMPUTE_S, 2)
    bare_s, bare_end = best_of(bare, args.blocks, args.repeat)
    pod_s, pod_end = best_of(podsim, args.blocks, args.repeat)
    for name, end in (("bare", bare_end), ("podsim", pod_end)):
        if abs(end - expected) > 1e-9 * expected:
            raise SystemExit(f"{name} simulated {end} s, closed form {expected} s: the models disagree")
    print(f"blocks: {args.blocks}  simulated end: {pod_end * 1e3:.6g} ms (closed form {expected * 1e3:.6g} ms)")
    print(f"bare simpy wall: {bare_s * 1e3:.1f} ms  ({args.blocks / bare_s:,.0f} blocks/s)")
    print(f"podsim wall:     {pod_s * 1e3:.1f} ms  ({args.blocks / pod_s:,.0f} blocks/s, tracing on)")
    print(f"ratio: {bare_s / pod_s:.2f}")


if __name__ == "__main__":
    main()
