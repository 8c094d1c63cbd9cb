"""Repeated collectives replayed from their first lone run (`simulator.acceleration.replay`).

Oracles: first principles on one link (a transfer of V bytes over a link of bandwidth W and latency a takes
a + V/W and carries V bytes, wherever it starts), and the plain simulation of the same step without replays
and of every chip (``fast=False``): the same figures to 1e-9 relative and the same bytes on every link.
"""
from __future__ import annotations

import dataclasses
import math

import pytest
from same_results import assert_same

from simulator.acceleration.replay import Replays
from simulator.collectives.schedule import Transfer
from simulator.engine.system import System
from simulator.engine.trace import compute_metrics
from simulator.hardware.specs import get_chip
from simulator.workloads.plans import TrainOptions, parse_plan_mesh
from simulator.workloads.plans.step import simulate_step
from simulator.workloads.transformer import get_model

V = 4e6


def _one_link():
    system = System("tpu-v5p", topology="torus:4")
    net = system.network
    link = net.link(0, 1)
    replays = Replays(system, True)
    transfers = [Transfer(0, 0, 1, (), "copy", (), V)]
    links = replays.links_of(transfers)

    def run():
        return net.message(0, 1, V, label="x")
    return system, link, replays, links, run


def test_a_lone_transfer_is_recorded_then_replayed_at_its_closed_form():
    system, link, replays, links, run = _one_link()
    env, alone = system.env, link.latency_s + V / link.bandwidth_bytes_per_s
    ends = []

    def program():
        for start in (0.0, 1e-3, 5e-3):
            yield env.timeout(start - env.now)
            yield replays.start("k", links, run, "x")
            ends.append(env.now - start)
    env.process(program())
    system.run()
    assert links == (link,)
    assert replays.recorded == 1 and replays.replayed == 2 and not replays.conflict
    assert ends == pytest.approx([alone] * 3, rel=1e-12)
    assert link.bytes_carried == pytest.approx(3 * V, rel=1e-12)
    metrics = replays.metrics()
    assert metrics["busy_s"][link.name] == pytest.approx(3 * V / link.bandwidth_bytes_per_s, rel=1e-12)
    assert len([s for s in system.trace.spans if s.unit == link.name]) == 3  # the replays' spans, added after
    assert metrics["busy_s"] == pytest.approx(compute_metrics(system.trace, env.now)["busy_s"], rel=1e-12)


def test_traffic_inside_a_replay_is_a_conflict_and_overlapping_runs_are_not_recorded():
    system, link, replays, links, run = _one_link()
    env = system.env

    def program():
        first = replays.start("k", links, run, "x")  # runs, not alone: other traffic joins its link
        yield env.timeout(1e-7)
        replays.claim(links)
        yield first
        replays.release(links)
        assert ("k",) not in replays.templates
        yield replays.start("k", links, run, "x")  # alone: recorded
        replays.start("k", links, run, "x")  # replayed ...
        yield env.timeout(1e-7)
        replays.claim(links)  # ... and other traffic claims its link inside its window
    env.process(program())
    system.run()
    assert replays.recorded == 1 and replays.replayed == 1 and replays.conflict
    assert replays.disturbed == {("k",)}


def test_a_replay_that_ends_with_another_event_is_a_conflict():
    """Events due at the instant a replay completes could come before or after it in the full run."""
    system, link, replays, links, run = _one_link()
    env, alone = system.env, link.latency_s + V / link.bandwidth_bytes_per_s

    def program():
        yield replays.start("k", links, run, "x")
        yield env.timeout(1e-3 - env.now)
        env.timeout(alone)  # something else, due as the replay completes
        yield replays.start("k", links, run, "x")
    env.process(program())
    system.run()
    assert replays.replayed == 1 and replays.conflict and replays.disturbed == {("k",)}


def test_collectives_that_start_together_on_one_link_replay_as_a_group():
    """Two transfers of V started together share the link fairly: each arrives after a + 2V/W (and a third,
    later, alone: a + V/W), whether run or replayed."""
    system, link, replays, links, run = _one_link()
    env, w, a = system.env, link.bandwidth_bytes_per_s, link.latency_s
    ends = []

    def program():
        for start in (0.0, 1e-3):
            yield env.timeout(start - env.now)
            both = [replays.start(k, links, run, k) for k in ("a", "b")]
            yield both[0] & both[1]
            ends.append(env.now - start)
    env.process(program())
    system.run()
    assert set(replays.templates) == {("a", "b")} and replays.recorded == 1 and replays.replayed == 2
    assert ends == pytest.approx([a + 2 * V / w] * 2, rel=1e-12)
    assert link.bytes_carried == pytest.approx(4 * V, rel=1e-12) and not replays.conflict


CASES = [  # model, mesh, batch, topology, options, replays expected: collectives that repeat, alone or not
    ("llama-2-7b", "data=4,model=4", 8, "torus:4x4", {}, True),
    ("llama-2-7b", "data=2,model=4", 8, None, {}, True),
    ("llama-2-7b", "fsdp=4,model=4", 8, "torus:4x4", {"zero": 3}, False),  # ties: rerun, and rerun again
    ("llama-2-7b", "sequence=4,model=4", 8, "torus:4x4", {"sequence_attention": "allgather"}, True),
    # (replays since `Channel.admit_ahead`, which changed the order of events within an instant: these collectives
    # are now found alone; the results are the same)
    ("llama-2-7b", "pipeline=2,data=2,model=2", 8, None, {"microbatches": 4}, True),
    ("llama-2-7b", "data=2,model=8", 8, "nodes:2:8", {}, True),
    ("llama-2-7b", "fsdp=8", 8, "torus:8", {}, False),
    ("llama-2-7b", "fsdp=2,model=4", 8, None, {"zero": 1}, True),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c[1]}-{c[3]}" for c in CASES])
def test_replayed_step_matches_plain_and_full_simulation(case):
    model, mesh, batch, topology, options, replayed = case
    cfg, spec, plan = dataclasses.replace(get_model(model), n_layers=4), get_chip("tpu-v5p"), parse_plan_mesh(mesh)
    if topology and topology.startswith("nodes"):
        spec = get_chip("h100")
    runs = {}
    for name, kw in (("replay", {}), ("plain", {"replay": False}), ("full", {"fast": False})):
        runs[name] = simulate_step(cfg, spec, plan, TrainOptions(**options), batch, 128, topology, **kw)
    (fast, quick), (plain, slow), (_, exact) = runs["replay"], runs["plain"], runs["full"]
    assert (fast.sym.replays.replayed > 0) == replayed and not fast.sym.replays.conflict
    assert plain.sym.active and plain.sym.replays.replayed == 0
    assert_same(slow, quick)
    assert_same(exact, quick)
    assert fast.system.network.link_bytes().keys() == plain.system.network.link_bytes().keys()
    for link, nbytes in plain.system.network.link_bytes().items():
        assert math.isclose(fast.system.network.link_bytes()[link], nbytes, rel_tol=1e-9), link
    assert_same(compute_metrics(fast.system.trace, fast.env.now), fast.metrics)  # the added spans, metrics unchanged
    spans = {name: [s for s in sim.system.trace.spans if s.unit.startswith("link")]
             for name, (sim, _) in runs.items() if name != "full"}
    assert len(spans["replay"]) <= len(spans["plain"])  # a replay's spans: each link's busy intervals
    link_bytes = {name: sum(s.nbytes for s in sim.system.trace.spans if s.unit.startswith("link"))
                  for name, (sim, _) in runs.items() if name != "full"}
    assert link_bytes["replay"] == pytest.approx(link_bytes["plain"], rel=1e-9)


def test_a_conflict_reruns_without_replays(monkeypatch):
    real = Replays._replay

    def disturbed(self, group, template):
        self.conflict = True
        self.disturbed.add(tuple(group.keys))
        return real(self, group, template)

    monkeypatch.setattr(Replays, "_replay", disturbed)
    cfg, spec, plan = dataclasses.replace(get_model("llama-2-7b"), n_layers=4), get_chip("tpu-v5p"), \
        parse_plan_mesh("data=4,model=4")
    sim, measured = simulate_step(cfg, spec, plan, TrainOptions(), 8, 128, "torus:4x4")
    assert sim.sym.active and sim.sym.replays.replayed == 0  # every key disturbed: avoided, then no replays
    _, exact = simulate_step(cfg, spec, plan, TrainOptions(), 8, 128, "torus:4x4", fast=False)
    assert_same(exact, measured)


def test_a_group_guessed_at_a_start_that_others_do_not_join_is_rerun_without_that_guess():
    """'a' started a group with 'b' before: at its next start the group is replayed, 'b' expected; when 'b' does
    not come that start is named (with its number), and a rerun avoiding it runs 'a' alone: a + V/W."""
    ends: dict[frozenset, list[float]] = {}
    for avoid in (frozenset(), frozenset({(("a", "b"), 2)})):
        system, link, replays, links, run = _one_link()
        replays.avoid = avoid
        env, w, a = system.env, link.bandwidth_bytes_per_s, link.latency_s
        ends[avoid] = []

        def program(env=env, replays=replays, links=links, run=run, out=ends[avoid]):
            both = [replays.start(k, links, run, k) for k in ("a", "b")]
            yield both[0] & both[1]
            yield env.timeout(1e-3 - env.now)
            yield replays.start("a", links, run, "a")
            out.append(env.now - 1e-3)
        env.process(program())
        system.run()
        if not avoid:
            assert replays.conflict and replays.disturbed == {(("a", "b"), 2)}
        else:
            assert not replays.conflict and replays.replayed == 0
    assert ends[frozenset({(("a", "b"), 2)})] == pytest.approx([a + V / w], rel=1e-12)


def test_a_collective_joining_a_replay_without_a_template_for_both_is_a_conflict():
    """'a' ran alone before, so its next start is replayed; 'b' joining it at that instant has no template with
    it: that start is named, and the rerun runs both, sharing the link fairly (a + 2V/W each)."""
    ends: dict[frozenset, list[float]] = {}
    for avoid in (frozenset(), frozenset({(("a",), 2)})):
        system, link, replays, links, run = _one_link()
        replays.avoid = avoid
        env, w, a = system.env, link.bandwidth_bytes_per_s, link.latency_s
        ends[avoid] = []

        def program(env=env, replays=replays, links=links, run=run, out=ends[avoid]):
            yield replays.start("a", links, run, "a")
            yield env.timeout(1e-3 - env.now)
            both = [replays.start(k, links, run, k) for k in ("a", "b")]
            yield both[0] & both[1]
            out.append(env.now - 1e-3)
        env.process(program())
        system.run()
        if not avoid:
            assert replays.conflict and replays.disturbed == {(("a",), 2)}
        else:
            assert not replays.conflict and ("a", "b") in replays.templates
    assert ends[frozenset({(("a",), 2)})] == pytest.approx([a + 2 * V / w], rel=1e-12)
