"""Closed forms against the worked examples of REFERENCE.md."""
import math

import pytest

from simulator import analytic


def test_square_matmul_intensity_is_a_third_of_its_side():
    assert analytic.matmul_intensity(1024, 1024, 1024) == pytest.approx(1024 / 3)
    assert analytic.matmul_flops(2, 3, 4) == 48
    assert analytic.matmul_bytes(2, 3, 4) == 2 * (6 + 12 + 8)


def test_skinny_matmul_intensity_is_about_m():
    assert analytic.matmul_intensity(16, 65536, 65536) == pytest.approx(16, rel=0.001)


def test_percent_of_peak_and_of_roof_worked_example():
    # 6 GFLOP/s peak, the task's roof is 4 GFLOP/s (intensity 4 at 1 GB/s), 3 GFLOP/s measured
    assert analytic.percent_of_peak(3e9, 6e9) == pytest.approx(50)
    assert analytic.percent_of_roof(3e9, 4.0, 6e9, 1e9) == pytest.approx(75)


def test_roofline_bounds_and_bound_kind():
    r = analytic.roofline(flops=2e12, nbytes=1e9, peak_flops_per_s=1e14, bandwidth_bytes_per_s=1e12)
    assert (r["t_compute_s"], r["t_memory_s"]) == (pytest.approx(0.02), pytest.approx(1e-3))
    assert r["lower_bound_s"] == pytest.approx(0.02) and r["upper_bound_s"] == pytest.approx(0.021)
    assert r["bound"] == "compute" and r["intensity_flops_per_byte"] == pytest.approx(2000)
    assert analytic.roofline(1e9, 1e9, 1e14, 1e12)["bound"] == "memory"


def test_peak_intensity_of_v5e_hbm_is_about_240():
    assert analytic.peak_intensity(1.97e14, 8.2e11) == pytest.approx(240.2, abs=0.1)


@pytest.mark.parametrize("q,a,c,b,expected", [
    (2, 0.2e-3, 0.1e-3, 2, 0.5e-3),   # REFERENCE: 0.4 ms loading, 0.2 ms compute, q = 2
    (2, 0.2e-3, 0.1e-3, 1, 0.6e-3),
    (4, 1.0, 3.0, 2, 13.0),           # compute-bound: a + q c
    (4, 3.0, 1.0, 5, 13.0),           # load-bound: q a + c, deeper buffers change nothing
    (0, 1.0, 1.0, 2, 0.0),
])
def test_pipeline_time(q, a, c, b, expected):
    assert analytic.pipeline_time(q, a, c, b) == pytest.approx(expected)


def test_critical_batch_solves_equal_times_and_tends_to_peak_intensity():
    peak, bw = 1.97e14, 8.2e11
    m = analytic.critical_batch(16384, 16384, peak, bw)
    t_math = 2 * m * 16384 * 16384 / peak
    t_mem = 2 * (m * 16384 + 16384 * 16384 + m * 16384) / bw
    assert t_math == pytest.approx(t_mem)
    assert analytic.critical_batch(2**24, 2**24, peak, bw) == pytest.approx(peak / bw, rel=1e-3)
    assert math.isinf(analytic.critical_batch(128, 128, peak, bw))  # never compute-bound


def test_padded_critical_batch_is_the_first_integer_whose_padded_time_wins():
    peak, bw, k = 1.97e14, 8.2e11, 16384
    m = analytic.padded_critical_batch(k, k, peak, bw)

    def compute_bound(mm):
        return analytic.padded_matmul_flops(mm, k, k, 128) / peak >= analytic.matmul_bytes(mm, k, k) / bw

    assert compute_bound(m) and not compute_bound(m - 1)
    assert m <= analytic.critical_batch(k, k, peak, bw)


@pytest.mark.parametrize("k,n", [(2049, 2049), (8192, 129), (16384, 16384), (4096, 1000), (129, 129), (300, 8192)])
def test_padded_critical_batch_against_brute_force(k, n):
    """Every m from 1 up, timed from first principles in the test: the MXU works on m rounded up to 8 and
    k, n rounded up to 128; HBM moves the unpadded operands and output once, 2 bytes an element."""
    peak, bw = 1.97e14, 8.1e11  # tpu-v5e bf16 FLOP/s and HBM bytes/s

    def up(x, q):
        return -(-x // q) * q

    def compute_bound(m):
        return 2 * up(m, 8) * up(k, 128) * up(n, 128) / peak >= 2 * (m * k + k * n + m * n) / bw

    first = next((m for m in range(1, 20_000) if compute_bound(m)), None)
    assert analytic.padded_critical_batch(k, n, peak, bw) == first


def test_padded_critical_batch_can_sit_far_below_the_unpadded_one():
    peak, bw = 1.97e14, 8.1e11
    assert analytic.padded_critical_batch(2049, 2049, peak, bw) == 265
    assert analytic.critical_batch(2049, 2049, peak, bw) > 300
    assert math.isinf(analytic.critical_batch(8192, 129, peak, bw))
    assert analytic.padded_critical_batch(8192, 129, peak, bw) is not None
