"""The plan search's Pricer reuses layer_work and train_memory across a layout's option sets: every price it
gives equals a fresh Pricer's (no cache) for the same plan and options, whatever order they come in."""
from __future__ import annotations

import random

from simulator.hardware.specs import get_chip
from simulator.workloads.plans.layout import parse_plan_mesh
from simulator.workloads.plans.price import Pricer
from simulator.workloads.plans.search import CHECKPOINTS, option_sets
from simulator.workloads.transformer import get_model


def test_cached_prices_equal_fresh_ones() -> None:
    cfg, chip = get_model("llama-3-8b"), get_chip("h100")
    cached = Pricer(cfg, chip, 64, 2048)
    rng = random.Random(7)
    for mesh in ("data=2,pipeline=2,model=4", "fsdp=4,model=4", "data=4,pipeline=4"):
        plan = parse_plan_mesh(mesh)
        trials = [o.__class__(**{**o.__dict__, "checkpoint": c}) for o in option_sets(cfg, plan, 64)
                  for c in CHECKPOINTS]
        rng.shuffle(trials)
        for opts in trials[:40]:
            got = cached.price(plan, opts)
            want = Pricer(cfg, chip, 64, 2048).price(plan, opts)
            assert got is not None and want is not None
            for key in ("step_time_s", "memory_per_chip_bytes", "fits", "exposed_comm_s", "bubble_fraction"):
                assert got[key] == want[key], (mesh, opts, key)
