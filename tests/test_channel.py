"""Channel (fair-shared bandwidth) and SerialUnit timing, checked against hand-derived times."""
import pytest
import simpy

from simulator.engine.channel import Channel, SerialUnit
from simulator.engine.trace import Trace
from simulator.errors import QuantityError


def _log_transfers(requests, bandwidth=100.0, latency=0.0):
    """Run (start_time, name, nbytes) requests; return [(name, finish_time)] in finish order."""
    env = simpy.Environment()
    chan = Channel(env, "hbm", bandwidth, latency, trace=Trace())
    log = []

    def client(at, name, nbytes):
        yield env.timeout(at)
        yield chan.transfer(nbytes, name)
        log.append((name, env.now))

    for at, name, nbytes in requests:
        env.process(client(at, name, nbytes))
    env.run()
    return log, chan


def test_lone_transfer_takes_latency_plus_bytes_over_bandwidth():
    log, _ = _log_transfers([(0, "a", 300)], bandwidth=100, latency=0.5)
    assert log == [("a", pytest.approx(3.5))]


def test_two_equal_flows_each_see_half_the_bandwidth():
    log, _ = _log_transfers([(0, "a", 100), (0, "b", 100)])
    # fair sharing: both progress at 50 B/s, both finish at 2 s (FIFO would give 1 s and 2 s)
    assert [name for name, _ in log] == ["a", "b"]
    assert [t for _, t in log] == [pytest.approx(2.0), pytest.approx(2.0)]


def test_small_flow_is_not_stuck_behind_a_large_one():
    # a: 300 B at t=0; b: 50 B at t=1. From t=1 each gets 50 B/s: b finishes at t=2,
    # a has 200 - 50 = 150 B left at t=2 and finishes alone at t=3.5.
    log, chan = _log_transfers([(0, "a", 300), (1, "b", 50)])
    assert log == [("b", pytest.approx(2.0)), ("a", pytest.approx(3.5))]
    assert chan.bytes_carried == 350


def test_span_covers_time_on_the_channel_not_the_latency():
    env = simpy.Environment()
    trace = Trace()
    chan = Channel(env, "link", 10.0, latency_s=1.0, chip=3, trace=trace)
    chan.transfer(20, "msg", kind="send")
    env.run()
    (span,) = trace.spans
    assert (span.chip, span.unit, span.label, span.kind) == (3, "link", "msg", "send")
    assert span.start == pytest.approx(1.0) and span.end == pytest.approx(3.0)
    assert span.nbytes == 20


@pytest.mark.parametrize("bandwidth", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_bandwidth_is_rejected_with_its_value(bandwidth):
    with pytest.raises(QuantityError, match="bandwidth"):
        Channel(simpy.Environment(), "hbm", bandwidth)


@pytest.mark.parametrize("latency", [-1e-6, float("nan"), float("inf"), "1us", True])
def test_bad_latency_is_rejected_with_its_name(latency):
    with pytest.raises(QuantityError, match="link 0->1 latency_s"):
        Channel(simpy.Environment(), "link 0->1", 1e9, latency)


def test_whole_numbers_are_taken_as_floats():
    chan = Channel(simpy.Environment(), "link", 10, 0)
    assert chan.bandwidth_bytes_per_s.__class__ is float and chan.latency_s.__class__ is float
    assert (chan.bandwidth_bytes_per_s, chan.latency_s) == (10.0, 0.0)


def test_serial_unit_runs_one_op_at_a_time_in_request_order():
    env = simpy.Environment()
    unit = SerialUnit(env, "mxu", trace=Trace())
    log = []

    def op(at, name, duration):
        yield env.timeout(at)
        yield unit.run(duration, name)
        log.append((name, env.now))

    env.process(op(0, "a", 2))
    env.process(op(1, "b", 1))
    env.process(op(5, "c", 1))
    env.run()
    assert log == [("a", 2), ("b", 3), ("c", 6)]
    assert [(s.start, s.end) for s in unit.trace.spans] == [(0, 2), (2, 3), (5, 6)]
