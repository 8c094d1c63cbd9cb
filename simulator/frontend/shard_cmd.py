"""``podsim shard``: how big a sharded array is on each device, and how long a chip takes to read its shard.

``podsim shard "fp32[1024,4096]" "A[I_XY, J]" --mesh X=8,Y=2 [--chip C] [--json]`` gives the local
shape, ``bytes_per_device``, ``total_bytes`` over the mesh and ``replication``
(`simulator.workloads.sharding.arrays`), and the time to stream the local shard from HBM at the chip's
bandwidth (``hbm_load_s`` = bytes_per_device / HBM bytes/s; the book's T_mem of one pass over it).
"""
from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from simulator.frontend.command_help import HELP
from simulator.hardware.specs import ChipSpec, get_chip, load_chip_file
from simulator.report.result import dumps_json
from simulator.units import format_quantity

DEFAULT_CHIP = "tpu-v5e"


def add_shard_parser(sub: Any, chip_args: Callable[[argparse.ArgumentParser], None]) -> None:
    """Register ``podsim shard`` on the subcommand set ``sub`` (``chip_args`` adds --chip/--chip-file)."""
    p = sub.add_parser("shard", help=HELP["shard"])
    p.add_argument("array", help='dtype and shape, e.g. "fp32[1024,4096]"')
    p.add_argument("spec", help='the book\'s sharding, e.g. "A[I_XY, J]" (I split over X then Y)')
    p.add_argument("--mesh", required=True, help="mesh axes and sizes, e.g. X=8,Y=2")
    chip_args(p)
    p.add_argument("--json", action="store_true")


def shard_figures(array: str, spec: str, mesh: str, chip: ChipSpec) -> dict[str, Any]:
    """`shard_array`'s figures plus the chip's HBM load time of, and HBM share taken by, the local shard."""
    from simulator.workloads.sharding.arrays import shard_array

    out = shard_array(array, spec, mesh)
    per_device = out["bytes_per_device"]
    out.update(chip=chip.name, hbm_bandwidth_bytes_per_s=chip.hbm_bandwidth_bytes_per_s,
               hbm_load_s=per_device / chip.hbm_bandwidth_bytes_per_s,
               hbm_fraction=per_device / chip.hbm_capacity_bytes,
               fits_in_hbm=per_device <= chip.hbm_capacity_bytes)
    return out


def cmd_shard(args: argparse.Namespace) -> None:
    chip = load_chip_file(args.chip_file) if args.chip_file else get_chip(args.chip or DEFAULT_CHIP)
    out = shard_figures(args.array, args.spec, args.mesh, chip)
    print(dumps_json(out) if args.json else render(out))


def render(out: dict[str, Any]) -> str:
    """The text `podsim shard` prints."""
    q = format_quantity
    local = "[" + ",".join(map(str, out["local_shape"])) + "]"
    copies = f"{out['replication']} cop{'y' if out['replication'] == 1 else 'ies'} of each element"
    if out["replicated_axes"] or out["partial_axes"]:
        held = ", ".join([f"replicated over {a}" for a in out["replicated_axes"]]
                         + [f"partial sums over {a}" for a in out["partial_axes"]])
        copies += f" ({held})"
    return "\n".join([
        f"{out['array']} as {out['spec']} on mesh {out['mesh']} ({out['devices']} devices)",
        f"  local shape {out['dtype']}{local}: {q(out['bytes_per_device'], 'B')} per device",
        f"  whole array {q(out['array_bytes'], 'B')}; {q(out['total_bytes'], 'B')} over the mesh: {copies}",
        f"  {out['chip']}: {q(out['hbm_load_s'], 's')} to read the shard from HBM at "
        f"{q(out['hbm_bandwidth_bytes_per_s'], 'B/s')}; {out['hbm_fraction']:.2%} of its HBM"
        + ("" if out["fits_in_hbm"] else " (does not fit)"),
    ])
