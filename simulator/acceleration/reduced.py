"""Reduced mode: one ring per axis stands for every ring of that axis (wrapped, uniform, fault-free grids).

The algorithm builds it (`simulator.collectives.algorithm.Job.reduced`: the first group only, where it declares
`Capabilities.reduced`); this module decides when a job may be reduced and counts the bytes of the rings that did
not run. Moved here from `simulator.collectives.api` (issue 28), which asks through
`simulator.collectives.fast_path`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from simulator.collectives.algorithm import REDUCED_KINDS, Algorithm, algorithms
from simulator.errors import PodsimError

if TYPE_CHECKING:  # annotations only
    from simulator.collectives.groups import Group
    from simulator.engine.network import Network


def eligible(mode: str, kind: str, data: Any, group: Group, net: Network, one_to_one: bool = True) -> bool:
    """Whether the network and job allow one representative ring per axis: every ring of an axis behaves alike
    where every axis wraps or has two chips (both ways are then the one link)."""
    symmetric = all(w or n == 2 for n, w in zip(group.sizes, group.wraps, strict=True))
    eligible = data is None and kind in REDUCED_KINDS and net.grid \
        and symmetric and one_to_one and net.uniform and not group.shared  # faults, jitter, shared links: differ
    if mode == "reduced" and not eligible:
        raise PodsimError("mode='reduced' needs a timing-only AllGather, ReduceScatter or AllReduce over axes that "
                          "all wrap (or have two chips), none a strided factor of a physical axis; use mode='full'")
    return eligible


def use(mode: str, eligible: bool, algorithm: Algorithm, auto: bool = False) -> bool:
    """Reduced mode where the job allows it and ``algorithm`` declares it (`Capabilities.reduced`): an
    algorithm that builds every group whatever ``Job.reduced`` says would have its bytes counted again
    for rings it built already. ``mode='reduced'`` with an algorithm asked for by name that does not declare
    it is an error; with ``auto`` (the fastest algorithm, whichever it is) it runs that algorithm in full."""
    if mode == "reduced" and not algorithm.capabilities.reduced and not auto:
        able = [a.name for a in algorithms() if a.capabilities.reduced]
        raise PodsimError(f"mode='reduced': algorithm {algorithm.name!r} does not declare reduced mode "
                          f"(capabilities.reduced=False); algorithms that do: {', '.join(able)}; or use mode='full'")
    return eligible and mode != "full" and algorithm.capabilities.reduced


def total_link_bytes(net: Network, groups: list[Group], group: Group, link_bytes: dict[str, float]) -> float:
    """Bytes over all links of the full system, from the representative rings of a reduced run:
    each link of axis a stands for the ``groups * n / n_a`` rings along that axis."""
    total = 0.0
    for u, v in net.links:
        n_axis = net.shape[net.graph.edges[u, v]["axis"]]
        total += link_bytes.get(f"{u}->{v}", 0.0) * len(groups) * group.n / n_axis
    return total
