"""Invariants, property-tested: bytes conserved, capacity respected, bounds held, monotone, deterministic."""
import json
import os
import subprocess
import sys

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from scenarios import double_buffer
from simulator import analytic
from simulator.collectives import plan_collective, run_collective
from simulator.engine.memory import MemoryPool
from simulator.engine.system import System
from simulator.errors import CapacityError
from simulator.hardware.specs import get_chip
from simulator.report.export import chrome_trace
from simulator.workloads.budget import Parallelism
from simulator.workloads.pipeline import Operand, Step, run_steps
from simulator.workloads.simulate import simulate_decode
from simulator.workloads.transformer import get_model

KINDS = ["all_gather", "reduce_scatter", "all_reduce", "all_to_all", "broadcast"]
TOPOLOGIES = ["ring:5", "line:4", "torus:3x4", "mesh:3x3", "torus:2x2x2", "switch:6", "torus:4x4"]


@settings(max_examples=40, deadline=None)
@given(kind=st.sampled_from(KINDS), topology=st.sampled_from(TOPOLOGIES), nbytes=st.integers(1, 10**9),
       chunks=st.integers(1, 4))
def test_link_bytes_add_up_to_what_the_transfers_carry(kind, topology, nbytes, chunks):
    """Every byte a transfer sends crosses each link of its route once: per-link counts add up."""
    system = System(topology=topology, trace=False)
    plan = plan_collective(kind, system, float(nbytes), chunks=chunks, mode="full")
    expected = sum(t.nbytes * (len(system.network.routes(t.src, t.dst)[0]) - 1)
                   for t in plan.schedule.transfers if t.src is not None)
    r = run_collective(kind, System(topology=topology, trace=False), float(nbytes), chunks=chunks, mode="full")
    assert r.total_link_bytes == pytest.approx(expected, rel=1e-9)
    assert sum(r.link_bytes.values()) == pytest.approx(expected, rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(st.tuples(st.integers(1, 100), st.floats(0, 3), st.floats(0, 3)), min_size=1, max_size=30),
       capacity=st.integers(100, 300))
def test_pool_never_exceeds_capacity_nor_goes_negative(ops, capacity):
    env = simpy.Environment()
    pool = MemoryPool(env, "vmem", capacity)
    seen = []

    def user(nbytes, start, hold):
        yield env.timeout(start)
        alloc = yield pool.allocate(nbytes, "x")
        seen.append(pool.live_bytes)
        yield env.timeout(hold)
        pool.free(alloc)
        seen.append(pool.live_bytes)

    for nbytes, start, hold in ops:
        env.process(user(nbytes, start, hold))
    env.run()
    lives = [live for _, live in pool.timeline]
    assert all(0 <= v <= capacity for v in lives + seen)
    assert pool.peak_bytes == max(lives) and pool.live_bytes == 0


@settings(max_examples=40, deadline=None)
@given(blocks=st.lists(st.tuples(st.floats(0.0, 5), st.floats(0.0, 5)), min_size=1, max_size=20),
       buffers=st.integers(1, 4))
def test_pipeline_time_lies_between_its_bounds(blocks, buffers):
    """Lower bound: the busier resource; upper bound: everything serial (REFERENCE: max vs sum)."""
    spec = get_chip("tpu-v5e")
    steps = [Step(f"b{i}", (Operand(f"b{i}", "x", mb * 1e6),), flops=gf * 1e9) for i, (mb, gf) in enumerate(blocks)]
    system = System(spec)
    run_steps(system, steps, buffers, reserve_vmem=False)
    system.run()
    loads = sum(mb * 1e6 for mb, _ in blocks) / spec.hbm_bandwidth_bytes_per_s
    computes = sum(gf * 1e9 for _, gf in blocks) / spec.peak_flops_per_s()
    assert max(loads, computes) * (1 - 1e-9) <= system.env.now <= (loads + computes) * (1 + 1e-9)
    m = system.metrics()
    assert m["lower_bound_s"] * (1 - 1e-9) <= system.env.now <= m["upper_bound_s"] * (1 + 1e-9)


@settings(max_examples=30, deadline=None)
@given(factor=st.floats(1.0, 8.0), blocks=st.integers(1, 12), buffers=st.integers(1, 3),
       load_mb=st.floats(0.1, 50), gflops=st.floats(0.1, 500))
def test_more_bandwidth_or_flops_is_never_slower(factor, blocks, buffers, load_mb, gflops):
    base = get_chip("tpu-v5e")
    faster = base.replace(hbm_bandwidth_bytes_per_s=base.hbm_bandwidth_bytes_per_s * factor,
                          peak_bf16_flops_per_s=base.peak_bf16_flops_per_s * factor)

    def time(chip):
        return double_buffer.run(blocks=blocks, buffers=buffers, load_bytes=load_mb * 1e6, compute_flops=gflops * 1e9,
                                 chip=chip, clamp_buffers=True, trace=False).metrics["end_to_end_s"]

    assert time(faster) <= time(base) * (1 + 1e-12)


@settings(max_examples=30, deadline=None)
@given(kind=st.sampled_from(KINDS), topology=st.sampled_from(TOPOLOGIES), small=st.integers(8, 10**8),
       grow=st.floats(1.0, 10.0))
def test_more_data_is_never_faster_and_faster_links_never_slower(kind, topology, small, grow):
    big = small * grow
    t_small = run_collective(kind, System(topology=topology, trace=False), float(small)).time_s
    t_big = run_collective(kind, System(topology=topology, trace=False), float(big)).time_s
    assert t_big >= t_small * (1 - 1e-9)
    fast_chip = get_chip("tpu-v5e").replace(ici_bandwidth_bytes_per_s=9e10)  # twice the v5e link bandwidth
    t_fast = run_collective(kind, System(fast_chip, topology=topology, trace=False), float(small)).time_s
    t_base = run_collective(kind, System("tpu-v5e", topology=topology, trace=False), float(small)).time_s
    assert t_fast <= t_base * (1 + 1e-9)


@pytest.mark.parametrize("model", ["gpt2", "llama-2-7b"])
def test_bigger_batches_never_make_a_decode_step_faster(model):
    cfg, chip = get_model(model), get_chip("tpu-v5p")
    times = [simulate_decode(cfg, chip, b, 256, Parallelism(), trace=False).env.now for b in (1, 2, 8, 32, 128)]
    assert times == sorted(times)


def test_collective_time_is_at_least_the_busiest_link_over_its_bandwidth():
    for kind in KINDS:
        r = run_collective(kind, System(topology="torus:4x4", trace=False), 64e6, mode="full")
        assert r.time_s >= r.max_link_bytes / 4.5e10 * (1 - 1e-9)


def test_capacity_error_before_the_run_not_during():
    system = System()
    with pytest.raises(CapacityError):
        run_steps(system, [Step("big", (Operand("w", "w", 1e12),), flops=1.0)])
    assert system.env.now == 0


SCRIPT = """
import json, sys
from scenarios import collective_matmul
from simulator.report.export import chrome_trace
r = collective_matmul.run(n=4, B=256, D=512, F=1024, verify=False)
sys.stdout.write(json.dumps(chrome_trace(r.trace), sort_keys=True) + r.dumps())
"""


def test_traces_are_byte_identical_across_runs_and_processes():
    outputs = set()
    for seed in ("0", "1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 0, done.stderr
        outputs.add(done.stdout)
    assert len(outputs) == 1
    from scenarios import collective_matmul

    r = collective_matmul.run(n=4, B=256, D=512, F=1024, verify=False)
    assert json.dumps(chrome_trace(r.trace), sort_keys=True) + r.dumps() == outputs.pop()


def test_closed_form_pipeline_is_monotone_in_buffers():
    times = [analytic.pipeline_time_blocks([3, 0.1, 3, 0.1], [0.1, 3, 0.1, 3], b) for b in (1, 2, 3, 4)]
    assert times == sorted(times, reverse=True)
