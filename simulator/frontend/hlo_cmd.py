"""``podsim hlo FILE.txt``: simulate a compiled XLA program (the text of ``compiled.as_text()``) on a pod.

Registered by `simulator.frontend.cli`; the work is `simulator.frontend.hlo.simulate_hlo`.
"""
from __future__ import annotations

import argparse
from typing import Any

from simulator.errors import PodsimError
from simulator.frontend.command_help import HELP
from simulator.hardware.specs import PRESETS, get_chip, load_chip_file
from simulator.units import parse_int

MAX_CHIP = 10**6  #: largest chip index a placement names

#: `simulator.workloads.hlo.cost.DTYPE_POLICIES`, spelled here so that building the parser does not load the HLO
#: reader (tests/test_startup_imports.py holds the two equal)
DTYPE_POLICIES = ("source", "compiled")


def add_hlo_parser(sub: Any) -> None:
    """Add the ``hlo`` subcommand to the ``podsim`` subparsers ``sub``."""
    p = sub.add_parser("hlo", help=HELP["hlo"])
    p.add_argument("file", help="HLO text: compiled.as_text() saved to a file, or an XLA dump *.txt")
    chips = p.add_mutually_exclusive_group()
    chips.add_argument("--chip", default=None, help=f"preset name ({', '.join(PRESETS)}; default tpu-v5e)")
    chips.add_argument("--chip-file", metavar="F.toml", help="a user chip in TOML (fields of ChipSpec)")
    p.add_argument("--topology", help="topology spec, e.g. torus:4x2 (default: the chip's slice of --mesh)")
    p.add_argument("--mesh", help="the program's JAX mesh, e.g. X=4,Y=2: device d is row-major mesh index d, "
                                  "laid on the topology as --mesh lays a mesh (X=4@1 places an axis)")
    p.add_argument("--placement", metavar="C0,C1,...", help="chip of each device, in device order (instead of --mesh)")
    p.add_argument("--dtype", default="source", choices=DTYPE_POLICIES,
                   help="source (default): bf16 work the CPU backend widened to f32 counts as bf16; "
                        "compiled: every shape as written")
    p.add_argument("--async-collectives", action="store_true",
                   help="overlap each synchronous collective with the compute after it (awaited at first use)")
    p.add_argument("--top", default="10", help="how many ops to list by time (default 10)")
    p.add_argument("--calibrated", action="store_true", help="run at the chip's fitted efficiencies")
    p.add_argument("--links", choices=("grouped", "all"), default="grouped", help="summary: links by kind, or each")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--trace", metavar="OUT.json", help="write a Chrome/Perfetto trace")
    p.add_argument("--gantt", metavar="OUT.png", help="write a Gantt chart")
    p.add_argument("--csv", metavar="OUT.csv", help="write the spans as CSV")


def cmd_hlo(args: argparse.Namespace) -> None:
    """Run ``podsim hlo`` and print its summary (or JSON)."""
    from simulator.frontend.cli import write_outputs
    from simulator.frontend.hlo import simulate_hlo
    from simulator.frontend.outputs import check_outputs

    check_outputs(args)

    chip = load_chip_file(args.chip_file) if args.chip_file else get_chip("tpu-v5e" if args.chip is None else args.chip)
    if args.topology is None and args.mesh is None:
        raise PodsimError("podsim hlo needs --topology SPEC (e.g. torus:4x2) or --mesh SPEC (e.g. X=4,Y=2)")
    result = simulate_hlo(args.file, chip=chip, topology=args.topology, mesh=args.mesh,
                          placement=_placement(args.placement), dtype=args.dtype,
                          async_collectives=args.async_collectives, calibrated=args.calibrated,
                          top=parse_int(args.top, name="--top", minimum=0, maximum=10_000))
    write_outputs(result, args)
    print(result.dumps() if args.json else result.summary(links=args.links))


def _placement(text: str | None) -> list[int] | None:
    if text is None:
        return None
    parts = [p.strip() for p in text.split(",")]
    if not all(p.isascii() and p.isdigit() for p in parts):
        raise PodsimError(f"--placement {text!r} must list one chip index per device, e.g. 0,2,4,6,1,3,5,7")
    return [parse_int(p, name="--placement", minimum=0, maximum=MAX_CHIP) for p in parts]
