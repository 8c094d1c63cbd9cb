"""Issue 16's fast paths on disturbed links and broadcast trees, against the plain path and closed forms.

- Jittered and faulted links (`FaultChannel`) take the aggregated path (`FaultChannel.send`, no event per flow):
  the same times (1e-9), bytes per link and spans as the plain path (``aggregate=False``), fewer events;
  ``FaultChannel.aggregates = False`` turns it off.
- ``Channel.admit_ahead``: a flow sent on an idle link is admitted at once, as of its arrival (one timer, not
  two); off, the same times with more events. Unit cases against the fair-sharing closed form, including a
  rate or latency changed while such a flow is on its way in.
- The spanning-tree broadcast's schedule: each piece goes down each tree after its parent has it and after the
  previous piece of that tree on the same link (checked from the trees, not from the code that builds it).
"""
import math

import numpy as np
import pytest
import simpy

from simulator.collectives import plan_collective, run_collective
from simulator.collectives.spanning_trees import shape_trees
from simulator.engine.channel import Channel
from simulator.engine.disturb import FaultChannel, Noise
from simulator.engine.faults import ChipPause, Jitter, LinkDown
from simulator.engine.system import System
from simulator.engine.timers import call_at

REL = 1e-9
JITTER = {"jitter": Jitter("lognormal", 0.2), "seed": 3}


def _run(aggregate, topology, kind="all_reduce", system_kw=None, **kw):
    system = System("tpu-v5p", topology=topology, **(system_kw or {}))
    r = run_collective(kind, system, 3e6, mode="full", aggregate=aggregate, **kw)
    return system, r


def _spans(system):
    return sorted((str(s.chip), s.unit, s.label, s.start, s.end, s.nbytes) for s in system.trace.spans)


def _agree(fast, plain):
    (fs, fr), (ps, pr) = fast, plain
    assert fr.time_s == pytest.approx(pr.time_s, rel=REL)
    assert fr.link_bytes.keys() == pr.link_bytes.keys()
    for link, nbytes in pr.link_bytes.items():
        assert fr.link_bytes[link] == pytest.approx(nbytes, rel=1e-12)
    for a, b in zip(_spans(fs), _spans(ps), strict=True):
        assert a[:3] == b[:3] and a[5] == b[5]
        assert a[3] == pytest.approx(b[3], rel=REL, abs=1e-15) and a[4] == pytest.approx(b[4], rel=REL, abs=1e-15)


@pytest.mark.parametrize("case", [
    {"topology": "torus:4x4", "algorithm": "bidirectional", "system_kw": JITTER},
    {"topology": "torus:4x2", "system_kw": {"jitter": Jitter("gamma", 0.4), "seed": 11}},
    {"topology": "torus:4x2", "system_kw": {"jitter": Jitter("uniform", 0.3), "seed": 2}},
    # detours round a dead link: several hops over jittered links take `Network.message` (the draw order)
    {"topology": "torus:4x4x2", "system_kw": {**JITTER, "faults": [LinkDown(0, 1)]}},
    # several hops cut-through over the paused chips' links (no jitter: the aggregated cut-through)
    {"topology": "torus:4x4x2", "system_kw": {"faults": [LinkDown(0, 1), ChipPause(1, 1e-5, 2e-5),
                                                        ChipPause(4, 1e-5, 3e-5)]}},
    {"topology": "torus:4x4", "kind": "all_to_all", "algorithm": "dimension_order", "system_kw": JITTER},
    {"topology": "torus:4x4", "kind": "broadcast", "algorithm": "spanning_trees", "chunks": 8, "system_kw": JITTER},
    {"topology": "mesh:4x4", "algorithm": "grid_pipelined", "system_kw": JITTER},  # zero-byte barriers
], ids=lambda c: "-".join(str(v) for v in c.values())[:70])
def test_disturbed_links_aggregate_with_the_plain_paths_results(case):
    fast, plain = _run(True, **case), _run(False, **case)
    _agree(fast, plain)
    assert fast[0].events_processed < plain[0].events_processed


def test_the_switches_turn_each_fast_path_off(monkeypatch):
    case = {"topology": "torus:4x2", "system_kw": JITTER}
    plain, fast = _run(False, **case), _run(True, **case)
    monkeypatch.setattr(Channel, "admit_ahead", False)
    two_timers = _run(True, **case)
    _agree(two_timers, plain)
    assert fast[0].events_processed < two_timers[0].events_processed < plain[0].events_processed
    monkeypatch.setattr(FaultChannel, "aggregates", False)  # jittered links take `Network.message` again
    off = _run(True, **case)
    _agree(off, plain)
    assert off[0].events_processed == plain[0].events_processed
    undisturbed = {"topology": "torus:4x4", "kind": "broadcast", "algorithm": "spanning_trees", "chunks": 8}
    ahead_off = _run(True, **undisturbed)  # (admit_ahead is still off)
    monkeypatch.setattr(Channel, "admit_ahead", True)
    ahead = _run(True, **undisturbed)
    _agree(ahead, ahead_off)
    assert ahead[0].events_processed < ahead_off[0].events_processed


def _factors(seed, cv, n=3):
    """The first ``n`` lognormal factors of mean 1 and variation ``cv`` from a generator seeded ``seed``."""
    s = math.sqrt(math.log(1 + cv * cv))
    return np.random.default_rng(seed).lognormal(-s * s / 2, s, 4096)[:n]


def _channel(kind, env, bandwidth, latency):
    if kind == "plain":
        return Channel(env, "link 0->1", bandwidth, latency), np.ones(3)
    noise = Noise(np.random.default_rng(7), "lognormal", 0.3)
    return FaultChannel(env, "link 0->1", bandwidth, latency, noise=noise), _factors(7, 0.3)


@pytest.mark.parametrize("kind", ["plain", "jittered"])
def test_a_flow_admitted_ahead_ends_at_latency_plus_its_time_and_shares_with_later_ones(kind):
    env = simpy.Environment()
    ch, f = _channel(kind, env, 1e9, 1e-6)
    ends = {}
    ch.send(1e6, "a", "send", lambda k: ends.setdefault(k, env.now), "a")  # alone: latency + bytes / bandwidth
    assert not ch.busy  # on its way in: not moving bytes yet
    env.run(until=0.5e-6)
    ch.send(1e6, "b", "send", lambda k: ends.setdefault(k, env.now), "b")  # arrives 0.5 us after a
    env.run(until=1.2e-6)
    assert ch.busy
    env.run()
    # a alone for 0.5 us (500 bytes), then both at half rate until a's work is done, then b alone
    work_a, work_b = 1e6 * f[0], 1e6 * f[1]
    end_a = 1.5e-6 + 2 * (work_a - 500.0) / 1e9
    moved_b = (end_a - 1.5e-6) * 1e9 / 2
    assert ends["a"] == pytest.approx(end_a, rel=1e-12)
    assert ends["b"] == pytest.approx(end_a + (work_b - moved_b) / 1e9, rel=1e-12)
    assert ch.bytes_carried == 2e6


@pytest.mark.parametrize("kind", ["plain", "jittered"])
def test_a_rate_changed_before_a_flow_admitted_ahead_arrives_applies_to_it(kind):
    env = simpy.Environment()
    ch, f = _channel(kind, env, 1e9, 1e-6)
    ends = []
    ch.send(1e6, "a", "send", lambda _k: ends.append(env.now), None)
    env.run(until=0.5e-6)
    ch.bandwidth_bytes_per_s = 2e9  # between collectives, as `Network.set_link_efficiency` does
    env.run()
    assert ends == [pytest.approx(1e-6 + 1e6 * f[0] / 2e9, rel=1e-12)]


@pytest.mark.parametrize("kind", ["plain", "jittered"])
def test_a_flow_that_arrives_sooner_after_a_latency_change_goes_first(kind):
    env = simpy.Environment()
    ch, f = _channel(kind, env, 1e9, 1e-6)
    ends = {}
    ch.send(1e6, "a", "send", lambda k: ends.setdefault(k, env.now), "a")  # arrives at 1 us
    env.run(until=0.25e-6)
    ch.latency_s = 0.0
    ch.send(1e6, "b", "send", lambda k: ends.setdefault(k, env.now), "b")  # arrives at once, 0.75 us before a
    env.run()
    work_a, work_b = 1e6 * f[0], 1e6 * f[1]
    moved_b = 0.75e-6 * 1e9  # alone until a arrives
    both = min(work_a, work_b - moved_b)  # then both at half rate until the smaller is done
    first = 1e-6 + 2 * both / 1e9
    if work_a < work_b - moved_b:
        assert ends["a"] == pytest.approx(first, rel=1e-12)
        assert ends["b"] == pytest.approx(first + (work_b - moved_b - both) / 1e9, rel=1e-12)
    else:
        assert ends["b"] == pytest.approx(first, rel=1e-12)
        assert ends["a"] == pytest.approx(first + (work_a - both) / 1e9, rel=1e-12)


def test_call_at_shares_a_timer_per_time_and_refuses_the_past():
    env = simpy.Environment()
    seen = []
    for k in range(3):
        call_at(env, 2.0, seen.append, k)
    call_at(env, 1.0, seen.append, "early")
    env.run()
    assert seen == ["early", 0, 1, 2] and env.now == 2.0
    with pytest.raises(ValueError, match="before now"):
        call_at(env, 1.5, seen.append, "late")


@pytest.mark.parametrize("topology,chunks", [("torus:3x3", 7), ("mesh:3x4", 5), ("torus:4x4", 2), ("torus:2x3x3", 12)])
def test_a_broadcast_pipelines_each_piece_down_its_tree(topology, chunks):
    system = System("tpu-v5p", topology=topology)
    plan = plan_collective("broadcast", system, data=np.ones((len(system.chips), 4 * chunks)), mode="full",
                           algorithm="spanning_trees", chunks=chunks)
    group, root = plan.groups[0], plan.job.root_pos
    forest = shape_trees(group, root)
    transfers = plan.schedule.transfers
    got = {}  # (device, piece) -> the transfer that brings it
    for t in transfers:
        (piece,) = t.keys
        assert piece[0] == "piece" and (t.dst, piece[1]) not in got
        got[(t.dst, piece[1])] = t
    d = len(forest)
    assert len(transfers) == chunks * (group.n - 1)
    for tree, (parents, _) in enumerate(forest):
        pieces = list(range(tree, chunks, d))
        for x, p in parents.items():
            for k, j in enumerate(pieces):
                t = got[(group.members[x], j)]
                assert t.src == group.members[p] and t.op == "copy"
                want = set()
                if p != root:
                    want.add(got[(group.members[p], j)].id)  # the parent has the piece
                if k:
                    want.add(got[(group.members[x], pieces[k - 1])].id)  # the previous piece on this link
                assert set(t.deps) == want
    timing = plan_collective("broadcast", System("tpu-v5p", topology=topology), 1e6, mode="full",
                             algorithm="spanning_trees", chunks=chunks).schedule.transfers
    assert [(t.src, t.dst, t.deps) for t in timing] == [(t.src, t.dst, t.deps) for t in transfers]
