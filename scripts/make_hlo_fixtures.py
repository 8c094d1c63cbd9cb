"""Write the HLO text fixtures of tests/data/hlo/ (run from the repository root: python scripts/make_hlo_fixtures.py).

Compiled with JAX on fake CPU devices (needs the ``jax`` extra): the book's four sharded-matmul cases, a
``lax.scan`` over layers, an AllToAll, a collective-permute and a Transformer block's training step
with FSDP and tensor parallelism (programs in tests/hlo_programs.py). XLA's own ``cost_analysis()`` of
each goes to ``cost_analysis.json`` beside them, so the reader's tests compare against it without JAX.
Source paths in the metadata are made relative to the repository.

Written by hand (the CPU backend prints no asynchronous collectives): ``async_tpu_style.txt`` in the
spelling TPU dumps use -- ``all-gather-start``/``-done``, ``all-reduce-start``/``-done``,
``collective-permute-start``/``-done``, an ``async-start`` wrapping a reduce-scatter, operands with
their shapes, tiled layouts, iota replica groups, ``/*index=5*/`` comments and ``source_file``
metadata -- and two bad inputs: an op podsim does not model (a custom-call) and a line that does not parse.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "data" / "hlo"
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

ASYNC = """\
HloModule async_tpu_style, is_scheduled=true, entry_computation_layout={(bf16[256,1024]{1,0}, bf16[1024,2048]{1,0}, bf16[256,2048]{1,0})->(bf16[64,1024]{1,0}, bf16[256,1024]{1,0}, bf16[256,1024]{1,0}, bf16[256,1024]{1,0}, bf16[256,2048]{1,0}, /*index=5*/bf16[1024,2048]{1,0})}, num_partitions=8

%add (x: bf16[], y: bf16[]) -> bf16[] {
  %x = bf16[] parameter(0)
  %y = bf16[] parameter(1)
  ROOT %sum = bf16[] add(bf16[] %x, bf16[] %y)
}

%fused_up (p0: bf16[256,1024], p1: bf16[1024,2048]) -> bf16[256,2048] {
  %p0 = bf16[256,1024]{1,0:T(8,128)(2,1)} parameter(0)
  %p1 = bf16[1024,2048]{1,0:T(8,128)(2,1)} parameter(1)
  ROOT %conv = bf16[256,2048]{1,0:T(8,128)(2,1)} convolution(bf16[256,1024]{1,0:T(8,128)(2,1)} %p0, bf16[1024,2048]{1,0:T(8,128)(2,1)} %p1), dim_labels=bf_io->bf
}

%fused_down (p0.1: bf16[256,2048], p1.1: bf16[1024,2048]) -> bf16[256,1024] {
  %p0.1 = bf16[256,2048]{1,0} parameter(0)
  %p1.1 = bf16[1024,2048]{1,0} parameter(1)
  ROOT %dot = bf16[256,1024]{1,0} dot(bf16[256,2048]{1,0} %p0.1, bf16[1024,2048]{1,0} %p1.1), lhs_contracting_dims={1}, rhs_contracting_dims={1}
}

%fused_tanh (p0.2: bf16[256,1024]) -> bf16[256,1024] {
  %p0.2 = bf16[256,1024]{1,0} parameter(0)
  ROOT %tanh = bf16[256,1024]{1,0} tanh(bf16[256,1024]{1,0} %p0.2)
}

%fused_add (p0.3: bf16[256,1024], p1.3: bf16[256,1024]) -> bf16[256,1024] {
  %p0.3 = bf16[256,1024]{1,0} parameter(0)
  %p1.3 = bf16[256,1024]{1,0} parameter(1)
  ROOT %add.1 = bf16[256,1024]{1,0} add(bf16[256,1024]{1,0} %p0.3, bf16[256,1024]{1,0} %p1.3)
}

%reduce_scatter_body (p0.4: bf16[256,1024]) -> bf16[64,1024] {
  %p0.4 = bf16[256,1024]{1,0} parameter(0)
  ROOT %reduce-scatter = bf16[64,1024]{1,0} reduce-scatter(bf16[256,1024]{1,0} %p0.4), channel_id=4, replica_groups=[2,4]<=[4,2]T(1,0), dimensions={0}, use_global_device_ids=true, to_apply=%add
}

ENTRY %main (x: bf16[256,1024], w1: bf16[1024,2048], w2: bf16[256,2048]) -> (bf16[64,1024], bf16[256,1024], bf16[256,1024], bf16[256,1024], bf16[256,2048], /*index=5*/bf16[1024,2048]) {
  %x = bf16[256,1024]{1,0} parameter(0), sharding={devices=[4,1,2]<=[8] last_tile_dim_replicate}, metadata={op_name="x"}
  %w1 = bf16[1024,2048]{1,0} parameter(1), sharding={replicated}, metadata={op_name="w1"}
  %w2 = bf16[256,2048]{1,0} parameter(2), sharding={devices=[4,1,2]<=[8] last_tile_dim_replicate}, metadata={op_name="w2"}
  %all-gather-start = (bf16[256,2048]{1,0}, bf16[1024,2048]{1,0}) all-gather-start(bf16[256,2048]{1,0} %w2), channel_id=1, replica_groups=[2,4]<=[4,2]T(1,0), dimensions={0}, use_global_device_ids=true, metadata={op_name="jit(step)/all_gather" source_file="model.py" source_line=12}
  %up = bf16[256,2048]{1,0:T(8,128)(2,1)} fusion(bf16[256,1024]{1,0} %x, bf16[1024,2048]{1,0} %w1), kind=kOutput, calls=%fused_up, metadata={op_name="jit(step)/dot_general" source_file="model.py" source_line=10}
  %all-gather-done = bf16[1024,2048]{1,0} all-gather-done((bf16[256,2048]{1,0}, bf16[1024,2048]{1,0}) %all-gather-start), metadata={op_name="jit(step)/all_gather" source_file="model.py" source_line=12}
  %down = bf16[256,1024]{1,0} fusion(bf16[256,2048]{1,0} %up, bf16[1024,2048]{1,0} %all-gather-done), kind=kOutput, calls=%fused_down, metadata={op_name="jit(step)/dot_general" source_file="model.py" source_line=13}
  %all-reduce-start = bf16[256,1024]{1,0} all-reduce-start(bf16[256,1024]{1,0} %down), channel_id=2, replica_groups={{0,1},{2,3},{4,5},{6,7}}, use_global_device_ids=true, to_apply=%add, metadata={op_name="jit(step)/psum" source_file="model.py" source_line=14}
  %all-reduce-done = bf16[256,1024]{1,0} all-reduce-done(bf16[256,1024]{1,0} %all-reduce-start)
  %collective-permute-start = (bf16[256,1024]{1,0}, bf16[256,1024]{1,0}, u32[]{:S(2)}, u32[]{:S(2)}) collective-permute-start(bf16[256,1024]{1,0} %all-reduce-done), channel_id=3, source_target_pairs={{0,2},{2,4},{4,6},{6,0},{1,3},{3,5},{5,7},{7,1}}, metadata={op_name="jit(step)/ppermute" source_file="model.py" source_line=15}
  %act = bf16[256,1024]{1,0} fusion(bf16[256,1024]{1,0} %all-reduce-done), kind=kLoop, calls=%fused_tanh, metadata={op_name="jit(step)/tanh" source_file="model.py" source_line=16}
  %collective-permute-done = bf16[256,1024]{1,0} collective-permute-done((bf16[256,1024]{1,0}, bf16[256,1024]{1,0}, u32[]{:S(2)}, u32[]{:S(2)}) %collective-permute-start)
  %mix = bf16[256,1024]{1,0} fusion(bf16[256,1024]{1,0} %act, bf16[256,1024]{1,0} %collective-permute-done), kind=kLoop, calls=%fused_add, metadata={op_name="jit(step)/add" source_file="model.py" source_line=17}
  %reduce-scatter-start = ((bf16[256,1024]{1,0}), bf16[64,1024]{1,0}) async-start(bf16[256,1024]{1,0} %mix), calls=%reduce_scatter_body, metadata={op_name="jit(step)/psum_scatter" source_file="model.py" source_line=18}
  %reduce-scatter-done = bf16[64,1024]{1,0} async-done(((bf16[256,1024]{1,0}), bf16[64,1024]{1,0}) %reduce-scatter-start)
  ROOT %out = (bf16[64,1024]{1,0}, bf16[256,1024]{1,0}, bf16[256,1024]{1,0}, bf16[256,1024]{1,0}, bf16[256,2048]{1,0}, /*index=5*/bf16[1024,2048]{1,0}) tuple(bf16[64,1024]{1,0} %reduce-scatter-done, bf16[256,1024]{1,0} %mix, bf16[256,1024]{1,0} %act, bf16[256,1024]{1,0} %down, bf16[256,2048]{1,0} %up, /*index=5*/bf16[1024,2048]{1,0} %all-gather-done)
}
"""  # noqa: E501  (HLO lines are as long as XLA prints them)

UNSUPPORTED = """\
HloModule unsupported_op, entry_computation_layout={(f32[128,256]{1,0})->f32[128,256]{1,0}}, num_partitions=2

ENTRY %main (p: f32[128,256]) -> f32[128,256] {
  %p = f32[128,256]{1,0} parameter(0)
  %kernel = f32[128,256]{1,0} custom-call(f32[128,256]{1,0} %p), custom_call_target="my_pallas_kernel"
  ROOT %neg = f32[128,256]{1,0} negate(f32[128,256]{1,0} %kernel)
}
"""  # noqa: E501  (HLO lines are as long as XLA prints them)

BAD_SYNTAX = """\
HloModule bad_syntax, num_partitions=2

ENTRY %main (p: f32[8,8]) -> f32[8,8] {
  %p = f32[8,8]{1,0} parameter(0)
  ROOT %neg = f32[8,8]{1,0} negate(%p
}
"""  # noqa: E501  (HLO lines are as long as XLA prints them)


def compiled() -> dict[str, tuple]:
    """name -> (function, arguments, output specs, mesh) of every program compiled with JAX."""
    import hlo_programs as hp

    from simulator.workloads.sharding import sharded_matmul

    out = {}
    for name, text in hp.MATMUL_CASES.items():
        chosen = sharded_matmul(text, hp.SIZES, hp.MESH, "tpu-v5e", verify=False)
        row = next(s for s in chosen["strategies"] if s["name"] == chosen["chosen"])
        out[name] = (*hp.matmul_program(text, row["output"].replace(" ", "")), hp.MESH)
    out["scan"] = (*hp.scan_program(), hp.MESH)
    out["all_to_all"] = (*hp.all_to_all_program(), hp.MESH)
    out["permute"] = (*hp.permute_program(), hp.MESH)
    out["block_train"] = (*hp.block_train_program(), hp.BLOCK_MESH)
    return out


def main() -> None:
    import jax

    from simulator.frontend.hlo_jax import compile_jax

    OUT.mkdir(parents=True, exist_ok=True)
    costs = {}
    for name, (fn, args, out_specs, mesh) in compiled().items():
        program = compile_jax(fn, *args, mesh=mesh, out_specs=out_specs)
        (OUT / f"{name}.txt").write_text(program.text.replace(f'"{ROOT}/', '"'))
        costs[name] = {"mesh": mesh, **{k: program.cost_analysis.get(k, 0.0)
                                        for k in ("flops", "transcendentals", "bytes accessed")}}
        print(f"{name}: {len(program.text.splitlines())} lines, {costs[name]}")
    costs["_about"] = {"jax": jax.__version__, "note": "XLA's compiled.cost_analysis() of each fixture"}
    (OUT / "cost_analysis.json").write_text(json.dumps(costs, indent=2, sort_keys=True) + "\n")
    for name, text in (("async_tpu_style", ASYNC), ("unsupported_op", UNSUPPORTED), ("bad_syntax", BAD_SYNTAX)):
        (OUT / f"{name}.txt").write_text(text)


if __name__ == "__main__":
    main()
