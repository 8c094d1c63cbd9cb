"""``podsim model``: budgets, fit and a simulated step of a Transformer -- decode, prefill or training.

Decode and prefill run on a data x model mesh with the KV cache sharded by heads, batch or sequence
(`simulator.workloads.budget`); training runs any plan of the six axes (`simulator.workloads.plans`).
"""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from simulator.errors import PodsimError
from simulator.frontend.command_help import HELP
from simulator.frontend.fault_args import add_fault_args
from simulator.frontend.model_text import print_model, print_presets, print_train
from simulator.frontend.served_cmd import add_engine_arg, check_served, served_extras
from simulator.hardware.specs import PRESETS, STORAGE_DTYPE_BYTES, get_chip, load_chip_file
from simulator.report.result import dumps_json
from simulator.units import parse_int, parse_positive, parse_tokens

if TYPE_CHECKING:  # annotations only
    from simulator.hardware.specs import ChipSpec
    from simulator.workloads.budget import Parallelism
    from simulator.workloads.transformer import TransformerConfig

MODES = ("decode", "prefill", "train")


def add_model_parser(sub: Any) -> None:
    """Register ``podsim model`` on the subcommand set ``sub``."""
    from simulator.workloads.plans import KV_SHARDINGS, SCHEDULES

    p = sub.add_parser("model", help=HELP["model"])
    p.add_argument("preset", nargs="?", help="a model preset (see --list)")
    p.add_argument("--list", action="store_true", help="list the model presets")
    p.add_argument("--config", metavar="F.toml", help="TransformerConfig fields in TOML")
    p.add_argument("--hf-config", metavar="config.json", help="a Hugging Face config.json")
    p.add_argument("--mode", default="decode", help=f"one of {', '.join(MODES)}")
    p.add_argument("--batch", default="1", help="requests (decode, prefill) or sequences (train) in the step")
    p.add_argument("--context", help="decode: cached positions per request before this step "
                                                   "(one number, or one per request: 100,2000,...; 8Ki = 8192, "
                                                   "8k is refused as ambiguous)")
    p.add_argument("--seq", help="train: tokens per sequence; prefill: prompt tokens per request (default 1024; "
                                 "4Ki = 4096)")
    p.add_argument("--chip", default="tpu-v5e", help=f"preset name ({', '.join(PRESETS)})")
    p.add_argument("--chip-file", metavar="F.toml")
    p.add_argument("--topology", help="topology spec (default: the chip's slice of the mesh's shape)")
    p.add_argument("--mesh", help="axes data, pipeline, fsdp, expert, sequence, model (train), data and model "
                                  "(decode, prefill), e.g. fsdp=4,model=2")
    p.add_argument("--microbatches", help="train: microbatches per step (pipeline, accumulation; default 1)")
    p.add_argument("--schedule", help=f"train: pipeline schedule, one of {', '.join(SCHEDULES)} (default 1f1b)")
    p.add_argument("--virtual-stages", help="train: layer chunks per device (interleaved schedule; default 2)")
    p.add_argument("--checkpoints-per-layer", metavar="K|POLICY",
                   help="train: saved [tokens, d_model] tensors per layer, or none (the default), selective, full")
    p.add_argument("--zero", help="train: what the fsdp axis shards: 1 optimizer, 2 + gradients, 3 + weights "
                                 "(the default)")
    p.add_argument("--no-master-copy", action="store_true", help="train: no fp32 master weights (4 B/param less)")
    p.add_argument("--no-reshard-after-forward", action="store_true",
                   help="train, --zero 3: keep each layer's gathered weights from its forward to its backward (FSDP "
                        "SHARD_GRAD_OP: one gather per layer and microbatch; closed forms only)")
    p.add_argument("--tp-overlap", action="store_true", help="train: overlap tensor-parallel collectives "
                                                              "with the matmuls")
    p.add_argument("--sequence-attention", help="train: ring (the default) or allgather (sequence axis)")
    p.add_argument("--kv-sharding", help=f"decode/prefill: one of {', '.join(KV_SHARDINGS)} (default heads)")
    p.add_argument("--layout", default="1d", help="decode/prefill: 1d (model axis, Megatron), 2d (weight-stationary "
                                                "over an X x Y grid of the model axis, the best grid) or 2d:XxY")
    p.add_argument("--weight-dtype", help=f"one of {', '.join(STORAGE_DTYPE_BYTES)} (int4: half a byte a "
                                          "weight, computed at the bf16 rate)")
    p.add_argument("--kv-dtype", help=f"one of {', '.join(STORAGE_DTYPE_BYTES)}")
    p.add_argument("--compute-dtype", help="MXU rate: bf16 (weight-only quantization) or int8/fp8 (default: "
                                           "8-bit when the weights are)")
    p.add_argument("--params", metavar="N", help="an abstract model of N parameters instead of a preset (with "
                                                  "--kv-bytes-per-token for decode and prefill)")
    p.add_argument("--kv-bytes-per-token", metavar="BYTES", help="abstract model: KV-cache bytes per token, all "
                                                                  "layers (e.g. 100e3 or 100kB)")
    p.add_argument("--tokens-total", metavar="T", help="train: project a whole run of T tokens (time_to_train_s)")
    p.add_argument("--assume-mfu", metavar="F", help="train: project at this utilisation, 6 N T / (chips peak F), "
                                                     "as the book estimates; prefill: the step at this utilisation, "
                                                     "FLOPs / (chips peak F) (assumed_mfu_step_time_s)")
    p.add_argument("--measured-chip-hours", metavar="H", help="train, with --tokens-total T: the MFU a run of T "
                   "tokens in H measured chip-hours achieved, 6 N T / (H x 3600 x peak) (measured_mfu at the bf16 "
                   "peak, measured_mfu_8bit at the int8/fp8 peak)")
    p.add_argument("--chips", metavar="N", help="train: chips the run is projected on (default: the mesh's)")
    p.add_argument("--decode-length", metavar="N", help="decode: tokens a request generates (the median), every step "
                   "priced as this one: decode_time_s, queries_per_s(_per_chip), sequences finished and KV tokens "
                   "evicted per step")
    p.add_argument("--prefill-mfu", metavar="F", help="decode, with --decode-length: one request's prefill of its "
                   "--context tokens at this utilisation on the same chips (prefill_s, book_prefill_s) and the "
                   "disaggregated prefill:generate server ratio")
    p.add_argument("--price-per-chip-hour", metavar="USD", help="price of one chip-hour, for the cost of a step")
    p.add_argument("--no-simulate", action="store_true", help="closed forms only (skip the simulated step)")
    p.add_argument("--exact", action="store_true", help="simulate every chip, not one per pipeline stage (train) or "
                                                         "one for all (decode, prefill) by symmetry (the same figures, "
                                                         "slower)")
    p.add_argument("--calibrated", action="store_true", help="also simulate at the chip's fitted efficiencies, "
                                                              "beside the ideal step (calibrated_* keys)")
    add_engine_arg(p)  # decode/prefill: the served step, one GPU or a mesh (simulator.frontend.served_cmd)
    p.add_argument("--framework", default=None,
                   help="train --calibrated on GPUs: whose fitted constants (megatron-core, the default; "
                        "megatron-lm, llm-foundry, torchtitan, llama3-meta)")
    p.add_argument("--ignore-memory", action="store_true",
                   help="price a state that does not fit the chips' HBM anyway (exit 0; every output says so); "
                        "without it such a state is refused (exit 2)")
    p.add_argument("--json", action="store_true")
    add_fault_args(p)


def model_config(args: argparse.Namespace) -> Any:
    """The model named by PRESET, --config or --hf-config (exactly one); None for an abstract --params N."""
    from simulator.workloads import transformer

    params = getattr(args, "params", None)  # `podsim plan` shares this and has no --params
    given = [x for x in (args.preset, args.config, args.hf_config, params) if x]
    if len(given) != 1:
        choices = ("PRESET, --config F.toml, --hf-config config.json or --params N" if hasattr(args, "params")
                   else "PRESET, --config F.toml or --hf-config config.json")
        raise PodsimError(f"give exactly one of {choices}; presets: " + ", ".join(transformer.PRESETS))
    if params is not None:
        return None  # an abstract model (`simulator.frontend.model_projection`)
    if args.config:
        return transformer.load_config_file(args.config)
    if args.hf_config:
        return transformer.load_hf_config(args.hf_config)
    return transformer.get_model(args.preset)


def _chip(args: argparse.Namespace) -> Any:
    return load_chip_file(args.chip_file) if args.chip_file else get_chip(args.chip)


def _price(args: argparse.Namespace) -> float | None:
    if args.price_per_chip_hour is None:
        return None
    return parse_positive(args.price_per_chip_hour, "number", name="--price-per-chip-hour")


def cmd_model(args: argparse.Namespace) -> None:
    if args.list:
        print_presets(args.json)
        return
    if args.mode not in MODES:
        raise PodsimError(f"--mode {args.mode!r}; valid modes: {', '.join(MODES)}")
    from simulator.frontend import model_projection as projection

    cfg = model_config(args)
    projection.check_flags(args)
    projection.check_serving_flags(args)
    check_mode_flags(args)
    chip = _chip(args)
    if cfg is None:
        out = check_fit(args, projection.abstract_model(args, chip, _price(args)))
    else:
        out = check_fit(args, _train(args, cfg, chip) if args.mode == "train" else _serve(args, cfg, chip))
        projection.add_projection(args, out, cfg, chip, _price(args))
    projection.add_measured(args, out, chip, cfg)
    projection.add_serving(args, out, chip, cfg)
    if args.json:
        print(dumps_json(out))
    elif out.get("abstract") and args.mode == "train":
        projection.print_projection(out)
    elif args.mode == "train":
        print_train(out)
        projection.print_projection(out)
    else:
        print_model(out)


#: Flags a training step does not read, and why (`check_mode_flags`).
TRAIN_IGNORES = {
    "context": "--context is decode's cached positions per request; a training step's tokens are --seq",
    "kv_sharding": "--kv-sharding shards decode's KV cache; a training step keeps none (split positions with "
                   "--mesh sequence=N)",
    "compute_dtype": "--compute-dtype sets decode's MXU rate; a training step computes in its model's own dtype",
    "weight_dtype": "--weight-dtype quantizes decode's weights; a training step keeps its model's own dtype",
    "kv_dtype": "--kv-dtype sets decode's KV-cache dtype; a training step keeps no KV cache",
    "engine": "--engine prices a calibrated decode or prefill step; a training step has no serving engine",
}


#: Flags only a training step reads, and why decode and prefill refuse them (`check_mode_flags`).
SERVE_IGNORES = {
    "zero": "--zero sets what a training step's fsdp axis shards; a {mode} step keeps no gradients or optimizer",
    "microbatches": "--microbatches splits a training step's batch; a {mode} step runs its --batch at once",
    "checkpoints_per_layer": "--checkpoints-per-layer saves a training step's activations for its backward pass; "
                             "a {mode} step has no backward pass",
    "virtual_stages": "--virtual-stages interleaves a training pipeline; a {mode} step has no pipeline axis",
    "tp_overlap": "--tp-overlap overlaps a training step's tensor-parallel collectives; a {mode} step does not model "
                  "it",
    "sequence_attention": "--sequence-attention prices a training step's sequence axis; a {mode} step has none "
                          "(shard the KV cache with --kv-sharding sequence)",
    "no_master_copy": "--no-master-copy drops a training step's fp32 master weights; a {mode} step keeps none",
    "no_reshard_after_forward": "--no-reshard-after-forward keeps a training step's gathered weights for its "
                                "backward pass; a {mode} step has none",
    "framework": "--framework names a GPU training framework's fitted constants; a {mode} step's are --engine's",
}
#: Defaults of the training flags, filled in once `check_mode_flags` has told a given flag from its default.
TRAIN_DEFAULTS = {"microbatches": "1", "virtual_stages": "2", "checkpoints_per_layer": "none", "zero": "3",
                  "sequence_attention": "ring"}


def check_mode_flags(args: argparse.Namespace) -> None:
    """Refuse a flag the mode does not read (rather than run without it), then fill in the defaults of those
    given no value: --context 0, --kv-sharding heads, --schedule 1f1b, and the training flags'."""
    if args.mode != "train":
        given = next((k for k in SERVE_IGNORES if getattr(args, k, None) not in (None, False)), None)
        if given is not None:
            raise PodsimError(f"{SERVE_IGNORES[given].format(mode=args.mode)} (drop --{given.replace('_', '-')}, "
                              "or add --mode train)")
        if args.mode == "decode" and args.seq is not None:
            raise PodsimError("--seq is prefill's prompt tokens or a training step's sequence; a decode step adds "
                              "one token to each request's --context (drop --seq, or add --mode prefill)")
    for key, value in TRAIN_DEFAULTS.items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    if args.mode == "train":
        fp8_forecast = args.calibrated and args.compute_dtype == "fp8"  # FP8 training: the GPU forecast reads it
        given = next((k for k in TRAIN_IGNORES if getattr(args, k, None) is not None
                      and not (k == "compute_dtype" and fp8_forecast)), None)
        if given is not None:
            raise PodsimError(f"{TRAIN_IGNORES[given]} (drop --{given.replace('_', '-')})")
        if args.schedule is not None and args.params is None:
            from simulator.workloads.plans import parse_plan_mesh

            if parse_plan_mesh(args.mesh).size("pipeline") == 1:
                raise PodsimError(f"--schedule {args.schedule} orders a pipeline's microbatches, but --mesh "
                                  f"{args.mesh or '(one chip)'} has no pipeline axis (add pipeline=N, or drop "
                                  "--schedule)")
    elif args.schedule is not None:
        raise PodsimError(f"--schedule {args.schedule} is a training pipeline's; --mode {args.mode} has none "
                          "(drop --schedule, or add --mode train)")
    args.context = "0" if args.context is None else args.context
    args.kv_sharding = args.kv_sharding or "heads"
    args.schedule = args.schedule or "1f1b"


IGNORED_MEMORY = "priced anyway (--ignore-memory): this state does NOT fit in HBM, so no real run takes this step"


def check_fit(args: argparse.Namespace, out: dict[str, Any]) -> dict[str, Any]:
    """Refuse a training state that does not fit the chips' HBM (`PodsimError`, naming what it needs and has),
    unless --ignore-memory: then ``out`` gains ``ignore_memory`` and a first note saying it was priced anyway.
    A decode or prefill budget answers whether it fits (``fits``, ``max_batch``, its note) and is not refused:
    that is the question it asks (the public contract's ``fits`` key)."""
    if out.get("fits", True) or args.mode != "train":
        return out
    gib = 2**30
    need = out.get("memory_per_chip_bytes", out.get("hbm_needed_per_chip_bytes"))
    cap = out.get("hbm_capacity_bytes")
    what = f"{out.get('model', 'the model')} {args.mode} on {out.get('chip', 'the chip')}"
    size = f"needs {need / gib:.2f} GiB per chip of {cap / gib:.2f} GiB HBM" if need and cap else "needs more HBM"
    note = out.get("fit_note", "more chips (--mesh) or smaller dtypes").removeprefix("does not fit: ")
    hint = (f"fewest chips that hold it: {out['min_chips']} (more --mesh chips, --zero, checkpointing)"
            if "min_chips" in out else note)
    if not getattr(args, "ignore_memory", False):
        raise PodsimError(f"{what} does not fit: it {size}; {hint}; or --ignore-memory to price it anyway")
    return {**out, "ignore_memory": True, "notes": [f"{IGNORED_MEMORY} ({size})", *out.get("notes", [])]}


def train_options(args: argparse.Namespace) -> Any:
    """`TrainOptions` from the training flags."""
    from simulator.workloads.plans import POLICIES, TrainOptions

    ckpt = args.checkpoints_per_layer
    if ckpt not in POLICIES and not (ckpt.strip().isascii() and ckpt.strip().isdigit()):
        raise PodsimError(f"--checkpoints-per-layer {ckpt!r}: give a number K of saved [tokens, d_model] tensors per "
                          f"layer or a policy: {', '.join(POLICIES)}")
    checkpoint = ckpt if ckpt in POLICIES else parse_int(ckpt, name="--checkpoints-per-layer", maximum=10**6)
    return TrainOptions(microbatches=parse_int(args.microbatches, name="--microbatches", maximum=10**6),
                        schedule=args.schedule, checkpoint=checkpoint,
                        virtual_stages=parse_int(args.virtual_stages, name="--virtual-stages", maximum=1024),
                        zero=parse_int(args.zero, name="--zero", minimum=0, maximum=3),
                        master_copy=not args.no_master_copy, tp_overlap=args.tp_overlap,
                        reshard_after_forward=not args.no_reshard_after_forward,
                        sequence_attention=args.sequence_attention)


def _train(args: argparse.Namespace, cfg: TransformerConfig, chip: ChipSpec) -> dict[str, Any]:
    from simulator.hardware.train_calibration import train_calibrated_chips
    from simulator.workloads.plans import parse_plan_mesh, train_plan
    from simulator.workloads.plans.calibrated import calibrated_train_step, is_gpu, slice_shape_for

    if args.layout != "1d":
        raise PodsimError(f"--layout {args.layout} is for decode and prefill; a training step lays its plan with "
                          "--mesh (drop --layout)")
    batch = parse_int(args.batch, name="--batch")
    seq = parse_tokens(args.seq or "1024", name="--seq", maximum=2**24)
    out = train_plan(cfg, chip, batch, seq, parse_plan_mesh(args.mesh), train_options(args), args.topology,
                     simulate=not args.no_simulate, trace=False, price_per_chip_hour=_price(args), fast=not args.exact)
    out.pop("_system", None)
    if _calibrated(args, train=True):  # the forecast: the whole step fitted to published runs, beside the bound
        if chip.name not in train_calibrated_chips():
            raise PodsimError(f"no calibrated training step for chip {chip.name!r} (a user chip has no published "
                              f"runs); calibrated chips: {', '.join(train_calibrated_chips())} -- or drop "
                              "--calibrated for the bound")
        plan = parse_plan_mesh(args.mesh)
        gpu = {"dtype": "fp8"} if args.compute_dtype == "fp8" else {}
        if gpu and not is_gpu(chip):
            raise PodsimError(f"--compute-dtype fp8 prices an FP8 training step on GPUs; the calibrated step on "
                              f"{chip.name} is fitted to bf16 TPU runs (drop --compute-dtype)")
        if args.framework is not None:
            if not is_gpu(chip):
                raise PodsimError(f"--framework {args.framework} names a GPU training framework; the calibrated "
                                  f"step on {chip.name} is fitted to published TPU runs (drop --framework)")
            gpu["framework"] = args.framework
        cal = calibrated_train_step(cfg, chip, plan, train_options(args), batch, seq,
                                    slice_shape_for(args.topology, plan), gpu=gpu,
                                    check_memory=not args.ignore_memory)
        out.update(calibrated_step_time_s=cal["step_time_s"], calibrated_mfu=cal["mfu"],
                   calibrated_tokens_per_s=cal["tokens_per_s"], calibrated_step=cal,
                   uncalibrated=cal.get("uncalibrated", []))
        if gpu.get("dtype") == "fp8":
            out.setdefault("notes", []).append(
                f"the bound above runs the model's own dtype at the bf16 peak; the FP8 forecast's own bound (FP8 "
                f"GEMMs at their peak) is {cal['ideal']['step_time_s'] * 1e3:.4g} ms")
    return _with_notes(out, chip, out.get("topology"))


def _serve(args: argparse.Namespace, cfg: TransformerConfig, chip: ChipSpec) -> dict[str, Any]:
    from simulator.workloads.budget import Parallelism, decode_budget
    from simulator.workloads.plans import parse_plan_mesh

    plan = parse_plan_mesh(args.mesh)
    others = [a for a in plan.used if a not in ("data", "model")]
    if others:
        raise PodsimError(f"--mesh axis {others[0]}={plan.size(others[0])} is for training; decode and prefill run "
                          "on data and model axes (shard the KV cache with --kv-sharding batch or sequence)")
    par = Parallelism(plan.size("data"), plan.size("model"))
    calibrated = _calibrated(args)
    check_served(args, par)
    batch = parse_int(args.batch, name="--batch")
    contexts = [parse_tokens(c, name="--context", minimum=0) for c in args.context.split(",")]
    context = contexts[0] if len(contexts) == 1 else contexts
    new = 1 if args.mode == "decode" else parse_tokens(args.seq or "1024", name="--seq", maximum=2**24)
    if args.layout != "1d":  # 2-D weight-stationary (`simulator.frontend.serve_layout`)
        from simulator.frontend.serve_layout import serve_2d

        out = serve_2d(args, cfg, chip, par, batch, context, new, _price(args))
        if calibrated:  # no serving engine's factors for a 2-D layout
            out["uncalibrated"] = [f"serving factors for --layout {args.layout} (fitted to 1-D Megatron layouts "
                                   "only: calibrated_* runs the kernels at the chip's fitted efficiencies)"]
        return _with_notes(out, chip, out["topology"])
    out = decode_budget(cfg, chip, batch, context, par, args.weight_dtype, args.kv_dtype, new, args.kv_sharding,
                        args.compute_dtype)
    out.update(mode=args.mode, step_time_s=None)
    if not args.no_simulate:
        from simulator.workloads.simulate import simulate_decode

        # --calibrated runs ONE simulation, the calibrated one; the ideal figure beside it is then the closed-form
        # bound of the same ops (`StepSimulation.ideal_bound`) instead of a second, ideal simulation
        sim = simulate_decode(cfg, chip, batch, context, par, args.weight_dtype, args.kv_dtype, new,
                              trace=not calibrated, calibrated=calibrated, kv_sharding=args.kv_sharding,
                              topology=args.topology, fast=not args.exact)
        out.update(sim.summary())
        if calibrated:
            out.update(step_time_s=sim.ideal_bound(), ideal_from="closed form", simulated_run="calibrated",
                       calibrated_step_time_s=sim.env.now, calibrated_tokens_per_s=batch * new / sim.env.now)
        else:
            out.update(ideal_from="simulation", simulated_run="ideal")
    out.update(served_extras(args, cfg, chip, par, batch, context, new))
    step = out["step_time_s"] or out["lower_bound_s"]
    out["tokens_per_s"] = batch * new / step
    price = _price(args)
    if price is not None:
        from simulator.workloads.projection import step_cost

        out.update(step_cost(price, par.chips, step, batch * new))
    return _with_notes(out, chip, args.topology or _serve_topology(par, chip))


def _calibrated(args: argparse.Namespace, train: bool = False) -> bool:
    """--calibrated asked; a training step's forecast is a closed form (no simulation needed), the serving
    modes' is a simulated step (not with --no-simulate)."""
    if args.calibrated and args.no_simulate and not train:
        raise PodsimError("--calibrated sets a simulated step beside the ideal one; drop --no-simulate")
    return bool(args.calibrated)


def _serve_topology(par: Parallelism, chip: ChipSpec) -> str | None:
    """The slice a decode or prefill mesh runs on (`simulator.workloads.simulate.StepSimulation`)."""
    from simulator.workloads.mesh import MeshSpec, default_topology_for

    if par.chips == 1:
        return None
    return default_topology_for(MeshSpec(("data", "model"), (par.data, par.model), (None, None)), chip)


def _with_notes(out: dict[str, Any], chip: ChipSpec, topology: str | None) -> dict[str, Any]:
    """``out`` with ``notes`` when ``topology`` is not one ``chip`` is built into (`simulator.engine.what_if`)."""
    import topologies
    from simulator.engine.what_if import topology_notes

    notes = [*out.get("notes", []), *(topology_notes(chip, topologies.parse_spec(topology, chip)) if topology else [])]
    return {**out, "notes": notes} if notes else out
