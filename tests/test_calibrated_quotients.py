"""Calibrated training steps keep the symmetry shortcuts (issue 29 item 1): their collectives run on the quotients
by translations (TPU tori) and by node and rail rotations (GPU nodes), as ideal steps do, against the full
simulation of every chip on the same calibrated system (`simulate_step(fast=False)`).

Why it holds: a calibrated link's efficiency and hop latency are functions of its kind and the array's size
(`simulator.hardware.calibration`), set network-wide when no link carries bytes; the symmetries map links onto
links of their kind, and the network is idle exactly when the representatives' links are. Replays stay off on
calibrated systems (a calibrated run's rate is the network's state when it starts, not its own)."""
from __future__ import annotations

import dataclasses
import math

import pytest
from same_results import assert_same

from simulator.hardware.specs import get_chip
from simulator.workloads.plans.layout import parse_plan_mesh
from simulator.workloads.plans.step import simulate_step
from simulator.workloads.plans.train import TrainOptions
from simulator.workloads.transformer import get_model

CASES = [  # chip, mesh, topology (None: the chip's default), the quotient kind the fast run must use
    ("tpu-v5p", "data=2,model=8", None, "translations"),  # 4x2x2: model takes a factor of an axis
    ("tpu-v5p", "fsdp=2,data=4,model=8", None, "translations"),  # 4x4x4: fsdp and data share an axis
    ("h100", "data=2,model=8", "nodes:2:8", "rotations"),
    ("h100", "fsdp=4,model=8", "nodes:4:8", "rotations"),
    ("a100", "data=2,fsdp=2,model=8", "fattree:4:8", "rotations"),  # rails alone (node rotations move spines)
]


def _steps(chip: str, mesh: str, topology: str | None):
    cfg = dataclasses.replace(get_model("llama-2-7b"), n_layers=2)
    return [simulate_step(cfg, get_chip(chip), parse_plan_mesh(mesh), TrainOptions(), 8, 128, topology,
                          calibrated=True, fast=fast) for fast in (False, True)]


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_a_calibrated_step_on_quotients_is_the_full_calibrated_simulation(case):
    chip, mesh, topology, kind = case
    (full, exact), (fast, quick) = _steps(chip, mesh, topology)
    assert full.system.calibration is not None and fast.system.calibration is not None
    assert fast.sym.quotiented, "the fast calibrated step ran no collective on a quotient"
    assert (fast.sym.node_action is not None) == (kind == "rotations")
    assert_same(exact, quick)
    for key in ("end_to_end_s", "upper_bound_s", "lower_bound_s", "overlap_s"):
        assert math.isclose(fast.metrics[key], full.metrics[key], rel_tol=1e-9), key
    assert fast.metrics["bytes"] == pytest.approx(full.metrics["bytes"], rel=1e-9)
    if kind == "rotations":  # every link of a representative's orbit gets its bytes, as in full
        full_links, fast_links = full.system.network.link_bytes(), fast.system.network.link_bytes()
        assert full_links.keys() == fast_links.keys()
        for link, nbytes in full_links.items():
            assert math.isclose(fast_links[link], nbytes, rel_tol=1e-9), link


def test_calibration_slows_the_step_it_keeps_fast():
    """The quotient runs the calibrated rates, not the ideal ones: the calibrated step is slower than the ideal
    step of the same plan (fitted efficiencies are below 1, launch latencies above 0)."""
    cfg = dataclasses.replace(get_model("llama-2-7b"), n_layers=2)
    plan = parse_plan_mesh("fsdp=4,model=8")
    (_, ideal), (_, cal) = [simulate_step(cfg, get_chip("h100"), plan, TrainOptions(), 8, 128, "nodes:4:8",
                                          calibrated=c) for c in (False, True)]
    assert cal["step_time_s"] > ideal["step_time_s"]


@pytest.mark.parametrize("calibrated", [False, True])
def test_a_multislice_step_runs_on_the_quotient_by_slice_rotations(calibrated):
    """data=2 x fsdp=256 on two v5e-256 slices over DCN: the slice rotation maps every fsdp group (a slice) onto
    the other and every data group (a chip and its twin) onto itself; the step runs one slice's transfers and
    matches the full simulation of all 512 chips."""
    cfg = dataclasses.replace(get_model("llama-2-7b"), n_layers=1)
    plan, opts = parse_plan_mesh("data=2,fsdp=256"), TrainOptions(checkpoint="full")
    (full, exact), (fast, quick) = [simulate_step(cfg, get_chip("tpu-v5e"), plan, opts, 512, 256,
                                                  "multislice:2:16x16", trace=False, calibrated=calibrated, fast=f)
                                    for f in (False, True)]
    assert fast.sym.quotiented and fast.sym.node_action.name.startswith("slices")
    assert_same(exact, quick)
    assert math.isclose(fast.metrics["end_to_end_s"], full.metrics["end_to_end_s"], rel_tol=1e-9)
    full_links, fast_links = full.system.network.link_bytes(), fast.system.network.link_bytes()
    assert full_links.keys() == fast_links.keys()
    assert all(math.isclose(fast_links[k], v, rel_tol=1e-9) for k, v in full_links.items())


def test_slice_actions_are_the_products_of_slice_rotations_and_wrapped_slice_axes():
    from simulator.acceleration.slice_symmetry import slice_actions
    from simulator.engine.system import System

    orders = {a.name: a.order for a in slice_actions(System("tpu-v5e", topology="multislice:4:16x16").network)}
    assert orders["slices"] == 4 and orders["slice axis 0+slice axis 1"] == 256  # both 16-chip axes wrap
    assert max(orders.values()) == 4 * 16 * 16
    unwrapped = {a.name for a in slice_actions(System("tpu-v5e", topology="multislice:4:4x4").network)}
    assert unwrapped == {"slices"}  # 4x4 v5e slices have no wraparound: only the slices rotate
