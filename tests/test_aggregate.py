"""Flow-level aggregation (issue 16) against the plain full simulation, on small symmetric and asymmetric cases.

``aggregate=True`` (the default) runs a collective's transfers through `simulator.acceleration.aggregate`:
callbacks instead of events, one shared timer for the flows that start at one instant with one delay.
The reference is the plain path (``aggregate=False``): one event per transfer and hop. Both must give the
same simulated times (to 1e-9 relative), the same bytes per link and per interface, and the same spans
(as a set: only the order of events within one instant may differ, so the order spans are recorded in).
"""
import numpy as np
import pytest
import simpy

from simulator.collectives import plan_collective, run_collective, start_collective
from simulator.collectives.schedule import gc_paused
from simulator.engine.channel import Channel, call_after
from simulator.engine.disturb import FaultChannel
from simulator.engine.faults import ChipFail, ChipPause, Jitter, LinkDegraded, LinkDown, LinkLatency
from simulator.engine.system import System
from simulator.errors import IncompleteRunError, PodsimError

REL = 1e-9


def _run(aggregate, topology, kind="all_reduce", nbytes=3e6, chip="tpu-v5p", system_kw=None, **kw):
    system = System(chip, topology=topology, **(system_kw or {}))
    r = run_collective(kind, system, nbytes, mode="full", aggregate=aggregate, **kw)
    return system, r


def _same_spans(a, b):
    assert len(a) == len(b)
    def key(s):
        return str(s.chip), s.unit, s.label, s.start, s.end

    for x, y in zip(sorted(a, key=key), sorted(b, key=key), strict=True):
        assert (x.chip, x.unit, x.label, x.kind) == (y.chip, y.unit, y.label, y.kind)
        assert x.start == pytest.approx(y.start, rel=REL, abs=1e-15)
        assert x.end == pytest.approx(y.end, rel=REL, abs=1e-15)
        assert x.nbytes == y.nbytes


def _compare(topology, kind="all_reduce", fewer=True, **kw):
    """Run both paths; assert they agree (and, with ``fewer``, that aggregation saved events); return
    (aggregated, plain) systems and results."""
    (fs, fr), (ps, pr) = _run(True, topology, kind, **kw), _run(False, topology, kind, **kw)
    assert fr.time_s == pytest.approx(pr.time_s, rel=REL)
    assert fr.time_s > 0 and fr.mode == pr.mode == "full" and fr.algorithm == pr.algorithm
    assert fr.link_bytes.keys() == pr.link_bytes.keys()
    for link, nbytes in pr.link_bytes.items():
        assert fr.link_bytes[link] == pytest.approx(nbytes, rel=1e-12)
    assert dict(fs.trace.bytes_by_interface) == pytest.approx(dict(ps.trace.bytes_by_interface), rel=1e-12)
    _same_spans(fs.trace.spans, ps.trace.spans)
    assert fs.events_processed < ps.events_processed if fewer else fs.events_processed == ps.events_processed
    return (fs, fr), (ps, pr)


def test_a_symmetric_torus_step_shares_its_timers():
    (fs, fr), (ps, pr) = _compare("torus:4x4", algorithm="bidirectional")
    plan = plan_collective("all_reduce", System("tpu-v5p", topology="torus:4x4"), 3e6, algorithm="bidirectional",
                           mode="full")
    sends = sum(1 for t in plan.schedule.transfers if t.nbytes > 0 and t.src != t.dst)
    # 2 events per message (latency, bytes) on the plain path; one pair per ring step when aggregated
    assert ps.events_processed >= 2 * sends
    assert fs.events_processed < sends / 5
    # the oracle: a 4-ring bidirectional AllReduce moves 2 (n-1)/n of V over each ring, half each way,
    # and a 4x4 torus runs both axes in parallel on its halves of V
    assert fr.total_link_bytes == pytest.approx(pr.total_link_bytes, rel=1e-12)


@pytest.mark.parametrize("case", [
    {"topology": "torus:4x4x2", "system_kw": {"faults": [LinkDown(0, 1)]}},  # detours: multi-hop cut-through
    {"topology": "torus:4x4", "system_kw": {"faults": [LinkDegraded(0, 1, 0.4)]}},  # one slow link
    {"topology": "torus:4x4", "system_kw": {"faults": [LinkLatency(0, 4, 2e-6)]}},
    # jitter: every link a FaultChannel (each transfer draws its own time; `FaultChannel.send`, no event per flow)
    {"topology": "torus:4x2", "system_kw": {"jitter": Jitter("lognormal", 0.2), "seed": 3}},
    {"topology": "torus:4x2", "system_kw": {"faults": [ChipPause(1, 1e-5, 2e-5)]}},  # a straggler's links
    {"topology": "mesh:4x3"},
    {"topology": "mesh:4x4", "algorithm": "grid_pipelined", "chip": "tpu-v5e"},  # a zero-byte barrier per step
    {"topology": "line:5", "kind": "all_gather"},
    {"topology": "ring:5", "kind": "reduce_scatter", "algorithm": "unidirectional"},
    {"topology": "nodes:2:4", "chip": "h100"},  # switches
    {"topology": "switch:8", "chip": "h100", "algorithm": "nvls"},  # chip <-> switch hops
    {"topology": "nodes:2:4", "chip": "h100", "system_kw": {"calibrated": True}},  # launch latency, protocols
    {"topology": "multislice:2:2x2"},  # DCN between slices
    {"topology": "torus:4x4", "kind": "all_to_all", "algorithm": "dimension_order"},  # multi-hop routes
    {"topology": "torus:4x4", "kind": "all_to_all", "algorithm": "dimension_order",
     "system_kw": {"switching": "store_and_forward"}},  # store and forward: the plain message path
    {"topology": "torus:3x3", "kind": "broadcast", "algorithm": "spanning_trees", "chunks": 3},
], ids=lambda c: "-".join(str(v) for v in c.values())[:60])
def test_aggregated_equals_plain_on_asymmetric_cases(case):
    _compare(**case)


def test_a_chip_failing_mid_run_stops_both_paths_alike():
    messages = []
    for aggregate in (True, False):
        system = System("tpu-v5e", topology="torus:8", faults=[ChipFail(5, at_s=2e-5)], trace=False)
        with pytest.raises(IncompleteRunError, match="failed chip 5 at t=2e-05 s") as err:
            run_collective("all_gather", system, 16e6, mode="full", aggregate=aggregate)
        messages.append(str(err.value))
    assert messages[0] == messages[1]  # the same transfers lost, the same stopping time


def test_numeric_mode_equals_numpy_on_both_paths():
    rng = np.random.default_rng(16)
    data = rng.integers(-1000, 1000, (8, 48)).astype(np.float64)  # integers: every order of sums is exact
    for aggregate in (True, False):
        system = System("tpu-v5p", topology="torus:4x2", faults=[LinkDegraded(0, 1, 0.5)])
        r = run_collective("all_reduce", system, data=data, mode="full", aggregate=aggregate)
        for chip in range(8):
            assert np.array_equal(r.outputs[chip], data.sum(axis=0))
    system = System("tpu-v5p", topology="mesh:3x2")
    r = run_collective("all_gather", system, data=data[:6], mode="full")
    for chip in range(6):
        assert np.array_equal(r.outputs[chip], data[:6].reshape(-1))
    system = System("h100", topology="switch:8")  # in-switch reduction: the switch's buffers add (deliver_hop)
    wide = np.tile(data, (1, 4))[:, :64]  # NVLS cuts each of the 8 shards into 8 pieces
    r = run_collective("all_reduce", system, data=wide, mode="full", algorithm="nvls")
    for chip in range(8):
        assert np.array_equal(r.outputs[chip], wide.sum(axis=0))


def _overlapping(aggregate):
    """Two collectives on the same links at once (fair sharing between them), and one started later."""
    system = System("tpu-v5p", topology="torus:4x2")
    ends = {}

    def go(name, delay, nbytes):
        yield system.env.timeout(delay)
        ends[name] = yield start_collective("all_reduce", system, nbytes, mode="full", aggregate=aggregate)

    system.process(go("a", 0.0, 4e6), "a")
    system.process(go("b", 0.0, 1e6), "b")
    system.process(go("c", 3e-5, 2e6), "c")
    system.run()
    return ends, system.network.link_bytes(), system.trace.spans


def test_overlapping_collectives_share_links_alike():
    fast, plain = _overlapping(True), _overlapping(False)
    assert fast[0].keys() == plain[0].keys() == {"a", "b", "c"}
    for name, end in plain[0].items():
        assert fast[0][name] == pytest.approx(end, rel=REL)
    assert fast[1] == pytest.approx(plain[1], rel=1e-12)
    _same_spans(fast[2], plain[2])
    # sharing happened: the small collective b finished later than it would alone
    alone = run_collective("all_reduce", System("tpu-v5p", topology="torus:4x2"), 1e6, mode="full").time_s
    assert plain[0]["b"] > alone


def test_send_shares_a_channel_fairly_with_transfers():
    """Two equal flows on one link, one sent and one transferred: each sees half the bandwidth, so both
    end at latency + 2 bytes / bandwidth (the fair-sharing closed form)."""
    env = simpy.Environment()
    ch = Channel(env, "link 0->1", 1e9, 1e-6)
    ends = {}
    ch.send(1e6, "a", "send", lambda name: ends.setdefault(name, env.now), "sent")
    ch.transfer(1e6, "b").callbacks.append(lambda e: ends.setdefault("transferred", e.value))
    env.run()
    assert ends["sent"] == pytest.approx(1e-6 + 2e6 / 1e9, rel=1e-12)
    assert ends["transferred"] == pytest.approx(1e-6 + 2e6 / 1e9, rel=1e-12)
    assert ch.bytes_carried == 2e6


def test_send_on_a_fault_channel_keeps_to_its_pauses():
    """A paused link stops the flow: 1 MB at 1 GB/s paused for 1 ms in the middle ends at 2 ms."""
    env = simpy.Environment()
    ch = FaultChannel(env, "link 0->1", 1e9, 0.0, pauses=[(0.5e-3, 1.5e-3)])
    ends = []
    ch.send(1e6, "a", "send", ends.append, "sent")
    env.run()
    assert ends == ["sent"] and env.now == pytest.approx(2e-3, rel=1e-12)


def test_calls_of_one_instant_and_delay_share_one_event():
    env = simpy.Environment()
    seen = []
    for k in range(5):
        call_after(env, 2.0, seen.append, ("late", k))
    call_after(env, 1.0, seen.append, ("early", 0))

    def nested(k):  # a zero delay set while the zero-delay batch of that instant runs still runs
        seen.append(("zero", k, env.now))
        if k < 2:
            call_after(env, 0.0, nested, k + 1)

    call_after(env, 0.0, nested, 0)
    env.run()
    assert seen == [("zero", k, 0.0) for k in range(3)] + [("early", 0), *[("late", k) for k in range(5)]]
    assert env.now == 2.0


def test_aggregate_must_be_a_bool_and_gc_is_restored():
    import gc
    with pytest.raises(PodsimError, match="aggregate='yes'"):
        run_collective("all_reduce", System("tpu-v5p", topology="ring:4"), 1e6, aggregate="yes")
    assert gc.isenabled()
    with pytest.raises(ValueError), gc_paused():
        assert not gc.isenabled()
        raise ValueError
    assert gc.isenabled()


@pytest.mark.parametrize("case", [
    {"topology": "torus:4x4", "chip": "tpu-v5p", "algorithm": "bidirectional"},
    {"topology": "switch:8", "chip": "h100", "algorithm": "unidirectional"},  # two links a hop, cut-through
    {"topology": "nodes:2:8", "chip": "h100", "algorithm": "unidirectional"},  # NIC rings over InfiniBand
    {"topology": "torus:4x4", "chip": "tpu-v5p", "algorithm": "bidirectional",
     "system_kw": {"faults": [LinkDegraded(0, 1, 0.4), LinkLatency(0, 4, 2e-6)]}},  # fault channels
])
def test_a_split_pipelined_broadcast_agrees_on_both_paths(case):
    """A broadcast of several pieces splits every hop into its bytes and its latency (issue 27): both executors
    run the split alike (times, bytes, spans)."""
    case = dict(case)
    _compare(case.pop("topology"), "broadcast", nbytes=3e6, chunks=8, **case)


def test_schedule_shape_counts_dependencies_by_hand():
    """`schedule_shape` on a hand-built diamond 0 -> {1, 2} -> 3 plus a lone 4: counts, dependents and roots
    written out by hand."""
    from simulator.acceleration.aggregate import schedule_shape
    from simulator.collectives.schedule import Transfer

    ts = [Transfer(0, 0, 1, ("a",), "copy", (), 1.0), Transfer(1, 1, 2, ("a",), "copy", (0,), 1.0),
          Transfer(2, 1, 3, ("a",), "copy", (0,), 1.0), Transfer(3, 2, 3, ("a",), "add", (1, 2), 1.0),
          Transfer(4, 3, 0, ("b",), "copy", (), 1.0)]
    waiting, dependents, roots = schedule_shape(ts)
    assert waiting == [0, 1, 1, 2, 0]
    assert dependents == [[1, 2], [3], [3], [], []]
    assert [t.id for t in roots] == [0, 4]


def test_a_quotient_run_twice_leaves_its_kept_shape_as_it_was():
    """A quotient's `schedule_shape` is made once and kept (`Quotient.shape`); each run counts down its own copy,
    so the kept counts stay the schedule's and a second run on the idle network takes as long as the first."""
    from simulator.acceleration.aggregate import schedule_shape
    from simulator.acceleration.quotient import execute_quotient, run_on_quotient

    system = System("a100", topology="nodes:2:8")
    net, env = system.network, system.env
    plan = plan_collective("all_reduce", system, 64e6)
    found = run_on_quotient(net, plan.schedule.transfers)
    assert found is not None, "a node system's AllReduce has a quotient"
    q = found[0]
    fresh = schedule_shape(q.transfers)
    times = []
    for _ in range(2):
        start = env.now
        done = execute_quotient(net, q, "x")
        env.run()
        assert done.triggered
        times.append(env.now - start)
        assert q.shape == fresh  # (the same lists, not counted down)
    assert times[1] == pytest.approx(times[0], rel=1e-12)
