"""Decode, prefill and the simple training step through one chip standing for all (``fast``), against every chip.

The oracle is the plain simulation of every chip (``fast=False``): the same step time, busy fractions, bytes
by interface and overlap (to 1e-9 relative), and the same bytes on every link the fast run simulates. A step
whose data groups run different work (uneven contexts) or that carries a fault is not symmetric: every chip runs.
"""
from __future__ import annotations

import dataclasses
import json
import math

import pytest
from same_results import assert_same

from simulator.engine.faults import ChipSlow, FaultPlan, applying
from simulator.hardware.specs import get_chip
from simulator.workloads.budget import Parallelism
from simulator.workloads.simulate import simulate_decode, simulate_train
from simulator.workloads.transformer import get_model

CFG = dataclasses.replace(get_model("llama-2-7b"), n_layers=4)
SPEC = get_chip("tpu-v5p")
CASES = {
    "decode": lambda fast: simulate_decode(CFG, SPEC, 8, 512, Parallelism(2, 4), fast=fast),
    "prefill": lambda fast: simulate_decode(CFG, SPEC, 4, 0, Parallelism(2, 4), new_tokens=128, fast=fast),
    "decode-torus": lambda fast: simulate_decode(CFG, SPEC, 8, 512, Parallelism(4, 4), topology="torus:4x4",
                                                 fast=fast),
    "decode-calibrated": lambda fast: simulate_decode(CFG, SPEC, 8, 512, Parallelism(2, 4), calibrated=True,
                                                      fast=fast),
    "train": lambda fast: simulate_train(CFG, SPEC, 8, 128, Parallelism(2, 4), fast=fast),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_one_chip_stands_for_all(name):
    full, fast = CASES[name](False), CASES[name](True)
    assert full.sym is None and fast.sym is not None and fast.sym.chips() == [fast.mesh.device((0, 0))]
    assert_same(full.summary(), fast.summary())
    exact_links = full.system.network.link_bytes()
    for link, nbytes in fast.system.network.link_bytes().items():
        assert math.isclose(nbytes, exact_links[link], rel_tol=1e-9), link
    hbm = [sum(s.nbytes for s in full.system.trace.spans if s.chip == c.index and s.unit == "hbm")
           for c in full.system.chips]
    assert max(hbm) == pytest.approx(min(hbm), rel=1e-12)  # the symmetry itself: every chip streams alike


def test_unlike_groups_and_faults_run_every_chip():
    uneven = simulate_decode(CFG, SPEC, 4, [100, 200, 300, 400], Parallelism(2, 2))
    assert uneven.sym is None
    with applying(FaultPlan(faults=(ChipSlow(1, 0.5),))):
        slow = simulate_decode(CFG, SPEC, 8, 512, Parallelism(2, 4))
    assert slow.sym is None
    assert slow.summary()["step_time_s"] > simulate_decode(CFG, SPEC, 8, 512, Parallelism(2, 4)).summary()[
        "step_time_s"]


def test_cli_exact_runs_every_chip_with_the_same_figures(capsys):
    from simulator.frontend.cli import main

    out = {}
    for extra in ([], ["--exact"]):
        assert main(["model", "llama-2-7b", "--mode", "prefill", "--chip", "tpu-v5p", "--mesh", "data=2,model=4",
                     "--batch", "4", "--seq", "64", "--json", *extra]) == 0
        out[bool(extra)] = json.loads(capsys.readouterr().out)
    for key in ("step_time_s", "overlap_s", "busiest_link_fraction"):
        assert math.isclose(out[True][key], out[False][key], rel_tol=1e-9), key
    assert_same(out[True]["simulated_bytes"], out[False]["simulated_bytes"])
