"""Direct algorithms: every chip sends straight to its peers through the switch, in one or two steps.

- ``one_shot`` AllReduce: every chip sends its whole array to every other chip and adds what arrives
  (one step, (n-1)V out of every port; the small-message AllReduce of TensorRT-LLM and NCCL's
  NVLS-less small sizes). Closed form: one all-pairs step of V;
- ``two_shot`` AllReduce: a direct reduce-scatter (chip s receives shard s from every chip and adds) then
  a direct all-gather of the reduced shards (two steps of V/n each; the same bytes per port as a ring,
  in 2 steps instead of 2(n-1)). Closed form: two all-pairs steps of V/n;
- ``direct`` AllGather, ReduceScatter and AllToAll: each one all-pairs step (AllToAll sends chunk (r, t)
  straight from r to t -- the pairwise exchange through a switch, instead of forwarding round a ring).

An all-pairs step of m bytes per message costs ``2 latency + (peers through that link) x m / bandwidth``
on a switch (`simulator.collectives.switched.all_pairs_time`); on GPU nodes the local and remote peers
load the NVLink port and the NIC separately and the slower one counts. Exact in the simulation.
"""
from __future__ import annotations

from typing import Any, ClassVar

from simulator.collectives.algorithm import Algorithm, Job, register
from simulator.collectives.groups import Group
from simulator.collectives.schedule import Schedule
from simulator.collectives.switched import SWITCHED, all_pairs_time, keys


class _Direct(Algorithm):
    topologies: ClassVar[tuple[str, ...]] = SWITCHED
    nic_rings = False

    steps = 1  #: all-pairs steps (each n(n - 1) transfers per group)

    def _pairs(self, job: Job, group: Group) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
        positions = group.positions()
        return [(a, b) for a in positions for b in positions if a != b]

    def expect(self, job: Job, s: Schedule, deps: int = 0) -> None:
        """Refuse up front a schedule whose n(n - 1) transfers per group and step (and ``deps``
        dependencies in all) would pass the memory budget."""
        n = job.group.n
        s.expect(len(job.groups) * self.steps * n * (n - 1), deps)


class OneShot(_Direct):
    """Every chip sends its whole array to every other chip, which adds it."""

    name = "one_shot"
    summary = "AllReduce in one step: every chip sends its whole array to every other chip"
    kinds = ("all_reduce",)

    def build(self, job: Job, s: Schedule) -> None:
        self.expect(job, s)
        for group in job.groups:
            every = group.positions()
            for a, b in self._pairs(job, group):
                s.add(group.members[a], group.members[b], keys(job, every, range(job.parts)), "add", [],
                      ("one_shot", id(group)), group.members[b])

    def closed_form(self, job: Job) -> float:
        return all_pairs_time(job.net, job.group, job.key_bytes * job.parts * job.group.n)


class TwoShot(_Direct):
    """A direct reduce-scatter, then a direct all-gather of the reduced shards."""

    name = "two_shot"
    summary = "AllReduce in two steps: shard s straight to chip s (added), then straight back to everyone"
    kinds = ("all_reduce",)
    steps = 2

    def build(self, job: Job, s: Schedule) -> None:
        n = job.group.n
        self.expect(job, s, len(job.groups) * n * (n - 1) ** 2)  # each gathered shard waits for its n - 1 parts
        for group in job.groups:
            parts = range(job.parts)
            into: dict[Any, list[Any]] = {b: [] for b in group.positions()}
            for a, b in self._pairs(job, group):
                into[b].append(s.add(group.members[a], group.members[b], keys(job, [b], parts), "add", [],
                                     ("rs", id(group)), group.members[b]))
            for a, b in self._pairs(job, group):
                s.add(group.members[a], group.members[b], keys(job, [a], parts), "copy", into[a],
                      ("ag", id(group)), group.members[b])

    def closed_form(self, job: Job) -> float:
        return 2 * all_pairs_time(job.net, job.group, job.key_bytes * job.parts)


class Direct(_Direct):
    """One all-pairs step: AllGather (own shard to all), ReduceScatter (shard s to s), AllToAll (chunk r->t)."""

    name = "direct"
    summary = "one step, every chip straight to every other: AllGather, ReduceScatter, pairwise AllToAll"
    kinds: ClassVar[tuple[str, ...]] = ("all_gather", "reduce_scatter", "all_to_all")

    def build(self, job: Job, s: Schedule) -> None:
        self.expect(job, s)
        for group in job.groups:
            parts = range(job.parts)
            for a, b in self._pairs(job, group):
                if job.kind == "all_gather":
                    what, op = keys(job, [a], parts), "copy"
                elif job.kind == "reduce_scatter":
                    what, op = keys(job, [b], parts), "add"
                else:
                    what, op = (tuple((p, a, b) for p in parts) if job.numeric else len(parts)), "copy"
                s.add(group.members[a], group.members[b], what, op, [], ("direct", id(group)), group.members[b])

    def closed_form(self, job: Job) -> float:
        return all_pairs_time(job.net, job.group, job.key_bytes * job.parts)


ONE_SHOT = register(OneShot())
TWO_SHOT = register(TwoShot())
DIRECT = register(Direct())
