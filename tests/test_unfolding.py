"""A fast run's figures unfolded onto every chip before they leave for exports and pictures (`Trace.unfolded`).

A symmetric step runs one representative chip per stage (`simulator.acceleration.step_symmetry`); its trace names
the chips each representative stood for (`Trace.stood_for`). The oracle is the exact run (``fast=False``,
every chip simulated): per chip, the busy seconds of each chip unit, the FLOPs and the bytes moved by chip units
must equal the unfolded fast trace's, and every chip must have compute spans in the Perfetto export and the Gantt.
"""
from __future__ import annotations

import dataclasses
import math
from collections import defaultdict

import matplotlib
import pytest

from simulator.acceleration.unfolding import stand_ins
from simulator.engine.trace import PoolTimeline, Span, Trace, busy_by_chip
from simulator.hardware.specs import get_chip
from simulator.report import export, plots
from simulator.workloads.budget import Parallelism
from simulator.workloads.plans.layout import TrainOptions, parse_plan_mesh
from simulator.workloads.plans.step import simulate_step
from simulator.workloads.simulate import simulate_decode
from simulator.workloads.transformer import get_model

matplotlib.use("Agg")
CFG = dataclasses.replace(get_model("llama-2-7b"), n_layers=2)
SPEC = get_chip("tpu-v5p")


def _train(plan: str, topology: str | None):
    def run(fast: bool):
        sim, _ = simulate_step(CFG, SPEC, parse_plan_mesh(plan), TrainOptions(microbatches=2), 8, 128, topology,
                               fast=fast)
        return sim.system
    return run


def _decode(fast: bool):
    return simulate_decode(CFG, SPEC, 8, 512, Parallelism(4, 4), topology="torus:4x4", fast=fast).system


CASES = {"train-torus": _train("data=4,model=4", "torus:4x4"), "train-pipeline": _train("pipeline=2,data=2", None),
         "decode-torus": _decode}


def _per_chip(trace: Trace) -> dict:
    """Per chip: busy seconds of each chip unit (not links), FLOPs, bytes moved by chip units."""
    busy = busy_by_chip(s for s in trace.spans if not s.unit.startswith("link "))
    flops: dict = defaultdict(float)
    nbytes: dict = defaultdict(float)
    for s in trace.spans:
        if not s.unit.startswith("link "):
            flops[s.chip] += s.flops
            nbytes[s.chip] += s.nbytes
    return {"busy": busy, "flops": dict(flops), "bytes": dict(nbytes)}


@pytest.fixture(scope="module", params=sorted(CASES))
def runs(request):
    run = CASES[request.param]
    return request.param, run(True), run(False)


def test_the_fast_run_stood_for_chips_it_did_not_run(runs):
    _, fast, exact = runs
    ran = {s.chip for s in fast.trace.spans if s.kind == "compute"}
    chips = fast.trace.stood_for.chips
    assert chips and len(ran) < len(exact.chips)  # representatives only, before unfolding
    stood_for = {c for reps in chips.values() for c in reps} | set(chips)
    assert stood_for == {c.index for c in exact.chips}


def test_per_chip_totals_of_the_unfolded_fast_run_equal_the_exact_run(runs):
    _, fast, exact = runs
    got, want = _per_chip(fast.trace.whole()), _per_chip(exact.trace)
    assert set(got["busy"]) == set(want["busy"]) == {c.index for c in exact.chips}
    for chip, units in want["busy"].items():
        assert set(got["busy"][chip]) == set(units), chip
        for unit, seconds in units.items():
            assert math.isclose(got["busy"][chip][unit], seconds, rel_tol=1e-9, abs_tol=1e-15), (chip, unit)
        assert math.isclose(got["flops"][chip], want["flops"][chip], rel_tol=1e-9), chip
        assert math.isclose(got["bytes"][chip], want["bytes"][chip], rel_tol=1e-9), chip


def test_the_perfetto_export_of_a_fast_run_shows_every_chip_computing(runs):
    _, fast, exact = runs
    doc = export.chrome_trace(fast.trace)
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name"}
    computing = {names[e["pid"]] for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "compute"}
    assert computing == {f"chip {c.index}" for c in exact.chips}


def test_the_gantt_of_a_fast_run_draws_every_chip_computing(runs):
    _, fast, exact = runs
    ax = plots.gantt(fast.trace, collapse=True, memory=False)
    colour = matplotlib.colors.to_rgba(plots.KIND_COLORS["compute"])
    lanes = set()
    for collection in ax.collections:
        if len(collection.get_facecolor()) and tuple(collection.get_facecolor()[0]) == colour:
            lanes |= {round(p.get_extents().y0 + 0.4) for p in collection.get_paths()}
    assert len(lanes) == len(exact.chips)
    matplotlib.pyplot.close(ax.figure)


def test_unfolding_copies_chip_units_and_memory_but_not_links():
    trace = Trace()
    trace.add(Span(0, "mxu", "matmul", 0.0, 1.0, "compute", 0.0, 5.0))
    trace.add(Span(0, "link 0->1", "ring", 0.0, 2.0, "send", 8.0))
    trace.pools.append(PoolTimeline(0, "hbm", 1e9, [(0.0, 1.0)]))
    stand_ins(trace).chips[0] = [2, 3]
    whole = trace.whole()
    assert sorted((s.chip, s.unit) for s in whole.spans) == [(0, "link 0->1"), (0, "mxu"), (2, "mxu"), (3, "mxu")]
    assert [p.chip for p in whole.pools] == [0, 2, 3] and whole.stood_for is None
    assert trace.unfolded(limit=3) is None and trace.whole() is not trace
    assert Trace().whole().spans == []
