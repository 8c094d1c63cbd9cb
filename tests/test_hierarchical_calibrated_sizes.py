"""Calibrated `hierarchical_pipelined` AllReduce on two H100 nodes of 8 (issue 31): the forecast grows with the bytes.

Oracles, none taken from the code's output: a calibrated forecast is never below the ideal topology bound (calibrated
links are no faster than their line rate, and NCCL's protocols add latency, never bandwidth); a forecast of more bytes
on the same algorithm is no faster (links only ever carry more); and the closed form that `auto` and the protocol
choice rank by prices the array the simulation moves -- within the spread the module docstring states for two
levels, not a quarter of it (the chunk count `prepare` chose was lost with the job's cache when the calibrated
closed form priced the job on its calibrated network: 433 us at 256 MiB against 1.85 ms simulated).
"""
from __future__ import annotations

import pytest

from simulator import System
from simulator.collectives import run_collective

SIZES = [2**k for k in range(24, 31)]  # 16 MiB .. 1 GiB


def _runs(protocol: str) -> list:
    return [run_collective("all_reduce", System("h100", topology="nodes:2:8", calibrated=True, trace=False), v,
                           algorithm="hierarchical_pipelined", protocol=protocol) for v in SIZES]


@pytest.mark.parametrize("protocol", ["LL", "LL128", "Simple"])
def test_each_protocol_grows_with_the_bytes(protocol: str) -> None:
    runs = _runs(protocol)
    for small, big in zip(runs, runs[1:], strict=False):
        assert big.analytic_s >= small.analytic_s, (small.nbytes, big.nbytes)
        assert big.time_s >= small.time_s, (small.nbytes, big.nbytes)
    for r in runs:
        assert r.analytic_s >= r.topology_bound_s  # the ideal bound: a forecast is never below it
        # the closed form prices the array the simulation moves (it priced a quarter of it)
        assert r.analytic_s == pytest.approx(r.time_s, rel=0.1), r.nbytes


def test_auto_protocol_grows_with_the_bytes_and_picks_the_fastest() -> None:
    """Where the protocol changes with the size, the one picked is the fastest simulated (to within 3%, the closed
    forms' spread between protocols this close: 64 MiB, Simple 522 us against LL128's 511)."""
    runs = _runs("auto")
    for small, big in zip(runs, runs[1:], strict=False):
        assert big.analytic_s >= small.analytic_s, (small.nbytes, big.nbytes)
        assert big.time_s >= small.time_s, (small.nbytes, big.nbytes)
    each = {p: _runs(p) for p in ("LL", "LL128", "Simple")}
    for i, r in enumerate(runs):
        assert r.time_s <= 1.03 * min(each[p][i].time_s for p in each), (r.nbytes, r.protocol)


def test_ideal_grows_with_the_bytes() -> None:
    runs = [run_collective("all_reduce", System("h100", topology="nodes:2:8", trace=False), v,
                           algorithm="hierarchical_pipelined") for v in SIZES]
    for small, big in zip(runs, runs[1:], strict=False):
        assert big.time_s >= small.time_s and big.analytic_s >= small.analytic_s, (small.nbytes, big.nbytes)
    for r in runs:
        assert r.analytic_s == pytest.approx(r.time_s, rel=0.05), r.nbytes
