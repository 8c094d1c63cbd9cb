"""A quotient run whose transfers follow one another strictly, timed in one timer instead of event by event.

On a GPU node system a tensor-parallel AllReduce on the step's quotient (`simulator.acceleration.quotient`) is a
strict chain: its ring's 2(n - 1) representative transfers each wait for the one before, and each crosses the
same two-hop route (GPU -> NVSwitch -> GPU) cut through, with zero-time barriers between the phases. Run event by
event (`quotient._QuotientRun`) every transfer costs a latency timer per hop, a completion timer per hop and an
arrival timer: four or five SimPy events, for 14 transfers and 32,768 AllReduces a 1T step on 3,072 A100.

While nothing else touches the chain's links, each of its flows is alone on its link, so each hop takes exactly
its latency plus bytes over bandwidth, and the whole chain's timeline is a fold of the same float operations that
`Channel.send` and `aggregate._CutThrough` perform (`_Chain.timeline`): a flow sent at ``t`` on a link of latency
``l`` and rate ``b`` starts at ``t + l`` and ends at ``(t + l) + n / b``; hop ``k + 1`` is sent ``l_k`` after hop
``k``; the message arrives at the last hop's end ``now``, or, where a later hop's latency holds it, at ``now +
(done - now)`` (the float `call_after` gives). `ChainRunner.run` folds that at the chain's start (`_Chain.end`,
from each hop's latency and duration, made once per setting of the links), sets one timer for the end and there
gives every link the state its last flow leaves (bytes carried, clock, generation, latency wait), counts the
interface bytes as the quotient run would and fires the completion.

That is exact only if the chain really is alone, which is checked, not assumed: from its start to its end the
chain holds its links, and the first thing that would touch one hands the chain over to the event-by-event run
(`ChainRunner._release`: the transfers that arrived counted, the one under way rebuilt -- its flows on their
links as `Channel.send` leaves them, the timers it has set --, the rest started by the arrivals as they would
be). Three things touch a link:

- a `send` or `transfer` on it (a pipeline message, another collective): the held link's methods are guards
  that hand the chain over, then send;
- `Network.idle`, where no other link is busy: every chain is handed over and its links asked (`busy`);
- `Network.set_link_efficiency` (a calibrated collective starting on an idle network): every chain is handed
  over first (`settle`), so a rate changes under the real flows.

Where the hand-over falls on one of the chain's own instants (a hop sent, a flow's end, an arrival), whether that
event came first is a matter of event order, which the chain cannot promise: it raises `Rerun` with
``conflict`` set and the step reruns without chains (`simulator.acceleration.reruns`, reason ``chained``). A chain
never gives a wrong number. Chains run on calibrated fast steps on GPU nodes with tracing off (no spans to record),
from a chain's start on idle links with nothing on its way in. What can differ from the event-by-event run is the
order of events within one instant (the chain's end is one timer), and the order in which concurrent collectives
add to one interface counter (a chain adds its bytes at its end): the same addends, a different sum only where
their floats do not add exactly (integers below 2^53 always do).
"""
from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from simulator.acceleration.aggregate import _CutThrough
from simulator.acceleration.node_quotients import Rerun
from simulator.acceleration.quotient import _QuotientRun
from simulator.collectives.schedule import AGGREGATED_EVENTS_PER_TRANSFER, PLAIN_OPS, PULSE, Completion, _Pending
from simulator.engine.channel import Channel, _Flow
from simulator.engine.simpy_door import clock
from simulator.engine.timers import call_at

if TYPE_CHECKING:  # annotations only: no import at run time (and no cycle)
    from simulator.acceleration.quotient import Quotient
    from simulator.engine.network import Network

NO_CHAINS = ("no chains",)  #: the key of a step's ``shared`` plans that turns chains off for its reruns
_HELD = ("send", "transfer")  #: the channel methods of a held link that hand its chain over first
_EXACT = 2.0 ** 53  #: whole numbers of bytes below this add exactly in floats
_ON: contextvars.ContextVar[bool] = contextvars.ContextVar("podsim_chains", default=True)


@contextlib.contextmanager
def no_chains() -> Iterator[None]:
    """Inside: every quotient runs event by event (a step rerun after a conflict; tests compare the two)."""
    token = _ON.set(False)
    try:
        yield
    finally:
        _ON.reset(token)


class _Chain:
    """A quotient's transfers as one strict chain (`of`): ``steps``, in the order they run, each (transfer id,
    route's links or None, bytes, interface counts (kind, bytes)); ``links``, every link they cross."""

    __slots__ = ("q", "steps", "links", "routed", "adds", "last", "sizes", "totals", "units", "waiting", "_programs")

    def __init__(self, q: Quotient, order: list[int]) -> None:
        self.q = q
        self.steps: list[tuple[int, tuple[Channel, ...] | None, float, list[tuple[str, float]]]] = []
        self.routed: list[tuple[tuple[Channel, ...], float]] = []  #: the routed transfers' (links, bytes), in order
        self.last: dict[Channel, tuple[int, int]] = {}  #: each link's last flow: (routed transfer, hop)
        self.sizes: dict[Channel, list[float]] = {}  #: the bytes of each link's flows, in order
        for tid in order:
            route = q.routes[tid]
            nbytes = q.transfers[tid].nbytes
            if route is None:
                self.steps.append((tid, None, nbytes, []))
                continue
            self.steps.append((tid, route[0], nbytes, [(kind, nbytes * count * q.order) for kind, count in route[1]]))
            for hop, link in enumerate(route[0]):
                self.last[link] = (len(self.routed), hop)
                self.sizes.setdefault(link, []).append(nbytes)
            self.routed.append((route[0], nbytes))
        self.links = tuple(self.sizes)
        #: each link's flows' bytes summed, where they are whole numbers (None: not): added one by one to a whole
        #: number of bytes below 2^53 every partial sum is exact, so one addition of the total is the same float
        self.totals = {c: sum(b) if all(float(x).is_integer() for x in b) else None for c, b in self.sizes.items()}
        self.adds = [add for step in self.steps for add in step[3]]  #: every interface count, in order
        n, units = len(q.transfers), [0]
        for left in range(n - 1, -1, -1):  # what `Aggregated.arrive` reports, arrival by arrival
            _report(lambda u: units.__setitem__(0, units[0] + u), left, n)
        self.units = units[0]  #: the work units the event-by-event run reports by ``pulse``
        self.waiting = [0] * n  #: (`_Pending`'s: none waits once the chain runs)
        self._programs: dict[tuple, list[tuple[tuple[float, float], ...]]] = {}

    def program(self) -> list[tuple[tuple[float, float], ...]]:
        """For the links' present rates and latencies: each routed transfer's hops as (latency, bytes / rate) s,
        the floats `Channel.send` adds (made once per setting of the links)."""
        key = tuple((c._bandwidth, c.latency_s) for c in self.links)
        found = self._programs.get(key)
        if found is None:
            found = self._programs[key] = [tuple((c.latency_s, nbytes / c._bandwidth) for c in links)
                                           for links, nbytes in self.routed]
        return found

    @staticmethod
    def end(t: float, program: list[tuple[tuple[float, float], ...]]) -> tuple[float, list[float]] | None:
        """`timeline`'s arrival of the last transfer and each routed transfer's start (s), for a start at ``t``
        (s): the same floats, with nothing kept but the starts; None where a flow would take no time (its end
        rounds to its start: `timeline` then decides)."""
        starts = []
        for hops in program:
            starts.append(t)
            if len(hops) == 2:  # (the tensor-parallel chain: GPU -> switch -> GPU)
                (la, da), (lb, db) = hops
                sa = t + la
                ea = sa + da
                sb = sa + lb
                eb = sb + db
                if not (ea > sa and eb > sb):
                    return None
                latest = ea if ea > eb else eb
                done = ea if ea > la else la  # (`hop_done`: the first late is 0.0 + la)
                late = done + lb
                done = eb if eb > late else late
                t = latest + (done - latest) if done > latest else latest
                continue
            head, latest, done = t, -1.0, 0.0
            for k, (latency, duration) in enumerate(hops):
                if k:
                    head = head + hops[k - 1][0]
                start = head + latency
                end = start + duration
                if not end > start:
                    return None
                latest = end if end > latest else latest
                late = done + latency
                done = end if end > late else late
            t = latest + (done - latest) if len(hops) > 1 and done > latest else latest
        return t, starts

    @staticmethod
    def of(q: Quotient) -> _Chain | None:
        """``q``'s transfers as a strict chain (at most one in flight at any time, each routed one over distinct
        plain channels, cut through, with more than zero bytes of a plain operation), or None."""
        waiting, dependents, roots = q.shape
        if len(roots) != 1:
            return None
        left, ready, order = list(waiting), [roots[0].id], []
        while ready:
            if len(ready) != 1:
                return None
            tid = ready.pop()
            order.append(tid)
            for d in dependents[tid]:
                left[d] -= 1
                if left[d] == 0:
                    ready.append(d)
        if len(order) != len(q.transfers):
            return None
        for tid in order:
            route, t = q.routes[tid], q.transfers[tid]
            if route is None:
                continue
            links = route[0]
            if t.op not in PLAIN_OPS or not t.nbytes > 0 or len(set(links)) != len(links) or \
                    any(type(c) is not Channel for c in links):
                return None
        return _Chain(q, order)

    def timeline(self, t: float) -> list[_Step] | None:
        """The chain started at ``t`` (s) alone on its links: each transfer's start, hops (link, sent, start, end
        s) and arrival -- the float operations of `Channel.send`, `aggregate._CutThrough` and `call_after`, in
        their order; None where a flow would not be admitted ahead of its arrival (`Channel.admit_ahead`: its
        latency wait would then be a timer of its own)."""
        steps: list[_Step] = []
        last: dict[Channel, float] = {}  # each link's latest flow's start
        for tid, links, nbytes, adds in self.steps:
            if links is None:  # a barrier: arrives at once (`call_after(env, 0.0, ...)`)
                steps.append(_Step(tid, t, [], t, nbytes, adds))
                continue
            hops = []
            head, latest, done = t, -1.0, 0.0
            for k, link in enumerate(links):
                if k:
                    head = head + links[k - 1].latency_s  # `call_after(env, latency, start_hop, k + 1)`
                latency = link.latency_s
                if latency > 0 and (not link.admit_ahead or last.get(link, -1.0) >= head):
                    return None
                start = head + latency
                end = start + nbytes / link._bandwidth
                last[link] = start
                hops.append((link, head, start, end))
                latest = end if end > latest else latest
                late = done + latency  # (`_CutThrough.hop_done`: max(end, the previous hop's plus this latency))
                done = end if end > late else late
            arrival = latest + (done - latest) if len(links) > 1 and done > latest else latest
            steps.append(_Step(tid, t, hops, arrival, nbytes, adds))
            t = arrival
        return steps


class _Step:
    """One transfer of a chain under way: its id, start, hops (link, sent, start, end s), arrival (s), bytes and
    interface counts (kind, bytes)."""

    __slots__ = ("tid", "start", "hops", "arrival", "nbytes", "adds")

    def __init__(self, tid: int, start: float, hops: list[tuple[Channel, float, float, float]], arrival: float,
                 nbytes: float, adds: list[tuple[str, float]]) -> None:
        self.tid, self.start, self.hops, self.arrival, self.nbytes, self.adds = tid, start, hops, arrival, nbytes, adds


class _Held:
    """A chain under way: its start and end (s), the hops' figures it ran at (`_Chain.program`), each routed
    transfer's start, its completion and label; its full timeline (`steps`) made only where it is handed over."""

    __slots__ = ("chain", "t0", "end", "program", "starts", "done", "label", "over")

    def __init__(self, chain: _Chain, t0: float, end: float, program: list, starts: list[float],
                 done: Completion, label: str) -> None:
        self.chain, self.t0, self.end, self.program, self.starts = chain, t0, end, program, starts
        self.done, self.label = done, label
        self.over = False  #: ended, or handed to the event-by-event run

    @property
    def steps(self) -> list[_Step]:
        steps = self.chain.timeline(self.t0)
        assert steps is not None and steps[-1].arrival == self.end, "the chain's timeline is the one it ran"
        return steps

    def events(self, steps: list[_Step]) -> set[float]:
        """The instants of the event-by-event run's own events after the start: later hops sent, flows' ends,
        arrivals (a later transfer's start, a barrier's)."""
        times = set()
        for step in steps:
            times.add(step.arrival)
            if not step.hops:
                times.add(step.start)
            for k, (_, sent, _, end) in enumerate(step.hops):
                times.add(end)
                if k:
                    times.add(sent)
        return times


class ChainRunner:
    """Runs a step's strict-chain quotients in one timer each on ``net`` (installed as ``net.eager_sink`` by
    `attach`), holding their links until they end; where anything else would touch a held link first, hands the
    chain to the event-by-event run as it stands then (`_release`), or, at an instant where that state depends on
    the order of events, raises `Rerun` with ``conflict`` set (see the module)."""

    def __init__(self, net: Network, shared: dict) -> None:
        self.net, self.shared = net, shared
        self._chains: dict[int, tuple[Any, _Chain | None]] = {}  #: id(quotient) -> (it, its chain or None)
        self._held: dict[Channel, _Held] = {}  #: each held link's chain
        self._guards: dict[Channel, dict[str, Any]] = {}  #: each link's guards (`_guard`), made once
        self.conflict = False  #: a chain could not be handed over exactly: the step reruns without chains
        self.runs = 0  #: chains run in one timer
        self.released = 0  #: of those, handed to the event-by-event run before their end

    def run(self, q: Quotient, label: str) -> Completion | None:
        """Start ``q`` now as one chain where it is one and its links are idle with nothing on its way in; its
        completion, or None (run it event by event)."""
        entry = self._chains.get(id(q))
        if entry is None or entry[0] is not q:
            entry = self._chains[id(q)] = (q, _Chain.of(q))
        chain = entry[1]
        if chain is None:
            return None
        env, held = self.net.env, self._held
        now = clock(env)
        for link in chain.links:
            if link in held:
                self._release(held[link])
            if link._flows or link._arrive_by >= now:
                return None  # busy, or a flow on its way in: run it event by event (it shares the link)
        if not Channel.admit_ahead:
            return None
        program = chain.program()
        found = chain.end(now, program)
        if found is None:
            return None
        end, starts = found
        done = Completion(env)
        done.pending = _Pending(q.transfers, chain.waiting, [len(q.transfers)], label)
        run = _Held(chain, now, end, program, starts, done, label)
        guards = self._guards
        for link in chain.links:
            held[link] = run
            mine = guards.get(link)
            if mine is None:
                mine = guards[link] = {name: self._guard(link, name) for name in _HELD}
            link.__dict__.update(mine)
        self.runs += 1
        call_at(env, end, self._finish, run)
        return done

    def _guard(self, link: Channel, name: str) -> Any:
        def held(*args: Any, **kwargs: Any) -> Any:
            self._release(self._held[link])
            return getattr(link, name)(*args, **kwargs)
        return held

    def _fail(self, why: str) -> None:
        self.conflict = True
        self.shared[NO_CHAINS] = True  # (the reruns share the plans: none of them chains)
        raise Rerun(f"a chain was not alone on its links ({why}): the step reruns without chains")

    def _let_go(self, run: _Held) -> None:
        run.over = True
        for link in run.chain.links:
            del self._held[link]
            for name in _HELD:
                del link.__dict__[name]

    def _finish(self, run: _Held) -> None:
        """The chain's end: every link as its last flow leaves it, the links let go, the completion fired."""
        if run.over:
            return
        self._let_go(run)
        chain = run.chain
        counters = self._counters()
        if counters is not None:
            for kind, nbytes in chain.adds:
                counters[kind] += nbytes
        starts, program = run.starts, run.program
        totals = chain.totals
        for link, (r, hop) in chain.last.items():
            sizes = chain.sizes[link]
            carried, total = link.bytes_carried, totals[link]
            if total is not None and carried.is_integer() and carried + total < _EXACT:
                carried += total  # (every partial sum a whole number below 2^53: the one-by-one sum exactly)
            else:
                for nbytes in sizes:  # one by one, as each flow's end adds them
                    carried += nbytes
            link.bytes_carried = carried
            head, hops = starts[r], program[r]
            for k in range(1, hop + 1):
                head = head + hops[k - 1][0]
            start = head + hops[hop][0]
            link._last_update = start + hops[hop][1]
            link._v = 0.0
            link._generation += 2 * len(sizes)  # (each flow's admission and end)
            if link.latency_s > 0:
                link._arrive_by = start
        pulse = getattr(self.net.env, "podsim_pulse", None)
        if pulse is not None:
            pulse(chain.units)
        run.done.pending.remaining[0] = 0
        run.done.succeed(run.end)

    def _counters(self) -> dict[str, float] | None:
        trace = self.net.trace
        return trace.bytes_by_interface if trace is not None else None

    def _release(self, run: _Held) -> None:
        """Hand ``run`` to the event-by-event run as it stands now (`quotient._QuotientRun`): the transfers that
        arrived counted, the one under way rebuilt -- its flows on their links as `Channel.send` leaves them, the
        timers it has set -- and the rest started by the arrivals, as they would be. Where the chain has an event
        of its own at this instant, whether it came before now is a matter of event order: a conflict."""
        env = self.net.env
        now = clock(env)
        steps = run.steps
        if now in run.events(steps):
            self._fail(f"other traffic at one of its own instants, t={now!r} s")
        self._let_go(run)
        self.released += 1
        q = run.chain.q
        qr = _QuotientRun(self.net, q.transfers, None, run.label, run.done, q.shape)
        qr.routes, qr.scale = q.routes, q.order
        counters = self._counters()
        for step in steps:
            if counters is not None:
                for kind, nbytes in step.adds:
                    counters[kind] += nbytes
            if step.arrival < now:
                for hop in step.hops:
                    _left(hop, step.nbytes)
                _arrived(qr, step.tid)
                continue
            self._rebuild(qr, step, now)
            return
        raise AssertionError("a chain handed over after its end")  # (its end's timer lets it go first)

    def _rebuild(self, qr: Any, step: _Step, now: float) -> None:
        """The transfer ``step``, under way at ``now``, as the event-by-event run has it then."""
        env, tid, nbytes = self.net.env, step.tid, step.nbytes
        if len(step.hops) == 1:  # `Channel.send` with ``then`` the arrival
            link, _, start, end = step.hops[0]
            _place(env, link, start, end, nbytes, qr.label, qr.arrive, tid)
            return
        route = qr.routes[tid][0]
        message = _CutThrough(self.net, route, nbytes, qr.label, qr.arrive, tid)
        for k, hop in enumerate(step.hops):
            link, sent, start, end = hop
            if sent > now:  # the head has not reached it: `start_hop` is due (it sends the hops after it)
                call_at(env, sent, message.start_hop, k)
                return
            if end < now:
                _left(hop, nbytes)
                message.ends[k] = end
                message.left -= 1
            else:
                _place(env, link, start, end, nbytes, qr.label, message.hop_done, k)
        if message.left == 0:  # every hop done; a later hop's latency holds the arrival (`hop_done`'s timer)
            call_at(env, step.arrival, qr.arrive, tid)

    # -- the hooks of `Network` --------------------------------------------------------------------------------
    def busy(self) -> bool:
        """Whether a held link is carrying bytes now (`Network.idle`, asked where no other link is): every chain
        handed to the event-by-event run, and its links asked."""
        links = [link for link in self._held]
        self.settle()
        return any(link.busy for link in links)

    def settle(self) -> None:
        """Hand every chain under way to the event-by-event run (before `Network.set_link_efficiency`: a link's
        rate changes only between collectives, and a flow admitted ahead of its arrival is put back)."""
        for run in list(dict.fromkeys(self._held.values())):
            self._release(run)


def _left(hop: tuple[Channel, float, float, float], nbytes: float) -> None:
    """Link ``hop[0]`` as `Channel._lone_done` leaves it after the hop's flow (sent, started, ended)."""
    link, _, start, end = hop
    link.bytes_carried += nbytes
    link._last_update = end
    link._v = 0.0
    link._generation += 2  # (its admission and its end)
    if link.latency_s > 0:
        link._arrive_by = start


def _place(env: Any, link: Channel, start: float, end: float, nbytes: float, label: str, then: Any,
           arg: Any) -> None:
    """A `send` flow on ``link`` as `Channel.send` leaves it, admitted ahead (or at once, without latency) at
    ``start``, its end's timer at ``end`` (s)."""
    flow = _Flow(nbytes, None, label, "send")
    flow.then, flow.arg, flow.start = then, arg, start
    link._flows = [(nbytes, 0, flow)]
    link._last_update = start
    link._v = 0.0
    link._generation += 1
    flow.generation = link._generation
    if link.latency_s > 0:
        link._arrive_by = start
    call_at(env, end, link._lone_done, flow)


def _arrived(qr: Any, tid: int) -> None:
    """`Aggregated.arrive` of ``tid`` without starting its dependents (they are the chain's, already under way
    or rebuilt)."""
    waiting = qr.waiting
    for d in qr.dependents[tid]:
        waiting[d] -= 1
    left = qr.remaining[0] = qr.remaining[0] - 1
    if qr.pulse is not None:
        _report(qr.pulse, left, len(qr.transfers))


def _report(pulse: Any, left: int, n: int) -> None:
    """What `Aggregated.arrive` reports by ``pulse`` at the arrival that leaves ``left`` of ``n``."""
    if left & (PULSE - 1) == 0:
        first = n & (PULSE - 1) if left + PULSE > n else 0
        pulse(AGGREGATED_EVENTS_PER_TRANSFER * (first or PULSE))


def attach(net: Network, shared: dict) -> ChainRunner | None:
    """Install a `ChainRunner` on ``net`` (``net.eager_sink``) unless chains are off (`no_chains`, or ``shared``
    marked by an earlier run's conflict, `NO_CHAINS`) or tracing is on; the runner, or None."""
    trace = net.trace
    if not _ON.get() or shared.get(NO_CHAINS) or (trace is not None and trace.enabled):
        net.eager_sink = None
        return None
    runner = net.eager_sink = ChainRunner(net, shared)
    return runner
