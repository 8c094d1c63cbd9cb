"""The memory budget (simulator/engine/memory_budget.py) and the structures it guards: collective
schedules refused up front with their estimate, ring closed forms priced on pieces of steps instead of
dense position x step tables (issue 34)."""
from __future__ import annotations

import tracemalloc

import pytest

from simulator import System
from simulator.collectives import get_algorithm
from simulator.collectives.api import plan_collective
from simulator.collectives.groups import collective_groups, rings_along
from simulator.collectives.multi_axis import _table
from simulator.collectives.schedule import TRANSFER_BYTES
from simulator.collectives.timing import chain_phase_profile
from simulator.engine.memory_budget import (
    DEFAULT_FRACTION,
    MemoryBudgetError,
    budget_bytes,
    check_memory,
    machine_memory_bytes,
    memory_budget,
)
from simulator.frontend.cli import main
from simulator.hardware.specs import get_chip


def _peak(fn):
    """(fn's result or the exception it raised, peak bytes Python allocated meanwhile)."""
    tracemalloc.start()
    try:
        out = fn()
    except MemoryBudgetError as err:
        out = err
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return out, peak


def test_default_budget_is_a_fraction_of_the_machine_and_a_block_can_set_its_own(monkeypatch):
    monkeypatch.delenv("PODSIM_MAX_MEMORY", raising=False)
    assert budget_bytes() == pytest.approx(DEFAULT_FRACTION * machine_memory_bytes())
    with memory_budget(1e6):
        assert budget_bytes() == 1e6
        check_memory(1e6, "work", "hint")  # at the budget: allowed
        with pytest.raises(MemoryBudgetError, match=r"work would need about 2 MB .* budget of 1 MB .*; hint"):
            check_memory(2e6, "work", "hint")
    monkeypatch.setenv("PODSIM_MAX_MEMORY", "3e6")  # how sweep workers inherit --max-memory
    assert budget_bytes() == 3e6


def test_direct_schedule_is_refused_before_any_transfer_is_built():
    system = System(get_chip("h100"), topology="switch:256")
    transfers = 256 * 255  # one_shot: every chip to every other, once
    with memory_budget(transfers * TRANSFER_BYTES / 4):
        err, peak = _peak(lambda: plan_collective("all_reduce", system, 1e6, algorithm="one_shot"))
    assert isinstance(err, MemoryBudgetError) and f"about {transfers:,} transfers" in str(err)
    assert peak < transfers * TRANSFER_BYTES / 4  # refused up front: the schedule was never allocated


def test_line_schedule_is_refused_up_front_with_its_transfer_count():
    system = System(get_chip("h100"), topology="line:512")
    n = 512
    transfers = 2 * n * (n - 1)  # AllReduce by line: RS then AG, each chain from o hops n-1-o right and o left
    with memory_budget(transfers * TRANSFER_BYTES / 4):
        err, peak = _peak(lambda: plan_collective("all_reduce", system, 1e6, algorithm="line"))
    assert isinstance(err, MemoryBudgetError) and f"about {transfers:,} transfers" in str(err)
    assert peak < transfers * TRANSFER_BYTES / 4


def test_cli_refusal_is_one_line_exit_2_naming_the_estimate(capsys):
    status = main(["collective", "all_reduce", "--chip", "h100", "--topology", "switch:64", "--bytes", "1MB",
                   "--algorithm", "one_shot", "--max-memory", "1MB"])
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1
    assert f"about {64 * 63:,} transfers" in err and "budget of 1 MB" in err


def _ring_profiles(topology, chip, name, compress, what="ag", split=0.5):
    system = System(get_chip(chip), topology=topology)
    net = system.network
    groups = collective_groups(net, None, None)
    algorithm, group = get_algorithm(name), groups[0]
    per = algorithm.split_gather_units if what == "ag" else algorithm.split_reduce_units
    out = []
    for a in range(len(group.sizes)):
        rings = rings_along(groups, tuple(0 for _ in group.sizes), a)
        out.append(chain_phase_profile(net, rings, algorithm.closed, algorithm.steps(group.sizes[a]),
                                       lambda n, i, d, h: per(n, i, d, h, split), _table(algorithm, what, split),
                                       compress=compress))
    return out


@pytest.mark.parametrize("topology,chip,name", [("ring:7", "tpu-v5p", "bidirectional"),
                                                ("ring:8", "tpu-v5p", "bidirectional"),
                                                ("torus:4x6", "tpu-v5p", "bidirectional"),
                                                ("ring:12", "h100", "unidirectional"),
                                                ("nodes:2:8", "h100", "unidirectional")])
@pytest.mark.parametrize("what,split", [("ag", 0.5), ("rs", 0.5), ("ag", 0.3), ("rs", 0.7)])
def test_pieces_price_as_the_dense_table(topology, chip, name, what, split):
    dense = _ring_profiles(topology, chip, name, False, what, split)
    pieces = _ring_profiles(topology, chip, name, True, what, split)
    for p0, p1 in zip(dense, pieces, strict=True):
        assert p1.busiest == pytest.approx(p0.busiest, rel=1e-12)
        for unit_bytes in (1.0, 1e3, 1e6):
            assert p1.time(unit_bytes) == pytest.approx(p0.time(unit_bytes), rel=1e-12)


def test_a_long_ring_is_priced_without_a_position_by_step_table():
    n = 4096  # a dense (n, n/2) float table is 64 MiB; on pieces it is a few values per position
    profile, peak = _peak(lambda: _ring_profiles(f"ring:{n}", "tpu-v5p", "bidirectional", None)[0])
    assert peak < 40_000 * n  # memory per position (routes, ids, a few pieces), not per position x step
    # the closed form of an even bidirectional ring: n/2 steps, the last one carrying half a bundle
    link = System(get_chip("tpu-v5p"), topology="ring:2").network
    edge = next(iter(link.graph.edges.values()))
    per_byte = (n // 2 - 0.5) / edge["bandwidth_bytes_per_s"]
    assert profile.time(1e6) == pytest.approx(n // 2 * edge["latency_s"] + 1e6 * per_byte, rel=1e-9)


def test_dense_pricing_past_the_budget_is_refused_before_its_table():
    system = System(get_chip("h100"), topology="line:2048")
    net, groups = system.network, collective_groups(system.network, None, None)
    line = get_algorithm("line")
    rings = rings_along(groups, (0,), 0)
    with memory_budget(64e6):  # the dense table alone: 2048 x 2047 x 8 B = 34 MB; pricing ~48 B a cell
        err, peak = _peak(lambda: chain_phase_profile(net, rings, False, 2047, lambda *a: 0.0,
                                                      _table(line, "ag", 0.5)))
    assert isinstance(err, MemoryBudgetError) and "2,048 ring positions x 2,047 steps" in str(err)
    assert peak < 1e6


@pytest.mark.benchmark
@pytest.mark.parametrize("topology,chip", [("ring:65536", "h100"), ("switch:4096", "h100"), ("line:4096", "h100")])
def test_largest_accepted_sizes_are_refused_up_front(capsys, topology, chip):
    status = main(["collective", "all_reduce", "--chip", chip, "--topology", topology, "--bytes", "1MB",
                   "--max-memory", "4GiB"])
    err = capsys.readouterr().err
    assert status == 2 and "transfers would need about" in err.strip().splitlines()[-1]
