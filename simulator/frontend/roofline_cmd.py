"""``podsim roofline``: the roofline bounds of a task or a matmul on one chip, ideal and calibrated.

Ideal: FLOPs over the peak of the dtype, bytes over the chosen roof's bandwidth (the book's T_math and
T_mem). ``--calibrated`` adds, side by side, what the calibrated simulator runs
(`simulator.hardware.calibration`): a matmul's padded FLOPs at the fitted fraction of peak times the
wave fill of its output tiles, plus the kernel launch, and HBM at its fitted fraction of spec.
"""
from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

from simulator import analytic
from simulator.errors import PodsimError
from simulator.hardware.calibration import get_calibration
from simulator.hardware.specs import DTYPE_BYTES, ChipSpec, check_dtype, get_chip, load_chip_file
from simulator.report.result import dumps_json
from simulator.units import format_quantity, parse_int, parse_positive

MEMORIES = ("hbm", "vmem", "ici")  #: the bandwidth roofs `--memory` takes
#: Largest matmul dimension `roofline --matmul` takes (2**40): three of them keep FLOPs and bytes finite.
MAX_MATMUL_DIM = 2**40


def add_roofline_parser(sub: Any, chip_args: Callable[[argparse.ArgumentParser], None]) -> None:
    """Register ``podsim roofline`` on the subcommand set ``sub`` (``chip_args`` adds --chip/--chip-file)."""
    p = sub.add_parser("roofline", help="roofline bounds of a task or a matmul on a chip")
    chip_args(p)
    p.add_argument("--flops", help="FLOPs of the task (e.g. 2e12)")
    p.add_argument("--bytes", help="bytes moved by the task (e.g. 1GB)")
    p.add_argument("--matmul", metavar="M,K,N", help="a [M,K] @ [K,N] matmul instead of --flops/--bytes")
    p.add_argument("--dtype", default="bf16", help=f"one of {', '.join(DTYPE_BYTES)}")
    p.add_argument("--memory", default="hbm", choices=MEMORIES, help="which bandwidth roof")
    p.add_argument("--calibrated", action="store_true",
                   help="also give the chip's fitted matmul efficiency (by shape) and HBM efficiency, side by side")
    p.add_argument("--json", action="store_true")


def matmul_shape(text: str) -> tuple[int, int, int]:
    """``M,K,N`` as three whole numbers (each at most `MAX_MATMUL_DIM`)."""
    parts = text.split(",")
    if len(parts) != 3:
        raise PodsimError(f"--matmul {text!r} must be three positive integers M,K,N, e.g. 1024,1024,1024")
    m, k, n = (parse_int(p, name=f"--matmul {d}", maximum=MAX_MATMUL_DIM) for p, d in zip(parts, "MKN", strict=True))
    return m, k, n


def _chip(args: argparse.Namespace) -> ChipSpec:
    if args.chip_file:
        return load_chip_file(args.chip_file)
    if args.chip is None:
        raise PodsimError("roofline needs --chip NAME or --chip-file F.toml")
    return get_chip(args.chip)


def _task(args: argparse.Namespace) -> tuple[float, float, tuple[int, int, int] | None]:
    """(FLOPs, bytes, the matmul's shape or None) from --matmul or --flops/--bytes."""
    if args.matmul and (args.flops or args.bytes):
        raise PodsimError("give either --matmul M,K,N or --flops F --bytes Q, not both")
    if args.matmul:
        m, k, n = matmul_shape(args.matmul)
        return analytic.matmul_flops(m, k, n), analytic.matmul_bytes(m, k, n, check_dtype(args.dtype)), (m, k, n)
    if args.flops and args.bytes:
        return (parse_positive(args.flops, "flops_count", name="--flops"),
                parse_positive(args.bytes, "bytes", name="--bytes"), None)
    raise PodsimError("roofline needs --matmul M,K,N or both --flops F and --bytes Q")


def roofline_figures(chip: ChipSpec, dtype: str, memory: str, flops: float, nbytes: float,
                     shape: tuple[int, int, int] | None = None, calibrated: bool = False) -> dict[str, Any]:
    """The ideal roofline of ``flops`` FLOPs and ``nbytes`` bytes on ``chip`` against the ``memory`` roof,
    and with ``calibrated`` the fitted figures beside it (``calibrated_*`` keys, efficiencies, notes)."""
    if memory not in MEMORIES:
        raise PodsimError(f"memory={memory!r}; valid roofs: {', '.join(MEMORIES)}")
    peak = chip.peak_flops_per_s(dtype)
    bandwidth = {"hbm": chip.hbm_bandwidth_bytes_per_s, "vmem": chip.vmem_bandwidth_bytes_per_s,
                 "ici": chip.ici_bandwidth_bytes_per_s}[memory]
    out = {"chip": chip.name, "dtype": dtype, "memory": memory, "flops": flops, "bytes": nbytes,
           "peak_flops_per_s": peak, "bandwidth_bytes_per_s": bandwidth,
           **analytic.roofline(flops, nbytes, peak, bandwidth)}
    if calibrated:
        out.update(_calibrated(chip, memory, flops, nbytes, shape, peak, bandwidth))
    return out


def _calibrated(chip: ChipSpec, memory: str, flops: float, nbytes: float, shape: tuple[int, int, int] | None,
                peak: float, bandwidth: float) -> dict[str, Any]:
    """Calibrated T_math and T_mem as `simulator.engine.chip.Chip` runs them on a calibrated system."""
    cal = get_calibration(chip.name)
    model, notes = cal.matmul, []
    fraction, fill, launch = (model.peak_fraction, 1.0, model.launch_s) if model else (1.0, 1.0, 0.0)
    if shape is not None:
        m, k, n = shape
        work = analytic.padded_matmul_flops(m, k, n, chip.mxu_dim, chip.sublanes)  # what the MXU runs
        fill = model.wave_fill(m, n) if model else 1.0
    else:
        work, launch = flops, 0.0  # a FLOP count has no shape to tile, and no kernel to launch
        if model is not None and model.tile_m:
            notes.append("a FLOP count has no shape: no wave quantization or launch (give --matmul M,K,N)")
    if model is None:
        notes.append(f"no fitted matmul model for {chip.name}: the MXU runs at its peak")
    t_compute = launch + work / (peak * fraction * fill)
    hbm = cal.hbm_fraction if memory == "hbm" else 1.0
    if memory != "hbm":
        notes.append(f"no fitted efficiency for the {memory} roof: its full bandwidth")
    t_memory = nbytes / (bandwidth * hbm)
    return {"calibrated_t_compute_s": t_compute, "calibrated_t_memory_s": t_memory,
            "calibrated_lower_bound_s": max(t_compute, t_memory), "calibrated_upper_bound_s": t_compute + t_memory,
            "calibrated_bound": "compute" if t_compute >= t_memory else "memory",
            "matmul_efficiency": flops / (peak * t_compute) if t_compute > 0 else fraction,
            "matmul_peak_fraction": fraction, "wave_fill": fill, "matmul_launch_s": launch,
            "padded_flops": work, "hbm_efficiency": cal.hbm_fraction, "calibrated_notes": notes,
            **_tiles(model, shape)}


def _tiles(model: Any, shape: tuple[int, int, int] | None) -> dict[str, Any]:
    """Output tiles and the cores they spread over, where the fit quantizes waves (GPUs)."""
    if model is None or shape is None or not model.tile_m or not model.units:
        return {}
    m, _, n = shape
    return {"output_tiles": math.ceil(m / model.tile_m) * math.ceil(n / model.tile_n), "cores": model.units}


def cmd_roofline(args: argparse.Namespace) -> None:
    chip = _chip(args)
    flops, nbytes, shape = _task(args)
    out = roofline_figures(chip, args.dtype, args.memory, flops, nbytes, shape, args.calibrated)
    print(dumps_json(out) if args.json else render(out))


def render(out: dict[str, Any]) -> str:
    """The text `podsim roofline` prints: ideal, then with ``calibrated_*`` keys the two side by side."""
    q = format_quantity
    lines = [f"{out['chip']} {out['dtype']}, {out['memory']} roof: {q(out['flops'], 'FLOP')}, {q(out['bytes'], 'B')}",
             f"  intensity {out['intensity_flops_per_byte']:.4g} FLOP/B (ridge "
             f"{out['peak_intensity_flops_per_byte']:.4g}) -> {out['bound']}-bound"]
    if "calibrated_t_compute_s" not in out:
        return "\n".join(lines + [f"  T_math {q(out['t_compute_s'], 's')}, T_mem {q(out['t_memory_s'], 's')}; bounds "
                                  f"[{q(out['lower_bound_s'], 's')}, {q(out['upper_bound_s'], 's')}]"])
    lines.append(f"  {'':<12}{'ideal':>12}{'calibrated':>14}")
    for label, key in (("T_math", "t_compute_s"), ("T_mem", "t_memory_s"), ("lower bound", "lower_bound_s"),
                       ("upper bound", "upper_bound_s")):
        lines.append(f"  {label:<12}{q(out[key], 's'):>12}{q(out['calibrated_' + key], 's'):>14}")
    lines.append(f"  {'bound':<12}{out['bound']:>12}{out['calibrated_bound']:>14}")
    lines.append("  " + _efficiency_line(out))
    lines.append(f"  HBM at {out['hbm_efficiency']:.0%} of its bandwidth (fitted)")
    return "\n".join(lines + [f"  note: {n}" for n in out["calibrated_notes"]])


def _efficiency_line(out: dict[str, Any]) -> str:
    parts = [f"matmul at {out['matmul_efficiency']:.1%} of peak: fitted {out['matmul_peak_fraction']:.0%}"]
    if "output_tiles" in out:
        parts.append(f"x wave fill {out['wave_fill']:.1%} ({out['output_tiles']} output tiles on "
                     f"{out['cores']} cores)")
    if out["matmul_launch_s"]:
        parts.append(f"+ {format_quantity(out['matmul_launch_s'], 's')} launch")
    if out["padded_flops"] != out["flops"]:
        parts.append(f"on {format_quantity(out['padded_flops'], 'FLOP')} padded")
    return " ".join(parts)
