"""`Chip.fold_work` (a training step's op without running its units, untraced) against the units run: the op's
loads and stores through the DMA at once with its FLOPs on the MXU, then its vector FLOPs on the VPU, in SimPy.
The end instant is the same float, and the counters and the units' states are left alike."""
from __future__ import annotations

import itertools

import pytest
import simpy

from simulator.engine.chip import Chip
from simulator.engine.trace import Trace
from simulator.hardware.calibration import get_calibration
from simulator.hardware.specs import get_chip

SIZES = [0.0, 1.0, 3e6, 1.7e8, 1.7e8 + 1.0, 9.3e9]
FLOPS = [0.0, 2.5e12, 7.1e14]


def _chip(name: str, calibrated: bool, start: float) -> Chip:
    env = simpy.Environment(initial_time=start)
    spec = get_chip(name)
    return Chip(env, spec, 0, Trace(enabled=False), get_calibration(name) if calibrated else None)


def _run(chip: Chip, read: float, write: float, flops: float, vector: float) -> float:
    env = chip.env

    def op():
        events = []
        if read:
            events.append(chip.load(read, "r", "op"))
        if write:
            events.append(chip.store(write, "w", "op"))
        if flops:
            events.append(chip.compute(flops, "op", useful_flops=flops / 2))
        if events:
            yield simpy.AllOf(env, events)
        if vector:
            yield chip.vector(vector, "op")
    env.process(op())
    env.run()
    return env.now


def _state(chip: Chip) -> tuple:
    t = chip.trace
    return (dict(t.bytes_by_interface), {k: dict(v) for k, v in t.bytes_by_tensor.items()}, t.flops_total,
            t.padded_flops_total, chip.dma.bytes_carried, chip.dma._flows, chip.mxu._free_at, chip.vpu._free_at)


@pytest.mark.parametrize(("name", "calibrated"), [("h100", True), ("tpu-v5e", False), ("a100", True)])
@pytest.mark.parametrize("start", [0.0, 0.3141592653589793, 12.2])
def test_a_folded_op_ends_when_its_units_would(name, calibrated, start):
    for read, write, flops, vector in itertools.product(SIZES, SIZES[:4], FLOPS, [0.0, 4.4e9]):
        ran, folded = _chip(name, calibrated, start), _chip(name, calibrated, start)
        end = _run(ran, read, write, flops, vector)
        got = folded.fold_work(read, write, flops, flops / 2, vector, "r", "w")
        assert got == (end if (read or write or flops or vector) else start), (read, write, flops, vector)
        assert _state(folded) == _state(ran)
        assert folded.dma._last_update == (ran.dma._last_update if (read or write) else folded.dma._last_update)


def test_nothing_is_folded_where_a_unit_is_busy_or_the_trace_keeps_spans():
    chip = _chip("h100", True, 0.0)
    chip.load(1e6, "r")
    assert chip.fold_work(1e6, 1e6, 1e9, None, 0.0, "r", "w") is None  # (the DMA has a flow)
    traced = Chip(simpy.Environment(), get_chip("h100"), 0, Trace(enabled=True))
    assert traced.fold_work(1e6, 1e6, 1e9, None, 0.0, "r", "w") is None


def test_a_slow_units_op_is_not_folded():
    """A slow chip's MXU or VPU is a `FaultUnit` (its speed applied as it runs): the op runs, so the slow-down
    stays in."""
    from simulator.engine.disturb import FaultUnit

    for unit in ("mxu", "vpu"):
        chip = _chip("h100", True, 0.0)
        setattr(chip, unit, FaultUnit(chip.env, unit, chip=0, trace=chip.trace, speed=0.5))
        assert chip.fold_work(1e6, 1e6, 1e9, None, 1e6, "r", "w") is None
