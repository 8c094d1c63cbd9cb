"""The JAX round trip: programs compiled live on fake CPU devices, then simulated (few and fast: one JAX
start, a handful of small compiles).

CI installs the dev extra, which brings JAX, so there a missing JAX fails; elsewhere these tests skip
without the ``jax`` extra. Oracles: XLA's own ``cost_analysis()`` and collectives, podsim's sharding
strategies and the transformer_step plan (the fixture tests in test_hlo_run.py state the same checks).
"""
from __future__ import annotations

import math
import os

import pytest

if os.environ.get("CI"):
    import jax  # noqa: F401  (the dev extra has it: no silent skip in CI)
else:
    pytest.importorskip("jax", reason="the JAX round trip needs the jax extra: pip install -e '.[jax]'")

import hlo_programs as hp

from simulator import analytic
from simulator.errors import PodsimError
from simulator.frontend.hlo import simulate_hlo
from simulator.frontend.hlo_jax import compile_jax, simulate_jax
from simulator.hardware.specs import get_chip
from simulator.workloads.hlo import parse_hlo
from simulator.workloads.hlo.cost import Costing, program_totals
from simulator.workloads.sharding import parse_matmul, sharded_matmul, strategies

V5E = get_chip("tpu-v5e")


@pytest.mark.parametrize("name", sorted(hp.MATMUL_CASES))
def test_book_cases_compile_to_podsim_strategies(name: str):
    text = hp.MATMUL_CASES[name]
    pm = sharded_matmul(text, hp.SIZES, hp.MESH, "tpu-v5e", verify=False)
    row = next(s for s in pm["strategies"] if s["name"] == pm["chosen"])
    chosen = next(s for s in strategies(parse_matmul(text)) if s.name == pm["chosen"])
    fn, args, out = hp.matmul_program(text, row["output"].replace(" ", ""))
    program = compile_jax(fn, *args, mesh=hp.MESH, out_specs=out)
    totals = program_totals(Costing(parse_hlo(program.text), "compiled"), unroll=False)
    assert totals["flops"] == program.cost_analysis["flops"]
    assert totals["bytes"] == program.cost_analysis["bytes accessed"]
    result = simulate_hlo(program.text, mesh=hp.MESH)
    want = sorted((s.kind, ",".join(s.axes)) for s in chosen.pre + chosen.post if s.kind != "slice")
    assert sorted((c["kind"], c["over"].removeprefix("mesh axes ")) for c in result["collectives"]) == want
    split = {"X": 4, "Y": 2}
    m, k, n = (hp.SIZES[d] // math.prod(split[a] for a in axes)
               for d, axes in (("I", chosen.a[0]), ("J", chosen.a[1]), ("K", chosen.b[1])))
    mxu = analytic.padded_matmul_flops(m, k, n, V5E.mxu_dim, V5E.sublanes) / V5E.peak_bf16_flops_per_s
    hbm = 2 * (m * k + k * n + m * n) / V5E.hbm_bandwidth_bytes_per_s
    assert result["step_time_s"] == pytest.approx(row["time_s"] + max(0.0, hbm - mxu), rel=1e-9)


def test_loop_bodies_count_once_in_xla_and_per_trip_in_podsim():
    fn, args, out = hp.scan_program(layers=3)
    program = compile_jax(fn, *args, mesh=hp.MESH, out_specs=out)
    module = parse_hlo(program.text)
    once = program_totals(Costing(module, "compiled"), unroll=False)
    assert once["flops"] == pytest.approx(program.cost_analysis["flops"], abs=32)
    assert program_totals(Costing(module))["matmul_flops"] == 3 * once["matmul_flops"] == 3 * 2 * 64 * 512 * 256


def test_transformer_block_runs_end_to_end():
    """The block's forward pass (a prefill) with FSDP x tensor parallelism against the transformer_step
    plan of the same block: both AllReduce the activations over the model axis twice (after attention and
    after the MLP); XLA also gathers every FSDP-split weight over the fsdp axis, which the plan (weights
    whole on every data-parallel chip) does not, so the program takes longer. The training step is
    compared in test_hlo_run.py (stored fixture: its compile takes seconds)."""
    from simulator.workloads.budget import Parallelism
    from simulator.workloads.simulate import simulate_decode
    from simulator.workloads.transformer import TransformerConfig

    fn, args, out = hp.block_forward_program()
    result = simulate_jax(fn, *args, mesh=hp.BLOCK_MESH, out_specs=out, chip="tpu-v5e")
    assert result["per_device_as_compiled"]["flops"] == pytest.approx(result["xla_cost_analysis"]["flops"], abs=32)
    b, s, d, h, k, f = (hp.BLOCK[x] for x in "BSDHKF")
    rows = result["collectives"]
    activations = [c["bytes"] for c in rows if c["kind"] == "all_reduce" and c["over"] == "mesh axes model"]
    assert activations == [b // 4 * s * d * 2] * 2  # tokens of a data group x D, in bf16
    gathered = [c["bytes"] for c in rows if c["kind"] == "all_gather" and c["over"] == "mesh axes fsdp"]
    assert sum(gathered) == (4 * d * h * k + 2 * d * f) // 2 * 2  # every weight of a model shard, once
    cfg = TransformerConfig(name="block", d_model=d, n_heads=h, head_dim=k, d_ff=f, n_layers=1, vocab_size=2,
                            gated_mlp=False)
    plan = simulate_decode(cfg, V5E, b, 0, Parallelism(data=4, model=2), new_tokens=s)
    assert plan.env.now < result["step_time_s"]


def test_bad_arguments_say_what_to_give():
    with pytest.raises(PodsimError, match=r"give a jax.ShapeDtypeStruct or \(shape, dtype, spec\)"):
        compile_jax(lambda a: a, (8, 8), mesh="X=2")
    with pytest.raises(PodsimError, match="placement"):
        compile_jax(lambda a: a, ((8, 8), "fp32", (None, None)), mesh="X=2@0")


def test_docs_python_example(capsys: pytest.CaptureFixture[str]):
    from pathlib import Path

    section = (Path(__file__).resolve().parents[1] / "docs" / "guide" / "compiled_jax.md").read_text()
    block = section.split("```py\n")[1].split("```")[0]
    exec(compile(block, "compiled_jax.md", "exec"), {})
    assert "258.5 us per step" in capsys.readouterr().out  # the number its comment gives
