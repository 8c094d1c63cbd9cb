"""`multi_detour` (issue 31, item 1): a row broken by a dead cable spreads its hops over detours through every row.

Oracle, derived by hand (not from the code): R rows of n chips run AllGathers along axis 1 of an R x n torus, each
link direction at b bytes/s; cable (0,0)-(0,1) is dead. Cut the torus between column 0 and the rest: each of the
R chips of column 0 must take in (n - 1)/n V (the other shards of its row) from outside the column, over the links
into the column that survive: R from column n - 1 and R - 1 from column 1 (the dead one gone). So no algorithm
takes less than R (n - 1)/n V / ((2R - 1) b), and some link into the column carries at least R (n - 1)/n V/(2R - 1)
bytes. torus:4x4 on tpu-v5e (b = 45 GB/s), 1 GB: 3/7 V / b = 9.524 ms; healthy (every row's ring) a/2 V / b =
8.333 ms, a = 3/4, the 1.14x the issue names. A ring kept round the dead cable through row 1 only (detour_split)
loads that row's link with a/2 V (1 + x); lines everywhere take a V / b = 16.67 ms.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator import System
from simulator.collectives import fault_routes, run_collective
from simulator.collectives.algorithm import Job, get_algorithm
from simulator.collectives.api import _job, _way_net
from simulator.collectives.groups import collective_groups, root_position
from simulator.engine.faults import LinkDegraded, LinkDown
from simulator.errors import PodsimError

B, V = 45e9, 1e9  # tpu-v5e ICI one direction (REFERENCE.md); the array


def cut_bound_s(rows: int, n: int, nbytes: float = V, b: float = B) -> float:
    """The column cut of the module docstring (seconds)."""
    return rows * (n - 1) / n * nbytes / ((2 * rows - 1) * b)


def _dead(topology: str = "torus:4x4") -> System:
    return System("tpu-v5e", topology=topology, faults=[LinkDown((0, 0), (0, 1))])


def _plan(topology: str, kind: str = "all_gather", system: System | None = None) -> tuple[Job, dict]:
    """The job multi_detour plans on the way round the dead cable that keeps every axis a ring (of ``system``, or of
    a fresh one)."""
    system = system or _dead(topology)
    way = next(w for w in fault_routes.alternatives(system) if "keeps every axis a ring" in w.label)
    net = _way_net(way)
    groups = collective_groups(net, [1], None)
    alg = get_algorithm("multi_detour")
    assert alg.unfit(kind, net, groups) is None
    job = _job(alg, kind, net, groups, V, None, "parallel", None, root_position(groups, None), None, [1], None)
    return job, job.cache["plan"]


def test_the_dead_cable_costs_what_the_cut_allows_not_a_line() -> None:
    r = run_collective("all_gather", _dead(), V, axes=[1])
    healthy = run_collective("all_gather", System("tpu-v5e", topology="torus:4x4"), V, axes=[1])
    bound = cut_bound_s(4, 4)
    assert bound == pytest.approx(3 / 7 * V / B)
    assert healthy.time_s == pytest.approx(3 / 8 * V / B, rel=1e-3)
    assert r.algorithm == "multi_detour"
    assert r.time_s >= bound * (1 - 1e-9)
    assert r.time_s <= 1.15 * bound  # 9.548 ms: 1.003x the cut, 1.146x healthy (10.71 ms, then 15.28 before)
    detour = next(a for a in r.alternatives if a["algorithm"] == "detour_split")
    assert r.time_s < 0.75 * detour["simulated_s"]  # one borrowed row: 15.28 ms
    # every link direction carries at most the cut's share, and the busiest into column 0 at least it: equal
    assert r.max_link_bytes == pytest.approx(4 * 3 / 4 * V / 7, rel=1e-6)


@pytest.mark.parametrize("topology,rows,n", [("torus:4x4", 4, 4), ("torus:3x4", 3, 4), ("torus:4x5", 4, 5),
                                             ("torus:5x3", 5, 3)])
def test_the_programme_never_beats_the_cut(topology: str, rows: int, n: int) -> None:
    """The linear programme's busiest link is a plan's time, so it can never go below the hand-derived cut; on
    torus:4x4 it reaches it."""
    _, plan = _plan(topology)
    assert plan["t"] >= cut_bound_s(rows, n) * (1 - 1e-9)
    if topology == "torus:4x4":
        assert plan["t"] == pytest.approx(cut_bound_s(rows, n), rel=1e-6)


def test_its_weights_are_whole_shards_and_healthy_rows_keep_their_rings() -> None:
    _, plan = _plan("torus:4x4")
    for lane in plan["lanes"]:
        n = lane["n"]
        for j in range(n):
            assert sum(w for (k, _), w in lane["weights"].items() if k == j) == pytest.approx(1.0)
        for routes in lane["split"].values():
            assert sum(f for _, f in routes) == pytest.approx(1.0)
    broken = [lane for lane in plan["lanes"] if any(len(r) > 1 for r in lane["split"].values())]
    assert len(broken) == 1  # only the broken row detours
    for lane in plan["lanes"]:
        if lane is not broken[0]:  # the bidirectional ring's trees: half each of the two links opposite
            assert lane["weights"] == {(j, e): pytest.approx(0.5) for j in range(4) for e in ((j + 1) % 4, (j + 2) % 4)}


def test_its_bytes_are_the_collectives_own() -> None:
    """Every chip of the broken row receives (n - 1)/n V (AllGather): the bytes into its chips over all links,
    minus what detours merely pass through, add up to the row's need; timing only, data refused."""
    r = run_collective("all_gather", _dead(), 64e6, axes=[1], algorithm="auto")
    assert r.algorithm == "multi_detour"
    # total link bytes: each row's trees cross n - 1 hops per shard; detours add their extra links
    assert r.total_link_bytes >= 4 * 4 * 3 / 4 * 64e6 * (1 - 1e-9)
    job, _ = _plan("torus:4x4")
    with pytest.raises(PodsimError, match="timing only"):
        job.numeric = True
        get_algorithm("multi_detour").prepare(job)


def test_it_does_not_apply_to_a_healthy_torus() -> None:
    system = System("tpu-v5e", topology="torus:4x4")
    groups = collective_groups(system.network, [1], None)
    assert "missing cable" in (get_algorithm("multi_detour").unfit("all_gather", system.network, groups) or "")


CABLES = {"torus:4x4": ((0, 0), (0, 1)), "torus:3x4": ((1, 2), (1, 3)), "torus:4x3": ((2, 0), (2, 1)),
          "torus:4x5": ((0, 4), (0, 0))}
TOL = 1e-6


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topology=st.sampled_from(sorted(CABLES)), kind=st.sampled_from(("all_gather", "reduce_scatter", "all_reduce")),
       fraction=st.floats(min_value=0.05, max_value=0.99))
def test_one_axis_degrading_never_slower_than_removing_and_healthy_never_slower(topology: str, kind: str,
                                                                                fraction: float) -> None:
    """The invariants of issue 31 on one axis of a 2-D torus (every row a group, one of them with the cable),
    where multi_detour and detour_split are among auto's ways round the fault."""
    src, dst = CABLES[topology]

    def time(faults: list) -> float:
        return run_collective(kind, System("tpu-v5e", topology=topology, faults=faults), 64e6, axes=[1]).time_s

    healthy, degraded, down = time([]), time([LinkDegraded(src, dst, fraction)]), time([LinkDown(src, dst)])
    assert degraded <= down * (1 + TOL)
    assert healthy <= degraded * (1 + TOL)
    if kind != "all_reduce":
        rows, n = (int(x) for x in topology.split(":")[1].split("x"))
        assert down >= cut_bound_s(rows, n, 64e6) * (1 - 1e-9)


@pytest.mark.parametrize("kind", ["all_gather", "reduce_scatter"])
def test_the_topology_bound_counts_the_cut(kind: str) -> None:
    """`topology_bound_s` holds the column cut (the slab bound), on top of the per-chip links it had (8.89 ms);
    healthy, the same slab gives the rings' own a/2 V / b."""
    faulted = run_collective(kind, _dead(), V, axes=[1])
    assert faulted.topology_bound_s == pytest.approx(cut_bound_s(4, 4), rel=1e-3)  # (+ one link's latency)
    healthy = run_collective(kind, System("tpu-v5e", topology="torus:4x4"), V, axes=[1])
    assert healthy.topology_bound_s == pytest.approx(3 / 8 * V / B, rel=1e-3)


@pytest.mark.parametrize("topology,rows,n", [("torus:4x4", 4, 4), ("torus:3x4", 3, 4), ("torus:4x5", 4, 5)])
def test_reduce_scatter_simulates_at_its_closed_form_and_auto_runs_it(topology: str, rows: int, n: int) -> None:
    """Issue 31: `auto` ranks by closed forms, so the ReduceScatter's must match its simulation. Its trees run
    backwards, each hop over that hop's own routes reversed (what the programme prices); they used the opposite
    hop's split instead and simulated 13.80 ms on torus:4x4 (closed form 10.72 ms), so auto ran detour_split
    (13.43 ms, 1.41x the cut). The reversed transfers cross the column cut as the AllGather's do (column 0's chips
    must send out (n - 1)/n V each over the same 2R - 1 links), so the hand-derived cut bounds it too."""
    src, dst = CABLES[topology]
    r = run_collective("reduce_scatter", System("tpu-v5e", topology=topology, faults=[LinkDown(src, dst)]), V,
                       axes=[1])
    md = next(a for a in r.alternatives if a["algorithm"] == "multi_detour")
    assert md["simulated_s"] == pytest.approx(md["time_s"], rel=0.04)  # 4x4: 9.589 vs 9.699 ms (was 13.80)
    assert md["simulated_s"] >= cut_bound_s(rows, n) * (1 - 1e-9)
    if topology == "torus:4x4":
        assert r.algorithm == "multi_detour"
        assert r.time_s <= 1.15 * cut_bound_s(rows, n)  # 1.007x the cut 9.524 ms (detour_split: 1.41x)


def test_all_reduce_runs_the_detours_in_32_chunks() -> None:
    """AllReduce's ramp (each chunk's ReduceScatter, then its AllGather) shortens with more chunks: 32 by default
    (8 before: 21.66 ms, slower than detour_split's 21.23, so auto ran detour_split); now auto runs multi_detour."""
    r = run_collective("all_reduce", _dead(), V, axes=[1])
    assert r.algorithm == "multi_detour"
    detour = next(a for a in r.alternatives if a["algorithm"] == "detour_split")
    assert r.time_s <= 0.95 * detour["simulated_s"]  # 18.09 against 21.23 ms (18.66, 19.45 before)
    assert r.time_s >= r.topology_bound_s * (1 - 1e-9)


def test_all_reduce_simulates_near_its_closed_form() -> None:
    """The broken row's trees cut 4x finer (`multi_detour.BROKEN_FINER`): 18.66 ms simulated against a closed form
    of 18.13 ms (1.029x; at one cut 19.45 against 18.26, 1.065x, a strict xfail here)."""
    r = run_collective("all_reduce", _dead(), V, axes=[1])
    md = next(a for a in r.alternatives if a["algorithm"] == "multi_detour")
    assert md["simulated_s"] == pytest.approx(md["time_s"], rel=0.04)
    assert md["simulated_s"] >= cut_bound_s(4, 4) * (1 - 1e-9)


def test_all_reduce_simulates_at_its_closed_form() -> None:
    """Issue 31: closed forms must equal their simulation where `auto` ranks by them. It was a strict xfail here:
    18.66 ms simulated against a closed form of 18.13 (1.029x), a floor of about 1.04x the programme however
    finely the broken row was cut. The cause: fair sharing gives every flow on a link the same rate whatever its
    tree's weight, so the shallow trees' chunks ran ahead and the broken row's links starved mid-run for the deep
    trees' AllGather halves. `multi_detour.window` keeps the broken row's chunks in step (now 18.09 ms against
    18.13), and the AllReduce runs within 1.8% of the programme's busiest link (17.78 ms, `topology_bound_s`)."""
    r = run_collective("all_reduce", _dead(), V, axes=[1])
    md = next(a for a in r.alternatives if a["algorithm"] == "multi_detour")
    assert md["simulated_s"] == pytest.approx(md["time_s"], rel=0.01)
    assert r.time_s >= r.topology_bound_s * (1 - 1e-9)
    assert r.time_s <= 1.02 * r.topology_bound_s  # was 18.66 ms, 1.049x


def test_all_gather_and_reduce_scatter_reach_the_cut() -> None:
    """Issue 31: with the dead cable the issue expects about 1.14x healthy, which is the hand-derived cut (8/7 of
    a/2 V / b). It ran 10.71 ms (AllGather, 1.124x the cut) and 9.92 ms (ReduceScatter, 1.042x): a detour carried
    one chunk at a time, and a hop waited for every route of the hop before. Now both stream (9.55 and 9.59 ms)."""
    for kind in ("all_gather", "reduce_scatter"):
        r = run_collective(kind, _dead(), V, axes=[1])
        assert r.algorithm == "multi_detour"
        assert cut_bound_s(4, 4) * (1 - 1e-9) <= r.time_s <= 1.01 * cut_bound_s(4, 4)


@pytest.mark.parametrize(("kind", "slack"), [("all_gather", 1.02), ("reduce_scatter", 1.04)])
def test_the_detours_reach_the_cut_on_torus_8x8(kind: str, slack: float) -> None:
    """The same cut on torus:8x8 (8 rows of 8): 8 x 7/8 V over 15 links, 7/15 V / b = 10.37 ms (healthy 7/16 V / b
    = 9.72 ms). multi_detour, simulated on the way that keeps the axis a ring: AllGather 10.49 ms, ReduceScatter
    10.68 (before: 11.83 and 12.19 ms, 1.14x and 1.18x the cut; the ReduceScatter's chains ran at the pace of a
    9-link detour on their first hop)."""
    system = _dead("torus:8x8")
    job, _ = _plan("torus:8x8", kind, system)
    t = _simulate(system, job)
    assert cut_bound_s(8, 8) * (1 - 1e-9) <= t <= slack * cut_bound_s(8, 8)


def _simulate(system: System, job: Job) -> float:
    """Seconds ``job`` (multi_detour, planned on ``system``'s way round the fault) takes, simulated on that way's
    network of ``system``."""
    from simulator.collectives.schedule import Schedule
    from simulator.collectives.schedule import execute as execute_all

    schedule = Schedule(job.key_bytes)
    get_algorithm("multi_detour").build(job, schedule)
    execute_all(job.net, schedule.transfers, None, job.kind, True)
    system.run()
    return system.env.now
