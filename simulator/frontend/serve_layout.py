"""``podsim model --mode decode|prefill --layout 2d[:XxY]``: a 2-D weight-stationary step (`workloads.layout2d`)."""
from __future__ import annotations

import argparse
from typing import Any

from simulator.errors import PodsimError


def serve_2d(args: argparse.Namespace, cfg: Any, chip: Any, par: Any, batch: int, context: Any, new: int,
             price: float | None) -> dict[str, Any]:
    """The closed-form budget (with the 1-D layout's communication beside it) and, unless --no-simulate, the
    simulated step; ``tokens_per_s`` and the cost from the simulated step (else the lower bound)."""
    from simulator.workloads.layout2d import budget_2d, parse_layout
    from simulator.workloads.simulate2d import simulate_2d

    layout = parse_layout(args.layout)
    if args.kv_sharding != "heads":
        raise PodsimError(f"--kv-sharding {args.kv_sharding} is for --layout 1d; --layout {layout} shards the KV "
                          "cache over its X x Y grid (drop --kv-sharding)")
    out = budget_2d(cfg, chip, batch, context, par, layout, new, args.weight_dtype, args.kv_dtype,
                    args.compute_dtype, args.topology)
    out.update(mode=args.mode, step_time_s=None)
    if not args.no_simulate:
        sim = simulate_2d(cfg, chip, batch, context, par, out["layout"], args.weight_dtype, args.kv_dtype, new,
                          trace=False, topology=args.topology)
        out.update(sim.summary())
        if args.calibrated:
            cal = simulate_2d(cfg, chip, batch, context, par, out["layout"], args.weight_dtype, args.kv_dtype, new,
                              trace=False, calibrated=True, topology=args.topology)
            out.update(calibrated_step_time_s=cal.env.now, calibrated_tokens_per_s=batch * new / cal.env.now)
    step = out["step_time_s"] or out["lower_bound_s"]
    out["tokens_per_s"] = batch * new / step
    if price is not None:
        cost = price * par.chips * step / 3600
        out.update(cost_per_step_usd=cost, cost_per_million_tokens_usd=cost / (batch * new) * 1e6)
    return out
