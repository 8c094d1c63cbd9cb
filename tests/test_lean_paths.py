"""Issue 16's lean paths for the jittered full-fidelity case, each against its switched-off form and closed forms.

- ``FaultChannel.lean``: on a channel of constant rate (jitter alone) a flow joining a busy channel and the end
  timers do `ListChannel`'s advance / admit / schedule / timer steps in one call each; off, call by call.
- ``Aggregated.lean``: an arrival starts a dependent over one plain link itself; off, by ``start``.
- `Network` routes on faulted grids that cut nothing (jitter) are the grid's own dimension-order routes; the
  route walker moves the node index by the axis stride (checked against coordinates, not the code).
- `Schedule.arrivals` and ``by_tag``, indexed apart and on demand, against a recount from the transfers.
"""
import itertools

import numpy as np
import pytest
import simpy

from simulator.acceleration.aggregate import Aggregated
from simulator.collectives import run_collective
from simulator.collectives.schedule import Schedule
from simulator.engine.disturb import FaultChannel, Noise
from simulator.engine.faults import ChipPause, Jitter, LinkDown
from simulator.engine.system import System

REL = 1e-9


def _run(topology, system_kw, aggregate=True, kind="all_reduce", **kw):
    system = System("tpu-v5p", topology=topology, **system_kw)
    r = run_collective(kind, system, 3e6, mode="full", aggregate=aggregate, **kw)
    spans = sorted((str(s.chip), s.unit, s.label, s.start, s.end, s.nbytes) for s in system.trace.spans)
    return r, spans


def _same(a, b):
    (ra, sa), (rb, sb) = a, b
    assert ra.time_s == pytest.approx(rb.time_s, rel=REL)
    assert ra.link_bytes.keys() == rb.link_bytes.keys()
    for link, nbytes in rb.link_bytes.items():
        assert ra.link_bytes[link] == pytest.approx(nbytes, rel=1e-12)
    assert len(sa) == len(sb)
    for x, y in zip(sa, sb, strict=True):
        assert x[:3] == y[:3] and x[5] == y[5]
        assert x[3] == pytest.approx(y[3], rel=REL, abs=1e-15) and x[4] == pytest.approx(y[4], rel=REL, abs=1e-15)


CASES = [("torus:4x4", {"jitter": Jitter("lognormal", 0.3), "seed": 5}, {}),
         ("torus:4x2", {"jitter": Jitter("gamma", 0.5), "seed": 7}, {"algorithm": "unidirectional"}),
         ("mesh:3x3", {"jitter": Jitter("uniform", 0.3), "seed": 1}, {}),
         ("torus:4x4", {"jitter": Jitter("lognormal", 0.2), "seed": 2}, {"kind": "all_to_all",
                                                                       "algorithm": "dimension_order"}),
         # pauses (a rate that changes): `lean` must step aside
         ("torus:4x4", {"jitter": Jitter("lognormal", 0.2), "seed": 4, "faults": [ChipPause(1, 1e-6, 5e-6)]}, {})]


@pytest.mark.parametrize("topology,system_kw,kw", CASES)
@pytest.mark.parametrize("aggregate", [True, False])
def test_the_lean_paths_give_the_results_of_the_paths_they_replace(monkeypatch, topology, system_kw, kw,
                                                                   aggregate):
    lean = _run(topology, system_kw, aggregate, **kw)
    monkeypatch.setattr(FaultChannel, "lean", False)
    monkeypatch.setattr(Aggregated, "lean", False)
    _same(lean, _run(topology, system_kw, aggregate, **kw))
    if aggregate:  # and the plain path (no aggregation at all) agrees too
        _same(lean, _run(topology, system_kw, False, **kw))


def _unit_noise():
    return Noise(np.random.default_rng(0), "uniform", 0.0)  # every factor exactly 1: a jittered channel, known rate


@pytest.mark.parametrize("lean", [True, False])
@pytest.mark.parametrize("send", [True, False])
def test_two_flows_share_a_jittered_link_as_fair_sharing_says(monkeypatch, lean, send):
    """Flow 1 (X bytes) sent at 0, flow 2 (Y bytes) at s: both arrive a latency L later; from L + s they share
    B, so flow 1 ends at L + s + 2 (X - s B) / B and flow 2, the bytes of both moved, at L + (X + Y) / B."""
    monkeypatch.setattr(FaultChannel, "lean", lean)
    env = simpy.Environment()
    bw, lat, x, y, s = 1e9, 2e-6, 4e3, 6e3, 1e-6
    link = FaultChannel(env, "link 0->1", bw, lat, noise=_unit_noise())
    ends = {}

    def go(name, nbytes):
        if send:
            link.send(nbytes, "t", "send", lambda n: ends.__setitem__(n, env.now), name)
        else:
            link.transfer(nbytes, "t").callbacks.append(lambda _e: ends.__setitem__(name, env.now))

    go(1, x)
    env.process(_later(env, s, lambda: go(2, y)))
    env.run()
    assert ends[1] == pytest.approx(lat + s + 2 * (x - s * bw) / bw, rel=1e-12)
    assert ends[2] == pytest.approx(lat + (x + y) / bw, rel=1e-12)
    assert link.bytes_carried == x + y


def _later(env, delay, fn):
    yield env.timeout(delay)
    fn()


def _dimension_order_oracle(shape, wrap, a, b):
    """Chips (row-major ids) from coordinate a to b, one axis after another, the short way round a wrapped axis
    (ties forward)."""
    def node(c):
        return int(np.ravel_multi_index(c, shape))
    coord, path = list(a), [node(a)]
    for axis, n in enumerate(shape):
        forward = (b[axis] - coord[axis]) % n
        step = (1 if forward <= n - forward else -1) if wrap[axis] else (1 if b[axis] > coord[axis] else -1)
        while coord[axis] != b[axis]:
            coord[axis] = (coord[axis] + step) % n
            path.append(node(coord))
    return path


@pytest.mark.parametrize("topology,shape,wrap", [("torus:4x3x5", (4, 3, 5), (True, True, True)),
                                                 ("mesh:3x4", (3, 4), (False, False))])
def test_routes_on_a_jittered_grid_are_its_dimension_order_routes(topology, shape, wrap):
    jittered = System("tpu-v5p", topology=topology, jitter=Jitter("lognormal", 0.1), seed=1).network
    plain = System("tpu-v5p", topology=topology).network
    assert jittered.faulted and not plain.faulted
    for a, b in itertools.product(np.ndindex(*shape), repeat=2):
        src, dst = int(np.ravel_multi_index(a, shape)), int(np.ravel_multi_index(b, shape))
        expected = _dimension_order_oracle(shape, wrap, a, b)
        assert jittered.routes(src, dst) == [expected] == plain.routes(src, dst)


def test_routes_round_a_dead_link_still_avoid_it():
    net = System("tpu-v5p", topology="torus:4x4", faults=[LinkDown(0, 1)], jitter=Jitter("lognormal", 0.1),
                 seed=1).network
    for src, dst in itertools.permutations(range(16), 2):
        path = net.routes(src, dst)[0]
        assert path[0] == src and path[-1] == dst
        assert all(net.graph.has_edge(u, v) for u, v in zip(path, path[1:], strict=False))
        assert not any({u, v} == {0, 1} for u, v in zip(path, path[1:], strict=False))


def test_link_bytes_come_sorted_by_the_link_text():
    system = System("tpu-v5p", topology="torus:4x4")
    r = run_collective("all_reduce", system, 1e6, mode="full")
    keys = list(system.network.link_bytes())
    pairs = sorted(((u, v) for (u, v), c in system.network.links.items() if c.bytes_carried > 0), key=str)
    assert keys == [f"{u}->{v}" for u, v in pairs] and set(r.link_bytes) == set(keys)


def test_arrivals_and_tags_indexed_on_demand_match_a_recount():
    s = Schedule(10.0)
    added = []  # (tid, tag, slot) of every transfer that arrives somewhere
    tags = ["a", ("b", 1), "a", ("c", 2)]
    for step, tag in enumerate(tags):
        for i in range(5):
            tid = s.add(i, i + 1, 1, "copy", [], tag, i % 2)
            added.append((tid, tag, i % 2))
        if step == 1:
            assert s.by_tag["a"] == [t for t, g, _ in added if g == "a"]  # by tag first, arrivals later
        s.barrier(tag)
    assert dict(s.arrivals) == {(g, k): [t for t, g2, k2 in added if (g2, k2) == (g, k)]
                                for _, g, k in added}
    assert dict(s.by_tag) == {g: [t for t, g2, _ in added if g2 == g] for _, g, _ in added}
    last = s.barrier(["a", ("c", 2)])
    assert s.transfers[last].deps == tuple(sorted(t for t, g, _ in added if g in ("a", ("c", 2))))
