"""The calibrated forecast of each layout `podsim plan --calibrated` ranks (issue 29 item 3).

`simulator.workloads.plans.calibrated.calibrated_train_step` is a closed form (milliseconds a layout) fitted to
published runs -- TPU slices over DCN and GPUs on NVLink and InfiniBand -- so every fitting layout of a search
is forecast, not only the finalists; the ideal closed form (a bound) and, for the finalists, the simulated
ideal step stay beside it. A layout the calibrated model cannot price (an axis it does not cover on that
chip, a slice shape no real slice has) keeps its bound and ranks after those forecast, saying why.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from simulator.errors import PodsimError
from simulator.hardware.specs import ChipSpec
from simulator.workloads.plans.layout import MeshPlan, TrainOptions

if TYPE_CHECKING:  # annotations only
    from simulator.workloads.transformer import TransformerConfig


def check_calibrated_chip(chip: ChipSpec) -> None:
    """`PodsimError` unless ``chip`` has a calibrated training step (its name and the covered chips)."""
    from simulator.hardware.train_calibration import train_calibrated_chips

    if chip.name not in train_calibrated_chips():
        raise PodsimError(f"--calibrated: no calibrated training step for chip {chip.name!r} (a user chip has no "
                          f"published runs); calibrated chips: {', '.join(train_calibrated_chips())} -- or drop "
                          "--calibrated to rank by the bound")


def forecast(cfg: TransformerConfig, chip: ChipSpec, batch: int, seq: int, plan: MeshPlan, opts: TrainOptions,
             topology: str | None) -> dict[str, Any]:
    """The row keys of one layout's calibrated forecast: ``calibrated_step_time_s`` and ``calibrated_mfu``
    (None, with ``calibrated_note``, where the calibrated model cannot price the layout)."""
    from simulator.workloads.plans.calibrated import calibrated_train_step, slice_shape_for

    try:
        cal = calibrated_train_step(cfg, chip, plan, opts, batch, seq, slice_shape_for(topology, plan),
                                    check_memory=False)
    except PodsimError as err:  # PlanError among them: the layout is outside what the calibrated model prices
        return {"calibrated_step_time_s": None, "calibrated_mfu": None, "calibrated_note": str(err)}
    return {"calibrated_step_time_s": cal["step_time_s"], "calibrated_mfu": cal["mfu"]}


def rank_key(row: dict[str, Any]) -> tuple:
    """Fitting layouts first; among them those forecast, fastest forecast first; then real slices, by bound."""
    cal = row.get("calibrated_step_time_s")
    return (not row["fits"], cal is None, cal if cal is not None else 0.0, not row.get("real_slice", True),
            row["step_time_s"])
