"""Regenerate docs/bad_inputs.md: every catalogued bad input with the one-line error podsim gives.

``python scripts/make_bad_inputs.py`` runs each command in-process from the repository root (the
files it names live in tests/data) and writes the table; tests/test_bad_inputs.py holds the table
to the same behaviour, so the documentation cannot drift from the code.
"""
from __future__ import annotations

import contextlib
import io
import shlex
import sys
from pathlib import Path

from simulator.frontend.cli import main

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "bad_inputs.md"

#: (area, command without the leading "podsim")
CASES: list[tuple[str, str]] = [
    ("CLI", "frobnicate"),
    ("CLI", "run"),
    ("CLI", "run no_such_scenario"),
    ("CLI", "run double_buffer --set blocks"),
    ("CLI", "run double_buffer --set colour=red"),
    ("CLI", "run double_buffer --chip tpu-v9"),
    ("CLI", "run double_buffer --trace /no/such/folder/t.json"),
    ("CLI", "roofline --chip tpu-v5e"),
    ("CLI", "roofline --chip tpu-v5e --matmul 1,2"),
    ("CLI", "roofline --chip tpu-v5e --flops 1e12 --bytes=-5GB"),
    ("CLI", "roofline --chip tpu-v5e --matmul 8,8,8 --dtype fp16"),
    ("quantities", "run double_buffer --set load_s=abc"),
    ("quantities", "run double_buffer --set load_s=5MB"),
    ("quantities", "run double_buffer --set load_bytes=34Mb"),
    ("quantities", "run double_buffer --set load_s=nan"),
    ("quantities", "run double_buffer --set load_bytes=inf"),
    ("quantities", "collective all_gather --topology ring:8 --bytes 1e30"),
    ("scenario parameters", "run double_buffer --set blocks=0"),
    ("scenario parameters", "run double_buffer --set blocks=2.5"),
    ("scenario parameters", "run double_buffer --set buffers=-1"),
    ("scenario parameters", "run double_buffer --set blocks=1e30"),
    ("scenario parameters", "run double_buffer --set load_bytes=1GB --set blocks=1"),
    ("scenario parameters", "run weight_reuse --set order=diagonal"),
    ("scenario parameters", "run weight_reuse --set input_groups=3"),
    ("scenario parameters", "run matmul_roofline --set block_n=300"),
    ("scenario parameters", "run transformer_step --set mode=serve"),
    ("scenario files", "run tests/data/scenario_fails.py"),
    ("scenario files", "run tests/data/scenario_no_run.py"),
    ("scenario files", "run tests/data/nothing_here.py"),
    ("chip files", "run double_buffer --chip-file tests/data/chip_missing_fields.toml"),
    ("chip files", "run double_buffer --chip-file tests/data/chip_mistyped.toml"),
    ("chip files", "run double_buffer --chip-file tests/data/chip_zero_link.toml"),
    ("chip files", "run double_buffer --chip-file tests/data/chip_unknown_field.toml"),
    ("chip files", "run double_buffer --chip-file tests/data/model_broken.toml"),
    ("topology specs", "collective all_gather --topology torus:4x --bytes 1MB"),
    ("topology specs", "collective all_gather --topology ring:0 --bytes 1MB"),
    ("topology specs", "collective all_gather --topology hypercube:8 --bytes 1MB"),
    ("topology specs", "collective all_gather --topology torus:1000x1000 --bytes 1MB"),
    ("topology specs", "collective all_gather --chip h100 --topology slice:4x4 --bytes 1MB"),
    ("topology specs", "collective all_gather --chip tpu-v5e --topology slice:32x32 --bytes 1MB"),
    ("collectives", "collective all_sum --topology torus:4x4 --bytes 1MB"),
    ("collectives", "collective all_gather --topology torus:4x4 --bytes 1MB --axes 7"),
    ("collectives", "collective all_gather --topology torus:4x4 --bytes 1MB --axes 0,0"),
    ("collectives", "collective all_gather --topology switch:8 --bytes 1MB --axes 0"),
    ("collectives", "collective broadcast --topology ring:8 --bytes 1MB --chunks 0"),
    ("collectives", "collective broadcast --topology ring:8 --bytes 1MB --root 99"),
    ("collectives", "send --topology torus:4x4 --src 0,0 --dst 4,4 --bytes 1MB"),
    ("collectives", "send --topology torus:4x4 --src 0,0 --dst 1,1 --bytes 1MB --switching wormhole"),
    ("mesh specs", "run sharded_matmul --mesh X4"),
    ("mesh specs", "run sharded_matmul --mesh X=4,X=2"),
    ("mesh specs", "run sharded_matmul --mesh X=3,Y=3 --topology torus:4x4"),
    ("mesh specs", "run sharded_matmul --mesh X=4@0,Y=4@0 --topology torus:4x4"),
    ("sharding specs", "run sharded_matmul --set spec=A[I,J_X]@B[J_Y,K]"),
    ("sharding specs", "run sharded_matmul --set spec=A[I_XX,J]@B[J,K]"),
    ("sharding specs", "run sharded_matmul --set spec=A[I_Z,J]@B[J,K]"),
    ("sharding specs", "run sharded_matmul --set spec=A[I_XY,J]@B[J,K] --set I=1020"),
    ("sharding specs", "run sharded_matmul --set spec=A[I,J]@B[K,J]"),
    ("sharding specs", "run sharded_matmul --set spec=nonsense"),
    ("model configs", "model llama-9"),
    ("model configs", "model"),
    ("model configs", "model --config tests/data/model_heads.toml"),
    ("model configs", "model --config tests/data/model_kv_heads.toml"),
    ("model configs", "model --config tests/data/model_broken.toml"),
    ("model configs", "model --hf-config tests/data/hf_t5.json"),
    ("model configs", "model --hf-config tests/data/hf_incomplete.json"),
    ("model configs", "model llama-2-7b --mesh model=3"),
    ("model configs", "model llama-2-7b --mesh data=2 --batch 3"),
    ("model configs", "model llama-2-7b --batch 3 --context 1,2"),
    ("model configs", "model llama-2-7b --kv-dtype fp16"),
    ("model configs", "run transformer_step --set model=llama-3-70b --set mesh=model=1"),
    ("model configs", "model llama-2-7b --batch 1e9 --no-simulate"),
    ("model configs", "model llama-2-7b --context 1e8"),
    ("model configs", "run transformer_step --set model=gpt2 --set mode=train --set batch=0"),
    ("scenario parameters", "run collective_matmul --set n=3"),
    ("scenario parameters", "run collective_matmul --set n=4 --topology ring:8 --set verify=false"),
    ("scenario parameters", "run moe_layer --set chips=8 --topology ring:4"),
    ("scenario parameters", "run flash_attention --set heads=100000"),
    ("sharding specs", "run sharded_matmul --set I=-1024"),
    ("mesh specs", "run sharded_matmul --mesh X=4@0+1,Y=2@2"),
    ("sweep files", "sweep double_buffer --grid blocks=1,2 --out tests/data/sweep_binary.csv --resume"),
    ("sweep files", "sweep double_buffer --grid blocks=1,2 --out tests/data/sweep_other.csv --resume"),
    ("sweep files", "sweep double_buffer --grid buffers=1,2 --out tests/data/sweep_rows.csv --resume"),
    ("sweep files", "sweep double_buffer --grid blocks=1,2 --out tests/data"),
    # what a fuzzer found (issue 22): output paths, unicode digits, huge integers, config files, absurd chips
    ("output files", "run double_buffer --gantt db.txt"),
    ("output files", "collective all_reduce --topology ring:4 --bytes 1MB --gantt g"),
    ("output files", "run double_buffer --trace tests/data"),
    ("output files", "run double_buffer --csv no/such/folder/spans.csv"),
    ("quantities", "model llama-2-7b --batch 2 --mesh model=²"),
    ("quantities", "run double_buffer --set blocks=٣"),
    ("quantities", "roofline --chip tpu-v5e --matmul "
                   "999999999999999999999999999999999999999999999999999999999999,1,1"),
    ("quantities", "collective broadcast --topology ring:8 --bytes 1MB --root ²"),
    ("quantities", "send --topology torus:4x4 --src "
                   "0,999999999999999999999999999999999999999999999999999999999999 --dst 1,1 --bytes 1MB"),
    ("mesh specs", "run sharded_matmul --mesh X=16@0+0 --topology torus:4x4"),
    ("mesh specs", "run sharded_matmul --mesh X=999999999999999999999999999999999999999999999999999999999999"),
    ("model configs", "model --config tests/data/model_not_table.toml"),
    ("model configs", "model --config tests/data/model_deep.toml"),
    ("model configs", "model --hf-config tests/data/hf_deep.json"),
    ("model configs", "model --hf-config tests/data/hf_zero_heads.json"),
    ("model configs", "model --config tests/data/scenario_fails.py"),
    ("chip files", "roofline --chip-file tests/data/chip_absurd_peak.toml --matmul 8,8,8"),
    ("chip files", "collective all_reduce --chip-file tests/data/chip_tiny_dcn.toml --topology ring:4 --bytes 1MB"),
    ("chip files", "run double_buffer --chip-file tests/data/model_deep.toml"),
    ("scenario files", "run tests/data/scenario_returns_none.py"),
    # parallelism plans (issue 15): axes that do not divide the model, batch, sequence or chips
    ("parallelism plans", "model gpt2 --mode train --batch 8 --seq 1024 --mesh pipeline=64"),
    ("parallelism plans", "model gpt2 --mode train --batch 8 --seq 1024 --mesh pipeline=5"),
    ("parallelism plans", "model gpt2 --mode train --batch 8 --seq 1024 --mesh model=5"),
    ("parallelism plans", "model gpt2 --mode train --batch 8 --seq 1024 --mesh expert=2"),
    ("parallelism plans", "model mixtral-8x7b --mode train --batch 8 --seq 1024 --mesh expert=3 --no-simulate"),
    ("parallelism plans", "model gpt2 --mode train --batch 8 --seq 1024 --mesh data=3"),
    ("parallelism plans", "model gpt2 --mode train --batch 8 --seq 1024 --mesh data=2 --microbatches 3"),
    ("parallelism plans", "model gpt2 --mode train --batch 8 --seq 1000 --mesh sequence=3"),
    ("parallelism plans", "model gpt2 --mode train --batch 8 --seq 1024 --mesh pipeline=2 --schedule interleaved "
                          "--microbatches 1"),
    ("parallelism plans", "model gpt2 --mode train --batch 8 --seq 1024 --mesh pipeline=4 --schedule interleaved "
                          "--microbatches 4"),
    ("parallelism plans", "model gpt2 --mode train --batch 4 --mesh data=2,model=2 --topology ring:8"),
    ("parallelism plans", "model gpt2 --mode train --mesh pipe=2"),
    ("parallelism plans", "model gpt2 --mode train --checkpoints-per-layer most"),
    ("parallelism plans", "model gpt2 --batch 4 --context 2048 --mesh sequence=2"),
    ("parallelism plans", "model gpt2 --batch 3 --context 1000 --mesh model=4 --kv-sharding batch"),
    ("parallelism plans", "plan gpt2 --mode train --batch 16 --seq 1024"),
    ("parallelism plans", "plan gpt2 --chips 7 --batch 16 --seq 1024"),
    # faults and jitter (issue 18): unknown chips and links, fractions, distributions, draws
    ("faults", "collective all_gather --topology torus:8 --bytes 16MB --fault 'link:0->5=down'"),
    ("faults", "collective all_gather --topology torus:8 --bytes 16MB --fault chip:9=slow:0.5"),
    ("faults", "send --topology torus:4x4 --src 0,0 --dst 1,1 --bytes 1MB --fault chip:4,4=fail"),
    ("faults", "collective all_gather --topology torus:8 --bytes 16MB --fault 'link:0->1=1.5'"),
    ("faults", "collective all_gather --topology torus:8 --bytes 16MB --fault 'link:0-1=down'"),
    ("faults", "run double_buffer --fault chip:0=slow:0.5:tpu"),
    ("faults", "run double_buffer --fault 'link:0->1=down'"),
    ("faults", "collective all_gather --topology ring:8 --bytes 1MB --fault 'link:0->1=down' --fault 'link:4->5=down'"),
    ("faults", "run double_buffer --jitter cauchy:5%"),
    ("faults", "run double_buffer --jitter uniform:90%"),
    ("faults", "run double_buffer --jitter 5% --samples 0"),
    # abstract models and whole-run projections (issue 21)
    ("model configs", "model --params 7e9 --chip tpu-v5e"),
    ("model configs", "model --params 7e9 --kv-bytes-per-token 5e5 --batch 3 --mesh data=2"),
    ("model configs", "model --params 7e9 --mode train --tokens-total 1e12"),
    ("model configs", "model --params 7e9 --mode train --tokens-total 1e12 --assume-mfu 1.5"),
    ("model configs", "model gpt2 --tokens-total 1e9"),
    ("model configs", "model gpt2 --mode train --mesh data=2 --batch 2 --tokens-total 1e9 --chips 8"),
    ("CLI", "collective reduce --chip tpu-v5e --topology torus:8 --bytes 1MB --algorithm root_direct"),
    ("CLI", "collective scatter --chip tpu-v5e --topology torus:8 --bytes 1MB --algorithm bidirectional"),
    # the book, one command per question (issue 21): sharded arrays, communication roofs, fat trees
    ("sharding specs", "shard fp32[1024,4096] A[I_Z,J] --mesh X=8,Y=2"),
    ("sharding specs", "shard fp32[1000,4096] A[I_XY,J] --mesh X=8,Y=2"),
    ("CLI", "roofline --chip tpu-v5e --flops 1e12 --bytes 1GB --memory ici --axes 3"),
    ("CLI", "roofline --chip tpu-v5p --flops 1e12 --bytes 1GB --memory ib"),
    ("CLI", "roofline --chip tpu-v5e --matmul 8,8,8 --dtype fp32"),
    ("topology specs", "collective all_gather --chip h100 --topology fattree:4 --bytes 1MB"),
    # issue 17: inputs that were accepted silently or unclearly
    ("CLI", "run double_buffer --chip ''"),
    ("CLI", "model gpt2 --chip ''"),
    ("mesh specs", "model gpt2 --mesh model=2,model=4"),
    ("quantities", "collective all_gather --chip tpu-v5e --topology ring:8 --bytes -5MB"),
    ("quantities", "model gpt2 --context 8k"),
    ("quantities", "plan gpt2 --chip tpu-v5e --chips 8 --mode train --batch 8 --seq 2k"),
    ("scenario parameters", "run transformer_step --set context=8k"),
    ("model configs", "model gpt2 --calibrated --no-simulate"),
    ("calibrated training", "model gpt2 --mode train --chip tpu-v5e --batch 128 --seq 1024 --calibrated"),
    ("calibrated training", "model gpt2 --mode train --checkpoints-per-layer sometimes --calibrated"),
    ("calibrated training",
     "model gpt2 --mode train --chip h100 --batch 8 --seq 512 --calibrated --framework nonsense"),
    ("host memory", "run host_offload --set topology=torus:4x4"),
    ("topology specs", "collective all_gather --topology torus:4x4+host:4 --bytes 1MB"),
    ("calibrated serving", "model llama-3-8b --chip tpu-v5e --weight-dtype int8 --calibrated --engine vllm"),
    ("calibrated serving", "model llama-3-8b --chip h100 --calibrated --engine sglang"),
    ("calibrated serving", "model llama-3-8b --chip h100 --mesh model=16 --calibrated --engine vllm"),
    # 2-D weight-stationary layouts (issue 15): grids that do not divide or cannot be laid, flags they cannot honour
    ("2-D layouts", "model llama-3-70b --mesh model=64 --layout 2d:3x8 --topology torus:8x8 --no-simulate"),
    ("2-D layouts", "model gpt2 --mesh model=10 --layout 2d:5x2 --topology torus:5x2 --no-simulate"),
    ("2-D layouts", "model llama-3-70b --batch 3 --context 128 --mesh model=128 --layout 2d:8x16 "
                    "--topology torus:8x16 --no-simulate"),
    ("2-D layouts", "model llama-3-70b --mesh model=64 --layout 2d:8x8 --topology torus:4x16 --no-simulate"),
    ("2-D layouts", "model llama-2-7b --mesh model=8 --layout 3d --no-simulate"),
    ("2-D layouts", "model mixtral-8x7b --mesh model=8 --layout 2d --no-simulate"),
    ("2-D layouts", "model llama-2-7b --mesh model=8 --layout 2d --kv-sharding batch --no-simulate"),
    ("2-D layouts", "model llama-3-8b --chip h100 --mesh model=8 --layout 2d --calibrated --engine vllm"),
    ("2-D layouts", "model gpt2 --mode train --batch 8 --seq 512 --mesh model=4 --layout 2d"),
    ("2-D layouts", "run transformer_step --set mesh=model=8 --set layout=2d --set kv_sharding=batch"),
    ("serving", "serve llama-3-8b --chip h100 --rate 0"),
    ("serving", "serve llama-3-8b --chip h100 --rate -2"),
    ("serving", "serve llama-3-8b --chip h100 --rate 1 --prompt-len 4000 --output-len 200 --max-model-len 4096"),
    ("serving", "serve llama-3-70b --chip h100 --rate 1"),
    ("serving", "serve llama-3-8b --chip h100 --find-rate"),
    ("serving", "serve llama-3-8b --chip h100 --rate 1 --trace F.csv --find-rate"),
    ("serving", "serve llama-3-8b --chip h100 --rate 1 --prompt-len lognormal:500"),
    ("serving", "serve llama-3-8b --chip h100 --rate 1 --preempt drop"),
    ("model configs", "model llama-3-70b --mode train --chip tpu-v5e --mesh data=1 --no-simulate"),
    ("parallelism plans", "model gpt2 --batch 4 --zero 2 --no-simulate"),
    ("parallelism plans", "model gpt2 --mode prefill --seq 128 --microbatches 4 --no-simulate"),
    ("parallelism plans", "model gpt2 --seq 128 --no-simulate"),
    ("model configs", "model --params 7e9 --mode train --tokens-total 1e18 --assume-mfu 1e-300"),
    ("model configs", "model --params 7e9 --kv-bytes-per-token 1e-300"),
    ("collectives", "collective all_gather --chip tpu-v5e --topology torus:4x4 --array bf16[1024,4096]"),
    ("serving", "serve gpt2 --chip h100 --rate 1 --prompt-len 2000"),
    ("serving", "serve gpt2 --chip h100 --rate 1 --scheduler-steps 0"),
    ("sweeps", "plan gpt2 --chips 8 --chip tpu-v5e --batch 16 --seq 1024 --scheduler nonsense://"),
    # the book's serving calculation, int4 and --versus (issue 32)
    ("model configs", "model llama-3-8b --decode-length 0"),
    ("model configs", "model llama-3-8b --prefill-mfu 0.4"),
    ("model configs", "model llama-3-8b --decode-length 512 --prefill-mfu 1.5"),
    ("model configs", "model llama-3-8b --decode-length 512 --prefill-mfu 0.4"),
    ("model configs", "model llama-3-8b --mode prefill --decode-length 512"),
    ("model configs", "model llama-3-8b --weight-dtype int4 --compute-dtype int4"),
    ("model configs", "model --params 7e9 --mode train --chip h100 --mesh data=8 --chips 16"),
    ("collectives", "collective all_gather --chip h100 --topology switch:8 --bytes 1MB --versus all_gather"),
    ("collectives", "collective all_gather --chip h100 --topology switch:8 --bytes 1MB --versus all_to_all "
     "--calibrated"),
]


def error_line(command: str) -> tuple[int, str]:
    """Run ``podsim COMMAND`` in-process; return its exit status and what it printed on stderr."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        status = main(shlex.split(command))
    return status, err.getvalue()


def render() -> str:
    """The catalogue as Markdown."""
    lines = ["# Bad inputs and the errors they give", "",
             "Every row is run by `tests/test_bad_inputs.py`: each exits with status 2 and prints exactly this one",
             "line on stderr (no traceback). Regenerate with `python scripts/make_bad_inputs.py`. Files named here",
             "live in `tests/data/`.", "", "| # | area | command | error |", "| --- | --- | --- | --- |"]
    for i, (area, command) in enumerate(CASES, 1):
        status, err = error_line(command)
        if status != 2 or len(err.strip().splitlines()) != 1:
            raise SystemExit(f"case {i} `podsim {command}` exited {status} with {err!r}")
        lines.append(f"| {i} | {area} | `podsim {command}` | {_cell(err.strip())} |")
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


if __name__ == "__main__":
    import os

    os.chdir(ROOT)
    DOC.write_text(render())
    print(f"wrote {DOC} ({len(CASES)} cases)", file=sys.stderr)
