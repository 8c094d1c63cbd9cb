"""The collective-algorithm registry: listing, choosing by name, refusing what does not apply, plug-ins."""
import json

import numpy as np
import pytest

from simulator.collectives import (
    Algorithm,
    Job,
    Schedule,
    algorithms,
    get_algorithm,
    register,
    run_collective,
    unregister,
)
from simulator.engine.system import System
from simulator.errors import PodsimError
from simulator.frontend.cli import main

NV_B, NV_A = 4.5e11, 1e-6  # h100 switch: per-chip egress each way, chip-to-switch latency


class Direct(Algorithm):
    """A test plug-in: every chip sends its shard straight to every other chip through the switch."""

    name = "direct_test"
    summary = "every chip to every chip at once"
    kinds = ("all_gather",)
    topologies = ("switch",)

    def build(self, job: Job, schedule: Schedule) -> None:
        for group in job.groups:
            for src, a in group.members.items():
                for b in group.members.values():
                    if a != b:
                        keys = ((0, src),) if job.numeric else 1
                        schedule.add(a, b, keys, "copy", [], ("direct", src), b)

    def closed_form(self, job: Job) -> float:
        """Each chip's port carries n - 1 shards out and n - 1 in, all at once: two link latencies
        (chip to switch to chip) plus (n - 1) shards over the port's bandwidth."""
        edge = job.net.graph.edges[job.group.members[(0,)], "sw0"]
        return 2 * edge["latency_s"] + (job.group.n - 1) * job.key_bytes / edge["bandwidth_bytes_per_s"]


@pytest.fixture
def direct():
    algorithm = register(Direct())
    yield algorithm
    unregister(algorithm.name)


def _json(capsys, *argv):
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_algorithms_lists_every_registered_algorithm(capsys):
    data = _json(capsys, "algorithms")
    listed = {row["name"]: row for row in data["algorithms"]}
    assert {"bidirectional", "unidirectional", "line"} <= set(listed)
    assert set(listed) == {a.name for a in algorithms()}
    assert listed["line"]["kinds"] == ["all_gather", "reduce_scatter", "all_reduce", "all_to_all", "broadcast"]
    assert "mesh" in listed["line"]["topologies"] and "mesh" not in listed["bidirectional"]["topologies"]
    assert "auto" in data
    assert main(["algorithms"]) == 0
    text = capsys.readouterr().out
    assert all(name in text for name in listed)


def test_a_plug_in_is_found_by_name_and_holds_its_own_closed_form(capsys, direct):
    assert direct.name in {row["name"] for row in _json(capsys, "algorithms")["algorithms"]}
    data = _json(capsys, "collective", "all_gather", "--chip", "h100", "--topology", "switch:8", "--bytes", "64MB",
                 "--algorithm", direct.name)
    expected = 2 * NV_A + 7 * 8e6 / NV_B  # 7 shards of 8 MB through each port at once
    assert data["algorithm"] == direct.name
    assert data["time_s"] == pytest.approx(expected, rel=1e-9)
    assert data["analytic_s"] == pytest.approx(expected, rel=1e-9)
    assert data["time_s"] >= data["topology_bound_s"] * (1 - 1e-12)


def test_a_plug_in_moves_real_data(direct):
    system = System("h100", topology="switch:4")
    data = np.random.default_rng(1).standard_normal((4, 3))
    r = run_collective("all_gather", system, data=data, algorithm=direct.name)
    for dev in range(4):
        np.testing.assert_array_equal(r.outputs[dev], data.reshape(-1))


@pytest.mark.parametrize("argv,match", [
    (["all_reduce", "--chip", "h100", "--topology", "switch:8"], "it serves all_gather, not all_reduce"),
    (["all_gather", "--chip", "tpu-v5e", "--topology", "torus:4x4"], "it serves switch topologies, not torus"),
])
def test_a_plug_in_that_does_not_apply_names_those_that_do(capsys, direct, argv, match):
    assert main(["collective", *argv, "--bytes", "1MB", "--algorithm", direct.name]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and match in err and "algorithms that apply:" in err
    assert "unidirectional" in err and direct.name not in err.split("apply:")[1]


def test_a_ring_needs_a_wraparound_link():
    with pytest.raises(PodsimError, match=r"no axis of the group \(4x4\) has a wraparound link; algorithms that "
                                          r"apply: line$"):
        run_collective("all_gather", System(topology="slice:4x4", trace=False), 1e6, algorithm="unidirectional")


def test_a_line_on_a_ring_leaves_the_wraparound_unused():
    r = run_collective("all_gather", System(topology="ring:8", trace=False), 8e6, algorithm="line", mode="full")
    assert "7->0" not in r.link_bytes and "0->7" not in r.link_bytes
    assert r.time_s == pytest.approx(7 * (1e-6 + 1e6 / 4.5e10), rel=1e-9)  # n - 1 steps, as on a line


@pytest.mark.parametrize("topology,chip,expected", [("torus:4x4", "tpu-v5e", "bidirectional"),
                                                    ("slice:8x16", "tpu-v5e", "bidirectional"),
                                                    ("mesh:4x4", "tpu-v5e", "line"),
                                                    ("switch:8", "h100", None),
                                                    ("nodes:2:4", "h100", None)])
def test_auto_reports_the_algorithm_it_ran(topology, chip, expected):
    """Auto runs the alternative with the fastest closed form (on switches and GPU nodes that depends on
    the size and on which algorithms are registered)."""
    r = run_collective("all_reduce", System(chip, topology=topology, trace=False), 1e6)
    fastest = min(r.alternatives, key=lambda a: a["time_s"])
    assert r.algorithm == fastest["algorithm"] == (expected or fastest["algorithm"])
    assert r.analytic_s == fastest["time_s"]


def test_unknown_names_and_duplicates_are_errors(capsys):
    with pytest.raises(PodsimError, match="algorithm='tree'; valid: auto, bidirectional, .*line, .*unidirectional$"):
        get_algorithm("tree")
    with pytest.raises(PodsimError, match="already registered"):
        register(type("Again", (Algorithm,), {"name": "line"})())
    assert main(["collective", "all_gather", "--topology", "ring:8", "--bytes", "1MB", "--algorithm", "tree"]) == 2
    assert "invalid choice: 'tree'" in capsys.readouterr().err
