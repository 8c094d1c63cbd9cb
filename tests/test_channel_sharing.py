"""Fair sharing under heavy contention: the virtual clock of `Channel` against processor-sharing oracles.

Oracles: a closed form for flows that start together (the k-th smallest ends once every smaller one has
ended and it has had its share all along), and an independent numpy fluid model that steps from event to
event (next arrival or next departure) with every flow in flight moving at ``bandwidth / n``.
"""
import numpy as np
import pytest
import simpy

from simulator.engine.channel import Channel, ListChannel
from simulator.engine.trace import Trace

BW = 1e9


def _run(cls, starts, sizes, latency=0.0, send=False):
    env = simpy.Environment()
    trace = Trace()
    ch = cls(env, "link 0->1", BW, latency, trace=trace)
    ends = [None] * len(sizes)

    def arrive(i):
        ends[i] = env.now

    def start(i):
        if send:
            ch.send(sizes[i], f"f{i}", "send", arrive, i)
        else:
            ch.transfer(sizes[i], f"f{i}", "send").callbacks.append(lambda _e, i=i: arrive(i))

    for i, t in enumerate(starts):
        env.timeout(t).callbacks.append(lambda _e, i=i: start(i))
    env.run()
    return np.array(ends), trace.spans, ch.bytes_carried


def _oracle(starts, sizes, bw=BW):
    """Processor sharing by events: every flow in flight moves at bw / n between arrivals and departures."""
    starts, left = np.asarray(starts, float), np.asarray(sizes, float).copy()
    end = np.full(len(left), np.nan)
    active = np.zeros(len(left), bool)
    t = 0.0
    while np.isnan(end).any():
        waiting = ~active & np.isnan(end)
        t_arrive = starts[waiting].min() if waiting.any() else np.inf
        n = active.sum()
        t_depart = t + left[active].min() * n / bw if n else np.inf
        step = min(t_arrive, t_depart) - t
        if n:
            left[active] -= step * bw / n
        t += step
        gone = active & (left <= 1e-12 * np.asarray(sizes))
        end[gone], active[gone] = t, False
        active |= ~active & np.isnan(end) & (starts <= t)
    return end


def test_flows_starting_together_end_by_the_closed_form():
    sizes = np.array([5e5, 1e6, 2e6, 2e6, 7e6, 3e5])
    ends, spans, carried = _run(Channel, [0.0] * len(sizes), list(sizes))
    order = np.sort(sizes)
    # the k-th smallest (0-based) ends after the smaller ones' bytes plus its own times the flows left
    closed = {s: (order[:k].sum() + (len(order) - k) * s) / BW for k, s in enumerate(order)}
    assert ends == pytest.approx([closed[s] for s in sizes], rel=1e-12)
    assert carried == sizes.sum() and sorted(s.nbytes for s in spans) == sorted(sizes)


@pytest.mark.parametrize("send", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_many_flows_joining_and_leaving_one_link_match_the_oracle(seed, send):
    rng = np.random.default_rng(seed)
    n = 300
    starts = np.sort(rng.uniform(0.0, 2e-3, n))
    starts[50:60] = starts[50]  # a batch joining at one instant
    sizes = rng.choice([1e3, 4e4, 1e5, 1e6], n) * rng.uniform(0.5, 2.0, n)
    sizes[100:110] = 2.5e5  # equal flows: they leave together
    ends, spans, carried = _run(Channel, list(starts), list(sizes), send=send)
    assert ends == pytest.approx(_oracle(starts, sizes), rel=1e-9)
    assert carried == pytest.approx(sizes.sum(), rel=1e-12)
    by_label = {s.label: s for s in spans}
    assert [by_label[f"f{i}"].start for i in range(n)] == pytest.approx(list(starts), rel=1e-12)
    assert [by_label[f"f{i}"].end for i in range(n)] == pytest.approx(list(ends), rel=1e-12)


@pytest.mark.parametrize("latency", [0.0, 2e-6])
def test_virtual_clock_equals_the_list_form_span_for_span(latency):
    rng = np.random.default_rng(7)
    starts = list(np.round(rng.uniform(0.0, 1e-3, 200), 7))  # rounded: many flows share an instant
    sizes = list(rng.choice([1e4, 1e5, 3e5], 200))
    fast, fast_spans, fast_bytes = _run(Channel, starts, sizes, latency)
    plain, plain_spans, plain_bytes = _run(ListChannel, starts, sizes, latency)
    assert fast == pytest.approx(plain, rel=1e-9)
    assert fast_bytes == plain_bytes
    # the same spans, in the same order (flows that end together finish in the order they joined)
    assert [(s.label, s.nbytes) for s in fast_spans] == [(s.label, s.nbytes) for s in plain_spans]
    assert [s.end for s in fast_spans] == pytest.approx([s.end for s in plain_spans], rel=1e-9)


def test_a_long_busy_link_keeps_small_flows_exact():
    # one long flow keeps the link busy while 2,000 tiny flows come and go: the clock is rebased as they leave
    starts = [0.0] + [1e-6 * k for k in range(1, 2001)]
    sizes = [1e9] + [100.0] * 2000
    ends, _, _ = _run(Channel, starts, sizes)
    # each tiny flow shares with the long one alone: 100 B at BW / 2 (it ends before the next arrives)
    assert ends[1:] == pytest.approx(np.array(starts[1:]) + 2 * 100.0 / BW, rel=1e-9)
    assert ends[0] == pytest.approx((1e9 + 2000 * 100.0) / BW, rel=1e-12)


@pytest.mark.parametrize("topology,kind,nbytes", [("nodes:4:8", "all_reduce", 2e5), ("nodes:2:8", "all_gather", 1e6),
                                                  ("fattree:4:4", "all_to_all", 3e5)])
def test_a_collective_on_list_links_matches_the_virtual_clock(monkeypatch, topology, kind, nbytes):
    from simulator.collectives.api import run_collective
    from simulator.engine import network
    from simulator.engine.system import System

    fast_system = System("h100", topology=topology)
    fast = run_collective(kind, fast_system, nbytes, mode="full")
    monkeypatch.setattr(network, "Channel", ListChannel)  # every link shares by the list form
    plain_system = System("h100", topology=topology)
    plain = run_collective(kind, plain_system, nbytes, mode="full")
    assert type(plain_system.network.links[next(iter(plain_system.network.links))]) is ListChannel
    assert fast.time_s == pytest.approx(plain.time_s, rel=1e-9) and fast.algorithm == plain.algorithm
    assert fast.link_bytes == pytest.approx(plain.link_bytes, rel=1e-12)
    key = lambda s: (str(s.chip), s.unit, s.label, s.start)  # noqa: E731
    a, b = sorted(fast_system.trace.spans, key=key), sorted(plain_system.trace.spans, key=key)
    assert [(s.unit, s.label, s.nbytes) for s in a] == [(s.unit, s.label, s.nbytes) for s in b]
    assert [s.end for s in a] == pytest.approx([s.end for s in b], rel=1e-9, abs=1e-15)
