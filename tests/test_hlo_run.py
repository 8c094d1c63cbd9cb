"""Compiled programs on a pod (no JAX; stored fixtures): FLOPs and bytes against XLA's cost_analysis(), the
book's sharded matmuls against podsim's own strategies, async overlap, loops, placement, bad input, the CLI,
and a Transformer block's training step against the transformer_step plan.

Oracles: XLA's own figures (tests/data/hlo/cost_analysis.json), closed forms from the chip's numbers
(padded FLOPs over the MXU peak, bytes over HBM or link bandwidth), and podsim's collectives run on
their own (`run_collective`), never the executor's output.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from simulator import analytic
from simulator.collectives import run_collective
from simulator.engine.system import System
from simulator.errors import PodsimError
from simulator.frontend.cli import main
from simulator.frontend.hlo import simulate_hlo
from simulator.hardware.specs import get_chip
from simulator.workloads.hlo import parse_hlo, read_hlo
from simulator.workloads.hlo.cost import Costing, program_totals
from simulator.workloads.mesh import Mesh
from simulator.workloads.sharding import parse_matmul, sharded_matmul, strategies

DATA = Path(__file__).parent / "data" / "hlo"
XLA = json.loads((DATA / "cost_analysis.json").read_text())
V5E = get_chip("tpu-v5e")
SIZES = {"I": 1024, "J": 2048, "K": 4096}
CASES = {"matmul_case1": "A[I_X,J]@B[J,K_Y]->C[I_X,K_Y]", "matmul_case2": "A[I,J_X]@B[J,K]",
         "matmul_case3": "A[I,J_X]@B[J_X,K]->C[I,K]", "matmul_case4": "A[I_X,J]@B[J,K_X]"}


def dot_s(m: int, k: int, n: int, elem: int = 2) -> float:
    """A [m, k] @ [k, n] op on one v5e: the longer of the MXU (padded FLOPs) and HBM (operands + result)."""
    mxu = analytic.padded_matmul_flops(m, k, n, V5E.mxu_dim, V5E.sublanes) / V5E.peak_bf16_flops_per_s
    return max(mxu, elem * (m * k + k * n + m * n) / V5E.hbm_bandwidth_bytes_per_s)


@pytest.mark.parametrize("name", sorted(n for n in XLA if not n.startswith("_")))
def test_flops_and_bytes_match_xla_cost_analysis(name: str):
    """As compiled, loop bodies once: XLA's own accounting. Scalar index arithmetic may differ by a few FLOPs
    and bytes (below 1e-5 of the total)."""
    totals = program_totals(Costing(read_hlo(DATA / f"{name}.txt"), "compiled"), unroll=False)
    xla = XLA[name]
    assert totals["flops"] == pytest.approx(xla["flops"], rel=1e-6, abs=32)
    assert totals["transcendentals"] == xla["transcendentals"]
    assert totals["bytes"] == pytest.approx(xla["bytes accessed"], rel=1e-4)


def test_dot_flops_from_shapes_and_loops_unrolled():
    case3 = program_totals(Costing(read_hlo(DATA / "matmul_case3.txt")))
    assert case3["matmul_flops"] == 2 * 1024 * 512 * 4096  # [I, J/4] @ [J/4, K] on each device
    scan = read_hlo(DATA / "scan.txt")
    once, unrolled = program_totals(Costing(scan), unroll=False), program_totals(Costing(scan))
    assert unrolled["matmul_flops"] == 4 * once["matmul_flops"] == 4 * 2 * 64 * 512 * 256  # 4 layers


def test_source_dtype_halves_what_the_cpu_backend_widened():
    module = read_hlo(DATA / "matmul_case3.txt")
    source, compiled = program_totals(Costing(module, "source")), program_totals(Costing(module, "compiled"))
    assert source["collective_bytes"] == 2 * 1024 * 4096 * 2  # the AllReduce's operand and result in bf16
    assert compiled["collective_bytes"] == 2 * source["collective_bytes"]  # f32 as compiled on the CPU
    with pytest.raises(PodsimError, match="dtype='fp16'; valid: source, compiled"):
        Costing(module, "fp16")


def test_only_the_compilers_converts_are_undone():
    """A convert the program asked for (``astype``: convert_element_type in its metadata) stays."""
    def program(metadata: str) -> str:
        return ("HloModule m, num_partitions=2\n\nENTRY %main (p: bf16[64,64]) -> f32[64,64] {\n"
                "  %p = bf16[64,64]{1,0} parameter(0)\n"
                f"  %c = f32[64,64]{{1,0}} convert(%p){metadata}\n"
                "  ROOT %ar = f32[64,64]{1,0} all-reduce(%c), replica_groups={{0,1}}, to_apply=%main\n}\n")

    inserted = program_totals(Costing(parse_hlo(program(""))))
    asked = program_totals(Costing(parse_hlo(program(', metadata={op_name="jit(f)/convert_element_type"}'))))
    assert inserted["collective_bytes"] == 2 * 64 * 64 * 2 and inserted["bytes"] == inserted["collective_bytes"]
    assert asked["collective_bytes"] == 2 * 64 * 64 * 4 and asked["bytes"] == asked["collective_bytes"] + 64 * 64 * 6


@pytest.mark.parametrize("name", sorted(CASES))
def test_book_matmuls_run_podsim_strategy_collectives_in_the_same_time(name: str):
    """XLA picks the collectives podsim's chosen strategy runs; the step takes the strategy's time, plus
    the HBM time the local matmul needs beyond its MXU time (podsim's strategies keep operands resident)."""
    text = CASES[name]
    pm = sharded_matmul(text, SIZES, "X=4,Y=2", "tpu-v5e", verify=False)
    row = next(s for s in pm["strategies"] if s["name"] == pm["chosen"])
    chosen = next(s for s in strategies(parse_matmul(text)) if s.name == pm["chosen"])
    result = simulate_hlo(DATA / f"{name}.txt", mesh="X=4,Y=2")
    want = sorted((s.kind, ",".join(s.axes)) for s in chosen.pre + chosen.post if s.kind != "slice")
    got = sorted((c["kind"], c["over"].removeprefix("mesh axes ")) for c in result["collectives"])
    assert got == want
    split = {"X": 4, "Y": 2}
    m = SIZES["I"] // math.prod(split[a] for a in chosen.a[0])
    k = SIZES["J"] // math.prod(split[a] for a in chosen.a[1])
    n = SIZES["K"] // math.prod(split[a] for a in chosen.b[1])
    mxu = analytic.padded_matmul_flops(m, k, n, V5E.mxu_dim, V5E.sublanes) / V5E.peak_bf16_flops_per_s
    assert result["step_time_s"] == pytest.approx(row["time_s"] + dot_s(m, k, n) - mxu, rel=1e-9)
    if name != "matmul_case1":  # compute-bound local matmuls: the very same time
        assert result["step_time_s"] == pytest.approx(row["time_s"], rel=1e-9)


def collective_s(kind: str, nbytes: float, axis: str) -> float:
    system = System("tpu-v5e", topology="torus:4x2")
    return run_collective(kind, system, nbytes, axes=[axis], mesh=Mesh("X=4,Y=2", system.graph)).time_s


def test_async_pairs_overlap_compute_between_start_and_done():
    """TPU spelling: each async collective runs beside the compute between its start and its done."""
    result = simulate_hlo(DATA / "async_tpu_style.txt", mesh="X=4,Y=2", topology="torus:4x2")
    hbm, vpu = V5E.hbm_bandwidth_bytes_per_s, V5E.vpu_flops_per_s
    act = max(2 * 256 * 1024 * 2 / hbm, 256 * 1024 / vpu)  # tanh: read and write, one op per element
    mix = max(3 * 256 * 1024 * 2 / hbm, 256 * 1024 / vpu)  # add: two reads, one write
    hop = 1e-6 + 256 * 1024 * 2 / 45e9  # every permute pair is one torus hop: latency + bytes / link
    want = (max(dot_s(256, 1024, 2048), collective_s("all_gather", 1024 * 2048 * 2, "X"))
            + dot_s(256, 2048, 1024) + collective_s("all_reduce", 256 * 1024 * 2, "Y")
            + max(act, hop) + mix + collective_s("reduce_scatter", 256 * 1024 * 2, "X"))
    assert result["step_time_s"] == pytest.approx(want, rel=1e-9)
    kinds = {c["name"]: (c["kind"], c.get("over")) for c in result["collectives"]}
    assert kinds["reduce-scatter-start"] == ("reduce_scatter", "mesh axes X")  # an async-start wrapper
    assert kinds["collective-permute-start"] == ("collective_permute", None)
    top = {row["name"]: row for row in result["top_ops"]}
    assert top["up"]["source"] == "model.py:10" and top["up"]["kind"] == "matmul"  # a convolution in a fusion


def test_loops_unroll_by_trip_count_and_say_when_it_is_unknown():
    text = (DATA / "scan.txt").read_text()
    assert '"known_trip_count":{"n":"4"}' in text
    times = {n: simulate_hlo(text.replace('"n":"4"', f'"n":"{n}"'), mesh="X=4,Y=2")["step_time_s"]
             for n in (2, 4, 8)}
    per_trip = (times[4] - times[2]) / 2
    assert per_trip > 0 and times[8] - times[4] == pytest.approx(4 * per_trip, rel=1e-9)
    result = simulate_hlo(text, mesh="X=4,Y=2")
    assert [(c["kind"], c["count"]) for c in result["collectives"]] == [("all_gather", 4)]
    unknown = simulate_hlo(text.replace('"known_trip_count":{"n":"4"}', '"x":{}'), mesh="X=4,Y=2")
    assert unknown["step_time_s"] == pytest.approx(times[2] - per_trip, rel=1e-9)
    assert any("no known trip count" in w and "ran once" in w for w in unknown["warnings"])


def test_placement_decides_which_links_a_collective_uses():
    mesh = simulate_hlo(DATA / "matmul_case3.txt", mesh="X=4,Y=2", topology="torus:4x2")
    listed = simulate_hlo(DATA / "matmul_case3.txt", placement=list(range(8)), topology="torus:4x2")
    assert listed["collectives"][0]["over"] == "explicit groups"  # a ring of chips 0,2,4,6, closed by 6-0
    assert listed["step_time_s"] == pytest.approx(mesh["step_time_s"], rel=1e-9)
    # X groups laid across the torus's Y axis and back: every ring step of the AllReduce crosses more links
    scattered = simulate_hlo(DATA / "matmul_case3.txt", placement=[0, 2, 1, 3, 4, 6, 5, 7], topology="torus:4x2")
    assert scattered["step_time_s"] > mesh["step_time_s"]


@pytest.mark.parametrize("kwargs, fragment", [
    ({"topology": "torus:4x4"}, "runs on 8 device(s) but the topology has 16 chips"),
    ({"mesh": "X=2,Y=2", "topology": "torus:2x2"}, "runs on 8 device(s) but the topology has 4 chips"),
    ({"placement": [0, 1, 2], "topology": "torus:4x2"}, "placement lists 3 chip(s)"),
    ({"placement": [0, 0, 1, 2, 3, 4, 5, 6], "topology": "torus:4x2"}, "repeated: [0]"),
    ({}, "give a topology"),
])
def test_a_program_that_does_not_fit_the_pod_is_a_clear_error(kwargs: dict, fragment: str):
    with pytest.raises(PodsimError, match=fragment.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")
                       .replace(")", r"\)")):
        simulate_hlo(DATA / "matmul_case3.txt", **kwargs)


def test_unsupported_ops_are_skipped_out_loud_with_their_cost():
    result = simulate_hlo(DATA / "unsupported_op.txt", topology="ring:2")
    (skipped,) = result["skipped"]
    assert (skipped["name"], skipped["opcode"], skipped["target"]) == ("kernel", "custom-call", "my_pallas_kernel")
    assert skipped["bytes"] == 2 * 128 * 256 * 4  # reads its operand, writes its result
    assert skipped["would_take_s"] == pytest.approx(skipped["bytes"] / V5E.hbm_bandwidth_bytes_per_s)
    (warning,) = result["warnings"]
    assert "skipped %kernel (custom-call my_pallas_kernel, line 5" in warning and "262,144 bytes" in warning
    negate = max(2 * 128 * 256 * 4 / V5E.hbm_bandwidth_bytes_per_s, 128 * 256 / V5E.vpu_flops_per_s)
    assert result["step_time_s"] == pytest.approx(negate, rel=1e-9)  # the negate alone


def test_transformer_block_training_step_against_the_plans():
    """FSDP x tensor parallelism on fsdp=4, model=2, against the transformer_step plan of the same block on
    data=4, model=2 (weights whole on every data-parallel chip) and the ZeRO-3 plan on fsdp=4, model=2.
    Same as both: the activations' AllReduce over the model axis (tokens x D in bf16) and every weight of
    the chip's model shard reduced over the data/fsdp axis once. Different: XLA needs no AllReduce for the
    block input's gradient (nothing asks for it: 3 instead of 4), reduces the gradients with an AllReduce
    and a slice where ZeRO-3 reduce-scatters, and the CPU schedule runs every collective in line, where
    the plans overlap gradient reductions with the backward pass -- so the program takes longer."""
    from simulator.workloads.budget import Parallelism
    from simulator.workloads.plans import TrainOptions, parse_plan_mesh, train_plan
    from simulator.workloads.simulate import simulate_train
    from simulator.workloads.transformer import TransformerConfig

    b, s, d, h, k, f = 8, 256, 512, 8, 64, 2048
    result = simulate_hlo(DATA / "block_train.txt", mesh="fsdp=4,model=2")
    rows = result["collectives"]
    activations = [c for c in rows if c["kind"] == "all_reduce" and c["over"] == "mesh axes model"]
    assert len(activations) == 3 and {c["bytes"] for c in activations} == {b // 4 * s * d * 2}
    grads = [c for c in rows if c["kind"] in ("all_reduce", "reduce_scatter") and c["over"] == "mesh axes fsdp"]
    weights_per_chip = (4 * d * h * k + 2 * d * f) // 2 * 2  # bf16, split over model=2
    assert sum(c["bytes"] for c in grads) == weights_per_chip
    gathers = [c for c in rows if c["kind"] == "all_gather"]
    assert {c["over"] for c in gathers} == {"mesh axes fsdp"}
    assert sum(c["bytes"] for c in gathers) >= weights_per_chip  # every weight gathered at least once
    cfg = TransformerConfig(name="block", d_model=d, n_heads=h, head_dim=k, d_ff=f, n_layers=1, vocab_size=2,
                            gated_mlp=False)
    data_parallel = simulate_train(cfg, V5E, b, s, Parallelism(data=4, model=2)).env.now
    zero3 = train_plan(cfg, V5E, b, s, parse_plan_mesh("fsdp=4,model=2"), TrainOptions(zero=3))["step_time_s"]
    overlapped = simulate_hlo(DATA / "block_train.txt", mesh="fsdp=4,model=2", async_collectives=True)
    assert data_parallel < zero3 < overlapped["step_time_s"] < result["step_time_s"]
    in_line = sum(row["time_s"] for row in result["breakdown"].values())
    assert result["step_time_s"] == pytest.approx(in_line, rel=1e-9)  # nothing overlaps in the CPU schedule


def test_cli_text_json_and_bad_input(capsys: pytest.CaptureFixture[str], tmp_path: Path):
    path = str(DATA / "matmul_case3.txt")
    assert main(["hlo", path, "--mesh", "X=4,Y=2", "--chip", "tpu-v5e"]) == 0
    text = capsys.readouterr().out
    assert "time by op kind" in text and "%all-reduce" in text and "tests/hlo_programs.py:" in text
    assert main(["hlo", path, "--topology", "torus:4x2", "--mesh", "X=4,Y=2", "--json",
                 "--trace", str(tmp_path / "t.json")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["scenario"] == "hlo" and set(out["breakdown"]) == {"matmul", "all_reduce"}
    assert out["step_time_s"] == out["end_to_end_s"] > 0 and (tmp_path / "t.json").stat().st_size > 0
    for argv, fragment in ((["hlo", str(DATA / "bad_syntax.txt"), "--topology", "ring:2"], "bad_syntax.txt:5:35:"),
                           (["hlo", path, "--topology", "torus:4x4"], "16 chips"),
                           (["hlo", path], "needs --topology"),
                           (["hlo", path, "--mesh", "X=4,Y=2", "--placement", "0,x"], "--placement"),
                           (["hlo", path, "--mesh", "X=4,Y=2", "--dtype", "f8"], "invalid choice")):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and fragment in err and "Traceback" not in err


def test_docs_hlo_commands_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    section = (Path(__file__).resolve().parents[1] / "docs" / "guide" / "compiled_jax.md").read_text()
    commands = [line.split("#")[0].split() for line in section.splitlines() if line.startswith("podsim hlo ")]
    assert len(commands) == 3
    monkeypatch.chdir(tmp_path)
    for argv in commands:
        argv = [str(DATA / "matmul_case3.txt") if a == "step.txt" else a for a in argv[1:]]
        assert main(argv) == 0
        assert "jit__lambda" in capsys.readouterr().out
    assert (tmp_path / "step.png").stat().st_size > 0 and (tmp_path / "step.json").stat().st_size > 0
