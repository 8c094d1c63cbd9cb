"""Closed forms that follow flows on fair-shared ports (issue 31: closed forms equal to their simulation wherever
`auto` ranks by them): the ring AllToAll (unequal bundles: a chain forwards fewer chunks at each hop), the line
across three nodes or more (a middle NIC's input carries a hop from each neighbour node, its output one), the
line's ReduceScatter (each link serves the chains in a fixed order) and the binary trees.

`timing.shared_flow_time` is held to an independent brute-force fluid run and to values exact by first
principles; the algorithms' closed forms are held to the event-driven simulation of the same algorithm asked for
by name (the oracle, never read from the closed form), here on nodes:8:8, where a one-way ring's flows are also
folded node onto node (`timing.fold_ring_ports` with a period; tests/test_node_alternatives.py holds nodes:2:8 and
nodes:4:8 at 1 MB, 64 MB and 1 GB).
"""
from __future__ import annotations

import pytest
from fluid_oracle import brute_fluid

from simulator.collectives import run_collective
from simulator.collectives.timing import shared_ring_time
from simulator.engine.system import System


def _all_to_all_chains(n: int) -> tuple[list[list[int]], list[list[float]]]:
    """A one-way ring's AllToAll: the chain from o crosses hops o, o + 1, ... and its k-th hop carries the chunks
    of the n - 1 - k positions still ahead."""
    return ([[(o + k) % n for k in range(n - 1)] for o in range(n)],
            [[float(n - 1 - k) for k in range(n - 1)] for _ in range(n)])


@pytest.mark.parametrize(("hops", "ports"), [
    ([(1e-6, 400e9)] * 7 + [(5e-6, 50e9)], list(range(8))),  # one slow hop, every hop its own port
    (([(2e-6, 450e9)] * 7 + [(5e-6, 50e9)]) * 2, [0] * 7 + [1] + [2] * 7 + [3]),  # ring 0 of nodes:2:8, ideal
    (([(2e-6, 450e9)] * 3 + [(5e-6, 50e9)]) * 3, [0] * 3 + [1] + [2] * 3 + [4] + [5] * 3 + [6]),  # 3 nodes of 4
], ids=["slow-hop", "nodes-2-8", "nodes-3-4"])
@pytest.mark.parametrize("s", [4e3, 2.5e5, 5e6])
def test_unequal_bundles_are_the_fluid_model(hops: list[tuple[float, float]], ports: list[int], s: float) -> None:
    """An AllToAll's chains (fewer chunks at each hop: flows on a port no longer end in the order they joined)
    against the brute-force fluid run, and above the busiest port's work plus one latency."""
    chains, sizes = _all_to_all_chains(len(hops))
    t = shared_ring_time(hops, ports, s, chains, sizes)
    assert t == pytest.approx(brute_fluid(hops, ports, s, chains, sizes), rel=1e-9)
    carried = {p: 0.0 for p in ports}
    for chain, size in zip(chains, sizes, strict=True):
        for k, z in zip(chain, size, strict=True):
            carried[ports[k]] += z * s
    work = max(carried[p] / hops[ports.index(p)][1] for p in carried)
    assert t >= (work + min(a for a, _ in hops)) * (1 - 1e-12)


def test_alike_hops_all_to_all_is_in_lock_step() -> None:
    """Hops all alike, each its own port: every chain's k-th hop carries n - 1 - k chunks and all start together,
    so each link carries one flow at a time: (n - 1) alpha + n (n - 1) / 2 x s / b exactly."""
    n, alpha, b, s = 8, 2e-6, 100e9, 1e6
    chains, sizes = _all_to_all_chains(n)
    assert shared_ring_time([(alpha, b)] * n, list(range(n)), s, chains, sizes) == pytest.approx(
        (n - 1) * alpha + n * (n - 1) / 2 * s / b, rel=1e-12)


def test_one_port_all_to_all_carries_every_chunk() -> None:
    """Every hop on one fair-shared port, no latency: the port moves n x n (n - 1) / 2 chunks at its rate and is
    never idle (a chain's next hop joins as its last one ends)."""
    n, b, s = 6, 50e9, 3e5
    chains, sizes = _all_to_all_chains(n)
    assert shared_ring_time([(0.0, b)] * n, [0] * n, s, chains, sizes) == pytest.approx(
        n * n * (n - 1) / 2 * s / b, rel=1e-9)


@pytest.mark.parametrize("calibrated", [False, True], ids=["ideal", "calibrated"])
@pytest.mark.parametrize(("kind", "name"), [(k, a) for k in ("all_to_all", "reduce_scatter", "all_reduce")
                                            for a in ("unidirectional", "line")])
def test_eight_nodes_equal_their_simulation(calibrated: bool, kind: str, name: str) -> None:
    """nodes:8:8 at 64 MB: a one-way ring's flows folded node onto node (64 positions, 8 followed) and the line's
    (not folded: its ends break the symmetry), against the simulation of the same algorithm."""
    r = run_collective(kind, System("h100", topology="nodes:8:8", calibrated=calibrated, trace=False), 64e6,
                       algorithm=name)
    # within 1e-5: the simulation's float rounding over some 10^5 events
    assert r.analytic_s == pytest.approx(r.time_s, rel=1e-5), \
        f"closed form {r.analytic_s * 1e6:.2f} us, simulated {r.time_s * 1e6:.2f} us"


@pytest.mark.parametrize("name", ["binary_tree", "double_binary_tree"])
@pytest.mark.parametrize("topology", ["switch:8", "nodes:4:8", "nodes:16:8"])
def test_trees_equal_their_simulation(topology: str, name: str) -> None:
    """The trees' chunks followed on the group's links: an interior GPU's NVLink port carries its chunks up and
    down, and its children's, at once (lock step said 0.886-0.896 of the simulation on calibrated nodes:4:8)."""
    for nbytes in (1e6, 1e9):
        r = run_collective("all_reduce", System("h100", topology=topology, calibrated=True, trace=False), nbytes,
                           algorithm=name)
        assert r.analytic_s == pytest.approx(r.time_s, rel=1e-5), nbytes
