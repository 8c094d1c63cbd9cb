"""``podsim plan``: rank every legal layout of a model on a pod, simulate the best (`workloads.plans.search`)."""
from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from simulator.analytic import EXPOSED_MEANING
from simulator.errors import PodsimError
from simulator.frontend.command_help import HELP
from simulator.hardware.specs import PRESETS, get_chip, load_chip_file
from simulator.report.result import dumps_json
from simulator.units import format_quantity, parse_int, parse_tokens

if TYPE_CHECKING:  # annotations only
    from simulator.hardware.specs import ChipSpec

MODES = ("train", "prefill", "decode", "serve")


def add_plan_parser(sub: Any) -> None:
    """Register ``podsim plan`` on the subcommand set ``sub``."""
    p = sub.add_parser("plan", help=HELP["plan"])
    p.add_argument("preset", nargs="?", help="a model preset (see `podsim model --list`)")
    p.add_argument("--config", metavar="F.toml", help="TransformerConfig fields in TOML")
    p.add_argument("--hf-config", metavar="config.json", help="a Hugging Face config.json")
    p.add_argument("--chip", default="tpu-v5e", help=f"preset name ({', '.join(PRESETS)})")
    p.add_argument("--chip-file", metavar="F.toml")
    p.add_argument("--chips", help="chip count (each layout on the chip's slice of its own shape)")
    p.add_argument("--topology", help="one topology for every layout (its chip count), e.g. torus:4x4")
    p.add_argument("--mode", default="train", help=f"one of {', '.join(MODES)}")
    p.add_argument("--batch", required=True, help="sequences (train) or requests (prefill, decode) per step")
    p.add_argument("--seq", required=True, help="tokens per sequence (train), prompt (prefill) or context (decode)")
    p.add_argument("--top", default="3", help="how many of the best layouts to simulate")
    p.add_argument("--workers", default="1", help="processes simulating the best layouts at once (joblib)")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="simulate the best layouts on this existing Dask cluster (e.g. tcp://host:8786), as "
                        "`podsim sweep --scheduler` does")
    p.add_argument("--calibrated", action="store_true",
                   help="train and serve: rank by the calibrated forecast (fitted to published runs), the ideal bound "
                        "beside it")
    p.add_argument("--plot", metavar="OUT.png", help="step time against memory per chip, simulated marked")
    p.add_argument("--json", action="store_true")
    from simulator.frontend.serve_cmd import add_plan_serve_args

    add_plan_serve_args(p)  # --mode serve: --rate, --slo-ttft, --slo-tpot, --output-len


def cmd_plan(args: argparse.Namespace) -> None:
    from simulator.frontend.model_cmd import model_config
    from simulator.workloads.plans.search import search

    if args.mode not in MODES:
        raise PodsimError(f"--mode {args.mode!r}; valid modes: {', '.join(MODES)}")
    if args.mode == "serve":  # layouts ranked by chips needed for a rate and SLOs (issue 33)
        from simulator.frontend.serve_cmd import cmd_plan_serve

        return cmd_plan_serve(args)
    cfg = model_config(args)
    chip = load_chip_file(args.chip_file) if args.chip_file else get_chip(args.chip)
    chips = _chip_count(args, chip)
    if args.plot:
        from simulator.report.plots import check_picture_path

        check_picture_path(args.plot)
    workers = parse_int(args.workers, name="--workers", maximum=1024)
    if args.scheduler is not None and workers != 1:
        raise PodsimError("--workers is not allowed with --scheduler (the Dask cluster's workers simulate the "
                          "finalists)")
    batch = parse_int(args.batch, name="--batch")
    seq = parse_tokens(args.seq, name="--seq", maximum=2**24)
    top = parse_int(args.top, name="--top", minimum=0)
    with _client(args.scheduler) as client:
        out = search(cfg, chip, chips, args.mode, batch, seq, top, workers, args.topology,
                     calibrated=args.calibrated, client=client)
    out["topology"] = args.topology
    if args.plot:
        from simulator.report.plots import plan_scatter, save

        labels = [",".join(f"{k}={v}" for k, v in r["mesh"].items()) + _options_text(
            r.get("options", {}), r["mesh"].get("pipeline", 1) > 1) for r in out["plans"] if r["simulated"]]
        save(plan_scatter(out["plans"], chip.hbm_capacity_bytes, title=f"{cfg.name} {args.mode} on {chips} x "
                          f"{chip.name} (options: mN microbatches, zN ZeRO stage, ckpt policy, overlap TP)",
                          labels=labels), args.plot)
    print(dumps_json(out) if args.json else render(out))


@contextlib.contextmanager
def _client(address: str | None) -> Iterator[Any]:
    """A Dask client of the cluster at ``address`` for the command's length (None without --scheduler)."""
    if address is None:
        yield None
        return
    from simulator.frontend.sweep import dask_client

    client = dask_client(address)
    try:
        yield client
    finally:
        client.close()


def _chip_count(args: argparse.Namespace, chip: ChipSpec) -> int:
    if (args.chips is None) == (args.topology is None):
        raise PodsimError("give --chips N or --topology SPEC (one of them)")
    if args.chips is not None:
        return parse_int(args.chips, name="--chips", maximum=65_536)
    from simulator.engine.system import resolve_topology

    return sum(1 for _, role in resolve_topology(args.topology, chip).nodes(data="role") if role == "chip")


def render(out: dict[str, Any], limit: int = 15) -> str:
    """The ranked table: mesh, step time (simulated or closed form), MFU, memory per chip, exposed comm."""
    calibrated = out.get("ranked_by") == "calibrated forecast"
    lines = [f"{out['model']} {out['mode']} on {out['chips']} x {out['chip']}, batch {out['batch']}, seq {out['seq']}: "
             f"{out['fitting']} of {out['layouts']} layouts fit ({out['layouts']:,} layouts and {out['candidates']:,} "
             f"candidates priced by closed form, {out.get('finalists_simulated', 0)} finalists simulated)"]
    if calibrated:
        lines.append("  ranked by the calibrated forecast (fitted to published runs); bound: the ideal step at peak "
                     "(sim: simulated, cf: closed form)")
    forecast_head = f"{'forecast':>11}{'MFU':>6}" if calibrated else ""
    lines.append(f"  {'#':>2}  {'mesh and options':<50}{forecast_head}{'step bound':>11}  "
                 f"{'':<4}{'MFU':>6}{'GiB peak':>10}  exposed communication")
    for i, r in enumerate(out["plans"][:limit], 1):
        mesh = ",".join(f"{k}={v}" for k, v in r["mesh"].items()) + \
            _options_text(r.get("options", {}), r["mesh"].get("pipeline", 1) > 1)
        kind = "sim" if r["simulated"] else "cf"
        exposed = ", ".join(f"{a} {format_quantity(t, 's')}" for a, t in r["exposed_comm_s"].items() if t) or "-"
        fit = "" if r["fits"] else " (does not fit)"
        lines.append(f"  {i:>2}  {mesh:<50}{_forecast_text(r) if calibrated else ''}"
                     f"{format_quantity(r['step_time_s'], 's'):>11}  {kind:<4}{r['mfu']:>6.1%}"
                     f"{r.get('memory_peak_bytes', r['memory_per_chip_bytes']) / 2**30:>10.2f}  {exposed}{fit}")
    if len(out["plans"]) > limit:
        lines.append(f"  ... {len(out['plans']) - limit} more (--json lists them all)")
    if out["plans"]:
        lines.append("  run row 1 alone: podsim model " + " ".join(model_command(out, out["plans"][0])))
    legend = ("  step and MFU: bound (ideal peak), sim simulated, cf closed form; GiB peak: the memory verdict "
              "(simulated peak: state + transient, else the closed form)")
    return "\n".join([*lines, legend, f"  options: {OPTIONS_LEGEND}", f"  ({EXPOSED_MEANING})"])


def _forecast_text(row: dict[str, Any]) -> str:
    """A row's calibrated forecast and its MFU, or dashes where the calibrated model does not price it."""
    if row.get("calibrated_step_time_s") is None:
        return f"{'-':>11}{'-':>6}"
    return f"{format_quantity(row['calibrated_step_time_s'], 's'):>11}{row['calibrated_mfu']:>6.1%}"


def model_command(out: dict[str, Any], row: dict[str, Any]) -> list[str]:
    """The ``podsim model`` arguments that run ``row`` of plan ``out`` (its mesh, options and topology): the same
    computation, so it prints the row's numbers (``--no-simulate`` for a closed-form row)."""
    args = [out["model"], "--chip", out["chip"], "--mode", out["mode"], "--batch", str(out["batch"])]
    mesh = ",".join(f"{k}={v}" for k, v in row["mesh"].items())
    args += ["--mesh", mesh] + (["--topology", row["topology"]] if row.get("topology") else [])
    opts = row.get("options", {})
    if out["mode"] == "train":
        args += ["--seq", str(out["seq"]), "--microbatches", str(opts["microbatches"]),
                 "--checkpoints-per-layer", str(opts["checkpoint"])]
        if row["mesh"].get("pipeline", 1) > 1:
            args += ["--schedule", opts["schedule"]]
            if "virtual_stages" in opts:
                args += ["--virtual-stages", str(opts["virtual_stages"])]
        if opts.get("zero") is not None:
            args += ["--zero", str(opts["zero"])]
        if opts.get("tp_overlap"):
            args.append("--tp-overlap")
    else:
        args += ["--context", str(out["seq"])] if out["mode"] == "decode" else ["--seq", str(out["seq"])]
        args += ["--layout", opts.get("layout", "1d")]
        if opts.get("layout", "1d") == "1d":
            args += ["--kv-sharding", "auto"]
    return args + ([] if row["simulated"] else ["--no-simulate"])


#: What each word of a row's options means (`_options_text`), printed under the table as its legend.
OPTIONS_LEGEND = ("mN: N microbatches; gpipe / 1f1b / interleavedxV: the pipeline schedule (V layer chunks per "
                  "device; shown only with a pipeline axis); zN: ZeRO stage on the fsdp axis (1 optimizer, 2 + "
                  "gradients, 3 + weights); ckpt P: activation checkpoint policy P; overlap: tensor-parallel "
                  "collectives overlapped with the matmuls; 2d:XxY: a 2-D weight-stationary grid")


def _options_text(options: dict[str, Any], pipeline: bool = True) -> str:
    """The options a row was priced with, briefly: the layout (decode, prefill), or the pipeline schedule,
    microbatches, ZeRO stage (none shown without an fsdp axis), checkpoint policy and TP overlap (train); no
    schedule without a pipeline axis (``pipeline`` False), where there is none to order."""
    if "layout" in options:
        return "" if options["layout"] == "1d" else f" {options['layout']}"
    if not options:
        return ""
    schedule = options["schedule"] + (f"x{options['virtual_stages']}" if "virtual_stages" in options else "")
    parts = [f"m{options['microbatches']}"] + ([schedule] if pipeline else []) + \
        ([f"z{options['zero']}"] if options["zero"] else [])
    if options["checkpoint"] != "none":
        parts.append(f"ckpt {options['checkpoint']}")
    if options["tp_overlap"]:
        parts.append("overlap")
    return " " + " ".join(parts)
