"""How much of a pipelined training step is bubble, and how far do microbatches, 1F1B and interleaving shrink it?

With p stages and M microbatches, GPipe and 1F1B both leave each stage idle for a fraction
(p - 1) / (M + p - 1) of the pipelined part (the book; Narayanan et al. 2021); 1F1B holds at most p
microbatches' activations instead of M, and interleaving v layer chunks per device divides the bubble
by v: (p - 1) / (v M + p - 1), for v times more point-to-point transfers. Each schedule and microbatch
count is simulated on a pipeline of chips over real links (default: llama-2-13b's 40 layers over 4
tpu-v5p stages, 2 virtual stages each), beside the book's fraction and the activation memory per chip.
The last stage also runs the output layer, so it is a little slower than the others and the simulated
bubble sits a point or two above the book's, which assumes equal stages.
"""
from __future__ import annotations

from simulator.engine.system import resolve_chip
from simulator.errors import PodsimError
from simulator.hardware.specs import ChipSpec
from simulator.report.result import Result
from simulator.workloads.plans import SCHEDULES, TrainOptions, parse_plan_mesh, train_plan
from simulator.workloads.plans.schedules import bubble_fraction
from simulator.workloads.transformer import get_model


def run(*, model: str = "llama-2-13b", stages: int = 4, microbatches: tuple = (4, 8, 16),
        schedules: tuple = SCHEDULES, virtual_stages: int = 2, seq: int = 2048, sequences_per_microbatch: int = 1,
        chip: str | ChipSpec = "tpu-v5p", topology: str | None = None, trace: bool = True) -> Result:
    """Simulate one step per (schedule, microbatch count) on ``stages`` chips; bubble and memory beside the book."""
    spec, cfg = resolve_chip(chip), get_model(model)
    bad = [s for s in schedules if s not in SCHEDULES]
    if bad or not schedules or not microbatches:
        raise PodsimError(f"schedules={list(schedules)!r} and microbatches={list(microbatches)!r} must be non-empty; "
                          f"schedules are {', '.join(SCHEDULES)}")
    points, last = [], None
    for schedule in schedules:
        for m in microbatches:
            opts = TrainOptions(microbatches=m, schedule=schedule, virtual_stages=virtual_stages)
            out = train_plan(cfg, spec, m * sequences_per_microbatch, seq, parse_plan_mesh(f"pipeline={stages}"), opts,
                             topology or f"ring:{stages}", trace=trace)
            last = out.pop("_system")
            v = virtual_stages if schedule == "interleaved" else 1
            points.append({"schedule": schedule, "microbatches": m, "bubble_fraction": out["bubble_fraction"],
                           "book_bubble_fraction": bubble_fraction(schedule, stages, m, v),
                           "closed_form_bubble_fraction": out["closed_form"]["bubble_fraction"],
                           "step_time_s": out["step_time_s"], "closed_form_s": out["closed_form_s"],
                           "activations_per_chip_bytes": out["memory_per_chip"]["activations_bytes"],
                           "pipeline_comm_s": out["exposed_comm_s"].get("pipeline", 0.0)})
    details = [f"{p['schedule']:<12} M={p['microbatches']:<4} bubble {p['bubble_fraction']:6.1%} simulated, "
               f"{p['book_bubble_fraction']:6.1%} book; step {p['step_time_s'] * 1e3:8.2f} ms; activations "
               f"{p['activations_per_chip_bytes'] / 2**30:6.2f} GiB/chip" for p in points]
    worst = max(abs(p["bubble_fraction"] - p["book_bubble_fraction"]) for p in points)
    return Result(
        scenario="pipeline_bubble",
        params=dict(model=model, stages=stages, microbatches=list(microbatches), schedules=list(schedules),
                    virtual_stages=virtual_stages, seq=seq, sequences_per_microbatch=sequences_per_microbatch,
                    chip=spec.name, topology=topology or f"ring:{stages}"),
        metrics=last.metrics(), extra={"points": points, "max_bubble_gap": worst},
        trace=last.trace if trace else None,
        headline=(f"{model} over {stages} stages: bubble from {points[0]['bubble_fraction']:.0%} "
                  f"({points[0]['schedule']}, M={points[0]['microbatches']}) to "
                  f"{min(p['bubble_fraction'] for p in points):.0%}; simulated within {worst:.1%} of the book's "
                  "(p - 1) / (vM + p - 1)"),
        details=details,
    )
