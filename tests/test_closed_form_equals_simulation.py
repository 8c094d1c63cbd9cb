"""Closed forms against their simulation on switched GPU systems, where ``auto`` ranks by the closed forms (issue 31).

Each side checks the other: the closed form is derived from bytes per link, hops and latencies without looking at
the schedule, the simulation runs the schedule on fairly shared links. Both must also stay at or above the physical
lower bound of `simulator.collectives.bounds` (``topology_bound_s``). The hand derivations below use only the
chip's published link figures (h100: NVLink 450 GB/s per GPU each way, 1 us GPU to switch; one 400 Gb/s
InfiniBand NIC per GPU, 2.5 us GPU to fabric).
"""
import pytest

from simulator.collectives import applicable, collective_groups, run_collective
from simulator.engine.system import System

NV_B, NV_A = 4.5e11, 1e-6  # NVLink egress per GPU each way (B/s), GPU-to-switch latency (s)
IB_B, IB_A = 5e10, 2.5e-6  # one InfiniBand NIC per GPU each way (B/s), GPU-to-fabric latency (s)
KINDS = ("all_reduce", "all_gather", "reduce_scatter")

#: (chip, topology, kind, bytes, algorithm) whose closed form equals the simulation; the ring ones (unidirectional
#: over nodes, the line's ReduceScatter over nodes) were short of it by 0.1% to 46% before the ring window
EXACT = [
    *[("h100", "nodes:2:4", k, v, "unidirectional") for k in KINDS for v in (6.4e7, 1e9)],
    *[("h100", t, k, 1e9, "unidirectional") for t in ("nodes:2:8", "nodes:4:8") for k in KINDS],
    *[("h100", "nodes:2:4", "reduce_scatter", v, "line") for v in (1e6, 6.4e7, 1e9)],
    *[("h100", "nodes:2:8", "reduce_scatter", v, "line") for v in (1e6, 6.4e7)],
    *[("h100", "nodes:2:4", k, v, a) for k in KINDS for v in (1e6, 1e9)
      for a in ("hierarchical", "hierarchical_pipelined", "recursive_halving_doubling")],
    *[("h100", "nodes:4:8", k, 1e9, "hierarchical") for k in KINDS],
    *[("h100", t, "all_reduce", 6.4e7, a) for t in ("switch:8", "nodes:2:8") for a in ("one_shot", "two_shot")],
    *[("h100", t, k, 6.4e7, "direct") for t in ("switch:8", "nodes:2:4") for k in ("all_gather", "all_to_all")],
    *[("h100", "switch:8", k, 1e9, a) for k in KINDS for a in ("line", "unidirectional")],
    ("a100", "nodes:4:2", "all_reduce", 1e9, "hierarchical_pipelined"),
]


def _run(chip, topology, kind, nbytes, algorithm="auto"):
    return run_collective(kind, System(chip, topology=topology, trace=False), nbytes, algorithm=algorithm)


@pytest.mark.parametrize("chip,topology,kind,nbytes,algorithm", EXACT)
def test_closed_form_equals_simulation_and_both_respect_the_bound(chip, topology, kind, nbytes, algorithm):
    r = _run(chip, topology, kind, nbytes, algorithm)
    assert r.algorithm == algorithm
    assert r.analytic_s == pytest.approx(r.time_s, rel=1e-6)
    assert min(r.analytic_s, r.time_s) >= r.topology_bound_s * (1 - 1e-12)


def test_line_reduce_scatter_over_two_nodes_by_hand():
    """nodes:2:4, 1 GB: four NIC rings of 8 positions (node 0's GPUs, then node 1's, each ring rotated by one
    GPU), V/4 each, shards s = V/32. On a line the chains towards the right end all start at the left end and
    take each link in turn (farthest owner first), so the InfiniBand link 3 -> 4 carries 4 partial sums, one
    after another, each waiting for the one before to land (5 us route latency, s/b). Before its first one, three
    NVLink hops: at hop k a GPU's port carries k shards (one per ring whose chains have reached it), at 2 us
    route latency. The other direction mirrors it. The line's closed form used to price only the InfiniBand
    link's work, 2.5 ms: below the physical bound."""
    v = 1e9
    s = v / 4 / 8
    lead = sum(2 * NV_A + k * s / NV_B for k in (1, 2, 3))
    hand = lead + 4 * (2 * IB_A + s / IB_B)
    r = _run("h100", "nodes:2:4", "reduce_scatter", v, "line")
    assert r.time_s == pytest.approx(hand, rel=1e-6)
    assert r.analytic_s == pytest.approx(hand, rel=1e-6)


@pytest.mark.parametrize("topology,nodes,gpus", [("nodes:2:4", 2, 4), ("nodes:4:8", 4, 8)])
def test_unidirectional_ring_over_nodes_by_hand(topology, nodes, gpus):
    """A unidirectional ring of n = K G positions per NIC ring (G rings, V/G each, shards s = V/(G n)): every
    InfiniBand link carries one shard in each of the n - 1 steps, back to back, and the last one lands a route
    latency (5 us) after its bytes; the NVLink hops between crossings never hold it up (a GPU's port carries
    at most G shards a step: G s / 450 GB/s < s / 50 GB/s for G <= 8). An AllReduce is two such phases."""
    v, n = 1e9, nodes * gpus
    s = v / gpus / n
    phase = (n - 1) * s / IB_B + 2 * IB_A
    for kind, phases in (("all_gather", 1), ("all_reduce", 2)):
        r = _run("h100", topology, kind, v, "unidirectional")
        assert r.time_s == pytest.approx(phases * phase, rel=1e-6)
        assert r.analytic_s == pytest.approx(phases * phase, rel=1e-6)


#: shapes where ``auto`` chose ``line`` on a closed form at (or below) the InfiniBand bound while it simulated
#: 6-16% slower than the best (issue 31: nodes:2:4 AllReduce, 1 GB, line 5.000 ms priced, 5.819 ms simulated)
AUTO_SHAPES = [
    *[("h100", "nodes:2:4", k, 1e9) for k in (*KINDS, "all_to_all")],
    ("h100", "nodes:2:4", "all_to_all", 6.4e7),
    ("h100", "nodes:2:8", "all_reduce", 1e9),
    ("h100", "nodes:4:8", "all_reduce", 1e9),
    ("a100", "nodes:4:2", "all_gather", 6.4e7),
]


#: shapes where the two fastest simulate closer together than a closed form's error, so the ranking may go either way:
#: nodes:2:4 AllReduce, 1 GB (session h31nvls): nvls_tree at its 32-chunk depth 5.2905 ms simulated (closed form
#: 5.3253, 0.66% above: a NIC's two tree streams hide part of each chunk's route latency), hierarchical_pipelined 5.3053
#: (exact), 0.28% apart -- auto may take either; before nvls_tree pipelined deeper it was 5.535 ms, no tie
NEAR_TIES = {("h100", "nodes:2:4", "all_reduce", 1e9): 0.005}


@pytest.mark.parametrize("chip,topology,kind,nbytes", AUTO_SHAPES)
def test_auto_runs_the_fastest_by_simulation(chip, topology, kind, nbytes):
    system = System(chip, topology=topology, trace=False)
    names = applicable(kind, system.network, collective_groups(system.network, None))
    simulated = {a: _run(chip, topology, kind, nbytes, a).time_s for a in names}
    chosen = _run(chip, topology, kind, nbytes)
    assert chosen.time_s <= min(simulated.values()) * (1 + NEAR_TIES.get((chip, topology, kind, nbytes), 1e-9)), \
        (chosen.algorithm, simulated)


def test_line_all_gather_over_two_nodes_is_priced_at_its_simulation():
    """The line's AllGather over nodes (nodes:2:4, 1 GB: 2.877 ms simulated), once priced 2.928 ms in lock step: its
    InfiniBand link receives the four shards of node 0 as they arrive and shares itself fairly among them, so they
    finish together near the end of its 2.5 ms of work and the three NVLink hops after it carry fewer shards at once
    than lock step says (3, 2, then 1 per port). `timing.shared_ring_time` follows those flows (issue 31)."""
    r = _run("h100", "nodes:2:4", "all_gather", 1e9, "line")
    assert r.analytic_s == pytest.approx(r.time_s, rel=1e-9)
    assert r.time_s >= r.topology_bound_s
