"""Scale: AllReduce over every axis of a 16x16x16 torus (4096 chips) and a full 16x20x28 tpu-v5p pod; AllToAll
and Broadcast (full simulations: no representative ring) on 16x16 and 8x8x8 tori.

Prints wall time (building the system and running the collective, closed form and topology bound
included), simulated events and events per second, and the simulated time beside the closed form and the
topology's lower bound. Targets on one core here: 4096 chips <= 2 s,
8960 chips <= 5 s. The speed comes from the reduced simulation (one representative ring per axis on
wrapped tori, exact by translation symmetry); a mid-size case runs both modes to show they agree and
what the reduction saves.

    python benchmarks/collectives.py
"""
from __future__ import annotations

import time
from typing import Any

from simulator.collectives import run_collective
from simulator.engine.system import System

CASES = [("torus:16x16x16", "tpu-v5p", "auto"), ("slice:16x20x28", "tpu-v5p", "auto")]
CHECK = ("torus:8x8x8", "tpu-v5p")
FULL = [(kind, algorithm, topology, "tpu-v5p") for kind, algorithm in (("all_to_all", "dimension_order"),
                                                                       ("broadcast", "spanning_trees"))
        for topology in ("torus:16x16", "torus:8x8x8")]
NBYTES = 1e9


def count_events(system: System) -> list[int]:
    """Wrap the environment's scheduler so every scheduled event is counted."""
    counter = [0]
    schedule = system.env.schedule

    def counting(*args: Any, **kwargs: Any) -> None:
        counter[0] += 1
        schedule(*args, **kwargs)

    system.env.schedule = counting  # type: ignore[method-assign]
    return counter


def measure(topology: str, chip: str, mode: str, kind: str = "all_reduce", algorithm: str = "auto") -> dict[str, Any]:
    start = time.perf_counter()
    system = System(chip, topology=topology, trace=False)
    built = time.perf_counter()
    events = count_events(system)
    r = run_collective(kind, system, NBYTES, mode=mode, algorithm=algorithm)
    done = time.perf_counter()
    return {"topology": topology, "chips": len(system.chips), "mode": f"{kind} {r.algorithm} {r.mode}",
            "build_s": built - start,
            "run_s": done - built, "wall_s": done - start, "events": events[0], "time_s": r.time_s,
            "analytic_s": r.analytic_s, "bound_s": r.topology_bound_s}


def show(m: dict[str, Any]) -> None:
    print(f"{m['topology']:>16} {m['chips']:>5} chips  {m['mode']:>7}  wall {m['wall_s']:.2f} s "
          f"(build {m['build_s']:.2f} s, run {m['run_s']:.2f} s)  {m['events']:>8} events  "
          f"{m['events'] / m['run_s']:>9,.0f} events/s  simulated {m['time_s'] * 1e3:.4f} ms "
          f"(closed form {m['analytic_s'] * 1e3:.4f} ms, topology bound {m['bound_s'] * 1e3:.4f} ms: "
          f"{m['time_s'] / m['bound_s']:.3f}x)")


def main() -> None:
    print(f"AllReduce of {NBYTES / 1e9:g} GB over every axis")
    for topology, chip, mode in CASES:
        show(measure(topology, chip, mode))
    full, reduced = measure(*CHECK, "full"), measure(*CHECK, "reduced")
    show(full)
    show(reduced)
    print(f"reduced / full simulated time: {reduced['time_s'] / full['time_s']:.12f}; "
          f"speed-up {full['wall_s'] / reduced['wall_s']:.1f}x")
    print(f"AllToAll and Broadcast of {NBYTES / 1e9:g} GB over every axis")
    for kind, algorithm, topology, chip in FULL:
        show(measure(topology, chip, "auto", kind, algorithm))


if __name__ == "__main__":
    main()
