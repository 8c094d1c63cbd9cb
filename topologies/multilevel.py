"""Two-level systems: TPU slices joined over DCN, and GPU nodes joined over InfiniBand.

Chip ids stay ``0..n-1`` across the whole system, in row-major order of global coordinates
``(group, *local_coord)``; every chip also carries ``group`` (slice or node index) and ``local_coord``.
``graph["shape"]`` is ``(n_groups, *group_shape)`` and edge ``axis`` values index that global shape,
so ``axis_ring(G, chip, 0)`` lists the chips that share a local coordinate across groups.

Model of the second level (timing assumption: each chip's uplink is the only bottleneck):

- multislice: every chip has one full-duplex link (kind ``"dcn"``) to a single data-centre-network
  switch ``"dcn0"``, carrying that chip's DCN egress (REFERENCE.md: v5e 3.125e9, v5p 6.25e9, v6e 1.25e10
  B/s). The DCN itself is non-blocking; a chip-to-chip DCN crossing costs ``2 * dcn_latency_s``.
- nodes: each node is one non-blocking NVLink switch ``"sw<k>"`` linking its GPUs (kind ``"nvlink"``);
  each GPU also has one NIC link (kind ``"ib"``) to one fabric switch ``"ib0"``. A non-blocking fat tree
  (REFERENCE.md: 50e9 B/s per GPU NIC, 8 NICs per node) is modelled as that single switch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import networkx as nx

from topologies.links import Link, add_link
from topologies.slices import plan_slice
from topologies.switch import DEFAULT_NVLINK_BANDWIDTH_BYTES_PER_S, DEFAULT_NVLINK_LATENCY_S
from topologies.torus import DEFAULT_ICI_BANDWIDTH_BYTES_PER_S, DEFAULT_ICI_LATENCY_S, add_grid
from topologies.validate import check_count, check_shape, check_size, format_shape

DEFAULT_DCN_BANDWIDTH_BYTES_PER_S = 6.25e9
"""Per-chip DCN egress each way (bytes/s): tpu-v5p (REFERENCE.md)."""

DEFAULT_DCN_LATENCY_S = 1e-5
"""Latency of one chip-to-DCN traversal (s); an assumption (data-centre networks are tens of µs)."""

DEFAULT_IB_BANDWIDTH_BYTES_PER_S = 5e10
"""Per-GPU InfiniBand NDR NIC bandwidth each way (bytes/s) (REFERENCE.md)."""

DEFAULT_IB_LATENCY_S = 2.5e-6
"""Latency of one GPU-to-fabric traversal (s); an assumption, so a node-to-node crossing costs 5 µs."""


def multislice(
    n_slices: int,
    slice_shape: Sequence[int],
    chip_or_rule: object,
    *,
    dcn_bandwidth_bytes_per_s: float | None = None,
    dcn_latency_s: float = DEFAULT_DCN_LATENCY_S,
    bandwidth_bytes_per_s: float = DEFAULT_ICI_BANDWIDTH_BYTES_PER_S,
    latency_s: float = DEFAULT_ICI_LATENCY_S,
) -> nx.DiGraph:
    """Build ``n_slices`` identical TPU slices joined over DCN (see the module docstring).

    Parameters
    ----------
    n_slices : int
        Number of slices, >= 1.
    slice_shape : sequence of int
        Shape of each slice; its wraparound follows the chip's rule (see `tpu_slice`).
    chip_or_rule : object or str
        A chip object (its ICI numbers and ``dcn_bandwidth_bytes_per_s`` are used) or a rule string.
    dcn_bandwidth_bytes_per_s : float or None
        Per-chip DCN egress each way (bytes/s). None: the chip's own figure, else 6.25e9 (v5p).
    dcn_latency_s : float
        Latency of one chip-to-DCN traversal (seconds).
    bandwidth_bytes_per_s, latency_s : float
        ICI link parameters used when ``chip_or_rule`` is a rule string.

    Returns
    -------
    networkx.DiGraph
        ``graph["kind"] == "multislice"``, ``graph["shape"] == (n_slices, *slice_shape)``,
        ``graph["wrap"] == (False, *slice_wrap)``, plus ``n_slices`` and ``slice_shape``.

    Examples
    --------
    >>> G = multislice(2, (16, 16), "length16")
    >>> G.number_of_nodes(), G.graph["shape"], G.graph["wrap"]
    (513, (2, 16, 16), (False, True, True))
    """
    count = check_count(n_slices, "multislice slice count")
    axes = check_shape(slice_shape, "multislice slice shape")
    check_size(count * math.prod(axes), f"multislice of {count} x {format_shape(axes)!r}")
    plan = plan_slice(
        axes, chip_or_rule, bandwidth_bytes_per_s=bandwidth_bytes_per_s, latency_s=latency_s, kind="ici"
    )
    dcn = Link(
        bandwidth_bytes_per_s=_dcn_bandwidth(chip_or_rule, dcn_bandwidth_bytes_per_s),
        latency_s=dcn_latency_s,
        kind="dcn",
    )
    G = nx.DiGraph(
        kind="multislice",
        shape=(count, *axes),
        wrap=(False, *plan.wrap),
        n_slices=count,
        slice_shape=axes,
        slice_rule=plan.rule,
        chip=plan.chip_name,
    )
    for s in range(count):
        add_grid(G, axes, plan.wrap, plan.link, prefix=(s,))
    _attach_all(G, "dcn0", dcn)
    return G


DEFAULT_POD_OVERSUBSCRIPTION = 4.0
"""How much less a pod's link to the core carries than its chips' DCN links together (an assumption: data-centre
spines above a pod are commonly oversubscribed 2:1 to 4:1; no TPU figure is published)."""


def multipod(
    n_pods: int,
    slices_per_pod: int,
    slice_shape: Sequence[int],
    chip_or_rule: object,
    *,
    dcn_bandwidth_bytes_per_s: float | None = None,
    pod_bandwidth_bytes_per_s: float | None = None,
    dcn_latency_s: float = DEFAULT_DCN_LATENCY_S,
    pod_latency_s: float = DEFAULT_DCN_LATENCY_S,
) -> nx.DiGraph:
    """Build ``n_pods`` pods of ``slices_per_pod`` slices each: a third, slower tier above `multislice`.

    Every chip links (kind ``"dcn"``) to its pod's DCN switch ``"dcn<p>"``, as in `multislice`; every pod
    switch links (kind ``"dcn"``) to one core switch ``"core"`` by a link that carries ``pod_bandwidth`` per
    chip of the pod, each way. A chip-to-chip crossing inside a pod costs ``2 dcn_latency_s``, between pods
    ``2 (dcn_latency_s + pod_latency_s)``.

    Parameters
    ----------
    n_pods, slices_per_pod : int
        Pods, and slices in each, each >= 1. Slice ``s`` (chip attribute ``group``) is in pod
        ``s // slices_per_pod`` (chip attribute ``pod``).
    slice_shape, chip_or_rule : as for `multislice`.
    dcn_bandwidth_bytes_per_s : float or None
        Per-chip DCN egress each way (bytes/s); None: the chip's own figure, else 6.25e9 (v5p).
    pod_bandwidth_bytes_per_s : float or None
        Each chip's share of its pod's core link, each way (bytes/s); None: the DCN figure over
        `DEFAULT_POD_OVERSUBSCRIPTION`.
    dcn_latency_s, pod_latency_s : float
        Latency of one chip-to-pod-switch and one pod-switch-to-core traversal (seconds).

    Returns
    -------
    networkx.DiGraph
        A `multislice` graph of ``n_pods * slices_per_pod`` slices (``graph["kind"] == "multislice"``),
        plus ``graph["pods"]``, ``graph["slices_per_pod"]`` and ``graph["pod_bandwidth_bytes_per_s"]``.

    Examples
    --------
    >>> G = multipod(2, 2, (2, 2), "length16", dcn_bandwidth_bytes_per_s=4e9)
    >>> G.graph["shape"], G.graph["pods"], G.nodes[9]["pod"], G.edges["dcn1", "core"]["bandwidth_bytes_per_s"]
    ((4, 2, 2), 2, 1, 8000000000.0)
    """
    pods = check_count(n_pods, "multipod pod count")
    per_pod = check_count(slices_per_pod, "multipod slices per pod")
    G = multislice(pods * per_pod, slice_shape, chip_or_rule, dcn_bandwidth_bytes_per_s=dcn_bandwidth_bytes_per_s,
                   dcn_latency_s=dcn_latency_s)
    dcn_bw = G.edges[0, "dcn0"]["bandwidth_bytes_per_s"]
    share = dcn_bw / DEFAULT_POD_OVERSUBSCRIPTION if pod_bandwidth_bytes_per_s is None else pod_bandwidth_bytes_per_s
    chips_per_pod = per_pod * math.prod(G.graph["slice_shape"])
    dcn = Link(bandwidth_bytes_per_s=dcn_bw, latency_s=dcn_latency_s, kind="dcn")
    core = Link(bandwidth_bytes_per_s=chips_per_pod * share, latency_s=pod_latency_s, kind="dcn")
    G.remove_node("dcn0")
    G.graph.update(pods=pods, slices_per_pod=per_pod, pod_bandwidth_bytes_per_s=share)
    chips = sorted(v for v, role in G.nodes(data="role") if role == "chip")
    for p in range(pods):
        G.add_node(f"dcn{p}", role="switch", pod=p)
    for v in chips:  # chips' own links first: the first "dcn" edge is a chip's
        G.nodes[v]["pod"] = G.nodes[v]["group"] // per_pod
        add_link(G, v, f"dcn{G.nodes[v]['pod']}", dcn)
    G.add_node("core", role="switch")
    for p in range(pods):
        add_link(G, f"dcn{p}", "core", core)
    return G


def nodes(
    n_nodes: int,
    gpus_per_node: int,
    *,
    nvlink_bandwidth_bytes_per_s: float = DEFAULT_NVLINK_BANDWIDTH_BYTES_PER_S,
    ib_bandwidth_bytes_per_s: float = DEFAULT_IB_BANDWIDTH_BYTES_PER_S,
    nvlink_latency_s: float = DEFAULT_NVLINK_LATENCY_S,
    ib_latency_s: float = DEFAULT_IB_LATENCY_S,
) -> nx.DiGraph:
    """Build ``n_nodes`` GPU nodes of ``gpus_per_node`` GPUs each, joined by InfiniBand.

    Parameters
    ----------
    n_nodes, gpus_per_node : int
        Number of nodes and GPUs per node, each >= 1.
    nvlink_bandwidth_bytes_per_s : float
        Per-GPU NVLink egress each way inside a node (bytes/s).
    ib_bandwidth_bytes_per_s : float
        Per-GPU NIC bandwidth each way (bytes/s).
    nvlink_latency_s, ib_latency_s : float
        Latency of one GPU-to-switch traversal on each network (seconds).

    Returns
    -------
    networkx.DiGraph
        GPUs ``0..n-1`` with ``coord == (node, gpu)``; switches ``"sw0"..`` (one per node, with
        ``group``) and ``"ib0"``; ``graph["kind"] == "nodes"``, ``graph["shape"] == (n_nodes,
        gpus_per_node)``, ``graph["wrap"] == (False, False)``.

    Examples
    --------
    >>> G = nodes(4, 8)
    >>> len([v for v, r in G.nodes(data="role") if r == "chip"]), G.number_of_edges()
    (32, 128)
    """
    count = check_count(n_nodes, "node count")
    per_node = check_count(gpus_per_node, "GPUs per node")
    check_size(count * per_node, f"nodes:{count}:{per_node}")
    nvlink = Link(
        bandwidth_bytes_per_s=nvlink_bandwidth_bytes_per_s, latency_s=nvlink_latency_s, kind="nvlink"
    )
    ib = Link(bandwidth_bytes_per_s=ib_bandwidth_bytes_per_s, latency_s=ib_latency_s, kind="ib")
    G = nx.DiGraph(
        kind="nodes", shape=(count, per_node), wrap=(False, False), n_nodes=count, gpus_per_node=per_node
    )
    for k in range(count):
        _add_node_group(G, k, per_node, nvlink)
    _attach_all(G, "ib0", ib)
    return G


def _add_node_group(G: nx.DiGraph, k: int, per_node: int, nvlink: Link) -> None:
    for g in range(per_node):
        G.add_node(k * per_node + g, coord=(k, g), role="chip", group=k, local_coord=(g,))
    G.add_node(f"sw{k}", role="switch", group=k)
    for g in range(per_node):
        add_link(G, k * per_node + g, f"sw{k}", nvlink)


def _attach_all(G: nx.DiGraph, hub: str, link: Link) -> None:
    """Give every chip of ``G`` one link pair to the switch ``hub``."""
    members = [v for v, role in G.nodes(data="role") if role == "chip"]
    G.add_node(hub, role="switch")
    for v in members:
        add_link(G, v, hub, link)


def _dcn_bandwidth(chip_or_rule: object, explicit: float | None) -> float:
    if explicit is not None:
        return explicit
    from_chip = getattr(chip_or_rule, "dcn_bandwidth_bytes_per_s", None)
    return DEFAULT_DCN_BANDWIDTH_BYTES_PER_S if from_chip is None else from_chip
