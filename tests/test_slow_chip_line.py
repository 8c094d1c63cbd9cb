"""`slow_chip_line`: AllReduce on a ring through one slow chip -- the other chips' pipelined line, the slow chip
adding each piece in at one end and taking its total back.

Oracles from first principles: torus:8 of tpu-v5e (b = 45 GB/s one way, alpha its hop latency), chip 3 at
f = 1/2 (both its cables at f b). The slow chip must send V and take V back over its two cables: at least
V / (2 f b) = 22.2 ms at 1 GB. The line of the other 7 chips (ends e0 = 4 and e1 = 2, middle 3 hops from each)
with c pieces of p = V / c: a piece's longest chain is s -> e0, 3 hops in, 3 out, e0 -> s, i.e. 2 t_s + 6 t with
t = alpha + p / b and t_s = alpha + p / (f b); every line link carries all c pieces (c t of work), each slow cable
every other one ((c / 2) t_s = c p / b + c alpha / 2 < c t), so T = 2 t_s + 6 t + (c - 1) t.
"""
from __future__ import annotations

import pytest

from simulator import System
from simulator.collectives import run_collective
from simulator.engine.faults import ChipSlow
from simulator.errors import PodsimError
from simulator.hardware.specs import get_chip

V5E = get_chip("tpu-v5e")
B, ALPHA, V, N = V5E.ici_bandwidth_bytes_per_s, V5E.hop_latency_s, 1e9, 8
TRANSFERS_PER_PIECE = 1 + 2 * (N - 2) + 1  #: s -> end, the line's adds in and copies out (n - 2 each), end -> s


def _slow(f: float = 0.5, **kw) -> System:
    return System("tpu-v5e", topology=f"torus:{N}", faults=[ChipSlow(3, f)], **kw)


def test_half_speed_chip_by_hand() -> None:
    r = run_collective("all_reduce", _slow(), V, algorithm="slow_chip_line")
    c = r.n_transfers // TRANSFERS_PER_PIECE
    assert r.n_transfers == c * TRANSFERS_PER_PIECE and c >= 2
    p = V / c
    t, t_s = ALPHA + p / B, ALPHA + p / (0.5 * B)
    hand = 2 * t_s + 6 * t + (c - 1) * t
    assert r.time_s == pytest.approx(hand, rel=1e-9)
    assert r.analytic_s == pytest.approx(hand, rel=1e-9)
    assert V / B <= r.time_s <= 1.05 * V / B  # the bound V / (2 f b) = V / b, plus the pipeline's fill
    # the slow chip's cables carry V / 2 each way, the line's links V
    assert r.link_bytes["3->4"] == pytest.approx(V / 2, rel=1e-6) and r.link_bytes["2->3"] == pytest.approx(V / 2,
                                                                                                         rel=1e-6)
    assert r.link_bytes["5->4"] == pytest.approx(V, rel=1e-6)


def test_auto_runs_it_round_a_slow_chip() -> None:
    """54.2 ms on the bidirectional ring through the slow chip, 45.3 ms with it at a line's end: auto runs this."""
    r = run_collective("all_reduce", _slow(), V)
    ring = run_collective("all_reduce", _slow(), V, algorithm="bidirectional")
    assert r.algorithm == "slow_chip_line"
    assert r.topology_bound_s <= r.time_s <= 1.05 * r.topology_bound_s < 0.5 * ring.time_s


@pytest.mark.parametrize("f", [0.2, 0.5, 0.9])
def test_never_below_the_bound_and_near_its_closed_form(f: float) -> None:
    r = run_collective("all_reduce", _slow(f), 256e6, algorithm="slow_chip_line")
    assert r.topology_bound_s * (1 - 1e-9) <= r.time_s == pytest.approx(r.analytic_s, rel=0.01)


def test_only_for_one_slow_chip_on_a_ring() -> None:
    with pytest.raises(PodsimError, match="through one slow chip"):
        run_collective("all_reduce", System("tpu-v5e", topology=f"torus:{N}"), V, algorithm="slow_chip_line")
    two = System("tpu-v5e", topology=f"torus:{N}", faults=[ChipSlow(1, 0.5), ChipSlow(5, 0.5)])
    with pytest.raises(PodsimError, match="through one slow chip"):
        run_collective("all_reduce", two, V, algorithm="slow_chip_line")
    with pytest.raises(PodsimError, match="timing and bytes only"):
        run_collective("all_reduce", _slow(), algorithm="slow_chip_line", data=__import__("numpy").ones((N, 16)))


@pytest.mark.parametrize("kind", ["all_gather", "reduce_scatter"])
def test_gather_and_scatter_reach_the_slow_chips_bound(kind: str) -> None:
    """AllGather / ReduceScatter: the slow chip must take in (or send out) the other (n - 1)/n V over its two cables
    at f b: (n - 1) V / (2 n f b) = 19.44 ms at f = 1/2 -- twice the healthy ring's 9.72 ms, and what this reaches;
    the line's busiest links carry (n - 3/2)/n V at b (18.1 ms), under it. The ring through the slow chip: 27.8 ms."""
    hand = (N - 1) * V / (2 * N * 0.5 * B)
    r = run_collective(kind, _slow(), V)
    ring = run_collective(kind, _slow(), V, algorithm="bidirectional")
    assert r.algorithm == "slow_chip_line"
    assert hand <= r.time_s <= hand + N * ALPHA * 1.01 < 0.75 * ring.time_s
    assert r.topology_bound_s == pytest.approx(hand, rel=1e-3)
    cables = [r.link_bytes[k] for k in (("4->3", "2->3") if kind == "all_gather" else ("3->4", "3->2"))]
    assert cables == pytest.approx([(N - 1) / (2 * N) * V] * 2, rel=1e-6)  # half the other shards over each


def test_gather_where_the_line_is_busier_than_the_slow_cables() -> None:
    """At f = 0.8 the line's links next to its ends carry the most, (n - 3/2)/n V at b: 18.06 ms; the ring through
    the slow chip is faster then (auto runs it)."""
    r = run_collective("all_gather", _slow(0.8), V, algorithm="slow_chip_line")
    line_s = (N - 1.5) / N * V / B
    assert line_s <= r.time_s <= 1.001 * line_s
    assert run_collective("all_gather", _slow(0.8), V).time_s < r.time_s


def test_one_row_through_a_slow_chip_among_healthy_rows() -> None:
    """torus:4x4 --axes 1, chip 5 (row 1) at half speed: row 1 runs the line with chip 5 feeding its ends, rows 0, 2
    and 3 their bidirectional rings. AllReduce on row 1 (n = 4, line of 3, middle 1 hop from each end): the slow
    chip's two cables carry V / 2 each way at b / 2 (V / b = 22.2 ms), the line's links V (22.2 ms); the healthy rows
    take 2 (n - 1)/n V / (2 b) = 16.7 ms, under it. The rings through the slow chip: 41.7 ms."""
    system = System("tpu-v5e", topology="torus:4x4", faults=[ChipSlow(5, 0.5)])
    r = run_collective("all_reduce", system, V, axes=[1])
    ring = run_collective("all_reduce", System("tpu-v5e", topology="torus:4x4", faults=[ChipSlow(5, 0.5)]), V,
                          axes=[1], algorithm="bidirectional")
    assert r.algorithm == "slow_chip_line"
    assert V / B <= r.time_s <= 1.05 * V / B < 0.6 * ring.time_s
    assert r.link_bytes["5->6"] == pytest.approx(V / 2, rel=1e-6)  # a slow cable: every other piece
    assert r.link_bytes["0->1"] == pytest.approx(2 * (4 - 1) / 4 * V / 2, rel=1e-6)  # a healthy row's ring link
