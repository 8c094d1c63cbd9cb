"""`podsim plan` searches its options: schedules, microbatches, ZeRO stage, checkpoint policy, TP overlap,
and 2-D inference layouts; counts and choices held against what the options allow, worked out here."""
import json
from dataclasses import replace

import pytest

from simulator.frontend.cli import main
from simulator.hardware.specs import get_chip
from simulator.workloads.plans import MeshPlan, TrainOptions, check_train_plan, train_plan
from simulator.workloads.plans.price import Pricer
from simulator.workloads.plans.search import option_sets, search, train_meshes
from simulator.workloads.transformer import get_model

GPT2, V5E, V5P = get_model("gpt2"), get_chip("tpu-v5e"), get_chip("tpu-v5p")


def test_option_sets_vary_only_what_the_mesh_can_use():
    plan = MeshPlan({"pipeline": 2, "fsdp": 2, "model": 2})
    sets = option_sets(GPT2, plan, 16)  # 16 sequences over fsdp=2: 8 per group
    # microbatches: the divisors of 8 (1, 2, 4, 8) for GPipe and 1F1B; interleaved with v in {2, 3, 6} (v > 1
    # dividing the 6 layers a stage holds) needs M a multiple of the 2 stages: 2, 4, 8
    schedules = 4 + 4 + 3 * 3
    assert len(sets) == schedules * 3 * 2  # ZeRO 1, 2, 3 on fsdp; TP overlap off and on
    assert len(set(sets)) == len(sets)
    for opts in sets:
        check_train_plan(GPT2, plan, opts, 16, 1024)
    assert max(o.microbatches for o in sets) == 8  # all the divisors, not only up to 4 p
    flat = option_sets(GPT2, MeshPlan({"data": 4}), 16)  # no pipeline, fsdp or model axis: only microbatches
    assert [o.microbatches for o in flat] == [1, 2, 4] and {(o.schedule, o.zero, o.tp_overlap) for o in flat} == {
        ("1f1b", 3, False)}


def test_pricer_gives_train_plans_closed_form():
    pricer = Pricer(GPT2, V5E, 16, 1024)
    for mesh, opts in (({"fsdp": 4, "model": 2}, TrainOptions(zero=2, tp_overlap=True, checkpoint="selective")),
                       ({"pipeline": 2, "model": 4}, TrainOptions(microbatches=4, schedule="interleaved",
                                                                  virtual_stages=3)),
                       ({"pipeline": 4, "fsdp": 2}, TrainOptions(microbatches=8, schedule="gpipe", zero=1))):
        plan = MeshPlan(mesh)
        row = pricer.price(plan, opts)
        ref = train_plan(GPT2, V5E, 16, 1024, plan, opts, simulate=False, trace=False)
        for key in ("step_time_s", "memory_per_chip_bytes", "mfu", "fits", "bubble_fraction"):
            assert row[key] == ref[key], (mesh, key)


def test_search_picks_each_layouts_fastest_fitting_options():
    out = search(GPT2, V5E, 8, "train", 16, 1024, top=0)
    pricer = Pricer(GPT2, V5E, 16, 1024)
    assert out["candidates"] == sum(r["options_priced"] for r in out["plans"]) > out["layouts"]
    for row in out["plans"][:6]:
        plan = MeshPlan(row["mesh"])
        options = {k: v for k, v in row["options"].items()}
        assert (options["zero"] is None) == ("fsdp" not in row["mesh"])  # ZeRO shards over fsdp: n/a without it
        chosen = TrainOptions(**{k: v for k, v in options.items() if v is not None})
        assert pricer.price(plan, chosen)["step_time_s"] == row["step_time_s"]
        for opts in option_sets(GPT2, plan, 16):  # no option set that fits is faster
            for checkpoint in ("none", "minimal", "selective", "full"):
                other = pricer.price(plan, replace(opts, checkpoint=checkpoint))
                assert not other["fits"] or other["step_time_s"] >= row["step_time_s"]
    times = [r["step_time_s"] for r in out["plans"] if r["fits"]]
    assert times == sorted(times)


def test_search_checkpoints_or_splits_microbatches_only_to_fit():
    """llama-3-70b on 16 v5p chips, 32 x 4096 tokens: without checkpointing a layer saves (4 D + q + 2 kv + 3 F)
    elements per token, 2 bytes each, for 80 layers -- per chip 32 x 4096 / 16 tokens x 80 x 129,024 x 2 B,
    about 158 GiB, on top of the state: layouts that fit must checkpoint or accumulate microbatches."""
    cfg = get_model("llama-3-70b")
    per_chip_acts = 32 * 4096 / 16 * 80 * (4 * 8192 + 8192 + 2 * 1024 + 3 * 28672) * 2
    state = cfg.params() * (2 + 2 + 12) / 16  # weights, grads, Adam + master, fully sharded
    assert per_chip_acts + state > V5P.hbm_capacity_bytes
    out = search(cfg, V5P, 16, "train", 32, 4096, top=0)
    fitting = [r for r in out["plans"] if r["fits"]]
    assert fitting and all(r["memory_per_chip_bytes"] <= V5P.hbm_capacity_bytes for r in fitting)
    for row in fitting:
        o = row["options"]
        assert o["checkpoint"] != "none" or o["microbatches"] > 1 or "model" in row["mesh"] or "pipeline" in \
            row["mesh"] or "sequence" in row["mesh"]
    assert {tuple(sorted(r["mesh"].items())) for r in out["plans"]} <= {  # each row one of the layouts
        tuple(sorted((a, p.size(a)) for a in p.used)) for p in train_meshes(cfg, 16, 32, 4096)}


def test_plan_cli_reports_options_and_simulates_the_best(capsys):
    assert main(["plan", "gpt2", "--chip", "tpu-v5e", "--chips", "4", "--mode", "train", "--batch", "4", "--seq",
                 "256", "--top", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    top = out["plans"][:2]
    assert all(r["simulated"] for r in top) and not out["plans"][2]["simulated"]
    assert out["candidates"] == sum(r["options_priced"] for r in out["plans"])
    for row in out["plans"]:
        assert {"mesh", "step_time_s", "mfu", "memory_per_chip_bytes", "fits", "simulated", "options"} <= set(row)
        assert {"microbatches", "schedule", "zero", "checkpoint", "tp_overlap"} <= set(row["options"])
    for row in top:  # the simulated step of the chosen options, beside their closed form
        assert row["step_time_s"] == pytest.approx(row["closed_form_s"], rel=0.15)


def test_plan_serve_search_includes_2d_layouts(capsys):
    assert main(["plan", "llama-2-7b", "--chip", "tpu-v5e", "--chips", "8", "--mode", "prefill", "--batch", "8",
                 "--seq", "512", "--top", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    layouts = {(tuple(r["mesh"].items()), r["options"]["layout"]) for r in out["plans"]}
    # model=8: 1-D, and the grids X x Y = 8 with X dividing 4096 and Y the 32 heads and 11008 = 2^8 x 43
    assert {lay for mesh, lay in layouts if mesh == (("model", 8),)} >= {"1d", "2d:1x8", "2d:2x4", "2d:4x2"}
    assert out["candidates"] >= out["layouts"] == len(out["plans"])
    assert out["plans"][0]["simulated"]


def _sizes_fit(sizes: list[int], sides: list[int]) -> bool:
    """Can the mesh's axes each take whole physical sides (every side used once) with lengths multiplying to the
    axis size? Brute force over assignments of sides to axes."""
    import itertools

    for owner in itertools.product(range(len(sizes)), repeat=len(sides)):
        got = [1] * len(sizes)
        for side, axis in zip(sides, owner, strict=True):
            got[axis] *= side
        if got == sizes:
            return True
    return False


def test_search_lays_every_mesh_on_the_real_slice_and_zero_is_na_without_fsdp():
    """32 v5p chips are a 2x4x4 slice: a mesh whose axes cannot each take whole sides of it (data=2, fsdp=8,
    model=2: two axes of 2 but one side of 2) takes factors of a side instead of the fallback slice of its own
    shape, which no v5p slice has (issue 13), so every row lies on the real slice."""
    out = search(GPT2, V5P, 32, "train", 64, 1024, top=0)
    fitting = [r for r in out["plans"] if r["fits"]]
    assert any(not _sizes_fit(list(r["mesh"].values()), [2, 4, 4]) for r in fitting)  # some rows split a side
    for row in out["plans"]:
        assert row["real_slice"], row["mesh"]
        assert (row["options"]["zero"] is None) == ("fsdp" not in row["mesh"])
    times = [r["step_time_s"] for r in fitting]
    assert times == sorted(times)


def test_search_tries_the_minimal_checkpoint_policy():
    """minimal keeps every matmul output (no matmul recomputed): where the search picks it, keeping everything
    (none) does not fit, and selective -- which recomputes the MLP's up-projections -- is no faster."""
    cfg = get_model("llama-3-70b")
    out = search(cfg, V5P, 16, "train", 32, 4096, top=0)
    pricer = Pricer(cfg, V5P, 32, 4096)
    chosen = [r for r in out["plans"] if r["fits"] and r["options"]["checkpoint"] == "minimal"]
    assert chosen
    for row in chosen:
        opts = TrainOptions(**{k: v for k, v in row["options"].items() if v is not None})
        plan = MeshPlan(row["mesh"])
        assert not pricer.price(plan, replace(opts, checkpoint="none"))["fits"]
        assert pricer.price(plan, replace(opts, checkpoint="selective"))["step_time_s"] >= row["step_time_s"]
