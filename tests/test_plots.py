"""Every plot function draws a non-empty image of the expected size."""
import struct

import pytest
from conftest import load_script

from scenarios import collective_sweep, double_buffer
from simulator.collectives import run_collective
from simulator.engine.system import System
from simulator.errors import PodsimError
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


def _held(system, schedule):
    """Start one process per (chip, [(bytes, hold from s, hold until s), ...]) of VMEM use."""
    def hold(chip, nbytes, start, end):
        yield system.env.timeout(start)
        alloc = yield chip.vmem.allocate(nbytes, "x")
        yield chip.matmul(128, 128, 128, "mm")
        yield system.env.timeout(end - system.env.now)
        chip.vmem.free(alloc)

    for index, holds in schedule.items():
        for i, (nbytes, start, end) in enumerate(holds):
            system.process(hold(system.chips[index], nbytes, start, end), f"hold {index} {i}")
    system.run()


def test_gantt_draws_a_vmem_lane_scaled_to_its_peak(tmp_path):
    system = System("tpu-v5e")
    _held(system, {0: [(10e6, 0.0, 2e-3), (5e6, 1e-3, 3e-3)]})
    ax = plots.gantt(system.trace, title="vmem")
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[:1] == ["mxu"] and labels[1].startswith("vmem live\npeak 15 MB of 134.2 MB")  # 128 MiB
    (lane,) = plots.memory_lanes(system.trace, many=False)
    assert lane.steps == [(0.0, 10e6), (pytest.approx(1e-3), 15e6), (pytest.approx(2e-3), 5e6),
                          (pytest.approx(3e-3), 0.0)]
    (curve,) = [line for line in ax.lines if line.get_drawstyle() == "steps-post"]
    row = 1  # the lane's centre; the lane's bottom is row + 0.4, its peak row - 0.4
    assert list(curve.get_ydata()[:3]) == pytest.approx([row + 0.4 - 0.8 * 10 / 15, row - 0.4, row + 0.4 - 0.8 / 3])
    _check(ax, tmp_path / "vmem.png")


def test_collapsed_gantt_draws_the_most_any_chip_holds():
    system = System("tpu-v5e", topology="torus:4x4")
    _held(system, {0: [(10e6, 0.0, 2e-3)], 1: [(4e6, 1e-3, 4e-3)], 2: [(12e6, 3e-3, 5e-3)]})
    (lane,) = plots.memory_lanes(system.trace, per_chip=False)
    # by hand: max(chip 0, chip 1, chip 2) after each change
    assert [(pytest.approx(t), b) for t, b in lane.steps] == [(0.0, 10e6), (1e-3, 10e6), (2e-3, 4e6), (3e-3, 12e6),
                                                              (4e-3, 12e6), (5e-3, 0.0)]
    assert lane.label.startswith("vmem live, max of 3 chips")
    assert len(plots.memory_lanes(system.trace)) == 3  # one lane per chip while there are few
    ax = plots.gantt(system.trace, memory=False)
    assert not any("vmem" in t.get_text() for t in ax.get_yticklabels())


def test_gantt_labels_spans_only_where_they_fit():
    from simulator.engine.trace import Span, Trace

    t = Trace()
    for span in (Span(0, "hbm", "a wide block", 0.0, 0.5, "load"), Span(0, "hbm", "narrow", 0.5, 0.5005, "load"),
                 Span(0, "mxu", "w@x", 0.5, 1.0)):
        t.add(span)
    ax = plots.gantt(t)
    assert sorted(text.get_text() for text in ax.texts) == ["a wide block", "w@x"]
    db = plots.gantt(double_buffer.run(blocks=6).trace)
    assert sorted(text.get_text() for text in db.texts) == sorted([f"block{i}" for i in range(6)] * 2)


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
    texts = " ".join(t.get_text() for legend in _legends(ax) for t in legend.get_texts())
    # 2e12 FLOP in 20 ms = 1e14 FLOP/s: 50.8% of 1.97e14 peak; roof at intensity 2000 is the peak
    assert "op: 51% of peak, 51% of roof" in texts
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    _check(ax, tmp_path / "roof.png")


def _legends(ax):
    return [a for a in ax.get_children() if type(a).__name__ == "Legend"]


def test_roofline_labels_never_overlap_the_plot_or_each_other():
    chip = get_chip("tpu-v5e")
    # three ops at nearby intensities: their labels would collide if written beside the points
    points = [{"name": f"m={m}", "flops": 2 * m * 4096 * 4096, "bytes": 2 * (2 * m * 4096 + 4096 * 4096),
               "time_s": 1e-3} for m in (200, 240, 280)]
    ax = plots.roofline(chip, points)
    assert len(ax.texts) == 0  # nothing written on the plot itself
    ax.figure.tight_layout()
    renderer = ax.figure.canvas.get_renderer()
    plot = ax.get_window_extent(renderer)
    boxes = [legend.get_window_extent(renderer) for legend in _legends(ax)]
    assert len(boxes) == 2  # roofs, ops
    assert not any(box.overlaps(plot) for box in boxes) and not boxes[0].overlaps(boxes[1])
    ops = _legends(ax)[-1].get_texts()
    assert [t.get_text().split(":")[0] for t in ops] == ["m=200", "m=240", "m=280"]
    markers = {line.get_marker() for line in ax.lines if line.get_label().startswith("m=")}
    assert len(markers) == 3  # each op its own marker, not only its own colour
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


def test_link_heatmap_of_a_3d_torus_draws_a_panel_per_plane(tmp_path):
    s = System(topology="torus:4x4x4")
    r = run_collective("all_reduce", s, 16e6, axes=[0], mode="full")
    ax = plots.link_heatmap(s.graph, r.link_bytes)
    panels = [a for a in ax.figure.axes if a.get_label().startswith("plane")]
    assert [a.get_label() for a in panels] == ["plane 0", "plane 1", "plane 2", "plane 3"]
    # per plane: 16 chips, each with 4 in-plane link directions (axes 1, 2) and 2 to the planes beside it
    assert [len(a.texts) for a in panels] == [16 * (4 + 2)] * 4
    assert "diagonal arrows" in ax.figure._suptitle.get_text()
    # only axis-0 links carried bytes: every diagonal stub coloured, every in-plane arrow grey
    grey = [a for a in panels[0].texts if a.arrow_patch.get_edgecolor()[:3] == pytest.approx((0.867, 0.867, 0.867),
                                                                                               abs=0.01)]
    assert len(grey) == 16 * 4
    _check(ax, tmp_path / "heat3d.png", 600, 200)


def test_link_heatmap_of_a_ring_and_the_links_it_cannot_place(tmp_path):
    ring = System(topology="ring:8")
    ax = plots.link_heatmap(ring.graph, run_collective("all_gather", ring, 8e6, mode="full").link_bytes)
    assert len(ax.texts) == 16  # 8 link pairs, both directions
    _check(ax, tmp_path / "ring.png", 300, 100)
    multi = System(topology="multislice:2:4x4")
    ax = plots.link_heatmap(multi.graph, {})
    assert "64 DCN link directions not drawn" in ax.figure._suptitle.get_text()  # 16 chips x 2 slices x 2
    with pytest.raises(PodsimError, match="no chip-to-chip links"):
        plots.link_heatmap(System("h100", topology="nodes:2:8").graph, {})


def test_link_heatmap_3d_replaces_a_given_axes():
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2)
    out = plots.link_heatmap(System(topology="torus:2x2x2").graph, {}, ax=right)
    assert out.figure is fig and right not in fig.axes
    assert sum(a.get_label().startswith("plane") for a in fig.axes) == 2
    plt.close(fig)


def test_readme_pictures_regenerate(tmp_path):

    module = load_script("make_pictures")
    for path in module.make(tmp_path, quick=True):
        w, h = _png_size(path)
        assert w >= 400 and h >= 150 and _not_blank(path)
