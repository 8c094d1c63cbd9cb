"""Collectives on the quotient of a torus by translations (`simulator.acceleration.quotient`) against full runs.

Oracles: the full simulation of every transfer (plain path, every link) for times and bytes; the orbit size
from first principles (the product over axes of length / step); and where the quotient must refuse (a root
collective, an axis without wraparound) it is checked that it does.
"""
from __future__ import annotations

import math

import pytest

from simulator.acceleration.quotient import Translations, execute_quotient, quotient
from simulator.collectives import plan_collective
from simulator.collectives.schedule import execute
from simulator.engine.system import System
from simulator.workloads.mesh import Mesh

CASES = [  # topology, mesh, kind, axes, translation steps
    ("torus:4x4x4", "data=8,model=8", "all_reduce", ["model"], (1, 2, 1)),
    ("torus:4x4x4", "data=8,model=8", "all_reduce", ["data"], (1, 2, 1)),
    ("torus:4x4x4", "data=8,model=8", "all_gather", ["data", "model"], (1, 2, 1)),
    ("torus:4x4", "data=4,model=4", "all_gather", ["data"], (1, 1)),
    ("torus:4x4", "data=4,model=4", "reduce_scatter", ["model"], (1, 1)),
    ("torus:4x8", "a=8,b=4", "reduce_scatter", ["a", "b"], (1, 1)),
    ("torus:2x2x2", "expert=4,model=2", "all_to_all", ["expert"], (1, 1, 1)),
    ("torus:4x4", "a=16", "all_to_all", ["a"], (1, 1)),
]


def _run(topology, mesh_text, kind, axes, steps, on_quotient):
    system = System(chip="tpu-v5p", topology=topology)
    mesh = Mesh(mesh_text, system.graph)
    plan = plan_collective(kind, system, 48e6, axes=axes, mesh=mesh, mode="full")
    q = None
    if on_quotient:
        q = quotient(system.network, plan.schedule.transfers, Translations(system.network, steps))
        assert q is not None
        done = execute_quotient(system.network, q, kind)
    else:
        done = execute(system.network, plan.schedule.transfers, None, kind, aggregate=False)
    system.env.run()
    links = {pair: c.bytes_carried for pair, c in system.network.links.items() if c.bytes_carried}
    return done.value, links, dict(system.trace.bytes_by_interface), plan, q


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}-{'+'.join(c[3])}" for c in CASES])
def test_quotient_run_matches_the_full_run(case):
    topology, _, _, _, steps = case
    full_s, full_links, full_bytes, plan, _ = _run(*case, on_quotient=False)
    quick_s, quick_links, quick_bytes, _, q = _run(*case, on_quotient=True)
    shape = tuple(int(n) for n in topology.split(":")[1].split("x"))
    order = math.prod(n // s for n, s in zip(shape, steps, strict=True))
    assert q.order == order
    sent = [t for t in plan.schedule.transfers if t.src is not None]
    assert sum(t.src is not None for t in q.transfers) * order == len(sent)  # one transfer per orbit
    assert quick_s == pytest.approx(full_s, rel=1e-12)
    assert quick_bytes == pytest.approx(full_bytes, rel=1e-12)  # the interface counters: the whole collective's
    assert quick_links  # the representative links carry exactly what they carry in full
    for pair, nbytes in quick_links.items():
        assert nbytes == pytest.approx(full_links[pair], rel=1e-12)
    assert len(quick_links) * order == len(full_links)  # one link per orbit of the links the collective uses


def test_a_rooted_collective_has_no_quotient():
    """A Broadcast from one chip is not translation-equivariant: the quotient says so (None), it does not guess."""
    system = System(chip="tpu-v5p", topology="torus:4x4")
    plan = plan_collective("broadcast", system, 16e6, mode="full")
    assert quotient(system.network, plan.schedule.transfers, Translations(system.network, (1, 1))) is None


def test_translations_refuse_an_axis_without_wraparound():
    system = System(chip="tpu-v5e", topology="slice:4x4")
    with pytest.raises(ValueError, match="axis"):
        Translations(system.network, (1, 4))
    assert Translations(system.network, (4, 4)).order == 1


def test_representatives_and_offsets():
    system = System(chip="tpu-v5p", topology="torus:4x4x4")
    action = Translations(system.network, (1, 2, 1))
    assert action.order == 4 * 2 * 4
    reps = {action.rep(v) for v in system.network.chips}
    coord = action.coord
    assert {coord[r] for r in reps} == {(0, 0, 0), (0, 1, 0)}  # every coordinate below its step
    for v in system.network.chips:
        assert action.apply(action.offset(v), v) == action.rep(v)


def test_one_group_of_many_is_not_a_quotient_by_translations_that_move_it():
    """An AllGather run over one data group of a 4x4 torus (data=4 along the first axis) is invariant under
    translations along that axis only; by translations along both (order 16) each orbit lacks its other groups'
    members, so the quotient is refused; by the first axis's alone (order 4) it is exact."""
    system = System(chip="tpu-v5p", topology="torus:4x4")
    mesh = Mesh("data=4,model=4", system.graph)
    one = plan_collective("all_gather", system, 48e6, axes=["data"], mesh=mesh, mode="full")
    group = one.groups[:1]
    # the group's own ring (auto would borrow the idle rows' rings: `borrowed_rings`, not translation-invariant)
    plan = plan_collective("all_gather", system, 48e6, groups=group, mode="full", algorithm="bidirectional")
    axis = next(a for a in range(2) if len({system.network.graph.nodes[c]["coord"][a]
                                             for c in group[0].members.values()}) == 4)
    steps = tuple(1 if a == axis else 4 for a in range(2))
    assert quotient(system.network, plan.schedule.transfers, Translations(system.network, (1, 1))) is None
    assert quotient(system.network, plan.schedule.transfers, Translations(system.network, steps)) is not None


def test_exports_after_a_quotient_run_hold_every_link(tmp_path):
    """`podsim collective --csv` after a run on a quotient (node rotations) writes the spans of every link, the same
    rows as the full run's; past the limit `Trace.unfolded` says so (None) rather than copying millions."""
    import csv

    from simulator.frontend.cli import main

    rows = {}
    for mode in ("auto", "full"):
        path = tmp_path / f"{mode}.csv"
        assert main(["collective", "all_reduce", "--chip", "h100", "--topology", "nodes:4:4", "--bytes", "16MB",
                     "--mode", mode, "--csv", str(path)]) == 0
        with open(path) as f:
            rows[mode] = sorted((r["chip"], r["unit"], round(float(r["start_s"]), 15), round(float(r["end_s"]), 15),
                                 float(r["bytes"])) for r in csv.DictReader(f))
    assert rows["auto"] == rows["full"] and len({(r[0], r[1]) for r in rows["full"]}) > 8
    from simulator.collectives import run_collective

    system = System(chip="h100", topology="nodes:4:4")
    result = run_collective("all_reduce", system, 16e6)
    assert result.mode == "quotient" and system.trace.stood_for and system.trace.stood_for.links
    assert system.trace.unfolded(limit=len(system.trace.spans)) is None
