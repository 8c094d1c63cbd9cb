"""``podsim model --calibrated`` on one GPU: the served decode / prefill step beside the ideal one.

`simulator.workloads.served` prices the step with factors fitted to published single-GPU serving
measurements (an engine's HBM fraction and per-layer overhead, the batch slowdown, prefill's matmul
fraction). ``podsim model`` adds its ``served_*`` keys when ``--calibrated`` runs a decode or prefill on
one chip that has those factors; ``--engine`` asks for them outright, so a chip without them (or a
mesh) is refused in one line naming what would work.
"""
from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from simulator.errors import PodsimError
from simulator.hardware.decode_calibration import DEFAULT_ENGINE, decode_calibrated_chips
from simulator.units import format_quantity


def add_engine_arg(p: argparse.ArgumentParser) -> None:
    """``--engine``: the serving engine whose fitted factors the calibrated decode / prefill step uses."""
    p.add_argument("--engine", help="decode/prefill with --calibrated on one GPU: the serving engine whose fitted "
                                    f"HBM fraction and per-layer overhead price the step (default {DEFAULT_ENGINE}; "
                                    "vllm, tensorrt-llm, gpt-fast)")


def served_extras(args: argparse.Namespace, cfg: Any, chip: Any, chips: int, batch: int,
                  context: int | Sequence[int], new_tokens: int) -> dict[str, Any]:
    """``served_step_time_s``, ``served_tokens_per_s`` and ``served`` (engine, per-factor seconds ideal beside
    calibrated) for a calibrated one-chip step on a chip with serving factors; {} when none applies and no
    ``--engine`` asked. `PodsimError` (one line) when ``--engine`` asks for what cannot be given."""
    engine = getattr(args, "engine", None)
    have = decode_calibrated_chips()
    if engine is not None and not args.calibrated:
        raise PodsimError("--engine prices the calibrated serving step; add --calibrated")
    if not args.calibrated or (engine is None and (chips != 1 or chip.name not in have)):
        return {}
    if chips != 1:
        raise PodsimError(f"--engine: the serving factors are fitted to single-GPU runs; this mesh has {chips} chips "
                          "(use one chip: drop --mesh)")
    if chip.name not in have:
        raise PodsimError(f"--engine: no calibrated decode/prefill model for chip {chip.name!r} (no published "
                          f"single-accelerator measurements); chips with one: {', '.join(have)}")
    from simulator.workloads.served import served_step

    step = served_step(cfg, chip, batch, context, new_tokens, args.weight_dtype, args.kv_dtype, simulate=False,
                       engine=engine)
    return {"served_step_time_s": step["step_time_s"], "served_tokens_per_s": step["tokens_per_s"],
            "served": {"engine": step["engine"], "breakdown": step["breakdown"]}}


def print_served(out: dict[str, Any]) -> None:
    """One line: the served step and where its time goes, calibrated (ideal)."""
    if "served" not in out:
        return
    parts = ", ".join(f"{name} {format_quantity(f['calibrated_s'], 's')} ({format_quantity(f['ideal_s'], 's')})"
                      for name, f in out["served"]["breakdown"].items() if f["calibrated_s"] or f["ideal_s"])
    print(f"  served ({out['served']['engine']}, fitted to published single-GPU runs): "
          f"{format_quantity(out['served_step_time_s'], 's')}, {out['served_tokens_per_s']:,.0f} tokens/s; "
          f"calibrated (ideal): {parts}")
