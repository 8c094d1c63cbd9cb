"""A fast run's figures unfolded onto every chip and link before they leave for exports and pictures
(`Trace.unfolded`, `simulator.acceleration.unfolding`).

A symmetric step runs one representative chip per stage (`simulator.acceleration.step_symmetry`) and, on a grid,
only the representative's groups of each collective (one ring per axis where they wrap, or the quotient by
translations); a fast collective runs one ring per axis (reduced) or one transfer per orbit (a quotient, where a
link its group maps onto itself carries m flows as one). Its trace names the chips and links each representative
stood for (`Trace.stood_for`). The oracle is the exact run (``fast=False`` / ``mode="full"``, every chip, group
and transfer simulated):

- per chip, the busy seconds of each chip unit, the FLOPs and the bytes moved by chip units must equal the
  unfolded fast trace's, and every chip must have compute spans in the Perfetto export and the Gantt;
- per link, the busy seconds (from the unfolded spans, and the run's own ``busy_s``) and the spans themselves
  (label, start, end, bytes; a multiset) must equal the exact run's, and every link the exact run used must
  have spans in the Perfetto export.
"""
from __future__ import annotations

import dataclasses
import math
from collections import defaultdict

import matplotlib
import pytest

from simulator.acceleration.unfolding import Unfolding, stand_ins
from simulator.collectives import run_collective
from simulator.engine.system import System
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


# -- links: every link's spans ------------------------------------------------------------------------------------
def _step(plan: str, topology: str | None, chip: str = "tpu-v5p", calibrated: bool = False):
    def run(fast: bool):
        sim, _ = simulate_step(CFG, get_chip(chip), parse_plan_mesh(plan), TrainOptions(microbatches=2), 8, 128,
                               topology, calibrated=calibrated, fast=fast)
        return sim.system, sim.metrics
    return run


def _collective(kind: str, chip: str, topology: str, nbytes: float):
    def run(fast: bool):
        system = System(chip, topology=topology)
        result = run_collective(kind, system, nbytes, mode="auto" if fast else "full")
        assert (result.mode != "full") == fast  # the fast run took a fast path (reduced, quotient)
        return system, system.metrics()
    return run


def _decode_links(fast: bool):
    sim = simulate_decode(CFG, SPEC, 8, 512, Parallelism(4, 4), topology="torus:4x4", fast=fast)
    metrics = sim.sym.replays.metrics(sim.sym.upper_bound) if sim.sym is not None else sim.system.metrics()
    return sim.system, metrics  # (a replay's spans join the trace with the metrics, as `summary` takes them)


LINK_CASES = {  # what stood for what in the fast run
    "step-ring": _step("data=2,model=4", "ring:8", "tpu-v5e"),  # the model groups' quotient, the data rings' translates
    "step-torus": _step("data=4,model=4", "torus:4x4"),  # one ring per axis, replayed layers
    "step-split": _step("data=2,model=8", None),  # 4x2x2: model a factor of an axis; quotients by translations
    "step-pipeline": _step("pipeline=2,data=2", None),  # one representative per stage, each stage's translates
    "step-multislice": _step("data=2,model=4", "multislice:2:2x2", "tpu-v5e"),  # one chip on slice rotations
    "step-calibrated": _step("data=4,model=4", "torus:4x4", calibrated=True),  # forecast rates, no replay
    "step-nodes": _step("data=2,model=8", "nodes:2:8", "h100"),  # node quotient; replays of concurrent transfers
    "decode-torus": _decode_links,
    "collective-reduced": _collective("all_reduce", "tpu-v5p", "torus:4x4x2", 16e6),  # one ring per axis
    "collective-quotient": _collective("all_gather", "h100", "nodes:2:8", 16e6),  # node and rail rotations
}


def _link_spans(trace: Trace) -> dict:
    """Per link (chip, unit): its spans as (label, start, end, bytes), sorted."""
    out: dict = defaultdict(list)
    for s in trace.spans:
        if s.unit.startswith("link "):
            out[(s.chip, s.unit)].append((s.label, s.start, s.end, s.nbytes))
    return {k: sorted(v, key=lambda r: (round(r[1], 9), round(r[2], 9), r[3], r[0])) for k, v in out.items()}


@pytest.fixture(scope="module", params=sorted(LINK_CASES))
def link_runs(request):
    run = LINK_CASES[request.param]
    return request.param, run(True), run(False)


def test_the_fast_run_ran_fewer_links_than_it_stands_for(link_runs):
    """(Else the cases test nothing.) Before unfolding, the fast trace lacks links the exact run used."""
    _, ((fast, _), (exact, _)) = link_runs[0], link_runs[1:]
    assert fast.trace.stood_for and set(_link_spans(exact.trace)) - set(_link_spans(fast.trace))


def test_every_link_s_spans_and_busy_time_equal_the_exact_run_s(link_runs):
    name, (fast, fast_metrics), (exact, exact_metrics) = link_runs
    got, want = _link_spans(fast.trace.whole()), _link_spans(exact.trace)
    assert set(got) == set(want), name
    for link, spans in want.items():
        assert len(got[link]) == len(spans), link
        for a, b in zip(got[link], spans, strict=True):
            assert a[0] == b[0] and a[3] == pytest.approx(b[3], rel=1e-12), (link, a, b)
            assert math.isclose(a[1], b[1], rel_tol=1e-9, abs_tol=1e-15), (link, a, b)
            assert math.isclose(a[2], b[2], rel_tol=1e-9, abs_tol=1e-15), (link, a, b)
    busy_got = {(c, u): v for c, units in busy_by_chip(s for s in fast.trace.whole().spans
                                                      if s.unit.startswith("link ")).items() for u, v in units.items()}
    busy_want = {(c, u): v for c, units in busy_by_chip(s for s in exact.trace.spans
                                                       if s.unit.startswith("link ")).items() for u, v in units.items()}
    assert busy_got == pytest.approx(busy_want, rel=1e-9, abs=1e-15)
    links = {unit for unit in exact_metrics["busy_s"] if unit.startswith("link ")}  # the run's own figures
    assert {unit for unit in fast_metrics["busy_s"] if unit.startswith("link ")} == links
    for unit in links:
        assert math.isclose(fast_metrics["busy_s"][unit], exact_metrics["busy_s"][unit], rel_tol=1e-9), unit


def test_the_perfetto_export_of_a_fast_run_shows_every_link(link_runs):
    _, (fast, _), (exact, _) = link_runs
    doc = export.chrome_trace(fast.trace)
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name"}
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name"}
    shown = {(names[e["pid"]], threads[(e["pid"], e["tid"])]) for e in doc["traceEvents"]
             if e["ph"] == "X" and threads.get((e["pid"], e["tid"]), "").startswith("link ")}
    assert shown == {(f"chip {c}", u) for c, u in _link_spans(exact.trace)}


def test_a_shared_link_s_span_stands_for_each_of_its_flows():
    """A quotient link its group maps onto itself (m = 3 flows at once, run as one at 1/m of the bandwidth) unfolds
    to 3 spans on it and 3 on each link of its orbit; chip units and other links are left as they are."""
    trace = Trace()
    trace.add(Span(0, "link 0->sw", "a2a", 0.0, 3.0, "send", 8.0))
    trace.add(Span(1, "link 1->2", "a2a", 0.0, 1.0, "send", 8.0))
    trace.add(Span(0, "mxu", "matmul", 0.0, 1.0, "compute", 0.0, 5.0))
    stand_ins(trace).add_links((0, "link 0->sw"), [(4, "link 4->sw")], copies=3)
    whole = trace.whole()
    count = defaultdict(int)
    for s in whole.spans:
        count[(s.chip, s.unit)] += 1
        assert (s.start, s.end, s.nbytes) == {"mxu": (0.0, 1.0, 0.0), "link 1->2": (0.0, 1.0, 8.0)}.get(
            s.unit, (0.0, 3.0, 8.0))
    assert dict(count) == {(0, "link 0->sw"): 3, (4, "link 4->sw"): 3, (1, "link 1->2"): 1, (0, "mxu"): 1}
    assert trace.stood_for.extra_spans(trace.spans) == 2 + 3 and trace.unfolded(limit=7) is None  # 8 in all
    per_chip = busy_by_chip(trace.spans)
    trace.stood_for.unfold_busy(per_chip)
    assert per_chip[4] == {"link 4->sw": 3.0} and not Unfolding()


@pytest.mark.benchmark
def test_a_quotient_with_shared_links_unfolds_every_flow_in_a_real_run():
    """superpod:1 AllToAll on the quotient by node and rail rotations: its spine links are shared (m = 32 flows on
    one link, run as one). Every link's spans, multiplied out, are the exact run's (about 8 s: 65,536 transfers)."""
    fast, _ = _collective("all_to_all", "h100", "superpod:1", 1e6)(True)
    exact, _ = _collective("all_to_all", "h100", "superpod:1", 1e6)(False)
    assert max(fast.trace.stood_for.copies.values()) > 1
    got, want = _link_spans(fast.trace.whole()), _link_spans(exact.trace)
    assert set(got) == set(want)
    for link, spans in want.items():
        assert len(got[link]) == len(spans), link
        for a, b in zip(got[link], spans, strict=True):
            assert a[0] == b[0] and a[3] == b[3] and math.isclose(a[1], b[1], rel_tol=1e-9, abs_tol=1e-15) \
                and math.isclose(a[2], b[2], rel_tol=1e-9, abs_tol=1e-15), (link, a, b)


@pytest.mark.parametrize("algorithm", ["line", "bidirectional"])
@pytest.mark.parametrize("topology", ["torus:4x4", "torus:2x4"])
def test_a_reduced_collective_s_trace_and_link_bytes_name_the_links_the_full_run_uses(algorithm, topology):
    """A line never uses the wraparound: its reduced run must not unfold spans onto it (it did, by translating the
    ring along its own axis), and ``link_bytes`` holds every link, not only the representative ring's."""
    def run(mode):
        system = System("tpu-v5e", topology=topology, trace=True)
        result = run_collective("all_gather", system, 6e6, algorithm=algorithm, mode=mode)
        events = export.chrome_trace(system.trace)  # what an export shows, unfolded
        events = events["traceEvents"] if isinstance(events, dict) else events
        track = {(e["pid"], e.get("tid")): e["args"]["name"] for e in events
                 if e.get("ph") == "M" and e["name"] == "thread_name"}
        per_link: dict = defaultdict(lambda: [0, 0.0])
        for e in events:
            name = track.get((e["pid"], e.get("tid")), "")
            if e.get("ph") == "X" and name.startswith("link "):
                per_link[name][0] += 1
                per_link[name][1] += e["dur"]
        return result, dict(per_link)
    (fast, fast_links), (full, full_links) = run("auto"), run("full")
    assert fast.mode == "reduced" and full.mode == "full"
    assert fast.link_bytes.keys() == full.link_bytes.keys()
    assert all(fast.link_bytes[k] == pytest.approx(v, rel=1e-9) for k, v in full.link_bytes.items())
    assert fast_links.keys() == full_links.keys()
    assert all(fast_links[k][0] == n and fast_links[k][1] == pytest.approx(t, rel=1e-9)
               for k, (n, t) in full_links.items())
