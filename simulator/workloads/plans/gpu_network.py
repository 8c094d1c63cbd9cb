"""GPU mesh axes on nodes and what NCCL takes to run a collective over one (the calibrated GPU step's network).

Axes are laid innermost-fastest (`simulator.workloads.plans.layout.AXES`: ``model`` first) on nodes of
``per_node`` GPUs joined by NVLink switches, nodes over one InfiniBand NIC per GPU: an axis that fits in a node
runs over NVLink (a GPU's egress, at the chip's fitted NVLink curve, `simulator.hardware.calibration`); one
whose members span nodes has, in each node, one NIC per member there, at ``ib_fraction`` of their line rate (or
NVLink if slower). AllGather, ReduceScatter and AllReduce run as NCCL's own tuning model picks and prices them
(`simulator.collectives.nccl_tuner`: Ring, Tree, NVLS, NVLSTree x LL, LL128, Simple); AllToAll (NCCL's
point-to-point sends) as a ring at the fastest protocol (`simulator.collectives.protocol`), pipeline sends with
Simple. The bound (``c`` None) runs every collective as a ring at line rate with the wire's hop latency.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from simulator.collectives.protocol import PROTOCOLS
from simulator.hardware.calibration import calibrated_chips, get_calibration
from simulator.hardware.specs import ChipSpec
from simulator.hardware.train_calibration import GPU_IDEAL, GpuStepConstants
from simulator.workloads.plans.layout import AXES, MeshPlan

GPUS_PER_NODE = 8  #: an HGX / DGX node: 8 GPUs on NVSwitches


@dataclass(frozen=True)
class AxisNet:
    """One mesh axis on GPU nodes: ``n`` members, the ring's bus bandwidth and the link kind it crosses."""

    n: int
    bus_bytes_per_s: float  #: line rate of the ring's slowest hop, per member, one way
    kind: str  #: "nvlink" (inside a node) or "ib" (across nodes)
    fraction: Callable[[float], float]  #: bytes -> share of the line rate NCCL reaches
    ideal_latency_s: float | None = None  #: set for the bound: line rate, this latency per ring step, no protocol
    nccl: Any = None  #: NCCL's view of the group (`simulator.collectives.nccl_tuner.Comm`), where NCCL tunes it


def axis_nets(chip: ChipSpec, plan: MeshPlan, c: GpuStepConstants | None,
              per_node: int = GPUS_PER_NODE) -> dict[str, AxisNet]:
    """`AxisNet` of every axis of size > 1: innermost axes fill a node first; an axis whose members span
    nodes has, in each node, one NIC per member there. ``c`` None: the bound (line rate, wire latency)."""
    if c is None:
        return {a: AxisNet(n.n, n.bus_bytes_per_s, n.kind, lambda v: 1.0, 2 * chip.hop_latency_s)
                for a, n in axis_nets(chip, plan, GPU_IDEAL, per_node).items()}
    cal = get_calibration(chip.name) if chip.name in calibrated_chips() else None
    nvlink = chip.ici_egress_bytes_per_s
    out: dict[str, AxisNet] = {}
    inner = 1
    for axis in reversed(AXES):
        n = plan.size(axis)
        if n > 1:
            if inner * n <= per_node:
                out[axis] = AxisNet(n, nvlink, "nvlink", (lambda v: cal.link_fraction("nvlink", v)) if cal else
                                    (lambda v: 1.0), nccl=nccl_comm(chip, n, 1))
            else:
                members = max(1, per_node // inner) if inner < per_node else 1
                nic = members * chip.dcn_bandwidth_bytes_per_s
                out[axis] = AxisNet(n, min(nvlink, nic), "ib", lambda v: c.ib_fraction,
                                    nccl=nccl_comm(chip, n, max(1, n // members)))
        inner *= n
    return out


def nccl_comm(chip: ChipSpec, n: int, nodes: int) -> Any:
    """NCCL's view of a group of ``n`` GPUs over ``nodes`` nodes (one NIC per GPU), or None where NCCL's tuner
    model has no such GPU or the group does not split evenly over its nodes."""
    from simulator.collectives import nccl_tuner

    if chip.name not in nccl_tuner.CHIPS or n % nodes:
        return None
    arch, cc, link_rate = nccl_tuner.CHIPS[chip.name]
    ppn = n // nodes
    nvlink = chip.ici_bandwidth_bytes_per_s / link_rate * nccl_tuner.NVLINK_BW[arch] * chip.ici_links
    nic = chip.dcn_bandwidth_bytes_per_s / 1e9
    ring = nccl_tuner.graph(arch, cc, nvlink, nodes, ppn, nic)
    if ring is None:
        return None
    nvls = None
    if chip.name in nccl_tuner.NVLS_CHIPS and ppn > 1:
        nvls = nccl_tuner.graph(arch, cc, nvlink, nodes, ppn, nic, nvls=True)
        nvls = nvls if nvls is not None and nvls.channels >= 2 else None
    return nccl_tuner.Comm(arch, cc, n, nodes, ring, nvls)


def nccl_s(kind: str, nbytes: float, net: AxisNet | None) -> float:
    """One NCCL collective of a V = ``nbytes`` array (AllGather: gathered size; AllToAll: what a member holds) over
    ``net``: AllGather, ReduceScatter and AllReduce as NCCL's own tuner picks and prices them (algorithm and
    protocol: Ring, Tree, NVLS, NVLSTree x LL, LL128, Simple; `simulator.collectives.nccl_tuner`), where NCCL tunes
    the group; otherwise (AllToAll: NCCL's point-to-point sends) a ring at the fastest protocol."""
    if net is None or net.n <= 1 or nbytes <= 0:
        return 0.0
    if net.nccl is not None and net.ideal_latency_s is None and kind in ("all_gather", "reduce_scatter",
                                                                         "all_reduce"):
        from simulator.collectives.nccl_tuner import table

        return min(table(net.nccl, kind, nbytes)[0].values())
    steps = {"all_reduce": 2 * (net.n - 1), "all_to_all": net.n - 1}.get(kind, net.n - 1)
    moved = {"all_reduce": 2 * (net.n - 1) / net.n, "all_to_all": (net.n - 1) / net.n}.get(kind,
                                                                                           (net.n - 1) / net.n)
    bus = net.bus_bytes_per_s * net.fraction(nbytes)
    if net.ideal_latency_s is not None:
        return steps * net.ideal_latency_s + moved * nbytes / bus
    return min(p.launch_s + steps * 2 * p.hop_latency_s.get(net.kind, 0.0) + moved * nbytes / (bus * p.efficiency)
               for p in PROTOCOLS.values())


def p2p_s(nbytes: float, net: AxisNet | None) -> float:
    """One stage-to-stage activation send of ``nbytes`` (NCCL send/recv, Simple protocol)."""
    if net is None:
        return 0.0
    if net.ideal_latency_s is not None:
        return net.ideal_latency_s + nbytes / net.bus_bytes_per_s
    simple = PROTOCOLS["Simple"]
    return simple.launch_s + 2 * simple.hop_latency_s.get(net.kind, 0.0) + nbytes / (net.bus_bytes_per_s *
                                                                                      net.fraction(nbytes))


__all__ = ["GPUS_PER_NODE", "AxisNet", "axis_nets", "nccl_comm", "nccl_s", "p2p_s"]
