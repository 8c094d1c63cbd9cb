"""A collective's schedule: `Transfer` records with dependencies, built by `Schedule`, run by `execute`.

A transfer says "send these keys from ``src`` to ``dst``, copying or adding them, once these earlier
transfers have arrived". `execute` starts each transfer the moment its dependencies have arrived, so
no global barrier is assumed; a barrier is an explicit zero-byte transfer that waits for a set.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

from simulator.engine.network import Network
from simulator.engine.watch import TICK, expect_events
from simulator.errors import DeadlockError


@dataclass(frozen=True, slots=True)
class Transfer:
    """Send ``keys`` from ``src`` to ``dst`` (op ``copy`` or ``add``) after ``deps`` have arrived."""

    id: int
    src: Any
    dst: Any
    keys: tuple
    op: str
    deps: tuple[int, ...]
    nbytes: float


EVENTS_PER_TRANSFER = 3  #: simulated events of one transfer over one hop (start, link, arrival)
LONG_RUN_HINT = "use --mode reduced, fewer chips or a smaller topology"


class Schedule:
    """Transfers under construction, with the arrivals recorded per (tag, slot).

    ``key_bytes`` is the size of one key; a transfer's bytes are its key count times that.
    """

    def __init__(self, key_bytes: float) -> None:
        self.key_bytes = key_bytes
        self.transfers: list[Transfer] = []
        self.arrivals: dict[tuple[Any, Any], list[int]] = defaultdict(list)
        self.by_tag: dict[Any, list[int]] = defaultdict(list)

    def add(self, src: Any, dst: Any, keys: tuple | int, op: str, deps: Sequence[int], tag: Any, slot: Any,
            nbytes: float | None = None) -> int:
        """Append a transfer of ``keys`` (or, timing only, of that many keys) and record where it arrives;
        ``nbytes`` (keys of unequal sizes) replaces the key count times ``key_bytes``."""
        tid = len(self.transfers)
        count = keys if isinstance(keys, int) else len(keys)
        self.transfers.append(Transfer(tid, src, dst, keys if not isinstance(keys, int) else (), op,
                                       tuple(sorted(set(deps))), count * self.key_bytes if nbytes is None else nbytes))
        self.arrivals[(tag, slot)].append(tid)
        self.by_tag[tag].append(tid)
        if tid & (TICK - 1) == TICK - 1:  # a huge schedule shows up (and can be refused) while it is planned
            expect_events(EVENTS_PER_TRANSFER * TICK, LONG_RUN_HINT)
        return tid

    def barrier(self, tags: Any) -> int:
        """A zero-byte transfer that arrives once every transfer with one of ``tags`` has arrived."""
        tid = len(self.transfers)
        deps = tuple(t for tag in (tags if isinstance(tags, list) else [tags]) for t in self.by_tag[tag])
        self.transfers.append(Transfer(tid, None, None, (), "copy", deps, 0.0))
        return tid


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
            label: str = "") -> Completion:
    """Start every transfer as soon as its dependencies have arrived; returns an event that fires when
    the last one has arrived (run the environment to get there).

    With ``buffers`` (device -> key -> array), each transfer snapshots its keys at the sender when it
    starts and copies or adds them into the receiver when it arrives.
    """
    done = Completion(net.env)
    expect_events(EVENTS_PER_TRANSFER * (len(transfers) % TICK), LONG_RUN_HINT)  # the rest `Schedule.add` did not
    remaining = [len(transfers)]
    if not transfers:
        return done.succeed(net.env.now)
    waiting = [len(t.deps) for t in transfers]
    chips = set(net.chips)  # a transfer to a switch crosses one link (`Network.hop`); from one, too
    done.pending = _Pending(transfers, waiting, remaining, label)
    dependents: list[list[int]] = [[] for _ in transfers]
    for t in transfers:
        for d in t.deps:
            dependents[d].append(t.id)

    def start(t: Transfer) -> None:
        payload = {k: buffers[t.src][k].copy() for k in t.keys} if buffers is not None else None
        event = net.message(t.src, t.dst, t.nbytes, label) if t.src == t.dst or {t.src, t.dst} <= chips else \
            net.hop(t.src, t.dst, t.nbytes, label)  # a chip and its switch (in-switch reduction, NVLS)
        event.callbacks.append(lambda _e: arrive(t, payload))

    def arrive(t: Transfer, payload: dict[Any, np.ndarray] | None) -> None:
        if payload is not None:
            store = buffers[t.dst]
            for k, value in payload.items():
                store[k] = store[k] + value if t.op == "add" and k in store else value  # a switch starts empty
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
