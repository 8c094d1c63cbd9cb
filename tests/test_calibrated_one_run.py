"""--calibrated runs one simulation: the ideal figures beside the forecast are closed forms.

Oracles: the ideal simulation itself (the closed form must not exceed it, and must equal it where the simulation
is exactly the closed form's recurrence: one chip, no stores; collectives on TPU rings and tori), and a count of
the simulations the CLI starts.
"""
from __future__ import annotations

import json

import pytest

from simulator.collectives import run_collective
from simulator.collectives.api import ideal_closed_form
from simulator.engine.faults import LinkDown
from simulator.engine.system import System, resolve_chip
from simulator.frontend import cli
from simulator.workloads import simulate
from simulator.workloads.budget import Parallelism
from simulator.workloads.simulate import LayerOp, StepSimulation, simulate_decode
from simulator.workloads.transformer import PRESETS

CFG = PRESETS["llama-3-8b"]


@pytest.mark.parametrize("chip,par,context,new", [
    ("tpu-v5e", Parallelism(1, 1), 512, 1), ("tpu-v5e", Parallelism(2, 4), 512, 1),
    ("tpu-v5e", Parallelism(2, 4), 0, 128), ("h100", Parallelism(1, 8), 256, 1), ("h100", Parallelism(2, 8), 0, 64)])
def test_step_bound_at_most_the_ideal_simulation(chip: str, par: Parallelism, context: int, new: int) -> None:
    sim = simulate_decode(CFG, resolve_chip(chip), 8, context, par, new_tokens=new, trace=False)
    bound = sim.ideal_bound()
    assert 0 < bound <= sim.env.now * (1 + 1e-9)
    assert bound > 0.5 * sim.env.now  # a bound worth printing, not a trivial one


def test_step_bound_equals_one_chip_simulation_without_stores() -> None:
    spec = resolve_chip("tpu-v5e")
    ops = [LayerOp("a", 3e8, 0.0, 4e12, 1e9), LayerOp("b", 1e7, 0.0, 9e12, 0.0), LayerOp("c", 5e8, 0.0, 1e10, 2e8)]
    sim = StepSimulation(CFG, spec, Parallelism(1, 1), trace=False)
    sim.run([ops], [0, 0, 1])
    assert sim.ideal_bound() == pytest.approx(sim.env.now, rel=1e-9)
    # independent oracle: numpy-free max-plus of equal blocks, analytic.pipeline_time for op "a" alone
    from simulator import analytic

    one = StepSimulation(CFG, spec, Parallelism(1, 1), trace=False)
    one.run([ops[:1]], [0])
    n = simulate._block_count(ops[0], spec.vmem_capacity_bytes)
    load = ops[0].weight_bytes / n / spec.hbm_bandwidth_bytes_per_s
    compute = ops[0].flops / n / spec.peak_flops_per_s("bf16") + ops[0].vector_flops / n / spec.vpu_flops_per_s
    assert one.ideal_bound() == pytest.approx(analytic.pipeline_time(n, load, compute, 2), rel=1e-9)


@pytest.mark.parametrize("chip,topology", [("tpu-v5e", "ring:8"), ("tpu-v5e", "torus:4x4"), ("h100", "nodes:2:8"),
                                           ("h100", "switch:8")])
@pytest.mark.parametrize("kind", ["all_reduce", "all_gather", "reduce_scatter", "all_to_all"])
def test_collective_closed_form_beside_the_simulation(chip: str, topology: str, kind: str) -> None:
    sim = run_collective(kind, System(chip, topology=topology), 2e8)
    closed = ideal_closed_form(kind, System(chip, topology=topology), 2e8)
    assert closed["algorithm"] == sim.algorithm  # the same tuner, on the same ideal links
    assert closed["topology_bound_s"] <= sim.time_s * (1 + 1e-9)  # a true bound
    if chip.startswith("tpu"):  # rings and tori: the simulation is exact to the closed form
        assert closed["time_s"] == pytest.approx(sim.time_s, rel=1e-9)


def _count(monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> list[int]:
    calls: list[int] = []
    real = getattr(module, name)

    def counted(*a: object, **k: object) -> object:
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_model_calibrated_runs_one_simulation(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    calls = _count(monkeypatch, simulate, "simulate_decode")
    cli.main(["model", "llama-3-8b", "--chip", "tpu-v5e", "--mesh", "data=2,model=4", "--batch", "8",
              "--context", "256", "--calibrated", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert len(calls) == 1
    assert out["ideal_from"] == "closed form" and out["simulated_run"] == "calibrated"
    assert out["step_time_s"] < out["calibrated_step_time_s"]  # the bound below the forecast
    ideal = simulate_decode(CFG, resolve_chip("tpu-v5e"), 8, 256, Parallelism(2, 4), trace=False)
    assert out["step_time_s"] <= ideal.env.now * (1 + 1e-9)


def test_collective_calibrated_runs_one_simulation(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    import simulator.collectives as collectives

    calls = _count(monkeypatch, collectives, "run_collective")
    cli.main(["collective", "all_reduce", "--chip", "tpu-v5e", "--topology", "torus:4x4", "--bytes", "1e8",
              "--calibrated", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert len(calls) == 1
    assert out["ideal_from"] == "closed form" and out["simulated_run"] == "calibrated"
    ideal = run_collective("all_reduce", System("tpu-v5e", topology="torus:4x4"), 1e8)
    assert out["time_s"] == pytest.approx(ideal.time_s, rel=1e-9)
    assert out["calibrated_time_s"] > out["time_s"]


#: tpu-v5e ICI, one link one way (REFERENCE.md: 4 links of 45 GB/s each way per chip)
V5E_LINK = 4.5e10


@pytest.mark.parametrize("kind,phases", [("all_gather", 1), ("reduce_scatter", 1), ("all_reduce", 2)])
def test_collective_closed_form_round_a_dead_cable(kind: str, phases: int) -> None:
    """tpu-v5e torus:4x4 ``--axes 1`` (groups of 4), 1 GB, cable (0,0)-(0,1) dead. On the network as faulted the
    best ring is a line: each of its (n - 1) V / n bytes a phase crosses the middle links one way, (n - 1) V / (n W)
    = 16.67 ms a phase. Healthy, the bidirectional ring takes half that. A detour over axis 0 is worth about
    1.14x healthy (issue 31), and `run_collective` takes it; the ideal closed form beside a calibrated forecast
    must weigh the same ways (it priced only the line before: 16.67 ms beside an 11.52 ms forecast)."""
    faults = [LinkDown((0, 0), (0, 1))]
    closed = ideal_closed_form(kind, System("tpu-v5e", topology="torus:4x4", faults=faults), 1e9, axes=[1])
    line = phases * 3 / 4 * 1e9 / V5E_LINK
    healthy = line / 2
    assert closed["route"] != ""  # a way round the fault, not the network as faulted
    assert closed["topology_bound_s"] * (1 - 1e-9) <= closed["time_s"] <= 1.25 * healthy
    run = run_collective(kind, System("tpu-v5e", topology="torus:4x4", faults=faults), 1e9, axes=[1])
    assert closed["algorithm"] == run.algorithm
    assert closed["time_s"] == pytest.approx(run.analytic_s, rel=1e-9)  # the pick's closed form, no trial run


def test_calibrated_cli_ideal_line_round_a_dead_cable(capsys: pytest.CaptureFixture[str]) -> None:
    """The ideal figure beside the forecast is a bound on ideal peak links: never above the calibrated forecast."""
    cli.main(["collective", "all_gather", "--chip", "tpu-v5e", "--topology", "torus:4x4", "--axes", "1",
              "--bytes", "1e9", "--calibrated", "--fault", "link:0,0->0,1=down", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert out["ideal_route"] != ""
    assert out["time_s"] < out["calibrated_time_s"]
    assert out["time_s"] < 0.75 * 1e9 / V5E_LINK  # below the line's 16.67 ms
