"""``podsim roofline``: the roofline bounds of a task or a matmul on one chip, ideal and calibrated.

Ideal: FLOPs over the peak of the dtype, bytes over the chosen roof's bandwidth (the book's T_math and
T_mem). The roofs (`roof_bandwidth`): HBM and VMEM; the communication roofs of the book's critical
batches -- ICI as the book's W_ici (both ways along an axis, 2 x one link one way) times ``--axes K``
axes used at once, the chip's DCN egress, its PCIe host link, and on GPUs the NVLink egress and the
InfiniBand NIC. Against ICI, DCN, NVLink or IB the ridge C / W is the per-chip batch (tokens) above
which data parallelism and FSDP over that network are compute-bound (book, training).

``--calibrated`` adds, side by side, what the calibrated simulator runs (`simulator.hardware.calibration`):
a matmul's padded FLOPs at the fitted fraction of peak times the wave fill of its output tiles, plus the
kernel launch, and HBM at its fitted fraction of spec.
"""
from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

from simulator import analytic
from simulator.errors import PodsimError
from simulator.frontend.command_help import HELP
from simulator.frontend.roofline_find import batch_points, check_find, find_batch, parse_batches
from simulator.hardware.calibration import get_calibration
from simulator.hardware.facts import GPUS_PER_NODE
from simulator.hardware.specs import DTYPE_BYTES, ChipSpec, check_dtype, get_chip, load_chip_file
from simulator.report.result import dumps_json
from simulator.units import check_derived, format_quantity, parse_int, parse_positive

MEMORIES = ("hbm", "vmem", "ici", "dcn", "pcie", "nvlink", "ib")  #: the bandwidth roofs `--memory` takes
#: Network roofs whose ridge C/W is the book's data-parallel / FSDP critical batch, and what it counts: tokens
#: per chip inside an ICI or NVLink domain; tokens per slice (DCN) or node (IB) across domains, where every
#: chip of the domain brings its own NIC (book, training: B/slice > C/W_dcn; gpus: B/GPU > C/W_node).
NETWORKS = {"ici": "chip", "nvlink": "chip", "dcn": "slice", "ib": "node"}
#: Largest matmul dimension `roofline --matmul` takes (2**40): three of them keep FLOPs and bytes finite.
MAX_MATMUL_DIM = 2**40
MAX_AXES = 64  #: largest --axes parsed (a chip's own torus axes bound it further)


def add_roofline_parser(sub: Any, chip_args: Callable[[argparse.ArgumentParser], None]) -> None:
    """Register ``podsim roofline`` on the subcommand set ``sub`` (``chip_args`` adds --chip/--chip-file)."""
    p = sub.add_parser("roofline", help=HELP["roofline"])
    chip_args(p)
    p.add_argument("--flops", help="FLOPs of the task (e.g. 2e12)")
    p.add_argument("--bytes", help="bytes moved by the task (e.g. 1GB)")
    p.add_argument("--matmul", metavar="M,K,N", help="a [M,K] @ [K,N] matmul instead of --flops/--bytes")
    p.add_argument("--dtype", default="bf16", help=f"one of {', '.join(DTYPE_BYTES)}")
    p.add_argument("--weight-dtype", help="--matmul: dtype of the [K,N] operand if not --dtype (e.g. int8 weights "
                                          "under bf16 compute)")
    p.add_argument("--chips", metavar="N", help="--flops and --bytes are a whole model's, evenly sharded over N chips: "
                                                "the roofline of each chip's share (per_chip_flops, per_chip_bytes)")
    p.add_argument("--find", metavar="WHAT", help="batch: with --matmul, the batch M at which the matmul turns "
                                                  "compute-bound (critical_batch, and the book's B << K,N rule)")
    p.add_argument("--batches", metavar="B1,B2,..", help="with --matmul: the roofline at each batch (its K, N): "
                                                         "FLOPs, bytes, bound and achieved FLOP/s per point")
    p.add_argument("--memory", default="hbm", choices=MEMORIES,
                   help="which bandwidth roof: hbm, vmem, ici (both ways per axis), dcn, pcie, nvlink, ib (GPUs)")
    p.add_argument("--axes", help="ICI axes used at once (default 1; at most the chip's torus axes)")
    p.add_argument("--bandwidth", metavar="B/S", help="the --memory roof at this bandwidth instead of the chip's (a "
                   "question's assumption, e.g. 1.5e10 for PCIe; the chip's is kept in chip_bandwidth_bytes_per_s)")
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
    if args.weight_dtype and not args.matmul:
        raise PodsimError("--weight-dtype sets the bytes of a matmul's [K,N] operand; give --matmul M,K,N")
    if args.matmul:
        m, k, n = matmul_shape(args.matmul)
        a, w = check_dtype(args.dtype), check_dtype(args.weight_dtype or args.dtype)
        return analytic.matmul_flops(m, k, n), a * (m * k + m * n) + w * k * n, (m, k, n)
    if args.flops and args.bytes:  # either may be 0 (pure memory traffic, pure compute), not both
        flops = parse_positive(args.flops, "flops_count", name="--flops", allow_zero=True)
        nbytes = parse_positive(args.bytes, "bytes", name="--bytes", allow_zero=True)
        if flops == 0 and nbytes == 0:
            raise PodsimError("--flops 0 and --bytes 0: no work to bound; give some FLOPs or some bytes")
        if nbytes:  # a byte count so small that the intensity overflows describes no transfer
            check_derived(flops / nbytes, what="the intensity (FLOP/byte)", given=f"--flops {args.flops} --bytes "
                          f"{args.bytes}", hint="give the bytes the task moves (at least 1), or --bytes 0 for pure "
                          "compute")
        return flops, nbytes, None
    raise PodsimError("roofline needs --matmul M,K,N or both --flops F and --bytes Q")


def peak_flops(chip: ChipSpec, dtype: str) -> float:
    """The matmul peak of ``dtype`` on ``chip`` (FLOP/s); fp32 on a GPU is its CUDA-core FP32 rate (no TF32),
    and a chip whose matrix unit has no fp32 rate (TPUs) is refused, saying so."""
    check_dtype(dtype)
    if dtype != "fp32":
        return chip.peak_flops_per_s(dtype)
    if chip.wraparound == "switch":
        return chip.vpu_flops_per_s  # GPU presets: the datasheet's FP32 (CUDA cores) rate
    raise PodsimError(f"{chip.name} has no fp32 matmul rate: its MXU multiplies bf16 (an fp32 matmul runs as "
                      "several bf16 passes at an unstated fraction of the bf16 peak); use --dtype bf16 or int8")


def roof_bandwidth(chip: ChipSpec, memory: str, axes: int = 1) -> tuple[float, str]:
    """(bytes/s, what it is) of the ``memory`` roof on ``chip``; ``axes`` counts ICI axes used at once.

    ICI is the book's W_ici: a chip sends both ways along a (wrapped) axis at once, 2 x one link one way,
    times ``axes``. DCN is the chip's data-centre egress, PCIe its host link, NVLink a GPU's egress over
    all its links and IB its InfiniBand NIC (all one way).
    """
    if memory not in MEMORIES:
        raise PodsimError(f"memory={memory!r}; valid roofs: {', '.join(MEMORIES)}")
    gpu = chip.wraparound == "switch"
    if axes != 1 and memory != "ici":
        raise PodsimError(f"--axes {axes} counts ICI torus axes; it applies to --memory ici only, not {memory}")
    if memory == "ici" and gpu:
        raise PodsimError(f"{chip.name} has no ICI torus (its GPUs meet in an NVLink switch); "
                          "use --memory nvlink inside a node or --memory ib between nodes")
    if memory in ("nvlink", "ib") and not gpu:
        raise PodsimError(f"--memory {memory} is a GPU network; {chip.name} is a TPU: use --memory ici or dcn")
    if memory == "ici" and not 1 <= axes <= chip.torus_dims:
        raise PodsimError(f"--axes {axes}: {chip.name}'s torus has {chip.torus_dims} axes; "
                          f"give 1 to {chip.torus_dims}")
    one_way = chip.ici_bandwidth_bytes_per_s
    return {
        "hbm": (chip.hbm_bandwidth_bytes_per_s, "HBM"),
        "vmem": (chip.vmem_bandwidth_bytes_per_s, "VMEM"),
        "ici": (2 * one_way * axes, f"ICI both ways along {axes} axis(es): 2 x {format_quantity(one_way, 'B/s')}"
                                    f" one way x {axes}"),
        "dcn": (chip.dcn_bandwidth_bytes_per_s, "DCN egress per chip" + (" (its InfiniBand NIC)" if gpu else "")),
        "pcie": (chip.pcie_bandwidth_bytes_per_s, "PCIe host link, one way"),
        "nvlink": (chip.ici_egress_bytes_per_s, f"NVLink egress, {chip.ici_links} links one way"),
        "ib": (chip.dcn_bandwidth_bytes_per_s, "InfiniBand NIC per GPU, one way"),
    }[memory]


def roofline_figures(chip: ChipSpec, dtype: str, memory: str, flops: float, nbytes: float,
                     shape: tuple[int, int, int] | None = None, calibrated: bool = False,
                     axes: int = 1, bandwidth: float | None = None) -> dict[str, Any]:
    """The ideal roofline of ``flops`` FLOPs and ``nbytes`` bytes on ``chip`` against the ``memory`` roof
    (``axes`` ICI axes at once), and with ``calibrated`` the fitted figures beside it (``calibrated_*``
    keys, efficiencies, notes). Against a network roof the ridge C / W is the book's batch (tokens) above
    which data parallelism and FSDP over it are compute-bound: ``critical_batch_per_chip`` over ICI and
    NVLink, ``critical_batch_per_slice`` over DCN and ``critical_batch_per_node`` over IB (`NETWORKS`), with
    ``critical_batch_per_gpu`` beside it (the book's C / W_node: a node's 8 NICs carry its 8 GPUs' share).
    Over a per-chip network ``contracting_dim_crossover`` = 2 C / W is the contracting dimension D above which
    A[B, D_X] x W[D_X, F] is quicker as local matmuls and an AllReduce of [B, F] (4BF / W) than as an AllGather
    of W and a whole matmul (2BDF / C): the book's sharding question 4, 5,100 on v5p. A given ``bandwidth``
    (B/s) replaces the roof's (a question's assumed figure), the chip's kept in ``chip_bandwidth_bytes_per_s``.
    An fp32 roofline on a known GPU also gives the book's vector peak beside the datasheet's (an FMA as 2 FLOPs):
    CUDA cores x boost clock, one op a cycle, and its intensity (``book_peak_*``: 10 on H100, not 20)."""
    peak = peak_flops(chip, dtype)
    chip_bandwidth, roof = roof_bandwidth(chip, memory, axes)
    assumed = bandwidth is not None
    if bandwidth is None:
        bandwidth = chip_bandwidth
    else:
        roof += f"; given --bandwidth, not the chip's {format_quantity(chip_bandwidth, 'B/s')}"
    out = {"chip": chip.name, "dtype": dtype, "memory": memory, "roof": roof, "flops": flops, "bytes": nbytes,
           "peak_flops_per_s": peak, "bandwidth_bytes_per_s": bandwidth,
           **analytic.roofline(flops, nbytes, peak, bandwidth)}
    if assumed:
        out["chip_bandwidth_bytes_per_s"] = chip_bandwidth
    if dtype == "fp32" and chip.wraparound == "switch":  # the book's vector rate: 1 op a CUDA core a cycle (gpus, Q7)
        from simulator.hardware.facts import gpu_summary

        facts = gpu_summary(chip)
        if facts is not None:
            book = facts["cuda_core_flops_per_s_boost"]
            out.update(book_peak_flops_per_s=book, book_peak_intensity_flops_per_byte=book / bandwidth)
    if memory == "ici":
        out["axes"] = axes
    if nbytes == 0:  # pure compute: no finite intensity to print
        out.update(intensity_flops_per_byte=None, note="no bytes: pure compute, bound by the FLOPs alone")
    if memory in NETWORKS:
        ridge = out["peak_intensity_flops_per_byte"]
        out[f"critical_batch_per_{NETWORKS[memory]}"] = {"data_parallel": ridge, "fsdp": ridge}
        if NETWORKS[memory] == "chip":  # the book's sharding question 4: 4BF / W < 2BDF / C once D > 2 C / W
            out["contracting_dim_crossover"] = 2 * ridge
        if memory == "ib":  # a node's 8 NICs carry its 8 GPUs' share: the book's C / W_node per GPU (2,475 on H100)
            per_gpu = ridge / GPUS_PER_NODE
            out["critical_batch_per_gpu"] = {"data_parallel": per_gpu, "fsdp": per_gpu}
            out["node_egress_bytes_per_s"] = GPUS_PER_NODE * bandwidth
    if calibrated:
        out.update(_calibrated(chip, memory, flops, nbytes, shape, peak, bandwidth, dtype))
    return out


def _calibrated(chip: ChipSpec, memory: str, flops: float, nbytes: float, shape: tuple[int, int, int] | None,
                peak: float, bandwidth: float, dtype: str = "bf16") -> dict[str, Any]:
    """Calibrated T_math and T_mem as `simulator.engine.chip.Chip` runs them on a calibrated system."""
    cal = get_calibration(chip.name)
    model, notes = cal.matmul, []
    if model is not None and model.kernels is not None:
        return _calibrated_gpu(cal, memory, flops, nbytes, shape, peak, bandwidth, dtype)
    if dtype == "fp32" and model is not None:  # fitted on the matrix units; fp32 runs on the CUDA cores
        model = None
        notes.append("the fitted matmul model is for the tensor cores; fp32 runs on the CUDA cores at their peak")
    fraction, fill, launch = (model.peak_fraction, 1.0, model.launch_s) if model else (1.0, 1.0, 0.0)
    if shape is not None:
        m, k, n = shape
        work = analytic.padded_matmul_flops(m, k, n, chip.mxu_dim, chip.sublanes)  # what the MXU runs
        fill = model.wave_fill(m, n) if model else 1.0
    else:
        work, launch = flops, 0.0  # a FLOP count has no shape to tile, and no kernel to launch
        if model is not None and model.tile_m:
            notes.append("a FLOP count has no shape: no wave quantization or launch (give --matmul M,K,N)")
    if model is None and not notes:
        notes.append(f"no fitted matmul model for {chip.name}: the MXU runs at its peak")
    t_compute = launch + work / (peak * fraction * fill)
    return _with_memory_roof(cal, memory, nbytes, bandwidth, notes, t_compute=t_compute, flops=flops, peak=peak,
                             fraction=fraction, fill=fill, launch=launch, work=work, **_tiles(model, shape))


def _calibrated_gpu(cal: Any, memory: str, flops: float, nbytes: float, shape: tuple[int, int, int] | None,
                    peak: float, bandwidth: float, dtype: str) -> dict[str, Any]:
    """The calibrated figures of a GPU preset: its kernel model (`simulator.hardware.gpu_kernels`), as
    `simulator.engine.chip.Chip.matmul` runs it on a calibrated system."""
    kernels, notes = cal.matmul.kernels, []
    fraction = kernels.peak_fraction[dtype] if dtype in kernels.peak_flops_per_s else kernels.peak(dtype)
    rate = kernels.peak(dtype)  # the tensor-core rate the kernel model uses (fp32: TF32, half the bf16 rate)
    extra: dict[str, Any] = {}
    if shape is not None:
        m, k, n = shape
        (tm, tn), split = kernels.best_tile(m, k, n, dtype)
        t_compute = kernels.matmul_s(m, k, n, dtype)
        tk = kernels.tile_k.get(dtype, 64)  # the FLOPs of the padded tiles the kernel runs
        work = 2.0 * math.ceil(m / tm) * tm * math.ceil(n / tn) * tn * math.ceil(k / tk) * tk
        fill, launch = kernels.wave_fill(m, n, (tm, tn)), kernels.launch_s
        extra = {"output_tiles": math.ceil(m / tm) * math.ceil(n / tn), "cores": kernels.sms, "tile": [tm, tn],
                 "split_k": split}
        if dtype == "fp32":
            notes.append("fp32 runs as TF32 on the tensor cores (half the bf16 rate), where the ideal figures "
                         "take the CUDA cores; the efficiency is against the TF32 rate")
    else:
        t_compute, fill, launch, work = flops / (rate * fraction), 1.0, 0.0, flops
        notes.append("a FLOP count has no shape: no tile or wave quantization or launch (give --matmul M,K,N)")
    return _with_memory_roof(cal, memory, nbytes, bandwidth, notes, t_compute=t_compute, flops=flops, peak=rate,
                             fraction=fraction, fill=fill, launch=launch, work=work, **extra)


def _with_memory_roof(cal: Any, memory: str, nbytes: float, bandwidth: float, notes: list[str], *,
                      t_compute: float, flops: float, peak: float, fraction: float, fill: float, launch: float,
                      work: float, **extra: Any) -> dict[str, Any]:
    """The calibrated figures from a compute time and the memory roof (HBM at its fitted share; the other roofs
    at full bandwidth, noted); ``peak`` is the rate the matmul efficiency is measured against."""
    hbm = cal.hbm_fraction if memory == "hbm" else 1.0
    if memory != "hbm":
        notes.append(f"no fitted efficiency for the {memory} roof: its full bandwidth")
    t_memory = nbytes / (bandwidth * hbm)
    return {"calibrated_t_compute_s": t_compute, "calibrated_t_memory_s": t_memory,
            "calibrated_lower_bound_s": max(t_compute, t_memory), "calibrated_upper_bound_s": t_compute + t_memory,
            "calibrated_bound": "compute" if t_compute >= t_memory else "memory",
            "matmul_efficiency": flops / (peak * t_compute) if t_compute > 0 else fraction,
            "matmul_peak_fraction": fraction, "wave_fill": fill, "matmul_launch_s": launch,
            "padded_flops": work, "hbm_efficiency": cal.hbm_fraction, "calibrated_notes": notes, **extra}


def _tiles(model: Any, shape: tuple[int, int, int] | None) -> dict[str, Any]:
    """Output tiles and the cores they spread over, where the fit quantizes waves (GPUs)."""
    if model is None or shape is None or not model.tile_m or not model.units:
        return {}
    m, _, n = shape
    return {"output_tiles": math.ceil(m / model.tile_m) * math.ceil(n / model.tile_n), "cores": model.units}


def cmd_roofline(args: argparse.Namespace) -> None:
    chip = _chip(args)
    flops, nbytes, shape = _task(args)
    axes = 1 if args.axes is None else parse_int(args.axes, name="--axes", maximum=MAX_AXES)
    check_find(args.find, args.matmul)
    chips = 1 if args.chips is None else parse_int(args.chips, name="--chips", maximum=10**7)
    if chips > 1 and args.matmul:
        raise PodsimError("--chips shares whole-model --flops and --bytes over chips; for a sharded matmul give each "
                          "chip's --matmul shape (podsim shard gives it)")
    flops, nbytes = flops / chips, nbytes / chips
    bandwidth = None if args.bandwidth is None else parse_positive(args.bandwidth, "bandwidth", name="--bandwidth")
    out = roofline_figures(chip, args.dtype, args.memory, flops, nbytes, shape, args.calibrated, axes, bandwidth)
    if args.find and shape is not None:
        out.update(find_batch(shape[1], shape[2], check_dtype(args.dtype), check_dtype(args.weight_dtype or args.dtype),
                              out["peak_flops_per_s"], out["bandwidth_bytes_per_s"]))
    if args.batches is not None:
        if shape is None:
            raise PodsimError("--batches prices a matmul at several batches: give --matmul B,K,N (K and N are kept)")
        out["batches"] = batch_points(parse_batches(args.batches), shape[1], shape[2], check_dtype(args.dtype),
                                      check_dtype(args.weight_dtype or args.dtype), out["peak_flops_per_s"],
                                      out["bandwidth_bytes_per_s"])
    if args.weight_dtype:
        out["weight_dtype"] = args.weight_dtype
    if chips > 1:  # the figures above are one chip's share; the whole task's beside them
        out.update(chips=chips, whole_flops=flops * chips, whole_bytes=nbytes * chips, per_chip_flops=flops,
                   per_chip_bytes=nbytes)
    text = "" if args.json else render(out) + (f"\n  {out['find_note']}" if "find_note" in out else "")
    for point in [] if args.json else out.get("batches", []):
        text += (f"\n  B={point['batch']:<8} {format_quantity(point['flops_per_s'], 'FLOP/s'):>14} "
                 f"{point['bound']}-bound, {format_quantity(point['lower_bound_s'], 's')}")
    print(dumps_json(out) if args.json else text)


def render(out: dict[str, Any]) -> str:
    """The text `podsim roofline` prints: ideal, then with ``calibrated_*`` keys the two side by side."""
    q = format_quantity
    intensity = out["intensity_flops_per_byte"]
    roof = f"{out['roof']}, {q(out['bandwidth_bytes_per_s'], 'B/s')}"
    lines = [f"{out['chip']} {out['dtype']}, {out['memory']} roof ({roof}): {q(out['flops'], 'FLOP')}, "
             f"{q(out['bytes'], 'B')}",
             f"  intensity {'unbounded (no bytes)' if intensity is None else f'{intensity:.4g} FLOP/B'} (ridge "
             f"{out['peak_intensity_flops_per_byte']:.4g}) -> {out['bound']}-bound"]
    per = NETWORKS.get(out["memory"])
    if per is not None:
        c = out["peak_intensity_flops_per_byte"]
        line = f"  critical batch C/W = {c:.4g} tokens per {per} (data parallelism, FSDP)"
        if per == "chip":  # tensor parallelism lives on the fast network
            line += (f"; tensor parallelism over Y chips needs F/Y > {c:.4g}; FSDP x TP needs B/chip > {c:.4g}^2/(2F)"
                     f"\n  A[B, D_X] x W[D_X, F]: multiply the shards and AllReduce [B, F] rather than AllGather W "
                     f"once D > 2C/W = {out['contracting_dim_crossover']:.4g}")
        elif "critical_batch_per_gpu" in out:  # the book's per-GPU figure, C / node egress
            line += f"; {out['critical_batch_per_gpu']['data_parallel']:.4g} per GPU (C / node egress)"
        else:  # each chip of the slice or node has its own NIC
            line += f"; per chip divide by the chips of a {per}"
        lines.append(line)
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
        tile = f" of {out['tile'][0]}x{out['tile'][1]}" if "tile" in out else ""
        split = f", k split {out['split_k']} ways" if out.get("split_k", 1) > 1 else ""
        parts.append(f"x wave fill {out['wave_fill']:.1%} ({out['output_tiles']} output tiles{tile} on "
                     f"{out['cores']} cores{split})")
    if out["matmul_launch_s"]:
        parts.append(f"+ {format_quantity(out['matmul_launch_s'], 's')} launch")
    if out["padded_flops"] != out["flops"]:
        parts.append(f"on {format_quantity(out['padded_flops'], 'FLOP')} padded")
    return " ".join(parts)
