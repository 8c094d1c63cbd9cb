"""Issue 29's speed targets: calibrated simulated steps of the largest published systems, and the plan search,
each as a ratio to the lean 10k-block SimPy pipeline of benchmarks/engine.py timed in the same process.

Each case runs in its own process (``--limit`` seconds at most; one past it is printed as such, not timed),
times the lean pipeline, then the case, and prints its figure (the simulated calibrated step, a forecast), SimPy
events, wall and CPU seconds (and of the wall, the simulator's imports), peak memory (the process's maximum
resident set) and ``ratio`` = case wall / lean wall against the issue's target (and ``cpu ratio``, case CPU /
lean CPU: on a loaded box the wall ratio swings with what else runs, the CPU ratio much less). The models are the
published runs' own dimensions (no preset carries them):

- ``405b-8k``: Llama-3-405B (d 16384, F 53248, 128 heads, 8 KV heads, vocab 128256; 126 layers rounded up to 128
  so that 16 stages of 2 interleaved chunks divide them -- the simulated step has no uneven stages) on 8,192 H100
  (``nodes:1024:8``), TP 8, PP 16, DP 64, 2,048 sequences of 8,192, interleaved, 32 microbatches; <= 60x.
- ``1t-3k``: Megatron-LM's 1T GPT (1008B: d 25600, F 102400, 128 layers, 160 heads, vocab 51200, plain MLP, tied)
  on 3,072 A100 (``nodes:384:8``), TP 8, PP 64, DP 6, 3,072 sequences of 2,048, 1F1B, 64 microbatches; <= 60x.
- ``16b-8k``: MaxText's 16B (d 4096, F 28672, 32 layers, 64 heads, vocab 32000, fp32 weights) on 32 v5e-256
  slices (``multislice:32:16x16``), data 32 x fsdp 256, 6 sequences of 2,048 a chip, full remat; <= 10x.
- ``405b-16k``: the 405B step with DP 128 on 16,384 H100 (4,096 sequences); <= 120x and peak memory <= 4 GiB.
- ``405b-dp8``, ``405b-dp16`` (only when named): the 405B step with DP 8 / 16 on 1,024 / 2,048 H100, to show the
  scaling with DP where the full shapes run long.
- ``plan``: ``podsim plan llama-3-70b --chip h100 --chips 1024 --mode train --calibrated --batch 1024 --seq 4096``
  (3 finalists simulated), whole command; <= 60 s wall on this machine.

    python benchmarks/calibrated.py [--case 405b-8k ...] [--limit 300] [--tree DIR]

``--tree DIR`` runs the cases against another copy of the source (before/after on the same machine).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
LLAMA_405B = dict(name="llama-3-405b", d_model=16384, d_ff=53248, n_layers=128, n_heads=128, n_kv_heads=8,
                  vocab_size=128256)
GPT_1T = dict(name="gpt-1008b", d_model=25600, d_ff=102400, n_layers=128, n_heads=160, vocab_size=51200,
              gated_mlp=False, tied_embeddings=True)
MAXTEXT_16B = dict(name="maxtext-16b", d_model=4096, d_ff=28672, n_layers=32, n_heads=64, vocab_size=32000,
                   weight_elem_bytes=4)
STEPS = {  #: name: (model, chip, mesh, topology, batch, seq, options, target ratio)
    "405b-8k": (LLAMA_405B, "h100", "data=64,pipeline=16,model=8", "nodes:1024:8", 2048, 8192,
                dict(schedule="interleaved", virtual_stages=2, microbatches=32), 60),
    "1t-3k": (GPT_1T, "a100", "data=6,pipeline=64,model=8", "nodes:384:8", 3072, 2048,
              dict(schedule="1f1b", microbatches=64), 60),
    "16b-8k": (MAXTEXT_16B, "tpu-v5e", "data=32,fsdp=256", "multislice:32:16x16", 49152, 2048,
               dict(checkpoint="full", zero=3), 10),
    "405b-16k": (LLAMA_405B, "h100", "data=128,pipeline=16,model=8", "nodes:2048:8", 4096, 8192,
                 dict(schedule="interleaved", virtual_stages=2, microbatches=32), 120),
}
SCALING = {  #: the 405B step at smaller DP (same stages, layers and microbatches; sequences 32 a replica): no target,
    # they show how the step's wall grows with the replicas a stage has
    f"405b-dp{dp}": (LLAMA_405B, "h100", f"data={dp},pipeline=16,model=8", f"nodes:{16 * dp}:8", 32 * dp, 8192,
                     dict(schedule="interleaved", virtual_stages=2, microbatches=32), None) for dp in (8, 16)}
STEPS.update(SCALING)
PLAN = ["plan", "llama-3-70b", "--chip", "h100", "--chips", "1024", "--mode", "train", "--calibrated",
        "--batch", "1024", "--seq", "4096", "--json"]
PLAN_TARGET_S = 60.0


def child(name: str) -> None:
    """Run one case in this process and print one JSON line of its figures."""
    import resource

    sys.path.insert(0, HERE)
    from engine import lean

    lean_cpu, start = time.process_time(), time.perf_counter()
    lean(10_000)
    lean_s, lean_cpu = time.perf_counter() - start, time.process_time() - lean_cpu
    cpu0, start = time.process_time(), time.perf_counter()
    imports = None
    if name == "plan":
        import contextlib
        import io

        from simulator.frontend.cli import main

        with contextlib.redirect_stdout(io.StringIO()) as out:
            status = main(PLAN)
        figure = json.loads(out.getvalue())["plans"][0]["calibrated_step_time_s"] if status == 0 else None
        events, reruns = None, None
    else:
        from engine import count_events

        from simulator.hardware.specs import get_chip
        from simulator.workloads.plans.layout import TrainOptions, parse_plan_mesh
        from simulator.workloads.plans.step import simulate_step
        from simulator.workloads.transformer import TransformerConfig

        imports = time.perf_counter() - start  # (inside the case's wall: a user's run pays them too)
        model, chip, mesh, topology, batch, seq, options, _ = STEPS[name]
        counter = count_events()
        sim, out = simulate_step(TransformerConfig(**model), get_chip(chip), parse_plan_mesh(mesh),
                                 TrainOptions(**options), batch, seq, topology, trace=False, calibrated=True)
        figure, events, reruns = out["step_time_s"], counter[0], sim.reruns
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"figure": figure, "events": events, "wall_s": wall, "cpu_s": cpu, "lean_s": lean_s,
                      "lean_cpu_s": lean_cpu, "peak_bytes": peak, "imports_s": imports, "reruns": reruns}))


def run(name: str, limit: float, tree: str | None) -> str:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (tree, os.environ.get("PYTHONPATH")) if p))
    try:
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", name], capture_output=True,
                              text=True, timeout=limit, env=env, cwd=tree or None)
    except subprocess.TimeoutExpired:
        return f"{name:<9} past {limit:g} s (not finished)"
    if proc.returncode != 0:
        return f"{name:<9} failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}"
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    figure = "-" if r["figure"] is None else f"{r['figure']:.4g} s"
    events = "" if r["events"] is None else f"events {r['events']:,}  "
    if r.get("reruns"):  # the fast step's reruns (`simulator.acceleration.reruns`): which runs the wall paid for
        events += f"reruns {'+'.join(r['reruns'])}  "
    imports = "" if r.get("imports_s") is None else f" (imports {r['imports_s']:.2f} s)"
    head = f"{name:<9} calibrated step {figure} (forecast)  {events}wall {r['wall_s']:.2f} s{imports}  " \
           f"cpu {r['cpu_s']:.2f} s  peak {r['peak_bytes'] / 2**30:.2f} GiB  lean {r['lean_s'] * 1e3:.0f} ms  "
    if name == "plan":
        return head + f"ratio: {r['wall_s'] / r['lean_s']:.0f}  (target: wall <= {PLAN_TARGET_S:g} s)"
    target = STEPS[name][-1]
    if target is None:
        return head + f"ratio: {r['wall_s'] / r['lean_s']:.1f}  (scaling, no target)"
    memory = "; peak <= 4 GiB" if name == "405b-16k" else ""
    cpu = f"  cpu ratio: {r['cpu_s'] / r['lean_cpu_s']:.1f}" if r.get("lean_cpu_s") else ""  # (steadier when loaded)
    return head + f"ratio: {r['wall_s'] / r['lean_s']:.1f}{cpu}  (target <= {target}{memory})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", choices=[*STEPS, "plan"], help="cases to run (default: all)")
    parser.add_argument("--limit", type=float, default=300.0, help="seconds a case may run")
    parser.add_argument("--tree", help="another copy of the source to run the cases against")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child)
    for name in args.case or [*(n for n in STEPS if n not in SCALING), "plan"]:
        print(run(name, args.limit, args.tree), flush=True)


if __name__ == "__main__":
    main()
