"""``podsim model --mode decode|prefill --layout 2d[:XxY]`` and the ``transformer_step`` scenario's ``layout=``:
a 2-D weight-stationary step (`simulator.workloads.layout2d`, `simulator.workloads.simulate2d`)."""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from simulator.errors import PodsimError

if TYPE_CHECKING:  # annotations only
    from simulator.hardware.specs import ChipSpec
    from simulator.workloads.budget import Parallelism
    from simulator.workloads.transformer import TransformerConfig


def check_2d_flags(layout: str, kv_sharding: str, engine: str | None = None, cli: bool = True) -> None:
    """`PodsimError` (one line) for a flag a 2-D layout cannot honour: a KV sharding other than heads (the
    X x Y grid shards the cache itself) or a serving ``engine`` (its factors are fitted to one GPU, 1-D). ``cli``
    names the flags as ``podsim model`` spells them (--kv-sharding batch), else as scenario settings."""
    def name(flag: str, value: str) -> str:
        return f"--{flag} {value}" if cli else f"{flag.replace('-', '_')}={value}"

    if kv_sharding != "heads":
        raise PodsimError(f"{name('kv-sharding', kv_sharding)} is for {name('layout', '1d')}; {name('layout', layout)} "
                          f"shards the KV cache over its X x Y grid (drop {name('kv-sharding', '')}".rstrip("= ") + ")")
    if engine is not None:
        raise PodsimError(f"--engine {engine} prices the calibrated served step under --layout 1d; "
                          f"--layout {layout} has no serving-engine factors (drop --engine, or use --layout 1d)")


def step_2d(cfg: TransformerConfig, chip: ChipSpec, par: Parallelism, batch: int, context: Any, new: int,
            layout: str, *,
            weight_dtype: str | None = None, kv_dtype: str | None = None, compute_dtype: str | None = None,
            topology: str | None = None, simulate: bool = True, calibrated: bool = False,
            trace: bool = False) -> tuple[dict[str, Any], Any]:
    """The closed-form 2-D budget (`layout2d.budget_2d`, the 1-D layout's communication beside it) updated with the
    simulated step's summary, and the simulation (None when not ``simulate``). ``new`` = 1 decodes, else
    prefills ``new`` tokens per request; with ``calibrated`` the step also runs at the chip's fitted efficiencies
    (``calibrated_step_time_s``, ``calibrated_tokens_per_s``)."""
    from simulator.workloads.layout2d import budget_2d
    from simulator.workloads.simulate2d import simulate_2d

    out = budget_2d(cfg, chip, batch, context, par, layout, new, weight_dtype, kv_dtype, compute_dtype, topology)
    out.update(step_time_s=None)
    sim = None
    if simulate:
        sim = simulate_2d(cfg, chip, batch, context, par, out["layout"], weight_dtype, kv_dtype, new, trace=trace,
                          topology=topology)
        out.update(sim.summary())
        if calibrated:
            cal = simulate_2d(cfg, chip, batch, context, par, out["layout"], weight_dtype, kv_dtype, new,
                              trace=False, calibrated=True, topology=topology)
            out.update(calibrated_step_time_s=cal.env.now, calibrated_tokens_per_s=batch * new / cal.env.now)
    return out, sim


def serve_2d(args: argparse.Namespace, cfg: TransformerConfig, chip: ChipSpec, par: Parallelism, batch: int,
             context: Any, new: int,
             price: float | None) -> dict[str, Any]:
    """The closed-form budget (with the 1-D layout's communication beside it) and, unless --no-simulate, the
    simulated step; ``tokens_per_s`` and the cost from the simulated step (else the lower bound)."""
    from simulator.workloads.layout2d import parse_layout

    layout = parse_layout(args.layout)
    check_2d_flags(layout, args.kv_sharding, getattr(args, "engine", None))
    out, _ = step_2d(cfg, chip, par, batch, context, new, layout, weight_dtype=args.weight_dtype,
                     kv_dtype=args.kv_dtype, compute_dtype=args.compute_dtype, topology=args.topology,
                     simulate=not args.no_simulate, calibrated=args.calibrated)
    out["mode"] = args.mode
    step = out["step_time_s"] or out["lower_bound_s"]
    out["tokens_per_s"] = batch * new / step
    if price is not None:
        from simulator.workloads.projection import step_cost

        out.update(step_cost(price, par.chips, step, batch * new))
    return out
