"""Host memory: arrays offloaded from a chip's HBM to its host's DRAM over PCIe, and reloaded, as events.

A topology with hosts (``"torus:4x4+hosts:4"``, or `topologies.with_hosts`) gives every chip a host and
a full-duplex ``"pcie"`` link to it. `HostMemory` adds, per host, its DRAM: a capacity pool
(`MemoryPool`, the offloaded bytes held over time) and a bandwidth channel (``"host memory"``) that
every chip of the host shares.

Timing (one line): an offload of V bytes streams over the chip's PCIe link into host DRAM at once, so
it takes ``max(latency + V / b_pcie, V / b_dram_share)`` -- on its own, the PCIe term (about 16 GB/s a
chip against some 200 GB/s of DRAM) -- and the chips of one host that offload together share its DRAM;
a reload is the same the other way, and frees the host bytes when it lands. Both use only the link and
DRAM, never the chip's compute units, so they overlap compute (scenarios/host_offload.py).
"""
from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

import simpy

from simulator.engine.channel import Channel
from simulator.engine.memory import Allocation, MemoryPool
from simulator.errors import PodsimError
from simulator.units import check_bytes

if TYPE_CHECKING:  # annotations only: no import at run time (and no cycle)
    from simulator.engine.system import System

DEFAULT_HOST_MEMORY_BYTES = 2**40
"""Host DRAM per host (bytes) when the topology does not say (``memory_bytes`` on the host node): an
assumption (TPU hosts hold hundreds of GiB, a DGX H100 2 TiB)."""

DEFAULT_HOST_MEMORY_BANDWIDTH_BYTES_PER_S = 2e11
"""Host DRAM bandwidth per host (bytes/s) when the topology does not say (``memory_bandwidth_bytes_per_s``):
an assumption, about what 8 channels of DDR5 deliver."""

HOSTS_HINT = ("add hosts to the topology spec with '+hosts:H' (H chips per host, e.g. 'torus:4x4+hosts:4' or "
              "'nodes:2:8+hosts:8'), or build the graph with topologies.with_hosts(graph, H)")


class HostTransferError(PodsimError):
    """A host transfer that cannot happen (no hosts, more bytes reloaded than offloaded, ...)."""


class HostMemory:
    """The hosts of ``system``'s topology: their DRAM pools and channels, and the bytes each chip holds there."""

    def __init__(self, system: System) -> None:
        graph = system.graph
        hosts = [] if graph is None else [(h, d) for h, d in graph.nodes(data=True) if d.get("role") == "host"]
        if not hosts:
            spec = None if graph is None else graph.graph.get("spec", graph.graph.get("kind"))
            raise HostTransferError(f"offload and reload need a topology with hosts; this one ({spec!r}) has none: "
                                    f"{HOSTS_HINT}")
        self.system, self.env = system, system.env
        assert system.network is not None  # a graph with hosts: the system has a network
        self.network = system.network
        self.host_of: dict[Any, Any] = {chip: h for h, d in hosts for chip in d.get("chips", ())}
        self.pools: dict[Any, MemoryPool] = {}
        self.dram: dict[Any, Channel] = {}
        for h, d in hosts:
            self.pools[h] = MemoryPool(self.env, "host memory", d.get("memory_bytes", DEFAULT_HOST_MEMORY_BYTES),
                                       chip=h)
            self.dram[h] = Channel(self.env, "host memory", d.get("memory_bandwidth_bytes_per_s",
                                                                   DEFAULT_HOST_MEMORY_BANDWIDTH_BYTES_PER_S),
                                   chip=h, trace=system.trace)
            system.trace.add_pool(self.pools[h])
        self.held: dict[Any, deque[_Held]] = {chip: deque() for chip in self.host_of}

    def host(self, chip: Any) -> Any:
        """The host that owns ``chip``."""
        if chip not in self.host_of:
            raise HostTransferError(f"chip {chip!r} has no host; chips with hosts: "
                                    f"{_span(sorted(self.host_of, key=str))}")
        return self.host_of[chip]

    def held_bytes(self, chip: Any) -> float:
        """Bytes ``chip`` has offloaded and not reloaded."""
        self.host(chip)
        return sum(entry.unclaimed for entry in self.held[chip])

    def offload(self, chip: Any, nbytes: float, label: str = "offload") -> simpy.Event:
        """Copy ``nbytes`` from ``chip`` to its host's memory; the event fires (value: the time) when they
        have landed there. The host bytes stay held until `reload` brings them back."""
        host = self.host(chip)
        check_bytes(nbytes, name=f"{label} nbytes")
        self.pools[host].check_fits(float(nbytes), label)
        return self.env.process(self._offload(chip, host, float(nbytes), label))

    def place(self, chip: Any, nbytes: float, label: str = "host array") -> simpy.Event:
        """Put ``nbytes`` of ``chip``'s in its host's memory without a transfer: an array that starts there (read
        from disk, or offloaded before the run), for `reload` to bring over PCIe. The event fires (value: the
        time) once the host's pool holds them."""
        host = self.host(chip)
        check_bytes(nbytes, name=f"{label} nbytes")
        self.pools[host].check_fits(float(nbytes), label)
        return self.env.process(self._place(chip, host, float(nbytes), label))

    def _place(self, chip: Any, host: Any, nbytes: float, label: str) -> Any:
        allocation = yield self.pools[host].allocate(nbytes, label)
        self.held[chip].append(_Held(allocation, nbytes))
        return self.env.now

    def reload(self, chip: Any, nbytes: float, label: str = "reload") -> simpy.Event:
        """Copy ``nbytes`` that ``chip`` offloaded back from its host (oldest first); the event fires (value:
        the time) when they are in HBM again. Host bytes are freed when the whole offload they came with is
        back (a partly reloaded offload keeps its host bytes)."""
        host = self.host(chip)
        check_bytes(nbytes, name=f"{label} nbytes")
        held = self.held_bytes(chip)
        if nbytes > held * (1 + 1e-12):
            raise HostTransferError(f"reload of {nbytes:.0f} bytes on chip {chip!r} is more than the {held:.0f} "
                                    f"bytes it has offloaded to {host}; reload at most what was offloaded")
        taken, left = [], float(nbytes)  # claim the bytes now: a second reload cannot take them again
        while left > 1e-9 * nbytes and self.held[chip]:
            entry = self.held[chip][0]
            take = min(entry.unclaimed, left)
            entry.unclaimed -= take
            entry.in_flight += 1
            left -= take
            taken.append(entry)
            if entry.unclaimed <= 1e-12 * entry.allocation.nbytes:
                entry.unclaimed = 0.0
                self.held[chip].popleft()
        return self.env.process(self._reload(chip, host, float(nbytes), label, taken))

    def _offload(self, chip: Any, host: Any, nbytes: float, label: str) -> Any:
        allocation = yield self.pools[host].allocate(nbytes, label)
        yield simpy.AllOf(self.env, [self.network.hop(chip, host, nbytes, label),
                                     self.dram[host].transfer(nbytes, label, "write")])
        self.held[chip].append(_Held(allocation, nbytes))
        return self.env.now

    def _reload(self, chip: Any, host: Any, nbytes: float, label: str, taken: list[_Held]) -> Any:
        yield simpy.AllOf(self.env, [self.dram[host].transfer(nbytes, label, "read"),
                                     self.network.hop(host, chip, nbytes, label)])
        for entry in taken:
            entry.in_flight -= 1
            if entry.unclaimed == 0.0 and entry.in_flight == 0:  # the whole offload is back: free its bytes
                entry.allocation.pool.free(entry.allocation)
        return self.env.now


class _Held:
    """One offload's host bytes: those no reload has claimed yet, and the reloads of it still in flight."""

    def __init__(self, allocation: Allocation, nbytes: float) -> None:
        self.allocation, self.unclaimed, self.in_flight = allocation, nbytes, 0


def _span(chips: list[Any]) -> str:
    return ", ".join(map(str, chips[:8])) + (f", ... ({len(chips)} in all)" if len(chips) > 8 else "")
