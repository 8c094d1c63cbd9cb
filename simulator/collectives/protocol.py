"""NCCL's protocols -- LL, LL128, Simple -- as a choice the tuner makes per algorithm (calibrated GPU systems).

NCCL moves every collective with one of three protocols, a trade of per-step latency against bandwidth
(NVIDIA/nccl ``src/graph/tuning.cc``; Hu et al., "Demystifying NCCL", arXiv:2507.04786, section 3):

- **LL** (low latency): 8-byte stores of 4 bytes of data and a 4-byte flag, so the receiver polls the
  flag instead of waiting for a memory fence: the lowest latency, half the wire carries flags
  (``efficiency`` 4/8; NCCL's tuner credits LL rings with 1/4 to 1/3 of Simple's bus bandwidth, and
  nccl-tests on 4 x H100 measure 0.43 x Simple at 256 MiB: waynehacking8/nccl-collectives-bench,
  ``results/proto_sweep.txt``);
- **LL128**: 128-byte lines of 120 bytes of data and an 8-byte flag (``efficiency`` 120/128; NCCL's
  tuner uses 0.92, the same measurement 0.92 x Simple), a little more latency than LL;
- **Simple**: large chunks behind memory fences: the full bandwidth, the highest per-step latency.

Per-step latencies are NCCL's own tuning model (``hwLat``, ring, microseconds per step: NVLink LL 0.6,
LL128 1.9, Simple 3.4; network LL 2.7, LL128 4.0, Simple 14.0) plus a base latency per call
(``baseLat``, ring: LL 6.6, LL128 14.0, Simple 8.4). A ring step through a switch crosses two hops
(GPU -> switch -> GPU), so each hop of an NVLink or InfiniBand link costs half a step here.

Model (only the calibrated mode: an ideal link has no protocol, it runs at line rate with its wire
latency, which is Simple's bandwidth without its fences -- nothing else can beat it, so ideal results
carry ``protocol`` None): under protocol p a link of kind k runs at the calibrated fraction of its rate
(`simulator.hardware.calibration`) times ``efficiency``, each hop costs p's hop latency in place of the
topology's default wire latency for k (any latency a link has beyond that default -- a fault's, a slower
cable -- stays on top), and the collective pays p's base latency once before its first byte moves. An
algorithm's calibrated closed form is its own closed form priced on links set so (`priced_view`), plus
that base latency; the simulation runs on channels set the same way (`link_settings`). The tuner prices
every protocol an algorithm can use and keeps the fastest (`calibrated_price`). Algorithms the
calibration fitted apart (NVLS, whose measurements already are NCCL's Simple protocol: NCCL runs NVLS
with Simple only) keep their own fitted links, wire latency and launch, and report ``Simple``.
A ring Broadcast or Reduce pipelines its array in pieces as the protocol forwards it: Simple whole steps at every
hop (`broadcast_piece_bytes`), LL and LL128 each line as it lands over NVLink but whole steps over the network
(`network_step_bytes`: NCCL's proxy posts a step to the NIC once all its lines are in).
Protocols apply where the calibration is a GPU's (it has an ``nvlink`` model); TPU links (ICI, DCN) have
none, and their results carry ``protocol`` None.
"""
from __future__ import annotations

import copy
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from simulator.collectives import nccl_tuner
from simulator.errors import PodsimError
from topologies.multilevel import DEFAULT_IB_LATENCY_S
from topologies.switch import DEFAULT_NVLINK_LATENCY_S

AUTO = "auto"
#: the wire latency a topology gives a healthy link of each kind a protocol re-prices
WIRE_LATENCY_S = {"nvlink": DEFAULT_NVLINK_LATENCY_S, "ib": DEFAULT_IB_LATENCY_S}
US = 1e-6


@dataclass(frozen=True)
class Protocol:
    """One NCCL protocol: payload per wire byte, seconds a hop per link kind, seconds once per call."""

    name: str
    efficiency: float
    hop_latency_s: Mapping[str, float]  #: half of NCCL's ring step latency (a step is GPU -> switch -> GPU)
    launch_s: float  #: NCCL's base latency of a ring call

    def latency(self, kind: str, nominal_s: float) -> float:
        """Seconds a hop of a ``kind`` link whose own latency is ``nominal_s`` costs under this protocol."""
        if kind not in self.hop_latency_s:
            return nominal_s
        return self.hop_latency_s[kind] + max(0.0, nominal_s - WIRE_LATENCY_S[kind])


LL = Protocol("LL", 4 / 8, {"nvlink": 0.6 * US / 2, "ib": 2.7 * US / 2}, 6.6 * US)
LL128 = Protocol("LL128", 120 / 128, {"nvlink": 1.9 * US / 2, "ib": 4.0 * US / 2}, 14.0 * US)
SIMPLE = Protocol("Simple", 1.0, {"nvlink": 3.4 * US / 2, "ib": 14.0 * US / 2}, 8.4 * US)
PROTOCOLS: dict[str, Protocol] = {p.name: p for p in (LL, LL128, SIMPLE)}


def names() -> list[str]:
    """``auto`` and every protocol's name."""
    return [AUTO, *PROTOCOLS]


def check(name: str) -> str:
    """``name`` if it is ``auto`` or a protocol; `PodsimError` listing the valid names otherwise."""
    if name != AUTO and name not in PROTOCOLS:
        raise PodsimError(f"protocol={name!r}; valid: {', '.join(names())}")
    return name


def applies(calibration: Any) -> bool:
    """Whether protocols are a choice here: a calibrated system whose calibration is a GPU's."""
    return calibration is not None and "nvlink" in calibration.links


def fitted_apart(calibration: Any, algorithm: str) -> bool:
    """Whether the calibration fitted ``algorithm`` on its own (its measurements fix its protocol)."""
    return algorithm in calibration.algorithms


def choices(calibration: Any, algorithm: str, asked: str = AUTO) -> list[str]:
    """The protocols the tuner prices for ``algorithm`` (``asked``: one of them, or all of them)."""
    own = [SIMPLE.name] if fitted_apart(calibration, algorithm) else list(PROTOCOLS)
    if asked == AUTO:
        return own
    if asked not in own:
        raise PodsimError(f"protocol {asked!r} cannot run algorithm {algorithm!r}: it was calibrated with "
                          f"{', '.join(own)} only; use protocol='auto' or {', '.join(own)}")
    return [asked]


def link_settings(calibration: Any, nbytes: float, algorithm: str, protocol: str | None) -> tuple[
        Callable[[str], float], Callable[[str, float], float] | None, float]:
    """(fraction of a link's rate by kind, hop latency by (kind, own latency) or None, seconds of launch) for
    ``algorithm`` moving an array of ``nbytes`` with ``protocol`` (None: no protocol, the calibration alone)."""
    if protocol is None or fitted_apart(calibration, algorithm):
        return (lambda kind: calibration.link_fraction(kind, nbytes, algorithm)), None, calibration.launch_s(algorithm)
    p = PROTOCOLS[protocol]
    return (lambda kind: calibration.link_fraction(kind, nbytes, algorithm) * p.efficiency), p.latency, p.launch_s


def priced_view(net: Any, fraction: Callable[[str], float], latency: Callable[[str, float], float] | None) -> Any:
    """A copy of ``net`` whose graph carries the links' rates and latencies under these settings, for closed
    forms (which read links from the graph); it routes as ``net`` does and owns no channels."""
    view = copy.copy(net)
    view.graph = _priced_kept(net.graph, fraction, latency)
    view.routes = net.routes  # the same paths: a protocol changes what a hop costs, not which hops
    return view


#: each network graph's priced copies (`_priced_kept`): (its link kinds, its (kind, latency) pairs, the copies by the
#: settings' values on those); kept while the graph lives, at most `KEPT_PRICED` copies a graph
_PRICED: weakref.WeakKeyDictionary[Any, tuple[tuple[str, ...], tuple[tuple[str, float], ...], dict[tuple, Any]]] = \
    weakref.WeakKeyDictionary()
KEPT_PRICED = 16


def _priced_kept(graph: Any, fraction: Callable[[str], float], latency: Callable[[str, float], float] | None) -> Any:
    """`priced_graph` of ``graph`` under these settings, made once for each distinct set of their values on the
    graph's links (a copy depends on nothing else: every link's rate is its own times ``fraction`` of its kind,
    its latency ``latency`` of its kind and own latency), so that the tuner's many prices of one step's
    collectives (every stage, every protocol, the same sizes) share one copy each. A network's graph is not
    changed once built (faults are written into a copy: `simulator.engine.faults.apply_to_graph`), and the copies
    are read only (closed forms)."""
    kept = _PRICED.get(graph)
    if kept is None:
        kinds: dict[str, None] = {}
        pairs: dict[tuple[str, float], None] = {}
        for _, _, data in graph.edges(data=True):
            kind = data.get("kind", "ici")
            kinds[kind] = None
            if data.get("latency_s") is not None:
                pairs[(kind, data["latency_s"])] = None
        kept = _PRICED[graph] = (tuple(kinds), tuple(pairs), {})
    kinds_of, pairs_of, copies = kept
    key = (tuple(fraction(kind) for kind in kinds_of),
           None if latency is None else tuple(latency(kind, own) for kind, own in pairs_of))
    found = copies.get(key)
    if found is None:
        if len(copies) >= KEPT_PRICED:
            del copies[next(iter(copies))]  # the oldest: bounded memory
        found = copies[key] = priced_graph(graph, fraction, latency)
    return found


def priced_graph(graph: Any, fraction: Callable[[str], float], latency: Callable[[str, float], float] | None) -> Any:
    """A copy of ``graph`` (a networkx graph, directed or not) with every link's ``bandwidth_bytes_per_s`` times
    ``fraction(kind)`` and, with ``latency``, its ``latency_s`` as ``latency(kind, latency_s)``: what
    ``graph.copy()`` and a pass over its edges make, read only. Each link's priced attributes are made when first
    read (`_priced_adjacency`): a closed form reads a group's links, not the tens of thousands of a 16,384-GPU
    fabric, and a tuner prices every collective size of a step on a copy of its own. Each kind's fraction (and each
    kind and latency's latency) is computed once; both ends of a link share one priced copy (as in ``graph``). Node
    and graph attributes are copied one level deep, as ``graph.copy()`` does."""
    new = graph.__class__()
    new.graph.update(graph.graph)
    for n, d in graph._node.items():
        new._node[n] = d.copy()
    factors: dict[str, float] = {}
    latencies: dict[tuple[str, float], float] = {}
    made: dict[int, dict[str, Any]] = {}  #: id of a link's attributes -> its priced copy (both ends share one)

    def priced(data: dict[str, Any]) -> dict[str, Any]:
        out = made.get(id(data))
        if out is None:
            out = made[id(data)] = data.copy()
            kind = data.get("kind", "ici")
            f = factors.get(kind)
            if f is None:
                f = factors[kind] = fraction(kind)
            out["bandwidth_bytes_per_s"] = data["bandwidth_bytes_per_s"] * f
            if latency is not None:
                key = (kind, data["latency_s"])
                value = latencies.get(key)
                if value is None:
                    value = latencies[key] = latency(kind, data["latency_s"])
                out["latency_s"] = value
        return out

    new._adj = _priced_adjacency(graph._adj, priced)  # (a directed graph's ``_adj`` is its ``_succ``: set both)
    if graph.is_directed():
        new._pred = _priced_adjacency(graph._pred, priced)
    return new


class _Lazy(Mapping):
    """A read-only view of ``source`` whose values are ``make(source value)``, each made when first read, then
    kept: a `priced_graph`'s adjacency (``_adj``, ``_succ`` or ``_pred``; node -> a `_Lazy` of its neighbours) and
    each node's neighbours (neighbour -> the link's attributes, priced)."""

    __slots__ = ("_source", "_make", "_kept")

    def __init__(self, source: Mapping[Any, Any], make: Callable[[Any], Any]) -> None:
        self._source, self._make = source, make
        self._kept: dict[Any, Any] = {}

    def __getitem__(self, key: Any) -> Any:
        out = self._kept.get(key)
        if out is None:
            out = self._kept[key] = self._make(self._source[key])
        return out

    def __iter__(self) -> Iterator[Any]:
        return iter(self._source)

    def __len__(self) -> int:
        return len(self._source)

    def __contains__(self, key: object) -> bool:
        return key in self._source


def _priced_adjacency(adj: Mapping[Any, Any], priced: Callable[[dict[str, Any]], dict[str, Any]]) -> _Lazy:
    """A `priced_graph`'s adjacency: node -> its neighbours, each link's attributes ``priced`` when first read."""
    return _Lazy(adj, lambda nbrs: _Lazy(nbrs, priced))


def calibrated_price(calibration: Any, asked: str = AUTO) -> Callable[[Any, Any], tuple[float, str, dict[str, float]]]:
    """A pricing function for `simulator.collectives.tuner.tune`: (algorithm, job) -> (seconds by the calibrated
    closed form with the fastest protocol, that protocol, seconds with each protocol priced)."""
    views: dict[tuple[str, str], Any] = {}

    def price(algorithm: Any, job: Any) -> tuple[float, str, dict[str, float]]:
        times = {}
        for name in choices(calibration, algorithm.name, asked):
            fraction, latency, launch = link_settings(calibration, job.nbytes, algorithm.name, name)
            key = (name, algorithm.name if fitted_apart(calibration, algorithm.name) else "")
            if key not in views:
                views[key] = priced_view(job.net, fraction, latency)
            times[name] = launch + algorithm.closed_form(_pieced(algorithm, _on(job, views[key]),
                                                                 broadcast_piece_bytes(job, name),
                                                                 network_step_bytes(job, name)))
        best = min(times, key=lambda n: (times[n], list(PROTOCOLS).index(n)))
        return times[best], best, times

    return price


#: Bytes of one Simple step (NVIDIA/nccl src/init.cc ``DEFAULT_BUFFSIZE`` 4 MiB over ``NCCL_STEPS`` = 8 slots): a ring
#: broadcast's chunk on one channel (src/device/broadcast.h: ``calcBytePerStep() x BROADCAST_CHUNKSTEPS``, which
#: src/device/collectives.h sets to 1), which a rank receives whole before it forwards it (the step's tail flag).
SIMPLE_STEP_BYTES = 2.0**22 / 8


def broadcast_piece_bytes(job: Any, protocol: str) -> float:
    """Bytes of the pieces one of ``job``'s rings store-and-forwards under ``protocol`` (0: cut-through), for a ring
    Broadcast or Reduce (``REDUCE_CHUNKSTEPS`` is 1 too). Simple: one
    step on each channel of NCCL's ring graph (`nccl_tuner.comm_for`) that the ring stands for, its channels moving
    together -- an H100 node's 12 channels on its one ring (6 MiB pieces); two nodes' 8 channels over their 8 NIC
    rings, one each (512 KiB). LL and LL128 forward each 8- or 128-byte line as its flag lands: 0."""
    if protocol != "Simple" or getattr(job, "kind", None) not in ("broadcast", "reduce"):
        return 0.0
    comm = nccl_tuner.comm_for(job.net, list(job.group.members.values()))
    channels = comm.ring.channels if comm is not None else 1
    return max(1.0, channels / max(1, len(job.rings))) * SIMPLE_STEP_BYTES


#: Data bytes of one LL and one LL128 step, the chunk a ring Broadcast moves per channel (NVIDIA/nccl src/init.cc
#: ``DEFAULT_LL_BUFFSIZE`` = 8 lines x 512 threads x 8 steps x 16 B and ``DEFAULT_LL128_BUFFSIZE`` = 120 x 640 x 8 x
#: 8 B, over ``NCCL_STEPS`` = 8; src/enqueue.cc ``calcCollChunking``: LL halves it (8 of each 16-byte line are flags),
#: LL128 keeps 15 of every 16 words): 32 KiB and 562.5 KiB.
LL_STEP_BYTES = 8 * 512 * 16 / 2
LL128_STEP_BYTES = 120 * 640 * 8 * 15 / 16


def network_step_bytes(job: Any, protocol: str) -> float:
    """Bytes one of ``job``'s rings forwards whole over a network hop under LL or LL128 (0: none): one step on each
    channel the ring stands for, as `broadcast_piece_bytes` counts them. Over NVLink LL and LL128 cut through (the
    receiver polls each line's flag and forwards it); over the network NCCL's proxy posts a step to the NIC only
    once every line of it has landed (src/transport/net.cc ``sendProxyProgress``: LL checks both flags of every
    line, LL128 the step's tail), so a network hop store-and-forwards whole steps. Simple's pieces already are
    steps (0 here). Ring Broadcast and Reduce (the same chain run backwards)."""
    step = {"LL": LL_STEP_BYTES, "LL128": LL128_STEP_BYTES}.get(protocol)
    if step is None or getattr(job, "kind", None) not in ("broadcast", "reduce"):
        return 0.0
    comm = nccl_tuner.comm_for(job.net, list(job.group.members.values()))
    channels = comm.ring.channels if comm is not None else 1
    return max(1.0, channels / max(1, len(job.rings))) * step


def _pieced(algorithm: Any, job: Any, piece_bytes: float = 0.0, step_bytes: float = 0.0) -> Any:
    """``job`` cut into the pieces that pipeline best on its (priced) network (`Algorithm.priced_chunks`), its
    network hops forwarding ``step_bytes`` at once (`network_step_bytes`)."""
    if step_bytes != getattr(job, "net_step_bytes", 0.0):
        job = replace(job, net_step_bytes=step_bytes, cache={})
    pieces = algorithm.priced_chunks(job, piece_bytes)
    if pieces is None or pieces == job.chunks:
        return job
    if hasattr(algorithm, "recut"):  # pieces that are pipeline chunks of whole keys (`nvls_tree`): the algorithm cuts
        return algorithm.recut(replace(job, cache={}), pieces)
    return replace(job, chunks=pieces, key_bytes=job.key_bytes * job.chunks / pieces, cache={})


def protocol_chunks(calibration: Any, algorithm: Any, job: Any, protocol: str) -> int | None:
    """Pieces ``algorithm`` cuts ``job``'s array into under ``protocol`` (as `calibrated_price` priced it), or
    None where it keeps ``job.chunks``."""
    fraction, latency, _ = link_settings(calibration, job.nbytes, algorithm.name, protocol)
    view = _on(job, priced_view(job.net, fraction, latency))
    step = network_step_bytes(job, protocol)
    return algorithm.priced_chunks(replace(view, net_step_bytes=step) if step else view,
                                   broadcast_piece_bytes(job, protocol))


def calibrated_closed_form(calibration: Any, algorithm: Any, job: Any) -> float:
    """Seconds of ``algorithm`` running ``job`` on calibrated links with no NCCL protocol (TPU links): the launch
    latency plus its closed form on ``job``'s network at the calibrated link rates, as a calibrated run sets them."""
    fraction, latency, launch = link_settings(calibration, job.nbytes, algorithm.name, None)
    return float(launch + algorithm.closed_form(_on(job, priced_view(job.net, fraction, latency))))


def _on(job: Any, view: Any) -> Any:
    """``job`` on the network ``view``, with none of the closed-form pieces it kept for its own network."""
    fresh: dict[str, Any] = {"cache": {}} if "cache" in {f.name for f in fields(job)} else {}
    return replace(job, net=view, **fresh)
