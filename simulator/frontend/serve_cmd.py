"""``podsim serve``: a stream of requests served on a mesh, latency percentiles, throughput and goodput, the
bound (ideal steps) beside the forecast (calibrated steps); ``--find-rate`` for the highest rate within the SLOs.

``--trace`` reads requests from a CSV (``--trace F.csv``, `simulator.workloads.serving.arrivals`) and writes
the Perfetto counters (``--trace OUT.json``): the suffix says which; give it twice for both.
"""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from simulator.errors import PodsimError
from simulator.frontend.command_help import HELP
from simulator.hardware.specs import PRESETS, get_chip, load_chip_file
from simulator.report.result import dumps_json
from simulator.units import format_quantity, parse_int, parse_positive, parse_quantity
from simulator.workloads.budget import Parallelism, check_layout, parse_parallelism

if TYPE_CHECKING:
    from simulator.hardware.specs import ChipSpec
    from simulator.workloads.serving.simulate import ServeSetup
    from simulator.workloads.transformer import TransformerConfig

PREEMPT_MODES = ("recompute", "swap")  #: `simulator.workloads.serving.simulate.PREEMPT_MODES` (held equal by a test)


def add_serve_parser(sub: Any) -> None:
    """Register ``podsim serve`` on the subcommand set ``sub``."""
    p = sub.add_parser("serve", help=HELP["serve"])
    p.add_argument("preset", nargs="?", help="a model preset (see `podsim model --list`)")
    p.add_argument("--config", metavar="F.toml", help="TransformerConfig fields in TOML")
    p.add_argument("--hf-config", metavar="config.json", help="a Hugging Face config.json")
    p.add_argument("--chip", default="h100", help=f"preset name ({', '.join(PRESETS)})")
    p.add_argument("--chip-file", metavar="F.toml")
    p.add_argument("--mesh", help="data=D,model=M: D replicas of M tensor-parallel chips (default one chip)")
    p.add_argument("--topology", help="the links (needed for --prefill-mesh/--decode-mesh), e.g. nodes:2:8")
    p.add_argument("--rate", help="mean arrivals per second (Poisson; --burstiness for gamma gaps)")
    p.add_argument("--burstiness", default="1", help="coefficient of variation of the gaps (1: Poisson; >1 bursty)")
    p.add_argument("--trace", action="append", default=[], metavar="F.csv|OUT.json",
                   help="F.csv: requests to serve (arrival, prompt, output columns); OUT.json: Perfetto counters")
    p.add_argument("--find-rate", action="store_true", help="the highest rate meeting --slo-ttft / --slo-tpot")
    p.add_argument("--duration", default="300s", help="time the arrivals span (default 300 s)")
    p.add_argument("--prompt-len", default="1024", help="N, uniform:A:B, lognormal:MEDIAN:SIGMA, empirical:F.csv")
    p.add_argument("--output-len", default="128", help="as --prompt-len (tokens generated per request)")
    p.add_argument("--slo-ttft", help="time-to-first-token target, e.g. 500ms")
    p.add_argument("--slo-tpot", help="time-per-output-token target, e.g. 50ms")
    p.add_argument("--slo-attainment", default="0.9", help="fraction of requests that must meet the SLOs (0.9)")
    p.add_argument("--max-batch", default="256", help="sequences per iteration (vLLM max_num_seqs, 256)")
    p.add_argument("--chunked-prefill", default="8192", help="tokens per iteration (0: no chunking, prefill first)")
    p.add_argument("--scheduler-steps", default="1",
                   help="decode steps per scheduling window (vLLM 0.6's --num-scheduler-steps; 1: every step)")
    p.add_argument("--preempt", default="recompute", help=f"when the KV cache is full: {', '.join(PREEMPT_MODES)}")
    p.add_argument("--prefix-hit", default="0", help="fraction of each prompt found in the prefix cache")
    p.add_argument("--max-model-len", default="131072", help="longest request (prompt + output tokens)")
    p.add_argument("--memory-fraction", default="0.9", help="share of HBM for weights + KV (vLLM's 0.9)")
    p.add_argument("--prefill-mesh", help="disaggregated: the prefill replicas' mesh, e.g. data=1,model=4")
    p.add_argument("--decode-mesh", help="disaggregated: the decode replicas' mesh")
    p.add_argument("--calibrated", action="store_true", help="also time every step by the calibrated model")
    p.add_argument("--engine", help="the serving engine whose fitted factors the forecast uses (vllm, ...)")
    p.add_argument("--seed", default="0", help="random seed of the arrivals and lengths")
    p.add_argument("--plot", metavar="OUT.png", help="latency CDFs and the batch / KV timeline")
    p.add_argument("--json", action="store_true")


def _fraction(text: str, flag: str, top: float = 1.0) -> float:
    value = parse_quantity(text, "number", name=flag)
    if not 0 <= value <= top:
        raise PodsimError(f"{flag} {text!r} must be a fraction in [0, {top:g}]")
    return value


def _mesh(text: str | None, flag: str, cfg: TransformerConfig) -> Parallelism:
    par = parse_parallelism(text)
    check_layout(cfg, Parallelism(1, par.model), 1)
    return par


def _setup(args: argparse.Namespace, cfg: TransformerConfig, chip: ChipSpec) -> ServeSetup:
    from simulator.workloads.serving.scheduler import SchedulerConfig
    from simulator.workloads.serving.simulate import ServeSetup, check_setup

    sched = SchedulerConfig(max_batch=parse_int(args.max_batch, name="--max-batch", maximum=65_536),
                            chunk_tokens=parse_int(args.chunked_prefill, name="--chunked-prefill", minimum=0,
                                                   maximum=1_048_576),
                            preempt=args.preempt, prefix_hit=_fraction(args.prefix_hit, "--prefix-hit", 0.999),
                            whole_budget_tokens=max(parse_int(args.max_model_len, name="--max-model-len",
                                                              maximum=2**24), 2048),
                            num_steps=parse_int(args.scheduler_steps, name="--scheduler-steps", maximum=1024))
    mem = _fraction(args.memory_fraction, "--memory-fraction")
    if mem <= 0:
        raise PodsimError(f"--memory-fraction {args.memory_fraction!r} must be > 0")
    pm = _mesh(args.prefill_mesh, "--prefill-mesh", cfg) if args.prefill_mesh else None
    dm = _mesh(args.decode_mesh, "--decode-mesh", cfg) if args.decode_mesh else None
    setup = ServeSetup(cfg, chip, _mesh(args.mesh, "--mesh", cfg), pm, dm, args.topology, sched,
                       parse_int(args.max_model_len, name="--max-model-len", maximum=2**24), mem, args.engine)
    check_setup(setup)
    if pm is not None and args.mesh:
        raise PodsimError("--mesh is for one pool of replicas; with --prefill-mesh / --decode-mesh drop --mesh")
    return setup


def _traces(args: argparse.Namespace) -> tuple[str | None, str | None]:
    csv_in = [t for t in args.trace if t.lower().endswith(".csv")]
    json_out = [t for t in args.trace if t.lower().endswith(".json")]
    other = [t for t in args.trace if t not in csv_in + json_out]
    if other or len(csv_in) > 1 or len(json_out) > 1:
        raise PodsimError(f"--trace {other[0] if other else args.trace!r}: give at most one F.csv (requests in) and "
                          "one OUT.json (Perfetto counters out)")
    return (csv_in[0] if csv_in else None), (json_out[0] if json_out else None)


def _stream_maker(args: argparse.Namespace, trace_in: str | None) -> Any:
    from simulator.workloads.serving.arrivals import parse_length, poisson_arrivals, read_trace

    duration = parse_positive(args.duration, "time", name="--duration")
    prompt, output = parse_length(args.prompt_len, "--prompt-len"), parse_length(args.output_len, "--output-len")
    cv = parse_quantity(args.burstiness, "number", name="--burstiness")
    seed = parse_int(args.seed, name="--seed", minimum=0, maximum=2**63)
    if trace_in:
        arrivals = read_trace(trace_in)
        return lambda rate: arrivals
    return lambda rate: poisson_arrivals(rate, duration, prompt, output, seed, cv)


def _rate(args: argparse.Namespace, trace_in: str | None) -> float | None:
    given = [x for x in (args.rate is not None, trace_in is not None, args.find_rate) if x]
    if len(given) != 1:
        raise PodsimError("give exactly one of --rate R, --trace F.csv or --find-rate")
    if args.rate is None:
        return None
    rate = parse_quantity(args.rate, "number", name="--rate")
    if not rate > 0 or rate == float("inf"):
        raise PodsimError(f"--rate {args.rate!r} must be a finite number of requests per second > 0")
    return rate


def _slo(text: str | None, flag: str) -> float | None:
    return None if text is None else parse_positive(text, "time", name=flag)


def cmd_serve(args: argparse.Namespace) -> None:
    from simulator.frontend.model_cmd import model_config
    from simulator.workloads.serving.simulate import check_stream, kv_transfer_line, report, run_stream

    cfg = model_config(args)
    chip = load_chip_file(args.chip_file) if args.chip_file else get_chip(args.chip)
    trace_in, trace_out = _traces(args)
    rate = _rate(args, trace_in)
    setup = _setup(args, cfg, chip)
    slo_ttft, slo_tpot = _slo(args.slo_ttft, "--slo-ttft"), _slo(args.slo_tpot, "--slo-tpot")
    attainment = _fraction(args.slo_attainment, "--slo-attainment")
    stream = _stream_maker(args, trace_in)
    _check_outputs(args, trace_out)
    transfer, link = (None, None)
    if setup.disaggregated:
        lat, bw, link = kv_transfer_line(setup)
        transfer = (lat, bw)
    kinds = ["bound", "forecast"] if args.calibrated else ["bound"]
    out: dict[str, Any] = _header(setup, args, rate, trace_in)
    if link:
        out["kv_link"] = link
    if args.find_rate:
        from simulator.workloads.serving.findrate import find_rate

        found = find_rate(setup, stream, kinds[-1], slo_ttft, slo_tpot, attainment, transfer=transfer)
        out["find_rate"] = found
        rate = found["rate_per_s"]
        if rate is None:
            print(dumps_json(out) if args.json else render(out))
            return
        out["rate_per_s"] = rate
    arrivals = stream(rate)
    check_stream(setup, arrivals)
    runs = {k: run_stream(setup, arrivals, k, transfer) for k in kinds}
    for k, r in runs.items():
        out[k] = report(r, slo_ttft, slo_tpot)
    out["forecast"] = out.get("forecast")
    out["requests"] = len(arrivals)
    _write_outputs(args, trace_out, runs, out, slo_ttft, slo_tpot)
    print(dumps_json(out) if args.json else render(out))


def _check_outputs(args: argparse.Namespace, trace_out: str | None) -> None:
    from simulator.report.export import open_for_write

    if trace_out:
        open_for_write(trace_out)
    if args.plot:
        from simulator.report.plots import check_picture_path

        check_picture_path(args.plot)


def _header(setup: ServeSetup, args: argparse.Namespace, rate: float | None, trace_in: str | None) -> dict[str, Any]:
    from simulator.workloads.serving.costs import StepCosts, kv_capacity_tokens

    meshes = ({"prefill_mesh": vars(setup.prefill_mesh), "decode_mesh": vars(setup.decode_mesh)}
              if setup.disaggregated else {"mesh": vars(setup.mesh)})
    par = setup.decode_mesh or setup.mesh
    from simulator.workloads.serving.host import describe, host_applies
    from simulator.workloads.serving.simulate import host_parts

    costs = StepCosts(setup.cfg, setup.chip, par.model, calibrated=args.calibrated, engine=setup.engine,
                      eager_prefill=host_applies(setup.engine, setup.sched.num_steps))
    parts = describe(*host_parts(setup)) if args.calibrated else []
    if args.calibrated and costs.eager_prefill:
        parts = [*parts, "vLLM 0.6 prefill steps run eagerly (CUDA graphs are captured for decode only): priced "
                 "kernel by kernel on the GPU kernel model (fitted to Vidur's operator profiles, XLA's H100 table "
                 "and mamf-finder), the norms and residual adds whole on every GPU, the LM head on the last tokens"]
    uncalibrated = costs.uncalibrated if args.calibrated else []
    if parts:
        uncalibrated = [*uncalibrated, "vLLM 0.6 host time on this node's CPU: measured on one A100 node's host "
                        "(Vidur) and front end (SGLang's runs); other hosts are taken as equal"]
    return {"model": setup.cfg.name, "chip": setup.chip.name, **meshes, "chips": setup.chips,
            "topology": setup.topology, "rate_per_s": rate, "trace_in": trace_in,
            "arrivals": "trace" if trace_in else ("poisson" if float(args.burstiness) == 1 else
                                                  f"gamma (cv {float(args.burstiness):g})"),
            "duration_s": None if trace_in else parse_positive(args.duration, "time", name="--duration"),
            "prompt_len": args.prompt_len, "output_len": args.output_len, "seed": int(args.seed),
            "slo_ttft_s": _slo(args.slo_ttft, "--slo-ttft"), "slo_tpot_s": _slo(args.slo_tpot, "--slo-tpot"),
            "scheduler": {k: v for k, v in vars(setup.sched).items() if k != "host"} | {
                                              "max_model_len": setup.max_model_len,
                                              "kv_bytes_per_token": costs.kv_bytes_per_token,
                                              "host_bytes_per_s": setup.chip.pcie_bandwidth_bytes_per_s},
            "kv_capacity_tokens_per_replica": kv_capacity_tokens(setup.cfg, setup.chip, par.model,
                                                                 setup.memory_fraction),
            "calibrated_parts": parts, "uncalibrated": uncalibrated,
            "labels": {"bound": "ideal steps (spec HBM bandwidth and peak FLOP/s): nothing real is faster",
                       "forecast": "calibrated steps (fitted serving factors): what a real engine should get"}}


def _samples(run: Any) -> dict[str, Any]:
    rep = (run.decode_replicas or run.replicas)[0]
    t = rep.timeline
    return {"t_s": t.t_s, "running": t.running, "waiting": t.waiting, "kv": t.kv}


def _write_outputs(args: argparse.Namespace, trace_out: str | None, runs: dict[str, Any], out: dict[str, Any],
                   slo_ttft: float | None, slo_tpot: float | None) -> None:

    main = runs.get("forecast") or runs["bound"]
    if trace_out:
        from simulator.report.export import write_counter_trace

        tracks = {}
        for role, reps in (("replica", main.replicas), ("decode replica", main.decode_replicas)):
            for i, rep in enumerate(reps):
                t = rep.timeline
                tracks[f"{role} {i} ({main.kind})"] = {
                    "batch size": list(zip(t.t_s, t.running, strict=True)),
                    "running requests": list(zip(t.t_s, t.running, strict=True)),
                    "waiting requests": list(zip(t.t_s, t.waiting, strict=True)),
                    "kv occupancy": list(zip(t.t_s, t.kv, strict=True)),
                    "tokens per iteration": list(zip(t.t_s, t.tokens, strict=True))}
        write_counter_trace(tracks, trace_out)
        out["trace_out"] = trace_out
    if args.plot:
        from simulator.report.serving_plots import save_serving_figure, serving_figure
        from simulator.workloads.serving.metrics import latencies

        curves = {k: latencies(r.done) for k, r in runs.items()}
        ax = serving_figure(curves, _samples(main), f"{out['model']} on {out['chips']} x {out['chip']}",
                            {"ttft_s": slo_ttft, "tpot_s": slo_tpot})
        save_serving_figure(ax, args.plot)
        out["plot"] = args.plot


def _ms(value: float | None) -> str:
    return "-" if value is None else format_quantity(value, "s")


def render(out: dict[str, Any]) -> str:
    """The run as text: setup, then per metric the bound beside the forecast."""
    where = (f"prefill {_mesh_text(out['prefill_mesh'])} + decode {_mesh_text(out['decode_mesh'])}"
             if "prefill_mesh" in out else _mesh_text(out["mesh"]))
    lines = [f"{out['model']} on {out['chips']} x {out['chip']} ({where}), {out['arrivals']} arrivals"
             + (f" at {out['rate_per_s']:.4g} req/s" if out.get("rate_per_s") else "")
             + (f", {out['requests']:,} requests" if "requests" in out else "")]
    if "find_rate" in out:
        f = out["find_rate"]
        lines.append(f"  highest rate meeting the SLOs ({f['kind']}, {f['attainment_target']:.0%} attainment): "
                     + (f"{f['rate_per_s']:.4g} req/s" if f["rate_per_s"] else "none (the lowest rate probed fails)")
                     + f" after {len(f['probes'])} simulated runs")
    if "bound" not in out:
        return "\n".join(lines)
    kinds = [k for k in ("bound", "forecast") if out.get(k)]
    lines.append(f"  {'':<28}" + "".join(f"{k:>46}" for k in kinds))
    for key, name in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "end to end")):
        row = [" / ".join(_ms(out[k][key][q]) for q in ("p50", "p90", "p99", "max")) for k in kinds]
        lines.append(f"  {name + ' p50/p90/p99/max':<28}" + "".join(f"{r:>46}" for r in row))
    for key, name in (("requests_per_s", "requests/s"), ("output_tokens_per_s", "output tokens/s"),
                      ("goodput_requests_per_s", "goodput requests/s"), ("slo_attainment", "SLO attainment"),
                      ("kv_peak_occupancy", "peak KV occupancy"), ("preemptions", "preemptions")):
        fmt = "{:.1%}" if key in ("slo_attainment", "kv_peak_occupancy") else "{:,.4g}"
        lines.append(f"  {name:<28}" + "".join(f"{fmt.format(out[k][key]):>46}" for k in kinds))
    if out.get("kv_link"):
        link = out["kv_link"]
        lines.append(f"  KV transfer (simulated on {out['topology']}): {_ms(link['latency_s'])} + bytes / "
                     f"{format_quantity(link['bandwidth_bytes_per_s'], 'B/s')}")
    lines.append("  bound: " + out["labels"]["bound"] + (
        "; forecast: " + out["labels"]["forecast"] if out.get("forecast") else " (add --calibrated for the forecast)"))
    if out.get("calibrated_parts"):
        lines.append("  calibrated parts (forecast only): " + "; ".join(out["calibrated_parts"]))
    if out.get("uncalibrated"):
        lines.append("  uncalibrated: " + "; ".join(out["uncalibrated"]))
    return "\n".join(lines)


def _mesh_text(mesh: dict[str, int]) -> str:
    return f"data={mesh['data']}, model={mesh['model']}"


# -- podsim plan --mode serve ---------------------------------------------------------------------------------
def add_plan_serve_args(p: argparse.ArgumentParser) -> None:
    """The flags ``podsim plan --mode serve`` adds (the rate and SLOs a layout must meet)."""
    p.add_argument("--rate", help="--mode serve: requests per second to serve (Poisson)")
    p.add_argument("--slo-ttft", help="--mode serve: time-to-first-token target")
    p.add_argument("--slo-tpot", help="--mode serve: time-per-output-token target")
    p.add_argument("--output-len", default="128", help="--mode serve: output tokens per request (--seq: prompt)")


def cmd_plan_serve(args: argparse.Namespace) -> None:
    """``podsim plan MODEL --mode serve --rate R --slo-ttft T --slo-tpot T --batch MAX_SEQS --seq PROMPT``:
    model-axis layouts ranked by the chips they need (`simulator.workloads.serving.plan`)."""
    from simulator.frontend.model_cmd import model_config
    from simulator.workloads.serving.arrivals import parse_length, poisson_arrivals
    from simulator.workloads.serving.plan import plan_serving
    from simulator.workloads.serving.scheduler import SchedulerConfig
    from simulator.workloads.serving.simulate import ServeSetup

    cfg = model_config(args)
    chip = load_chip_file(args.chip_file) if args.chip_file else get_chip(args.chip)
    if args.rate is None:
        raise PodsimError("--mode serve needs --rate R (requests per second to serve)")
    rate = parse_quantity(args.rate, "number", name="--rate")
    if not 0 < rate < float("inf"):
        raise PodsimError(f"--rate {args.rate!r} must be a finite number of requests per second > 0")
    prompt, output = parse_length(args.seq, "--seq"), parse_length(args.output_len, "--output-len")
    sched = SchedulerConfig(max_batch=parse_int(args.batch, name="--batch", maximum=65_536))
    setup = ServeSetup(cfg, chip, sched=sched)
    chips = parse_int(args.chips, name="--chips", maximum=65_536) if args.chips else None
    rows = plan_serving(setup, lambda r: poisson_arrivals(r, 120.0, prompt, output, 0), rate,
                        "forecast" if args.calibrated else "bound", _slo(args.slo_ttft, "--slo-ttft"),
                        _slo(args.slo_tpot, "--slo-tpot"))
    for row in rows:
        row["fits_chips"] = None if chips is None or row["chips_needed"] is None else row["chips_needed"] <= chips
    out = {"model": cfg.name, "chip": chip.name, "mode": "serve", "rate_per_s": rate, "chips": chips,
           "kind": "forecast" if args.calibrated else "bound", "plans": rows}
    if args.json:
        print(dumps_json(out))
        return
    print(f"{cfg.name} serving {rate:g} req/s on {chip.name} ({out['kind']}; prompts {args.seq}, outputs "
          f"{args.output_len}): layouts by chips needed")
    for i, r in enumerate(rows, 1):
        if r["chips_needed"] is None:
            print(f"  {i:>2}  model={r['mesh']['model']:<3} cannot serve: {r['reason']}")
            continue
        fit = "" if r["fits_chips"] in (None, True) else f" (more than --chips {chips})"
        print(f"  {i:>2}  data={r['replicas']},model={r['mesh']['model']:<3} {r['chips_needed']:>5} chips  "
              f"{r['per_replica_rate_per_s']:.3g} req/s a replica, TTFT p50 {_ms(r['ttft_p50_s'])}, TPOT p50 "
              f"{_ms(r['tpot_p50_s'])}{fit}")
