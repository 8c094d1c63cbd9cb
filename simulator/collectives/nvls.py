"""NVLS: AllReduce, ReduceScatter and AllGather reduced and multicast inside the NVLink switch (NVLink SHARP).

On NVLink 4/5 NVSwitches (H100, H200, B200 nodes) a GPU can ask the switch for the sum of one address
range over every GPU (``multimem.ld_reduce``: the switch reads the range from each GPU, adds, and returns
the sum) and can store through the switch to every GPU at once (``multimem.st``: multicast). NCCL's NVLS
AllReduce uses both: GPU s fetches the sum of shard s, then multicasts it. Bytes per GPU port, each
way: V (its contribution to every shard) + V/n (its own shard's sum, then its store) -- ``V (1 + 1/n)``
where a ring moves ``2 (n-1)/n V``: 1.125 V against 1.75 V on 8 GPUs. ReduceScatter and AllGather
move V one way and V/n the other, so they are no faster than a ring by bandwidth (sjeaugey,
NVIDIA/nccl#1506: "instead of transmitting (N-1)/N*size in both directions, it will transmit size in
one direction and 1/N*size in the other"). Measured: H100 NVLS AllReduce reaches a bus bandwidth of
about 480 GB/s on 8 GPUs where rings reach about 370 GB/s (NVIDIA/nccl-tests#212, NVIDIA/nccl#1442:
"a 30% improvement using NVLink SHARP"); with 2-4 GPUs NVLS is no faster than a ring (NVIDIA/nccl#1455).
The switch adds with no cost of its own here; the calibrated mode fits what it achieves.

Model: the switch is a node of the graph; a contribution is a transfer GPU -> switch with ``add`` (the
switch starts empty), the fetched sum a transfer switch -> GPU, the store GPU -> switch and the multicast
switch -> every other GPU. The array is cut into ``CHUNKS`` chunks; each GPU sends its chunks' contributions
in order (chunk c+1 once chunk c has arrived), so fetches and multicasts of one chunk overlap the
contributions of the next. Closed form: the first chunk's four hops, ``4 a + (S + 2 S/n + (n-1) S/n) / b``
for chunk S, then one period per further chunk: a contribution's hop ``a + (S + 2 S/n) / b`` (it shares
the uplink with stores, which fair sharing lets overtake it) -- AllReduce; ReduceScatter pays
``a + S / b`` per chunk, AllGather the longer of a store and a multicast. On 8 GPUs within about 4%
of the simulation, on 3-5 GPUs up to 15% above it (the stores overtake less); tests/test_switched_algorithms.py.

Bounds: in-switch reduction breaks `simulator.collectives.bounds`' rule that switches never add data,
so the bound drops the "the group receives 2(n-1)V together" term where the switch can reduce
(`reduces_in_switch`); the per-chip terms (receive V, send V) still hold.
"""
from __future__ import annotations

from typing import Any

from simulator.collectives.algorithm import Algorithm, Job, register
from simulator.collectives.groups import Group
from simulator.collectives.schedule import Schedule
from simulator.collectives.switched import keys, members
from simulator.engine.network import Network

#: chips whose NVSwitch reduces and multicasts (NVLink SHARP), with the switch generation
NVLS_CHIPS = {"h100": "NVLink 4, third-generation NVSwitch", "h200": "NVLink 4, third-generation NVSwitch",
              "b200": "NVLink 5, fourth-generation NVSwitch"}
CHUNKS = 8  #: pipeline chunks


def reduces_in_switch(net: Network) -> bool:
    """Whether the topology's switches add data themselves: an NVLink switch, or GPU nodes (`nvls_tree`), of
    NVLS-capable chips."""
    return net.graph.graph.get("kind") in ("switch", "nodes") and getattr(net.chip, "name", None) in NVLS_CHIPS


def _switch(net: Network, chip: Any) -> Any:
    return next(v for v in net.graph.succ[chip] if net.graph.nodes[v].get("role") == "switch")


class Nvls(Algorithm):
    """Contributions reduced in the switch, sums multicast by the switch (see the module docstring)."""

    name = "nvls"
    summary = "NVLink SHARP: the switch adds every GPU's contribution and multicasts the sums (H100/H200/B200)"
    kinds = ("all_gather", "reduce_scatter", "all_reduce")
    topologies = ("switch",)
    nic_rings = False

    def unfit(self, kind: str, net: Network, groups: list[Group]) -> str | None:
        why = super().unfit(kind, net, groups)
        if why is None and not reduces_in_switch(net):
            chip = getattr(net.chip, "name", None)
            return f"chip {chip!r} has no NVLink SHARP switch (NVLS chips: {', '.join(NVLS_CHIPS)})"
        return why

    def parts(self, kind: str, group: Group, multi_axis: str) -> int:
        return CHUNKS

    def build(self, job: Job, s: Schedule) -> None:
        for group in job.groups:
            chips, at = members(group), group.positions()
            sw = _switch(job.net, chips[0])
            last_up: dict[int, int] = {}
            for c in range(CHUNKS):
                tag = (id(group), c)
                if job.kind == "all_gather":
                    sums: dict[int, list[Any]] = {r: [] for r in range(len(chips))}
                else:
                    sums = self._reduce(job, s, chips, at, sw, c, last_up, tag)
                if job.kind != "reduce_scatter":
                    self._multicast(job, s, chips, at, sw, c, sums, last_up, tag)

    @staticmethod
    def _reduce(job: Job, s: Schedule, chips: list, at: list, sw: Any, c: int, last_up: dict, tag: tuple) -> dict:
        """Every GPU's chunk into the switch (added), then each shard's sum to its owner; owner -> its fetch."""
        into = []
        for r, chip in enumerate(chips):
            deps = [last_up[r]] if r in last_up else []
            last_up[r] = s.add(chip, sw, keys(job, at, [c]), "add", deps, ("contribute", *tag), sw)
            into.append(last_up[r])
        return {r: [s.add(sw, chip, keys(job, [at[r]], [c]), "copy", into, ("fetch", *tag), chip)]
                for r, chip in enumerate(chips)}

    @staticmethod
    def _multicast(job: Job, s: Schedule, chips: list, at: list, sw: Any, c: int, sums: dict, last_up: dict,
                   tag: tuple) -> None:
        """Each owner stores its shard's sum through the switch, which copies it to every other GPU."""
        for r, chip in enumerate(chips):
            deps = sums[r] + ([last_up[r]] if job.kind == "all_gather" and r in last_up else [])
            stored = s.add(chip, sw, keys(job, [at[r]], [c]), "copy", deps, ("store", *tag), sw)
            if job.kind == "all_gather":
                last_up[r] = stored
            for q, other in enumerate(chips):
                if q != r:
                    s.add(sw, other, keys(job, [at[r]], [c]), "copy", [stored], ("multicast", *tag), other)

    def closed_form(self, job: Job) -> float:
        n = job.group.n
        chip = members(job.group)[0]
        sw = _switch(job.net, chip)
        up, down = job.net.graph.edges[chip, sw], job.net.graph.edges[sw, chip]
        a_up, a_down, b = up["latency_s"], down["latency_s"], up["bandwidth_bytes_per_s"]
        chunk = job.key_bytes * n  # one chunk of the whole array
        shard = chunk / n
        contribute, fetch = a_up + chunk / b, a_down + shard / b
        store, multicast = a_up + shard / b, a_down + (n - 1) * shard / b
        if job.kind == "reduce_scatter":
            return contribute + fetch + (CHUNKS - 1) * contribute
        if job.kind == "all_gather":
            return store + multicast + (CHUNKS - 1) * max(store, (n - 1) * shard / b)
        period = a_up + (chunk + 2 * shard) / b  # the uplink also carries stores, fair-shared with it
        return contribute + fetch + store + multicast + (CHUNKS - 1) * period


NVLS = register(Nvls())
