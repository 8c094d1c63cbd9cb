"""Whole steps on GPU node systems on the quotient by node and rail symmetries (and multislice systems by slice
rotations and translations inside the slices): `NodeQuotients`, a part of
`simulator.acceleration.step_symmetry.Symmetry` (its state is set there), and `Rerun`."""
from __future__ import annotations

import itertools
import math
import weakref
from typing import TYPE_CHECKING, Any

from simulator.acceleration.quotient import quotient

if TYPE_CHECKING:  # annotations only: no import at run time (and no cycle)
    from simulator.engine.channel import Channel
    from simulator.engine.network import Network
    from simulator.engine.system import System

#: the last fabric's symmetry groups (`NodeQuotients._candidates`), by `fabric_key`: they hold no channels (a
#: step's reruns on fresh systems reuse them already), so a later step on an identical fabric can too
_CANDIDATES: dict[tuple, list[Any]] = {}
#: each network's chip pairs: whether the pair's route is its one quickest path (`Network.route_is_unique`)
_UNIQUE: weakref.WeakKeyDictionary[Any, dict[tuple[Any, Any], bool]] = weakref.WeakKeyDictionary()


def fabric_key(net: Any) -> tuple | None:
    """A key equal for networks whose graphs are identical (graph attributes, nodes, every link and its
    attributes) and unfaulted; None for a faulted network (its groups are none anyway, and not kept)."""
    if net.faulted:
        return None
    graph = net.graph
    links = sorted((repr(u), repr(v), repr(sorted(d.items()))) for u, v, d in graph.edges(data=True))
    nodes = sorted((repr(n), repr(sorted(d.items()))) for n, d in graph.nodes(data=True))
    return repr(sorted(graph.graph.items(), key=repr)), tuple(nodes), tuple(links), repr(net.shape)  # exact, no hash


class Rerun(Exception):  # noqa: N818  (not an error: a signal)
    """Raised inside a fast step that must be rerun anyway (`Symmetry.mixed` on GPU nodes): the caller reruns it
    at once instead of finishing a run whose results it would discard."""


class NodeQuotients:
    """The node-system quotient of `Symmetry` (see `_node_quotient`)."""

    node_action: Any = None  #: the group every collective of the step ran on the quotient by
    #: the groups the collective that stopped the run (`Rerun`) is equivariant under (its schedule whole; the first
    #: collective's may have been checked lifted only, `lifted_quotient`, so ``node_next`` can miss some of these)
    node_failed: frozenset = frozenset()
    # the state `simulator.acceleration.step_symmetry.Symmetry.__init__` sets (described there)
    system: System
    shared: dict[tuple, Any]
    node_allowed: frozenset | None
    node_next: frozenset | None
    mixed: bool
    _first: list[Any] | None
    _node_candidates: list[Any] | None
    _node_links: dict[Channel, None]

    def _net(self) -> Network:
        """The node system's network (a step on GPU nodes runs on one)."""
        net = self.system.network
        assert net is not None, "a node quotient runs on a system with a network"
        return net

    def _node_quotient(self, plan: Any, groups: list[Any] | None = None) -> Any:
        """``plan``'s schedule (every group) on a GPU node system, on its quotient by the rotations of nodes (whole,
        or inside blocks of a mesh axis) and rails that map the fabric onto itself (`collectives.automorphisms`
        `node_actions`, `block_actions`; those named in ``node_allowed`` if given): the largest group the step's
        first collective is equivariant under, then that one for every collective (collectives of one step share
        links: one set of representative links), or None. A later collective that is not equivariant under it
        stops the run (`Rerun`, `mixed`), with ``node_next``: the groups it and the first are both equivariant
        under; where the first has none, no collective runs on a quotient. ``groups``: ``plan`` holds the schedule
        of one of them alone (`simulator.collectives.api.plan_one_group`), lifted to the whole collective
        (`lifted_quotient`); None then means: build every group's schedule and ask again."""
        transfers = plan.schedule.transfers
        entry: Any = transfers if groups is None else (transfers, groups)
        q = None
        if self.node_action is not None:
            q = self._quotient_of(entry, self.node_action)
            if q is None:  # the run stops here: the groups this one and the first are both equivariant under
                if groups is not None:
                    return None
                assert self._first is not None, "the step's group was chosen on its first collective"
                self.node_failed = self._fits(transfers)
                self.node_next = self._fits(self._first, among=self.node_failed)
                self.mixed = True
                raise Rerun("a collective is not equivariant under the step's group")  # no use running on
        elif self._first is None:
            chosen = self.shared.get(("node choice", self.node_allowed))  # an earlier run's: tried first
            sources = {t.src for t in transfers if t.src is not None} if groups is None else \
                _lifted_sources(transfers, groups)
            for candidate in ([chosen] if chosen is not None else []) + self._candidates():
                if not _keeps(candidate, sources):
                    continue
                action = _built(candidate)
                if action is None:  # a slice candidate that is not a group of its order
                    continue
                q = self._quotient_of(entry, action)
                if q is not None:
                    self.node_action = self.shared[("node choice", self.node_allowed)] = action
                    break
            if q is None and groups is not None:
                return None
            self._first = entry
            if self.node_action is not None:
                self._chosen()
        if q is not None:
            self._node_links.update(dict.fromkeys(q.links))
        return q

    def _chosen(self) -> None:
        """Called once the step's group is chosen (`Symmetry` checks the collectives it knows are ahead)."""

    def _quotient_of(self, entry: Any, action: Any) -> Any:
        """The quotient by ``action`` of a whole schedule (a list of transfers), or of one group's lifted to the
        whole collective (a pair: that group's transfers and every group: `lifted_quotient`)."""
        net = self._net()
        if isinstance(entry, tuple):
            transfers, groups = entry
            return lifted_quotient(net, transfers, groups, action, self.shared)
        return quotient(net, entry, action)

    def _candidates(self) -> list[Any]:
        """The node system's symmetry groups, largest first (those named in ``node_allowed``), not yet built: on GPU
        nodes `NodeCandidate` (`simulator.acceleration.automorphisms` `node_specs`, `stride_specs`, `block_specs`,
        `mirror_specs`),
        on a multislice system `simulator.acceleration.slice_symmetry.Candidate`; each built by `_built` when tried
        (the first that fits is the largest, and the others are never built)."""
        if self._node_candidates is None:  # built once for the step and its reruns (they hold no channels)
            from simulator.acceleration.automorphisms import block_specs, mirror_specs, node_specs, stride_specs
            from simulator.acceleration.slice_symmetry import _Graph, slice_candidates

            net, allowed = self._net(), self.node_allowed
            every = self.shared.get(("node candidates",))
            if every is None and net.graph.graph.get("kind") == "multislice":  # cheap until built: not kept
                every = slice_candidates(net)
            if every is None:  # of the same fabric as an earlier step's (a plan's finalists): those, else built
                key = fabric_key(net)
                every = _CANDIDATES.get(key) if key is not None else None
                if every is None:
                    stand_in = _Graph(net.graph)  # (no channels: kept across steps)
                    whole = node_specs(stand_in) if not net.faulted else ()  # (`node_actions`, built when tried)
                    specs = itertools.chain(whole, stride_specs(net), block_specs(net), mirror_specs(net))
                    every = sorted((NodeCandidate(name, order, stand_in, make) for name, order, make in specs),
                                   key=lambda a: -a.order)
                    if key is not None:
                        _CANDIDATES.clear()  # one fabric kept: bounded memory
                        _CANDIDATES[key] = every
            self.shared[("node candidates",)] = every
            self._node_candidates = [a for a in every if allowed is None or a.name in allowed]
        return self._node_candidates

    def _fits(self, transfers: Any, among: frozenset | None = None) -> frozenset:
        """The names of the candidate groups (of those named in ``among``, if given) ``transfers`` (as
        `_quotient_of` takes them) is equivariant under."""
        sources = {t.src for t in transfers if t.src is not None} if isinstance(transfers, list) else None
        pairs = _Pairs(transfers) if isinstance(transfers, list) else None
        fitting: list[Any] = []  #: the groups found to fit, built
        names = []
        # one group's schedule lifted (`lifted_quotient`): a group smaller than the groups cannot map one onto each
        least = len(transfers[1]) if isinstance(transfers, tuple) and len(transfers) == 2 else 0
        for a in self._candidates():  # (largest first)
            if (among is not None and a.name not in among) or (sources is not None and not _keeps(a, sources)):
                continue
            if a.order < least:
                continue
            if sources is not None and type(a) is NodeCandidate and any(_within(a, f) for f in fitting):
                names.append(a.name)  # a subgroup of one that fits a whole schedule fits it too (no build; not so
                continue  # lifted: `lifted_quotient` asks the group to map one group onto each other, which it may not)
            if (pairs is None or pairs.may_fit(a)) and (action := _built(a)) is not None \
                    and self._quotient_of(transfers, action) is not None:
                names.append(a.name)
                fitting.append(action)
        return frozenset(names)


def _within(candidate: NodeCandidate, group: Any) -> bool:
    """Whether every generator of ``candidate`` (its permutations, unbuilt) is an element of ``group`` (a built
    `Automorphisms` that moves some chip freely): then ``candidate`` is a subgroup of it, and a schedule
    equivariant under ``group`` is under ``candidate`` too. An element is found by where it takes one chip (the
    group moves it freely: one element does) and checked on every node."""
    perms = candidate.perms()
    offsets = getattr(group, "_offset", None)
    if not perms or not offsets:
        return False
    home = next(iter(offsets))
    for perm in perms:
        there = perm.get(home)
        a, b = group.offset(home), group.offset(there) if there is not None else None
        if a is None or b is None or group.apply(a, home) != group.apply(b, there):  # (not in one orbit)
            return False
        h = tuple((x - y) % k for x, y, k in zip(a, b, group.orders, strict=True))  # b^-1 a: home -> there
        if any(group.apply(h, v) != w for v, w in perm.items()):
            return False
    return True


class NodeCandidate:
    """A node system's symmetry group known by its ``name`` and ``order`` (`automorphisms.Spec`) before it is
    built: `perms` makes its generators' permutations (cheap), `build` checks them and makes the group (each
    generator an automorphism: a pass over every link), once; None where it is not a group."""

    __slots__ = ("name", "order", "_net", "_make", "_made", "_built")

    def __init__(self, name: str, order: int, net: Any, make: Any) -> None:
        self.name, self.order = name, order
        self._net, self._make = net, make
        self._made: list[tuple[dict[Any, Any], int]] | None = None
        self._built: Any = None

    def perms(self) -> list[dict[Any, Any]] | None:
        """The generators' permutations, unchecked; None where they cannot be made."""
        if self._made is None and self._make is not None:
            try:
                self._made = self._make()
            except (ValueError, KeyError):
                self._make = None
        return None if self._made is None else [perm for perm, _ in self._made]

    def build(self) -> Any:
        """The group (`Automorphisms`, built on first call), or None."""
        if self._built is None and self.perms() is not None:
            from simulator.acceleration.automorphisms import Automorphisms

            try:
                self._built = Automorphisms(self._net, self._made, self.name)  # type: ignore[arg-type]
            except (ValueError, KeyError):
                self._built = False
            self._make = None
        return self._built or None


def rotated_onto(net: Network, cache: dict, before: list[Any], after: list[Any]) -> bool:
    """Whether a rotation of ``net``'s nodes (``nodes:K:G``, one InfiniBand switch: node k to k + d mod K, GPUs on
    their rails, each node's NVLink switch with it: `automorphisms.node_rotation`, the rotation by one checked an
    automorphism once, kept in ``cache``) maps the groups ``before`` onto ``after`` group by group and position by
    position, keeping the chips' order: then every closed form, NCCL's model and the tuner price ``after`` as
    ``before`` (another pipeline stage's groups: `simulator.collectives.api.plan_one_group`'s ``tuned``)."""
    from simulator.acceleration.automorphisms import _one_switch, check_automorphism, node_rotation

    found = cache.get(("node rotation",))
    if found is None:
        ok = _one_switch(net)
        if ok:
            try:
                check_automorphism(net.graph, node_rotation(net, 1))
            except (ValueError, KeyError):
                ok = False
        coord = {c: tuple(net.graph.nodes[c]["coord"]) for c in net.chips} if ok else {}
        found = cache[("node rotation",)] = (ok, coord, {v: c for c, v in coord.items()})
    ok, coord, at = found
    if not ok or len(before) != len(after) or not before:
        return False
    count = net.graph.graph["shape"][0]
    pos, chip = next(iter(before[0].members.items()))
    if pos not in after[0].members:
        return False
    d = (coord[after[0].members[pos]][0] - coord[chip][0]) % count

    def image(c: Any) -> Any:
        k, rail = coord[c]
        return at[((k + d) % count, rail)]

    for g, h in zip(before, after, strict=True):
        if g.sizes != h.sizes or g.wraps != h.wraps or g.shared != h.shared or len(g.members) != len(h.members) \
                or any(h.members.get(p) != image(c) for p, c in g.members.items()):
            return False
    images = [image(c) for c in sorted(c for g in before for c in g.members.values())]
    return all(a < b for a, b in itertools.pairwise(images))


def _lifted_sources(transfers: list[Any], groups: list[Any]) -> set[Any] | None:
    """The chips that send in the whole collective over ``groups`` whose group of the smallest chip alone has the
    schedule ``transfers`` (`lifted_quotient`: every group's is built alike from its positions): each group's chips
    at the positions that send there; None where a transfer's source is not a chip of that group (not known)."""
    home = min(c for g in groups for c in g.members.values())
    g0 = next(g for g in groups if home in g.members.values())
    position = {c: pos for pos, c in g0.members.items()}
    sending = set()
    for t in transfers:
        if t.src is not None:
            if t.src not in position:
                return None
            sending.add(position[t.src])
    return {g.members[pos] for g in groups for pos in sending if pos in g.members}


def _keeps(candidate: Any, sources: set[Any] | None) -> bool:
    """Whether ``candidate``'s generators (where known unbuilt: `NodeCandidate`) map the chips that send in a
    schedule onto themselves -- what a quotient needs (every orbit whole: each chip of a source's orbit sends as it
    does), checked before the group is built; True where not known."""
    if type(candidate) is not NodeCandidate or sources is None:
        return True
    perms = candidate.perms()
    keeps = perms is not None and all(perm[c] in sources for perm in perms for c in sources)
    if not keeps and candidate._built is None:
        candidate._made = None  # (not kept while unbuilt: thousands of nodes each; made again if asked)
    return keeps


class _Pairs:
    """A necessary condition for a schedule's quotient by a group, checked on the group's generators before it is
    built: each generator maps the sending transfers' (source, destination, bytes, operation) onto those of the
    schedule. (`quotient` accepts only a schedule whose transfers are |G| images of its representatives', role for
    role, so every element maps that multiset onto itself.) Checked on `SAMPLE` transfers spread over the
    schedule: a schedule it passes may still fail `quotient`, one it fails fails `quotient` too (the same groups
    fit, found without building, at thousands of nodes, the groups that do not)."""

    SAMPLE = 512

    def __init__(self, transfers: list[Any]) -> None:
        sent = [(t.src, t.dst, t.nbytes, t.op) for t in transfers if t.src is not None]
        self.roles = set(sent)
        self.sample = sent[::max(1, len(sent) // self.SAMPLE)]

    def may_fit(self, candidate: Any) -> bool:
        """False where a generator of ``candidate`` (its permutations, built or not) maps a sampled transfer onto
        none of the schedule's: no quotient then; True otherwise (or where its generators are not known)."""
        if type(candidate) is NodeCandidate:
            perms = candidate.perms()
        elif hasattr(candidate, "orders") and hasattr(candidate, "generator"):
            perms = [candidate.generator(i) for i in range(len(candidate.orders))]
        else:
            return True
        if perms is None:
            return True
        roles = self.roles
        fits = all((perm.get(src), perm.get(dst), nbytes, op) in roles
                   for perm in perms for src, dst, nbytes, op in self.sample)
        if not fits and type(candidate) is NodeCandidate and candidate._built is None:
            candidate._made = None  # (not kept while unbuilt, as `_keeps`)
        return fits


def _built(candidate: Any) -> Any:
    """A candidate group as `_quotient_of` takes it: built (`slice_symmetry.Candidate.build`,
    `NodeCandidate.build`, None where it is not a group), or as it is."""
    from simulator.acceleration.slice_symmetry import Candidate

    return candidate.build() if type(candidate) in (Candidate, NodeCandidate) else candidate


def lifted_quotient(net: Network, transfers: list[Any], groups: list[Any], action: Any, cache: dict) -> Any:
    """The quotient by ``action`` of a collective over ``groups`` from the schedule of one of them alone
    (``transfers``: `simulator.collectives.api.plan_one_group`), exactly what `quotient` gives of every group's
    schedule, or None (then build them all). It applies where ``action`` (an `Automorphisms`, no multiplicities)
    is the product of the generators that map that group g0 onto itself (its stabiliser S) and of the others,
    whose elements map g0 onto every other group, position by position, each once: the whole schedule is then
    the images of g0's, each group's built alike from its positions (`plan_one_group` checks that the job is the
    one of every group), and G's orbit representatives are S's in g0 (the smallest chip of each orbit of the
    groups' chips, which must lie in g0: g0 is the group of the groups' smallest chip; orbits no group's chip
    lies in -- other pipeline stages' -- carry none of this collective's transfers). Checked, not assumed: those
    images; g0's schedule equivariant under S (`quotient`); and the route of each of g0's chip pairs moved by every
    other element, the image of its route (where the pair's route is its one quickest path,
    `Network.route_is_unique`, a theorem for every element: they keep every link's bandwidth, latency and kind;
    elsewhere compared route by route). The representatives' routes are then taken on G's representative links,
    and the quotient's order is |G|.
    ``cache`` keeps each stabiliser (a step's reruns share it)."""
    from simulator.acceleration.automorphisms import Automorphisms
    from simulator.acceleration.quotient import Quotient, rep_routes

    if type(action) is not Automorphisms or action.scaled is not None or len(groups) < 2:
        return None
    home = min(c for g in groups for c in g.members.values())
    g0 = next((g for g in groups if home in g.members.values()), None)
    if g0 is None:
        return None
    mine = frozenset(g0.members.values())
    key = ("lifted", id(action), action.name, tuple(sorted(mine)))
    found = cache.get(key)
    if found is None:
        found = cache[key] = _stabiliser(net, action, groups, g0, mine, cache)
    if found is False:
        return None
    stabiliser, moves = found
    q0 = quotient(net, transfers, stabiliser)
    if q0 is None:
        return None
    pairs = {(t.src, t.dst) for t in transfers if t.src is not None and t.src != t.dst and t.nbytes}
    # a pair routed on its one quickest path moves with every element (`Network.route_is_unique`: they keep link
    # bandwidth, latency and kind, checked when the group was built); the others' images are compared route by route
    unique = _UNIQUE.setdefault(net, {})
    for src, dst in pairs:
        if unique.get((src, dst)) is None:
            unique[(src, dst)] = net.route_is_unique(src, dst)
    for src, dst in [pair for pair in pairs if not unique[pair]]:
        paths = net.routes(src, dst)
        for h in moves:
            image = net.routes(action.apply(h, src), action.apply(h, dst))
            if len(paths) != len(image) or any([action.apply(h, v) for v in p] != r
                                               for p, r in zip(paths, image, strict=True)):
                return None
    found = rep_routes(net, q0.transfers, action)
    if found is None:
        return None
    routes, used = found
    return Quotient(q0.transfers, routes, action.order, used, q0.represented * len(groups), q0.announced)


def _stabiliser(net: Network, action: Any, groups: list[Any], g0: Any, mine: frozenset, cache: dict) -> Any:
    """(the subgroup of ``action``'s generators that map ``g0`` onto itself, the other elements: those of the other
    generators, identity left out) where those map ``g0`` onto every group of ``groups`` position by position, each
    once, and every orbit representative lies in ``g0``; else False. ``cache`` keeps each subgroup (by the
    generators it keeps: every pipeline stage's collectives of one kind share it)."""
    fixing: list[int] = []
    moving: list[int] = []
    for i in range(len(action.orders)):
        perm = action.generator(i)
        image = {perm[v] for v in mine}
        (fixing if image == mine else moving).append(i)
    if math.prod(action.orders[i] for i in moving) != len(groups):
        return False
    if any(action.offset(c) == action.identity and c not in mine for g in groups for c in g.members.values()):
        return False
    group_of = {c: g for g in groups for c in g.members.values()}
    seen: set[int] = set()
    moves = []
    for exponents in itertools.product(*(range(action.orders[i]) for i in moving)):
        h = list(action.identity)
        for i, e in zip(moving, exponents, strict=True):
            h[i] = e
        element = tuple(h)
        images = {pos: action.apply(element, c) for pos, c in g0.members.items()}
        target = group_of.get(next(iter(images.values())))
        if target is None or id(target) in seen or any(target.members.get(pos) != c for pos, c in images.items()):
            return False
        seen.add(id(target))
        if element != action.identity:
            moves.append(element)
    if len(seen) != len(groups):
        return False
    key = ("subgroup", id(action), action.name, tuple(fixing))
    subgroup = cache.get(key)
    if subgroup is None:
        subgroup = cache[key] = action.subgroup(net, fixing)
    return subgroup, moves
