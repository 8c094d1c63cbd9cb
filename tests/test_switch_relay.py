"""switch_relay: Broadcast and Reduce through one switch in relayed rounds (simulator.collectives.switch_relay).

Oracles from first principles: a switch:N chip's port is one link each way of bandwidth W, a chip-to-chip
route crosses two links (latency 2 x the link's); in each round the busiest port carries n - 1 pieces, and
the rounds overlap the relays' forwards of the round before; numeric results against numpy.
"""
from __future__ import annotations

import numpy as np
import pytest

from simulator import System
from simulator.collectives import run_collective
from simulator.errors import PodsimError

V = 64e6


def _port(system: System) -> tuple[float, float]:
    edge = system.network.graph.edges[0, "sw0"]
    return 2 * edge["latency_s"], edge["bandwidth_bytes_per_s"]


def _expected(n: int, rounds: int, nbytes: float, alpha: float, w: float) -> float:
    """Period 1: the root's n - 1 pieces; periods 2..R: n - 1 pieces on every port; the last: n - 2 forwards."""
    piece = nbytes / (rounds * (n - 1))
    return rounds * (alpha + (n - 1) * piece / w) + (alpha + (n - 2) * piece / w if n > 2 else 0.0)


@pytest.mark.parametrize("kind", ["broadcast", "reduce"])
@pytest.mark.parametrize("n,rounds", [(8, 1), (8, 5), (4, 3), (2, 4)])
def test_time_is_one_period_per_round_plus_the_last_forwards(kind, n, rounds):
    system = System("h100", topology=f"switch:{n}")
    alpha, w = _port(system)
    r = run_collective(kind, system, V, algorithm="switch_relay", chunks=rounds * (n - 1))
    assert r.time_s == pytest.approx(_expected(n, rounds, V, alpha, w), rel=1e-6)
    assert r.analytic_s == pytest.approx(r.time_s, rel=1e-2)
    # the root's port carries V exactly once (Broadcast out of it, Reduce into it)
    root_link = (0, "sw0") if kind == "broadcast" else ("sw0", 0)
    assert system.network.links[root_link].bytes_carried == pytest.approx(V, rel=1e-6)


@pytest.mark.parametrize("topology", ["switch:8", "switch:4"])
@pytest.mark.parametrize("nbytes", [64e6, 1e9])
def test_auto_picks_it_within_1_3x_of_the_roots_port_bound(topology, nbytes):
    for kind in ("broadcast", "reduce"):
        system = System("h100", topology=topology)
        alpha, w = _port(system)
        relay = run_collective(kind, System("h100", topology=topology), nbytes, algorithm="switch_relay")
        assert relay.time_s <= 1.3 * (nbytes / w + alpha)  # the root's one port, by hand
        r = run_collective(kind, system, nbytes)  # it, or the ideal ring pipelining its finest cut (issue 31)
        assert r.algorithm in ("switch_relay", "unidirectional")
        assert nbytes / w < r.time_s <= relay.time_s * (1 + 1e-9)


@pytest.mark.parametrize("n", [2, 3, 5])
def test_numeric_equals_numpy(n):
    rng = np.random.default_rng(3)
    data = rng.standard_normal((n, 6 * (n - 1) * (2 * n - 1)))
    root = n - 1
    for chunks in (n - 1, 3 * (n - 1), 2 * (n - 1) + 1):
        b = run_collective("broadcast", System("h100", topology=f"switch:{n}"), data=data, root=root,
                           algorithm="switch_relay", chunks=chunks)
        for chip in range(n):
            np.testing.assert_array_equal(b.outputs[chip], data[root])
        r = run_collective("reduce", System("h100", topology=f"switch:{n}"), data=data, root=root,
                           algorithm="switch_relay", chunks=chunks)
        np.testing.assert_allclose(r.outputs[root], data.sum(axis=0), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind,loads", [("broadcast", 3 + 3 + 2), ("reduce", 2 + 3 + 1)])
def test_a_partial_last_round(kind, loads):
    """switch:4, 4 pieces: rounds of 3 pieces and of 1 (to the first relay). Broadcast: the root's 3; then the
    first relay's port in its own piece and 2 forwards (3); then its forwards of the last piece (2). Reduce:
    each relay takes 2 pieces in, each member sends 2 out; then the root takes the 3 sums; then the last one."""
    system = System("h100", topology="switch:4")
    alpha, w = _port(system)
    r = run_collective(kind, system, V, algorithm="switch_relay", chunks=4)
    assert r.time_s == pytest.approx(3 * alpha + loads * (V / 4) / w, rel=1e-6)
    assert r.analytic_s == pytest.approx(r.time_s, rel=1e-6)


@pytest.mark.parametrize("n,chunks", [(5, 1), (5, 6), (8, 10), (8, 23)])
def test_any_piece_count_agrees_with_the_closed_form(n, chunks):
    for kind in ("broadcast", "reduce"):
        r = run_collective(kind, System("h100", topology=f"switch:{n}"), V, algorithm="switch_relay", chunks=chunks)
        assert r.time_s == pytest.approx(r.analytic_s, rel=1e-6)


def test_it_serves_switches_only():
    with pytest.raises(PodsimError, match="switch_relay.*not nodes.*apply"):
        run_collective("broadcast", System("h100", topology="nodes:2:8"), V, algorithm="switch_relay")
