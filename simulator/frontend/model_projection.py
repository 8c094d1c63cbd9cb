"""``podsim model`` for abstract models (``--params N``) and whole-run projections (``--tokens-total T``).

The closed forms live in `simulator.workloads.projection`; this module reads the flags, checks they
make sense together and prints the projection.
"""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from simulator.errors import PodsimError
from simulator.units import format_quantity, parse_int, parse_positive, parse_tokens

if TYPE_CHECKING:  # annotations only
    from simulator.hardware.specs import ChipSpec
    from simulator.workloads.transformer import TransformerConfig

MAX_PROJECTED_CHIPS = 10**7  #: chips a projected run may use (the book's estimates reach 10^5)


def check_flags(args: argparse.Namespace) -> None:
    """Refuse flag combinations with no meaning, naming what would work."""
    projecting = [f for f, v in (("--tokens-total", args.tokens_total), ("--assume-mfu", args.assume_mfu),
                                 ("--chips", args.chips), ("--measured-chip-hours", args.measured_chip_hours))
                  if v is not None]
    if args.mode == "prefill" and projecting == ["--assume-mfu"]:  # the prefill step at an assumed utilisation
        projecting = []
    if args.mode == "train" and args.params is not None and projecting == ["--chips"]:  # an abstract step's split
        projecting = []
    if projecting and args.mode != "train":
        raise PodsimError(f"{projecting[0]} projects a training run; add --mode train")
    if projecting and args.tokens_total is None:
        raise PodsimError(f"{projecting[0]} sizes a whole-run projection; give --tokens-total T (e.g. 1e12)")
    if args.params is None:
        if args.kv_bytes_per_token is not None:
            raise PodsimError("--kv-bytes-per-token describes an abstract model; give --params N with it, or drop it "
                              "for a preset or config")
        return
    if args.mode != "train" and args.kv_bytes_per_token is None:
        raise PodsimError(f"--params N in --mode {args.mode} needs --kv-bytes-per-token BYTES (all layers' K and V "
                          "of one token, e.g. 100e3)")
    if args.mode == "train" and args.tokens_total is not None and (args.assume_mfu is None and
                                                                   args.measured_chip_hours is None):
        raise PodsimError("--params N in --mode train projects a run from an assumed utilisation: give "
                          "--tokens-total T and --assume-mfu F (e.g. 0.4), or --measured-chip-hours H (or drop "
                          "--tokens-total for the step's tokens per chip alone)")
    if args.kv_dtype:
        raise PodsimError("--kv-dtype has no meaning with --kv-bytes-per-token, which already gives bytes; drop it")


def abstract_model(args: argparse.Namespace, chip: ChipSpec, price: float | None) -> dict[str, Any]:
    """The budget (decode, prefill) or projection (train) of ``--params N``."""
    from simulator.workloads.budget import parse_parallelism
    from simulator.workloads.projection import abstract_budget, check_params, train_projection

    params = check_params(parse_positive(args.params, "number", name="--params"))
    if args.mode == "train" and args.tokens_total is None:
        return abstract_train_step(args, params, chip)
    if args.mode == "train":
        mfu = (parse_positive(args.assume_mfu, "number", name="--assume-mfu") if args.assume_mfu is not None else
               measured_mfu(args, params, chip))
        chips = _chips(args)
        out = {"model": f"abstract {params / 1e9:.4g}B", "chip": chip.name, "mode": "train", "abstract": True,
               "params_total": params, "chips": chips,
               **train_projection(_tokens_total(args), params, chips, chip.peak_flops_per_s("bf16"), mfu,
                                  price_per_chip_hour=price)}
        out["tokens_per_s"] = out["tokens_total"] / out["time_to_train_s"]
        return out
    par = parse_parallelism(args.mesh)
    if args.topology:
        raise PodsimError("--topology needs a model the simulator can run; an abstract --params model has closed "
                          "forms only (drop --topology, or give a PRESET or --config)")
    batch = parse_int(args.batch, name="--batch", maximum=1_000_000)
    contexts = [parse_tokens(c, name="--context", minimum=0) for c in args.context.split(",")]
    if len(contexts) == 1:
        contexts = contexts * batch
    elif len(contexts) != batch:
        raise PodsimError(f"got {len(contexts)} context lengths for batch={batch}; give one per request")
    new = 1 if args.mode == "decode" else parse_tokens(args.seq or "1024", name="--seq", maximum=2**24)
    kv = parse_quantity_at_least_zero(args.kv_bytes_per_token)
    if 0 < kv < 1:  # a fraction of a byte underflows what a KV cache can hold: 0 (none) or a byte and up
        raise PodsimError(f"--kv-bytes-per-token {args.kv_bytes_per_token}: a token's K and V over all layers are "
                          "0 (a model with no KV cache) or at least 1 byte, e.g. 100e3 or 100kB")
    out = abstract_budget(params, kv, chip, batch, contexts, par.data, par.model, args.weight_dtype, new,
                          args.compute_dtype)
    step = out["lower_bound_s"]
    out.update(mode=args.mode, step_time_s=None, simulated=False, tokens_per_s=batch * new / step)
    if price is not None:
        from simulator.workloads.projection import step_cost

        out.update(step_cost(price, par.chips, step, batch * new))
    return out


def abstract_train_step(args: argparse.Namespace, params: float, chip: ChipSpec) -> dict[str, Any]:
    """``--params N --mode train`` without ``--tokens-total``: one step's batch split over the chips (the book's
    "per-GPU token batch size", gpus quiz 5 Q3: 192 x 4096 / 192 = 4,096 for Megatron's 16B) and, on a GPU mesh
    with data parallelism outside model sharding, the book's critical batch per GPU for it
    (`simulator.workloads.plans.train.book_gpu_outer_data_critical_batch`). Closed forms, no simulated step (an
    abstract model has no layers to run)."""
    from simulator.workloads.plans import parse_plan_mesh
    from simulator.workloads.plans.train import book_gpu_outer_data_critical_batch

    batch = parse_int(args.batch, name="--batch")
    seq = parse_tokens(args.seq or "1024", name="--seq", maximum=2**24)
    plan = parse_plan_mesh(args.mesh)
    mesh = {a: plan.size(a) for a in plan.used}
    on_mesh = _chips(args)
    if args.chips is not None and args.mesh and on_mesh != plan.chips:
        raise PodsimError(f"--chips {on_mesh}, but --mesh {args.mesh} has {plan.chips} chips; give one of them, or "
                          "both alike")
    out: dict[str, Any] = {"model": f"abstract {params / 1e9:.4g}B", "chip": chip.name, "mode": "train",
                           "abstract": True, "params_total": params, "chips": on_mesh, "mesh": mesh, "batch": batch,
                           "seq": seq, "tokens_per_step": batch * seq, "tokens_per_chip": batch * seq / on_mesh}
    book = book_gpu_outer_data_critical_batch(chip, mesh)
    if book:
        out["critical_batch_per_chip_book"] = book
    return out


def add_projection(args: argparse.Namespace, out: dict[str, Any], cfg: TransformerConfig, chip: ChipSpec,
                   price: float | None) -> None:
    """Add the whole-run projection of ``--tokens-total`` to a training step's report ``out``."""
    from simulator.workloads.projection import train_projection

    if args.tokens_total is None:
        return
    mfu = None if args.assume_mfu is None else parse_positive(args.assume_mfu, "number", name="--assume-mfu")
    chips = _chips(args, out["chips"])
    if mfu is None and chips != out["chips"]:
        raise PodsimError(f"--chips {chips}, but the simulated step runs on {out['chips']} chip(s); give a --mesh of "
                          f"{chips} chips, or --assume-mfu F to project from an assumed utilisation")
    same = chips == out["chips"]
    if not same:  # the book's memory and FSDP split of the projected run's chips
        from simulator.workloads.plans.train import book_train_figures

        sharded = out.get("book_memory", {}).get("state_per_chip_model_sharded_bytes")  # the mesh's, not the run's
        out.update(book_train_figures(cfg, chip, out["checkpoint"], out["batch"] * out["seq"], chips))
        if sharded is not None:
            out["book_memory"]["state_per_chip_model_sharded_bytes"] = sharded
    out.update(train_projection(_tokens_total(args), cfg.params(active=True), chips, chip.peak_flops_per_s("bf16"),
                                mfu, out["step_time_s"] if same else None, out["batch"] * out["seq"], price))


def parse_quantity_at_least_zero(text: str) -> float:
    """--kv-bytes-per-token: bytes, 0 allowed (a model with no KV cache: an MLP, a state-space model)."""
    if text.strip() in ("0", "0.0", "0B"):
        return 0.0
    return parse_positive(text, "bytes", name="--kv-bytes-per-token")


def measured_mfu(args: argparse.Namespace, params: float, chip: ChipSpec, dtype: str = "bf16") -> float:
    """6 N T / (H x 3600 x peak): the MFU of a run of ``--tokens-total`` T tokens that took
    ``--measured-chip-hours`` H, at the ``dtype`` peak (bf16, or int8 / fp8 for the 8-bit rate)."""
    from simulator.workloads.projection import check_fraction_mfu

    hours = parse_positive(args.measured_chip_hours, "number", name="--measured-chip-hours")
    if args.tokens_total is None:
        raise PodsimError("--measured-chip-hours H needs the run's --tokens-total T to count its 6 N T FLOPs")
    return check_fraction_mfu(6.0 * params * _tokens_total(args) / (hours * 3600 * chip.peak_flops_per_s(dtype)),
                              hours)


def add_measured(args: argparse.Namespace, out: dict[str, Any], chip: ChipSpec,
                 cfg: TransformerConfig | None = None) -> None:
    """``measured_mfu`` at the bf16 peak and ``measured_mfu_8bit`` at the int8 / fp8 peak (train,
    ``--measured-chip-hours``; N the active parameters) and ``assumed_mfu_step_time_s`` (prefill,
    ``--assume-mfu``): the step's FLOPs at that fraction of the peak, all chips together, and beside it the
    book's count of them, 2 N per token without attention (``book_assumed_mfu_step_time_s``)."""
    if args.measured_chip_hours is not None:
        params = float(cfg.params(active=True) if cfg is not None else out["params_total"])
        out["measured_mfu"] = measured_mfu(args, params, chip)
        out["measured_mfu_8bit"] = 6.0 * params * _tokens_total(args) / (
            parse_positive(args.measured_chip_hours, "number", name="--measured-chip-hours") * 3600
            * chip.peak_flops_per_s("int8"))
    if args.mode == "prefill" and args.assume_mfu is not None:
        mfu = parse_positive(args.assume_mfu, "number", name="--assume-mfu")
        if not 0 < mfu <= 1:
            raise PodsimError(f"--assume-mfu {mfu:g} must be a fraction in (0, 1], e.g. 0.4")
        chips = out.get("data", 1) * out.get("model_parallel", 1)
        peak = chip.peak_flops_per_s(out.get("compute_dtype") or "bf16")
        step = out["flops_per_step"] / (chips * peak * mfu)
        params = float(cfg.params(active=True) if cfg is not None else out["params_total"])
        tokens = out["batch"] * out["new_tokens"]
        out.update(assumed_mfu=mfu, assumed_mfu_step_time_s=step, assumed_mfu_tokens_per_s=tokens / step,
                   # the book's count (applied-inference, "prefill"): 2 N FLOPs a token, attention left out
                   book_assumed_mfu_step_time_s=2 * params * tokens / (chips * peak * mfu))


NO_PROMPT = ("--prefill-mfu F prices the prefill of each request's prompt, its --context P tokens; give --context P of "
             "at least 1 (e.g. 8192)")


def check_serving_flags(args: argparse.Namespace) -> tuple[int, str | None] | None:
    """``--decode-length`` and ``--prefill-mfu``, checked before any work: (N, F's text) or None when neither is
    given; `PodsimError` (one line) outside decode mode, for F without N, and for N or F out of range."""
    length, mfu_text = getattr(args, "decode_length", None), getattr(args, "prefill_mfu", None)
    if length is None and mfu_text is None:
        return None
    if args.mode != "decode":
        flag = "--decode-length" if length is not None else "--prefill-mfu"
        raise PodsimError(f"{flag} prices a request's whole generation from a decode step; --mode {args.mode} has "
                          "none (use --mode decode, the default)")
    if length is None:
        raise PodsimError("--prefill-mfu F sizes the prefill servers against the generate servers; give "
                          "--decode-length N too (the median tokens a request generates, e.g. 512)")
    steps = parse_int(length, name="--decode-length", maximum=2**24)
    if mfu_text is not None:
        mfu = parse_positive(mfu_text, "number", name="--prefill-mfu")
        if not 0 < mfu <= 1:
            raise PodsimError(f"--prefill-mfu {mfu:g} must be a fraction in (0, 1], e.g. 0.4")
        if args.context is None or all(c.strip() == "0" for c in args.context.split(",")):
            raise PodsimError(NO_PROMPT)
    return steps, mfu_text


def add_serving(args: argparse.Namespace, out: dict[str, Any], chip: ChipSpec,
                cfg: TransformerConfig | None = None) -> None:
    """The book's serving calculation (applied-inference, "What about prefill?") from one decode step's report
    ``out``, with ``--decode-length N`` (and ``--prefill-mfu F``). Every decode step of a request is priced as this
    one (its --context, its batch): a bound, as the step is.

    - ``decode_time_s`` = step x N (one request's whole generation; the book's 19 ms x 512 = 9.7 s);
    - ``queries_per_s`` = B / (step x N) and ``queries_per_s_per_chip`` (the book's 43 / (0.019 x 512 x 16));
    - ``sequences_finished_per_step`` = B / N and ``kv_tokens_evicted_per_step`` = B (P + N) / N, P the mean
      --context (the prompt): the book's 32 (8192 + 4096) / 4096 = 96;
    - with ``--prefill-mfu F``: ``prefill_s``, one request's prefill of P tokens on the same chips at F of the
      peak (podsim's FLOPs, attention counted), ``book_prefill_s`` (the book's 2 N P), and the disaggregated
      servers' ratio P / G = prefill x B / (step x N) (``prefill_to_generate_servers``, and the book's with
      its prefill count, ``book_prefill_to_generate_servers``: 0.91 x 32 / (0.019 x 512) = 3).
    """
    checked = check_serving_flags(args)
    if checked is None:
        return
    steps, mfu_text = checked
    step = float(out.get("step_time_s") or out["lower_bound_s"])
    batch = int(out["batch"])
    chips = int(out.get("data", 1)) * int(out.get("model_parallel", 1))
    ctx = out["context"]
    prompt = sum(ctx) / len(ctx) if isinstance(ctx, list) else float(ctx)
    out.update(decode_length=steps, decode_time_s=step * steps, queries_per_s=batch / (step * steps),
               queries_per_s_per_chip=batch / (step * steps * chips), sequences_finished_per_step=batch / steps,
               kv_tokens_evicted_per_step=batch * (prompt + steps) / steps)
    if mfu_text is None:
        return
    mfu = parse_positive(mfu_text, "number", name="--prefill-mfu")
    if prompt < 1:
        raise PodsimError(NO_PROMPT)
    peak = chip.peak_flops_per_s(out.get("compute_dtype") or "bf16")
    params = float(cfg.params(active=True) if cfg is not None else out["params_total"])
    if cfg is not None:
        from simulator.workloads.budget import decode_flops

        flops = decode_flops(cfg, [0], round(prompt))["flops"]
    else:
        flops = 2.0 * params * prompt
    prefill = flops / (chips * peak * mfu)
    book = 2.0 * params * prompt / (chips * peak * mfu)
    out.update(prefill_mfu=mfu, prefill_s=prefill, book_prefill_s=book,
               prefill_to_generate_servers=prefill * batch / (step * steps),
               book_prefill_to_generate_servers=book * batch / (step * steps))


def _chips(args: argparse.Namespace, default: int | None = None) -> int:
    if args.chips is not None:
        return parse_int(args.chips, name="--chips", maximum=MAX_PROJECTED_CHIPS)
    if default is not None:
        return default
    from simulator.workloads.plans import parse_plan_mesh

    plan = parse_plan_mesh(args.mesh)
    chips = 1
    for axis in plan.used:
        chips *= plan.size(axis)
    return chips


def _tokens_total(args: argparse.Namespace) -> float:
    return parse_positive(args.tokens_total, "number", name="--tokens-total")


def print_projection(out: dict[str, Any]) -> None:
    """One or two lines: the projected run, its basis, chip-hours and cost."""
    if "time_to_train_s" not in out and not out.get("abstract"):
        return
    if out.get("abstract") and "time_to_train_s" not in out:
        print(f"{out['model']} training step on {out['chips']} x {out['chip']}: {out['tokens_per_step']:,} tokens, "
              f"{out['tokens_per_chip']:,.6g} per chip")
        book = out.get("critical_batch_per_chip_book")
        if book:
            print(f"  the book's critical batch for data parallelism outside {book['model_nodes_spanned']:g} node(s) "
                  f"of model sharding: {book['data_outside_model']:,.6g} tokens per GPU (bound)")
        return
    if out.get("abstract"):
        print(f"{out['model']} training on {out['chips']} x {out['chip']}")
    print(f"  {out['tokens_total']:.4g} tokens ({out['train_flops']:.4g} FLOP = 6 N T) on {out['projection_chips']} "
          f"chips: {format_quantity(out['time_to_train_s'], 's')} = {out['time_to_train_days']:.4g} days "
          f"({out['projection_basis']}"
          + (f", MFU {out['projection_mfu']:.1%} counting 6 N T" if "projection_mfu" in out else "")
          + f"), {out['chip_hours']:,.4g} chip-hours"
          + (f", ${out['cost_usd']:,.2f}" if "cost_usd" in out else ""))
    if "time_to_train_from_step_s" in out and "assumed_mfu" in out:
        print(f"  from the step instead: {out['steps']:,} steps, {out['time_to_train_from_step_s'] / 86400:.4g} days")
