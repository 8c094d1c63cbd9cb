"""Chip units: MXU padding, VPU, DMA sharing, and byte counters per interface and per tensor."""
import pytest

from simulator.engine.system import System
from simulator.hardware.specs import get_chip

V5E = get_chip("tpu-v5e")


def _time_of(make_event, chip="tpu-v5e"):
    system = System(chip)
    event = make_event(system.chip)
    system.env.run()
    assert event.processed
    return system


@pytest.mark.parametrize("m,k,n,padded", [
    (128, 128, 128, (128, 128, 128)),
    (1, 128, 128, (8, 128, 128)),       # m pads to the 8 sublanes
    (100, 129, 200, (104, 256, 256)),   # k and n pad to the 128-wide MXU
])
def test_matmul_time_counts_padding(m, k, n, padded):
    system = _time_of(lambda c: c.matmul(m, k, n, "mm"))
    pm, pk, pn = padded
    assert system.env.now == pytest.approx(2 * pm * pk * pn / 1.97e14, rel=1e-12)
    assert system.trace.flops_total == 2 * m * k * n  # useful FLOPs, not padded ones
    assert system.trace.padded_flops_total == 2 * pm * pk * pn


def test_v6e_pads_to_its_256_wide_mxu():
    system = _time_of(lambda c: c.matmul(8, 128, 128), chip="tpu-v6e")
    assert system.env.now == pytest.approx(2 * 8 * 256 * 256 / 9.2e14, rel=1e-12)


def test_int8_runs_at_the_int8_rate():
    system = _time_of(lambda c: c.matmul(1024, 1024, 1024, dtype="int8"))
    assert system.env.now == pytest.approx(2 * 1024**3 / 3.94e14, rel=1e-12)


def test_vector_op_runs_on_the_vpu():
    system = _time_of(lambda c: c.vector(1e9, "gelu"))
    assert system.env.now == pytest.approx(1e9 / V5E.vpu_flops_per_s)
    assert {s.unit for s in system.trace.spans} == {"vpu"}


def test_concurrent_load_and_store_share_hbm_and_are_counted_per_interface_and_tensor():
    system = System("tpu-v5e")
    chip = system.chip
    chip.load(8.2e5, "w")   # alone: 1 us
    chip.store(8.2e5, "y")  # shares HBM fairly: both finish at 2 us
    system.env.run()
    assert system.env.now == pytest.approx(2e-6)
    assert dict(system.trace.bytes_by_interface) == {"hbm_read": 8.2e5, "vmem_write": 8.2e5,
                                                     "hbm_write": 8.2e5, "vmem_read": 8.2e5}
    assert system.trace.bytes_by_tensor["w"] == {"read": 8.2e5, "written": 0.0}
    assert system.trace.bytes_by_tensor["y"] == {"read": 0.0, "written": 8.2e5}
