"""How does the MFU of a training run fall as it spreads over more TPU slices (DCN), model by model?

Each model size is one of MaxText's published v5e configurations (16B-128B, one v5e-256 slice each,
per-device batch kept as slices are added); the calibrated training step (`podsim model --mode train
--calibrated`, `simulator.workloads.plans.calibrated`) prices it on 1 to 32 slices. MFU is shown as
the publication counts model FLOPs, so the published points (MaxText's README table) sit on the same
axis, marked as fitted (used by the fit) or held out. On a chip with no calibrated training model the
ideal step (every efficiency 1) is shown instead, and the headline says so.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from simulator.engine.system import resolve_chip
from simulator.errors import PodsimError
from simulator.hardware.specs import ChipSpec
from simulator.hardware.train_calibration import IDEAL, train_calibrated_chips
from simulator.report.result import Result
from simulator.workloads.plans.calibrated import calibrated_train_step, is_gpu
from simulator.workloads.plans.layout import MeshPlan
from simulator.workloads.plans.published import PublishedRun, published_runs


def run(*, chip: str | ChipSpec = "tpu-v5e", models: tuple = ("maxtext-16b", "maxtext-32b", "maxtext-64b",
                                                               "maxtext-128b"),
        slices: tuple = (1, 2, 4, 8, 16, 32), plot: str = "") -> Result:
    """Predicted MFU of each model on each slice count; ``plot``: a PNG path for the picture."""
    spec = resolve_chip(chip)
    runs = published_runs()
    bases = {}
    for name in models:
        mine = [r for r in runs if r.cfg.name == name and r.chip.name == "tpu-v5e" and r.plan.size("data") == 1]
        if not mine:
            valid = sorted({r.cfg.name for r in runs if r.chip.name == "tpu-v5e"})
            raise PodsimError(f"models: {name!r} is not a published v5e configuration; valid: {', '.join(valid)}")
        bases[name] = mine[0]
    if not slices or any(not isinstance(n, int) or n < 1 for n in slices):
        raise PodsimError(f"slices={slices!r} must be whole numbers >= 1")
    calibrated = spec.name in train_calibrated_chips() and not is_gpu(spec)  # the slice model's fitted chips
    curves: dict[str, list[dict[str, Any]]] = {}
    for name, base in bases.items():
        curves[name] = [_point(base, spec, n, calibrated) for n in sorted(slices)]
    published = [{"model": r.cfg.name, "slices": r.plan.size("data"), "published_mfu": r.published_mfu,
                  "set": "held out" if r.held_out else "fit"} for r in runs
                 if r.cfg.name in bases and r.chip.name == spec.name == "tpu-v5e"]
    first, last = min(slices), max(slices)
    drops = {m: 1 - c[-1]["mfu_published_convention"] / c[0]["mfu_published_convention"] for m, c in curves.items()}
    worst = max(drops, key=drops.get)
    mode = "calibrated" if calibrated else f"IDEAL (no calibrated training model for {spec.name})"
    details = [f"{'model':<14}" + "".join(f"{n:>8}" for n in sorted(slices)) + "   (MFU, MaxText's FLOP count)"]
    details += [f"{m:<14}" + "".join(f"{p['mfu_published_convention']:>8.1%}" for p in c) for m, c in curves.items()]
    details += [f"published {p['model']} x{p['slices']}: {p['published_mfu']:.1%} ({p['set']})" for p in published]
    result = Result(
        scenario="mfu_vs_slices",
        params=dict(chip=spec.name, models=list(models), slices=list(slices), plot=plot),
        metrics={}, extra={"curves": curves, "published": published, "calibrated": calibrated},
        headline=(f"{mode} training MFU on {spec.name} from {first} to {last} slices: {worst} falls most, "
                  f"{curves[worst][0]['mfu_published_convention']:.1%} to "
                  f"{curves[worst][-1]['mfu_published_convention']:.1%} ({drops[worst]:.0%} lower), as the "
                  "cross-slice gradient AllReduce over DCN grows"),
        details=details,
    )
    if plot:
        draw(result, plot)
    return result


def _point(base: PublishedRun, spec: ChipSpec, n: int, calibrated: bool) -> dict[str, Any]:
    plan = MeshPlan({"data": n, "fsdp": base.plan.size("fsdp"), "model": base.plan.size("model")})
    batch = base.batch * n
    out = calibrated_train_step(base.cfg, spec, plan, base.opts, batch, base.seq,
                                constants=None if calibrated else IDEAL, check_memory=False)
    priced = replace(base, chip=spec, plan=plan, batch=batch)
    return {"slices": n, "chips": plan.chips, "step_time_s": out["step_time_s"], "mfu": out["mfu"],
            "mfu_published_convention": priced.predicted_published_mfu(out["step_time_s"]),
            "dcn_s": out["factors"]["dcn_s"], "fits": out["fits"]}


def draw(result: Result, path: str | Path | None = None, dpi: int = 100, ax: Any = None) -> Any:
    """The picture of a run, as a matplotlib Figure: predicted MFU per model against slices, the published points
    marked fitted or held out. Drawn on ``ax`` when given (else a new 7 x 4.5 inch figure); saved (and closed) only
    when ``path`` is given, its suffix picking the format (`simulator.report.plots.save`)."""
    from simulator.report.figure import axes
    from simulator.report.plots import check_picture_path, save

    if path is not None:
        check_picture_path(path)  # a bad path fails before anything is drawn
    curves, published = result.extra["curves"], result.extra["published"]
    chip, calibrated = result.params["chip"], result.extra["calibrated"]
    ax = axes(ax, (7, 4.5))
    for i, (name, points) in enumerate(curves.items()):
        color = f"C{i}"
        ax.plot([p["slices"] for p in points], [100 * p["mfu_published_convention"] for p in points], "-",
                color=color, label=f"{name} (podsim{'' if calibrated else ', ideal'})")
        for p in (q for q in published if q["model"] == name):
            held = p["set"] == "held out"
            ax.plot(p["slices"], 100 * p["published_mfu"], "s" if held else "o", color=color,
                    markerfacecolor="none" if held else color)
    ax.plot([], [], "ko", label="published, fitted")
    ax.plot([], [], "ks", markerfacecolor="none", label="published, held out")
    ax.set_xscale("log", base=2)
    ax.set_xlabel(f"slices of 256 {chip} (over DCN)")
    ax.set_ylabel("MFU, % (MaxText's FLOP count)")
    ax.set_title("Training MFU against slice count")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    if path is not None:
        save(ax, path, dpi)
    return ax.figure
