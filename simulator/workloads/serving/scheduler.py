"""One serving replica's iteration-level scheduler, as vLLM's V1 engine runs it, and its clock.

Every iteration (one forward pass of the model on the replica's chips):

1. requests that have arrived join the waiting queue (arrival order);
2. running requests, oldest first, each get their next tokens: one to decode, or a prefill chunk of at most
   the token budget left (``chunk_tokens``: vLLM's ``max_num_batched_tokens``); each needs the KV blocks
   for them -- when the pool has none free, the newest running request is preempted: ``recompute`` frees
   its blocks and puts it back at the head of the waiting queue to prefill its prompt and generated tokens
   again; ``swap`` copies its blocks to host memory over the host link (PCIe, priced in the step) and
   brings them back before any new request is admitted;
3. waiting requests (FCFS) are admitted while the running batch is under ``max_batch`` sequences, token
   budget is left and their first chunk's blocks are free; a prompt's cached prefix (``prefix_hit``
   fraction) is not recomputed, though its blocks are held.

With ``chunk_tokens`` = 0 (chunking off) a prompt is prefilled whole, in an iteration of prefills alone of
at most ``whole_budget_tokens`` (vLLM V0's ``max_num_batched_tokens``, max(max_model_len, 2048)) -- no
decode token rides along: vLLM V0's prefill-first policy. The iteration's time is `StepCosts`'
(bound or forecast) plus any swap; a request's first token comes at the end of the iteration that
finishes its prompt, each later token one iteration later. A scheduler call (an iteration, or a multi-step
window) also pays the host time ``SchedulerConfig.host`` (`simulator.workloads.serving.host`; zero unless
set). Stretches of pure decode (every running request decoding, nothing to admit) run as one segment up to
the next completion or admissible arrival, priced step by step as the contexts grow, so an hour of traffic
stays fast.
"""
from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from simulator.workloads.serving.host import HostCost
from simulator.workloads.serving.kvcache import BlockPool, blocks_for

StepPrice = Callable[[int, int, list[tuple[int, int]]], float]


class Request:
    """A request's state on a replica: tokens known (prompt + generated), tokens whose KV is computed."""

    __slots__ = ("rid", "arrival_s", "sent_s", "prompt", "output", "generated", "computed", "blocks", "first_token_s",
                 "finish_s", "preemptions", "admitted", "swapped_blocks", "hit")

    def __init__(self, rid: int, arrival_s: float, prompt: int, output: int, generated: int = 0,
                 computed: int = 0, hit: int = 0) -> None:
        self.rid, self.arrival_s, self.prompt, self.output = rid, arrival_s, prompt, output
        self.sent_s = arrival_s  #: when the client sent it (``arrival_s`` is when it reaches the engine's queue)
        self.generated, self.computed, self.hit = generated, computed, hit
        self.blocks = 0
        self.first_token_s: float | None = None
        self.finish_s: float | None = None
        self.preemptions = 0
        self.admitted = False
        self.swapped_blocks = 0

    @property
    def need(self) -> int:
        """Tokens to process before the next one can be generated (1: decoding)."""
        return self.prompt + self.generated - self.computed


@dataclass(frozen=True)
class SchedulerConfig:
    """A replica's scheduling knobs: max sequences per iteration, token budget per iteration (0: no chunked
    prefill), preemption mode, the host link for swaps (bytes/s), KV bytes per position per chip, and whether
    the replica only prefills (disaggregated: a request leaves after its first token)."""

    max_batch: int = 256
    chunk_tokens: int = 8192
    preempt: str = "recompute"
    host_bytes_per_s: float = 64e9
    kv_bytes_per_token: float = 0.0
    prefill_only: bool = False
    prefix_hit: float = 0.0
    whole_budget_tokens: int = 8192  #: chunking off: prompt tokens per prefill iteration (a longer prompt runs alone)
    num_steps: int = 1  #: decode steps per scheduling window (vLLM 0.6's ``--num-scheduler-steps``; 1: every step)
    host: HostCost = HostCost()  #: host seconds per scheduler call, serial with the steps (forecast only; zero: none)


@dataclass
class Timeline:
    """Per-iteration (or per decode segment) samples: start time (s), running, waiting, KV occupancy, tokens."""

    t_s: list[float] = field(default_factory=list)
    running: list[int] = field(default_factory=list)
    waiting: list[int] = field(default_factory=list)
    kv: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)

    def add(self, t: float, running: int, waiting: int, kv: float, tokens: int) -> None:
        self.t_s.append(t)
        self.running.append(running)
        self.waiting.append(waiting)
        self.kv.append(kv)
        self.tokens.append(tokens)


class Replica:
    """One replica's queues, KV pool and clock; `run` serves a list of requests (sorted by arrival)."""

    def __init__(self, price: StepPrice, pool: BlockPool, cfg: SchedulerConfig) -> None:
        self.price, self.pool, self.cfg = price, pool, cfg
        self.now = 0.0
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.swapped: deque[Request] = deque()
        self.timeline = Timeline()
        self.iterations = 0
        self.preemptions = 0
        self.done: list[Request] = []
        self._gone: set[int] = set()

    # -- KV and preemption -------------------------------------------------------------------------------
    def _preempt(self, victim: Request) -> float:
        """Take ``victim`` off the running batch; the seconds its swap-out costs (0 for recompute)."""
        self.running.remove(victim)
        victim.preemptions += 1
        self.preemptions += 1
        if self.cfg.preempt == "swap":
            self._gone.add(id(victim))
            self.pool.release(victim.blocks)
            victim.swapped_blocks, victim.blocks = victim.blocks, 0
            self.swapped.append(victim)
            return self._swap_s(victim.swapped_blocks)
        self._gone.add(id(victim))
        self.pool.release(victim.blocks)
        victim.blocks, victim.computed = 0, 0
        self.waiting.appendleft(victim)
        return 0.0

    def _swap_s(self, blocks: int) -> float:
        return blocks * self.pool.block_tokens * self.cfg.kv_bytes_per_token / self.cfg.host_bytes_per_s

    def _reserve(self, req: Request, tokens: int) -> tuple[bool, float]:
        """Blocks for ``req`` to hold ``tokens`` positions, preempting the newest running requests as needed;
        (whether ``req`` got them, seconds of swaps)."""
        swap = 0.0
        while True:
            got = self.pool.grow(req.blocks, tokens)
            if got is not None:
                req.blocks = got
                return True, swap
            victim = self.running[-1]
            swap += self._preempt(victim)
            if victim is req:
                return False, swap

    # -- one iteration -----------------------------------------------------------------------------------
    def _take(self, req: Request, budget: float, whole: bool, any_chosen: bool) -> int:
        """Tokens of ``req`` this iteration: all it needs (chunking off: a prompt is never split, and one past
        the budget runs alone), else as many as the budget leaves."""
        if whole:
            return req.need if req.need <= budget or not any_chosen else 0
        return int(min(req.need, budget))

    def _schedule(self) -> tuple[list[tuple[Request, int]], float]:
        whole = not self.cfg.chunk_tokens
        budget: float = self.cfg.chunk_tokens or self.cfg.whole_budget_tokens
        prefill_first = whole and bool(self.waiting or any(r.need > 1 for r in self.running))
        chosen: list[tuple[Request, int]] = []
        swap, before = 0.0, self.preemptions
        self._gone = set()
        for req in list(self.running):
            if id(req) in self._gone or (prefill_first and req.need == 1):
                continue
            n = self._take(req, budget, whole, bool(chosen))
            if n <= 0:
                break
            ok, s = self._reserve(req, req.computed + n)
            swap += s
            if ok:
                chosen.append((req, n))
                budget -= n
        if self.preemptions == before:
            swap += self._swap_in()
            if not self.swapped:
                self._admit(chosen, budget, whole)
        if prefill_first and not chosen:
            # no prefill could be scheduled (batch full, or no free blocks): the decodes run (vLLM V0's
            # _schedule_default runs the running queue when it scheduled no prefill)
            for req in list(self.running):
                if id(req) in self._gone or req.need != 1:
                    continue
                ok, s = self._reserve(req, req.computed + 1)
                swap += s
                if ok:
                    chosen.append((req, 1))
        if self._gone:
            chosen = [(r, n) for r, n in chosen if id(r) not in self._gone]
        return chosen, swap

    def _swap_in(self) -> float:
        s = 0.0
        while self.swapped and len(self.running) < self.cfg.max_batch:
            req = self.swapped[0]
            got = self.pool.grow(0, req.swapped_blocks * self.pool.block_tokens)
            if got is None:
                break
            self.swapped.popleft()
            req.blocks, req.swapped_blocks = got, 0
            self.running.append(req)
            s += self._swap_s(got)
        return s

    def _admit(self, chosen: list[tuple[Request, int]], budget: float, whole: bool) -> None:
        while self.waiting and budget > 0 and len(self.running) < self.cfg.max_batch:
            req = self.waiting[0]
            if not req.admitted:
                req.computed = req.hit
            n = self._take(req, budget, whole, bool(chosen))
            if n <= 0:
                break
            got = self.pool.grow(0, req.computed + n)
            if got is None:
                break
            self.waiting.popleft()
            req.blocks, req.admitted = got, True
            self.running.append(req)
            chosen.append((req, n))
            budget -= n

    def _step(self) -> None:
        chosen, swap = self._schedule()
        if self.cfg.num_steps > 1 and chosen and all(r.generated and r.need == 1 for r, _ in chosen):
            self._window(chosen, swap)
            return
        decode = [r for r, n in chosen if r.generated and r.need == 1]
        chunks = [(n, r.computed) for r, n in chosen if not (r.generated and r.need == 1)]
        ctx = sum(r.computed for r in decode)
        tokens = sum(n for _, n in chosen)
        self.timeline.add(self.now, len(self.running), len(self.waiting), self.pool.occupancy, tokens)
        self.now += self.price(len(decode), ctx, chunks) + swap + self._host(len(chosen), 1)
        self.iterations += 1
        for req, n in chosen:
            req.computed += n
            if req.need == 0:
                self._emit(req)

    def _window(self, chosen: list[tuple[Request, int]], swap: float) -> None:
        """Multi-step scheduling (vLLM 0.6 ``--num-scheduler-steps K``): the decode batch ``chosen`` runs K steps
        as scheduled, with K - 1 lookahead KV slots each; a request that ends inside the window keeps its
        slot to the window's end, and its tokens reach the client together when the window ends (the engine
        processes the window's outputs then). Prefill steps stay single steps (vLLM gives a prefill no
        lookahead slots without chunked prefill), so arrivals wait for the window to end."""
        k = self.cfg.num_steps
        self._gone = set()
        plan: list[tuple[Request, int]] = []
        for req, _ in chosen:
            if id(req) in self._gone:
                continue
            n = min(k, req.output - req.generated)
            ok, s = self._reserve(req, req.computed + n)
            swap += s
            if ok:
                plan.append((req, n))
        plan = [(r, n) for r, n in plan if id(r) not in self._gone]
        d = len(plan)
        ctx = sum(r.computed for r, _ in plan)
        self.timeline.add(self.now, len(self.running), len(self.waiting), self.pool.occupancy, d)
        self.now += swap
        for i in range(k if d else 0):
            self.now += self.price(d, ctx + i * d, [])
        self.now += self._host(d, k)
        self.iterations += k if d else 0
        for req, n in plan:
            req.computed += n
            req.generated += n - 1
            self._emit(req)

    def _host(self, d: int, k: int) -> float:
        """Host seconds of a scheduler call of ``d`` sequences and ``k`` steps (none for an empty call)."""
        return self.cfg.host.seconds(d, k) if d else 0.0

    def _emit(self, req: Request) -> None:
        req.generated += 1
        if req.first_token_s is None:
            req.first_token_s = self.now
        if req.generated >= req.output or self.cfg.prefill_only:
            req.finish_s = self.now
            self.running.remove(req)
            self.pool.release(req.blocks)
            req.blocks = 0
            self.done.append(req)

    # -- decode segments ---------------------------------------------------------------------------------
    def _segment_steps(self, next_arrival: float) -> int:
        """Decode iterations that can run as one segment now (0: take a normal iteration)."""
        if (self.swapped or not self.running or self.cfg.prefill_only
                or any(r.need != 1 for r in self.running)):
            return 0
        can_admit = len(self.running) < self.cfg.max_batch
        if self.waiting and can_admit:
            return 0
        k = min(r.output - r.generated for r in self.running)
        d = len(self.running)
        k = min(k, (self.pool.free // d - 1) * self.pool.block_tokens)
        if can_admit and next_arrival < math.inf:
            # steps until the next arrival: at least one; priced below, so count by time
            k = min(k, self._steps_until(next_arrival, k))
        return max(k, 0)

    def _steps_until(self, t: float, limit: int) -> int:
        d = len(self.running)
        ctx = sum(r.computed for r in self.running)
        now, k = self.now, 0
        while k < limit and now < t:
            now += self.price(d, ctx + k * d, []) + self._host(d, 1)
            k += 1
        return k

    def _segment(self, k: int) -> None:
        d = len(self.running)
        ctx = sum(r.computed for r in self.running)
        self.timeline.add(self.now, d, len(self.waiting), self.pool.occupancy, d)
        for i in range(k):
            self.now += self.price(d, ctx + i * d, []) + self._host(d, 1)
        self.iterations += k
        for req in list(self.running):
            req.computed += k
            req.blocks = self.pool.grow(req.blocks, req.computed) or req.blocks
            req.generated += k - 1
            self._emit(req)

    # -- the loop ----------------------------------------------------------------------------------------
    def run(self, requests: list[Request]) -> list[Request]:
        """Serve ``requests`` (sorted by arrival) to the end; each gets its first-token and finish times."""
        queue = deque(requests)
        while queue or self.waiting or self.running or self.swapped:
            while queue and queue[0].arrival_s <= self.now:
                self.waiting.append(queue.popleft())
            if not (self.waiting or self.running or self.swapped):
                self.now = queue[0].arrival_s
                continue
            k = 0 if self.cfg.num_steps > 1 else self._segment_steps(queue[0].arrival_s if queue else math.inf)
            if k > 1:
                self._segment(k)
            else:
                self._step()
        return self.done


def initial_blocks(tokens: int, block_tokens: int) -> int:
    """Blocks a request arriving with ``tokens`` positions of KV (disaggregated decode) needs."""
    return blocks_for(tokens, block_tokens)
