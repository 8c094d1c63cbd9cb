"""Pure functions that build NetworkX graphs of chips and links (depends on networkx only).

Graph contract: chips are ints ``0..n-1`` in row-major order of ``coord`` with ``role="chip"``;
switches and hosts are strings (``"sw0"``, ``"dcn0"``, ``"ib0"``, ``"host0"``) with ``role="switch"`` or
``role="host"``. Every link direction is one edge with ``bandwidth_bytes_per_s`` (one-way, bytes/s),
``latency_s`` (s) and ``kind``; torus-like edges add ``axis``, ``direction`` (+1/-1) and ``wrap``.
``G.graph`` holds ``kind``, ``shape``, ``wrap`` (effective, per axis) and, from specs, ``spec``.

Examples
--------
>>> import topologies
>>> G = topologies.parse_spec("torus:4x4x4")
>>> len(topologies.chips(G)), topologies.num_links(G), topologies.axis_ring(G, 0, 2)
(64, 192, [0, 1, 2, 3])
"""

from topologies.errors import TopologyError
from topologies.fattree import fattree, superpod
from topologies.hosts import with_hosts
from topologies.multilevel import multislice, nodes
from topologies.query import axis_ring, chips, coord_to_node, num_links
from topologies.slices import slice_wrap, tpu_slice
from topologies.spec import VALID_FORMS, parse_spec
from topologies.switch import switch
from topologies.torus import line, mesh, ring, torus
from topologies.validate import LINK_KINDS, MAX_CHIPS

__all__ = [
    "LINK_KINDS",
    "MAX_CHIPS",
    "VALID_FORMS",
    "TopologyError",
    "axis_ring",
    "chips",
    "coord_to_node",
    "fattree",
    "line",
    "mesh",
    "multislice",
    "nodes",
    "num_links",
    "parse_spec",
    "ring",
    "slice_wrap",
    "superpod",
    "switch",
    "torus",
    "tpu_slice",
    "with_hosts",
]
