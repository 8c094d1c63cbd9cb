"""auto round a dead cable: the trial's schedule is the run's (no second build), and the pick is the fastest trial."""
from __future__ import annotations

from simulator import System
from simulator.collectives import multi_detour
from simulator.collectives.api import run_collective
from simulator.engine.faults import LinkDown


def test_auto_runs_fastest_trial_built_once(monkeypatch) -> None:
    """tpu-v5e torus:4x4 ``--axes 1``, 1 GB AllGather, cable 0,0-0,1 dead: multi_detour is built once (its trial),
    the run takes exactly the trial's simulated time, and no simulated alternative is faster."""
    builds: list[int] = []
    original = multi_detour.MultiDetour.build

    def counting(self, job, s) -> None:  # type: ignore[no-untyped-def]
        builds.append(1)
        original(self, job, s)

    monkeypatch.setattr(multi_detour.MultiDetour, "build", counting)
    system = System("tpu-v5e", topology="torus:4x4", faults=[LinkDown((0, 0), (0, 1))])
    r = run_collective("all_gather", system, 1e9, axes=[1])
    simulated = [a["simulated_s"] for a in r.alternatives if "simulated_s" in a]
    assert len(simulated) >= 2
    assert r.time_s == min(simulated)
    assert r.algorithm == "multi_detour" and len(builds) == 1
