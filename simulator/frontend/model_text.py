"""``podsim model``'s text output: the presets, a decode or prefill budget, a training step (bound and forecast)."""
from __future__ import annotations

from typing import Any

from simulator.analytic import EXPOSED_MEANING
from simulator.frontend.served_cmd import print_served
from simulator.report.result import dumps_json
from simulator.units import format_quantity


def print_presets(as_json: bool) -> None:
    from simulator.workloads.transformer import PRESETS as MODELS

    if as_json:
        print(dumps_json({n: {"params": c.params(), "layers": c.n_layers, "d_model": c.d_model}
                          for n, c in MODELS.items()}))
        return
    for name, c in MODELS.items():
        print(f"{name:<14} {c.params() / 1e9:>7.2f}B params, {c.n_layers} layers, d_model {c.d_model}")


def print_model(out: dict[str, Any]) -> None:
    gib = 2**30
    print(f"{out['model']} {out['mode']} on {out['chip']} (data={out['data']}, model={out['model_parallel']}, KV by "
          f"{out['kv_sharding']}), batch {out['batch']}, context {out['context']}")
    print(f"  params {out['params_total']:,} total, {out['params_active']:,} active; weights "
          f"{out['weight_bytes'] / gib:.3f} GiB, KV cache {out['kv_cache_bytes'] / gib:.3f} GiB")
    print(f"  per step {out['flops_per_step'] / 1e9:.3f} GFLOP, {out['hbm_read_bytes_per_step'] / 1e9:.3f} GB read")
    print(f"  per chip: compute {format_quantity(out['t_compute_s'], 's')}, memory "
          f"{format_quantity(out['t_memory_s'], 's')} -> {out['bound']}-bound"
          + (f"; {'closed-form' if out.get('ideal_from') == 'closed form' else 'simulated'} step, bound (ideal peak) "
             f"{format_quantity(out['step_time_s'], 's')}" if out["step_time_s"] else "")
          + (f"; forecast ({'calibrated kernels' if 'served' in out else 'calibrated'}"
             f"{', the one simulated run' if out.get('simulated_run') == 'calibrated' else ''}) "
             f"{format_quantity(out['calibrated_step_time_s'], 's')}" if "calibrated_step_time_s" in out else ""))
    if "lower_bound_per_op_s" in out:
        ops = ", ".join(f"{name.replace('_', ' ')} {format_quantity(op['bound_s'], 's')} ({op['bound']})"
                        for name, op in out["per_op"].items())
        print(f"  each op by its own roofline, summed (the book's): {format_quantity(out['lower_bound_per_op_s'], 's')}"
              f" = {ops}; max(total compute, total memory) {format_quantity(out['lower_bound_s'], 's')}")
    print(f"  {out['fit_note']}; {max_batch_text(out)}")
    _print_serving(out)
    print_served(out)
    _print_notes(out)


def max_batch_text(out: dict[str, Any]) -> str:
    """The largest-batch clause of a decode or prefill budget's fit line: a bound (KV cache beside the weights in
    HBM, no working memory), with the cached positions per request it assumes; when the step's context is shorter
    than the budget's reference context (`simulator.workloads.budget.REFERENCE_CONTEXT`), the batch at that
    context beside it, since at context 0 a request holds one position (the token the step writes)."""
    if out["max_batch"] is None:
        return "largest batch: not bounded by HBM (no KV cache)"
    positions = out.get("max_batch_positions")
    if positions is None:
        return f"largest batch at this context (bound: KV beside the weights): {out['max_batch']:,}"
    text = (f"largest batch at this context (bound: KV of {positions:,} cached position{'s' * (positions != 1)} a "
            f"request beside the weights, no working memory): {out['max_batch']:,}")
    ref = out.get("max_batch_reference")
    if ref and positions <= ref["context"]:
        text += f"; at context {ref['context']:,}: {ref['max_batch']:,}"
    return text


def _print_serving(out: dict[str, Any]) -> None:
    """--decode-length (and --prefill-mfu): the book's serving calculation, each step priced as this one (bounds)."""
    if "decode_length" not in out:
        return
    print(f"  {out['decode_length']:,} decode steps (bound, each as this step): "
          f"{format_quantity(out['decode_time_s'], 's')} a request; {out['queries_per_s']:.4g} queries/s "
          f"({out['queries_per_s_per_chip']:.4g} a chip); "
          f"{out['sequences_finished_per_step']:.4g} sequences finish and {out['kv_tokens_evicted_per_step']:.4g} KV "
          "tokens are evicted a step")
    if "prefill_s" in out:
        print(f"  prefill of the --context at an assumed {out['prefill_mfu']:.0%} MFU (an estimate, as the book's): "
              f"{format_quantity(out['prefill_s'], 's')} (the book's 2 N T: "
              f"{format_quantity(out['book_prefill_s'], 's')}); "
              f"prefill:generate servers {out['prefill_to_generate_servers']:.3g} (the book's count: "
              f"{out['book_prefill_to_generate_servers']:.3g})")


def _print_notes(out: dict[str, Any]) -> None:
    for note in out.get("notes", ()):
        print(f"  note: {note}")


def print_train(out: dict[str, Any]) -> None:
    gib = 2**30
    mesh = ",".join(f"{k}={v}" for k, v in out["mesh"].items()) or "one chip"
    kind = "simulated" if out["simulated"] else "closed form"
    print(f"{out['model']} train step on {out['chips']} x {out['chip']} ({mesh}), batch {out['batch']} x "
          f"seq {out['seq']}: bound (ideal peak) {format_quantity(out['step_time_s'], 's')} {kind} (closed form "
          f"{format_quantity(out['closed_form_s'], 's')}), MFU {out['mfu']:.1%}, {out['tokens_per_s']:,.0f} tokens/s")
    print(f"  state {out['train_state_bytes'] / gib:.2f} GiB (params {out['params_bytes'] / gib:.2f}, grads "
          f"{out['grads_bytes'] / gib:.2f}, optimizer {out['optimizer_bytes'] / gib:.2f}, activations "
          f"{out['activations_bytes'] / gib:.2f}); fewest chips that hold it: {out['min_chips']}")
    if "book_memory" in out:
        bm, fm = out["book_memory"], out["book_fsdp_model"]
        print(f"  the book's count (params + Adam, no gradients; {bm['checkpoints_per_layer']:.3g} [tokens, d_model] "
              f"checkpoints a layer): {bm['total_bytes'] / 1e9:,.4g} GB, {bm['per_chip_bytes'] / 1e9:,.4g} GB on each "
              f"of {bm['chips']:,} chips; fewest chips {bm['min_chips']:,} ({bm['min_chips_for_state']:,} for params + "
              f"Adam alone); FSDP + model X_opt = sqrt(2BN/F) = {fm['x_opt']:,.0f}")
    print(f"  memory per chip: peak {out['memory_peak_bytes'] / gib:.2f} GiB ({out['memory_peak_source']}: state "
          f"{out['memory_state_bytes'] / gib:.2f} + transient {out['memory_transient_peak_bytes'] / gib:.2f}) of "
          f"{out['hbm_capacity_bytes'] / gib:.0f} GiB: " + ("fits" if out["fits"] else "does NOT fit")
          + f" ({out['hbm_spare_bytes'] / gib:+.2f} GiB spare)"
          + (f"; closed-form estimate {out['memory_per_chip_bytes'] / gib:.2f} GiB"
             if out["memory_peak_source"] == "simulated" else ""))
    exposed = ", ".join(f"{a} {format_quantity(t, 's')}" for a, t in out["exposed_comm_s"].items()) or "none"
    book = (f" (the book's equal stages, (p-1)/(M+p-1): {out['book_bubble_fraction']:.1%})"
            if out.get("book_bubble_fraction") else "")
    print(f"  exposed communication: {exposed}; pipeline bubble {out['bubble_fraction']:.1%}{book}")
    print(f"  ({EXPOSED_MEANING})")
    if "calibrated_step_time_s" in out:
        print(f"  forecast (calibrated): {format_quantity(out['calibrated_step_time_s'], 's')}, MFU "
              f"{out['calibrated_mfu']:.1%}, {out['calibrated_tokens_per_s']:,.0f} tokens/s")
    if out.get("uncalibrated"):
        print(f"  uncalibrated (ideal or unfitted in the forecast): {'; '.join(out['uncalibrated'])}")
    if "calibrated_step" in out:
        from simulator.workloads.plans.calibrated import breakdown_lines

        print("\n".join("  " + line for line in breakdown_lines(out["calibrated_step"])))
    _print_notes(out)
    if "cost_per_step_usd" in out:
        print(f"  cost ${out['cost_per_step_usd']:.4g} per step, ${out['cost_per_million_tokens_usd']:.4g} per "
              "million tokens")
