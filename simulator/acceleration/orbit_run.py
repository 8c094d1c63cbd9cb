"""A training step on GPU nodes run with one program per orbit of a node group: `OrbitSymmetry`.

`simulator.acceleration.step_symmetry.Symmetry` runs one program per pipeline stage and trusts that a stage's
chips are alike; on GPU nodes it runs every collective on the quotient by one group G of node and rail rotations
(`simulator.acceleration.node_quotients`). Where G's orbits are smaller than a stage -- issue 29's 405B step on
16,384 H100, whose data-parallel AllReduce NCCL's tuner runs as a double binary tree, which no rotation of the
replicas maps onto itself (tests/test_tree_replica_symmetry.py), only rail rotations and the reversal of the
replicas, which swaps the tree with its mirror image (`automorphisms.mirror_specs`) -- a stage's chips need not be
alike, and in full they are not. But the step is still G-equivariant: every chip runs its stage's program,
every collective and pipeline send is checked G-equivariant (`quotient`), every link kind's calibration is a
function of kind and size. So in the full run every chip of a G-orbit does what its orbit's representative does
at the same instants, on the images of its links. An orbit run therefore runs one program per G-orbit (the orbit's
smallest chip, `Automorphisms.offset`): a stage's collective starts when every representative of the stage has
reached it (as the full run's starts when every chip has), on G's quotient; a representative's pipeline send is
its orbit's, on G's representative links, and it waits for its own (representatives may differ from one another:
nothing is checked between them). Counters scale by |G| (``per_stage``), and `finish` unfolds every
representative link onto its orbit and names the chips each representative stood for, as the fast step does.

A collective whose links no pipeline send crosses (on GPU nodes: a tensor-parallel collective on its nodes'
NVLink) runs on the quotient by a wider group W where it holds one (the group the step's first run chose: rotations
that map a stage's replicas onto one another, times rails): it starts at one instant for the whole stage, and if
every link of its links' W-orbits only ever carries collectives run on W, those links' states stay W-alike, so one
W-orbit representative stands for the stage's every replica. That premise is checked link by link: each link of
the system is owned by the one group whose orbits it was run in (``_claim``); a run that would give a link to two
stops (`Rerun`, ``narrowed``) and reruns on G alone (``wide`` off).

The run needs no assumption past those symmetries, and they are checked: a collective or send that is not G-equivariant
stops the run (`Rerun`, ``mixed``) and the exact run follows (`simulator.acceleration.reruns`, rule 4).
tests/test_orbit_run.py holds the orbit run's figures equal to the full simulation's.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

from simulator.acceleration.node_quotients import Rerun, _built
from simulator.acceleration.step_symmetry import Symmetry


def orbit_group(sym: Any, names: frozenset) -> str | None:
    """The name of the largest group of ``names`` among ``sym``'s node candidates (`NodeQuotients._candidates`,
    largest first), where its orbits are smaller than a pipeline stage (``sym.per_stage`` chips) and it moves every
    chip freely: the group an orbit run of the step takes; None where there is none (not a GPU node step), or where
    the largest maps a stage's chips onto one another (then one program per stage is what it gives)."""
    if not isinstance(sym, Symmetry) or not sym.active or not sym.node_quotients or isinstance(sym, OrbitSymmetry):
        return None
    for candidate in sym._candidates():
        if candidate.name not in names:
            continue
        action = _built(candidate)
        if action is None:
            continue
        if action.order >= sym.per_stage:
            return None
        if action.order > 1 and all(action.offset(c.index) is not None for c in sym.system.chips):
            return str(candidate.name)
    return None


class OrbitSymmetry(Symmetry):
    """A `Symmetry` that runs one program per orbit of the node group named ``orbits`` (see the module): inactive
    (every chip runs) where that group is not found or does not move every chip freely."""

    unlocked = False  #: (`LockstepSymmetry`: lanes found apart at a send)

    def __init__(self, system: Any, mesh: Any, stage_of: dict[Any, int], orbits: str, rings: bool = False,
                 axis_sets: list[tuple[str, ...]] | None = None, shared: dict | None = None,
                 wide: bool = True) -> None:
        """``wide``: run collectives whose links no pipeline send crosses on the wider group where they hold it
        (the first run's choice, ``shared``); False: every collective on ``orbits``' group."""
        super().__init__(system, mesh, stage_of, True, rings, axis_sets, replay=False, shared=shared,
                         node_allowed=frozenset({orbits}))
        self.orbits = orbits
        self.wide: Any = None  #: the wider group W (None: none)
        self.narrowed = False  #: a link was asked for by runs on both groups: rerun without W
        self._wide_links: dict[Any, None] = {}  #: the representative channels of the runs on W
        self._owner: dict[tuple[Any, Any], str] = {}  #: each link run so far -> the group whose orbits it ran in
        self._ends: dict[Any, tuple[Any, Any]] = {}  #: channel -> its link (u, v)
        self._claimed: set[tuple[tuple[Any, ...], str]] = set()  #: (representative channels, group) claimed already
        self._sending = False
        self.rep_of: dict[Any, Any] = {}  #: every chip -> its orbit's representative
        self.orbit_members: dict[Any, list[Any]] = defaultdict(list)  #: representative -> its orbit's chips
        action = None
        if self.active and self.node_quotients:
            action = next((_built(c) for c in self._candidates() if c.name == orbits), None)
        chips = [c.index for c in system.chips]
        if action is None or any(action.offset(c) is None for c in chips):
            self.active = False
            self.why = f"no node group {orbits!r} moving every chip freely"
            self.node_quotients = False
            return
        self.node_action = action
        self._first = []  # (the step's group is chosen: `_node_quotient` asks no candidate)
        for c in chips:
            rep = action.apply(action.offset(c), c)
            self.rep_of[c] = rep
            self.orbit_members[rep].append(c)
        per_stage: dict[int, int] = defaultdict(int)
        for rep in self.orbit_members:
            per_stage[stage_of[rep]] += 1
        counts = set(per_stage.values())
        assert len(counts) == 1, "a group of node rotations moves every stage's chips alike"
        self._arrivals_per_stage = counts.pop()
        self.per_stage = action.order  #: chips each representative stands for
        self.stage_of_rep = {rep: stage_of[rep] for rep in self.orbit_members}
        self._send_routes: dict[int, dict[Any, Any]] = {}
        chosen = (shared or {}).get(("node choice", None))  # the first run's group (its first collective's)
        if wide and chosen is not None and chosen.order > action.order and chosen.scaled is None:
            self.wide = chosen
        self._send_kinds = self._pipeline_kinds()

    def _pipeline_kinds(self) -> set[str]:
        """The link kinds a pipeline send crosses (from stage 0's first chip to its counterpart on stage 1; every
        send of a stage is an image of it under the step's groups): collectives on links of these kinds run on G."""
        mesh, net = self.mesh, self._net()
        if mesh is None or "pipeline" not in mesh.names or mesh.size("pipeline") < 2:
            return set()
        coords = [0] * len(mesh.sizes)
        src = mesh.device(tuple(coords))
        coords[mesh.index("pipeline")] = 1
        dst = mesh.device(tuple(coords))
        return {net.graph.edges[u, v].get("kind", "ici") for path in net.routes(src, dst)
                for u, v in zip(path, path[1:], strict=False)}

    @property
    def arrivals(self) -> int:
        """Representatives of a stage that must reach a collective before it starts (every orbit of the stage)."""
        return self._arrivals_per_stage if self.active else super().arrivals

    def chips(self) -> list[Any]:
        """The chips whose programs run: every orbit's representative, in chip order."""
        if not self.active:
            return super().chips()
        return [c.index for c in self.system.chips if c.index in self.orbit_members]

    def _node_quotient(self, plan: Any, groups: list[Any] | None = None) -> Any:
        """``plan``'s schedule on the quotient by the orbit run's group (``groups``: lifted from one group's,
        `lifted_quotient`; None then: build every group's and ask again); a schedule the group does not hold stops
        the run (`Rerun`, ``mixed``): the exact run follows."""
        transfers = plan.schedule.transfers
        entry = transfers if groups is None else (transfers, groups)
        if self.wide is not None and not self._sending:
            q = self._quotient_of(entry, self.wide)
            if q is not None and not any(c.kind in self._send_kinds for c in q.links) \
                    and self._claim(q.links, self.wide):
                self._wide_links.update(dict.fromkeys(q.links))
                return q
        q = self._quotient_of(entry, self.node_action)
        if q is None:
            if groups is not None:
                return None
            self.mixed = True
            raise Rerun(f"a collective or send is not equivariant under {self.orbits!r}: the exact run follows")
        if not self._claim(q.links, self.node_action):
            self.narrowed = self.mixed = True
            raise Rerun("a link ran in the orbits of two groups: the orbit run reruns on one")
        self._node_links.update(dict.fromkeys(q.links))
        return q

    def _claim(self, channels: tuple[Any, ...], action: Any) -> bool:
        """Give every link of the orbits of ``channels`` under ``action`` to that group (`_owner`); False (nothing
        given) where one of them belongs to the other group already."""
        key = (channels, action.name)  # (the tuple itself: kept, so its id is not another's later)
        if key in self._claimed:
            return True
        ends = self._ends
        if any(c not in ends for c in channels):
            ends.update({c: pair for pair, c in self._net().links.items()})
        owner, name = self._owner, action.name
        pairs: list[tuple[Any, Any]] = []
        for channel in channels:
            u, v = ends[getattr(channel, "real", channel)]
            for pair in zip(action.orbit(u), action.orbit(v), strict=True):
                if owner.get(pair, name) != name:
                    return False
                pairs.append(pair)
        owner.update(dict.fromkeys(pairs, name))
        self._claimed.add(key)
        return True

    def send(self, chip: Any, nbytes: float, label: str, counterpart: Callable[[Any], Any],
             arrived: Callable[[Any], None]) -> None:
        """Representative ``chip``'s orbit sends ``nbytes`` to its counterparts: ``chip``'s own send of the
        stage's quotient (`_send_quotient`), on its route's representative links, its bytes counted for its orbit;
        ``arrived`` when it arrives."""
        if not self.active:
            return super().send(chip, nbytes, label, counterpart, arrived)
        routes, order = self._orbit_routes(chip, nbytes, counterpart)
        self._send_on_quotient(chip, ([(chip, routes[chip])], order), nbytes, label, None, arrived)

    def _orbit_routes(self, chip: Any, nbytes: float, counterpart: Callable[[Any], Any]) -> tuple[dict, int]:
        """Each representative of ``chip``'s stage -> its send's route on G's representative links (and the links
        it crosses, by kind), and G's order: the stage's quotient of sends (`_send_quotient`, kept)."""
        self._sending = True  # (a representative sends its own orbit's: on G)
        try:
            found = self._send_quotient(chip, nbytes, counterpart)
        finally:
            self._sending = False
        assert found is not None, "an orbit run's sends run on its group's quotient (else it stops: `Rerun`)"
        routes = self._send_routes.get(id(found))
        if routes is None:
            routes = self._send_routes[id(found)] = dict(found[0])
        return routes, found[1]

    def finish(self, trace: Any) -> None:
        """`Symmetry.finish`, and every link of the orbits under W of the channels run on W given their bytes and
        busy time (`unfold`)."""
        if self.active and self.wide is not None and self._wide_links:
            from types import SimpleNamespace

            from simulator.acceleration.quotient import unfold

            unfold(self._net(), self.wide, SimpleNamespace(links=tuple(self._wide_links)), {})
        super().finish(trace)

    def _stood_for(self) -> dict[Any, list[Any]]:
        """Each representative chip -> the other chips of its orbit."""
        return {rep: [c for c in members if c != rep] for rep, members in self.orbit_members.items()
                if len(members) > 1}

    def upper_bound(self, per_chip: dict[Any, dict[str, float]]) -> float:
        """The whole system's ``upper_bound_s``: on each chip its representative's compute units (the same
        program, at the same instants) and its own links (unfolded from the representatives')."""
        if not self.active:
            return super().upper_bound(per_chip)
        compute = {rep: sum(v for u, v in per_chip.get(rep, {}).items() if not u.startswith("link "))
                   for rep in self.orbit_members}
        top = max(compute.values(), default=0.0)
        for chip, units in per_chip.items():
            rep = self.rep_of.get(chip)
            links = 0.0
            for unit, seconds in units.items():
                if unit.startswith("link "):
                    links += seconds
            top = max(top, (compute[rep] if rep is not None else 0.0) + links)
        return top

    def timeline_chip(self, peak: dict[Any, float], stage_of: dict[Any, int]) -> Any:
        """The first chip, in chip order, whose peak (its representative's) is the highest."""
        if not self.active:
            return super().timeline_chip(peak, stage_of)
        top = max(peak.values())
        return next(c.index for c in self.system.chips if peak.get(self.rep_of[c.index]) == top)


class LockstepSymmetry(OrbitSymmetry):
    """An orbit run (`OrbitSymmetry`: the same group, the same collectives and sends on its quotient) with one
    program per pipeline stage, not one per orbit: each program stands for its stage's orbit representatives, its
    *lanes* (``lanes``), and runs in lockstep for them.

    Why that is exact (trace off): in the full run a stage's chips differ only in when their pipeline messages
    arrive (`simulator.workloads.plans.step`: a chip's work runs on its own units, every collective is the whole
    stage's, starting when its last chip arrives and done for all at one instant). So between a receive and the
    next collective, lanes run the same work shifted by their own message's arrival; the collective starts when the
    latest lane reaches it; and after it every lane goes on from its end, in step again. The program keeps the
    latest lane's clock (the one that starts every collective, so every instant the network sees is the full
    run's), and each lane's offset from it (`TrainStep._skew`), from which each lane's waits are booked as its own
    program books them (pipeline bubble and transfer, exposed time per axis, the end of its pipelined part,
    memory-ledger instants). Each lane sends its own message (its orbit's, on the group's representative links),
    from the one instant the lanes share at a send; a send reached by lanes still apart (no collective since the
    receive) would need sends in the past: the run stops (``unlocked``, `Rerun`) and the orbit run follows
    (`simulator.acceleration.reruns`, rule 4). Only where the trace is off: spans would show the latest lane's
    instants for every lane. Counters (HBM bytes, FLOPs) are the program's chip's, scaled by the stage's chips
    (`counter_scale`); every lane's units are the program's (`upper_bound`, `timeline_chip`).
    tests/test_lockstep_run.py holds its figures equal to the full simulation's."""

    def __init__(self, system: Any, mesh: Any, stage_of: dict[Any, int], orbits: str, rings: bool = False,
                 axis_sets: list[tuple[str, ...]] | None = None, shared: dict | None = None,
                 wide: bool = True) -> None:
        super().__init__(system, mesh, stage_of, orbits, rings, axis_sets, shared, wide)
        self._lanes: dict[Any, list[Any]] = {}
        self.lead_of: dict[Any, Any] = {}  #: every orbit representative -> its stage's program chip
        if not self.active:
            return
        by_stage: dict[int, list[Any]] = defaultdict(list)
        for rep in super().chips():
            by_stage[self.stage_of_rep[rep]].append(rep)
        pipe = mesh.index("pipeline") if "pipeline" in mesh.names else None
        for stage, reps in by_stage.items():
            for other in by_stage:  # a lane's counterpart on any stage (interleaved: the last sends to the first)
                if pipe is None or other == stage:
                    continue
                mine = set(by_stage[other])
                for rep in reps:
                    coords = list(mesh.coords(rep))
                    coords[pipe] = other
                    if mesh.device(tuple(coords)) not in mine:  # (then one program per orbit: no lanes)
                        self._lanes, self.lead_of = {}, {}
                        return
            self._lanes[reps[0]] = reps
            self.lead_of.update(dict.fromkeys(reps, reps[0]))

    def lanes(self) -> dict[Any, list[Any]]:
        """Each program's chip -> its lanes (the stage's orbit representatives, its own first); empty: inactive."""
        return self._lanes if self.active else {}  # (empty too where it found none: an orbit run then)

    @property
    def arrivals(self) -> int:
        """One program a stage reaches a collective."""
        return 1 if self.active and self._lanes else super().arrivals

    @property
    def counter_scale(self) -> int:
        """A program's chip's counters stand for its stage's every chip."""
        if not (self.active and self._lanes):
            return super().counter_scale
        return self.per_stage * len(next(iter(self._lanes.values())))

    def chips(self) -> list[Any]:
        """The chips whose programs run: each stage's first orbit representative, in chip order."""
        if not (self.active and self._lanes):
            return super().chips()
        return list(self._lanes)

    def send_lanes(self, chip: Any, nbytes: float, label: str, counterpart: Callable[[Any], Any],
                   arrived: list[Callable[[Any], None]]) -> None:
        """Every lane of program ``chip`` sends its orbit's message (`OrbitSymmetry.send`, lane by lane: its own
        route's representative links, its bytes counted for its orbit); ``arrived[i]`` when lane i's arrives. The
        stage's quotient of sends is looked up once for all lanes."""
        routes, order = self._orbit_routes(chip, nbytes, counterpart)
        for lane, then in zip(self._lanes[chip], arrived, strict=True):
            self._send_on_quotient(lane, ([(lane, routes[lane])], order), nbytes, label, None, then)

    def unlock(self, why: str) -> None:
        """Stop the run (`Rerun`): the lanes are apart where they cannot be (``unlocked``)."""
        self.unlocked = True
        raise Rerun(why)

    def upper_bound(self, per_chip: dict[Any, dict[str, float]]) -> float:
        """`OrbitSymmetry.upper_bound` with every lane's compute units its program's chip's."""
        if not (self.active and self._lanes):
            return super().upper_bound(per_chip)
        merged = dict(per_chip)
        for rep, lead in self.lead_of.items():
            if rep != lead:
                merged[rep] = {**{u: v for u, v in per_chip.get(lead, {}).items() if not u.startswith("link ")},
                               **{u: v for u, v in per_chip.get(rep, {}).items() if u.startswith("link ")}}
        return super().upper_bound(merged)

    def timeline_chip(self, peak: dict[Any, float], stage_of: dict[Any, int]) -> Any:
        """`OrbitSymmetry.timeline_chip`, every lane's peak its program's chip's."""
        if not (self.active and self._lanes):
            return super().timeline_chip(peak, stage_of)
        return super().timeline_chip({rep: peak[lead] for rep, lead in self.lead_of.items() if lead in peak},
                                     stage_of)
