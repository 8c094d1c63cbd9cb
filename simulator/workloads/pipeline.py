"""Blocked computations: a sequence of steps, each loading its operands into VMEM and computing.

A `Step` names the operands it needs in VMEM (by key), the work it does, and the outputs it stores.
`run_steps` runs them with ``buffers`` VMEM buffers: one loader process fetches the operands of step
i + buffers - 1 while step i computes (1 = serial, 2 = double buffering, more = deeper prefetch). An
operand whose key also appears in the next step stays resident and is not loaded again; that is how
a loop order (weight-stationary or input-stationary) turns into HBM traffic.

A step may wait on an event before computing (``before``, e.g. a collective of the previous layer)
and signal after it (``after``), so multi-chip workloads can interleave pipelines and collectives.

Timing assumptions: one loader issues its DMAs one after another (a single DMA stream); stores are
issued when a step's compute ends and run concurrently with later loads, fairly sharing the HBM
channel (see `simulator.engine.channel`). VMEM for a step (its new operands and outputs) is reserved before
its loads start and waits for space when VMEM is full (back-pressure).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import simpy

from simulator.engine.chip import Chip
from simulator.engine.gcpause import gc_paused
from simulator.engine.memory import Allocation
from simulator.engine.simpy_door import fire_now, pops_next, succeed_urgent
from simulator.engine.system import System
from simulator.engine.watch import expect_events
from simulator.errors import CapacityError, PodsimError
from simulator.units import MAX_BYTES, check_bytes, check_int, positive, positive_int

_new, _set = object.__new__, object.__setattr__


@dataclass(frozen=True)
class Operand:
    """A tensor block: ``key`` identifies it for residency, ``label`` names its tensor in byte counts."""

    key: str
    label: str
    nbytes: float


@dataclass(frozen=True)
class Step:
    """One block of work: operands needed in VMEM, then a matmul ``(m, k, n)`` or ``flops`` on the MXU."""

    name: str
    operands: tuple[Operand, ...]
    matmul: tuple[int, int, int] | None = None
    flops: float = 0.0
    outputs: tuple[Operand, ...] = ()
    dtype: str = "bf16"
    vector_flops: float = 0.0  #: element-wise work on the VPU after the MXU work (norms, softmax, activations)
    useful_flops: float | None = None  #: when ``flops`` includes MXU padding, the unpadded count
    before: Callable[[], simpy.Event] | None = field(default=None, compare=False)  #: wait for it before computing
    after: Callable[[], None] | None = field(default=None, compare=False)  #: called once the compute is done


def validate_steps(steps: Sequence[Step], chip: Chip, buffers: int, reserve_vmem: bool = True) -> None:
    """Raise before the run: bad buffer count, negative sizes, or a step that can never fit in VMEM."""
    check_int(buffers, name="buffers", hint="1 = serial, 2 = double buffering")
    if len(steps) > MAX_STEPS:
        raise PodsimError(f"{len(steps)} steps; at most {MAX_STEPS:,} are simulated -- use larger blocks")
    capacity = chip.vmem.capacity_bytes if reserve_vmem else math.inf
    previous: tuple[Operand, ...] = ()  # the operands of the step before
    for step in steps:
        operands = step.operands
        if step.outputs or len(operands) != 1 or step.matmul is not None:
            _check_step(step, {op.key: op.nbytes for op in previous})
            need = 0.0
            for op in operands + step.outputs:
                nbytes = op.nbytes
                if nbytes.__class__ is not float or not 0.0 <= nbytes <= MAX_BYTES:  # the usual case skips the call
                    check_bytes(nbytes, name=f"{op.key} nbytes")
                need += nbytes
        else:  # one operand, no outputs, a FLOP count (uniform blocks): what the loop above checks, inlined
            op = operands[0]
            need = op.nbytes
            flops = step.flops
            for before in previous:
                if before.key == op.key and before.nbytes != need:
                    _check_step(step, {before.key: before.nbytes})  # raises, saying which operand
            if flops.__class__ is not float or not 0.0 <= flops < math.inf:
                positive(flops, name=f"block {step.name!r} flops", allow_zero=True)
            if need.__class__ is not float or not 0.0 <= need <= MAX_BYTES:
                check_bytes(need, name=f"{op.key} nbytes")
        previous = operands
        if need > capacity:
            raise CapacityError(
                f"block {step.name!r} needs {need:.0f} bytes of VMEM (operands and outputs) but chip "
                f"{chip.index} VMEM holds only {chip.vmem.capacity_bytes:.0f} bytes; use smaller blocks")


MAX_STEPS = 1_000_000  #: about a minute of simulation; more is almost surely a units mistake


def _check_step(step: Step, previous: dict[str, float]) -> None:
    if len(step.operands) + len(step.outputs) > 1:
        keys = [op.key for op in step.operands + step.outputs]
        if len(set(keys)) != len(keys):
            twice = sorted(k for k in keys if keys.count(k) > 1)[0]
            raise PodsimError(f"block {step.name!r} names operand {twice!r} twice; keys must be unique within a block")
    for op in step.operands:
        if op.key in previous and previous[op.key] != op.nbytes:
            raise PodsimError(f"block {step.name!r}: operand {op.key!r} is carried from the previous block with "
                              f"{previous[op.key]:.0f} bytes but now has {op.nbytes:.0f}; a carried block keeps "
                              "its size")
    if step.matmul is not None:
        for dim in step.matmul:
            positive_int(dim, name=f"block {step.name!r} matmul dimension")
    flops = step.flops
    if flops.__class__ is not float or not 0.0 <= flops < math.inf:  # the usual case skips the call
        positive(flops, name=f"block {step.name!r} flops", allow_zero=True)


#: ``event.succeed()`` for an event known to be untriggered, queued at URGENT priority, one call fewer
_succeed = succeed_urgent


class _Slots:
    """The ``buffers`` free buffer slots of one pipeline: what ``simpy.Container(capacity=buffers)`` does for
    its one getter (the loader) and one putter (the computer), event for event, in a fraction of the code.

    A get is granted at once when a slot is free, else when the next put is processed (as SimPy's
    container wakes waiting gets from the put event's callback); a put never waits.
    """

    __slots__ = ("env", "level", "waiting")

    def __init__(self, env: simpy.Environment, buffers: int) -> None:
        self.env = env
        self.level = buffers
        self.waiting: simpy.Event | None = None

    def get(self) -> simpy.Event:
        event = simpy.Event(self.env)
        if self.level >= 1:
            self.level -= 1
            _succeed(event)
        else:
            self.waiting = event
        return event

    def put(self) -> simpy.Event:
        event = simpy.Event(self.env)
        self.level += 1
        _succeed(event)
        if self.waiting is not None:  # else a later get finds the slot free at once, as in the Container
            event.callbacks.append(self._wake)
        return event

    def take(self) -> bool:
        """`get` without its event, where nothing could happen before it is processed: take a free slot now and
        return True when one is free and the grant would be the next event popped (`simpy_door.pops_next`);
        else False, nothing changed (`get` then). Only for a process that runs as the last thing its event does
        (the loader: see `_Pipeline`)."""
        if self.level >= 1 and pops_next(self.env):
            self.level -= 1
            return True
        return False

    def take_after(self, event: simpy.Event) -> bool:
        """`get` as one more callback of ``event``, an URGENT event triggered now, the last one queued, that a
        process already waits on: take a free slot now and return True (the caller then waits on ``event``);
        else False, nothing changed. The get's event would be queued next and popped right after ``event``,
        before anything ``event``'s callbacks queue, so resuming from ``event``, after its waiting process, is
        the same order with one event fewer. (The waiting process must be the only one to wait on ``event``: the
        pipeline's computer on a step's ready event.)"""
        if self.level >= 1 and event.callbacks:  # (None once processed; [] while nobody waits)
            self.level -= 1
            return True
        return False

    def give(self) -> bool:
        """`put` without its event, where it would be the next one popped: the slot back, a waiting get woken (as
        the put event's callback would, first), True; else False, nothing changed (`put` then)."""
        if not pops_next(self.env):
            return False
        self.level += 1
        if self.waiting is not None:
            self._wake(None)  # type: ignore[arg-type]  # (it reads no event)
        return True

    def _wake(self, _event: simpy.Event) -> None:
        waiting = self.waiting
        if waiting is not None and self.level >= 1:
            self.level -= 1
            self.waiting = None
            waiting.succeed()


class _Pipeline:
    """The loader and compute processes of one `run_steps`.

    Both skip the wait on an event granted at once (a free buffer slot, VMEM that fits, a slot given back) where
    that event would be the next one popped (`simpy_door.pops_next`) -- one event fewer, the same order: the
    process would resume from it before anything else runs. That holds because each process runs here as the
    last thing the event it resumed from does: those events are the pipeline's own (slots, VMEM requests, the
    chip's DMA and compute timers), each with the process's resume as its one callback, processed by the run
    loop or (a lone DMA's end) at the tail of its timer's one callback (`Channel._finish`). The compute process
    skips only after a compute timer, never after a ``before`` event (which others may also wait on). Where the
    loader has just readied a step the compute process waits on, it waits for its next slot on that ready event
    (`_Slots.take_after`): the slot's own event would pop right after it. A ready event that nobody waits on yet
    and that would pop next is processed at once (`simpy_door.fire_now`, no callbacks): the compute process, not
    running until then, finds it processed either way.
    """

    #: skip the waits on grants made at once (above); False: wait on every event (the plain path, for tests)
    skip_granted = True

    def __init__(self, system: System, chip: Chip, steps: Sequence[Step], buffers: int,
                 reserve_vmem: bool) -> None:
        self.env = system.env
        self.reserve_vmem = reserve_vmem
        self.chip = chip
        self.steps = list(steps)
        self.slots = _Slots(self.env, buffers)
        #: per step: the event the loader triggers once its operands are in, made by whichever process comes to it
        #: first (None before that, and again once the compute process is past it)
        self.ready: list[simpy.Event | None] = [None] * len(self.steps)
        #: per step (appended by the loader): key -> VMEM (None once the compute process is done with it)
        self.held: list[dict[str, Allocation | None] | None] = []
        self.out_allocs: list[Sequence[Allocation | None]] = []  # per step: its outputs' VMEM (() when it has none)
        self.stores: list[simpy.Event] = []

    def loader(self) -> Generator[simpy.Event, Any, None]:
        slots, load, ready, reserve = self.slots, self.chip.load, self.ready, self.reserve_vmem
        env, skip = self.env, self.skip_granted
        allocate, take = self.chip.vmem.allocate, self.chip.vmem.take
        carried: dict[str, Allocation | None] = {}
        alloc: Allocation | None = None
        readied: simpy.Event | None = None  # step i - 1's ready event, triggered just now (no event queued since)
        hold, hold_outputs = self.held.append, self.out_allocs.append
        for i, step in enumerate(self.steps):
            if skip and readied is not None and slots.take_after(readied):
                yield readied
            elif not (skip and slots.take()):
                yield slots.get()
            held: dict[str, Allocation | None] = {}
            hold(held)
            for op in step.operands:
                key = op.key
                if key in carried:
                    held[key] = carried[key]
                    continue
                if reserve:
                    alloc = take(op.nbytes, op.label) if skip and pops_next(env) else None
                    if alloc is None:
                        alloc = yield allocate(op.nbytes, op.label)
                held[key] = alloc
                yield load(op.nbytes, op.label, key)
            if step.outputs:
                outs: list[Allocation | None] = []
                hold_outputs(outs)
                for out in step.outputs:
                    if reserve:
                        alloc = take(out.nbytes, out.label) if skip and pops_next(env) else None
                        if alloc is None:
                            alloc = yield allocate(out.nbytes, out.label)
                    outs.append(alloc)
            else:
                hold_outputs(())
            readied = ready[i]
            if readied is None:  # the compute process is not there yet
                readied = ready[i] = simpy.Event(env)
            if skip and not readied.callbacks and pops_next(env):
                fire_now(readied, None)  # nobody waits yet, and it would pop right after this: processed now
            else:
                _succeed(readied)
            carried = held

    def _free(self, alloc: Allocation | None) -> None:
        if alloc is not None:
            self.chip.vmem.free(alloc)

    def computer(self) -> Generator[simpy.Event, Any, None]:
        steps, ready, slots, chip, env = self.steps, self.ready, self.slots, self.chip, self.env
        last, skip, free = len(steps) - 1, self.skip_granted, chip.vmem.free
        for i, step in enumerate(steps):
            waiting = ready[i]
            if waiting is None:  # the loader is not there yet
                waiting = ready[i] = simpy.Event(env)
            yield waiting
            ready[i] = None  # what a step held is dropped once it is done with: memory reused while the run goes
            if step.before is not None:
                yield step.before()
            if step.matmul is not None:
                yield chip.matmul(*step.matmul, label=step.name, dtype=step.dtype)
            else:
                yield chip.compute(step.flops, step.name, step.dtype, step.useful_flops)
            if step.vector_flops:
                yield chip.vector(step.vector_flops, step.name)
            if step.after is not None:
                step.after()
            if step.outputs:
                for out, alloc in zip(step.outputs, self.out_allocs[i], strict=True):
                    self.stores.append(self._store(out, alloc))
                self.out_allocs[i] = ()
            following = steps[i + 1].operands if i < last else ()
            held: dict[str, Allocation | None] = self.held[i]  # type: ignore[assignment]  # (dropped only below)
            for op in step.operands:
                key = op.key
                for nxt in following:
                    if nxt.key == key:
                        break  # carried into the next step
                else:
                    alloc = held[key]
                    if alloc is not None:
                        free(alloc)
            self.held[i] = None
            if not (skip and slots.give()):
                yield slots.put()
        if self.stores:
            yield simpy.AllOf(self.env, self.stores)

    def _store(self, out: Operand, alloc: Allocation | None) -> simpy.Event:
        done = self.chip.store(out.nbytes, out.label, out.key)
        done.callbacks.append(lambda _e: self._free(alloc))
        return done


def run_steps(system: System, steps: Sequence[Step], buffers: int = 2, chip: Chip | None = None,
              name: str = "pipeline", reserve_vmem: bool = True) -> simpy.Process:
    """Start the steps on ``chip`` (default the system's first) and return the compute process.

    Validation (buffers, sizes, VMEM fit) happens here, before the run. With ``reserve_vmem=False``
    blocks hold no VMEM bytes and only the ``buffers`` count limits prefetch (blocks given as times).
    """
    chip = chip if chip is not None else system.chip
    validate_steps(steps, chip, buffers, reserve_vmem)
    expect_events(7 * len(steps), "use fewer, larger blocks")  # load, compute, store and their waits
    pipe = _Pipeline(system, chip, steps, buffers, reserve_vmem)
    system.process(pipe.loader(), f"{name} loader (chip {chip.index})")
    return system.process(pipe.computer(), f"{name} compute (chip {chip.index})")


def effective_buffers(steps: Sequence[Step], capacity_bytes: float, buffers: int) -> int:
    """How many of ``buffers`` the steps really get when their blocks hold VMEM of ``capacity_bytes``.

    Step i's VMEM is its new operands and its outputs (an operand carried from step i - 1 is counted
    with the step that loaded it); b buffers overlap b consecutive steps, so they fit when every window
    of b steps fits at once. Returns the largest such b up to ``buffers`` (at least 1: a step that does
    not fit alone is refused by `validate_steps`). Fewer than ``buffers`` means the loader waits for
    VMEM, not for a buffer, and the run overlaps less than the buffer count says.
    """
    check_int(buffers, name="buffers", hint="1 = serial, 2 = double buffering")
    own, carried = [], []  # per step: VMEM it allocates, and bytes it holds from the step before
    previous: set[str] = set()
    for step in steps:
        kept = sum(op.nbytes for op in step.operands if op.key in previous)
        own.append(sum(op.nbytes for op in step.operands + step.outputs) - kept)
        carried.append(kept)
        previous = {op.key for op in step.operands}
    prefix = [0.0]
    for nbytes in own:
        prefix.append(prefix[-1] + nbytes)

    def fits(b: int) -> bool:
        n = len(own)
        return all(prefix[min(i + b, n)] - prefix[i] + carried[i] <= capacity_bytes for i in range(n))

    lo, hi = 1, max(1, min(buffers, len(own)))  # more buffers than steps change nothing
    if fits(hi):
        return buffers
    while hi - lo > 1:  # invariant: lo fits (or is 1), hi does not
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def uniform_steps(blocks: int, load_bytes: float, flops: float, label: str = "x") -> list[Step]:
    """``blocks`` independent steps, each loading ``load_bytes`` and computing ``flops`` (unpadded)."""
    positive_int(blocks, name="blocks")
    if blocks > MAX_STEPS:
        raise PodsimError(f"blocks={blocks} is more than the {MAX_STEPS:,} podsim simulates; use fewer, larger blocks")
    step_fields = {f.name: f.default for f in fields(Step)}  # built without the frozen dataclasses' __init__
    step_fields["flops"] = flops  # (a third of the time; the objects equal Step(...) and Operand(...))
    steps = []
    with gc_paused():  # 4 tracked objects a block, none in a cycle: the collector's passes would cost half the time
        for i in range(blocks):
            key = f"{label}{i}"
            operand = _new(Operand)
            _set(operand, "__dict__", {"key": key, "label": label, "nbytes": load_bytes})
            fields_i = step_fields.copy()
            fields_i["name"], fields_i["operands"] = key, (operand,)
            step = _new(Step)
            _set(step, "__dict__", fields_i)
            steps.append(step)
    return steps


LOOP_ORDERS = ("weight_major", "input_major")


def weight_input_steps(order: str, batch: int, d_in: int, d_out: int, weight_blocks: int,
                       input_groups: int, elem_bytes: int = 2, dtype: str = "bf16") -> list[Step]:
    """Steps of ``X[batch, d_in] @ W[d_in, d_out]`` with W split by columns and X by rows.

    ``weight_major`` (weight-stationary) keeps one W block resident while every input group streams
    past; ``input_major`` (input-stationary) keeps one input group while every W block streams past.
    Output block (g, j) is part of one output tensor ``y``, stored once.
    """
    if order not in LOOP_ORDERS:
        raise PodsimError(f"order={order!r}; valid orders: {', '.join(LOOP_ORDERS)}")
    for key, value, dim in (("weight_blocks", weight_blocks, d_out), ("input_groups", input_groups, batch)):
        if check_int(value, name=key) and dim % value:
            raise PodsimError(f"{key}={value!r} must be an integer >= 1 dividing {dim}")
    if weight_blocks * input_groups > MAX_STEPS:
        raise PodsimError(f"weight_blocks x input_groups = {weight_blocks * input_groups} steps; at most {MAX_STEPS:,}")
    rows, cols = batch // input_groups, d_out // weight_blocks
    pairs = [(g, j) for j in range(weight_blocks) for g in range(input_groups)] if order == "weight_major" \
        else [(g, j) for g in range(input_groups) for j in range(weight_blocks)]
    return [Step(f"x{g}@w{j}",
                 (Operand(f"w{j}", "weights", elem_bytes * d_in * cols),
                  Operand(f"x{g}", "inputs", elem_bytes * rows * d_in)),
                 matmul=(rows, d_in, cols), dtype=dtype,
                 outputs=(Operand(f"y{g}{j}", "outputs", elem_bytes * rows * cols),))
            for g, j in pairs]
