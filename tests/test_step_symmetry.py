"""A symmetric training step through one chip per pipeline stage (``fast``) against the full simulation.

The oracle is the plain simulation of every chip (``fast=False``): the same step time, bubble, exposed
communication, busy fractions, bytes by interface, memory peak and timeline (to 1e-9 relative), the
same bytes on every link the fast run simulates, and -- independently of the code under test -- the
translation symmetry the fast run relies on: in the full run every chip of a stage carries the same HBM
traffic, so the fast run's HBM bytes are the chips' count times one chip's.
"""
from __future__ import annotations

import dataclasses
import math

import pytest
from same_results import assert_same

from simulator.acceleration.step_symmetry import Symmetry
from simulator.engine.faults import ChipSlow, FaultPlan, LinkDegraded, applying
from simulator.hardware.specs import get_chip
from simulator.workloads.plans import TrainOptions, parse_plan_mesh, train_plan
from simulator.workloads.plans.step import TrainStep, simulate_step
from simulator.workloads.transformer import get_model

CASES = [  # model, chip, mesh, batch, topology, options
    ("llama-2-7b", "tpu-v5p", "data=2,model=4", 8, None, {}),
    ("llama-2-7b", "tpu-v5p", "data=4,model=4", 8, "torus:4x4", {}),
    ("llama-2-7b", "tpu-v5p", "fsdp=4,model=4", 8, "torus:4x4", {"tp_overlap": True}),
    ("llama-2-7b", "tpu-v5p", "fsdp=4,model=2", 8, None, {"zero": 1}),
    ("llama-2-7b", "tpu-v5p", "pipeline=2,data=2,model=2", 8, None, {"microbatches": 4}),
    ("llama-2-7b", "tpu-v5p", "pipeline=2,fsdp=2,model=2", 8, None, {"microbatches": 2, "schedule": "gpipe"}),
    ("llama-2-7b", "tpu-v5p", "pipeline=2,data=2,model=2", 8, None, {"microbatches": 4, "schedule": "interleaved"}),
    ("llama-2-7b", "tpu-v5p", "pipeline=4,data=4", 8, "torus:4x4", {"microbatches": 2}),
    ("llama-2-7b", "tpu-v5p", "sequence=4,model=4", 8, "torus:4x4", {"sequence_attention": "allgather"}),
    ("llama-2-7b", "tpu-v5p", "sequence=2,data=2,model=2", 8, None, {}),
    ("mixtral-8x7b", "tpu-v5p", "expert=4,model=2", 8, None, {}),
    ("mixtral-8x7b", "tpu-v5p", "expert=4,data=4", 16, "torus:4x4", {"checkpoint": "full"}),
    ("llama-2-7b", "h100", "data=2,model=8", 8, "nodes:2:8", {}),
    ("llama-2-7b", "h100", "pipeline=2,model=8", 8, "nodes:2:8", {"microbatches": 2}),
]
SEQ, LAYERS = 128, 4


def _config(model: str):
    return dataclasses.replace(get_model(model), n_layers=LAYERS)


def _both(model, chip, mesh, batch, topology, options):
    cfg, spec, plan = _config(model), get_chip(chip), parse_plan_mesh(mesh)
    out = {}
    for fast in (False, True):
        sim, measured = simulate_step(cfg, spec, plan, TrainOptions(**options), batch, SEQ, topology, fast=fast)
        out[fast] = sim, measured
    return out


@pytest.mark.parametrize("case", CASES, ids=[f"{c[2]}-{c[4]}-{c[5]}" for c in CASES])
def test_fast_step_matches_full_simulation(case):
    out = _both(*case)
    (full, exact), (fast, quick) = out[False], out[True]
    assert not full.sym.active and fast.sym.active, fast.sym.why
    assert len(fast.sym.chips()) == fast.p  # one chip per pipeline stage ran its program
    assert_same(exact, quick)
    exact_links, fast_links = full.system.network.link_bytes(), fast.system.network.link_bytes()
    for link, nbytes in fast_links.items():  # every link the fast run simulated carried what it carries in full
        assert math.isclose(nbytes, exact_links[link], rel_tol=1e-9), link
    hbm = [sum(s.nbytes for s in full.system.trace.spans if s.chip == c and s.unit == "hbm")
           for c in fast.sym.members[0]]
    assert max(hbm) == pytest.approx(min(hbm), rel=1e-12)  # the symmetry itself: stage 0's chips alike


def test_wrapping_torus_runs_one_ring_per_axis():
    """On a torus that wraps, a data-parallel AllReduce runs over one ring: far fewer link directions carry
    bytes than in full, yet the totals agree (checked above)."""
    out = _both("llama-2-7b", "tpu-v5p", "data=4,model=4", 8, "torus:4x4", {})
    full, fast = out[False][0], out[True][0]
    assert fast.sym.rings_reduce
    assert len(full.system.network.link_bytes()) == 16 * 2 * 2  # 4x4 torus: 16 chips, 2 axes, both ways
    assert len(fast.system.network.link_bytes()) == 2 * 4 * 2  # one ring of 4 links per axis, both ways


@pytest.mark.parametrize("fault", [LinkDegraded(0, 1, 0.5), ChipSlow(3, 0.5)])
def test_faults_fall_back_to_every_chip(fault):
    cfg, spec, plan = _config("llama-2-7b"), get_chip("tpu-v5p"), parse_plan_mesh("data=2,model=4")
    with applying(FaultPlan(faults=(fault,))):
        sim = TrainStep(cfg, spec, plan, TrainOptions(), 8, SEQ, fast=True)
        measured = sim.run()
    assert not sim.sym.active and "fault" in sim.sym.why
    assert len(sim.sym.chips()) == 8
    healthy = train_plan(cfg, spec, 8, SEQ, plan, TrainOptions(), fast=False)
    assert measured["step_time_s"] > healthy["step_time_s"]  # the slow link or chip is felt


def test_unlike_arrivals_rerun_in_full(monkeypatch):
    """A stage whose transfers arrive at different times is not symmetric: the step reruns in full."""
    sym = Symmetry.__new__(Symmetry)
    sym.active, sym._arrivals, sym.broken = True, [[1.0, 1.0], [2.0, 2.0 + 1e-9]], False
    sym.per_stage, sym.link_kinds, sym.extra_link_bytes, sym.reps, sym.members = 1, set(), {}, {}, {}
    sym.finish(type("T", (), {"bytes_by_interface": {}, "bytes_by_tensor": {}, "flops_total": 0.0,
                              "padded_flops_total": 0.0, "enabled": False})())  # (untraced: no stand-ins named)
    assert sym.broken
    real = Symmetry.finish

    def breaking(self, trace):
        real(self, trace)
        self.broken = self.active

    monkeypatch.setattr(Symmetry, "finish", breaking)
    cfg, spec, plan = _config("llama-2-7b"), get_chip("tpu-v5p"), parse_plan_mesh("pipeline=2,data=2")
    sim, measured = simulate_step(cfg, spec, plan, TrainOptions(microbatches=2), 8, SEQ, fast=True)
    assert not sim.sym.active and len(sim.sym.chips()) == 4
    monkeypatch.setattr(Symmetry, "finish", real)
    _, exact = simulate_step(cfg, spec, plan, TrainOptions(microbatches=2), 8, SEQ, fast=False)
    assert_same(exact, measured)
