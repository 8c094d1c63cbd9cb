"""Block pipelines simulated against the closed forms, for many block counts, buffer depths and chips."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import analytic
from simulator.engine.system import System
from simulator.errors import CapacityError, PodsimError
from simulator.hardware.specs import PRESETS
from simulator.workloads.pipeline import Operand, Step, run_steps, uniform_steps, weight_input_steps

CHIPS = sorted(PRESETS)


def _simulate(chip, steps, buffers, reserve_vmem=True):
    system = System(chip)
    run_steps(system, steps, buffers, reserve_vmem=reserve_vmem)
    system.run()
    return system


@settings(max_examples=60, deadline=None)
@given(blocks=st.integers(1, 40), buffers=st.integers(1, 6), chip=st.sampled_from(CHIPS),
       load_mb=st.floats(0.01, 16), gflops=st.floats(0.001, 200))  # every preset holds a 16 MB block
def test_uniform_blocks_match_pipeline_time(blocks, buffers, chip, load_mb, gflops):
    spec = PRESETS[chip]
    nbytes, flops = load_mb * 1e6, gflops * 1e9
    system = _simulate(chip, uniform_steps(blocks, nbytes, flops), buffers)
    a, c = nbytes / spec.hbm_bandwidth_bytes_per_s, flops / spec.peak_flops_per_s()
    effective = min(buffers, int(spec.vmem_capacity_bytes // nbytes))  # VMEM may hold fewer blocks
    assert system.env.now == pytest.approx(analytic.pipeline_time(blocks, a, c, effective), rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(blocks=st.lists(st.tuples(st.floats(0.01, 5), st.floats(0.01, 5)), min_size=1, max_size=25),
       buffers=st.integers(1, 5))
def test_uneven_blocks_match_the_recurrence(blocks, buffers):
    spec = PRESETS["tpu-v5e"]
    steps = [Step(f"b{i}", (Operand(f"b{i}", "x", mb * 1e6),), flops=gf * 1e9) for i, (mb, gf) in enumerate(blocks)]
    system = _simulate("tpu-v5e", steps, buffers)
    loads = [mb * 1e6 / spec.hbm_bandwidth_bytes_per_s for mb, _ in blocks]
    computes = [gf * 1e9 / spec.peak_flops_per_s() for _, gf in blocks]
    assert system.env.now == pytest.approx(analytic.pipeline_time_blocks(loads, computes, buffers), rel=1e-9)


def test_deeper_prefetch_helps_uneven_blocks():
    # a long first compute: with 3 buffers two loads finish during it instead of one
    loads, computes = [1, 1, 1, 1], [4, 0.01, 0.01, 0.01]
    two, three = (analytic.pipeline_time_blocks(loads, computes, b) for b in (2, 3))
    assert (two, three) == (pytest.approx(7.01), pytest.approx(6.01))
    spec = PRESETS["tpu-v5e"]
    steps = [Step(f"b{i}", (Operand(f"b{i}", "x", a * spec.hbm_bandwidth_bytes_per_s),),
                  flops=c * spec.peak_flops_per_s()) for i, (a, c) in enumerate(zip(loads, computes, strict=True))]
    sims = [_simulate(spec, steps, b, reserve_vmem=False).env.now for b in (2, 3)]
    assert sims == [pytest.approx(7.01), pytest.approx(6.01)]


def test_uniform_recurrence_equals_closed_form():
    for q, a, c, b in [(5, 1.0, 2.0, 2), (5, 2.0, 1.0, 3), (7, 1.0, 1.0, 1)]:
        assert analytic.pipeline_time_blocks([a] * q, [c] * q, b) == pytest.approx(analytic.pipeline_time(q, a, c, b))


def test_vmem_back_pressure_limits_prefetch_depth():
    # 3 buffers asked for, but VMEM only holds 2 blocks: the run behaves like double buffering
    spec = PRESETS["tpu-v5e"].replace(vmem_capacity_bytes=2e6)
    steps = uniform_steps(6, 1e6, 1e9)
    system = _simulate(spec, steps, buffers=3)
    a, c = 1e6 / spec.hbm_bandwidth_bytes_per_s, 1e9 / spec.peak_flops_per_s()
    assert system.env.now == pytest.approx(analytic.pipeline_time(6, a, c, 2), rel=1e-9)
    assert system.chip.vmem.peak_bytes == 2e6


def test_block_larger_than_vmem_fails_before_the_run():
    system = System("tpu-v5e")
    with pytest.raises(CapacityError, match="x0"):
        run_steps(system, uniform_steps(1, 1e9, 1.0), buffers=2)
    assert system.env.now == 0 and not system.trace.spans


@pytest.mark.parametrize("buffers", [0, -1, 1.5, True])
def test_bad_buffer_counts(buffers):
    with pytest.raises(PodsimError, match="buffers"):
        run_steps(System(), uniform_steps(2, 1.0, 1.0), buffers=buffers)


@pytest.mark.parametrize("order,weights_read,inputs_read", [
    ("input_major", 4 * 8e6, 4e6),   # every input group re-reads both weight blocks
    ("weight_major", 8e6, 2 * 4e6),  # weights once, inputs once per weight block
])
def test_loop_order_decides_hbm_traffic(order, weights_read, inputs_read):
    steps = weight_input_steps(order, batch=1000, d_in=2000, d_out=2000, weight_blocks=2, input_groups=4)
    tile = max(sum(o.nbytes for o in s.operands + s.outputs) for s in steps)
    system = _simulate(PRESETS["tpu-v5e"].replace(vmem_capacity_bytes=tile), steps, buffers=2)
    by_tensor = system.trace.bytes_by_tensor
    assert by_tensor["weights"]["read"] == weights_read
    assert by_tensor["inputs"]["read"] == inputs_read
    assert by_tensor["outputs"]["written"] == 2 * 1000 * 2000
    assert system.chip.vmem.peak_bytes <= tile


def test_weight_input_steps_rejects_bad_split():
    with pytest.raises(PodsimError, match="weight_blocks=3"):
        weight_input_steps("weight_major", 1000, 2000, 2000, weight_blocks=3, input_groups=4)
    with pytest.raises(PodsimError, match="order='diagonal'"):
        weight_input_steps("diagonal", 1000, 2000, 2000, 2, 4)
