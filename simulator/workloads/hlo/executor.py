"""Run a compiled HLO program on a podsim `System`, one SimPy process per device.

Timing model: each device runs its instructions in program order (the schedule XLA printed), one at a
time, as a TPU core does, except that an asynchronous collective (``all-gather-start`` ... ``-done``, or
``async-start`` / ``async-done`` around one) runs on the links while the instructions between its start
and done compute. An instruction waits for its operands: an async result is an event its consumer
waits on. A dot or convolution occupies the MXU for its padded FLOPs while its operands stream in from
HBM and its result streams out (the op takes the longer of the two: a roofline per op); a fusion or
element-wise op streams its operands and result through HBM while the VPU does its FLOPs. A
collective starts when every device of its groups has reached it, and runs podsim's algorithm on those
groups (`simulator.collectives.start_collective`); a ``collective-permute`` sends each source's buffer
to its target. ``while`` loops run their body once per trip (unrolled; trip counts from the backend
config); ``call`` runs the callee in place; ``conditional`` runs its first branch (with a warning).
Ops podsim has no model for are skipped, never silently: each is reported with the bytes it would move.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import simpy

from simulator import analytic
from simulator.collectives import start_collective
from simulator.errors import PodsimError
from simulator.workloads.hlo.cost import Costing, OpCost
from simulator.workloads.hlo.model import COLLECTIVES, Computation, Instruction, Module
from simulator.workloads.hlo.placement import Placement
from simulator.workloads.hlo.syntax import Shape

MAX_OP_INSTANCES = 2_000_000  #: instructions one device may execute (loops unrolled); more would take minutes
_PODSIM_KIND = {"all-reduce": "all_reduce", "all-gather": "all_gather", "reduce-scatter": "reduce_scatter",
                "all-to-all": "all_to_all", "ragged-all-to-all": "all_to_all", "collective-broadcast": "broadcast"}


@dataclass
class HloRun:
    """What a run measured. Times are per device (the mean over devices), in seconds."""

    step_time_s: float
    by_op: dict[str, dict[str, Any]]  #: instruction name -> kind, opcode, count, time_s, flops, bytes, ...
    collectives: dict[str, dict[str, Any]]  #: collective instruction -> kind, count, bytes, groups, in_flight_s
    skipped: dict[str, dict[str, Any]]  #: unsupported instruction -> opcode, count, bytes, would_take_s, line
    warnings: list[str] = field(default_factory=list)


@dataclass
class _Rendezvous:
    expected: set[int]
    done: simpy.Event
    arrived: set[int] = field(default_factory=set)


class Executor:
    """Runs ``module`` on ``placement``'s system (see the module docstring for the timing model).

    ``dtype``: ``source`` or ``compiled`` (`simulator.workloads.hlo.cost`); ``async_collectives`` runs
    every synchronous collective as if it were a start/done pair: started where it stands in the
    program, awaited by its first user (the overlap XLA's latency-hiding scheduler gives on TPUs).
    """

    def __init__(self, module: Module, placement: Placement, dtype: str = "source",
                 async_collectives: bool = False) -> None:
        self.module, self.placement = module, placement
        self.system = placement.system
        self.env = self.system.env
        self.costing = Costing(module, dtype)
        self.async_collectives = async_collectives
        self._chips = {c.index: c for c in self.system.chips}
        self._pending: dict[tuple, _Rendezvous] = {}
        self._by_op: dict[str, dict[str, Any]] = {}
        self._collectives: dict[str, dict[str, Any]] = {}
        self._skipped: dict[str, dict[str, Any]] = {}
        self._warnings: dict[str, str] = {}

    def run(self) -> HloRun:
        """Simulate one execution of the entry computation on every device."""
        count = self.instances(self.module.entry_computation)
        if count > MAX_OP_INSTANCES:
            raise PodsimError(f"{self.module.source}: one device would execute {count:,} instructions with the "
                              f"loops unrolled; podsim simulates at most {MAX_OP_INSTANCES:,} (shorten the loops)")
        for d in range(self.module.n_devices):
            chip = self._chips[self.placement.chip(d)]
            self.system.process(self._computation(d, chip, self.module.entry_computation, None, ()), f"device {d}")
        self.system.run()
        n = self.module.n_devices
        for row in self._by_op.values():
            row["time_s"] /= n
        return HloRun(self.env.now, self._by_op, self._collectives, self._skipped, list(self._warnings.values()))

    def instances(self, comp: Computation, depth: int = 0) -> int:
        """Instructions one device executes in ``comp``, loops unrolled."""
        if depth > 64:
            raise PodsimError(f"{self.module.source}: computations call each other more than 64 deep (recursion?)")
        total = 0
        for instr in comp.instructions:
            total += 1
            if instr.opcode == "while":
                body = self.module.computation(instr.attrs.get("body", "").lstrip("%"))
                total += (instr.trip_count() or 1) * self.instances(body, depth + 1)
            elif instr.opcode in ("call", "conditional"):
                total += self.instances(self.module.computation(instr.called()[0]), depth + 1)
        return total

    # -- one device's stream -------------------------------------------------------------------------------
    def _computation(self, d: int, chip: Any, comp: Computation, params: tuple[Shape, ...] | None,
                     path: tuple) -> Any:
        src, costs = self.costing.computation(comp, params)
        ready: dict[str, tuple[simpy.Event, Instruction]] = {}  # async results not yet waited for
        for instr in comp.instructions:
            waits = [ready.pop(o) for o in instr.operands if o in ready]
            pending = [(event, producer) for event, producer in waits if not event.processed]
            if pending:  # exposed collective time: the stream stands still until the result arrives
                start = self.env.now
                yield simpy.AllOf(self.env, [event for event, _ in pending])
                producer = pending[0][1]
                self._account(d, producer, costs[producer.name], self.env.now - start, count=False)
            yield from self._instruction(d, chip, instr, costs[instr.name], src, ready, path)

    def _instruction(self, d: int, chip: Any, instr: Instruction, cost: OpCost, src: dict[str, Shape],
                     ready: dict[str, tuple[simpy.Event, Instruction]], path: tuple) -> Any:
        op = instr.opcode
        start = self.env.now
        if op == "while":
            yield from self._loop(d, chip, instr, src, path)
        elif op in ("call", "conditional"):
            if op == "conditional":
                self._warn(instr, f"%{instr.name} (conditional, line {instr.line}) ran its first branch only")
            callee = self.module.computation(instr.called()[0])
            operands = instr.operands[1:2] if op == "conditional" else instr.operands
            yield from self._computation(d, chip, callee, tuple(src[o] for o in operands), path + (instr.name,))
        elif cost.kind == "unsupported":
            self._skip(d, instr, cost)
        elif self._collective_of(instr) is not None:
            event = self._collective(d, instr, cost, path)
            if op.endswith("-start") or (self.async_collectives and op in COLLECTIVES):
                ready[instr.name] = (event, instr)
                self._account(d, instr, cost, 0.0)
                return
            yield event
            self._account(d, instr, cost, self.env.now - start)
        elif cost.kind in ("matmul", "elementwise"):
            yield self._work(chip, instr, cost)
            self._account(d, instr, cost, self.env.now - start)

    def _loop(self, d: int, chip: Any, instr: Instruction, src: dict[str, Shape], path: tuple) -> Any:
        trips = instr.trip_count()
        if trips is None:
            self._warn(instr, f"%{instr.name} (while, line {instr.line}) has no known trip count in its "
                              "backend_config; its body ran once")
        body = self.module.computation(instr.attrs.get("body", "").lstrip("%"))
        carried = (src[instr.operands[0]],) if instr.operands else None
        for trip in range(trips if trips is not None else 1):
            yield from self._computation(d, chip, body, carried, path + (instr.name, trip))

    def _work(self, chip: Any, instr: Instruction, cost: OpCost) -> simpy.Event:
        """HBM reads and writes, MXU matmuls and VPU work of one op, all at once; done when all are."""
        label = instr.name
        events = []
        if cost.read_bytes:
            events.append(chip.load(cost.read_bytes, label))
        if cost.write_bytes:
            events.append(chip.store(cost.write_bytes, label))
        for batch, m, k, n, dtype in cost.matmuls:
            if batch == 1:
                events.append(chip.matmul(m, k, n, label, dtype))
            else:
                padded = batch * analytic.padded_matmul_flops(m, k, n, chip.spec.mxu_dim, chip.spec.sublanes)
                events.append(chip.compute(padded, label, dtype, useful_flops=2.0 * batch * m * k * n))
        if cost.vpu_flops:
            events.append(chip.vector(cost.vpu_flops, label))
        return simpy.AllOf(self.env, events)

    # -- collectives ---------------------------------------------------------------------------------------
    def _collective_kind(self, instr: Instruction) -> str | None:
        """``all_gather`` ... ``collective_permute`` for a collective (or its start, or an async-start of one)."""
        target = self._collective_of(instr)
        if target is None:
            return None
        return _PODSIM_KIND.get(target.base_opcode, target.base_opcode.replace("-", "_"))

    def _collective_of(self, instr: Instruction) -> Instruction | None:
        if instr.base_opcode in COLLECTIVES and not instr.opcode.endswith("-done"):
            return instr
        if instr.opcode == "async-start" and instr.called():
            root = self.module.computation(instr.called()[0]).root
            return root if root.base_opcode in COLLECTIVES else None
        return None

    def _collective(self, d: int, instr: Instruction, cost: OpCost, path: tuple) -> simpy.Event:
        target = self._collective_of(instr)
        assert target is not None
        kind = self._collective_kind(instr) or ""
        if kind == "collective_permute":
            expected = {x for pair in target.pairs or [] for x in pair}
        else:
            expected = {x for g in self._groups(target) for x in g}
        if d not in expected:
            return self.env.event().succeed()
        key = (instr.computation, instr.name, path)
        meet = self._pending.get(key)
        if meet is None:
            meet = self._pending[key] = _Rendezvous(expected, self.env.event())
        meet.arrived.add(d)
        if meet.arrived >= meet.expected:
            del self._pending[key]
            self.system.process(self._launch(instr, target, kind, cost, meet), f"{kind} %{instr.name}")
        return meet.done

    def _groups(self, target: Instruction) -> list[list[int]]:
        return target.groups or [list(range(self.module.n_devices))]

    def _launch(self, instr: Instruction, target: Instruction, kind: str, cost: OpCost, meet: _Rendezvous) -> Any:
        start = self.env.now
        groups = self._groups(target)
        n = len(groups[0])
        row = self._collectives.setdefault(instr.name, {
            "kind": kind, "opcode": instr.opcode, "count": 0, "in_flight_s": 0.0, "bytes": 0.0,
            "group_size": n, "groups": len(groups), "line": instr.line, "source": self.module.source_line(instr)})
        if kind == "collective_permute":
            pairs = target.pairs or []
            row.update(group_size=2, groups=len(pairs))
            net = self.system.network
            assert net is not None  # a placement's system has a topology
            sends = [net.message(self.placement.chip(s), self.placement.chip(t), cost.read_bytes, instr.name)
                     for s, t in pairs if s != t]
            if sends:
                yield simpy.AllOf(self.env, sends)
            nbytes = cost.read_bytes
        else:
            nbytes = cost.read_bytes * (n if kind in ("all_gather", "all_to_all") else 1)
            where = self.placement.collective_kwargs(groups)
            row["over"] = f"mesh axes {','.join(where['axes'])}" if "axes" in where else "explicit groups"
            if nbytes > 0:
                done = start_collective(kind, self.system, nbytes, **where)
                row["algorithm"] = done.algorithm  # auto's choice for these groups and bytes
                yield done
        row["count"] += 1
        row["bytes"] = nbytes
        row["in_flight_s"] += self.env.now - start
        meet.done.succeed()

    # -- bookkeeping ---------------------------------------------------------------------------------------
    def _account(self, d: int, instr: Instruction, cost: OpCost, seconds: float, count: bool = True) -> None:
        row = self._by_op.get(instr.name)
        if row is None:
            row = self._by_op[instr.name] = {
                "kind": self._collective_kind(instr) or cost.kind, "opcode": instr.opcode, "count": 0,
                "time_s": 0.0, "flops": cost.flops, "bytes": cost.nbytes, "line": instr.line,
                "source": self.module.source_line(instr), "op_name": instr.op_name}
        row["time_s"] += seconds
        if d == 0 and count:
            row["count"] += 1

    def _skip(self, d: int, instr: Instruction, cost: OpCost) -> None:
        if d != 0:
            return
        row = self._skipped.setdefault(instr.name, {
            "opcode": instr.opcode, "line": instr.line, "count": 0, "bytes": cost.nbytes,
            "would_take_s": cost.nbytes / self.system.spec.hbm_bandwidth_bytes_per_s,
            "target": instr.attrs.get("custom_call_target", "").strip('"')})
        row["count"] += 1
        what = f"{instr.opcode} {row['target']}".strip()
        self._warnings[f"skip {instr.name}"] = (
            f"skipped %{instr.name} ({what}, line {instr.line}, {row['count']}x): podsim has no model of it; by "
            f"its shapes it moves {cost.nbytes:,.0f} bytes, about {row['would_take_s'] * 1e6:.3g} us at HBM "
            "bandwidth each time")

    def _warn(self, instr: Instruction, message: str) -> None:
        self._warnings.setdefault(instr.name, message)


def count_by_kind(run: HloRun) -> dict[str, int]:
    """How many times each op kind ran on one device."""
    out: dict[str, int] = defaultdict(int)
    for row in run.by_op.values():
        out[row["kind"]] += row["count"]
    return dict(out)
