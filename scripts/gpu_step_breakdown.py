"""Print the parts of the calibrated GPU step of published training rows (gpu_training.csv), forecast beside bound.

    python scripts/gpu_step_breakdown.py "mcore2024 gpt-177b 2304xh100" [more row names or prefixes ...]

For each row: its layout, the forecast step (seconds) and each factor's seconds and share of the step, the bound's
factor beside it, and the published metric against the forecast's (the row's own units). A name that matches no
row is an error naming the rows that exist."""
from __future__ import annotations

import sys

from simulator.workloads.plans.calibrated_gpu import calibrated_gpu_step
from simulator.workloads.plans.published_gpu import UNITS, PublishedGpuRun, predict_run, published_gpu_runs


def breakdown(run: PublishedGpuRun) -> str:
    """The text block of one row."""
    out = predict_run(run)
    bound = calibrated_gpu_step(run.cfg, run.chip, run.plan, run.opts, run.batch, run.seq, framework=run.framework,
                                attention=run.attention or None, dtype=run.dtype,
                                grad_reduce_bytes=run.grad_reduce_bytes)["ideal"]
    step = out["step_time_s"]
    lines = [f"{run.run}: {dict(run.plan.sizes)}, {run.opts.microbatches} microbatches, schedule {run.opts.schedule}"
             f" x{run.opts.chunks}, {run.dtype}, {'held out' if run.held_out else 'fit'}",
             f"  step {step:.4f} s forecast, {bound['step_time_s']:.4f} s bound; {UNITS[run.metric]}: published "
             f"{run.measured:g}, forecast {run.predicted(step):.4g} ({run.predicted(step) / run.measured - 1:+.1%})"]
    for name, seconds in out["factors"].items():
        if seconds or bound["factors"].get(name):
            lines.append(f"  {name:16s} {seconds:9.4f} s {seconds / step:6.1%}   bound {bound['factors'][name]:9.4f} s")
    lines.append(f"  factors sum to {sum(out['factors'].values()) / step:.1%} of the step")
    return "\n".join(lines)


def main(names: list[str]) -> int:
    runs = published_gpu_runs()
    for name in names:
        hits = [r for r in runs if r.run == name] or [r for r in runs if r.run.startswith(name)]
        if not hits:
            print(f"no published GPU row {name!r}; rows: {', '.join(r.run for r in runs)}", file=sys.stderr)
            return 2
        for run in hits:
            print(breakdown(run))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:] or ["mcore2024"]))
