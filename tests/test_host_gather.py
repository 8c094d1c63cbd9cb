"""The host_gather scenario (the book's tpus question 6): an int8[128Ki, 128Ki] array on a v5e 4x4's hosts,
gathered to TPU{0,0} and multiplied by bf16[8, 128Ki], its PCIe, ICI, HBM and MXU stages overlapped. The oracles
are the book's own stage arithmetic (tpus, question 6) at REFERENCE.md's v5e figures, typed here."""
from __future__ import annotations

import json

import pytest

from simulator.frontend.cli import main

ARRAY = 2.0**34  # int8[128 x 1024, 128 x 1024]: a byte an element
SHARE = ARRAY / 16  # each of the 16 chips' part


@pytest.fixture(scope="module")
def out() -> dict:
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["run", "host_gather", "--json"]) == 0
    return json.loads(buf.getvalue())


def test_each_stage_is_the_books_arithmetic(out):
    """PCIe: a chip's share over its own 1.6e10 link; ICI: the 15 other shares into TPU{0,0} over its 2 links
    of 4.5e10 (the book's 15e9 / (2 x 4.5e10) at 1 GB a chip); HBM: the array at 8.2e11; FLOPs: 2 x 8 x 2^34 at
    1.97e14."""
    stages = out["stages"]
    assert stages["pcie_s"] == pytest.approx(SHARE / 1.6e10)
    assert stages["ici_s"] == pytest.approx(15 * SHARE / (2 * 4.5e10))
    assert stages["hbm_s"] == pytest.approx(ARRAY / 8.2e11)
    assert stages["compute_s"] == pytest.approx(2 * 8 * ARRAY / 1.97e14)
    assert out["bottleneck"] == "ici" and out["pipelined_s"] == stages["ici_s"]
    assert out["serial_s"] == pytest.approx(sum(stages.values()))


def test_the_simulated_copy_overlaps_its_stages_within_the_books_range(out):
    """The book: "a pipelining problem that's bottlenecked by the slowest piece ... about 150-200ms"; the sum of
    the stages (268 ms) is its upper bound. The simulation can beat neither the slowest stage nor reach the sum."""
    t = out["end_to_end_s"]
    assert 0.150 <= t <= 0.200
    assert out["pipelined_s"] <= t < out["serial_s"]


def test_a_topology_without_hosts_is_one_line(capsys):
    assert main(["run", "host_gather", "--set", "topology=mesh:4x4"]) == 2
    assert "+hosts:H" in capsys.readouterr().err
