"""Whole steps on GPU node systems on the quotient by node and rail symmetries (and multislice systems by slice
rotations and translations inside the slices): `NodeQuotients`, a part of
`simulator.acceleration.step_symmetry.Symmetry` (its state is set there), and `Rerun`."""
from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

from simulator.acceleration.quotient import quotient

if TYPE_CHECKING:  # annotations only: no import at run time (and no cycle)
    from simulator.engine.channel import Channel
    from simulator.engine.network import Network
    from simulator.engine.system import System

#: the last fabric's symmetry groups (`NodeQuotients._candidates`), by `fabric_key`: they hold no channels (a
#: step's reruns on fresh systems reuse them already), so a later step on an identical fabric can too
_CANDIDATES: dict[tuple, list[Any]] = {}


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

    def _node_quotient(self, plan: Any) -> Any:
        """``plan``'s schedule (every group) on a GPU node system, on its quotient by the rotations of nodes (whole,
        or inside blocks of a mesh axis) and rails that map the fabric onto itself (`collectives.automorphisms`
        `node_actions`, `block_actions`; those named in ``node_allowed`` if given): the largest group the step's
        first collective is equivariant under, then that one for every collective (collectives of one step share
        links: one set of representative links), or None. A later collective that is not equivariant under it
        stops the run (`Rerun`, `mixed`), with ``node_next``: the groups it and the first are both equivariant
        under; where the first has none, no collective runs on a quotient."""
        net, transfers = self._net(), plan.schedule.transfers
        q = None
        if self.node_action is not None:
            q = quotient(net, transfers, self.node_action)
            if q is None:  # the run stops here: the groups this one and the first are both equivariant under
                assert self._first is not None, "the step's group was chosen on its first collective"
                self.node_next = self._fits(self._first, among=self._fits(transfers))
                self.mixed = True
                raise Rerun("a collective is not equivariant under the step's group")  # no use running on
        elif self._first is None:
            self._first = transfers
            chosen = self.shared.get(("node choice", self.node_allowed))  # an earlier run's: tried first
            for action in ([chosen] if chosen is not None else []) + self._candidates():
                q = quotient(net, transfers, action)
                if q is not None:
                    self.node_action = self.shared[("node choice", self.node_allowed)] = action
                    break
        if q is not None:
            self._node_links.update(dict.fromkeys(q.links))
        return q

    def _candidates(self) -> list[Any]:
        """The node system's symmetry groups, largest first (those named in ``node_allowed``)."""
        if self._node_candidates is None:  # built once for the step and its reruns (they hold no channels)
            from simulator.acceleration.automorphisms import block_actions, node_actions
            from simulator.acceleration.slice_symmetry import slice_actions

            net, allowed = self._net(), self.node_allowed
            every = self.shared.get(("node candidates",))
            if every is None:  # of the same fabric as an earlier step's (a plan's finalists): those, else built
                key = fabric_key(net)
                every = _CANDIDATES.get(key) if key is not None else None
                if every is None:
                    every = sorted(itertools.chain(node_actions(net), block_actions(net), slice_actions(net)),
                                   key=lambda a: -a.order)
                    if key is not None:
                        _CANDIDATES.clear()  # one fabric kept: bounded memory
                        _CANDIDATES[key] = every
                self.shared[("node candidates",)] = every
            self._node_candidates = [a for a in every if allowed is None or a.name in allowed]
        return self._node_candidates

    def _fits(self, transfers: list[Any], among: frozenset | None = None) -> frozenset:
        """The names of the candidate groups (of those named in ``among``, if given) ``transfers`` is equivariant
        under."""
        net = self._net()
        return frozenset(a.name for a in self._candidates() if (among is None or a.name in among)
                         and quotient(net, transfers, a) is not None)
