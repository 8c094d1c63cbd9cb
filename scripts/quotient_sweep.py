"""Sweep: whole training steps by symmetry and quotients (``fast=True``) against every chip (``fast=False``).

Draws small cases (chips tpu-v5p / tpu-v5e; meshes over the six axes of 8, 16 or 32 chips, on the default
topology or an explicit torus; 2- or 4-layer models; a few `TrainOptions`) and prints each case whose step
results (`tests/same_results.assert_same`) or metrics (end_to_end_s, upper_bound_s, lower_bound_s, overlap_s,
bytes) differ beyond 1e-9 relative. The larger sweep behind ``tests/test_quotient_fuzz.py``.

    python scripts/quotient_sweep.py [--cases N] [--seed S] [--family default|torus|all] [--big]
"""
from __future__ import annotations

import argparse
import math
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from test_quotient_fuzz import Case, differences  # noqa: E402  (the comparison the property test makes)

from simulator.errors import PodsimError  # noqa: E402
from simulator.workloads.plans.layout import TrainOptions, parse_plan_mesh  # noqa: E402

AXES = ("data", "pipeline", "fsdp", "expert", "sequence", "model")
TORI = {"tpu-v5p": ["torus:2x2x2", "torus:4x2x2", "torus:2x4x2", "torus:4x4x2", "torus:2x4x4", "torus:4x4x4",
                    "torus:4x8"],
        "tpu-v5e": ["torus:4x2", "torus:4x4", "torus:2x8", "torus:8x4", "torus:4x8", "torus:8x8"]}


def _mesh(rng: random.Random, chips: int, model: str) -> str:
    sizes: dict[str, int] = {}
    left = chips
    names = list(AXES)
    rng.shuffle(names)
    for name in names:
        if left == 1:
            break
        if name == "expert" and model != "mixtral-8x7b":
            continue
        options = [d for d in (1, 2, 4, 8) if left % d == 0 and (name != "pipeline" or d <= 4)]
        size = rng.choice(options)
        if size > 1:
            sizes[name] = size
            left //= size
    if left > 1:  # what is left goes to data (or fsdp if data is taken)
        name = "data" if "data" not in sizes else "fsdp" if "fsdp" not in sizes else "model"
        sizes[name] = sizes.get(name, 1) * left
    return ",".join(f"{a}={sizes[a]}" for a in AXES if a in sizes)


def _whole(rng: random.Random, topology: str, model: str) -> str:
    """A mesh that takes whole physical axes of ``topology`` in order (the placer lays it without splitting)."""
    lengths = [int(x) for x in topology.split(":")[1].split("x")]
    names = [a for a in AXES if a != "expert" or model == "mixtral-8x7b"]
    if max(lengths) > 4:
        names.remove("pipeline")  # at most 4 stages: small models
    picked = sorted(rng.sample(names, min(len(lengths), len(names))), key=AXES.index)
    cuts = sorted(rng.sample(range(1, len(lengths)), rng.randint(0, len(lengths) - 1)))
    spans = [lengths[a:b] for a, b in zip([0, *cuts], [*cuts, len(lengths)], strict=True)]
    sizes = {name: math.prod(span) for name, span in zip(picked, spans, strict=False)}
    return ",".join(f"{a}={sizes[a]}" for a in AXES if a in sizes)


def draw(rng: random.Random, family: str, big: bool = False) -> Case:
    chip = rng.choice(["tpu-v5p", "tpu-v5e"])
    model = rng.choice(["llama-2-7b", "llama-2-7b", "mixtral-8x7b"])
    topology = None
    if family == "torus" or (family == "all" and rng.random() < 0.4):
        topology = rng.choice(TORI[chip])
        chips = math.prod(int(x) for x in topology.split(":")[1].split("x"))
    else:
        chips = rng.choice([8, 16, 32, 64] if big else [8, 16, 32])
    mesh = _mesh(rng, chips, model) if topology is None else _whole(rng, topology, model)
    plan = parse_plan_mesh(mesh)
    p = plan.size("pipeline")
    schedule = rng.choice(["gpipe", "1f1b", "interleaved"]) if p > 1 else "1f1b"
    micro = rng.choice([1, 2, 4]) if p > 1 else rng.choice([1, 1, 2])
    if schedule == "interleaved":
        micro = p * rng.choice([1, 2])
    opts = TrainOptions(microbatches=micro, schedule=schedule, checkpoint=rng.choice(["none", "selective", "full"]),
                        zero=rng.choice([0, 1, 2, 3]), tp_overlap=rng.random() < 0.2,
                        sequence_attention=rng.choice(["ring", "allgather"]))
    layers = max(2, p * opts.chunks)
    batch = plan.batch_ways * micro * rng.choice([1, 2, 4, 8] if big else [1, 2])
    seq = rng.choice([128, 256, 512, 1024] if big else [128, 256])
    return Case(model, chip, mesh, topology, layers, seq, opts, batch, calibrated=rng.random() < 0.1)


class _Timeout(Exception):
    pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--family", choices=["default", "torus", "all"], default="all")
    parser.add_argument("--timeout", type=int, default=120, help="seconds per case")
    parser.add_argument("--big", action="store_true", help="also 64 chips, longer sequences, larger batches")
    args = parser.parse_args()
    rng = random.Random(args.seed)

    def alarm(*_: Any) -> None:
        raise _Timeout

    signal.signal(signal.SIGALRM, alarm)
    tried = invalid = bad = 0
    start = time.time()
    for _ in range(args.cases):
        case = draw(rng, args.family, args.big)
        signal.alarm(args.timeout)
        try:
            diff, fast = differences(case)
            facts = {"active": fast.sym.active, "quotiented": len(fast.sym.quotiented), "mixed": fast.sym.mixed,
                     "reduced": fast.sym.rings_reduce, "shape": fast.system.network.shape}
        except PodsimError as err:
            invalid += 1
            print(f"skip  {case.text()}: {str(err).splitlines()[0][:100]}", flush=True)
            continue
        except _Timeout:
            print(f"slow  {case.text()}", flush=True)
            continue
        finally:
            signal.alarm(0)
        tried += 1
        bad += bool(diff)
        print(f"{'DIFF' if diff else 'same'}  {case.text()} {facts}", flush=True)
        for d in diff:
            print("      ", d, flush=True)
    print(f"{tried} cases compared ({invalid} invalid plans skipped), {bad} differ; {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
