"""Faults and jitter in the engine (issue 18), against closed forms from first principles.

Oracles: a line's AllGather takes (n - 1)(alpha + s / b); a link at fraction f carries its (n - 1) shards in
(n - 1) s / (f b); a chip at speed f computes C in C / f; a paused unit resumes after the pause. Property
tests: a fault never makes a run faster than no fault, chip faults never make a synchronous step faster,
a failed chip never hangs, the same seed gives the same trace.
"""
import math
import pickle

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from scenarios import double_buffer
from simulator.collectives import run_collective, start_collective
from simulator.engine.disturb import Noise
from simulator.engine.faults import (
    ChipFail,
    ChipPause,
    ChipSlow,
    FaultPlan,
    Jitter,
    LinkDegraded,
    LinkDown,
    LinkLatency,
    applying,
)
from simulator.engine.system import System
from simulator.errors import FaultError, IncompleteRunError
from simulator.hardware.specs import get_chip
from simulator.report.tails import critical_element
from simulator.workloads.mesh import Mesh

V5E = get_chip("tpu-v5e")
B, ALPHA = V5E.ici_bandwidth_bytes_per_s, V5E.hop_latency_s


def dp_step(n: int = 8, flops: float = 2e12, grad_bytes: float = 64e6, **disturb) -> System:
    """A synchronous data-parallel step: every chip computes, all wait for the last, then AllReduce."""
    system = System("tpu-v5e", topology=f"torus:{n}", **disturb)
    done = [chip.compute(flops, label="forward+backward") for chip in system.chips]

    def step():
        yield simpy.AllOf(system.env, done)
        yield start_collective("all_reduce", system, grad_bytes)

    system.process(step(), "step")
    system.run()
    return system


def spans(system: System) -> list:
    return list(system.trace.spans)


# -- nothing disturbed: today's results, bit for bit ----------------------------------------------------
@pytest.mark.parametrize("disturb", [{"faults": [], "jitter": Jitter(cv=0.0), "seed": 7}, {"jitter": None},
                                     {"faults": [], "seed": 3}])
def test_no_faults_and_zero_jitter_give_todays_run_to_the_last_bit(disturb):
    plain = System("tpu-v5e", topology="torus:4x4")
    quiet = System("tpu-v5e", topology="torus:4x4", **disturb)
    assert quiet.faults is None
    a = run_collective("all_reduce", plain, 8e6, mode="full")
    b = run_collective("all_reduce", quiet, 8e6, mode="full")
    assert (a.time_s, a.link_bytes) == (b.time_s, b.link_bytes)
    assert spans(plain) == spans(quiet)
    assert spans(dp_step()) == spans(dp_step(**disturb))


def test_an_empty_plan_changes_nothing_either():
    plain = double_buffer.run(blocks=6)
    with applying(FaultPlan(jitter=Jitter(cv=0.0), seed=11)) as plan:
        quiet = double_buffer.run(blocks=6)
    assert plan.systems and all(s.faults is None for s in plan.systems)
    assert plain.trace.spans == quiet.trace.spans and plain.metrics == quiet.metrics


# -- links -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dead", [(0, 1), (1, 0), (3, 4), (7, 0), (6, 7)])
def test_a_ring_with_one_dead_link_takes_the_lines_time(dead):
    n, nbytes = 8, 16e6
    system = System("tpu-v5e", topology=f"torus:{n}", faults=[LinkDown(*dead)])
    r = run_collective("all_gather", system, nbytes)
    line_s = (n - 1) * (ALPHA + nbytes / n / B)
    line = run_collective("all_gather", System("tpu-v5e", topology=f"torus:{n}", faults=[LinkDown(*dead)]), nbytes,
                          algorithm="line")
    assert line.time_s == pytest.approx(line_s, rel=1e-12)
    assert {a["algorithm"] for a in r.alternatives if "route" not in a} == {"line"}
    assert all("detour" in a["route"] for a in r.alternatives if "route" in a)  # a ring detouring round the break
    assert r.topology_bound_s <= r.time_s <= line_s * (1 + 1e-12)  # auto's trials: the line, or a detour faster
    assert r.algorithm == "line" or "detour" in (r.note or "")
    dead_links = {f"link {dead[0]}->{dead[1]}", f"link {dead[1]}->{dead[0]}"}
    assert not dead_links & {s.unit for s in system.trace.spans}
    nominal = run_collective("all_gather", System("tpu-v5e", topology=f"torus:{n}"), nbytes)
    assert nominal.algorithm != "line" and nominal.time_s < r.time_s


def test_a_dead_link_unwraps_one_axis_of_a_torus_and_only_that_one():
    system = System("tpu-v5e", topology="torus:4x4", faults=[LinkDown((2, 1), (2, 2))])  # axis 1, row 2
    net = system.network
    assert net.wrap == (True, False) and net.origin == (0, 2)
    assert net.chip_at((2, 0)) == 10  # row 2 counts from the chip after the break, (2, 2)
    r = run_collective("all_gather", system, 4e6, axes=[1], algorithm="line")
    assert r.time_s == pytest.approx(3 * (ALPHA + 4e6 / 4 / B), rel=1e-12)  # every row runs a line of 4
    auto = run_collective("all_gather", System("tpu-v5e", topology="torus:4x4", faults=[LinkDown((2, 1), (2, 2))]),
                          4e6, axes=[1])
    assert auto.time_s <= r.time_s  # auto's trials may keep the broken row a ring, detouring (detour_split)
    mesh = Mesh("X=4,Y=4", system.graph)
    assert not mesh.is_ring("Y") and mesh.is_ring("X") and mesh.device((2, 0)) == 10


def test_routes_avoid_a_dead_link():
    system = System("tpu-v5e", topology="torus:4x4", faults=[LinkDown(0, 1)])
    (route,) = system.network.routes(0, 2)
    assert route == [0, 3, 2]  # the other way round the ring, as short
    (route,) = system.network.routes(0, 1)
    assert len(route) == 4 and route[0] == 0 and route[-1] == 1  # a detour through another row


@pytest.mark.parametrize("f", [0.25, 0.5, 1.0])
def test_a_degraded_link_paces_the_ring(f):
    """The slow link carries its n - 1 shards back to back at f b (shards reach it faster than it drains them);
    the ring can finish no sooner, and no later than a pass at its pace plus the rest of a pass at full speed."""
    n, nbytes = 8, 1e9
    s = nbytes / n
    system = System("tpu-v5e", topology=f"torus:{n}", faults=[LinkDegraded(0, 1, f)])
    r = run_collective("all_gather", system, nbytes, algorithm="unidirectional")
    busy = sorted((x.start, x.end) for x in system.trace.spans if x.unit == "link 0->1")
    gaps = (n - 2) * ALPHA if f == 1.0 else 0.0  # at full speed it idles a hop latency between shards
    assert busy[-1][1] - busy[0][0] == pytest.approx((n - 1) * s / (f * B) + gaps, rel=1e-9)
    assert ALPHA + (n - 1) * s / (f * B) <= r.time_s * (1 + 1e-12)
    assert r.time_s <= (n - 1) * (ALPHA + s / (f * B)) + (n - 2) * (ALPHA + s / B)
    if f == 1.0:
        assert r.time_s == pytest.approx((n - 1) * (ALPHA + s / B), rel=1e-12)


def test_extra_latency_on_one_hop():
    system = System("tpu-v5e", topology="torus:4x4", faults=[LinkLatency(0, 1, 3e-6)])
    system.network.message(0, 1, 1e6)
    assert system.run() == pytest.approx(ALPHA + 3e-6 + 1e6 / B, rel=1e-12)


# -- chips -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("factor", [0.5, 0.8])
def test_one_slow_chip_delays_a_synchronous_step_by_its_extra_compute(factor):
    """A chip slowed on its MXU alone: the step waits for its compute; its links (through HBM) are untouched."""
    compute_s = 2e12 / V5E.peak_flops_per_s()
    base, slow = dp_step(), dp_step(faults=[ChipSlow(3, factor, ("mxu",))])
    assert slow.env.now - base.env.now == pytest.approx(compute_s * (1 / factor - 1), rel=1e-9)
    assert critical_element(slow.trace) == "chip 3"


@pytest.mark.parametrize("factor", [0.5, 0.8])
def test_a_slow_chip_slows_its_links_in_a_collective(factor):
    """Issue 31: ``chip:3=slow:F`` (HBM included) scales chip 3's link directions by F (its DMA feeds them): on
    torus:8 chip 3 then receives an AllReduce's V over two links of F W -- at least V / (2 F W) -- where a
    healthy chip's bound is V / (2 W); an MXU-only slowdown leaves the collective as it was, with a note."""
    nbytes = 64e6
    healthy = run_collective("all_reduce", System("tpu-v5e", topology="torus:8"), nbytes)
    slow = run_collective("all_reduce", System("tpu-v5e", topology="torus:8", faults=[ChipSlow(3, factor)]), nbytes)
    assert slow.time_s >= nbytes / (2 * factor * B) and slow.time_s > healthy.time_s
    assert slow.topology_bound_s >= nbytes / (2 * factor * B) * (1 - 1e-9)
    graph = System("tpu-v5e", topology="torus:8", faults=[ChipSlow(3, factor)]).network.graph
    assert graph.edges[3, 4]["bandwidth_bytes_per_s"] == pytest.approx(factor * B)
    assert graph.edges[2, 3]["bandwidth_bytes_per_s"] == pytest.approx(factor * B)
    assert graph.edges[4, 5]["bandwidth_bytes_per_s"] == pytest.approx(B)
    mxu = run_collective("all_reduce", System("tpu-v5e", topology="torus:8", faults=[ChipSlow(3, factor, ("mxu",))]),
                         nbytes)
    assert mxu.time_s == healthy.time_s and "touches nothing" in (mxu.note or "")


def test_a_fault_off_the_collective_says_so():
    """A slow hop on axis 0 of torus:4x4 carries nothing of an AllGather over axis 1: the run says so."""
    system = System("tpu-v5e", topology="torus:4x4", faults=[LinkLatency((0, 0), (1, 0), 1e-6)])
    r = run_collective("all_gather", system, 4e6, axes=[1])
    assert "touches nothing" in (r.note or "") and "0->4" in r.note


def test_a_dead_link_is_said_to_touch_nothing_only_off_the_groups():
    """A dead cable carries no bytes wherever it is: the note names it only where it joins no two chips of one group
    (axis 0 for an AllGather over axis 1 of torus:4x4), not where it broke the groups' ring (axis 1)."""
    on_axis = run_collective("all_gather", System("tpu-v5e", topology="torus:4x4", faults=[LinkDown((0, 0), (0, 1))]),
                             4e6, axes=[1])
    off_axis = run_collective("all_gather", System("tpu-v5e", topology="torus:4x4",
                                                   faults=[LinkDown((0, 0), (1, 0))]), 4e6, axes=[1])
    assert "link_down" not in (on_axis.note or "")
    assert "joins no two chips of one group" in (off_axis.note or "") and "0->4" in off_axis.note


def test_slow_hbm_only_slows_dma():
    system = System("tpu-v5e", faults=[ChipSlow(0, 0.25, ("hbm",))])
    system.chip.load(1e9, "x")
    assert system.run() == pytest.approx(1e9 / (0.25 * V5E.hbm_bandwidth_bytes_per_s), rel=1e-12)
    system = System("tpu-v5e", faults=[ChipSlow(0, 0.25, ("hbm",))])
    system.chip.compute(1e12)
    assert system.run() == pytest.approx(1e12 / V5E.peak_flops_per_s(), rel=1e-12)


def test_a_pause_holds_compute_and_dma_and_they_resume_where_they_stopped():
    d = 1e12 / V5E.peak_flops_per_s()
    system = System("tpu-v5e", faults=[ChipPause(0, d / 4, 3e-3)])
    system.chip.compute(1e12, label="mm")
    assert system.run() == pytest.approx(d + 3e-3, rel=1e-12)
    pieces = [s for s in system.trace.spans if s.unit == "mxu"]
    assert [t for p in pieces for t in (p.start, p.end)] == pytest.approx([0, d / 4, d / 4 + 3e-3, d + 3e-3])
    assert sum(p.flops for p in pieces) == 1e12
    load_s = 1e9 / V5E.hbm_bandwidth_bytes_per_s
    system = System("tpu-v5e", faults=[ChipPause(0, load_s / 2, 1e-3)])
    system.chip.load(1e9, "x")
    assert system.run() == pytest.approx(load_s + 1e-3, rel=1e-12)
    system = System("tpu-v5e", faults=[ChipPause(0, 0.0, 1e-3)])  # work that arrives in a pause waits for its end
    system.chip.vector(1e9)
    assert system.run() == pytest.approx(1e-3 + 1e9 / V5E.vpu_flops_per_s, rel=1e-12)


def test_a_failed_chip_reports_what_can_no_longer_complete():
    system = System("tpu-v5e", topology="torus:8", faults=[ChipFail(5)])
    with pytest.raises(IncompleteRunError, match=r"failed chip 5 at t=0 s: .*all_gather") as err:
        run_collective("all_gather", system, 16e6)
    assert err.value.failed == {5: 0.0} and err.value.incomplete["all_gather"] > 0
    assert pickle.loads(pickle.dumps(err.value)).incomplete == err.value.incomplete  # from a worker process, whole
    with pytest.raises(IncompleteRunError, match="forward\\+backward"):
        dp_step(faults=[ChipFail(3)])
    late = run_collective("all_gather", System("tpu-v5e", topology="torus:8", faults=[ChipFail(5, at_s=1.0)]), 16e6)
    assert late.time_s == run_collective("all_gather", System("tpu-v5e", topology="torus:8"), 16e6).time_s


# -- properties ---------------------------------------------------------------------------------------------
TOPOLOGIES = ["torus:8", "torus:5", "line:6", "torus:4x4", "mesh:2x4", "torus:2x4"]
KINDS = ["all_gather", "reduce_scatter", "all_reduce", "all_to_all", "broadcast"]


@st.composite
def one_fault(draw, topology: str, links: bool = True):
    system = System("tpu-v5e", topology=topology, trace=False)
    chips, edges = system.network.chips, sorted(system.graph.edges)
    kind = draw(st.sampled_from(["degraded", "latency", "slow", "pause", "down"] if links else ["slow", "pause"]))
    if kind in ("degraded", "latency", "down"):
        u, v = draw(st.sampled_from(edges))
        if kind == "down":
            return LinkDown(u, v)
        return LinkDegraded(u, v, draw(st.sampled_from([0.2, 0.5, 0.9]))) if kind == "degraded" else \
            LinkLatency(u, v, draw(st.sampled_from([1e-6, 1e-5])))
    chip = draw(st.sampled_from(chips))
    if kind == "slow":
        return ChipSlow(chip, draw(st.sampled_from([0.3, 0.9])))
    return ChipPause(chip, draw(st.sampled_from([0.0, 2e-5, 1e-3])), draw(st.sampled_from([1e-5, 1e-3])))


@settings(max_examples=30, deadline=None, derandomize=True)
@given(data=st.data(), topology=st.sampled_from(TOPOLOGIES), kind=st.sampled_from(KINDS),
       nbytes=st.sampled_from([1e5, 4e6]))
def test_a_fault_never_makes_a_collective_faster_than_none(data, topology, kind, nbytes):
    fault = data.draw(one_fault(topology, links=not topology.startswith(("line", "mesh"))))
    try:
        faulty = System("tpu-v5e", topology=topology, faults=[fault], trace=False)
    except FaultError:  # a dead link on an axis that cannot lose one
        return
    nominal = run_collective(kind, System("tpu-v5e", topology=topology, trace=False), nbytes).time_s
    assert run_collective(kind, faulty, nbytes).time_s >= nominal * (1 - 1e-12)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(data=st.data(), n=st.sampled_from([4, 8]))
def test_more_chip_faults_never_make_a_synchronous_step_faster(data, n):
    """The step ends at the last chip's compute plus the AllReduce: adding a chip fault can only push a chip's
    compute later."""
    faults = data.draw(st.lists(one_fault(f"torus:{n}", links=False), max_size=3))
    extra = data.draw(one_fault(f"torus:{n}", links=False))
    fewer = dp_step(n, 2e11, 4e6, faults=faults).env.now
    assert dp_step(n, 2e11, 4e6, faults=[*faults, extra]).env.now >= fewer * (1 - 1e-12)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(topology=st.sampled_from(TOPOLOGIES + ["switch:4"]), kind=st.sampled_from(KINDS), data=st.data(),
       at_s=st.sampled_from([0.0, 1e-6, 3e-5, 1.0]))
def test_a_failed_chip_never_hangs_the_run(topology, kind, data, at_s):
    system = System("h100" if topology.startswith("switch") else "tpu-v5e", topology=topology, trace=False)
    chip = data.draw(st.sampled_from(system.network.chips))
    failing = System(system.spec, topology=topology, faults=[ChipFail(chip, at_s)], trace=False)
    try:
        run_collective(kind, failing, 1e6)
    except IncompleteRunError as err:
        assert err.failed == {chip: at_s} and math.isfinite(err.stopped_at_s) and sum(err.incomplete.values()) > 0
        assert at_s < 1.0
    assert failing.env.now < 1.0


# -- jitter -------------------------------------------------------------------------------------------------
def test_the_same_seed_gives_the_same_trace_and_another_seed_another():
    runs = [dp_step(jitter=Jitter(cv=0.1), seed=s) for s in (4, 4, 5)]
    assert spans(runs[0]) == spans(runs[1]) and runs[0].env.now == runs[1].env.now
    assert runs[0].env.now != runs[2].env.now


@pytest.mark.parametrize("distribution", ["lognormal", "gamma", "uniform"])
def test_jitter_factors_have_mean_one_and_the_cv_asked_for(distribution):
    x = Noise(np.random.default_rng(1), distribution, 0.2).draw(400_000)
    assert x.min() > 0
    assert x.mean() == pytest.approx(1.0, abs=2e-3)
    assert x.std() / x.mean() == pytest.approx(0.2, rel=1e-2)


def test_jitter_on_compute_only_keeps_links_uniform():
    quiet_links = System("tpu-v5e", topology="torus:4x4", jitter=Jitter(cv=0.1, units=("mxu",)), seed=1)
    noisy_links = System("tpu-v5e", topology="torus:4x4", jitter=Jitter(cv=0.1), seed=1)
    assert quiet_links.network.uniform and not noisy_links.network.uniform
    assert run_collective("all_reduce", quiet_links, 1e6).mode == "reduced"
    assert run_collective("all_reduce", noisy_links, 1e6).mode == "full"


# -- bad input ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("make,message", [
    (lambda: System(topology="torus:8", faults=[ChipSlow(9, 0.5)]), "chip 9 is not a chip of torus:8; chips are 0..7"),
    (lambda: System(topology="torus:4x4", faults=[ChipFail((4, 0))]), "coordinates 0,0..3,3"),
    (lambda: System(topology="torus:8", faults=[LinkDown(0, 5)]), "link 0->5 is not a link of torus:8; chip 0 has "
                                                                  "links to 1, 7"),
    (lambda: LinkDegraded(0, 1, 1.5), r"must be a fraction in \(0, 1\]"),
    (lambda: LinkDegraded(0, 1, 0.0), r"must be a fraction in \(0, 1\]"),
    (lambda: Jitter("cauchy", 0.05), "valid distributions are lognormal, gamma, uniform"),
    (lambda: Jitter("uniform", 0.9), "too large for the uniform distribution"),
    (lambda: ChipSlow(0, 0.5, ("tpu",)), "valid units are mxu, vpu, hbm"),
    (lambda: System(faults=[LinkDown(0, 1)]), "this system has no links"),
    (lambda: System(topology="ring:8", faults=[LinkDown(0, 1), LinkDown(4, 5)]), "cut chip"),
    (lambda: System(topology="torus:8", faults=["link:0->1=down"]), "not a fault"),
])
def test_bad_faults_are_one_line_errors_naming_what_is_valid(make, message):
    with pytest.raises(FaultError, match=message) as err:
        make()
    assert "\n" not in str(err.value)
