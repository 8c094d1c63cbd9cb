"""Built-in scenarios reproduce their headline examples and hold to their closed forms."""
import json

import pytest

from scenarios import double_buffer, matmul_roofline, weight_reuse
from simulator import analytic
from simulator.engine.trace import COMPUTE_KINDS
from simulator.errors import CapacityError, PodsimError
from simulator.hardware.specs import PRESETS


@pytest.mark.parametrize("buffers,expected", [(2, 0.5e-3), (1, 0.6e-3), (4, 0.5e-3)])
def test_double_buffer_headline(buffers, expected):
    r = double_buffer.run(buffers=buffers)
    assert r.metrics["end_to_end_s"] == pytest.approx(expected, rel=1e-12)
    assert r.extra["analytic_s"] == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("chip", sorted(PRESETS))
@pytest.mark.parametrize("blocks,buffers", [(1, 1), (3, 2), (8, 3), (16, 1)])
def test_double_buffer_sized_blocks_on_every_chip(chip, blocks, buffers):
    spec = PRESETS[chip]
    load_bytes, flops = 16e6, 4e11
    r = double_buffer.run(blocks=blocks, buffers=buffers, load_bytes=load_bytes, compute_flops=flops, chip=chip)
    a = load_bytes / blocks / spec.hbm_bandwidth_bytes_per_s
    c = flops / blocks / spec.peak_flops_per_s()
    assert r.metrics["end_to_end_s"] == pytest.approx(analytic.pipeline_time(blocks, a, c, buffers), rel=1e-9)
    assert r.metrics["bytes"]["hbm_read"] == pytest.approx(load_bytes)


def test_double_buffer_overlap_and_exposed_time():
    r = double_buffer.run()  # loads 0-0.2, 0.2-0.4 ms; computes 0.2-0.3, 0.4-0.5 ms
    m = r.metrics
    assert m["overlap_s"] == pytest.approx(0.1e-3)
    assert m["exposed_s"] == pytest.approx(0.3e-3)
    assert m["lower_bound_s"] == pytest.approx(0.4e-3) and m["upper_bound_s"] == pytest.approx(0.6e-3)
    assert {s.kind for s in r.trace.spans if s.kind in COMPUTE_KINDS} == {"compute"}


def test_double_buffer_block_bigger_than_vmem():
    with pytest.raises(CapacityError, match="VMEM"):
        double_buffer.run(load_bytes=1e9, blocks=1)


def test_weight_reuse_headline_traffic():
    inp = weight_reuse.run(order="input_major")
    wgt = weight_reuse.run(order="weight_major")
    assert inp.extra["bytes_by_tensor"]["weights"]["read"] == 32e6
    assert wgt.extra["bytes_by_tensor"]["weights"]["read"] == 8e6
    assert wgt.extra["bytes_by_tensor"]["inputs"]["read"] == 8e6  # the price of reusing weights
    for r in (inp, wgt):
        assert r.extra["bytes_by_tensor"] == r.extra["analytic_bytes_by_tensor"]
        lo, hi = r.extra["analytic_lower_bound_s"], r.extra["analytic_upper_bound_s"]
        assert lo * (1 - 1e-9) <= r.metrics["end_to_end_s"] <= hi * (1 + 1e-9)
    assert wgt.metrics["end_to_end_s"] < inp.metrics["end_to_end_s"]
    assert inp.extra["by_order"] == wgt.extra["by_order"]


def _block_race_crossing(spec, k: int, n: int, block_n: int, elem: int = 2) -> int:
    """First m whose padded per-block matmul outlasts the block's HBM traffic (load B, store C).

    From the pipeline's first principles: per block the MXU spends 2 ceil8(m) k' n' / P while the
    HBM moves e (k + m) n_b / B; A is read once up front, on the critical path whatever the bound.
    """
    s, kp = spec.sublanes, -(-k // spec.mxu_dim) * spec.mxu_dim
    bp = -(-block_n // spec.mxu_dim) * spec.mxu_dim
    peak, bw = spec.peak_flops_per_s(), spec.hbm_bandwidth_bytes_per_s
    return next(m for m in range(1, 100_000)
                if 2 * (-(-m // s) * s) * kp * bp / peak > elem * (k + m) * block_n / bw)


@pytest.mark.parametrize("chip,largest_m,k", [("tpu-v5e", 1024, 16384), ("tpu-v5p", 1024, 16384),
                                               ("tpu-v6e", 1024, 16384), ("h100", 1024, 8192)])
def test_matmul_roofline_critical_batch_from_end_to_end_time(chip, largest_m, k):
    """The default k fits the chip: h100's 33 MB of SMEM holds A at m = 1024 with two B/C blocks at k = 8192."""
    r = matmul_roofline.run(chip=chip, m_values=(16, 64, 256, largest_m))
    spec = PRESETS[chip]
    assert r.params["k"] == k and r.extra["buffers_effective"] == 2
    assert r.extra["critical_batch"] == _block_race_crossing(spec, k, 16384, 256)
    closed = analytic.padded_critical_batch(k, 16384, spec.peak_flops_per_s(), spec.hbm_bandwidth_bytes_per_s,
                                            2, spec.mxu_dim, spec.sublanes)
    assert r.extra["analytic_critical_batch"] == closed
    # the closed form also counts A's bytes on the memory side, so it crosses no earlier
    assert r.extra["critical_batch"] <= closed
    for point in r.extra["points"]:
        assert point["bound"] == point["analytic_bound"]
        assert point["time_s"] >= point["analytic_lower_bound_s"] * (1 - 1e-9)


@pytest.mark.parametrize("k,n,block_n", [(4096, 8192, 512), (8192, 4096, 128)])
def test_matmul_roofline_end_to_end_crossing_on_other_shapes(k, n, block_n):
    r = matmul_roofline.run(k=k, n=n, block_n=block_n, m_values=(8, 1024), chip="tpu-v6e")
    assert r.extra["critical_batch"] == _block_race_crossing(PRESETS["tpu-v6e"], k, n, block_n)
    assert [p["bound"] for p in r.extra["points"]] == ["memory", "compute"]


def test_matmul_roofline_v5e_is_about_240():
    r = matmul_roofline.run()
    assert 230 <= r.extra["critical_batch"] <= 250
    assert r.extra["peak_intensity_flops_per_byte"] == pytest.approx(240.2, abs=0.1)


def test_results_are_strict_json_with_params_echoed():
    r = matmul_roofline.run(m_values=(64,), k=4096, n=4096)
    data = json.loads(r.dumps())
    assert data["params"]["k"] == 4096 and data["scenario"] == "matmul_roofline"
    assert data["critical_batch"] is None  # m=64 never reaches the ridge: reported as null, not a number


@pytest.mark.parametrize("kwargs", [dict(block_n=300), dict(m_values=()), dict(dtype="fp16")])
def test_matmul_roofline_bad_input(kwargs):
    with pytest.raises(PodsimError):
        matmul_roofline.run(**kwargs)


def test_same_inputs_same_trace():
    a, b = double_buffer.run(blocks=7, buffers=3), double_buffer.run(blocks=7, buffers=3)
    assert a.trace.spans == b.trace.spans and a.dumps() == b.dumps()
