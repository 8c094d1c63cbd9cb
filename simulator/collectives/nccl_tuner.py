"""NCCL's own tuning model: which algorithm and protocol stock NCCL picks for a collective (calibrated GPU systems).

NCCL picks an (algorithm, protocol) per call by the smallest ``latency + bytes / bandwidth`` over a table it
builds once per communicator (NVIDIA/nccl ``src/graph/tuning.cc``, ``ncclTopoTuneModel`` and
``ncclTopoGetAlgoTime``; ``src/enqueue.cc``, ``updateCollCostTable`` / ``topoGetAlgoInfo``; transcribed here from
master at commit 5067397c, NCCL 2.28-2.29). This module rebuilds that table from NCCL's constants:

- latency (us): ``baseLat[algo][proto]`` plus ``hwLat`` per step -- Ring ``(nsteps - interSteps) x intraLat +
  interSteps x interLat`` (intra steps at least the network post overhead, 1 us, 3 us for Simple, once the ring
  leaves the node), Tree ``2 ((ppn - 1) intraLat + log2(nNodes) interLat)``, NVLS ``intraLat (+ interLat)`` with no
  base, NVLSTree ``intraLat + 2 log2(nNodes) interLat``; Broadcast/Reduce rings one step (``sameChannels``);
- bandwidth (GB/s): ``nChannels x bw`` of the algorithm's graph (``bwIntra`` up to two nodes, ``bwInter`` beyond),
  then Ring LL ``min(llMaxBw, 0.5 x)``, Ring LL128 ``min(0.92 x, nChannels x perChMaxRingLL128Bw)``, Tree AllReduce
  ``min(0.92 x, nChannels x perChMaxTreeBw)`` then LL ``/3.8`` (at most ``llMaxBw``) or LL128 ``x 7/9`` in one node,
  ``x 120/128`` across nodes (at most ``nChannels x perChMaxTreeLL128Bw``); NVLS/NVLSTree ``bwIntra x
  nvlsEfficiency x (nCh-1)/nCh``, doubled for AllReduce (``x (ppn-1)/ppn`` otherwise), against ``bwInter``
  (doubled for NVLSTree on two nodes) and NVLSTree's ``perChMaxNVLSTreeBw``; then bus to algorithm bandwidth,
  ``x nRanks/nsteps`` (Ring, NVLS, NVLSTree) or ``x 0.5`` (Tree);
- per call: Tree AllReduce bandwidth x ``treeCorrectionFactor[proto][log2(bytes/64)]`` (NVLSTree too on Blackwell
  x86), Ring Simple latency x 1.4 across nodes once ``bytes / (nChannels x nRanks) >= 64`` (the ring's plateau);
- enable rules: NVLS and NVLSTree only where the NVSwitch reduces (H100/H200/B200), Simple only, NVLSTree only
  across nodes, NVLS across nodes only with CollNet; CollNet (Direct, Chain) only with SHARP (a CollNet plug-in);
  LL128 on every NVLink system here; Tree and NVLS* serve AllReduce, NVLS AllGather/ReduceScatter (one node),
  Broadcast and Reduce are Ring only.

What is not NCCL's code but a reduction of it (stated, since NCCL reads it from its topology search,
``src/graph/search.cc``, which podsim does not run): the graph of each algorithm -- channels and per-channel
bandwidth -- comes from `graph`, the search's speed ladder applied to the GPU's NVLink total (links x NCCL's
per-link figure, ``SM80/SM90/SM100_NVLINK_BW``) and one NIC per GPU; the tree graph is taken equal to the ring's
(``treeGraph->maxChannels = ringGraph->nChannels``) with a balanced tree pattern (no 0.85 penalty); the network
latency of a graph (``latencyInter``) is 0 (IB NICs report none); the CPU is x86 Intel (``llMaxBws`` row 0 across
nodes, net overhead 1 us); PAT (AllGather/ReduceScatter with one GPU per node) is left out: podsim has no PAT
plug-in. podsim has no SHARP switches (no topology reduces in the network fabric), so CollNet never applies.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from simulator.errors import PodsimError

ALGOS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree")  #: NCCL's order (PAT left out)
PROTOS = ("LL", "LL128", "Simple")
ARCHS = ("volta", "ampere", "hopper", "blackwell")  #: NCCL's compute-capability index 0..3
#: GPU presets -> (NCCL arch, compute capability, NVLink bandwidth of one link each way, spec bytes/s)
CHIPS = {"a100": ("ampere", 80, 25e9), "h100": ("hopper", 90, 25e9), "h200": ("hopper", 90, 25e9),
         "b200": ("blackwell", 100, 50e9)}
NVLINK_BW = {"ampere": 20.0, "hopper": 20.6, "blackwell": 40.1}  #: NCCL's GB/s per NVLink (topo.h)
NVLS_CHIPS = ("h100", "h200", "b200")
#: podsim's plug-in for each NCCL algorithm (None: podsim has none; CollNet needs SHARP, which podsim lacks)
PLUGINS = {"Ring": "unidirectional", "Tree": "double_binary_tree", "NVLS": "nvls", "NVLSTree": "nvls_tree",
           "CollNetDirect": None, "CollNetChain": None}
#: kinds NCCL runs as point-to-point sends (no tuner): podsim's plug-ins that move data the same way
P2P = {"all_to_all": ("direct",), "gather": ("root_direct",), "scatter": ("root_direct",)}
NO_SHARP = "podsim has no SHARP (in-network reduction) switches, so NCCL's CollNet algorithms never apply"

# tuning.cc's tables, [algo][proto] in ALGOS x PROTOS order (us, GB/s)
BASE_LAT = {"Tree": (6.8, 14.0, 8.4), "Ring": (6.6, 14.0, 8.4), "CollNetDirect": (0, 0, 0),
            "CollNetChain": (0, 0, 0), "NVLS": (0, 0, 0), "NVLSTree": (0, 0, 0)}
HW_LAT = {"nvlink": {"Tree": (0.6, 1.25, 4.0), "Ring": (0.6, 1.9, 3.4), "CollNetDirect": (0, 0, 3.7),
                     "CollNetChain": (0, 0, 2.8), "NVLS": (0, 0, 25), "NVLSTree": (0, 0, 25)},
          "net": {"Tree": (5.0, 8.5, 14), "Ring": (2.7, 4.0, 14.0), "CollNetDirect": (0, 0, 31),
                  "CollNetChain": (0, 0, 30), "NVLS": (0, 0, 18), "NVLSTree": (0, 0, 20.9)}}
LL_MAX_BW = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0), (282.0, 90.0, 70.0))  #: [index1][index2]
PER_CH_RING_LL128 = ((20.0,) * 3, (20.0,) * 3, (36.7,) * 3, (40.0,) * 3)  #: [arch][index2]
PER_CH_TREE_LL128 = ((20.0,) * 3, (20.0,) * 3, (36.7, 36.7, 29.0), (55.6, 31.67, 20.0))
PER_CH_TREE = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0), (70.0, 42.8, 24.0))
PER_CH_NVLS_TREE = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (0.0, 57.7, 45.5), (0.0, 96.0, 80.0))
NVLS_EFFICIENCY = (0.0, 0.0, 0.85, 0.74)
TREE_CORRECTION = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9)}
NET_OVERHEAD_US = 1.0  #: getNetOverhead on x86 Intel (x 3 for Simple)
# search.cc's speed ladders (GB/s per channel), intra-node and inter-node, by arch
SPEEDS_INTRA = {"ampere": (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0),
                "hopper": (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0),
                "blackwell": (90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0)}
SPEEDS_INTER = {"ampere": (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0,
                           2.4, 1.2, 0.24, 0.12),
                "hopper": (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2,
                           0.24, 0.12),
                "blackwell": (96.0, 86.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0,
                              6.0, 3.0, 2.4, 1.2, 0.24, 0.12)}
MAX_CHANNELS = 64  #: MAXCHANNELS; a ring graph searches up to half of it


@dataclass(frozen=True)
class Graph:
    """One algorithm's channels as NCCL's search leaves them: count and GB/s per channel inside / across nodes."""

    channels: int
    bw_intra: float
    bw_inter: float


@dataclass(frozen=True)
class Comm:
    """What NCCL's tuner reads of a communicator: architecture, ranks, nodes, graphs, NVLS and CollNet support."""

    arch: str
    cc: int
    n_ranks: int
    n_nodes: int
    ring: Graph
    nvls: Graph | None  #: None: no NVLS (not an NVLS switch, or fewer than 2 channels)
    collnet: bool = False  #: SHARP present (never in podsim)

    @property
    def ppn(self) -> float:
        return self.n_ranks / self.n_nodes


def _search(speeds: tuple[float, ...], capacity: Any, max_bw: float, max_channels: int, total: float,
            ring: bool, cc: int) -> Graph | None:
    """search.cc's ladder, reduced: the first speed at most ``max_bw``, then lower ones while within .49 of the best,
    keeping the most ``channels x speed`` (``capacity(s)``: channels that fit at speed s); channels doubled (per
    channel bandwidth halved) by ``ncclTopoDupChannels``; then higher speeds at that channel count (pass 2)."""
    i = next((k for k, s in enumerate(speeds) if s <= max_bw), len(speeds) - 1)
    best: tuple[int, float] | None = None
    while i < len(speeds):
        s = speeds[i]
        c = min(max_channels, capacity(s))
        if c >= 1 and (best is None or c * s > best[0] * best[1]):
            best = (c, s)
        if best is not None and (best[0] == max_channels or best[0] * best[1] >= total):
            break
        if best is not None and (i + 1 >= len(speeds) or speeds[i + 1] / best[1] <= .49):
            break
        i += 1
    if best is None:
        return None
    c, s = best
    if ring and s >= 25.0 and not (cc > 80 and s < 50.0 and c > 4):
        doubled = min(2 * c, max_channels)
        s, c = s / math.ceil(doubled / c), doubled
    k = next((k for k, v in enumerate(speeds) if v <= s), len(speeds) - 1)
    while ring and k > 0 and speeds[k - 1] <= max_bw and min(max_channels, capacity(speeds[k - 1])) >= c:
        k -= 1  # pass 2: faster channels, as many of them
        s = speeds[k]
    return Graph(c, s, s)


def graph(arch: str, cc: int, nvlink_gb_per_s: float, n_nodes: int, ppn: int, nic_gb_per_s: float,
          nvls: bool = False) -> Graph | None:
    """The ring (``nvls``: NVLS) graph of a communicator of ``n_nodes`` nodes of ``ppn`` GPUs, each GPU with
    ``nvlink_gb_per_s`` of NVLink (NCCL's units: links x per-link GB/s) and, across nodes, one NIC of
    ``nic_gb_per_s`` (see the module docstring: a reduction of search.cc, not the search)."""
    speeds = (SPEEDS_INTRA if n_nodes == 1 else SPEEDS_INTER)[arch]
    inter = n_nodes > 1
    if nvls:  # pattern NVLS: up to min(32, GPUs) channels, all of them in one node; non-ring totals x n/(n-1)
        total = nvlink_gb_per_s * ppn / (ppn - 1)
        max_channels, need = min(32, ppn), min(32, ppn) if not inter else 2
    else:
        total, max_channels, need = nvlink_gb_per_s, MAX_CHANNELS // 2, 1
    max_bw = min(nvlink_gb_per_s, nic_gb_per_s) if inter else nvlink_gb_per_s

    def capacity(s: float) -> int:
        c = math.floor(total / s + 1e-9)
        if inter:
            c = min(c, ppn * math.floor(nic_gb_per_s / s + 1e-9))
        return c if c >= need else 0

    return _search(speeds, capacity, max_bw, max_channels, total, not nvls, cc)


def comm_for(net: Any, members: list[Any]) -> Comm | None:
    """The `Comm` of a group of chips on ``net`` (None: not a GPU NCCL would tune here)."""
    chip = getattr(net.chip, "name", None)
    if chip not in CHIPS:
        return None
    arch, cc, link_rate = CHIPS[chip]
    nodes = {net.graph.nodes[m].get("group", 0) for m in members}
    n_nodes, n_ranks = len(nodes), len(members)
    if n_ranks % n_nodes:
        raise PodsimError(f"a group of {n_ranks} GPUs over {n_nodes} nodes is uneven; NCCL's tuner needs as many "
                          f"GPUs on every node")
    ppn = n_ranks // n_nodes
    rates = {d.get("kind"): d["bandwidth_bytes_per_s"] for _, _, d in net.graph.out_edges(members[0], data=True)}
    nvlink = rates.get("nvlink", 0.0) / link_rate * NVLINK_BW[arch]
    nic = rates.get("ib", 0.0) / 1e9
    ring = graph(arch, cc, nvlink, n_nodes, ppn, nic)
    if ring is None:
        return None
    nvls = None
    if chip in NVLS_CHIPS and ppn > 1:
        nvls = graph(arch, cc, nvlink, n_nodes, ppn, nic, nvls=True)
        nvls = nvls if nvls is not None and nvls.channels >= 2 else None
    return Comm(arch, cc, n_ranks, n_nodes, ring, nvls)


def _enabled(comm: Comm, kind: str, algo: str, proto: str) -> str | None:
    """Why NCCL would not run ``algo`` with ``proto`` for ``kind`` here (None: it can)."""
    if kind in ("broadcast", "reduce") and algo != "Ring":
        return "Broadcast and Reduce run rings only"
    if kind in ("all_gather", "reduce_scatter") and algo not in ("Ring", "NVLS", "CollNetDirect"):
        return "AllGather and ReduceScatter run Ring, NVLS or CollNetDirect"
    if algo.startswith("CollNet"):
        return NO_SHARP
    if algo.startswith("NVLS"):
        if comm.nvls is None:
            return "no NVLink SHARP here (H100/H200/B200 NVSwitch, two or more GPUs of a node)"
        if algo == "NVLSTree" and comm.n_nodes == 1:
            return "NVLSTree is disabled on one node"
        if algo == "NVLS" and comm.n_nodes > 1:
            return "NVLS across nodes needs CollNet (SHARP)"
        if kind != "all_reduce" and comm.n_nodes > 1:
            return "NVLS AllGather/ReduceScatter across nodes needs CollNet"
        if proto != "Simple":
            return "NVLS runs Simple only"
    return None


def _nsteps(kind: str, n: int) -> int:
    return 2 * (n - 1) if kind == "all_reduce" else n - 1 if kind in ("all_gather", "reduce_scatter") else n


def entry(comm: Comm, kind: str, algo: str, proto: str) -> tuple[float, float]:
    """NCCL's (latency us, bandwidth GB/s) for ``algo`` / ``proto`` (tuning.cc, before the per-call corrections)."""
    p = PROTOS.index(proto)
    a_idx = ARCHS.index(comm.arch)
    n, nodes, ppn = comm.n_ranks, comm.n_nodes, comm.ppn
    index2 = nodes - 1 if nodes <= 2 else 2
    ll_max = LL_MAX_BW[a_idx if nodes == 1 else 0][index2]
    g = comm.nvls if algo.startswith("NVLS") else comm.ring
    assert g is not None, f"{algo} on a communicator without its graph (`unsupported` says why)"
    nsteps = _nsteps(kind, n)
    bw = g.bw_intra if nodes <= 2 else g.bw_inter
    if algo.startswith("NVLS"):
        intra = g.bw_intra * NVLS_EFFICIENCY[a_idx] * (g.channels - 1) / g.channels
        intra *= 2.0 if kind == "all_reduce" else (ppn - 1) / ppn
        inter = g.bw_inter * (2 if nodes <= 2 and algo == "NVLSTree" else 1)
        bw = min(intra, inter, PER_CH_NVLS_TREE[a_idx][index2] if algo == "NVLSTree" else math.inf)
    bus = g.channels * bw
    if algo == "Ring" and proto == "LL":
        bus = min(ll_max, bus * .5)
    if algo == "Ring" and proto == "LL128":
        bus = min(bus * .92, g.channels * PER_CH_RING_LL128[a_idx][index2])
    if algo == "Tree" and kind == "all_reduce":
        bus = min(bus * .92, g.channels * PER_CH_TREE[a_idx][index2])
    if algo == "Tree" and proto == "LL":
        bus = min(bus / 3.8, ll_max)
    if algo == "Tree" and proto == "LL128":
        bus = min(bus * (7 / 9 if nodes == 1 else 120 / 128), g.channels * PER_CH_TREE_LL128[a_idx][index2])
    if not (algo != "Ring" and kind in ("all_gather", "reduce_scatter")):
        bus *= n / nsteps if algo in ("Ring", "NVLS", "NVLSTree") else .5
    intra_lat = HW_LAT["nvlink"][algo][p]
    inter_lat = HW_LAT["net"]["Tree" if ppn == 1 else algo][p]
    lat = BASE_LAT[algo][p]
    if algo == "Ring":
        hw_lat = HW_LAT["nvlink" if nodes == 1 else "net"]["Ring"][p]
        if kind in ("broadcast", "reduce"):
            lat += hw_lat  # sameChannels rings
        else:
            overhead = 0.0 if nodes == 1 else NET_OVERHEAD_US * (3 if proto == "Simple" else 1)
            inter_steps = 0 if nodes == 1 else 2 * (nodes - 1) if kind == "all_reduce" else nodes - 1
            lat += (nsteps - inter_steps) * max(intra_lat, overhead) + inter_steps * inter_lat
    elif algo == "Tree":
        lat += 2 * ((n // nodes - 1) * intra_lat + int(math.log2(nodes)) * inter_lat) if kind == "all_reduce" else 0
    elif algo == "NVLS":
        lat = intra_lat + (inter_lat if nodes > 1 else 0)
    elif algo == "NVLSTree":
        lat += intra_lat + 2 * int(math.log2(nodes)) * inter_lat
    return lat, bus


def time_us(comm: Comm, kind: str, algo: str, proto: str, nbytes: float) -> float:
    """``ncclTopoGetAlgoTime``: latency + bytes / (1000 x bandwidth) in us, one call (no aggregation)."""
    lat, bw = entry(comm, kind, algo, proto)
    log_size = int(math.log2(int(nbytes) >> 6)) if int(nbytes) >> 6 > 0 else -1
    if kind == "all_reduce" and 0 <= log_size < 23 and (
            algo == "Tree" or algo == "NVLSTree" and comm.cc >= 100 and log_size < 24):
        bw *= TREE_CORRECTION[proto][log_size]
    if algo == "Ring" and proto == "Simple" and comm.n_nodes > 1 and kind == "all_reduce" \
            and nbytes / (min(MAX_CHANNELS, 2 * comm.ring.channels) * comm.n_ranks) >= 64:
        lat *= 1.4  # the ring's plateau (compute capability 80 and up)
    return lat + nbytes / (1000 * bw)


def table(comm: Comm, kind: str, nbytes: float, protocol: str = "auto") -> tuple[dict[tuple[str, str], float],
                                                                             dict[str, str]]:
    """Every enabled (algorithm, protocol)'s NCCL time in seconds (``protocol``: only that one, as NCCL_PROTO),
    and why each disabled algorithm is off."""
    times, off = {}, {}
    for algo in ALGOS:
        why = None
        for proto in PROTOS if protocol == "auto" else (protocol,):
            why = _enabled(comm, kind, algo, proto)
            if why is None:
                times[(algo, proto)] = time_us(comm, kind, algo, proto, nbytes) * 1e-6
        if not any(a == algo for a, _ in times):
            off[algo] = why or "disabled"
    return times, off


def pick(times: dict[tuple[str, str], float]) -> tuple[str, str]:
    """topoGetAlgoInfo: the smallest time, the first in NCCL's (algorithm, protocol) order on ties."""
    order = [(a, p) for a in ALGOS for p in PROTOS]
    return min(times, key=lambda k: (times[k], order.index(k)))


def label(plugin: str) -> dict[str, Any]:
    """How an alternative relates to stock NCCL: ``nccl`` (True: NCCL runs the same algorithm) and ``source``."""
    for algo, name in PLUGINS.items():
        if name == plugin:
            return {"nccl": True, "source": f"NCCL {algo}"}
    if any(plugin in names for names in P2P.values()):
        return {"nccl": True, "source": "NCCL point-to-point (ncclSend/ncclRecv)"}
    return {"nccl": False, "source": "custom kernel"}


def _size(nbytes: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.4g} {unit}"
    return f"{nbytes:.0f} B"


#: a protocol podsim forecasts faster than NCCL's pick by more than this share is named beside the pick
FORECAST_MARGIN = 0.05


def _forecast_faster(protocols: dict[str, float], picked: str) -> dict[str, Any]:
    """``{"forecast_faster": {"protocol", "time_s", "picked_time_s"}}`` where podsim's calibrated closed form
    (a **forecast**, seconds) puts another protocol more than `FORECAST_MARGIN` below NCCL's pick; else empty. NCCL's
    pick still runs (issue 27: auto is what stock NCCL runs); this only says what ``--protocol`` would gain."""
    if picked not in protocols:
        return {}
    best = min(protocols, key=lambda q: protocols[q])
    if best == picked or protocols[best] >= (1 - FORECAST_MARGIN) * protocols[picked]:
        return {}
    return {"forecast_faster": {"protocol": best, "time_s": protocols[best], "picked_time_s": protocols[picked]}}


def _faster_note(faster: dict[str, Any], picked: str) -> str:
    """The reason's clause for `_forecast_faster` (empty where NCCL's pick is podsim's fastest too)."""
    if not faster:
        return ""
    f = faster["forecast_faster"]
    return (f"; podsim forecasts {f['protocol']} faster here ({f['time_s'] * 1e6:.1f} us against "
            f"{picked}'s {f['picked_time_s'] * 1e6:.1f} us, calibrated closed form; --protocol {f['protocol']} "
            f"runs it)")


def decide(comm: Comm, kind: str, nbytes: float, asked: str, name: str,
           priced: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """NCCL's choice for ``kind`` of ``nbytes`` (``name``: ``auto`` or the algorithm asked for) among the podsim
    plug-ins ``priced`` (name -> its calibrated ``protocol`` and ``protocols``): see `simulator.collectives.tuner`."""
    where = (f"{_size(nbytes)} on {comm.n_nodes} node(s) x {comm.n_ranks // comm.n_nodes} GPUs, NVLS "
             f"{'available' if comm.nvls is not None else 'not available'}, no SHARP")
    fastest = {p: min(v["protocols"], key=v["protocols"].get) for p, v in priced.items()}
    if kind in P2P or kind not in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce"):
        own = [p for p in P2P.get(kind, ()) if p in priced]
        pool = own if name == "auto" else [name]
        if not pool:
            return {"plugin": None, "reason": f"NCCL runs {kind} as point-to-point sends; no podsim plug-in that "
                                              f"moves data so applies here, so the fastest closed form runs"}
        plugin = min(pool, key=lambda p: priced[p]["protocols"][fastest[p]])
        return {"algorithm": "p2p", "protocol": fastest[plugin], "plugin": plugin,
                "reason": f"NCCL runs {kind} as point-to-point sends (no tuner); {plugin} moves data so ({where})"}
    times, off = table(comm, kind, nbytes, asked)
    ranked = sorted(times, key=lambda k: (times[k], ALGOS.index(k[0]) * 3 + PROTOS.index(k[1])))
    info = {"table": [{"algorithm": a, "protocol": p, "model_time_s": times[(a, p)]} for a, p in ranked],
            "disabled": off, "nodes": comm.n_nodes, "ranks": comm.n_ranks, "nvls": comm.nvls is not None}
    if name != "auto":
        algo = next((a for a, plugin in PLUGINS.items() if plugin == name), None)
        mine = [(a, p) for a, p in ranked if a == algo and p in priced[name]["protocols"]]
        if not mine:
            return {**info, "plugin": name, "protocol": fastest[name], "algorithm": None,
                    "reason": f"{name} asked for by name: a custom kernel stock NCCL lacks ({label(name)['source']}), "
                              f"run with its fastest protocol"}
        a, p = mine[0]
        faster = _forecast_faster(priced[name]["protocols"], p)
        return {**info, "plugin": name, "algorithm": a, "protocol": p, "model_time_s": times[(a, p)], **faster,
                "reason": f"{name} asked for (NCCL_ALGO={a}): NCCL's tuner picks {p} for it at {where}"
                          + _faster_note(faster, p)}
    skipped: list[str] = []
    for a, p in ranked:
        chosen = PLUGINS[a]
        if chosen in priced and p in priced[chosen]["protocols"]:
            runner_up = next(((b, q) for b, q in ranked if (b, q) != (a, p)), None)
            why = f"NCCL's tuner picks {a}/{p} at {where}: {times[(a, p)] * 1e6:.1f} us by its model"
            if runner_up:
                why += f", next {runner_up[0]}/{runner_up[1]} {times[runner_up] * 1e6:.1f} us"
            if skipped:
                why += f" (NCCL's first choice {skipped[0]} has no podsim plug-in that applies here)"
            faster = _forecast_faster(priced[chosen]["protocols"], p)
            return {**info, "plugin": chosen, "algorithm": a, "protocol": p, "model_time_s": times[(a, p)],
                    **faster, "reason": why + _faster_note(faster, p)}
        skipped.append(f"{a}/{p}")
    return {**info, "plugin": None, "algorithm": None, "protocol": None,
            "reason": f"NCCL's tuner would run {ranked[0][0] if ranked else 'nothing'} here, which podsim has no "
                      f"plug-in for that applies ({where}); the fastest closed form runs instead, a custom kernel"}
