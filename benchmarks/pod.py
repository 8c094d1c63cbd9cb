"""Pod scale: a llama-3-70b training step with FSDP and tensor parallelism on a whole tpu-v5p pod.

Issue 16's pod-scale target: the step on the full 8,960-chip v5p pod (slice 16x20x28: model=16 on the
16-chip axis, fsdp=560 over the 20x28 plane) in at most 40x the wall time of benchmarks/engine.py's lean
plain-SimPy pipeline of 10,000 blocks, and on 4,096 chips (slice 16x16x16: model=16, fsdp=256) in at most
20x, both measured in the same run (process start-up excluded; the step's wall time includes building the
system and the closed form). One sequence of 2,048 tokens per FSDP replica. The step runs by symmetry (one
chip, collectives over one ring per axis: `simulator.acceleration.step_symmetry`), each layer's collectives
replayed from the first lone run of the same group (`simulator.acceleration.replay`; a rerun when a guess
fails: the last layer's ReduceScatter has no AllGather beside it); the full simulation of every chip is out
of reach at this size. Prints each size's wall time, simulated step, events and ratio,
ending with ``ratio: X`` for the full pod.

    python benchmarks/pod.py [--repeat 1] [--only 4096|8960] [--no-trace]
"""
from __future__ import annotations

import argparse
import time

from engine import count_events, lean

from scenarios import transformer_step

PODS = {  # chips: (topology, mesh, batch, target ratio)
    4096: ("slice:16x16x16", "fsdp=256,model=16", 256, 20),
    8960: ("slice:16x20x28", "fsdp=560,model=16", 560, 40),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--only", type=int, choices=sorted(PODS), help="time one size only")
    parser.add_argument("--no-trace", action="store_true", help="run the steps with tracing off")
    args = parser.parse_args()
    events = count_events()  # events of every System the step builds
    sizes = [args.only] if args.only else sorted(PODS)
    lean_s = float("inf")
    best = {n: float("inf") for n in sizes}
    seen: dict[int, tuple[float, int]] = {}
    for _ in range(args.repeat):
        start = time.perf_counter()
        lean(10_000)
        lean_s = min(lean_s, time.perf_counter() - start)
        for n in sizes:
            topology, mesh, batch, _ = PODS[n]
            events[0] = 0
            start = time.perf_counter()
            result = transformer_step.run(model="llama-3-70b", mode="train", chip="tpu-v5p", mesh=mesh, batch=batch,
                                          seq=2048, topology=topology, require_fit=False, trace=not args.no_trace)
            best[n] = min(best[n], time.perf_counter() - start)
            seen[n] = (result.extra["step_time_s"], events[0])
    print(f"lean simpy pipeline (10,000 blocks) wall: {lean_s * 1e3:.1f} ms")
    for n in sizes:
        topology, mesh, batch, target = PODS[n]
        step, count = seen[n]
        print(f"{n:,} chips ({topology}, {mesh}, batch {batch}): simulated step {step!r} s  events: {count:,}  "
              f"wall: {best[n]:.2f} s  ratio: {best[n] / lean_s:.1f} (target <= {target})")
    print(f"ratio: {best[sizes[-1]] / lean_s:.1f}")


if __name__ == "__main__":
    main()
