"""A collective's schedule: `Transfer` records with dependencies, built by `Schedule`, run by `execute`.

A transfer says "send these keys from ``src`` to ``dst``, copying or adding them, once these earlier
transfers have arrived". `execute` starts each transfer the moment its dependencies have arrived, so
no global barrier is assumed; a barrier is an explicit zero-byte transfer that waits for a set.

By default `execute` aggregates (issue 16): the acceleration layer's flow aggregation (reached through
`simulator.collectives.fast_path.FastPath.execute_aggregated`, so this layer names no module above it) sends each
transfer with `Channel.send`, calling back on arrival, and the timers of flows due at one time share one SimPy
event -- a ring step of equal messages on idle links costs two events, not two per message -- with the plain
path's times, bytes and spans (``aggregate=False`` keeps the plain path here; tests/test_aggregate.py compares
them). `run_collective` also pauses the garbage collector while it plans and runs (`gc_paused`).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import simpy

from simulator.collectives.fast_path import fast_path
from simulator.engine.gcpause import gc_paused  # noqa: F401  (re-exported: callers import it from here)
from simulator.engine.memory_budget import check_memory
from simulator.engine.network import Network
from simulator.engine.watch import TICK, current_watch, expect_events
from simulator.errors import DeadlockError


class Transfer(NamedTuple):
    """Send ``keys`` from ``src`` to ``dst`` (op ``copy`` or ``add``) after ``deps`` have arrived.

    An immutable record (a named tuple: `Schedule.add` builds tens of thousands, a fifth of a frozen
    dataclass's cost each)."""

    id: int
    src: Any
    dst: Any
    keys: tuple
    op: str
    deps: tuple[int, ...]
    nbytes: float


_new_transfer = tuple.__new__  #: ``_new_transfer(Transfer, (id, src, dst, keys, op, deps, nbytes))``

#: A pipelined hop split in two (issue 27): a transfer whose op is ``COPY_BYTES`` or ``ADD_BYTES`` sends its
#: bytes with no latency (`simulator.engine.network.Network.send_bytes`) and "arrives" when they have left the
#: link, so the next piece over that hop can follow at once; a ``DELAY`` transfer (no keys, no bytes) from the same
#: ``src`` to ``dst``, depending on it, then waits the route's latency (`Network.route_latency_s`): the piece has
#: arrived when the delay has. Buffers are written when the bytes have left; a chain's next hop waits for the delay.
COPY_BYTES = "copy bytes"
ADD_BYTES = "add bytes"
DELAY = "delay"
ADDS = ("add", ADD_BYTES)  #: the ops that add into the receiver's buffer
PLAIN_OPS = ("copy", "add")  #: the ops sent with their latency (`Network.message`, `Channel.send`)


EVENTS_PER_TRANSFER = 3  #: simulated events of one transfer over one hop on the plain path (start, link, arrival)
#: Work units of one transfer in an aggregated run (`execute`): its timers share SimPy events with a whole
#: step's, so it is counted as a send and an arrival, reported to the System every `PULSE` arrivals (about
#: `simulator.engine.watch.EVENTS_PER_S` units per second of real time; benchmarks/thousand_gpus.py measures)
AGGREGATED_EVENTS_PER_TRANSFER = 2
TRANSFER_BYTES = 400  #: memory of one planned transfer (its record, keys, where it arrives; about 300-480 B measured)
DEP_BYTES = 8  #: and of each dependency it lists
PULSE = 0x1000  #: arrivals between two reports of an aggregated run (progress, wall-clock limit: `System.pulse`)
LONG_RUN_HINT = "use fewer chips or a smaller topology (or --mode reduced, on wrapped tori)"
_TICK_MASK = TICK - 1
_BARRIER = object()  #: the tag `Schedule` files a barrier under: none (a barrier arrives nowhere)


class Schedule:
    """Transfers under construction, with the arrivals recorded per (tag, slot).

    ``key_bytes`` is the size of one key; a transfer's bytes are its key count times that.
    """

    def __init__(self, key_bytes: float) -> None:
        self.key_bytes = key_bytes
        self.transfers: list[Transfer] = []
        self._where: list[tuple[Any, Any]] = []  # (tag, slot) of each transfer; `_index` files them on demand
        self._arrivals: dict[tuple[Any, Any], list[int]] = defaultdict(list)
        self._by_tag: dict[Any, list[int]] = defaultdict(list)
        self._indexed = [0, 0]  # transfers filed so far in ``_arrivals``, in ``_by_tag`` (each index on demand)
        self._dep_count = 0  # dependencies listed by all transfers (memory: `DEP_BYTES` each)

    def expect(self, transfers: int, deps: int = 0) -> None:
        """About ``transfers`` more transfers listing ``deps`` dependencies in all are to be added: refuse,
        before they are, a schedule whose memory would pass the command's budget
        (`simulator.engine.memory_budget.check_memory`)."""
        total = len(self.transfers) + transfers
        check_memory(total * TRANSFER_BYTES + (self._dep_count + deps) * DEP_BYTES,
                     f"a collective schedule of about {total:,} transfers", LONG_RUN_HINT)

    @property
    def arrivals(self) -> dict[tuple[Any, Any], list[int]]:
        """The transfers that arrive at each (tag, slot), in the order they were added."""
        where, arrivals = self._where, self._arrivals
        for tid in range(self._indexed[0], len(where)):
            tag, slot = where[tid]
            if tag is not _BARRIER:
                arrivals[(tag, slot)].append(tid)
        self._indexed[0] = len(where)
        return arrivals

    @property
    def by_tag(self) -> dict[Any, list[int]]:
        """The transfers of each tag, in the order they were added."""
        where, by_tag = self._where, self._by_tag
        start, end = self._indexed[1], len(where)
        tid = start
        while tid < end:  # runs of one tag (a phase adds its transfers together): one append of each run
            tag = where[tid][0]
            run = tid + 1
            while run < end and where[run][0] is tag:
                run += 1
            if tag is not _BARRIER:
                by_tag[tag].extend(range(tid, run))
            tid = run
        self._indexed[1] = end
        return by_tag

    def add(self, src: Any, dst: Any, keys: tuple | int, op: str, deps: Sequence[int], tag: Any, slot: Any,
            nbytes: float | None = None) -> int:
        """Append a transfer of ``keys`` (or, timing only, of that many keys) and record where it arrives;
        ``nbytes`` (keys of unequal sizes) replaces the key count times ``key_bytes``."""
        transfers = self.transfers
        tid = len(transfers)
        if nbytes is None or type(keys) is not tuple:  # (a tuple of keys and their bytes: as given)
            if isinstance(keys, int):
                if nbytes is None:
                    nbytes = keys * self.key_bytes
                keys = ()
            elif nbytes is None:
                nbytes = len(keys) * self.key_bytes
        try:
            n = len(deps)  # (two in order, as a pipeline's are: nothing to sort)
            deps = tuple(deps) if n < 2 or (n == 2 and deps[0] < deps[1]) else tuple(sorted(set(deps)))
        except TypeError:  # an iterator
            deps = tuple(sorted(set(deps)))
        transfers.append(_new_transfer(Transfer, (tid, src, dst, keys, op, deps, nbytes)))
        self._where.append((tag, slot))
        self._dep_count += len(deps)
        if tid & _TICK_MASK == _TICK_MASK:  # a huge schedule shows up (and can be refused) while it is planned
            _expect_quietly(AGGREGATED_EVENTS_PER_TRANSFER * TICK)  # `execute` adds the plain rest
            self.expect(0)  # and its memory so far (an algorithm that knows its size refused it up front)
        return tid

    def add_split(self, src: Any, dst: Any, keys: tuple | int, op: str, deps: Sequence[int], tag: Any, slot: Any,
                  after: Sequence[int] = (), nbytes: float | None = None) -> tuple[int, int]:
        """A hop split in two (see `DELAY`): the bytes of ``keys`` (op ``copy`` or ``add``) once ``deps`` have
        arrived and the transfers ``after`` (earlier pieces' bytes on the same hop) have left, then the route's
        latency; returns (the bytes' transfer, the delay's). The delay is what arrives at (``tag``, ``slot``);
        the bytes are filed under (("bytes", ``tag``), ``slot``)."""
        bytes_op = {"copy": COPY_BYTES, "add": ADD_BYTES}[op]
        both = list(deps) + list(after)
        sent = self.add(src, dst, keys, bytes_op, both, ("bytes", tag), slot, nbytes)
        return sent, self.add(src, dst, 0, DELAY, [sent], tag, slot)

    def barrier(self, tags: Any) -> int:
        """A zero-byte transfer that arrives once every transfer with one of ``tags`` has arrived."""
        tid = len(self.transfers)
        by_tag = self.by_tag
        deps = tuple(t for tag in (tags if isinstance(tags, list) else [tags]) for t in by_tag[tag])
        self.transfers.append(_new_transfer(Transfer, (tid, None, None, (), "copy", deps, 0.0)))
        self._where.append((_BARRIER, None))
        return tid


def _expect_quietly(events: int) -> None:
    """Add ``events`` to the command's estimate and enforce its budget, without the long-run warning: a
    schedule under construction does not know its size yet, so `execute` warns once it does (the whole
    estimate, not the part built when it first passed `simulator.engine.watch.LONG_RUN_EVENTS`)."""
    watch = current_watch()
    if watch is None:
        return
    warned, watch.warned = watch.warned, True
    try:
        watch.expect(events, LONG_RUN_HINT)
    finally:
        watch.warned = warned


class Completion(simpy.Event):
    """Fires (value: the time) when the last transfer of a schedule has arrived.

    ``pending`` describes, when printed, the transfers still outstanding; `System` names it when a
    process waiting on this event is stuck (through ``podsim_waits_for``).
    """

    def __init__(self, env: simpy.Environment, pending: Any = None) -> None:
        super().__init__(env)
        self.pending = pending
        self.algorithm: str | None = None  #: the algorithm `start_collective` chose ("none": one chip per group)
        self.protocol: str | None = None  #: and its NCCL protocol (calibrated GPU systems)

    @property
    def podsim_waits_for(self) -> Any:
        """What the event waits for, for deadlock messages (the protocol `System` reads)."""
        return self.pending


def execute(net: Network, transfers: list[Transfer], buffers: dict[Any, dict[Any, np.ndarray]] | None = None,
            label: str = "", aggregate: bool = True) -> Completion:
    """Start every transfer as soon as its dependencies have arrived; returns an event that fires when
    the last one has arrived (run the environment to get there).

    With ``buffers`` (device -> key -> array), each transfer snapshots its keys at the sender when it
    starts and copies or adds them into the receiver when it arrives.

    ``aggregate`` (flow-level aggregation, `FastPath.execute_aggregated`): transfers call back on arrival
    instead of firing events, and those that start at one instant with one delay share one timer event:
    the same times (to float rounding), bytes and spans, far fewer events; only the order of events
    within one instant can differ (so the order of spans in the trace). False: one event per transfer
    and hop (the plain path).
    """
    if aggregate:
        return fast_path().execute_aggregated(net, transfers, buffers, label)
    done = Completion(net.env)
    rest = len(transfers) % TICK  # what `Schedule.add` did not report; it counted the others as aggregated
    expect_events(EVENTS_PER_TRANSFER * rest + (EVENTS_PER_TRANSFER - AGGREGATED_EVENTS_PER_TRANSFER) *
                  (len(transfers) - rest), LONG_RUN_HINT)
    remaining = [len(transfers)]
    if not transfers:
        done.succeed(net.env.now)
        return done
    waiting = [len(t.deps) for t in transfers]
    chips = set(net.chips)  # a transfer to a switch crosses one link (`Network.hop`); from one, too
    done.pending = _Pending(transfers, waiting, remaining, label)
    dependents: list[list[int]] = [[] for _ in transfers]
    for t in transfers:
        for d in t.deps:
            dependents[d].append(t.id)

    def start(t: Transfer) -> None:
        payload = {k: buffers[t.src][k].copy() for k in t.keys} if buffers is not None else None
        if t.op not in PLAIN_OPS:  # a split hop's bytes, or its latency
            def fire(_: Any) -> None:
                arrive(t, payload)

            if t.op == DELAY:
                net.env.timeout(net.route_latency_s(t.src, t.dst)).callbacks.append(fire)
            else:
                net.send_bytes(t.src, t.dst, t.nbytes, label, fire, None)
            return
        event = net.message(t.src, t.dst, t.nbytes, label) if t.src == t.dst or {t.src, t.dst} <= chips else \
            net.hop(t.src, t.dst, t.nbytes, label)  # a chip and its switch (in-switch reduction, NVLS)
        event.callbacks.append(lambda _e: arrive(t, payload))

    def arrive(t: Transfer, payload: dict[Any, np.ndarray] | None) -> None:
        if payload is not None:
            assert buffers is not None  # a payload is copied from the buffers
            store = buffers[t.dst]
            for k, value in payload.items():
                store[k] = store[k] + value if t.op in ADDS and k in store else value  # a switch starts empty
        for d in dependents[t.id]:
            waiting[d] -= 1
            if waiting[d] == 0:
                start(transfers[d])
        remaining[0] -= 1
        if remaining[0] == 0:
            done.succeed(net.env.now)

    for t in transfers:
        if not t.deps:
            start(t)
    return done


class _Pending:
    """Describes, when printed, the transfers of a collective that have not arrived (for deadlock errors)."""

    def __init__(self, transfers: list[Transfer], waiting: list[int], remaining: list[int], label: str) -> None:
        self.transfers, self.waiting, self.remaining, self.label = transfers, waiting, remaining, label

    def __str__(self) -> str:
        blocked = [t for t, w in zip(self.transfers, self.waiting, strict=True) if w > 0]
        example = ""
        if blocked:
            t = blocked[0]
            example = f"; e.g. transfer {t.id} ({t.src} -> {t.dst}) waits for transfers {list(t.deps)[:4]}"
        return (f"{self.remaining[0]} of {len(self.transfers)} transfers of {self.label or 'a collective'} "
                f"({len(blocked)} never sent{example})")


def check_arrived(done: Completion, now: float) -> None:
    """Raise `DeadlockError` if the collective whose completion event is ``done`` did not finish."""
    if not done.triggered:
        raise DeadlockError(f"collective stopped at t={now:.6g} s with {done.pending} still pending; "
                            "a transfer depends on one that never arrives (a cycle, or a peer that never sends)")
