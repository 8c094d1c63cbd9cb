"""How large a decode batch fits at long context, and what does sharding the KV cache past its heads gain?

On a model axis wider than the model's KV heads, splitting the cache by heads replicates each head
(llama-3-70b: 8 KV heads on 16 chips, each held twice), so the batch that fits is half what the HBM
could hold and every step reads the cache twice over. Sharding the rest of the axis along the batch or
the sequence (``auto``) gives max batch = (HBM - weights per chip) / (KV bytes per request per chip),
the book's fully sharded figure. Default: llama-3-70b with int8 weights (bf16 math: weight-only
quantization) on 16 tpu-v5e chips (model=16) at 8192 cached positions; the step is simulated at the
largest batch the head-sharded layout fits, for every sharding.
"""
from __future__ import annotations

from simulator.engine.system import resolve_chip
from simulator.errors import PodsimError
from simulator.hardware.specs import ChipSpec
from simulator.report.result import Result
from simulator.workloads.budget import KV_SHARDINGS, Parallelism, decode_budget
from simulator.workloads.simulate import simulate_decode
from simulator.workloads.transformer import get_model


def run(*, model: str = "llama-3-70b", model_axis: int = 16, context: int = 8192, batch: int = 0,
        weight_dtype: str = "int8", compute_dtype: str = "bf16", shardings: tuple = ("heads", "sequence", "auto"),
        simulate: bool = True, chip: str | ChipSpec = "tpu-v5e", trace: bool = True) -> Result:
    """Fit and step time of one decode step per KV sharding (``batch`` 0: the largest the heads layout fits)."""
    spec, cfg = resolve_chip(chip), get_model(model)
    bad = [s for s in shardings if s not in KV_SHARDINGS]
    if bad or not shardings:
        raise PodsimError(f"shardings={list(shardings)!r}; valid: {', '.join(KV_SHARDINGS)}")
    par = Parallelism(1, model_axis)

    def budget(how: str, b: int) -> dict:
        return decode_budget(cfg, spec, b, context, par, weight_dtype, None, 1, how, compute_dtype)

    probe = budget("heads", 1)
    b = batch or max(1, probe["max_batch"])
    rows, last = [], None
    for how in shardings:
        out = budget(how, b)
        row = {"kv_sharding": out["kv_sharding"], "batch": b, "max_batch": out["max_batch"], "fits": out["fits"],
               "kv_per_chip_bytes": out["per_chip"]["kv_cache_bytes"], "t_memory_s": out["t_memory_s"],
               "lower_bound_s": out["lower_bound_s"], "critical_batch": out["critical_batch"]}
        if simulate:
            last = simulate_decode(cfg, spec, b, context, par, weight_dtype, None, trace=trace, kv_sharding=how)
            row["step_time_s"] = last.env.now
        rows.append(row)
    details = [f"KV by {r['kv_sharding']:<17} max batch {r['max_batch']:>5}; at batch {r['batch']}: "
               f"{r['kv_per_chip_bytes'] / 2**30:6.2f} GiB KV per chip, step "
               f"{r.get('step_time_s', r['lower_bound_s']) * 1e3:.3f} ms "
               + ("simulated" if simulate else "closed form") for r in rows]
    base, best = rows[0], max(rows, key=lambda r: r["max_batch"])
    return Result(
        scenario="long_context_decode",
        params=dict(model=model, model_axis=model_axis, context=context, batch=b, weight_dtype=weight_dtype,
                    compute_dtype=compute_dtype, shardings=list(shardings), chip=spec.name),
        metrics=last.system.metrics() if last else {}, extra={"shardings": rows, "weight_bytes_per_chip":
                                                             probe["per_chip"]["weight_bytes"]},
        trace=last.system.trace if last and trace else None,
        headline=(f"{model} at {context} positions on {model_axis} x {spec.name}: KV by {best['kv_sharding']} fits "
                  f"batch {best['max_batch']}, by {base['kv_sharding']} {base['max_batch']} "
                  f"({best['max_batch'] / max(1, base['max_batch']):.2f}x)"),
        details=details,
    )
