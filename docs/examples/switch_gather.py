"""A plug-in collective algorithm: AllGather in one step through a switch.

Every chip sends its shard straight to every other chip at once. Importing this module registers the
algorithm as ``switch_gather``; then ``run_collective("all_gather", system, V, algorithm="switch_gather")``
runs it, and ``algorithm="auto"`` prices it beside the built-in ones. ``docs/guide/add_a_collective_algorithm.md``
walks through it; ``tests/test_docs_site.py`` runs it against its closed form and numpy.
"""
from __future__ import annotations

from simulator.collectives import Algorithm, Job, Schedule, register


class SwitchGather(Algorithm):
    """AllGather: every chip sends its shard to every other chip through the switch, in one step."""

    name = "switch_gather"
    summary = "AllGather in one step: every chip sends its shard straight to every other chip"
    kinds = ("all_gather",)
    topologies = ("switch",)
    nic_rings = False  #: it addresses every chip itself (no ring per NIC)

    def build(self, job: Job, schedule: Schedule) -> None:
        """One transfer per ordered pair of chips: the sender's shard, copied (not added) at the receiver."""
        for group in job.groups:
            for position, sender in group.members.items():
                for receiver in group.members.values():
                    if receiver != sender:
                        payload = ((0, position),) if job.numeric else 1  # the keys, or their count
                        schedule.add(sender, receiver, payload, "copy", [], ("switch_gather", position), receiver)

    def closed_form(self, job: Job) -> float:
        """Seconds: two link latencies (chip to switch, switch to chip) plus the n - 1 shards each chip's port
        carries out (and in) at once, at the port's bandwidth (bytes/s)."""
        first = job.group.members[next(iter(job.group.members))]
        edges = job.net.graph.out_edges(first, data=True)
        _, _, edge = next(iter(edges))
        return 2 * edge["latency_s"] + (job.group.n - 1) * job.key_bytes / edge["bandwidth_bytes_per_s"]


ALGORITHM = register(SwitchGather())
