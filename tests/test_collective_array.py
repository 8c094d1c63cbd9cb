"""``podsim collective --array --sharding --mesh``: the collective's V from the book's sharded-array notation.

Oracles: hand arithmetic on the book's sharding questions (chapter sharding, question 2: bf16[1024, 4096] as
A[B_X, D_Y] on a v4p 4x4x4, so one chip holds 2 x 1024 x 4096 / 16 bytes) and the same run given --bytes.
"""
from __future__ import annotations

import json

import pytest

from simulator.frontend.cli import main

BLOCK = 2 * 1024 * 4096 // 16  # bytes one chip holds of bf16[1024, 4096] split 4 x 4
BASE = ["--chip", "tpu-v4", "--topology", "torus:4x4x4"]
ARRAY = ["--array", "bf16[1024,4096]", "--mesh", "X=4,Y=4,Z=4"]


def _json(capsys, argv):
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(("kind", "spec", "axes", "v", "topology_axes"), [
    ("all_gather", "A[B_X,D_Y]", "X", 4 * BLOCK, [0]),  # the block gathered over X's 4 chips
    ("all_gather", "A[B_X,D_Y]", "X,Y", 16 * BLOCK, [0, 1]),
    ("all_gather", "A[B_X,D_Y]", None, 16 * BLOCK, [0, 1]),  # default: every axis it is split over
    ("all_reduce", "A[B_X,D_Y]{U_Z}", None, BLOCK, [2]),  # each chip's partial sum, whole
    ("reduce_scatter", "A[B_X,D_Y]{U_Z}", "2", BLOCK, [2]),
])
def test_v_is_one_chips_block_gathered_over_the_axes(kind, spec, axes, v, topology_axes, capsys):
    out = _json(capsys, ["collective", kind, *BASE, *ARRAY, "--sharding", spec, *(["--axes", axes] if axes else [])])
    assert out["params"]["bytes"] == v and out["params"]["axes"] == topology_axes
    assert out["bytes_per_device"] == BLOCK
    by_hand = _json(capsys, ["collective", kind, *BASE, "--bytes", str(v), "--axes",
                             ",".join(map(str, topology_axes))])
    assert out["time_s"] == by_hand["time_s"] and out["book_s"] == by_hand["book_s"]


@pytest.mark.parametrize(("argv", "needle"), [
    (["all_gather", *ARRAY, "--sharding", "A[B_X,D_Y]", "--axes", "Z"], "not split over Z"),
    (["all_reduce", *ARRAY, "--sharding", "A[B_X,D_Y]"], "not unreduced"),
    (["all_gather", "--array", "bf16[1024,4096]", "--sharding", "A[B_X,D_Y]", "--mesh", "X=4,Y=4"],
     "topology's axes"),
    (["all_gather", "--array", "bf16[1024,4096]"], "needs --sharding and --mesh"),
    (["all_gather", *ARRAY, "--sharding", "A[B_X,D_Y]", "--bytes", "1MB"], "not both"),
    (["broadcast", *ARRAY, "--sharding", "A[B_X,D_Y]"], "give --bytes"),
    (["all_gather", *ARRAY, "--sharding", "A[B_X,D_Y]", "--axes", "W"], "not a mesh axis"),
    (["all_gather"], "needs --bytes"),
])
def test_bad_array_collectives_give_one_line(argv, needle, capsys):
    assert main(["collective", argv[0], *BASE, *argv[1:]]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err
