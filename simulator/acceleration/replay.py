"""Repeated collectives replayed from their first run when they are provably alone on their links, exactly.

A training step runs the same collective (kind, bytes, group) again and again: every layer's tensor-parallel
AllReduce, every layer's FSDP AllGather. A collective whose links carry nothing else while it runs takes the
same time from its start, loads each link with the same bytes and keeps each link busy over the same
intervals, whatever the instant it starts at: its transfers meet only one another. `Replays` records such a
lone run once (a `Template`: its duration, and for each link its bytes and its spans, offsets from the start)
and replays the later ones: a timer for the completion, the links' byte counters, the trace's interface counters
and the recorded spans (one per transfer, as the exact run's), instead of thousands of transfers' events.
Collectives that start at one instant on overlapping links (a layer's FSDP ReduceScatter and the next layer's
AllGather) form a group, recorded and replayed together; a group is replayed at its first member's start when that
collective started it before, the others expected at the same instant.

Being alone is checked, not assumed. Every piece of network traffic of the step claims its links when it
starts (a collective's: the links its transfers' routes cross; a pipeline message's: its route's) until it
ends (`claim`, `release`); a replay holds its links until the end of its last busy interval. A run is recorded
only if its links were idle when it started and no other traffic claimed one of them before it ended; a replay
starts only on idle links. Three things make a replay unsafe, and each sets ``conflict`` and names the replay
in ``disturbed`` so that the step is rerun without it (`simulate_step` does so): other traffic claiming a link
inside its window; a member its group expected that did not come (named with the start it was guessed at);
any other event due within `TIE` of a replayed completion -- in the full run it could come before or after
the completion, an order (e.g. of the HBM ledger's points at one instant) a replay cannot promise. What
remains is the float rounding of start + offset: times agree to about 1e-15 relative. The trace's spans of
a replay are the recorded run's, one per transfer with its label and bytes, moved to the replay's start, and
are added after the metrics, which take each link's busy time and the data movement's union from the template.
"""
from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from itertools import repeat
from typing import TYPE_CHECKING, Any

import simpy

from simulator.acceleration.templates import Template, offsets
from simulator.engine.channel import Channel
from simulator.engine.simpy_door import clock, queued
from simulator.engine.trace import (
    COMPUTE_KINDS,
    Span,
    busy_by_chip,
    intersection_length,
    merge_intervals,
    new_span,
)

if TYPE_CHECKING:  # annotations only: no import at run time (and no cycle)
    from simulator.engine.system import System

_WINDOW = (float("-inf"), None)
TIE = 1e-12  #: relative: events this close to a replayed completion might come before or after it in the full run
_span = partial(new_span, Span)  #: ``_span(fields)``: a `Span` from its eight fields


class _Run:
    """A group of collectives that started at one instant on overlapping links, under way: run (``alone``: it may
    become a template, until other traffic claims one of its links) or replayed (``template``)."""

    __slots__ = ("keys", "links", "start", "span_index", "carried", "alone", "left", "ends", "runs", "dones",
                 "labels", "template", "cancelled", "applied", "saved", "held", "order", "timers", "expect", "nth",
                 "scale")

    def __init__(self, start: float, span_index: int) -> None:
        self.start, self.span_index = start, span_index
        self.keys: list[Any] = []
        self.links: dict[Channel, None] = {}
        self.runs: list[Any] = []
        self.dones: list[simpy.Event] = []
        self.labels: list[str] = []
        self.carried: dict[Channel, float] = {}
        self.alone, self.left = False, 0
        self.ends: list[float] = []
        self.template: Template | None = None
        self.cancelled = self.applied = False
        self.saved: dict[Channel, tuple[float, Any]] = {}  #: replay windows this replay replaced
        self.held: dict[Channel, int] = {}  #: the group's claims on each link (released when it is done)
        self.order: list[int] = []  #: members in the order they completed
        self.timers: set[Any] = set()  #: a replay's own timers
        self.expect: list[Any] = []  #: members a replayed group awaits at its instant
        self.nth = 0  #: the first member's n-th start
        self.scale = 1  #: links each of its links stands for (a quotient's orbit: `simulator.acceleration.quotient`)

    def hold(self, links: Any) -> None:
        for link in links:
            self.held[link] = self.held.get(link, 0) + 1

    def add(self, key: Any, links: tuple[Channel, ...], run: Any, label: str, done: simpy.Event) -> None:
        self.keys.append(key)
        self.runs.append(run)
        self.labels.append(label)
        self.dones.append(done)
        for link in links:
            self.links[link] = None


class Replays:
    """Templates of the lone collectives of one run, the links' claims, and whether a replay was disturbed."""

    def __init__(self, system: System, enabled: bool, avoid: frozenset = frozenset()) -> None:
        self.system, self.env, self.net, self.trace = system, system.env, system.network, system.trace
        self.enabled = enabled and self.net is not None and system.calibration is None
        self._active: dict[Channel, int] = {}  #: claims under way on the link (collectives and messages running)
        self._replay_until: dict[Channel, tuple[float, Any]] = {}  #: end of the last replay's window, its key
        self.avoid = avoid  #: group keys never replayed, (group key, n): not guessed at its first member's n-th start
        self.disturbed: set[Any] = set()  #: keys of the replays that other traffic disturbed
        self._owner: dict[Channel, _Run] = {}  #: the recordable run under way on the link
        self.templates: dict[Any, Template | None] = {}  #: None: a key whose links are not all plain channels
        self.conflict = False  #: traffic claimed a link inside a replay's window: rerun without replays
        self.replayed = 0  #: collectives replayed
        self.recorded = 0  #: templates recorded
        self._pending: list[tuple[Template, float, str]] = []  #: replays whose spans are not in the trace yet
        self._fresh: dict[Channel, _Run] = {}  #: the groups started at this instant that others may join
        self._fresh_at = -1.0
        self._first: dict[Any, tuple] = {}  #: the group a collective started last, by its first member
        self._seen: dict[Any, int] = {}  #: starts of each collective so far

    def metrics(self, upper_bound: Any = None) -> dict[str, Any]:
        """`System.metrics` of the finished run (`compute_metrics`' figures, ``upper_bound`` as there), then the
        replays' spans added to the
        trace. The replays' share is added, not recomputed from their spans: each link's busy time adds (a replay's
        links carry nothing else in its window: each link's union is its own plus the rest's) and the data
        movement's union takes each replay's union of busy intervals (a few dozen per replay, not thousands)."""
        system, trace = self.system, self.trace
        pending, self._pending = self._pending, []
        if not pending:
            return system.metrics(upper_bound)
        metrics = system.metrics(upper_bound)  # the spans that ran, then the replays' share
        spans, e2e = trace.spans, metrics["end_to_end_s"]
        per_chip: dict[Any, dict[str, float]] = busy_by_chip(spans)
        moving = [(s.start, s.end) for s in spans if s.kind not in COMPUTE_KINDS]
        for template, now, _ in pending:
            for chip, unit, seconds in template.busy:
                units = per_chip.setdefault(chip, {})
                units[unit] = units.get(unit, 0.0) + seconds
            starts, ends = template.union
            moving.extend(zip(map(now.__add__, starts), map(now.__add__, ends), strict=True))
        if trace.stood_for:  # links a quotient's representatives stood for
            trace.stood_for.unfold_busy(per_chip)
        per_chip = {chip: dict(sorted(per_chip[chip].items())) for chip in sorted(per_chip, key=str)}
        busy: dict[str, float] = {}
        for units in per_chip.values():
            for unit, seconds in units.items():
                busy[unit] = max(busy.get(unit, 0.0), seconds)
        compute = merge_intervals((s.start, s.end) for s in spans if s.kind in COMPUTE_KINDS)
        metrics.update(busy_s=busy, overlap_s=intersection_length(compute, merge_intervals(moving)),
                       lower_bound_s=max((v for u in per_chip.values() for v in u.values()), default=0.0),
                       upper_bound_s=upper_bound(per_chip) if upper_bound is not None else
                       max((sum(u.values()) for u in per_chip.values()), default=0.0),
                       utilization={unit: (v / e2e if e2e > 0 else 0.0) for unit, v in busy.items()})
        for template, now, _ in pending:  # one span per transfer, as the exact run records them, built in C
            chips, units_, labels, starts, ends, kinds, nbytes = template.columns
            shift = now.__add__
            spans.extend(map(_span, zip(chips, units_, labels, map(shift, starts), map(shift, ends), kinds, nbytes,
                                        repeat(0.0))))
        return metrics

    # -- claims ---------------------------------------------------------------------------------------------
    def claim(self, links: Iterable[Channel]) -> bool:
        """Claim ``links`` from now until `release`; whether they were all idle (no claim under way on any)."""
        now, idle = clock(self.env), True
        active, replay_until, owner = self._active, self._replay_until, self._owner
        for link in links:
            until, key = replay_until.get(link, _WINDOW)
            if until > now:
                self.conflict = True
                self.disturbed.add(key)
            if active.get(link, 0):
                idle = False
                run = owner.get(link)
                if run is not None:
                    run.alone = False
            active[link] = active.get(link, 0) + 1
        return idle and not self.conflict

    def release(self, links: Iterable[Channel]) -> None:
        """End, now, the claims of traffic that has arrived."""
        active = self._active
        for link in links:
            active[link] -= 1

    # -- collectives ---------------------------------------------------------------------------------------
    def links_of(self, transfers: Iterable[Any]) -> tuple[Channel, ...] | None:
        """The links a schedule's transfers cross (None: one is not a plain `Channel`, e.g. a faulty link)."""
        net = self.net
        assert net is not None, "replays run on a system with a network (`enabled`)"
        chips = set(net.chips)
        seen: dict[Channel, None] = {}  #: the links in order of first use
        for t in transfers:
            if t.src is None or t.src == t.dst or not t.nbytes:
                continue
            if t.src in chips and t.dst in chips:
                hops = [c for route in net._route_links(t.src, t.dst, False)[0] for c in route]
            else:
                hops = [net.link(t.src, t.dst)]
            for c in hops:
                seen[c] = None
        links = tuple(seen)
        return links if all(type(c) is Channel for c in links) else None

    def start(self, key: Any, links: tuple[Channel, ...], run: Any, label: str, scale: int = 1) -> simpy.Event:
        """Start the collective ``key`` over ``links`` now; its completion event. Collectives that start at one
        instant on overlapping links (and on links nothing else claims) form a group, the template's key: the
        group is replayed from its template if it has one and its links are idle, else run (``run()``: the
        completion event of one collective) and recorded as the group's template if it turns out alone. ``scale``:
        the links each of ``links`` stands for (a run on a quotient), for the interface byte counters."""
        env, now = self.env, clock(self.env)
        if self._fresh_at != now:
            self._fresh, self._fresh_at = {}, now
        done = env.event()
        nth = self._seen[key] = self._seen.get(key, 0) + 1  # this collective's n-th start (the same in a rerun)
        group = self._joinable(links)
        if group is not None and group.scale != scale:  # a quotient run and a full one: never one group
            group = None
        if group is not None:
            self._join(group, key, links, run, label, done)
            return done
        idle = self.claim(links)
        group = _Run(now, len(self.trace.spans) if self.trace is not None else 0)
        group.scale = scale
        group.add(key, links, run, label, done)
        group.hold(links)
        group.nth = nth
        template = self.templates.get((key,))
        if template is None or (key,) in self.avoid or ((key,), nth) in self.avoid:  # a group it started before?
            gkey = self._first.get(key)
            guess = gkey is not None and gkey not in self.avoid and (gkey, nth) not in self.avoid
            template = self.templates.get(gkey) if guess else None
            group.expect = list(gkey[1:]) if gkey is not None and template is not None else []
        if template is not None and idle:
            self.release(links)  # the replay's window stands for its claim
            group.held = {}
            self._replay(group, template)
        else:
            self._run(group, idle)  # alone so far: others may join it; recorded if its group is new
        return done

    def _joinable(self, links: tuple[Channel, ...]) -> _Run | None:
        """The group started at this instant that a collective over ``links`` joins: the one whose links it shares,
        where every other claim on its links is none."""
        groups = {id(g): g for g in (self._fresh.get(link) for link in links) if g is not None}
        if len(groups) != 1:
            return None
        group = next(iter(groups.values()))
        now, active = clock(self.env), self._active
        for link in links:
            mine = link in group.links
            if active.get(link, 0) != group.held.get(link, 0):
                return None
            if not mine and self._replay_until.get(link, _WINDOW)[0] > now:
                return None
        return group

    def _join(self, group: _Run, key: Any, links: tuple[Channel, ...], run: Any, label: str,
              done: simpy.Event) -> None:
        if group.expect and group.expect[0] == key:  # the member a replayed group expected
            group.expect.pop(0)
            group.add(key, links, run, label, done)
            return
        if group.template is None:  # running, alone: one more member
            for link in links:
                self._active[link] = self._active.get(link, 0) + 1
                if link not in group.links:
                    group.carried[link] = link.bytes_carried
                    self._owner[link] = self._fresh[link] = group
            group.add(key, links, run, label, done)
            group.hold(links)
            self._start_member(group, len(group.keys) - 1)
            return
        group.cancelled = True  # a replay of fewer (or of others): replay the larger group
        self._replay_until.update(group.saved)
        bigger = _Run(group.start, group.span_index)
        bigger.scale = group.scale
        for k, r, lab, d in zip(group.keys, group.runs, group.labels, group.dones, strict=True):
            bigger.add(k, (), r, lab, d)
        bigger.links = dict(group.links)
        bigger.add(key, links, run, label, done)
        gkey = tuple(bigger.keys)
        template = self.templates.get(gkey)
        if template is not None and gkey not in self.avoid:
            self._replay(bigger, template)
            return
        # Run now, later in this instant than its first member's start, its completions could come in another
        # order than the full run's: finish this run, not recorded, and rerun without the replay at that start.
        self.conflict = True
        self.disturbed.add((tuple(group.keys) + tuple(group.expect), group.nth))
        self.claim(bigger.links)
        bigger.hold(bigger.links)
        self._run(bigger, False)

    def _run(self, group: _Run, record: bool) -> None:
        group.alone = record
        if record:
            for link in group.links:
                group.carried[link] = link.bytes_carried
                self._owner[link] = self._fresh[link] = group
        for i in range(len(group.keys)):
            self._start_member(group, i)

    def _start_member(self, group: _Run, i: int) -> None:
        group.left += 1
        group.ends.append(0.0)
        group.runs[i]().callbacks.append(partial(self._arrived, group, i))

    def _arrived(self, group: _Run, i: int, _event: Any) -> None:
        group.ends[i] = clock(self.env) - group.start
        group.order.append(i)
        group.left -= 1
        if not group.left:
            self._finish(group)
        group.dones[i].succeed(clock(self.env))

    def _finish(self, run: _Run) -> None:
        for link, n in run.held.items():
            self._active[link] -= n
        for link in run.links:
            if self._owner.get(link) is run:
                del self._owner[link]
        if not run.alone:
            return
        key = tuple(run.keys)
        if key in self.templates:
            return
        now, trace = clock(self.env), self.trace
        by_unit: dict[tuple[Any, str], list[tuple[float, float, float, str, str]]] = {}
        units = {(c.chip, c.name) for c in run.links}
        if trace is not None and trace.enabled:
            for s in trace.spans[run.span_index:]:
                if (s.chip, s.unit) in units:
                    by_unit.setdefault((s.chip, s.unit), []).append((s.start, s.end, s.nbytes, s.label, s.kind))
        links: list[tuple[Channel, float, float, tuple[tuple[float, float, float, str, str], ...]]] = []
        kinds: dict[str, float] = {}
        for c in run.links:
            nbytes = c.bytes_carried - run.carried[c]
            kinds[c.kind] = kinds.get(c.kind, 0.0) + nbytes * run.scale
            spans = offsets(by_unit.get((c.chip, c.name), []), run.start)  # one per transfer, as the exact run's
            last = max((b for a, b, _, _, _ in spans if b > a), default=now - run.start)
            links.append((c, nbytes, last, spans))
        if len(key) > 1:
            self._first[key[0]] = key
        self.templates[key] = Template(tuple(run.ends), tuple(links), tuple(kinds.items()), tuple(run.order))
        self.recorded += 1

    def _replay(self, group: _Run, template: Template) -> None:
        env, now, key = self.env, clock(self.env), tuple(group.keys)
        group.template = template
        replay_until, until = self._replay_until, now + template.window_s
        for link, _, _, _ in template.links:
            group.links[link] = None
            group.saved[link] = replay_until.get(link, _WINDOW)
            replay_until[link] = (until, key)  # the whole window on every link: the metrics' stand-ins lie inside it
            self._fresh[link] = group
        for end in sorted(set(template.durations_s)):  # the members done at one time, in the order they were
            members = [i for i in template.order if template.durations_s[i] == end]
            at = now + end
            early = env.timeout(max(0.0, end - TIE * at))
            group.timers.add(early)
            early.callbacks.append(partial(self._ahead, group, at, members))

    def _ahead(self, group: _Run, at: float, members: list[int], _event: Any) -> None:
        """Just before members of a replayed group complete (at ``at``): any other event due within `TIE` of then
        could come before or after them in the full run -- an order a replay cannot promise: the step is rerun
        without replaying this group (a conflict). Then the completion, at ``at`` exactly."""
        if group.cancelled:
            return
        if group.expect:  # members it expected never came: it stood for a group that did not form
            self._missed(group)
        env, hi = self.env, at + TIE * at
        if any(t <= hi and event not in group.timers for t, event in queued(env)):
            self.conflict = True
            self.disturbed.add(tuple(group.keys))
        done = env.timeout(at - clock(env))  # now + (at - now) == at: the two are within a factor 2 (Sterbenz)
        group.timers.add(done)
        done.callbacks.append(partial(self._replayed, group, members))

    def _missed(self, group: _Run) -> None:
        """A group replayed on its first member's start lacked others: rerun without guessing at that start."""
        self.conflict = True
        self.disturbed.add((tuple(group.keys) + tuple(group.expect), group.nth))

    def _replayed(self, group: _Run, members: list[int], _event: Any) -> None:
        """Members ``members`` of a replayed group complete now."""
        if group.cancelled:
            return
        if not group.applied:  # the group's bytes and spans, once (not at its start: a join could cancel it)
            group.applied = True
            template, trace = group.template, self.trace
            assert template is not None, "a replayed group has its template (`_replay`)"
            for link, nbytes, _, _ in template.links:
                link.bytes_carried += nbytes
            if trace is not None:
                for kind, nbytes in template.kinds:
                    trace.count(kind, nbytes)
                if trace.enabled:
                    self._pending.append((template, group.start, "+".join(group.labels)))
            self.replayed += len(group.keys)
        for i in members:
            if i < len(group.dones):
                group.dones[i].succeed(clock(self.env))
