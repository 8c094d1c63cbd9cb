"""A simulated training step under a parallelism plan: every chip, every op, every collective and transfer.

Each chip runs its pipeline schedule (`schedules.tasks`): for each (pass, microbatch, chunk) it waits
for the activations (or gradients) of the neighbouring stage, which arrive as point-to-point messages
over the real links; runs its layers' ops (`ops.layer_work`: HBM streaming and MXU work at once, then
VPU work) and their collectives; sends its output on. A collective starts once every chip of its
pipeline stage has reached it (they run the same program, so they reach it together), over the
stage's groups of its mesh axes (`simulator.collectives.start_collective`). FSDP gathers the next
layer's weights while the current layer computes; gradient reductions run in the background and the
step ends when they, the optimizer update and (ZeRO-1/2) the weights' AllGather are done. The data axis's
AllReduce (across slices, over DCN) thus starts per layer and hides under the later layers' backward: the
ideal bound; the calibrated step (`plans.calibrated`) leaves it exposed, as MaxText's multislice runs show.

Measured per chip: the time it waits on each axis's collectives (``exposed_comm_s``), and on its
pipeline neighbours -- split into the bubble (the neighbour had not sent yet) and the transfer (the
message was on its way: exposed pipeline communication). ``bubble_fraction`` is the share of the
pipelined part (every chip's tasks, before the last reductions and the optimizer) a chip spends idle --
waiting for a neighbour that has not sent yet, or done while others still work -- averaged over chips.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Generator, Iterable
from typing import Any

import simpy

from simulator.acceleration.executor import Attempt, executor
from simulator.analytic import exposed_s
from simulator.collectives import collective_groups, start_collective
from simulator.collectives.schedule import gc_paused
from simulator.engine.simpy_door import timeout_at
from simulator.engine.system import System
from simulator.errors import PodsimError
from simulator.hardware.specs import ChipSpec
from simulator.workloads.budget import saved_activation_elements
from simulator.workloads.mesh import Mesh
from simulator.workloads.plans.estimate import grad_comms, optimizer_work
from simulator.workloads.plans.hbm import HbmLedger
from simulator.workloads.plans.layout import MeshPlan, TrainOptions, check_train_plan
from simulator.workloads.plans.links import build_system
from simulator.workloads.plans.memory import LOGIT_BYTES, per_chip_memory, saved_elements, stage_params
from simulator.workloads.plans.ops import IN_TURN, Comm, Op, Work, head_work, in_turn, layer_work
from simulator.workloads.plans.schedules import stage_layers, tasks, virtual_stage
from simulator.workloads.transformer import TransformerConfig


class TrainStep:
    """One simulated training step; `run` returns the measured figures."""

    def __init__(self, cfg: TransformerConfig, chip: ChipSpec, plan: MeshPlan, opts: TrainOptions, batch: int,
                 seq: int, topology: str | None = None, trace: bool = True, calibrated: bool = False,
                 fast: bool = True, built: tuple[System, Mesh | None] | None = None, replay: bool = True,
                 avoid: frozenset = frozenset(), quotients: bool = True, shared: dict | None = None,
                 node_allowed: frozenset | None = None, orbits: str | None = None, lockstep: bool = False) -> None:
        check_train_plan(cfg, plan, opts, batch, seq)
        self.cfg, self.plan, self.opts = cfg, plan, opts
        self.reruns: list[str] = []  #: the reruns `simulate_step` took before this run (`acceleration.reruns.REASONS`)
        with gc_paused():  # tens of thousands of links and chips, freed by reference counting: no full passes
            system, mesh = built or build_system(chip, plan, topology, trace, calibrated)
        self.system: System = system
        self.mesh: Mesh | None = mesh
        if self.system.network is not None:  # every row carries the step's own groups: none is idle to borrow
            self.system.network.rows_in_use = True
        self.env = self.system.env
        self.p = plan.size("pipeline")
        self.v = opts.virtual_stages if opts.schedule == "interleaved" and self.p > 1 else 1
        self.layer = layer_work(cfg, chip, plan, opts, batch, seq)
        self.head_f, self.head_b, self.head_grad = head_work(cfg, chip, plan, opts, batch, seq)
        self.act_bytes = batch / (plan.batch_ways * opts.microbatches) * seq / plan.size("sequence") * \
            cfg.d_model * cfg.act_elem_bytes
        self.stage_of = {c.index: self._stage(c.index) for c in self.system.chips}
        self.stage_size = len(self.system.chips) // self.p
        moe = plan.size("expert") > 1 and bool(cfg.n_experts)  # AllToAll: no ring to stand for the others
        self.sym = executor(fast).symmetry(self.system, self.mesh, self.stage_of, not moe, self._axis_sets(),
                                           Attempt(fast, quotients, replay, avoid, node_allowed, orbits,
                                                                   lockstep), shared)
        #: a lockstep run's programs (`orbit_run.LockstepSymmetry`): each program's chip -> the stage's orbit
        #: representatives it stands for (its lanes, its own first); empty: one chip a program
        self.lanes: dict[Any, list[Any]] = self.sym.lanes()
        self._lane_at = {lane: (lead, j) for lead, group in self.lanes.items() for j, lane in enumerate(group)}
        #: each lockstep program's lanes' offsets (s, <= 0) from its clock (the latest lane's); None: all in step
        self._skew: dict[Any, list[float] | None] = {}
        self._fired: dict[simpy.Event, float] = {}  #: (lockstep) each collective's completion instant (s)
        self.lanes_apart = 0  #: (lockstep) receives after which a program's lanes were apart
        self._counterparts: dict[tuple[Any, int], Any] = {}
        self._pending: dict[Any, list[Any]] = {}
        self._mail: dict[Any, list[Any]] = {}
        self._groups: dict[tuple[str, ...], dict[int, list[Any]]] = {}
        self._joint: dict[tuple[str, ...], bool] = {}  #: whether a collective runs over these axes at once
        self.exposed: dict[str, float] = defaultdict(float)
        self.bubble_s = 0.0
        self.batch, self.seq = batch, seq
        self.hbm = HbmLedger(self.env)
        tokens = self.act_bytes / (cfg.d_model * cfg.act_elem_bytes)  # per chip and microbatch
        element = tokens * cfg.act_elem_bytes / plan.size("model")  # one element per token, model-sharded
        self.saved = saved_elements(cfg, opts.checkpoint) * element  # one layer, one microbatch
        self.rebuilt = saved_activation_elements(cfg) * element if opts.checkpoint != "none" else 0.0
        self.logits = tokens / plan.size("model") * cfg.vocab_size * LOGIT_BYTES
        self.pipe_end: dict[Any, float] = {}

    def _axis_sets(self) -> list[tuple[str, ...]]:
        """The mesh axes (of more than one chip) of every collective the step runs."""
        comms = [c for op in (*self.layer.forward, *self.layer.backward, self.head_f, self.head_b)
                 for c in (*op.before, *op.overlapped, *op.after)]
        for last in (False, True):
            comms += grad_comms(self.plan, self.opts, *self.layer.grad_bytes, last=last)
        comms += grad_comms(self.plan, self.opts, self.head_grad, 0.0, last=True)
        sets = {tuple(a for a in c.axes if self.plan.size(a) > 1) for c in comms} | {("fsdp",)}
        return [s for s in sets if s and all(self.plan.size(a) > 1 for a in s)]

    def _stage(self, chip: Any) -> int:
        if self.mesh is None or "pipeline" not in self.mesh.names:
            return 0
        return self.mesh.coords(chip)[self.mesh.index("pipeline")]

    # -- collectives and messages ------------------------------------------------------------------------
    def collective(self, comm: Comm, chip: Any, key: tuple) -> simpy.Event:
        """This chip's arrival at a collective; the returned event fires when it is done."""
        stage = self.stage_of[chip]
        k = (key, comm.kind, comm.axes, stage)
        entry = self._pending.setdefault(k, [0, self.env.event()])
        entry[0] += 1
        if entry[0] == self.sym.arrivals:
            del self._pending[k]
            done = self._start(comm, stage)
            arrived: simpy.Event = entry[1]

            fired = self._fired if self.lanes else None

            def release(_e: simpy.Event) -> None:
                if fired is not None:
                    fired[arrived] = self.env.now
                arrived.succeed()
            done.callbacks.append(release)
        return entry[1]

    def _start(self, comm: Comm, stage: int) -> simpy.Event:
        axes = [a for a in comm.axes if self.plan.size(a) > 1]
        if len(axes) > 1 and comm.kind in IN_TURN and not self._groupable(tuple(axes)):
            return self.env.process(self._in_turn(comm.kind, comm.nbytes, axes, stage))
        return self._start_axes(comm.kind, comm.nbytes, axes, stage)

    def _groupable(self, axes: tuple[str, ...]) -> bool:
        """Whether one collective can run over ``axes`` at once (`collective_groups`): not where two of them hold
        factors of one physical axis with another mesh axis's factor between them (their rings' routes would
        cross that axis's groups)."""
        if axes not in self._joint:
            assert self.system.network is not None, "a step's collectives run on a system with a network"
            try:
                collective_groups(self.system.network, list(axes), self.mesh)
                self._joint[axes] = True
            except PodsimError:
                self._joint[axes] = False
        return self._joint[axes]

    def _in_turn(self, kind: str, nbytes: float, axes: list[str], stage: int) -> Generator[Any, Any, None]:
        """A collective over ``axes`` that cannot run at once (`_groupable`), axis by axis with the same result
        (`simulator.workloads.plans.ops.in_turn`); ``nbytes`` is V as for the collective over all of ``axes``."""
        for step_kind, v, axis in in_turn(kind, nbytes, axes, self.plan.size):
            yield self._start_axes(step_kind, v, [axis], stage)

    def _exact(self, axes: list[str], stage: int) -> dict[str, Any]:
        """The keywords of `start_collective` that run a collective over ``axes`` on ``stage`` in full."""
        if self.p == 1:
            return {"axes": axes, "mesh": self.mesh, "mode": "full"}
        groups = self._groups.setdefault(tuple(axes), {})
        if not groups:
            assert self.system.network is not None, "a pipelined step runs on a system with a network"
            for g in collective_groups(self.system.network, axes, self.mesh):
                groups.setdefault(self.stage_of[next(iter(g.members.values()))], []).append(g)
        return {"groups": groups[stage], "mode": "full"}

    def _ahead(self) -> list[tuple[str, float, tuple[str, ...], int, dict[str, Any]]]:
        """Every stage's gradient reductions, as `_start` will start them (kind, bytes, axes, stage, keywords):
        what a fast run checks on its group before it runs (`Symmetry.foresee`)."""
        out = []
        last = self.p * self.v - 1
        for rank in range(self.p):
            comms = [*grad_comms(self.plan, self.opts, *self.layer.grad_bytes, last=False),
                     *grad_comms(self.plan, self.opts, *self.layer.grad_bytes, last=True)]
            if any(virtual_stage(self.p, rank, chunk) == last for chunk in range(self.v)):
                comms += grad_comms(self.plan, self.opts, self.head_grad, 0.0, last=True)
            for c in comms:
                axes = [a for a in c.axes if self.plan.size(a) > 1]
                if axes and not (len(axes) > 1 and c.kind in IN_TURN and not self._groupable(tuple(axes))):
                    out.append((c.kind, c.nbytes, tuple(axes), rank, self._exact(axes, rank)))
        return out

    def _start_axes(self, kind: str, nbytes: float, axes: list[str], stage: int) -> simpy.Event:
        exact = self._exact(axes, stage)
        if self.sym.active:
            return self.sym.start(kind, nbytes, axes, stage, exact)
        return start_collective(kind, self.system, nbytes, **exact)

    def _box(self, key: tuple) -> list[Any]:
        """A message's mailbox: [its arrival event, the instant it was sent (s), the instant it arrived (s)]."""
        return self._mail.setdefault(key, [self.env.event(), None, None])

    def send(self, chip: Any, stage: int, key: tuple) -> None:
        """Send this chip's activations (or their gradients) to its counterpart on pipeline ``stage`` (a lockstep
        program: each of its lanes to its own)."""
        assert self.mesh is not None, "a pipeline message runs on a mesh"
        label = f"{key[0]} mb{key[1]}"
        lanes = self.lanes.get(chip)
        if lanes is not None:
            if self._skew.get(chip) is not None:  # lanes apart: each would send at its own instant, some past
                self.sym.unlock("a lockstep program's lanes reached a pipeline send at different instants")
            arrivals = []
            for lane in lanes:
                lead, j = self._lane_at[self._counterpart(lane, stage)]
                box = self._lane_box(lead, key)
                box[1] = self.env.now
                arrivals.append(self._arrival(box, j))
            self.sym.send_lanes(chip, self.act_bytes, label, lambda c: self._counterpart(c, stage), arrivals)
            return
        dst = self._counterpart(chip, stage)
        box = self._box((dst, *key))
        box[1] = self.env.now
        if self.sym.active:  # every chip of the stage sends; the representative's message is awaited
            self.sym.send(chip, self.act_bytes, label, lambda c: self._counterpart(c, stage),
                          lambda _e: box[0].succeed())
            return
        assert self.system.network is not None, "a pipeline message runs on a system with a network"
        self.system.network.message(chip, dst, self.act_bytes, label=label).callbacks.append(
            lambda _e: box[0].succeed())

    def _lane_box(self, lead: Any, key: tuple) -> list[Any]:
        """A lockstep program's mailbox for one message of every lane: [the event fired when the last lane's is in,
        the instant they were sent (s), each lane's arrival instant (s), lanes still to come]."""
        box = self._mail.get(("lanes", lead) + key)
        if box is None:
            n = len(self.lanes[lead])
            box = self._mail[("lanes", lead) + key] = [self.env.event(), None, [0.0] * n, n]
        return box

    def _arrival(self, box: list[Any], j: int) -> Any:
        """The callback that notes lane ``j``'s message arrived (now); the last lane's fires the mailbox."""
        def arrived(_e: Any) -> None:
            box[2][j] = self.env.now
            box[3] -= 1
            if not box[3]:
                box[0].succeed()
        return arrived

    def _counterpart(self, chip: Any, stage: int) -> Any:
        """``chip``'s counterpart on pipeline ``stage`` (kept: every microbatch asks again)."""
        found = self._counterparts.get((chip, stage))
        if found is None:
            assert self.mesh is not None, "a pipeline counterpart lies on a mesh"
            coords = list(self.mesh.coords(chip))
            coords[self.mesh.index("pipeline")] = stage
            found = self._counterparts[(chip, stage)] = self.mesh.device(tuple(coords))
        return found

    def receive(self, chip: Any, key: tuple) -> Generator[Any, Any, None]:
        lanes = self.lanes.get(chip)
        if lanes is not None:
            yield from self._receive_lanes(chip, lanes, key)
            return
        box = self._box((chip, *key))
        start = self.env.now
        yield box[0]
        sent = box[1] if box[1] is not None else start
        self.bubble_s += max(0.0, sent - start)
        self.exposed["pipeline"] += exposed_s(self.env.now - max(start, sent), 0.0)  # the chip stands still

    def _receive_lanes(self, chip: Any, lanes: list[Any], key: tuple) -> Generator[Any, Any, None]:
        """A lockstep program's receive: every lane's message (the program goes on when the last is in, as the
        latest lane does); each lane's wait is booked as its own would be, from its own instant, and it goes on
        from its own message's arrival (its offset, `_skew`)."""
        start, skew = self.env.now, self._skew.get(chip)
        box = self._lane_box(chip, key)
        yield box[0]
        now, offsets, arrived = self.env.now, [], box[2]
        for i in range(len(lanes)):
            mine = start + skew[i] if skew is not None else start  # the lane's own instant when it began to wait
            sent = box[1] if box[1] is not None else mine
            on = max(mine, arrived[i])  # it goes on when its message is in (or at once: it was in already)
            self.bubble_s += max(0.0, sent - mine)
            self.exposed["pipeline"] += exposed_s(on - max(mine, sent), 0.0)
            offsets.append(on - now)
        self._skew[chip] = offsets if any(offsets) else None
        self.lanes_apart += self._skew[chip] is not None

    def wait(self, event: simpy.Event, axis: str, events: list[simpy.Event] | None = None,
             chip: Any = None) -> Generator[Any, Any, None]:
        """Wait for ``event`` (a collective's; or all of ``events``), booking the wait as exposed on ``axis``; a
        lockstep ``chip``'s lanes apart each from its own instant, and in step again once it is done."""
        start = self.env.now
        yield event
        skew = self._skew.get(chip) if chip is not None else None
        if skew is None:  # (a lockstep program's lanes in step: each waits as long)
            lanes = self.lanes.get(chip) if self.lanes else None
            self.exposed[axis] += exposed_s(self.env.now - start, 0.0) * (len(lanes) if lanes else 1)  # (stands still)
            return
        now = self.env.now
        done = now if now > start else max(self._fired[e] for e in (events or [event]))  # (done already: when)
        offsets = []
        for offset in skew:
            mine = start + offset
            on = max(mine, done)
            self.exposed[axis] += exposed_s(on - mine, 0.0)
            offsets.append(on - now)
        self._skew[chip] = offsets if any(offsets) else None

    # -- work ----------------------------------------------------------------------------------------------
    def _mem(self, chip: Any, nbytes: float) -> None:
        """``nbytes`` more (or fewer) in ``chip``'s HBM from its own instant (a lockstep program's first lane's)."""
        skew = self._skew.get(chip)
        self.hbm.add(chip, nbytes, None if skew is None else self.env.now + skew[0])

    def work(self, chip: Any, w: Work, label: str) -> Generator[Any, Any, None]:
        unit = self.system.chips[self._index[chip]]
        end = unit.fold_work(w.read_bytes, w.write_bytes, w.flops, w.useful_flops, w.vector_flops,
                             "weights and activations", "activations and gradients")
        if end is not None:  # (untraced, the chip's units idle: one timer at the instant the op's units end)
            if end > self.env.now:
                yield timeout_at(self.env, end)
            return
        events = []
        if w.read_bytes:
            events.append(unit.load(w.read_bytes, "weights and activations", label))
        if w.write_bytes:
            events.append(unit.store(w.write_bytes, "activations and gradients", label))
        if w.flops:
            events.append(unit.compute(w.flops, label, useful_flops=w.useful_flops))
        if events:
            yield simpy.AllOf(self.env, events)
        if w.vector_flops:
            yield unit.vector(w.vector_flops, label)

    def op(self, chip: Any, op: Op, key: tuple, label: str) -> Generator[Any, Any, None]:
        for i, c in enumerate(op.before):
            yield from self.wait(self.collective(c, chip, (*key, "before", i)), c.axis, chip=chip)
        over = [self.collective(c, chip, (*key, "with", i)) for i, c in enumerate(op.overlapped)]
        yield from self.work(chip, op.work, label)
        if over:
            yield from self.wait(simpy.AllOf(self.env, over), op.overlapped[0].axis, over, chip)
        for i, c in enumerate(op.after):
            yield from self.wait(self.collective(c, chip, (*key, "after", i)), c.axis, chip=chip)

    def layers(self, chip: Any, key: tuple, order: list[int], forward: bool, last: bool,
               background: list[tuple[simpy.Event, str]]) -> Generator[Any, Any, None]:
        nbytes = self.layer.gather_bytes
        gather = Comm("all_gather", ("fsdp",), nbytes, "fsdp")
        ahead = self.collective(gather, chip, (*key, order[0], "gather")) if nbytes else None
        self._mem(chip, nbytes)  # gathered weights live from the gather's start to the layer's end
        for i, layer in enumerate(order):
            if ahead is not None:  # this layer's weights, then the next layer's while this one computes
                yield from self.wait(ahead, "fsdp", chip=chip)
                ahead = self.collective(gather, chip, (*key, order[i + 1], "gather")) if i + 1 < len(order) else None
                self._mem(chip, nbytes if ahead is not None else 0.0)
            ops = self.layer.forward if forward else self.layer.backward
            self._mem(chip, 0.0 if forward else self.rebuilt)
            for j, op in enumerate(ops):
                yield from self.op(chip, op, (*key, layer, j), f"L{layer} {op.name}")
            self._mem(chip, (1 if forward else -1) * self.saved - (0.0 if forward else self.rebuilt) - nbytes)
            if not forward:
                self._reduce(chip, grad_comms(self.plan, self.opts, *self.layer.grad_bytes, last=last),
                             (*key, layer), background)

    def _reduce(self, chip: Any, comms: Iterable[Comm], key: tuple, background: list) -> None:
        for i, c in enumerate(comms):
            event = self.collective(c, chip, (*key, "grad", i))
            if c.kind == "reduce_scatter" and self.opts.zero >= 2:  # unreduced gradients live until it ends
                skew = self._skew.get(chip)
                self.hbm.release_when(chip, c.nbytes, event, None if skew is None else self.env.now + skew[0])
            background.append((event, c.axis))

    # -- the program of one chip ---------------------------------------------------------------------------
    def program(self, chip: Any) -> Generator[Any, Any, None]:
        rank, m = self.stage_of[chip], self.opts.microbatches
        background: list[tuple[simpy.Event, str]] = []
        last_stage = self.p * self.v - 1
        for kind, mb, chunk in tasks(self.opts.schedule, self.p, rank, m, self.v):
            vs = virtual_stage(self.p, rank, chunk)
            layers = list(stage_layers(self.cfg.n_layers, self.p, self.v, vs))
            key = (kind, mb, vs)
            if kind == "F":
                if vs > 0:
                    yield from self.receive(chip, key)
                yield from self.layers(chip, key, layers, True, False, background)
                if vs == last_stage:
                    self._mem(chip, self.logits)
                    yield from self.op(chip, self.head_f, (*key, "head"), "lm head")
                else:
                    self.send(chip, (vs + 1) % self.p, ("F", mb, vs + 1))
                continue
            if vs == last_stage:
                yield from self.op(chip, self.head_b, (*key, "head"), "lm head backward")
                self._mem(chip, -self.logits)
                if mb == m - 1:
                    self._reduce(chip, grad_comms(self.plan, self.opts, self.head_grad, 0.0, last=True),
                                 (*key, "head"), background)
            else:
                yield from self.receive(chip, key)
            yield from self.layers(chip, key, layers[::-1], False, mb == m - 1, background)
            if vs > 0:
                self.send(chip, (vs - 1) % self.p, ("B", mb, vs - 1))
        lanes, skew = self.lanes.get(chip, [chip]), self._skew.get(chip)
        for i, lane in enumerate(lanes):  # (each lane's own instant)
            self.pipe_end[lane] = self.env.now + skew[i] if skew is not None else self.env.now
        for event, axis in background:
            yield from self.wait(event, axis, chip=chip)
        yield from self._update(chip, rank)

    def _update(self, chip: Any, rank: int) -> Generator[Any, Any, None]:
        dense, expert, _ = stage_params(self.cfg, self.plan, rank)
        e_w = self.cfg.weight_elem_bytes
        yield from self.work(chip, optimizer_work(self.plan, self.opts, dense + expert, e_w), "optimizer")
        if self.plan.size("fsdp") > 1 and self.opts.zero in (1, 2):
            regather = Comm("all_gather", ("fsdp",), (dense + expert) * e_w, "fsdp")
            yield from self.wait(self.collective(regather, chip, ("regather",)), "fsdp", chip=chip)

    def run(self) -> dict[str, Any]:
        """Simulate the step; the step time, busy fractions, bubble and exposed communication per axis.

        A symmetric step (``fast``, `simulator.acceleration.step_symmetry`) runs one chip per pipeline stage
        and reports the whole system's figures; `Symmetry.broken` then says whether it must rerun in full.
        """
        self._index = {c.index: i for i, c in enumerate(self.system.chips)}
        if self.sym.active and self.p > 1 and self.sym.foresees:
            with gc_paused():  # (every stage's groups: tens of thousands of objects, no garbage cycles)
                self.sym.foresee(self._ahead())
        for chip in self.sym.chips():
            state = per_chip_memory(self.cfg, self.plan, self.opts, self.batch, self.seq, self.stage_of[chip])
            self._mem(chip, state["params_bytes"] + state["grads_bytes"] + state["optimizer_bytes"])
            self.system.process(self.program(chip), f"chip {chip} training step")
        with gc_paused():  # the trace's spans: a full pass of the collector over them costs more than the run
            self.system.run()
        with gc_paused():  # (the orbits' links it builds: thousands of channels, no garbage cycles)
            self.sym.finish(self.system.trace)
        k = self.sym.per_stage if self.sym.active else 1  # chips each simulated one stands for
        step, n = self.env.now, len(self.system.chips)
        pipelined = max(self.pipe_end.values())
        idle = (self.bubble_s + sum(pipelined - t for t in self.pipe_end.values())) * k
        with gc_paused():  # the finished run's (callers reuse it: no second pass); the replays' spans added after
            metrics = self.metrics = self.sym.replays.metrics(self.sym.upper_bound)
        busy = metrics["busy_s"] or {}
        links = [v for u, v in busy.items() if u.startswith("link")]
        memory = self.hbm.summary()
        if self.sym.active and self.hbm.peak:
            memory["memory_timeline_chip"] = self.sym.timeline_chip(self.hbm.peak, self.stage_of)
        return {"step_time_s": step, "pipelined_s": pipelined,
                "bubble_fraction": idle / n / pipelined if pipelined and self.p > 1 else 0.0,
                "exposed_comm_s": {a: t * k / n for a, t in sorted(self.exposed.items())},
                "busy_fraction": {u: v / step for u, v in busy.items() if not u.startswith("link")} if step else {},
                "busiest_link_fraction": max(links) / step if links and step else 0.0,
                "simulated_bytes": metrics["bytes"], "overlap_s": metrics["overlap_s"], **memory}


def simulate_step(cfg: TransformerConfig, chip: ChipSpec, plan: MeshPlan, opts: TrainOptions, batch: int, seq: int,
                  topology: str | None = None, trace: bool = True, calibrated: bool = False,
                  fast: bool = True, built: tuple[System, Mesh | None] | None = None,
                  replay: bool = True, quotients: bool = True) -> tuple[TrainStep, dict[str, Any]]:
    """A simulated step and its figures: by symmetry where ``fast`` and the step is symmetric, else (or when
    the symmetric run finds its chips unlike) every chip; ``replay`` False: no collective replayed
    (`simulator.acceleration.replay`); ``quotients`` False: no collective run on the quotient of its links by
    translations (`simulator.acceleration.quotient`; a step where some collectives of one class of links could not
    be reruns without). ``built``: a fresh (system, mesh) of `build_system`
    for the plan, with the same trace and calibrated settings, to run on instead of building one. A symmetric
    run that finds it must be rerun (quotients mixed, replays in conflict, chips unlike) is rerun by the rules of
    `simulator.acceleration.reruns`, the one driver of reruns."""
    first: list[TrainStep] = []  # the first run: every rerun of the fast step reuses its collectives' plans

    def make(attempt: Attempt) -> TrainStep:
        if not first:
            first.append(TrainStep(cfg, chip, plan, opts, batch, seq, topology, trace, calibrated, attempt.fast,
                                   built, attempt.replay, quotients=attempt.quotients))
            return first[0]
        if not attempt.fast:
            return TrainStep(cfg, chip, plan, opts, batch, seq, topology, trace, calibrated, fast=False)
        return TrainStep(cfg, chip, plan, opts, batch, seq, topology, trace, calibrated, True,
                         replay=attempt.replay, avoid=attempt.avoid, quotients=attempt.quotients,
                         shared=first[0].sym.shared, node_allowed=attempt.node_allowed, orbits=attempt.orbits,
                         lockstep=attempt.lockstep)

    outcome = executor(fast).run_step(make, quotients=quotients, replay=replay, orbits=True)
    outcome.run.reruns = outcome.reasons
    return outcome.run, outcome.figures
