"""The ``podsim`` command line: chips, list, run, roofline.

Every input error becomes one line on stderr and exit status 2 (never a traceback).
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import re
import sys
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from simulator.engine.memory_budget import DEFAULT_FRACTION, memory_budget
from simulator.engine.memory_budget import ENV_VAR as MEMORY_ENV_VAR
from simulator.errors import NonFiniteError, PodsimError, one_line
from simulator.frontend.chips_cmd import cmd_chips
from simulator.frontend.command_help import EXTERNAL
from simulator.frontend.montecarlo import add_fault_args, dispatch
from simulator.frontend.outputs import check_outputs, stdout_for, write_outputs
from simulator.frontend.progress import command_watch
from simulator.frontend.scenario import list_scenarios, load_scenario, parse_sets, run_scenario, scenario_params
from simulator.hardware.specs import PRESETS, ChipSpec, get_chip, load_chip_file
from simulator.report.result import Result, dumps_json
from simulator.units import check_derived, format_quantity, parse_int, parse_positive

if TYPE_CHECKING:  # annotations only: no import at run time (and no cycle)
    from simulator.engine.system import System

EXIT_BAD_INPUT = 2
MEMORY_COMMANDS = ("run", "collective", "model", "plan", "sweep", "hlo")  #: the commands with --max-memory
MAX_INDEX = 10**6  #: largest chip index, coordinate or axis number a flag takes (more chips than any topology)


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line and exit status 2, and takes ``-5MB`` as a value
    (a negative quantity reaches the quantity check instead of being read as an unknown flag)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = re.compile(r"^-\.?\d")  # argparse's own reads only -5 and -.5

    def error(self, message: str) -> NoReturn:
        raise PodsimError(message if self.prog == "podsim" else f"{self.prog}: {message}")


def _chip_args(p: argparse.ArgumentParser) -> None:
    group = p.add_mutually_exclusive_group()
    group.add_argument("--chip", help=f"preset name ({', '.join(PRESETS)})")
    group.add_argument("--chip-file", metavar="F.toml", help="a user chip in TOML (fields of ChipSpec)")


def build_parser(only: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The argument parser with every subcommand; with ``only``, the commands of `command_help.EXTERNAL` outside
    it are stubs with their help line alone, their modules not imported (`main` passes the command being run)."""

    def external(name: str, *extra: Any) -> None:
        if only is None or name in only:
            getattr(importlib.import_module(EXTERNAL[name][0]), f"add_{name}_parser")(sub, *extra)
        else:
            sub.add_parser(name, help=EXTERNAL[name][1])

    parser = _Parser(prog="podsim", description="Discrete-event simulator of ML accelerator chips and links.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    p = sub.add_parser("chips", help="list the chip presets; with a NAME, that chip's facts (pod, hosts, SMs, clocks)")
    p.add_argument("name", nargs="?", default=None, help="one preset: its spec and derived facts "
                   "(TPU pod and hosts, per TensorCore and MXU, GPU CUDA cores, clocks and node)")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("list", help="list the scenarios and the question each answers")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("run", help="run a scenario")
    p.add_argument("scenario", help="name from `podsim list`, or a path to a scenario .py file")
    _chip_args(p)
    p.add_argument("--topology", help="topology spec, e.g. ring:8, torus:4x4, slice:8x16")
    p.add_argument("--mesh", help="mesh spec, e.g. X=4,Y=2")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="scenario parameter")
    p.add_argument("--links", choices=("grouped", "all"), default="grouped",
                   help="text summary: links by kind, or each")
    _output_args(p)
    add_fault_args(p)
    external("roofline", _chip_args)
    external("shard", _chip_args)
    external("model")
    external("plan")
    external("serve")
    p = sub.add_parser("collective", help="simulate one collective on a topology")
    p.add_argument("kind", help="all_gather, reduce_scatter, all_reduce, all_to_all, broadcast, gather, scatter "
                                "or reduce")
    _chip_args(p)
    _network_args(p)
    p.add_argument("--bytes", help="V: the full gathered / unreduced array of one group (e.g. 64MB); or --array")
    p.add_argument("--array", metavar="DTYPE[shape]", help="instead of --bytes: the whole array, e.g. "
                   "bf16[1024,4096], with --sharding and --mesh (V from one chip's block)")
    p.add_argument("--sharding", metavar="SPEC", help="with --array: the book's notation, e.g. A[B_X,D_Y] or "
                   "A[B_X,D_Y]{U_Z} (unreduced over Z, for reduce_scatter and all_reduce)")
    p.add_argument("--mesh", help="with --array: mesh axes in the topology's order, e.g. X=4,Y=4,Z=4")
    p.add_argument("--axes", help="topology axis indices, e.g. 0,1, or with --mesh its axis names, e.g. X "
                   "(default: all axes; with --array the axes the array is split or unreduced over)")
    p.add_argument("--algorithm", default="auto", help="auto or a name from `podsim algorithms`")
    p.add_argument("--multi-axis", default="parallel", help="parallel (split over axes at once) or sequential")
    p.add_argument("--root", help="root chip of broadcast, gather, scatter, reduce: an index or a coordinate "
                   "such as 0,0 (default: chip 0)")
    p.add_argument("--mode", default="auto", help="auto, full or reduced (one representative ring per axis)")
    p.add_argument("--versus", metavar="KIND2", help="also run collective KIND2 on the same bytes, topology and "
                   "algorithm, and give KIND's figures over KIND2's (versus.time_ratio, book_ratio, "
                   "max_link_bytes_ratio; e.g. all_gather --versus all_to_all, the book's factor of 4)")
    p.add_argument("--calibrated", action="store_true",
                   help="also run the chip's calibrated model (fitted efficiencies) beside the ideal one")
    p.add_argument("--protocol", default="auto", help="the calibrated run's NCCL protocol: LL, LL128, Simple or auto "
                   "(the fastest by closed form; GPU chips with --calibrated only)")
    _output_args(p)
    add_fault_args(p)
    p = sub.add_parser("algorithms", help="list the collective algorithms, the kinds and topologies each serves")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("validate", help="every calibration measurement against the calibrated simulator")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("send", help="simulate one point-to-point message")
    _chip_args(p)
    _network_args(p)
    p.add_argument("--src", required=True, help="source chip coordinate, e.g. 0,0 (or chip index)")
    p.add_argument("--dst", required=True, help="destination chip coordinate, e.g. 1,1")
    p.add_argument("--bytes", required=True, help="message size, e.g. 1MB")
    p.add_argument("--single-path", action="store_true", help="use one route only (default: link-disjoint routes)")
    p.add_argument("--json", action="store_true")
    add_fault_args(p)
    external("sweep")
    external("hlo")
    external("compare")
    for name in MEMORY_COMMANDS:  # the commands that simulate: a memory budget, like the event budget
        sub.choices[name].add_argument(
            "--max-memory", metavar="SIZE",
            help="refuse, before allocating, work estimated to need more memory than SIZE (e.g. 8GiB; "
                 f"default {DEFAULT_FRACTION * 100:.0f}%% of this machine's memory)")
    return parser


@contextlib.contextmanager
def _max_memory(args: argparse.Namespace) -> Iterator[None]:
    """Run the command under ``--max-memory`` (bytes; not given: the default budget); the worker processes
    of a sweep inherit it through the environment, restored afterwards."""
    text = getattr(args, "max_memory", None)
    value = None if text is None else check_derived(
        parse_positive(text, "bytes", name="--max-memory"), what="the memory budget (bytes)",
        given=f"--max-memory {text}", minimum=1.0, hint="give a size such as 8GiB")
    before = os.environ.get(MEMORY_ENV_VAR)
    if value is not None:
        os.environ[MEMORY_ENV_VAR] = repr(value)
    try:
        with memory_budget(value):
            yield
    finally:
        if before is None:
            os.environ.pop(MEMORY_ENV_VAR, None)
        else:
            os.environ[MEMORY_ENV_VAR] = before


def _network_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topology", required=True, help="e.g. ring:8, torus:4x4, mesh:4x4, slice:8x16, switch:8")
    p.add_argument("--switching", default="cut_through", help="cut_through or store_and_forward")
    p.add_argument("--chunks", help="pieces a message is cut into (store and forward pipelining; default 1), a "
                   "broadcast's array, or the chunks a pipelined hierarchical collective sends through its levels "
                   "(default: the algorithm's own count)")


def _output_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--trace", metavar="OUT.json", help="write a Chrome/Perfetto trace")
    p.add_argument("--gantt", metavar="OUT.png", help="write a Gantt chart")
    p.add_argument("--csv", metavar="OUT.csv", help="write the spans as CSV")


def _resolve_chip(args: argparse.Namespace, default: str | None = None) -> ChipSpec | None:
    if getattr(args, "chip_file", None):
        return load_chip_file(args.chip_file)
    if getattr(args, "chip", None) is not None:  # "" is an unknown name, not "the default"
        return get_chip(args.chip)
    return get_chip(default) if default else None


def cmd_list(args: argparse.Namespace) -> None:
    known = list_scenarios()
    if args.json:
        print(json.dumps(known, indent=2))
        return
    width = max(map(len, known), default=0)
    for name, question in known.items():
        print(f"{name:<{width}}  {question}")


def _run_kwargs(args: argparse.Namespace, module: Any) -> dict[str, Any]:
    kwargs = parse_sets(module, args.set)
    params = scenario_params(module)
    for flag, key, value in (("--topology", "topology", args.topology), ("--mesh", "mesh", args.mesh)):
        if value is not None:
            if key not in params:
                raise PodsimError(f"scenario {args.scenario!r} takes no {flag}; its parameters: {', '.join(params)}")
            kwargs[key] = value
    chip = _resolve_chip(args)
    if chip is not None:
        if "chip" not in params:
            raise PodsimError(f"scenario {args.scenario!r} takes no chip; its parameters: {', '.join(params)}")
        kwargs["chip"] = chip
    return kwargs


def cmd_run(args: argparse.Namespace) -> None:
    check_outputs(args)
    module = load_scenario(args.scenario)
    result = run_scenario(module, _run_kwargs(args, module))
    write_outputs(result, args)
    print(result.dumps() if args.json else result.summary(links=args.links))


def _system(args: argparse.Namespace, calibrated: bool = False) -> System:
    from simulator.engine.system import System

    return System(_resolve_chip(args, "tpu-v5e") or "tpu-v5e", topology=args.topology, switching=args.switching,
                  calibrated=calibrated)


def cmd_validate(args: argparse.Namespace) -> None:
    from simulator.frontend.validate import render, validate

    result = validate()
    print(dumps_json(result) if args.json else render(result))


def _int_list(text: str, flag: str) -> list[int]:
    parts = text.split(",")
    if not all(p.strip().isascii() and p.strip().isdigit() for p in parts):
        raise PodsimError(f"{flag} {text!r} must be comma-separated integers, e.g. 0,1")
    return [parse_int(p, name=flag, minimum=0, maximum=MAX_INDEX) for p in parts]


def _array_collective(args: argparse.Namespace, system: Any) -> tuple[float, list[int], dict[str, Any]] | None:
    """``--array --sharding --mesh``: (V, axes, shard figures); None when the run gives ``--bytes``."""
    given = [f for f, v in (("--array", args.array), ("--sharding", args.sharding), ("--mesh", args.mesh)) if v]
    if not given:
        if args.bytes is None:
            raise PodsimError("collective needs --bytes V (e.g. 64MB) or --array DTYPE[shape] --sharding SPEC --mesh "
                              "X=..,Y=..")
        return None
    if args.bytes is not None:
        raise PodsimError(f"give --bytes or {', '.join(given)}, not both (--array derives V)")
    if len(given) < 3:
        lacking = [f for f in ("--array", "--sharding", "--mesh") if f not in given]
        raise PodsimError(f"{', '.join(given)} needs {' and '.join(lacking)} too, e.g. --array bf16[1024,4096] "
                          "--sharding A[B_X,D_Y] --mesh X=4,Y=4,Z=4")
    from simulator.frontend.collective_array import array_collective

    return array_collective(args.kind, args.array, args.sharding, args.mesh, args.axes,
                            system.graph.graph.get("shape"))


def cmd_collective(args: argparse.Namespace) -> None:
    from simulator.collectives import run_collective

    check_outputs(args)
    _check_algorithm(args.algorithm)
    protocol = _protocol(args)
    system = _system(args)
    array = _array_collective(args, system)
    if array is None:
        nbytes = parse_positive(args.bytes, "bytes", name="--bytes")
        axes = _int_list(args.axes, "--axes") if args.axes else None
    else:
        nbytes, axes, _ = array
    chunks = None if args.chunks is None else _parse_count(args.chunks, "--chunks")
    root = _root(system.graph, args.root)
    params = {"kind": args.kind, "chip": system.spec.name, "topology": args.topology, "bytes": nbytes,
              "axes": axes, "algorithm": args.algorithm, "multi_axis": args.multi_axis, "chunks": chunks,
              "switching": args.switching, "mode": args.mode, "protocol": protocol}
    shard: dict[str, Any] = {}
    if array is not None:
        fig = array[2]
        params.update(array=fig["array"], sharding=fig["spec"], mesh=fig["mesh"])
        shard["bytes_per_device"] = fig["bytes_per_device"]
    if args.versus is not None and args.calibrated:
        raise PodsimError("--versus compares two ideal collectives; drop --calibrated (or --versus)")
    if args.calibrated:  # ONE simulation (the calibrated one); the ideal figures are closed forms
        _collective_calibrated(args, params, system, nbytes, axes, chunks, root, protocol, shard)
        return
    r = run_collective(args.kind, system, nbytes, axes=axes, algorithm=args.algorithm, multi_axis=args.multi_axis,
                       chunks=chunks, root=root, mode=args.mode)
    extra = r.to_json()
    extra.update(shard, **_book_levels(args.kind, system, r), ideal_from="simulation", simulated_run="ideal")
    if args.versus is not None:
        extra["versus"] = _versus(args, nbytes, axes, chunks, r)
    warnings = _over_hbm(args.kind, nbytes, r.group_size, system.spec)
    if warnings:
        extra["warnings"] = warnings
    result = _collective_result(args, params, system, extra, nbytes)
    if result is None:  # --json: printed
        return
    print(f"{result.headline} ({r.group_size} devices per group, {r.groups} group(s), {r.mode} simulation, "
          f"algorithm {r.algorithm})")
    print(f"  simulated   {format_quantity(r.time_s, 's')} (bound: ideal peak links)")
    print(f"  closed form {format_quantity(r.analytic_s, 's')}" +
          (f"   book estimate {format_quantity(r.book_s, 's')}" if r.book_s else ""))
    print(f"  topology bound {format_quantity(r.topology_bound_s, 's')} (no algorithm can be faster here)")
    if "book_levels_s" in extra:
        print(f"  book, fabric levels overlapped {format_quantity(extra['book_levels_s'], 's')} "
              f"({format_quantity(extra['book_levels_bandwidth_bytes_per_s'], 'B/s')}, bound at the "
              f"{extra['book_levels_bottleneck']}; no latency)")
    if r.own_links_bound_s is not None and r.own_links_bound_s > r.topology_bound_s * (1 + 1e-6):
        print(f"  own-links bound {format_quantity(r.own_links_bound_s, 's')} (no algorithm that stays on the "
              "groups' own links can be faster)")
    print("".join(f"  note: {note}\n" for note in system.notes), end="")  # not the chip's own topology
    print("".join(f"  {w}\n" for w in warnings), end="")
    if r.note:  # one chip: no bandwidth to report
        print(f"  {r.note}")
        return
    assert r.algbw_bytes_per_s is not None and r.busbw_bytes_per_s is not None  # more than one chip
    print(f"  algbw {format_quantity(r.algbw_bytes_per_s, 'B/s')}, busbw {format_quantity(r.busbw_bytes_per_s, 'B/s')}"
          f", busiest link carried {format_quantity(r.max_link_bytes, 'B')}")
    if "versus" in extra:
        vs = extra["versus"]
        book = "" if vs["book_ratio"] is None else f", book estimates {vs['book_ratio']:.4g}x"
        print(f"  versus {vs['kind']} (same bytes, simulated {format_quantity(vs['time_s'], 's')}, bound: ideal peak "
              f"links): {args.kind} takes "
              f"{vs['time_ratio']:.4g}x its time{book}; busiest link {vs['max_link_bytes_ratio']:.4g}x its bytes")


def _versus(args: argparse.Namespace, nbytes: float, axes: Any, chunks: Any, first: Any) -> dict[str, Any]:
    """``--versus KIND2``: KIND2 on a fresh system of the same chip and topology, with the same bytes, axes,
    algorithm and root, and KIND's simulated time, book estimate and busiest link's bytes over KIND2's (ideal
    peaks, both: ratios of bounds). A ratio whose KIND2 figure is zero or absent is None."""
    from simulator.collectives import run_collective

    if args.versus == args.kind:
        raise PodsimError(f"--versus {args.versus} is the collective itself; name another kind, e.g. all_to_all")
    system = _system(args)
    r = run_collective(args.versus, system, nbytes, axes=axes, algorithm=args.algorithm, multi_axis=args.multi_axis,
                       chunks=chunks, root=_root(system.graph, args.root), mode=args.mode)

    def ratio(a: float | None, b: float | None) -> float | None:
        return None if a is None or not b else a / b

    return {"kind": args.versus, "algorithm": r.algorithm, "time_s": r.time_s, "book_s": r.book_s,
            "max_link_bytes": r.max_link_bytes, "time_ratio": ratio(first.time_s, r.time_s),
            "book_ratio": ratio(first.book_s, r.book_s),
            "max_link_bytes_ratio": ratio(first.max_link_bytes, r.max_link_bytes)}


def _collective_calibrated(args: argparse.Namespace, params: dict[str, Any], system: Any, nbytes: float,
                           axes: Any, chunks: Any, root: Any, protocol: str, shard: dict[str, Any]) -> None:
    """`podsim collective --calibrated`: simulate the calibrated collective once; the ideal figures beside it
    come from `simulator.collectives.api.ideal_closed_form` on the ideal system (no second simulation)."""
    from simulator.collectives import run_collective
    from simulator.collectives.api import ideal_closed_form

    ideal = ideal_closed_form(args.kind, system, nbytes, axes=axes, algorithm=args.algorithm,
                              multi_axis=args.multi_axis, chunks=chunks, root=root)
    cal_system = _system(args, calibrated=True)
    cal = run_collective(args.kind, cal_system, nbytes, axes=axes, algorithm=args.algorithm,
                         multi_axis=args.multi_axis, chunks=chunks, root=root, mode=args.mode, protocol=protocol)
    extra: dict[str, Any] = {
        "time_s": ideal["time_s"], "analytic_s": ideal["time_s"], "topology_bound_s": ideal["topology_bound_s"],
        "algorithm": ideal["algorithm"], "group_size": ideal["group_size"], "groups": ideal["groups"],
        "algbw_bytes_per_s": ideal["algbw_bytes_per_s"], "busbw_bytes_per_s": ideal["busbw_bytes_per_s"],
        "ideal_from": "closed form", "ideal_route": ideal["route"], "simulated_run": "calibrated", "mode": cal.mode,
        "calibrated_time_s": cal.time_s, "calibrated_algbw_bytes_per_s": cal.algbw_bytes_per_s,
        "calibrated_busbw_bytes_per_s": cal.busbw_bytes_per_s, "calibrated_algorithm": cal.algorithm,
        "calibrated_protocol": cal.protocol, "calibrated_alternatives": cal.alternatives,
        "calibrated_max_link_bytes": cal.max_link_bytes, **shard}
    if cal.nccl is not None:  # calibrated GPU systems: what stock NCCL would run, and why
        extra["calibrated_nccl"] = cal.nccl
    warnings = _over_hbm(args.kind, nbytes, ideal["group_size"], system.spec)
    if warnings:
        extra["warnings"] = warnings
    result = _collective_result(args, params, cal_system, extra, nbytes)
    if result is None:  # --json: printed
        return
    print(f"{result.headline} ({ideal['group_size']} devices per group, {ideal['groups']} group(s); one simulation, "
          f"the calibrated one, {cal.mode})")
    busbw = "" if cal.busbw_bytes_per_s is None else f", busbw {format_quantity(cal.busbw_bytes_per_s, 'B/s')}"
    print(f"  forecast (calibrated, simulated) {format_quantity(cal.time_s, 's')}{busbw} (fitted efficiencies; "
          f"algorithm {cal.algorithm}"
          + (f", NCCL protocol {cal.protocol})" if cal.protocol else ")"))
    if cal.nccl is not None:
        print(f"  chosen as NCCL would: {cal.nccl['reason']}")
    if ideal["algorithm"] is not None:
        way = f"; round the faults, it {ideal['route']}" if ideal.get("route") else ""
        print(f"  ideal, closed form {format_quantity(ideal['time_s'], 's')} (algorithm {ideal['algorithm']} on ideal "
              f"peak links{way}; not simulated)")
        print(f"  topology bound {format_quantity(ideal['topology_bound_s'], 's')} (no algorithm can be faster here)")
    print("".join(f"  note: {note}\n" for note in system.notes), end="")
    print("".join(f"  {w}\n" for w in warnings), end="")


def _collective_result(args: argparse.Namespace, params: dict[str, Any], system: Any, extra: dict[str, Any],
                       nbytes: float) -> Result | None:
    """The collective's `Result` (the simulated ``system``'s metrics and trace), written to the output files the
    flags name; None once printed as JSON (``--json``), else the result for the text summary."""
    result = Result("collective", params, system.metrics(), extra=extra, trace=system.trace,
                    headline=f"{args.kind} of {format_quantity(nbytes, 'B')} on {args.topology}")
    write_outputs(result, args)
    if args.json:
        print(result.dumps())
        return None
    return result


def _over_hbm(kind: str, nbytes: float, group_size: int, spec: Any) -> list[str]:
    """Warnings (one line each) when the array one chip holds for this collective exceeds its HBM."""
    from simulator.report.sanity import collective_per_chip_bytes, over_hbm

    return over_hbm(f"the array one chip holds ({kind} of V = {format_quantity(nbytes, 'B')} over {group_size} "
                    f"devices)", collective_per_chip_bytes(kind, nbytes, group_size), spec,
                    "the run times the links only, as if it fit")


def _book_levels(kind: str, system: System, r: Any) -> dict[str, Any]:
    """The book's multi-level fat-tree figure (`simulator.collectives.book_levels`) where it applies."""
    from simulator.collectives.book_levels import book_levels

    assert system.graph is not None  # a collective ran on its links
    return book_levels(kind, dict(system.graph.graph), r.group_size, r.nbytes) or {}


def _check_algorithm(name: str) -> None:
    """--algorithm, checked against the registry (here, not as argparse choices: listing them would import every
    algorithm, NetworkX and SciPy before ``podsim --help`` could print)."""
    from simulator.collectives import names

    if name not in names():
        raise PodsimError(f"podsim collective: argument --algorithm: invalid choice: {name!r} "
                          f"(choose from {', '.join(map(repr, names()))})")


def _protocol(args: argparse.Namespace) -> str:
    """--protocol, checked: a known name, and only with --calibrated (ideal links run no NCCL protocol)."""
    from simulator.collectives import protocol as protocols

    name = protocols.check(args.protocol)
    if name != protocols.AUTO and not args.calibrated:
        raise PodsimError(f"--protocol {name} prices the calibrated run: add --calibrated (ideal links have no "
                          f"NCCL protocol), or leave --protocol auto")
    return name


def cmd_algorithms(args: argparse.Namespace) -> None:
    from simulator.collectives import listing, render_listing

    print(json.dumps(listing(), indent=2) if args.json else render_listing())


def _parse_count(text: str, flag: str, minimum: int = 1) -> int:
    return parse_int(text, name=flag, minimum=minimum)


def _root(graph: Any, text: str | None) -> Any:
    """--root: a chip index (``3``) or, as ``send --src`` takes, a coordinate in the topology's notation (``0,0``)."""
    if text is None:
        return None
    if "," in text:
        return _chip_at(graph, text, "--root")
    return parse_int(text, name="--root", minimum=0, maximum=MAX_INDEX)


def _chip_at(graph: Any, text: str, flag: str) -> int:
    import topologies

    coord = _int_list(text, flag)
    if len(coord) == 1 and len(graph.graph.get("shape", ())) != 1:
        chips = topologies.chips(graph)
        if coord[0] not in chips:
            raise PodsimError(f"{flag} {text!r}: no chip {coord[0]}; chips are 0..{len(chips) - 1}")
        return coord[0]
    return topologies.coord_to_node(graph, tuple(coord))


def cmd_send(args: argparse.Namespace) -> None:
    from simulator.engine.network import send

    system = _system(args)
    src, dst = _chip_at(system.graph, args.src, "--src"), _chip_at(system.graph, args.dst, "--dst")
    out = send(system, src, dst, parse_positive(args.bytes, "bytes", name="--bytes"),
               chunks=_parse_count(args.chunks or "1", "--chunks"), multipath=not args.single_path)
    if args.json:
        notes = {"notes": system.notes} if system.notes else {}
        print(dumps_json({"src": args.src, "dst": args.dst, "topology": args.topology, **out, **notes}))
        return
    print(f"{args.src} -> {args.dst} on {args.topology}: {format_quantity(out['time_s'], 's')} "
          f"(closed form {format_quantity(out['analytic_s'], 's')}), first byte after "
          f"{format_quantity(out['first_byte_s'], 's')}, {out['hops']} hops over {out['links_used']} route(s)")
    print("".join(f"  note: {note}\n" for note in system.notes), end="")  # not the chip's own topology


class _Commands(Mapping[str, Callable[[argparse.Namespace], Any]]):
    """Command name -> the function running it; a command of `command_help.EXTERNAL` is imported when looked up."""

    def __init__(self, own: dict[str, Callable[[argparse.Namespace], Any]]) -> None:
        self._own = own

    def __getitem__(self, name: str) -> Callable[[argparse.Namespace], Any]:
        if name in self._own:
            return self._own[name]
        if name not in EXTERNAL:
            raise KeyError(name)
        return getattr(importlib.import_module(EXTERNAL[name][0]), f"cmd_{name}")

    def __iter__(self) -> Iterator[str]:
        return iter([*self._own, *EXTERNAL])

    def __len__(self) -> int:
        return len(self._own) + len(EXTERNAL)


COMMANDS = _Commands({"chips": cmd_chips, "list": cmd_list, "run": cmd_run, "collective": cmd_collective,
                      "send": cmd_send, "validate": cmd_validate, "algorithms": cmd_algorithms})


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``podsim`` console script; returns the exit status."""
    try:
        argv = sys.argv[1:] if argv is None else list(argv)
        args = build_parser(only=argv[:1]).parse_args(argv)  # the command's own parser; stubs for the rest
        watch = command_watch() if args.command != "sweep" else contextlib.nullcontext()  # a sweep has its own bar
        with watch, _max_memory(args), stdout_for(args):  # `--csv -`: stdout for the spans, the rest to stderr
            status = dispatch(args, COMMANDS[args.command])  # --fault, --jitter, --samples (montecarlo)
    except _input_errors() as err:
        print(getattr(err, "details", ""), end="", file=sys.stderr)  # a user scenario's own traceback
        print(f"podsim: error: {one_line(err)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:  # output piped into `head` and closed early: not an error of ours
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as err:
        print(f"podsim: error: {one_line(err)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except NonFiniteError as err:  # podsim's bug, not the user's input: say so, never print inf or nan
        print(f"podsim: internal error: {one_line(err)}; please report this with the command", file=sys.stderr)
        return 1
    except KeyboardInterrupt as err:  # a sweep's says how far it got and where its rows are
        print(f"podsim: {one_line(err) or 'interrupted'}", file=sys.stderr)
        return 130
    return status


def _input_errors() -> tuple[type[Exception], ...]:
    """PodsimError, and TopologyError once the topologies package is loaded (no TopologyError exists before it; the
    clause is read for every exception, ``--help``'s SystemExit included, and importing it costs NetworkX)."""
    topology_errors = sys.modules.get("topologies.errors")
    return (PodsimError,) if topology_errors is None else (PodsimError, topology_errors.TopologyError)


if __name__ == "__main__":
    sys.exit(main())
