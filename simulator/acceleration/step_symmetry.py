"""A symmetric training step simulated through one representative chip per pipeline stage, exactly.

Every chip of a pipeline stage runs the same SPMD program. On a uniform network (no faults, jitter or
slow chips) the chips of a stage are then alike: same work at the same instants, collectives in
groups that are translates of each other, pipeline transfers to counterparts at the same offsets. A
`Symmetry` simulates one representative per stage (its coordinates 0 on every axis but ``pipeline``):

- only the representatives run their programs (HBM, MXU, VPU work, the memory ledger);
- on a grid, a collective runs in the representative's group only (each logical axis owns whole
  physical axes, so the groups of one collective use disjoint links, and those are the links no other
  traffic crosses; where logical axes share a physical axis, each taking a factor of it, the groups over all
  of them run, as a strided factor's routes cross its neighbours' links), and in that group over one
  representative ring per axis (`mode="reduced"`) where
  the group wraps and no axis under it is split; each distinct collective (kind, bytes, axes, stage) is planned
  once (and reruns of the step share the plans: ``shared``);
- where the groups that run are several (split axes, several axes) and the axes wrap, they run on the quotient
  of the torus by the translations that map the groups onto each other (`simulator.acceleration.quotient`: one
  transfer and one link per orbit; ``quotients=False`` turns it off; a class of links where some collective has
  no quotient reruns without: ``mixed``);
- elsewhere (a switch, GPU nodes) every group runs, as in the full simulation -- on GPU nodes on the quotient
  by the node and rail rotations the step's first collective (or pipeline send) is equivariant under (one group
  for the whole step), every link given its orbit's bytes and busy time in `finish`; with pipeline stages, the
  groups that map every stage onto itself (rotations by the nodes a stage's replicas lie apart, rotations inside
  blocks, rails: `quotient` refuses the others), so one replica per stage runs;
- a collective that repeats one that ran alone on its links is replayed from that run
  (`simulator.acceleration.replay`; ``replay=False`` runs every one);
- pipeline transfers run for every chip of the stage (they cross only the pipeline axis's links) -- on a node
  quotient for the orbits' representatives only, on representative links (`_send_quotient`) -- and
  each one's arrival is checked against the representative's: any difference means the stage is not
  symmetric after all, and the caller reruns the step in full (`broken`).

Counters are scaled back to the whole system (`finish`): HBM and VMEM bytes, bytes per tensor and FLOPs
times the chips per stage; link bytes plus what the unsimulated groups and rings would have carried
(from each plan's transfers and routes). Busy times, the step time, the overlap and the memory ledger
need no scaling: the figures reported are maxima or unions over chips, which the representatives
attain; `upper_bound` rebuilds the busiest chip's sum from the units that ran. The trace holds the
representatives' spans and links only.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import simpy

from simulator.acceleration import aggregate as _aggregate
from simulator.acceleration.chain_run import attach
from simulator.acceleration.node_quotients import NodeQuotients, Rerun, rotated_onto  # noqa: F401  (Rerun: re-exported)
from simulator.acceleration.quotient import Translations, execute_quotient, quotient
from simulator.acceleration.reduced import grid_translations
from simulator.acceleration.replay import Replays
from simulator.acceleration.unfolding import Translates, stand_ins
from simulator.collectives import collective_groups, plan_collective
from simulator.collectives.api import plan_one_group, start_planned
from simulator.collectives.schedule import execute

if TYPE_CHECKING:  # annotations only: no import at run time (and no cycle)
    from simulator.engine.channel import Channel
    from simulator.engine.system import System

RING_KINDS = ("all_gather", "reduce_scatter", "all_reduce")
TIME_TOLERANCE = 1e-12  #: relative: arrivals of a symmetric stage's transfers agree to float rounding


def _nothing(_arg: Any) -> None:
    """A callback that does nothing."""


def why_not_symmetric(system: System, mesh: Any) -> str | None:
    """Why a step on ``system`` cannot be simulated by representatives (None: it can)."""
    if mesh is None or system.network is None:
        return "one chip"
    if system.faults is not None:
        return "faults, jitter or slow chips break the symmetry"
    if not system.network.uniform:
        return "links are not uniform"
    return None


def _unlike(times: list[float]) -> bool:
    """Whether arrival instants (s) of a stage's sends lie apart beyond float rounding (`TIME_TOLERANCE`)."""
    return bool(times) and max(times) - min(times) > TIME_TOLERANCE * max(abs(max(times)), 1e-30)


def _wraps(net: Any, mesh: Any) -> bool:
    """Whether every physical axis under a mesh axis wraps or has two chips (every ring of an axis alike)."""
    axes = [p for name in mesh.names for p in mesh.physical_axes(name)]
    return bool(net.shape) and all(net.wrap[p] or net.shape[p] <= 2 for p in axes)


class Symmetry(NodeQuotients):
    """Which chips a step simulates and how their traffic stands for the whole system's.

    ``stage_of`` maps every chip to its pipeline stage; ``fast`` False (or a system that is not
    symmetric: `why_not_symmetric`) simulates every chip (``active`` False, ``why`` says why). ``rings``:
    the step's collectives are all AllGather, ReduceScatter or AllReduce (no AllToAll), so that where every
    axis wraps (or has two chips) each can run one ring per axis and still meet on its links the same
    traffic as in full. ``axis_sets`` lists the mesh axes of every collective the step runs.
    """

    def __init__(self, system: System, mesh: Any, stage_of: dict[Any, int], fast: bool, rings: bool = False,
                 axis_sets: list[tuple[str, ...]] | None = None, replay: bool = True,
                 avoid: frozenset = frozenset(), quotients: bool = True, shared: dict | None = None,
                 node_allowed: frozenset | None = None) -> None:
        self.system, self.mesh, self.stage_of = system, mesh, stage_of
        self.why = "fast=False" if not fast else why_not_symmetric(system, mesh)
        self.active = self.why is None
        self.members: dict[int, list[Any]] = defaultdict(list)
        for c in system.chips:
            self.members[stage_of[c.index]].append(c.index)
        self.stage_set = {s: set(m) for s, m in self.members.items()}
        self.axis_sets = list(axis_sets or [])
        self.per_stage = len(self.members[0])  #: chips each representative stands for
        self.reps: dict[int, Any] = {}
        if self.active:
            pipe = mesh.index("pipeline") if "pipeline" in mesh.names else None
            for stage in self.members:
                coords = [0] * len(mesh.sizes)
                if pipe is not None:
                    coords[pipe] = stage
                self.reps[stage] = mesh.device(tuple(coords))
        self.stage_of_rep = {rep: stage for stage, rep in self.reps.items()}
        net = system.network
        self.group_reduce = self.active and self._net().grid  # active: it has a network (`why_not_symmetric`)
        self.rings_reduce = self.group_reduce and rings and len(self.members) == 1 and _wraps(net, mesh)
        self.link_kinds = {data.get("kind", "ici") for _, _, data in system.graph.edges(data=True)} \
            if system.graph is not None else set()
        self.extra_link_bytes: dict[str, float] = defaultdict(float)  #: bytes the unsimulated traffic carries
        self._plans: dict[tuple, tuple[Any, dict[str, Any], dict[str, float], Any, Any]] = {}
        self.shared: dict[tuple, Any] = shared if shared is not None else {}  #: plans reruns of the step reuse
        self.quotients = quotients and self.group_reduce  #: run collectives on the quotient by translations
        #: on a GPU node system: by node and rail rotations (one for the step); calibrated too (their efficiency is
        #: a function of link kind and size, and the rotations keep kinds; no multiplicities, `node_actions`)
        #: with pipeline stages too: the groups that map every stage onto itself (`automorphisms.stride_actions`;
        #: `quotient` refuses one that moves a stage's collective onto another's), the stage's sends on it (`send`)
        self.node_quotients = quotients and self.active and not self.group_reduce
        self._sends: dict[tuple, Any] = {}  #: each kind of pipeline send on the node quotient (`_send_quotient`)
        self.node_allowed = node_allowed  #: names of the node groups this run may use (None: any)
        self.node_next: frozenset | None = None  #: a rerun's groups: the first and the stopping collective's
        self._node_candidates: list[Any] | None = None
        self._first: Any = None  #: the transfers of the step's first collective on GPU nodes
        self.node_action = None
        self._node_links: dict[Any, None] = {}
        self.quotiented: list[tuple] = []  #: the collectives (kind, bytes, axes, stage) run on a quotient
        self._actions: dict[frozenset, Any] = {}
        self._class_runs: dict[frozenset, set[bool]] = defaultdict(set)  #: whether each class's ran on quotients
        self.mixed = False  #: a class of links ran some collectives on a quotient, some not: rerun without
        self.replays = Replays(system, replay and self.active, avoid)  #: lone repeated collectives replayed
        self._arrivals: list[list[float]] = []
        self.broken = False  #: a stage's chips turned out unlike: rerun in full
        #: calibrated, on GPU nodes: strict-chain quotients in one timer each (`chain_run`; a conflict reruns without)
        self.chains = attach(self._net(), self.shared) if self.node_quotients and system.calibration is not None \
            else None
        self._ahead: list[tuple[str, float, tuple[str, ...], int, dict[str, Any]]] = []  #: collectives ahead
        self._foreseen: dict[tuple, Any] = {}  #: their quotients on the step's group, found when it was chosen

    @property
    def foresees(self) -> bool:
        """Whether `foresee` would check anything: on GPU nodes, before the step's group is chosen (an orbit run's
        group is given)."""
        return bool(self.node_quotients and self.node_action is None and self._first is None)

    def foresee(self, collectives: list[tuple[str, float, tuple[str, ...], int, dict[str, Any]]]) -> None:
        """Collectives the step will start, (kind, bytes, axes, stage, `start`'s ``exact``): on GPU nodes each is
        checked on the step's group as soon as that is chosen (`_chosen`), so that a run one of them would stop
        (``mixed``: NCCL's tree for a data-parallel AllReduce, which no replica rotation holds) stops at its start,
        not where that collective starts (issue 29's 16,384-H100 step: 8.3 of 12.2 simulated seconds in)."""
        self._ahead = list(collectives) if self.node_quotients else []

    def _chosen(self) -> None:
        """Each collective `foresee` named on the step's group just chosen: its quotient, kept for its start
        (`_plan`); the first that has none stops the run now (`Rerun`, ``mixed``: ``node_failed`` and ``node_next``
        as its start would set them)."""
        ahead, self._ahead = self._ahead, []
        for kind, nbytes, axes, stage, exact in ahead:
            key = (kind, nbytes, tuple(axes), stage)
            if key in self._foreseen:
                continue
            shared = self.shared.get(key)
            if shared is None:
                shared = self.shared[key] = self._planned(kind, nbytes, list(axes), stage, exact)
            plan, kwargs, extra, close = shared
            if close is not None or plan.schedule is None:
                continue
            part = self.shared.get(("one group",) + key)
            transfers = plan.schedule.transfers
            q = self._quotient_of(transfers if part is None else (transfers, part), self.node_action)
            if q is None and part is not None:  # one group's schedule stands for none: every group's
                plan = plan_collective(kind, self.system, nbytes, **exact)
                self.shared[key] = (plan, kwargs, extra, close)
                del self.shared[("one group",) + key]
                if plan.schedule is None:
                    continue
                transfers = plan.schedule.transfers
                q = self._quotient_of(transfers, self.node_action)
            if q is None:
                self.node_failed = self._fits(transfers)
                self.node_next = self._fits(self._first, among=self.node_failed)
                self.mixed = True
                raise Rerun("a collective ahead is not equivariant under the step's group")
            self._foreseen[key] = q

    @property
    def arrivals(self) -> int:
        """Chips of a stage that must reach a collective before it starts."""
        return 1 if self.active else self.per_stage

    @property
    def counter_scale(self) -> int:
        """Chips each simulated chip's counters (HBM bytes, bytes per tensor, FLOPs) stand for: ``per_stage``."""
        return self.per_stage

    def lanes(self) -> dict[Any, list[Any]]:
        """Each program's chip -> the chips it runs in lockstep for (`orbit_run.LockstepSymmetry`); here none."""
        return {}

    def send_lanes(self, chip: Any, nbytes: float, label: str, counterpart: Callable[[Any], Any],
                   arrived: list[Callable[[Any], None]]) -> None:
        """Every lane of a lockstep program sends (`orbit_run.LockstepSymmetry`); here there are none."""
        raise AssertionError("no lanes to send from here")

    def unlock(self, why: str) -> None:
        """A lockstep program's lanes are apart where they cannot be: only a lockstep run has lanes."""
        raise AssertionError(f"no lanes to unlock here: {why}")

    def chips(self) -> list[Any]:
        """The chips whose programs run: the representatives, in chip order (all chips when inactive)."""
        everyone = [c.index for c in self.system.chips]
        if not self.active:
            return everyone
        reps = set(self.reps.values())
        return [c for c in everyone if c in reps]

    # -- collectives -----------------------------------------------------------------------------------
    def start(self, kind: str, nbytes: float, axes: list[str], stage: int, exact: dict[str, Any]) -> simpy.Event:
        """Start, now, the representative's share of a collective of the whole stage (``exact``: the keywords
        of `start_collective` that run it in full); returns its completion event."""
        key = (kind, nbytes, tuple(axes), stage)
        entry = self._plans.get(key)
        if entry is None:
            entry = self._plans[key] = self._plan(kind, nbytes, axes, stage, exact)
        plan, kwargs, extra, links, q = entry
        for link_kind, b in extra.items():
            self.extra_link_bytes[link_kind] += b
        system = self.system
        if plan.schedule is None:
            return system.env.event().succeed(system.env.now)
        if system.calibration is not None:  # launch latency and link efficiency: the API's own path, on the quotient
            return start_planned(system, plan, q)  # (no replay: a calibrated run's rate is the network's state)
        net = self._net()
        run = (lambda: execute_quotient(net, q, kind)) if q is not None else \
            (lambda: execute(net, plan.schedule.transfers, None, kind))
        return run() if links is None else self.replays.start(key, links, run, kind, q.order if q is not None else 1)

    def _plan(self, kind: str, nbytes: float, axes: list[str], stage: int,
              exact: dict[str, Any]) -> tuple[Any, dict[str, Any], dict[str, float], Any, Any]:
        """The plan that runs (cached by the caller), its keywords, and the link bytes it leaves out."""
        shared = self.shared.get((kind, nbytes, tuple(axes), stage))
        if shared is None:
            shared = self.shared[(kind, nbytes, tuple(axes), stage)] = self._planned(kind, nbytes, axes, stage, exact)
        plan, kwargs, extra, close = shared
        if plan.job.net is not self._net():  # a rerun's, on a fresh system: the calibrated path runs on the job's net
            plan = dataclasses.replace(plan, job=dataclasses.replace(plan.job, net=self._net()))
        if close is None:
            q = None
            foreseen = self._foreseen.pop((kind, nbytes, tuple(axes), stage), None)
            if foreseen is not None:  # checked ahead (`_chosen`) on the step's group: its quotient
                q = foreseen
                self._node_links.update(dict.fromkeys(q.links))
            elif self.node_quotients and plan.schedule is not None:
                part = self.shared.get(("one group", kind, nbytes, tuple(axes), stage))
                q = self._node_quotient(plan, part)
                if q is None and part is not None:  # one group's schedule stands for none: build every group's
                    plan = plan_collective(kind, self.system, nbytes, **exact)
                    self.shared[(kind, nbytes, tuple(axes), stage)] = (plan, kwargs, extra, close)
                    del self.shared[("one group", kind, nbytes, tuple(axes), stage)]
                    q = self._node_quotient(plan) if plan.schedule is not None else None
        else:
            q = self._quotient(plan, close) if kwargs["mode"] == "full" else None
        if q is not None:
            self.quotiented.append((kind, nbytes, tuple(axes), stage))
        return plan, kwargs, extra, self._links(plan, q), q

    def _planned(self, kind: str, nbytes: float, axes: list[str], stage: int,
                 exact: dict[str, Any]) -> tuple[Any, dict[str, Any], dict[str, float], Any]:
        """The plan that runs, its keywords, the link bytes it leaves out and its class of axes (None: every group
        runs); none of them depends on the run, so reruns of a step share them (``shared``)."""
        system = self.system
        if not self.group_reduce:  # every group runs, as in full (on a node quotient: one group's schedule lifted)
            if self.node_quotients:
                one = self._one_group(kind, nbytes, axes, stage, exact)
                if one is not None:
                    return one, exact, {}, None
            return plan_collective(kind, system, nbytes, **exact), exact, {}, None
        stage_groups = [g for g in collective_groups(self._net(), axes, self.mesh)
                        if next(iter(g.members.values())) in self.stage_set[stage]]
        close = self._close(axes)
        mine = self._neighbourhood(stage_groups, close, stage)
        if self.rings_reduce and kind in RING_KINDS and mine[0].n > 1 and not self._sharing(close):  # a ring an axis
            # (not where an axis under ``close`` is split: the other factors' traffic crosses every ring's links)
            kwargs: dict[str, Any] = {"axes": axes, "mode": "reduced", "mesh": self.mesh}
        else:
            kwargs = {"groups": mine, "mode": "full"}
        plan = plan_collective(kind, system, nbytes, **kwargs)
        # reduced asked for, but the algorithm auto chose does not declare it (`Capabilities.reduced`): it ran
        # every group of the axes, and only the groups it did not run are unsimulated
        return plan, kwargs, self._unsimulated(plan, len(stage_groups) if plan.reduced else
                                               len(stage_groups) / len(plan.groups)), close

    def _one_group(self, kind: str, nbytes: float, axes: list[str], stage: int, exact: dict[str, Any]) -> Any:
        """The plan of ``exact``'s collective with the schedule of the group of the system's smallest chip alone
        (`simulator.collectives.api.plan_one_group`), noted in ``shared`` with every group, for `_node_quotient` to
        lift to the whole collective; None where it does not apply (not a multislice or GPU node system, one group,
        or a job that differs: several NIC rings, say). The group is that of the groups' smallest chip (with
        pipeline stages: the smallest of the stage's)."""
        net, system = self._net(), self.system
        if net.graph.graph.get("kind") not in ("multislice", "nodes"):
            return None
        if "groups" in exact:
            groups = list(exact["groups"])
        else:  # the step's collectives over these axes share them (and reruns of the step: they hold no channels)
            key = ("groups", tuple(exact["axes"]), id(exact["mesh"]))
            kept = self.shared.get(key)
            if kept is None or kept[0] is not exact["mesh"]:
                kept = self.shared[key] = (exact["mesh"], collective_groups(net, exact["axes"], exact["mesh"]))
            groups = list(kept[1])
        home = min(c for g in groups for c in g.members.values())
        mine = next((g for g in groups if home in g.members.values()), None)
        if len(groups) < 2 or mine is None:
            return None
        tuned, tuned_key = None, ("tuned", kind, nbytes, tuple(axes), exact.get("mode"))
        if "groups" in exact:  # a stage's groups: tuned as another stage's that a node rotation maps onto them
            kept = self.shared.get(tuned_key)
            if kept is not None and rotated_onto(net, self.shared, kept[0], groups):
                tuned = kept[1]
        plan = plan_one_group(kind, system, nbytes, mine, every=None if "groups" in exact else groups, tuned=tuned,
                              **exact)
        if plan is None or plan.schedule is None:
            return None
        if tuned is None and "groups" in exact:
            self.shared.setdefault(tuned_key, (groups, plan))
        self.shared[("one group", kind, nbytes, tuple(axes), stage)] = groups
        return plan

    def _links(self, plan: Any, q: Any) -> Any:
        """The links ``plan``'s transfers (or its quotient ``q``'s) cross, where its runs may be replayed
        (`Replays`); else None."""
        if not self.replays.enabled or plan.schedule is None:
            return None
        return q.links if q is not None else self.replays.links_of(plan.schedule.transfers)

    def _quotient(self, plan: Any, close: set[str]) -> Any:
        """``plan``'s schedule on the quotient by the translations that map the groups of the mesh axes ``close``
        onto one another (`simulator.acceleration.quotient`), or None (run it as planned): along each physical
        axis under ``close``, by the smallest step that maps every factor's groups onto its groups (a factor of
        ``n`` chips at stride ``s`` that is not the whole axis: multiples of ``n * s``), on wrapped axes only."""
        if not self.quotients or plan.schedule is None or "pipeline" in close:
            return None
        key = frozenset(close)
        if key not in self._actions:
            mesh, net = self.mesh, self._net()
            pieces = [piece for name in close for piece in mesh.pieces[mesh.index(name)]]
            under = {a for a, _, _ in pieces}
            steps = [1 if a in under else n for a, n in enumerate(net.shape)]
            for a, length, stride in pieces:
                if length * stride < net.shape[a]:
                    steps[a] = math.lcm(steps[a], length * stride)
            try:
                action = Translations(net, tuple(steps))
            except ValueError:  # an axis without wraparound: translations do not map its links onto its links
                action = None
            self._actions[key] = action if action is not None and action.order > 1 else None
        action = self._actions[key]
        if action is None:
            return None
        q = quotient(self._net(), plan.schedule.transfers, action)
        runs = self._class_runs[key]
        runs.add(q is not None)
        self.mixed = self.mixed or len(runs) > 1  # their traffic would meet on different channels
        return q

    def _close(self, axes: list[str]) -> set[str]:
        """``axes`` and every mesh axis a collective of the step shares a physical axis or a collective with
        (directly or through others): collectives whose closures differ use disjoint links."""
        close = set(axes)
        grown = True
        while grown:
            grown = False
            for other in self.axis_sets + self._sharing(close):
                if close & set(other) and not set(other) <= close:
                    close |= set(other)
                    grown = True
        return close

    def _neighbourhood(self, groups: list[Any], close: set[str], stage: int) -> list[Any]:
        """The groups of a collective that run: those inside the representative's group over the axes ``close``
        (`_close`), so that each link the run uses carries all the traffic it carries in full."""
        mesh, rep = self.mesh, self.reps[stage]
        fixed = [i for i, name in enumerate(mesh.names) if name not in close]
        origin = mesh.coords(rep)
        return [g for g in groups
                if all(mesh.coords(c)[i] == origin[i] for c in g.members.values() for i in fixed)]

    def _sharing(self, close: set[str]) -> list[tuple[str, ...]]:
        """The logical axes that hold factors of a physical axis one of ``close`` takes a factor of (issue 13): the
        groups of a strided factor share its links with their neighbours over the other factors."""
        mesh = self.mesh
        split = {p for name in close for p, n, _ in mesh.pieces[mesh.index(name)] if n != mesh.shape[p]}
        return [tuple(name for name in mesh.names if any(p == a for p, _, _ in mesh.pieces[mesh.index(name)]))
                for a in split]

    def _unsimulated(self, plan: Any, n_groups: float) -> dict[str, float]:
        """Link bytes, by link kind, of the groups (and rings) of the full collective that do not run: the
        groups that run stand for ``n_groups`` times as many, and a reduced run's rings for all of theirs."""
        extra: dict[str, float] = defaultdict(float)
        if plan.schedule is None:
            return extra
        net, graph = self._net(), self.system.graph
        assert graph is not None, "a system with a network has its graph"
        group = plan.job.group
        for t in plan.schedule.transfers:
            if t.src is None or t.src == t.dst or not t.nbytes:
                continue
            for path in net.routes(t.src, t.dst):
                for u, v in zip(path, path[1:], strict=False):
                    edge = graph.edges[u, v]
                    rings = group.n / net.shape[edge["axis"]] if plan.reduced else 1.0
                    extra[edge.get("kind", "ici")] += t.nbytes * (n_groups * rings - 1)
        return extra

    # -- pipeline transfers ----------------------------------------------------------------------------
    def send(self, chip: Any, nbytes: float, label: str, counterpart: Callable[[Any], Any],
             arrived: Callable[[Any], None]) -> None:
        """Every chip of ``chip``'s stage sends ``nbytes`` to its counterpart on ``stage``; ``arrived`` is called
        when the representative's message arrives, and every arrival is checked against it."""
        net, replays = self._net(), self.replays
        times: list[float] = []
        self._arrivals.append(times)
        found = self._send_quotient(chip, nbytes, counterpart) if self.node_quotients else None
        if found is not None:
            self._send_on_quotient(chip, found, nbytes, label, times, arrived)
            return
        members = self.members[self.stage_of_rep[chip]]
        noted = self._noted(times, len(members))
        for member in members:
            dst = counterpart(member)
            event = net.message(member, dst, nbytes, label=label)
            event.callbacks.append(noted)
            if replays.enabled and member != dst:  # its links are claimed while it is on its way
                links = [c for route in net._route_links(member, dst, False)[0] for c in route]
                replays.claim(links)

                def release(_e: Any, links: list[Channel] = links) -> None:
                    replays.release(links)
                event.callbacks.append(release)
            if member == chip:
                event.callbacks.append(arrived)

    def _send_quotient(self, chip: Any, nbytes: float, counterpart: Callable[[Any], Any]) -> Any:
        """The stage's sends (every chip of ``chip``'s stage to its counterpart) on the step's node quotient
        (`NodeQuotients._node_quotient`: the step's group, chosen on these sends where no collective came first;
        `Rerun` where they are not equivariant under it): (the representatives' sends, each with its route's
        representative channels and the link kinds it crosses, and the orbit size), or None (send from every
        chip). Kept per (stage, target, bytes): a stage's counterparts are the same for every microbatch."""
        stage = self.stage_of_rep[chip]
        target = self.stage_of.get(counterpart(chip))
        key = (stage, target, nbytes)
        if key in self._sends:
            return self._sends[key]
        if self.node_action is None and self._first is not None:  # the step's first collective had no quotient
            self._sends[key] = None
            return None
        from types import SimpleNamespace

        from simulator.collectives.schedule import Transfer

        transfers = [Transfer(i, m, counterpart(m), (), "copy", (), nbytes)
                     for i, m in enumerate(self.members[stage])]
        q = self._node_quotient(SimpleNamespace(schedule=SimpleNamespace(transfers=transfers)))
        found = None
        if q is not None:
            found = ([(t.src, route) for t, route in zip(q.transfers, q.routes, strict=True)], q.order)
        self._sends[key] = found
        return found

    def _send_on_quotient(self, chip: Any, found: Any, nbytes: float, label: str, times: list[float] | None,
                          arrived: Callable[[Any], None]) -> None:
        """Each representative's send of `_send_quotient` on its route's representative channels, as
        `Network.message` sends it (one channel, or cut through several: on plain channels without a process,
        `aggregate.cut_through`, the same floats), its bytes counted for its whole orbit; ``arrived`` on ``chip``'s
        (a representative: its orbit's smallest chip), every arrival kept in ``times`` (None: not kept, one send)."""
        net, replays = self._net(), self.replays
        trace = net.trace
        sends, order = found
        noted = self._noted(times, len(sends)) if times is not None else _nothing
        plain_net = net.switching == "cut_through"
        for src, route in sends:
            if route is None:  # (a chip sending to itself)
                event = self.system.env.event().succeed(self.system.env.now)
                event.callbacks.append(noted)
                if src == chip:
                    event.callbacks.append(arrived)
                continue
            links, kinds = route
            if trace is not None:
                for kind, count in kinds:
                    trace.count(kind, nbytes * count * order)
            mine = src == chip
            if not replays.enabled and nbytes > 0 and (len(links) == 1 or plain_net) and all(
                    c.aggregates and getattr(c, "noise", None) is None for c in links):
                if times is None:
                    then: Callable[[Any], None] = arrived if mine else _nothing
                else:
                    def then(_arg: Any, mine: bool = mine) -> None:
                        noted(None)
                        if mine:
                            arrived(None)
                if len(links) == 1:
                    links[0].send(nbytes, label, "send", then, None)
                else:
                    _aggregate.cut_through(net, links, nbytes, label, then, None)
                continue
            event = links[0].transfer(nbytes, label, "send") if len(links) == 1 else \
                self.system.env.process(net._send(list(links), nbytes, label, 1))
            if replays.enabled:
                claimed = list(links)
                replays.claim(claimed)

                def release(_e: Any, claimed: list[Channel] = claimed) -> None:
                    replays.release(claimed)
                event.callbacks.append(release)
            event.callbacks.append(noted)
            if mine:
                event.callbacks.append(arrived)

    def _noted(self, times: list[float], expected: int) -> Callable[[Any], None]:
        """The callback that notes in ``times`` the instant (s) each of a stage's ``expected`` sends arrives. At
        the last, arrivals apart beyond rounding (`_unlike`) stop the run at once (`broken`, `Rerun`) unless it is
        ``mixed`` already (its own reruns come first, `reruns`): a broken run's figures are discarded for the full
        simulation's, and before a quotient went wrong every instant it gave is the full run's, so the stage's
        chips are unlike in full too (a GPU node quotient stops at once where it would go wrong; on a grid,
        ``mixed`` is noted as it happens)."""
        env = self.system.env

        def noted(_event: Any) -> None:
            times.append(env.now)
            if len(times) == expected and _unlike(times) and not self.mixed:
                self.broken = True
                raise Rerun("a stage's chips turned out unlike: the step reruns in full")
        return noted

    # -- the whole system's figures --------------------------------------------------------------------
    def finish(self, trace: Any) -> None:
        """Scale ``trace``'s counters from the representatives to every chip, and name the chips each representative
        stood for (`Trace.stood_for`); check the transfers' arrivals."""
        if not self.active:
            return
        if trace.enabled:  # exports and pictures show every chip (`Trace.unfolded`)
            stand_ins(trace).chips.update(self._stood_for())
        if trace.enabled and self.group_reduce:  # the links of the groups that did not run: their spans
            self._stand_in_links(trace)
        if self.node_action is not None:  # every link of a representative's orbit: its bytes and busy time
            from types import SimpleNamespace

            from simulator.acceleration.quotient import unfold

            unfold(self._net(), self.node_action, SimpleNamespace(links=tuple(self._node_links)), {})
        for times in self._arrivals:
            if _unlike(times):
                self.broken = True
        k = self.counter_scale
        counters = trace.bytes_by_interface
        for name in list(counters):
            if name not in self.link_kinds:
                counters[name] *= k
        for link_kind, b in self.extra_link_bytes.items():
            counters[link_kind] += b
        for record in trace.bytes_by_tensor.values():
            record["read"] *= k
            record["written"] *= k
        trace.flops_total *= k
        trace.padded_flops_total *= k

    def _stood_for(self) -> dict[Any, list[Any]]:
        """Each representative chip -> the other chips of its stage (those it stood for)."""
        return {rep: [c for c in self.members[stage] if c != rep] for stage, rep in self.reps.items()
                if len(self.members[stage]) > 1}

    def _stand_in_links(self, trace: Any) -> None:
        """Name on ``trace`` (`simulator.acceleration.unfolding.Unfolding`) the links each link that ran stood for,
        so that exports, pictures and busy times hold every link's spans: on a quotient, its orbit under the
        translations (`_quotient`); then the translates (`Translates`, `_moves`) of those onto the groups the step
        did not run. Links that ran keep their own spans; a link none of whose translates is known keeps none."""
        net = self._net()
        ends = {channel: pair for pair, channel in net.links.items()}
        stands: dict[tuple[Any, str], tuple[dict[tuple[Any, Any], None], list[Translates]]] = {}
        ran: set[tuple[Any, Any]] = set()
        found: dict[tuple, Translates | None] = {}  #: the moves of each kind of run (one ring an axis, groups, stage)
        for key, (plan, kwargs, _, _, q) in self._plans.items():
            close = self.shared[key][3]
            if plan.schedule is None or close is None:
                continue
            kind = (plan.reduced, "groups" in kwargs, frozenset(close), key[3])
            if kind not in found:
                found[kind] = self._moves(plan, kwargs, close, key[3])
            moves = found[kind]
            if q is not None:
                action = self._actions[frozenset(close)]
                steps = [range(0, n, step) for step, n in zip(action.steps, action.shape, strict=True)]
                elements = list(itertools.product(*steps))
                pairs = [(c, ends[getattr(c, "real", c)]) for c in q.links]  # (a shared link's copy: the real one)
                used = [(c, [(action.apply(h, u), action.apply(h, v)) for h in elements]) for c, (u, v) in pairs]
            else:
                used = [(c, [ends[c]]) for c in self.replays.links_of(plan.schedule.transfers) or ()]
            for channel, orbit in used:
                entry = stands.setdefault((channel.chip, channel.name), ({}, []))
                entry[0].update(dict.fromkeys(orbit))
                if moves is not None and moves not in entry[1]:
                    entry[1].append(moves)
                ran.update(orbit)
        unfolding = stand_ins(trace)
        claimed: set[tuple[Any, Any]] = set()  # each link stood for by one link that ran (the first; any is alike)
        for rep, (stood, translates) in stands.items():
            images = dict.fromkeys(stood)
            for move in translates:
                for pair in stood:
                    images.update(dict.fromkeys(p for p in move.images(net, pair, ran) if p not in claimed))
            claimed.update(images)
            links = [net.link(*pair) for pair in images]  # (built where the step never used them: exports name them)
            unfolding.add_links(rep, [(c.chip, c.name) for c in links])

    def _moves(self, plan: Any, kwargs: dict[str, Any], close: set[str], stage: int) -> Translates | None:
        """The translations that map the groups of ``plan`` that ran onto those of the whole stage's collective
        that did not (None: every group ran). One ring per axis (``plan.reduced``: every axis wraps, none split)
        stands for every ring along its axis: every translation of the grid. The representative's neighbourhood
        (``groups``: `_neighbourhood`, the rep's coordinate on every mesh axis outside ``close``) stands for each
        assignment of coordinates to those axes but ``pipeline`` (the stage's other neighbourhoods): a
        neighbourhood's chips share those coordinates, so setting them moves each chip by one offset, a translation."""
        net, mesh = self._net(), self.mesh
        if plan.reduced:
            return grid_translations(net)
        if "groups" not in kwargs:  # reduced asked for, every group of the axes ran (`_planned`)
            return None
        fixed = [i for i, name in enumerate(mesh.names) if name not in close and name != "pipeline"]
        origin = mesh.coords(self.reps[stage])
        settings = list(itertools.product(*(range(mesh.sizes[i]) for i in fixed)))

        def move(k: int, chip: Any) -> Any:
            coords = list(mesh.coords(chip))
            for i, value in zip(fixed, settings[k], strict=True):
                if coords[i] != origin[i]:
                    raise KeyError(chip)  # not in the representative's neighbourhood: no translation known
                coords[i] = value
            return mesh.device(tuple(coords))
        return Translates(len(settings), move)

    def upper_bound(self, per_chip: dict[Any, dict[str, float]]) -> float:
        """The whole system's ``upper_bound_s`` (`simulator.engine.trace.compute_metrics`: on the chip with the
        most work, every unit's busy seconds summed) from the units that ran, ``per_chip``. Every chip of a stage
        runs its representative's program: its compute units are the representative's. Its links: where every
        group ran, its own; where only the representative's neighbourhood ran (a grid, `group_reduce`), each
        class of physical axes (those under one `_close` set; collectives of different classes use disjoint
        links) is as busy on a chip as on the simulated chip with the same coordinates along it, so the most a
        chip's links of a class are busy is the most any simulated chip's are, and the classes' maxima add: a
        chip's coordinates along different classes are independent."""
        if not self.active:
            return max((sum(u.values()) for u in per_chip.values()), default=0.0)
        stage_of = {c: stage for stage, members in self.members.items() for c in members}
        compute = {stage: sum(v for u, v in per_chip.get(rep, {}).items() if not u.startswith("link "))
                   for stage, rep in self.reps.items()}
        net, graph = self._net(), self.system.graph
        assert graph is not None, "a system with a network has its graph"
        axis_of = {c.name: graph.edges[u, v].get("axis") for (u, v), c in net.links.items()}
        class_of: dict[Any, Any] = {}
        if self.group_reduce:
            for name in self.mesh.names:
                for a, _, _ in self.mesh.pieces[self.mesh.index(name)]:
                    class_of[a] = frozenset(self._close([name]))
        best: dict[Any, dict[Any, float]] = defaultdict(lambda: defaultdict(float))
        top = 0.0
        for chip, units in per_chip.items():
            stage = stage_of.get(chip)
            sums: dict[Any, float] = defaultdict(float)
            for unit, seconds in units.items():
                if unit.startswith("link "):
                    sums[class_of.get(axis_of.get(unit))] += seconds
            if stage is None or not self.group_reduce:
                top = max(top, (compute.get(stage, 0.0) if stage is not None else 0.0) + sum(sums.values()))
                continue
            for cls, seconds in sums.items():
                best[stage][cls] = max(best[stage][cls], seconds)
        for stage, seconds in compute.items():
            top = max(top, seconds + sum(best[stage].values()))
        return top

    def timeline_chip(self, peak: dict[Any, float], stage_of: dict[Any, int]) -> Any:
        """The chip a full simulation reports the memory timeline of: the first, in chip order, whose peak (its
        representative's) is the highest."""
        top = max(peak.values())
        return next(c.index for c in self.system.chips if peak.get(self.reps[stage_of[c.index]]) == top)
