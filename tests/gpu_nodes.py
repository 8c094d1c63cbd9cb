"""Link figures of GPU node systems (`nodes:K:G`) that hand-derived closed forms in the tests start from."""
from __future__ import annotations

from simulator import System


def node_links(system: System) -> tuple[float, float, float, float]:
    """(NVLink GPU-to-GPU latency s, NVLink bandwidth B/s, InfiniBand NIC-to-NIC latency s, NIC bandwidth B/s):
    each latency counts both hops through the switch."""
    g = system.network.graph
    nv, ib = g.edges[0, "sw0"], g.edges[0, "ib0"]
    return 2 * nv["latency_s"], nv["bandwidth_bytes_per_s"], 2 * ib["latency_s"], ib["bandwidth_bytes_per_s"]
