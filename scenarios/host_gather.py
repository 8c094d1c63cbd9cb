"""How long does copying a host-offloaded array to one chip and multiplying it take, with its stages overlapped?

The book's tpus question 6: ``int8[rows, cols]`` sharded evenly over a slice, each chip's share in its
host's DRAM; copy it all to chip ``root`` and multiply it by ``bf16[batch, cols]``. Every chip reloads its
share over its own PCIe link in ``chunks`` pieces and sends each piece to the root over ICI as it lands
(both dimension orders of the grid, half each, so the root's two links share the load); the root reads each
arrived piece from HBM and runs its FLOPs. The four stages -- PCIe, ICI into the root, HBM and the MXU --
overlap, so the step is bound by the slowest, as the book argues ("a pipelining problem that's bottlenecked
by the slowest piece ... about 150-200ms"), not by their sum (its upper bound).

Closed forms, each stage alone (bounds): PCIe ``share / b_pcie`` (a chip's share over its own link), ICI
``(n - 1) share / (links into the root x b_ici)`` (the book's 15e9 / (2 x 4.5e10) = 167 ms), HBM ``bytes /
b_hbm``, compute ``2 batch rows cols / C``; ``pipelined_s`` their max, ``serial_s`` their sum. The ICI
term counts every non-PCIe link into the root (a lower bound: where routes crowd one of them -- on a GPU
pair of nodes, the other node's shares through the root's one NIC -- the simulation is slower). The
simulated ``end_to_end_s`` adds the pipeline's fill and drain and any uneven load on the root's links.
"""
from __future__ import annotations

from typing import Any

import simpy

from simulator.engine.system import System
from simulator.errors import PodsimError
from simulator.hardware.specs import ChipSpec, get_chip
from simulator.report.result import Result
from simulator.units import format_quantity, positive_int


def run(*, rows: int = 128 * 1024, cols: int = 128 * 1024, batch: int = 8, chunks: int = 16, root: int = 0,
        topology: str | None = None, chip: str | ChipSpec = "tpu-v5e", trace: bool = True) -> Result:
    """Simulate gathering an int8[rows, cols] array from the hosts of ``topology`` to chip ``root`` and the
    bf16[batch, cols] x [cols, rows] matmul there, in ``chunks`` pieces per chip. The default topology is the
    book's v5e 4x4 with a host per 4x2 (``mesh:4x4+hosts:8``); on a GPU, two 8-GPU nodes with a host each."""
    for name, value in (("rows", rows), ("cols", cols), ("batch", batch), ("chunks", chunks)):
        positive_int(value, name=name)
    if topology is None:
        spec = chip if isinstance(chip, ChipSpec) else get_chip(chip)
        topology = "nodes:2:8+hosts:8" if spec.wraparound == "switch" else "mesh:4x4+hosts:8"
    system = System(chip, topology=topology, trace=trace)
    hosts = system.host_memory  # a topology without hosts: one line saying how to add them
    net = system.network
    assert net is not None  # a topology with hosts has a network
    ids = [c.index for c in system.chips]
    if root not in ids:
        raise PodsimError(f"root={root!r} is not a chip of {topology!r}; chips are {ids[0]}..{ids[-1]}")
    n = len(ids)
    total = float(rows) * cols  # int8: a byte an element
    share = total / n
    piece = share / chunks
    flops_per_byte = 2.0 * batch  # 2 x batch FLOPs per int8 weight
    peak = system.spec.peak_flops_per_s("bf16")  # the book's bf16 FLOPs (int8 weights, bf16 vector)
    owner = system.chips[ids.index(root)]
    landed = simpy.Store(system.env)  # pieces that have reached the root's HBM, in arrival order

    def feed(c: Any) -> Any:
        yield hosts.place(c, share, "A shard")
        for k in range(chunks):
            yield system.reload(c, piece, f"A {k} over PCIe")
            system.env.process(forward(c, k))

    def forward(c: Any, k: int) -> Any:
        if c != root:
            yield net.message(c, root, piece, f"A {k} to the root", multipath=True)
        yield landed.put(k)

    def consume() -> Any:
        for _ in range(n * chunks):
            yield landed.get()
            yield owner.load(piece, "A", "A from HBM")
            yield owner.compute(flops_per_byte * piece, "A x x")

    for c in ids:
        system.process(feed(c), f"chip {c} loads its shard")
    system.process(consume(), f"chip {root} multiplies")
    system.run()
    metrics = system.metrics()
    into = [d for _, _, d in net.graph.in_edges(root, data=True) if d.get("kind") != "pcie"]  # ICI, NVLink
    pcie = next(d for _, _, d in net.graph.in_edges(root, data=True) if d.get("kind") == "pcie")
    stages = {"pcie_s": share / pcie["bandwidth_bytes_per_s"],
              "ici_s": (n - 1) * share / sum(d["bandwidth_bytes_per_s"] for d in into),
              "hbm_s": total / system.spec.hbm_bandwidth_bytes_per_s, "compute_s": flops_per_byte * total / peak}
    step = metrics["end_to_end_s"]
    slowest = max(stages, key=lambda k: stages[k])
    return Result(
        scenario="host_gather",
        params=dict(rows=rows, cols=cols, batch=batch, chunks=chunks, root=root, topology=topology,
                    chip=system.spec.name),
        metrics=metrics,
        extra={"stages": stages, "pipelined_s": stages[slowest], "serial_s": sum(stages.values()),
               "bottleneck": slowest.removesuffix("_s"), "array_bytes": total, "root_links_in": len(into)},
        trace=system.trace,
        headline=(f"int8[{rows},{cols}] ({format_quantity(total, 'B')}) from {n} chips' hosts to chip {root} and "
                  f"x bf16[{batch},{cols}]: {format_quantity(step, 's')} simulated, stages overlapped (slowest "
                  f"alone, {slowest.removesuffix('_s')}: {format_quantity(stages[slowest], 's')}; one after "
                  f"another: {format_quantity(sum(stages.values()), 's')})"),
        details=[", ".join(f"{k.removesuffix('_s')} {format_quantity(v, 's')}" for k, v in stages.items())],
    )
