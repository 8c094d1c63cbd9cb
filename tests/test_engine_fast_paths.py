"""The engine's fast paths (issue 16) against the plain code they replace, on small cases.

Each fast path claims to do exactly what the general code does -- the same events in the same order,
so the same spans, times, byte counts and event counts. The references here are the general paths
themselves: SimPy's own `Environment.step` loop, SimPy's `Container` for a pipeline's buffer slots,
the frozen dataclasses' constructors, the multi-flow branch of a `Channel`.
"""
import dataclasses
import random

import pytest
import simpy

from simulator.collectives import run_collective
from simulator.engine.channel import Channel
from simulator.engine.environment import Environment
from simulator.engine.faults import Jitter, LinkDegraded
from simulator.engine.system import System
from simulator.engine.trace import Span, Trace, merge_intervals
from simulator.errors import DeadlockError
from simulator.hardware.specs import get_chip
from simulator.workloads import pipeline
from simulator.workloads.budget import Parallelism
from simulator.workloads.pipeline import Operand, Step, run_steps, uniform_steps, weight_input_steps
from simulator.workloads.simulate import simulate_train
from simulator.workloads.transformer import get_model


class _ContainerSlots:
    """The buffer slots as SimPy's Container (what `pipeline._Slots` replaces)."""

    def __init__(self, env, buffers):
        self.container = simpy.Container(env, capacity=buffers, init=buffers)

    def get(self):
        return self.container.get(1)

    def put(self):
        return self.container.put(1)


def _pipeline_run(steps, buffers, vmem_bytes=None):
    system = System("tpu-v5e")
    if vmem_bytes is not None:  # a small VMEM: the loader waits for space (back-pressure)
        system.chip.vmem.capacity_bytes = vmem_bytes
    run_steps(system, steps, buffers)
    system.run()
    pools = [(p.name, list(p.timeline)) for p in system.trace.pools]
    return system.env.now, list(system.trace.spans), dict(system.trace.bytes_by_interface), pools, \
        system.events_processed


def _mixed_steps():
    """Carried operands, outputs stored back, matmuls and FLOP counts, uneven sizes."""
    steps = weight_input_steps("weight_major", 512, 1024, 2048, weight_blocks=4, input_groups=4)
    steps += [Step(f"s{i}", (Operand(f"s{i}", "x", 1e5 * (1 + i % 3)),), flops=3e8 * (1 + i % 2),
                   outputs=(Operand(f"o{i}", "y", 4e4),)) for i in range(7)]
    return steps


@pytest.mark.parametrize("buffers,vmem", [(1, None), (2, None), (3, None), (2, 2.5e6), (3, 4.5e6)])
def test_pipeline_slots_do_what_simpys_container_does(monkeypatch, buffers, vmem):
    monkeypatch.setattr(pipeline._Pipeline, "skip_granted", False)  # every grant an event, as the Container's
    fast = _pipeline_run(_mixed_steps(), buffers, vmem)
    monkeypatch.setattr(pipeline, "_Slots", _ContainerSlots)
    plain = _pipeline_run(_mixed_steps(), buffers, vmem)
    assert fast == plain  # end time, every span in order, bytes, VMEM timelines, event count


def _random_steps(rng, tag, n):
    """``n`` steps with equal-time loads and computes (1 us units of v5e HBM and MXU), carried operands, second
    operands, outputs, zero-byte loads and zero-FLOP computes: many events of several processes at one instant."""
    unit, steps, previous = 8.19e5, [], []
    for j in range(n):
        ops = [previous[0]] if previous and rng.random() < 0.3 else []
        ops.append(Operand(f"{tag}{j}", "x", unit * rng.choice([0.0, 0.5, 1, 1, 2])))
        if rng.random() < 0.3:
            ops.append(Operand(f"{tag}w{j}", "w", unit * rng.choice([1, 2])))
        outs = (Operand(f"{tag}o{j}", "y", unit * rng.choice([0.5, 1])),) if rng.random() < 0.5 else ()
        steps.append(Step(f"{tag}{j}", tuple(ops), flops=1.97e8 * rng.choice([0, 1, 1, 2, 3]), outputs=outs))
        previous = ops
    return steps


def _random_pipelines(case, **disturb):
    """1 to 3 pipelines on 1 or 2 chips (two may share a chip's DMA and VMEM), VMEM full size or tight; the end
    time (or the deadlock message), every span in order, every pool's timeline, the bytes."""
    rng = random.Random(case)
    system = System("tpu-v5e", n_chips=rng.choice([1, 2]), **disturb)
    vmem = rng.choice([None, 6e6, 9e6])
    for chip in system.chips:
        if vmem is not None:
            chip.vmem.capacity_bytes = vmem
    for k in range(rng.choice([1, 2, 3])):
        run_steps(system, _random_steps(rng, f"p{k}_", rng.randint(3, 12)), rng.choice([1, 2, 3]),
                  chip=rng.choice(system.chips), name=f"p{k}")
    try:
        end = system.run()
    except DeadlockError as err:  # two pipelines on one tight VMEM can starve each other: the same either way
        end = str(err)
    pools = [(p.chip, p.name, list(p.timeline)) for p in system.trace.pools]
    return end, list(system.trace.spans), pools, dict(system.trace.bytes_by_interface), system.events_processed


def _skipping_vs_waiting(monkeypatch, cases, **disturb):
    """How many of ``cases`` differ (in anything but the event count) between skipping granted waits and not."""
    differ = 0
    for case in cases:
        monkeypatch.setattr(pipeline._Pipeline, "skip_granted", True)
        fast = _random_pipelines(case, **disturb)
        monkeypatch.setattr(pipeline._Pipeline, "skip_granted", False)
        plain = _random_pipelines(case, **disturb)
        differ += fast[:-1] != plain[:-1]
        assert fast[-1] <= plain[-1]
    return differ


def test_skipping_granted_waits_changes_nothing_but_the_event_count(monkeypatch):
    assert _skipping_vs_waiting(monkeypatch, range(120)) == 0
    monkeypatch.setattr(pipeline._Pipeline, "skip_granted", True)
    fast = _pipeline_run(_mixed_steps(), 2, 2.5e6)
    monkeypatch.setattr(pipeline._Pipeline, "skip_granted", False)
    plain = _pipeline_run(_mixed_steps(), 2, 2.5e6)
    assert fast[:-1] == plain[:-1] and fast[-1] < plain[-1]


def test_skipping_granted_waits_on_jittered_units(monkeypatch):
    """Jitter makes every chip's DMA a `FaultChannel` and its MXU a `FaultUnit` (their own completion paths)."""
    assert _skipping_vs_waiting(monkeypatch, range(40), jitter=Jitter("lognormal", 0.1), seed=7) == 0


def test_skipping_without_the_next_event_check_would_be_caught(monkeypatch):
    """The check above can fail: skipping every wait granted at once, whether or not another event of the instant
    would run first (the guard `simpy_door.pops_next` dropped), reorders the VMEM timelines of some of the seeds.
    (With the wait on a step's ready event in place of the slot's, `_Slots.take_after`, none of these seeds
    reaches an unguarded skip that matters: it is off here.)"""
    monkeypatch.setattr(pipeline, "pops_next", lambda env: True)
    monkeypatch.setattr(pipeline._Slots, "take_after", lambda self, event: False)

    def take(self):
        if self.level >= 1:
            self.level -= 1
            return True
        return False

    def give(self):
        self.level += 1
        if self.waiting is not None:
            self._wake(None)
        return True

    monkeypatch.setattr(pipeline._Slots, "take", take)
    monkeypatch.setattr(pipeline._Slots, "give", give)
    assert _skipping_vs_waiting(monkeypatch, range(120)) > 0


def test_take_after_joins_only_an_event_a_process_already_waits_on():
    env = simpy.Environment()
    slots = pipeline._Slots(env, 1)
    nobody = env.event()
    pipeline._succeed(nobody)
    assert not slots.take_after(nobody) and slots.level == 1  # nobody waits: another could join after us
    waited = env.event()
    waited.callbacks.append(lambda e: None)
    pipeline._succeed(waited)
    assert slots.take_after(waited) and slots.level == 0
    assert not slots.take_after(waited) and slots.level == 0  # no slot left
    env.run()
    slots.level = 1
    assert not slots.take_after(waited)  # processed (callbacks None)


def test_skipping_granted_waits_in_a_training_step(monkeypatch):
    """A data x model training step (pipelines on 8 chips, AllReduces between them, every chip simulated)."""
    cfg = dataclasses.replace(get_model("llama-2-7b"), n_layers=2)

    def step():
        sim = simulate_train(cfg, get_chip("tpu-v5p"), 8, 128, Parallelism(2, 4), fast=False)
        trace = sim.system.trace
        return sim.system.env.now, list(trace.spans), [list(p.timeline) for p in trace.pools], \
            sim.system.events_processed
    fast = step()
    monkeypatch.setattr(pipeline._Pipeline, "skip_granted", False)
    plain = step()
    assert fast[:-1] == plain[:-1] and fast[-1] < plain[-1]


def _inline_vs_stepping(monkeypatch, build):
    fast = build()
    # an environment class with a `step` of its own is run by calling it: here SimPy's own `Environment.step`
    monkeypatch.setattr(Environment, "step", lambda self: simpy.Environment.step(self))
    plain = build()
    assert fast == plain


def test_inlined_run_loop_equals_simpys_step_on_a_pipeline(monkeypatch):
    _inline_vs_stepping(monkeypatch, lambda: _pipeline_run(_mixed_steps(), 2, 2.5e6))


@pytest.mark.parametrize("algorithm", ["unidirectional", "bidirectional"])
def test_inlined_run_loop_equals_simpys_step_on_a_collective(monkeypatch, algorithm):
    def build():
        system = System("tpu-v5e", topology="torus:4x2")
        r = run_collective("all_reduce", system, 3e6, algorithm=algorithm, mode="full")
        return r.time_s, list(system.trace.spans), system.network.link_bytes(), system.events_processed
    _inline_vs_stepping(monkeypatch, build)


def test_inlined_run_loop_raises_a_process_failure_like_simpy():
    system = System("tpu-v5e")

    def broken():
        yield system.env.timeout(1.0)
        raise ValueError("boom")

    system.process(broken(), "broken")
    with pytest.raises(ValueError, match="boom"):
        system.run()
    assert system.env.now == 1.0


def test_uniform_steps_equal_the_dataclass_constructors():
    fast = uniform_steps(5, 3e5, 7e8, label="blk")
    plain = [Step(f"blk{i}", (Operand(f"blk{i}", "blk", 3e5),), flops=7e8) for i in range(5)]
    assert fast == plain and [hash(s.operands[0]) for s in fast] == [hash(s.operands[0]) for s in plain]
    with pytest.raises(dataclasses.FrozenInstanceError):  # still frozen
        fast[0].flops = 1.0


def _channel_spans(starts, sizes, force_general, latency):
    env = simpy.Environment()
    trace = Trace()
    ch = Channel(env, "link 0->1", 1e9, latency, trace=trace)
    if force_general:  # route every transfer through _admit/_schedule, as before the idle fast path
        ch.transfer = lambda nbytes, label="", kind="transfer": _general_transfer(ch, nbytes, label, kind)
    done = []

    def start(t, n, i):
        yield env.timeout(t)
        done.append((i, (yield ch.transfer(n, f"t{i}", "load"))))

    for i, (t, n) in enumerate(zip(starts, sizes, strict=True)):
        env.process(start(t, n, i))
    env.run()
    return done, trace.spans, ch.bytes_carried


def _general_transfer(ch, nbytes, label, kind):
    from simulator.engine.channel import _Flow

    event = ch.env.event()
    if nbytes <= 0:
        return event.succeed(ch.env.now)
    flow = _Flow(nbytes, event, label, kind)
    if ch.latency_s > 0:
        ch.env.timeout(ch.latency_s).callbacks.append(lambda _e: ch._admit(flow))
    else:
        ch._admit(flow)
    return event


@pytest.mark.parametrize("starts,sizes", [([0.0, 0.0, 0.5e-3], [1e6, 2e6, 5e5]), ([0.0, 2e-3, 2e-3], [1e6, 1e6, 3e6]),
                                          ([0.0, 1e-3, 4e-3], [1e6, 1e6, 1e6])])
@pytest.mark.parametrize("latency", [0.0, 3e-4])
def test_idle_channel_fast_path_equals_the_general_path(starts, sizes, latency):
    fast = _channel_spans(starts, sizes, False, latency)
    plain = _channel_spans(starts, sizes, True, latency)
    assert fast == plain
    assert all(isinstance(s, Span) for s in fast[1])


def test_span_is_an_immutable_record_with_keywords_and_defaults():
    s = Span(0, "mxu", "mm", 1.0, 3.0, flops=5.0)
    assert (s.kind, s.nbytes, s.flops, s.duration_s) == ("compute", 0.0, 5.0, 2.0)
    with pytest.raises(AttributeError):
        s.end = 4.0


def _without_inline_completion(monkeypatch, build):
    fast = build()
    monkeypatch.setattr(Channel, "complete_inline", False)
    plain = build()
    assert fast[:-1] == plain[:-1]  # all but the event count
    assert fast[-1] < plain[-1]  # one event fewer per lone transfer


def test_inline_completion_of_a_lone_flow_changes_nothing_but_the_event_count(monkeypatch):
    _without_inline_completion(monkeypatch, lambda: _pipeline_run(_mixed_steps(), 2, 2.5e6))


@pytest.mark.parametrize("disturb", [{}, {"faults": [LinkDegraded(0, 1, 0.5)]},
                                     {"jitter": Jitter("lognormal", 0.1), "seed": 7}])  # jitter: FaultChannels
def test_inline_completion_on_links_and_fault_channels(monkeypatch, disturb):
    def build():
        system = System("tpu-v5e", topology="torus:4x2", **disturb)  # the plain path: aggregation has no events
        r = run_collective("all_reduce", system, 3e6, algorithm="bidirectional", mode="full", aggregate=False)
        return r.time_s, list(system.trace.spans), system.network.link_bytes(), system.events_processed
    _without_inline_completion(monkeypatch, build)


def _merged_by_lists(intervals):
    """The union as `merge_intervals` computed it before (mutable pairs)."""
    merged = []
    for start, end in sorted(intervals):
        if end <= start:
            continue
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def test_merge_intervals_equals_the_list_based_union():
    rng = random.Random(16)
    grid = [k / 4 for k in range(6)]  # shared endpoints: touching and nested intervals

    def pick():
        return rng.choice(grid) if rng.random() < 0.5 else rng.random()

    for _ in range(500):
        intervals = [(pick(), pick()) for _ in range(rng.randint(0, 10))]
        assert merge_intervals(intervals) == _merged_by_lists(intervals)


def _validate_in_full(steps, chip, buffers):
    """`pipeline.validate_steps` as it was before its one-operand fast path: every step through `_check_step`."""
    from simulator.units import check_bytes

    pipeline.check_int(buffers, name="buffers", hint="1 = serial, 2 = double buffering")
    previous = {}
    for step in steps:
        pipeline._check_step(step, previous)
        previous = {op.key: op.nbytes for op in step.operands}
        need = 0.0
        for op in step.operands + step.outputs:
            if op.nbytes.__class__ is not float or not 0.0 <= op.nbytes <= pipeline.MAX_BYTES:
                check_bytes(op.nbytes, name=f"{op.key} nbytes")
            need += op.nbytes
        if need > chip.vmem.capacity_bytes:
            raise pipeline.CapacityError(
                f"block {step.name!r} needs {need:.0f} bytes of VMEM (operands and outputs) but chip "
                f"{chip.index} VMEM holds only {chip.vmem.capacity_bytes:.0f} bytes; use smaller blocks")


def _raised(fn):
    try:
        fn()
    except Exception as err:  # noqa: BLE001 -- the type and message are what is compared
        return type(err), str(err)
    return None


@pytest.mark.parametrize("bad", [{}, {"flops": -1.0}, {"flops": float("nan")}, {"flops": 5}, {"flops": "many"},
                                 {"nbytes": -3.0}, {"nbytes": float("inf")}, {"nbytes": 2 ** 20},
                                 {"nbytes": "big"}, {"nbytes": 1e12}, {"carried": 2e5}, {"carried": 1e5}])
def test_one_operand_validation_says_what_the_full_check_says(bad):
    chip = System("tpu-v5e").chip
    steps = [Step(f"s{i}", (Operand(f"k{i}", "x", 1e5),), flops=1e6) for i in range(3)]
    if "carried" in bad:  # the last step carries step 1's operand, at that size or another
        steps[2] = Step("s2", (Operand("k1", "x", bad["carried"]),), flops=1e6)
    else:
        steps[1] = Step("s1", (Operand("k1", "x", bad.get("nbytes", 1e5)),), flops=bad.get("flops", 1e6))
    fast = _raised(lambda: pipeline.validate_steps(steps, chip, 2))
    assert fast == _raised(lambda: _validate_in_full(steps, chip, 2))
    assert (fast is None) == (bad in ({}, {"flops": 5}, {"nbytes": 2 ** 20}, {"carried": 1e5}))
