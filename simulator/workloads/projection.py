"""The book's back-of-envelope budgets without a full architecture, and whole-run training projections.

`abstract_budget` serves a model known only by its parameter count N and its KV-cache bytes per token K
(the book's abstract models, e.g. "a 30B model with 100 kB of KV per token"): a decode (or prefill) step
of B requests with S cached positions each on a ``data`` x ``model`` mesh reads the weights N b_w (split
over model) and the cache B S K (split over all chips), writes B K per new token, and does 2 N FLOPs per
new token (attention FLOPs are left out, as the book does). The critical batch, where per-chip compute
time reaches per-chip memory time, is

    B* = (N b_w / model / W_hbm) / (2 N new / (chips C) - (S + new) K / (chips W_hbm)).

`train_projection` turns a training step into a whole run of T tokens: from an assumed utilisation,
T_train = 6 N T / (chips C MFU) as the book estimates it, or from a step of D tokens taking t seconds,
ceil(T / D) t; chip-hours and cost follow.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from simulator.errors import PodsimError
from simulator.hardware.specs import ChipSpec, check_dtype, check_storage_dtype
from simulator.units import check_bytes, check_derived, positive
from simulator.workloads.budget import fewer_bytes_advice

GiB = 2.0**30
DAY_S = 86_400.0
#: Parameters above this describe no model anyone trains (a quadrillion): a units mistake.
MAX_PARAMS = 1e15


def check_params(params: float) -> float:
    """``params`` as a positive parameter count (at most `MAX_PARAMS`)."""
    positive(params, name="--params")
    if params > MAX_PARAMS:
        raise PodsimError(f"--params {params:.4g} is more than any model has; give a count up to {MAX_PARAMS:.0e} "
                          "(e.g. 7e9 or 70e9)")
    return float(params)


def abstract_budget(params: float, kv_bytes_per_token: float, chip: ChipSpec, batch: int,
                    contexts: Sequence[int], data: int = 1, model: int = 1, weight_dtype: str | None = None,
                    new_tokens: int = 1, compute_dtype: str | None = None) -> dict[str, Any]:
    """Closed-form budget of a decode (``new_tokens`` = 1) or prefill step of an abstract model.

    ``params`` N (count), ``kv_bytes_per_token`` K (bytes, all layers, K and V), ``contexts`` the cached
    positions per request (one per request). Times in seconds, sizes in bytes, per chip unless named
    otherwise; the keys match `simulator.workloads.budget.decode_budget`'s where they mean the same.
    """
    check_params(params)
    check_bytes(kv_bytes_per_token, name="--kv-bytes-per-token")
    if batch % data:
        raise PodsimError(f"mesh data={data} does not divide batch={batch}; use a multiple of {data}")
    chips = data * model
    b_w = check_storage_dtype(weight_dtype or "bf16")
    dtype = compute_dtype or ("int8" if b_w == 1 else "bf16")
    check_dtype(dtype)
    weights = params * b_w
    history, growth = kv_bytes_per_token * sum(contexts), kv_bytes_per_token * batch * new_tokens
    flops = 2.0 * params * batch * new_tokens
    peak, bw = chip.peak_flops_per_s(dtype), chip.hbm_bandwidth_bytes_per_s
    hbm = weights / model + (history + growth) / chips
    t_compute, t_memory = flops / chips / peak, hbm / bw
    ctx = sum(contexts) / len(contexts)
    slope = 2 * params * new_tokens / (chips * peak) - (ctx + new_tokens) * kv_bytes_per_token / (chips * bw)
    critical = weights / model / bw / slope if slope > 0 else None
    name = f"abstract {params / 1e9:.4g}B"
    out: dict[str, Any] = {
        "model": name, "chip": chip.name, "batch": batch, "context": contexts[0] if len(set(contexts)) == 1
        else list(contexts), "data": data, "model_parallel": model, "params_total": params, "params_active": params,
        "weight_bytes": weights, "kv_cache_bytes": history, "kv_bytes_per_position": kv_bytes_per_token,
        "kv_growth_bytes_per_step": growth, "weights_plus_kv_bytes": weights + history, "new_tokens": new_tokens,
        "flops_per_token": 2.0 * params, "flops_per_step": flops, "hbm_read_bytes_per_step": weights + history,
        "hbm_write_bytes_per_step": growth, "hbm_bytes_per_step": weights + history + growth,
        "per_chip": {"weight_bytes": weights / model, "kv_cache_bytes": history / chips, "hbm_bytes_per_step": hbm,
                     "flops_per_step": flops / chips},
        "t_compute_s": t_compute, "t_memory_s": t_memory, "book_t_memory_s": (weights / model + history / chips) / bw,
        "lower_bound_s": max(t_compute, t_memory), "upper_bound_s": t_compute + t_memory,
        "bound": "compute" if t_compute >= t_memory else "memory", "critical_batch": critical,
        "kv_sharding": "all chips", "compute_dtype": dtype, "abstract": True,
        "closed_form_note": "2 N FLOPs per token (attention FLOPs left out); HBM reads N b_w + B S K, writes B K per "
                            "new token",
    }
    kv_read = (history + growth) / chips
    per_op = {"weight_matmuls": (flops / chips, weights / model), "attention": (0.0, kv_read)}
    out["per_op"] = {name: {"flops": f, "hbm_bytes": b, "t_compute_s": f / peak, "t_memory_s": b / bw,
                            "bound_s": max(f / peak, b / bw), "bound": "compute" if f / peak >= b / bw else "memory"}
                     for name, (f, b) in per_op.items()}
    out["lower_bound_per_op_s"] = sum(op["bound_s"] for op in out["per_op"].values())
    if critical is None:
        out["critical_batch_note"] = ("no batch makes this step compute-bound at this context: each request adds "
                                      "more KV-cache reading time than compute time")
    cap = chip.hbm_capacity_bytes
    per_request = (max(contexts) + new_tokens) * kv_bytes_per_token / chips
    need = weights / model + sum(c + new_tokens for c in contexts) * kv_bytes_per_token / chips
    if per_request == 0:  # no KV cache: HBM bounds the weights, not the batch
        max_batch: int | None = None
    else:
        max_batch = math.floor((cap - weights / model) / per_request) if cap > weights / model else 0
        max_batch -= max_batch % data
    if need <= cap:
        note = f"fits: {need / GiB:.3f} GiB of {cap / GiB:.3f} GiB per chip, {(cap - need) / GiB:.3f} GiB spare" + (
            " (no KV cache: HBM does not bound the batch)" if max_batch is None else "")
    elif weights / model > cap:
        note = (f"does not fit: the weights alone need {weights / model / GiB:.3f} GiB per chip of "
                f"{cap / GiB:.3f} GiB; use at least model={math.ceil(weights / cap)} chips"
                f"{fewer_bytes_advice(weights / params if params else 2)}")
    else:
        note = (f"does not fit: {need / GiB:.3f} GiB per chip is {(need - cap) / GiB:.3f} GiB over the "
                f"{cap / GiB:.3f} GiB of HBM; at this context a batch of {max_batch} fits")
    out.update(fits=need <= cap, hbm_needed_per_chip_bytes=need, hbm_capacity_bytes=cap, hbm_spare_bytes=cap - need,
               max_batch=max_batch, fit_note=note)
    from simulator.hardware.facts import nominal_hbm_bytes

    hbm = nominal_hbm_bytes(chip)  # the book's decimal GB (16e9 on v5e), as `simulator.workloads.budget` counts it
    out["book_hbm"] = {"chips_for_weights": weights / hbm, "spare_per_chip_bytes": hbm - weights / model}
    return out


MAX_COST_USD = 1e15  #: more than the world's yearly output: a price past this is a units mistake
PRICE_HINT = "give a price per chip-hour in dollars, e.g. 2.5"


def step_cost(price_per_chip_hour: float, chips: int, step_s: float, tokens: float,
              name: str = "--price-per-chip-hour") -> dict[str, float]:
    """What a step of ``step_s`` seconds on ``chips`` chips costs at ``price_per_chip_hour`` USD, and per million
    of its ``tokens``; a price whose cost overflows (or underflows to nothing) is refused by ``name``."""
    given = f"{name} {price_per_chip_hour:g}"
    cost = check_derived(price_per_chip_hour * chips * step_s / 3600, what="the cost of a step (USD)", given=given,
                         minimum=1e-300, maximum=MAX_COST_USD, hint=PRICE_HINT)
    per_million = check_derived(cost / tokens * 1e6, what="the cost per million tokens (USD)", given=given,
                                minimum=1e-300, hint=PRICE_HINT)
    return {"cost_per_step_usd": cost, "cost_per_million_tokens_usd": per_million}


MAX_TRAIN_S = 1e15  #: seconds (30 million years): a projected run past this is refused, not printed


def check_fraction_mfu(mfu: float, chip_hours: float) -> float:
    """A measured MFU, refused above 1 (the chip-hours cannot have done more than the peak)."""
    if not 0 < mfu <= 1:
        raise PodsimError(f"--measured-chip-hours {chip_hours:g} gives an MFU of {mfu:.3g}, above the peak; give the "
                          "run's chip-hours (or check --tokens-total, the parameters and --compute-dtype)")
    return mfu


def train_projection(tokens_total: float, params: float, chips: int, peak_flops_per_s: float,
                     assume_mfu: float | None = None, step_time_s: float | None = None,
                     tokens_per_step: float | None = None, price_per_chip_hour: float | None = None) -> dict[str, Any]:
    """A whole training run of ``tokens_total`` tokens on ``chips`` chips of ``peak_flops_per_s`` each.

    With ``assume_mfu``: 6 N T / (chips peak MFU) seconds, the book's estimate (N ``params``, the active ones
    for mixture-of-experts). Otherwise from a step of ``tokens_per_step`` tokens taking ``step_time_s``:
    ceil(T / tokens per step) steps. When both are given the step's projection is reported beside the
    assumed one (``time_to_train_from_step_s``); from the step alone, ``projection_mfu`` is 6 N T over the
    projected time (the step's own ``mfu`` counts attention's FLOPs too, and is left as it is). Cost needs
    ``price_per_chip_hour`` (USD).
    """
    positive(tokens_total, name="--tokens-total")
    if tokens_total > 1e18:
        raise PodsimError(f"--tokens-total {tokens_total:.4g} is more tokens than any run trains on; give up to 1e18")
    if tokens_total < 1:
        raise PodsimError(f"--tokens-total {tokens_total:.4g} is less than one token; give a token count such as 1e12")
    flops = 6.0 * params * tokens_total
    out: dict[str, Any] = {"tokens_total": tokens_total, "train_flops": flops, "projection_chips": chips}
    from_step = None
    if step_time_s is not None and tokens_per_step:
        steps = math.ceil(tokens_total / tokens_per_step)
        from_step = steps * step_time_s
        out.update(steps=steps, time_to_train_from_step_s=from_step)
    if assume_mfu is not None:
        if not 0 < assume_mfu <= 1:
            raise PodsimError(f"--assume-mfu {assume_mfu:g} must be a fraction in (0, 1], e.g. 0.4")
        seconds = check_derived(flops / (chips * peak_flops_per_s * assume_mfu), what="the time to train (s)",
                                given=f"--assume-mfu {assume_mfu:g}", minimum=1e-300, maximum=MAX_TRAIN_S,
                                hint="give a utilisation such as 0.4 (a real run's is 0.2 to 0.6)")
        basis = f"6 N T / (chips x peak x MFU) at an assumed MFU of {assume_mfu:g}"
        out["assumed_mfu"] = assume_mfu
    elif from_step is not None:
        seconds, basis = from_step, "steps x the step time"
        out["projection_mfu"] = flops / (seconds * chips * peak_flops_per_s)  # 6 N T: not the step's own ``mfu``
    else:
        raise PodsimError("--tokens-total needs a step time or --assume-mfu M (e.g. 0.4) to project a run")
    chip_hours = seconds * chips / 3600
    out.update(time_to_train_s=seconds, time_to_train_days=seconds / DAY_S, chip_hours=chip_hours,
               projection_basis=basis)
    if price_per_chip_hour is not None:
        out["cost_usd"] = check_derived(chip_hours * price_per_chip_hour, what="the cost of the run (USD)",
                                        given=f"--price-per-chip-hour {price_per_chip_hour:g}", minimum=1e-300,
                                        maximum=MAX_COST_USD, hint=PRICE_HINT)
    return out
