"""``podsim model --calibrated``: the served decode / prefill step beside the ideal one, on one GPU or a mesh.

`simulator.workloads.served` prices the step with factors fitted to published serving measurements (an
engine's HBM fraction and per-layer overhead, the batch slowdown, prefill's matmul fraction) and, on a
``model`` axis, each layer's tensor-parallel AllReduces as the engine runs them (`simulator.workloads.
served_tp`); a ``data`` axis holds independent replicas, each serving its share of the batch. ``podsim model``
adds its ``served_*`` keys when ``--calibrated`` runs a decode or prefill on a chip that has those factors;
``--engine`` asks for them outright, so a chip without them is refused in one line naming what would work.
Every calibrated decode / prefill names what it prices without a fitted constant (``uncalibrated``).
"""
from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from simulator.errors import PodsimError
from simulator.hardware.decode_calibration import DEFAULT_ENGINE, decode_calibrated_chips
from simulator.units import format_quantity

if TYPE_CHECKING:  # annotations only
    from simulator.hardware.specs import ChipSpec
    from simulator.workloads.budget import Parallelism
    from simulator.workloads.transformer import TransformerConfig


def add_engine_arg(p: argparse.ArgumentParser) -> None:
    """``--engine``: the serving engine whose fitted factors the calibrated decode / prefill step uses."""
    p.add_argument("--engine", help="decode/prefill with --calibrated: the serving engine whose fitted HBM fraction, "
                                    "per-layer overhead and tensor-parallel AllReduce price the step (default "
                                    f"{DEFAULT_ENGINE}; vllm, tensorrt-llm, gpt-fast)")


def served_extras(args: argparse.Namespace, cfg: TransformerConfig, chip: ChipSpec, par: Parallelism, batch: int,
                  context: int | Sequence[int], new_tokens: int) -> dict[str, Any]:
    """``served_step_time_s`` (the slowest replica's), ``served_tokens_per_s`` (all ``par.data`` replicas) and
    ``served`` (engine, mesh, per-factor seconds ideal beside calibrated, the AllReduce) for a calibrated step
    on a chip with serving factors, with ``uncalibrated`` (what it prices without a fitted constant); only
    ``uncalibrated`` for a calibrated step on a chip without them and no ``--engine``; {} when not calibrated.
    `PodsimError` (one line) when ``--engine`` asks for what cannot be given."""
    engine = getattr(args, "engine", None)
    have = decode_calibrated_chips()
    if engine is not None and not args.calibrated:
        raise PodsimError("--engine prices the calibrated serving step; add --calibrated")
    if not args.calibrated:
        return {}
    if chip.name not in have:
        if engine is not None:
            raise PodsimError(f"--engine: no calibrated decode/prefill model for chip {chip.name!r} (no published "
                              f"decode measurements); chips with one: {', '.join(have)}")
        return {"uncalibrated": [f"serving factors of chip {chip.name} (no published decode measurements: "
                                 "calibrated_* runs the kernels at the chip's fitted efficiencies, without an "
                                 "engine's launches, synchronisation or HBM fraction)"]}
    from simulator.workloads.served import served_step
    from simulator.workloads.served_tp import MAX_GPUS

    if par.model > MAX_GPUS and engine is None:  # --calibrated alone: the generic calibrated step stands
        return {"uncalibrated": [f"serving factors on model={par.model} (the served model prices tensor "
                                 f"parallelism inside one NVLink node of up to {MAX_GPUS} GPUs)"]}

    replica = batch // par.data
    shares = ([context] if isinstance(context, int) else
              [list(context)[g * replica:(g + 1) * replica] for g in range(par.data)])
    step = max((served_step(cfg, chip, replica, share, new_tokens, args.weight_dtype, args.kv_dtype, simulate=False,
                            engine=engine, model=par.model) for share in shares),
               key=lambda s: s["step_time_s"])  # the replicas step together: the slowest sets the pace
    return {"served_step_time_s": step["step_time_s"], "served_tokens_per_s": par.data * step["tokens_per_s"],
            "uncalibrated": step["uncalibrated"],
            "served": {"engine": step["engine"], "data": par.data, "model": par.model,
                       "breakdown": step["breakdown"], "allreduce": step["allreduce"]}}


def check_served(args: argparse.Namespace, par: Any) -> None:
    """Refuse up front, before any simulation, an ``--engine`` mesh the served model cannot price
    (`simulator.workloads.served_tp.check_gpus`): a refusal is one line, not a line after a run's progress."""
    if getattr(args, "engine", None) is not None and args.calibrated:
        from simulator.workloads.served_tp import check_gpus

        check_gpus(par.model)


def print_served(out: dict[str, Any]) -> None:
    """The served step and where its time goes, calibrated (ideal); its AllReduce on a mesh; what is uncalibrated."""
    if "served" in out:
        served = out["served"]
        parts = ", ".join(f"{name} {format_quantity(f['calibrated_s'], 's')} ({format_quantity(f['ideal_s'], 's')})"
                          for name, f in served["breakdown"].items() if f["calibrated_s"] or f["ideal_s"])
        mesh = "one GPU" if served["data"] * served["model"] == 1 else f"data={served['data']}, model={served['model']}"
        print(f"  served, forecast ({served['engine']}, {mesh}; fitted to published runs): "
              f"{format_quantity(out['served_step_time_s'], 's')}, {out['served_tokens_per_s']:,.0f} tokens/s; "
              f"calibrated (ideal): {parts}")
        ar = served["allreduce"]
        if ar:
            how = ar["algorithm"] + (f" ({ar['protocol']})" if ar["protocol"] else
                                     f" ({ar['kernel']} kernel)" if ar.get("kernel") else "")
            print(f"  AllReduce {ar['per_step']} per step of {format_quantity(ar['bytes'], 'B')}: {how} "
                  f"{format_quantity(ar['algorithm_s'], 's')} + sync {format_quantity(ar['sync_s'], 's')}")
    if out.get("uncalibrated"):
        print("  uncalibrated: " + "; ".join(out["uncalibrated"]))
