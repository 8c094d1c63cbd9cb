"""Every plot function draws a non-empty image of the expected size."""
import struct

import pytest

from scenarios import collective_sweep, double_buffer
from simulator.collectives import run_collective
from simulator.engine.system import System
from simulator.hardware.specs import get_chip
from simulator.report import plots

PNG = b"\x89PNG\r\n\x1a\n"


def _png_size(path):
    data = path.read_bytes()
    assert data[:8] == PNG
    return struct.unpack(">II", data[16:24])


def _not_blank(path):
    import matplotlib.image

    pixels = matplotlib.image.imread(path)
    return float(pixels[..., :3].std()) > 0.01  # more than one colour


def _check(ax, path, min_w=300, min_h=150):
    plots.save(ax, path, dpi=80)
    w, h = _png_size(path)
    assert w >= min_w and h >= min_h
    assert _not_blank(path)
    return w, h


def test_gantt_one_chip(tmp_path):
    r = double_buffer.run(blocks=4)
    ax = plots.gantt(r.trace, title="db")
    assert [t.get_text() for t in ax.get_yticklabels()] == ["hbm", "mxu"]
    _check(ax, tmp_path / "g.png")


def test_gantt_64_chips_collapses_to_a_lane_per_chip(tmp_path):
    s = System(topology="torus:8x8")
    run_collective("all_gather", s, 8e6, mode="full")
    ax = plots.gantt(s.trace)
    assert len(ax.get_yticklabels()) == 64
    w, h = _check(ax, tmp_path / "g64.png")
    assert h < 1000  # 64 lanes stay on one screen
    expanded = plots.gantt(s.trace, collapse=False)
    assert len(expanded.get_yticklabels()) == 256  # every link direction its own lane


def test_gantt_into_an_existing_axes(tmp_path):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 1, figsize=(8, 5))
    out = plots.gantt(double_buffer.run().trace, ax=axes[1])
    assert out is axes[1]
    _check(out, tmp_path / "sub.png")


def test_timeline_diff_annotates_the_difference(tmp_path):
    one, two = double_buffer.run(buffers=1), double_buffer.run(buffers=2)
    ax = plots.timeline_diff(one.trace, two.trace, ("serial", "double"))
    assert "-100 µs" in ax.get_title() and "-16.7%" in ax.get_title()  # 0.5 ms - 0.6 ms
    _check(ax, tmp_path / "diff.png")


def test_roofline_places_points_with_percent_of_peak_and_roof(tmp_path):
    chip = get_chip("tpu-v5e")
    ax = plots.roofline(chip, [{"name": "op", "flops": 2e12, "bytes": 1e9, "time_s": 0.02}])
    texts = " ".join(t.get_text() for t in ax.texts)
    # 2e12 FLOP in 20 ms = 1e14 FLOP/s: 50.8% of 1.97e14 peak; roof at intensity 2000 is the peak
    assert "51% of peak" in texts and "51% of roof" in texts
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    _check(ax, tmp_path / "roof.png")


def test_sweep_plot(tmp_path):
    r = collective_sweep.run(topology="ring:8", sizes=(1024, 2**20, 2**30))
    ax = plots.sweep(r.extra["points"], "bytes", "time_s", "analytic_s")
    assert len(ax.lines) == 2
    _check(ax, tmp_path / "sweep.png")


def test_link_heatmap_on_a_torus(tmp_path):
    s = System(topology="torus:4x4")
    r = run_collective("all_reduce", s, 16e6, mode="full")
    ax = plots.link_heatmap(s.graph, r.link_bytes)
    _check(ax, tmp_path / "heat.png", 200, 200)


def test_link_heatmap_rejects_3d():
    with pytest.raises(ValueError, match="2-D"):
        plots.link_heatmap(System(topology="torus:2x2x2").graph, {})


def test_readme_pictures_regenerate(tmp_path):
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "scripts" / "make_pictures.py"
    spec = importlib.util.spec_from_file_location("make_pictures", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for path in module.make(tmp_path):
        w, h = _png_size(path)
        assert w >= 400 and h >= 150 and _not_blank(path)
