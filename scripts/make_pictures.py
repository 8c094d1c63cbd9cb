"""Regenerate the README's and the docs' pictures: ``python scripts/make_pictures.py [OUT_DIR]`` (default
docs/images).

Each picture comes from a built-in scenario run with its defaults (or the arguments noted), so the
README shows what a user gets.
"""
from __future__ import annotations

import sys
from pathlib import Path

from scenarios import (
    collective_matmul,
    collective_sweep,
    double_buffer,
    matmul_roofline,
    mfu_vs_slices,
    straggler_tail,
    weight_reuse,
)
from simulator.collectives import run_collective
from simulator.engine.system import System
from simulator.hardware.specs import get_chip
from simulator.report import algorithms, plots, tails

DPI = 80


def make(out: Path, quick: bool = False) -> list[Path]:
    """Write every README picture into ``out``; returns the paths. ``quick`` (the tests) draws the same
    pictures from fewer Monte Carlo draws and fewer array sizes."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    db = double_buffer.run(blocks=6)
    written.append(plots.save(plots.gantt(db.trace, title="double_buffer: 6 blocks, 2 buffers"),
                              out / "double_buffer_gantt.png", DPI))
    mr = matmul_roofline.run()
    chip = get_chip("tpu-v5e")
    points = [{"name": f"m={p['m']}", "flops": 2 * p["m"] * 16384 * 16384,
               "bytes": 2 * (p["m"] * 16384 * 2 + 16384 * 16384), "time_s": p["time_s"]}
              for p in mr.extra["points"] if p["m"] in (16, 128, 1024)]
    written.append(plots.save(plots.roofline(chip, points, title="tpu-v5e roofline: [m,16384] @ [16384,16384]"),
                              out / "roofline.png", DPI))
    cs = collective_sweep.run()
    written.append(plots.save(plots.sweep(cs.extra["points"], "bytes", "time_s", "analytic_s",
                                          xlabel="array size (bytes)", ylabel="time (s)",
                                          title="AllReduce on a 16x16 tpu-v5e slice"),
                              out / "collective_sweep.png", DPI))
    cm = collective_matmul.run(verify=False)
    slow = collective_matmul.unoverlapped(chip, "ring:4", 4, 4096, 8192, 16384)[0]
    written.append(plots.save(plots.timeline_diff(slow.trace, cm.trace, ("AllGather then matmul", "overlapped")),
                              out / "collective_matmul_diff.png", DPI))
    wr = weight_reuse.run()
    written.append(plots.save(plots.gantt(wr.trace, title="weight_reuse: weight_major, VMEM holds one tile"),
                              out / "weight_reuse_gantt.png", DPI))
    torus = System("tpu-v5p", topology="torus:4x4x4")
    gathered = run_collective("all_gather", torus, 64e6, axes=[0, 1], mode="full")
    megabytes = {link: nbytes / 1e6 for link, nbytes in gathered.link_bytes.items()}
    written.append(plots.save(plots.link_heatmap(torus.graph, megabytes, label="MB",
                                                 title="AllGather of 64 MB over axes 0 and 1 of a 4x4x4 tpu-v5p torus"),
                              out / "link_heatmap_3d.png", DPI))
    st = straggler_tail.run(chips=(1, 4, 16) if quick else (1, 2, 4, 8, 16, 32, 64), samples=20 if quick else 200)
    written.append(plots.save(tails.growth(st.extra["points"], title="straggler_tail: each chip's compute "
                                           "jittered by 5% (lognormal), 200 draws per count"),
                              out / "straggler_tail.png", DPI))
    written.append(_fault_tail(out / "fault_tail.png", samples=10 if quick else 100))
    written.append(_algorithm_curves(out / "allreduce_algorithms.png", step=4 if quick else 1))
    mfu_vs_slices.draw(mfu_vs_slices.run(), out / "mfu_vs_slices.png", DPI)  # returns the Figure
    written.append(out / "mfu_vs_slices.png")
    return written


def _algorithm_curves(path: Path, step: int = 1) -> Path:
    """AllReduce on H100: every applicable algorithm's closed form (calibrated: with the protocol NCCL's tuner picks
    for it) from 1 KiB to 8 GiB on one 8-GPU node and on two nodes, ideal and calibrated, with auto's choice on top
    and its crossovers marked (`report.algorithms`)."""
    sizes = [2.0**k for k in range(10, 34, step)]
    panels = []
    for calibrated in (False, True):
        for topology, where in (("switch:8", "one 8-GPU node (switch:8)"), ("nodes:2:8", "two nodes (nodes:2:8)")):
            system = System("h100", topology=topology, calibrated=calibrated, trace=False)
            data = algorithms.curves("all_reduce", system, sizes)
            mode = "calibrated, NCCL's protocol each" if calibrated else "ideal links"
            panels.append((f"H100 AllReduce, {where}, {mode}", data, algorithms.crossovers("all_reduce", system, data)))
    return plots.save(algorithms.figure(panels), path, DPI)


def _fault_tail(path: Path, samples: int = 100) -> Path:
    """`podsim collective` Monte Carlo: the distribution of 100 jittered draws above the worst draw's Gantt."""
    from simulator.frontend.cli import main

    main(["collective", "all_reduce", "--chip", "tpu-v5e", "--topology", "torus:4x4", "--bytes", "64MB", "--jitter",
          "10%", "--fault", "link:5->6=0.5", "--samples", str(samples), "--gantt", str(path)])
    return path


if __name__ == "__main__":
    for path in make(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("docs/images")):
        print(path)
