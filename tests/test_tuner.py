"""Choosing an algorithm by closed form (`auto`), the alternatives every result lists, padding, bad input."""
import json
import math
import re

import numpy as np
import pytest

from simulator.collectives import applicable, collective_groups, register, run_collective, unregister
from simulator.collectives.bidirectional import Bidirectional
from simulator.engine.system import System
from simulator.errors import PodsimError
from simulator.frontend.cli import main

B, A = 4.5e10, 1e-6  # tpu-v5e ICI: one-way bytes/s per link, hop latency
CLAIM_S = 1e-3


class Flat(Bidirectional):
    """A test plug-in: the bidirectional ring's schedule, claiming a flat 1 ms whatever the size."""

    name = "flat_test"
    summary = "claims 1 ms"

    def closed_form(self, job):
        return CLAIM_S


@pytest.fixture
def flat():
    algorithm = register(Flat())
    yield algorithm
    unregister(algorithm.name)


def _json(capsys, *argv):
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_every_result_lists_each_applicable_algorithm_and_auto_runs_the_fastest(capsys):
    data = _json(capsys, "collective", "all_reduce", "--chip", "tpu-v5e", "--topology", "torus:4x4", "--bytes", "64MB")
    system = System("tpu-v5e", topology="torus:4x4", trace=False)
    names = applicable("all_reduce", system.network, collective_groups(system.network, None))
    listed = {a["algorithm"]: a["time_s"] for a in data["alternatives"]}
    assert set(listed) == set(names)
    assert [a["time_s"] for a in data["alternatives"]] == sorted(listed.values())
    assert data["algorithm"] == data["alternatives"][0]["algorithm"] == "bidirectional"
    assert data["analytic_s"] == listed["bidirectional"]
    # a 4-ring (2 steps, 3/2 shards of V/16 per link) beats a 4-line (3 steps, 3 shards) on both axes
    assert listed["line"] > 1.5 * listed["bidirectional"]


def test_an_algorithm_asked_for_runs_priced_alone(capsys):
    """A forced algorithm is the only one prepared and priced (auto lists every applicable one)."""
    data = _json(capsys, "collective", "all_gather", "--chip", "tpu-v5e", "--topology", "ring:8", "--bytes", "8MB",
                 "--algorithm", "line")
    assert data["algorithm"] == "line"
    assert [a["algorithm"] for a in data["alternatives"]] == ["line"]
    assert data["alternatives"][0]["time_s"] == pytest.approx(7 * (A + 1e6 / B), rel=1e-12)
    auto = _json(capsys, "collective", "all_gather", "--chip", "tpu-v5e", "--topology", "ring:8", "--bytes", "8MB")
    listed = {a["algorithm"]: a["time_s"] for a in auto["alternatives"]}
    assert listed["line"] == pytest.approx(7 * (A + 1e6 / B), rel=1e-12)
    assert listed["bidirectional"] == pytest.approx(4 * A + 3.5 * 1e6 / B, rel=1e-12)


def test_auto_follows_the_closed_forms_as_the_size_changes(flat):
    """The plug-in claims 1 ms: slower than the ring on small arrays, faster on large ones, so auto flips."""
    ring = lambda v: 4 * A + 3.5 * v / 8 / B  # noqa: E731  (bidirectional AllGather of v on a ring of 8)
    flip = (CLAIM_S - 4 * A) * 8 * B / 3.5
    for nbytes, expected in ((flip / 2, "bidirectional"), (flip * 2, flat.name)):
        r = run_collective("all_gather", System("tpu-v5e", topology="ring:8", trace=False), nbytes)
        assert r.algorithm == expected
        assert {a["algorithm"]: a["time_s"] for a in r.alternatives}["bidirectional"] == pytest.approx(ring(nbytes))


def test_padding_counts_every_nic_ring(capsys):
    """GPU nodes run one ring per NIC (8 on nodes:2:8), each holding 1/8 of V in 16 whole-byte shards
    (the padding was counted for one ring only, and went negative)."""
    nbytes = 1_000_000_007
    data = _json(capsys, "collective", "all_gather", "--chip", "h100", "--topology", "nodes:2:8", "--bytes",
                 str(nbytes), "--algorithm", "unidirectional")
    assert data["padded_bytes"] == 8 * 16 * math.ceil(nbytes / (8 * 16)) - nbytes == 121


@pytest.mark.parametrize("argv,match", [
    (["--chip", "h100", "--topology", "switch:8", "--algorithm", "bidirectional"],
     "it serves ring, torus topologies, not switch; algorithms that apply: "),
    (["--chip", "tpu-v5e", "--topology", "mesh:4x4", "--algorithm", "bidirectional"],
     "it serves ring, torus topologies, not mesh; algorithms that apply: "),
    (["--chip", "tpu-v5e", "--topology", "slice:4x4", "--algorithm", "unidirectional"],
     r"no axis of the group \(4x4\) has a wraparound link; algorithms that apply: "),
    (["--chip", "h100", "--topology", "switch:8", "--axes", "0,1"],
     "topology 'switch' has no axes; omit --axes to use all chips as one ring"),
])
def test_an_algorithm_or_axes_that_do_not_apply_are_one_line_errors(capsys, argv, match):
    assert main(["collective", "all_gather", "--bytes", "1MB", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert re.search(match, err)
    if "apply:" in match:
        assert "line" in err.split("apply: ")[1]


def test_numeric_rows_must_split_into_shards():
    """A ReduceScatter row must split into one shard per chip; an algorithm asked for says so."""
    with pytest.raises(PodsimError, match="do not split into 4 equal shards"):
        run_collective("reduce_scatter", System(topology="ring:4"), data=np.zeros((4, 6)), algorithm="bidirectional")
