"""NCCL's ring Reduce (issue 27): partial sums start at the root's successor and go once round the ring to the
root, each member adding its own on the way, c pieces one behind another (`unidirectional` on one axis). Its hops
are split as a pipelined broadcast's are, so from first principles c pieces of p = V / c over n - 1 hops of
latency a and rate b take (n - 1) a + (n - 1 + c - 1) p / b; checked here by hand, and its sums against numpy."""
import numpy as np
import pytest

from simulator.collectives import run_collective
from simulator.engine.system import System
from simulator.errors import PodsimError

B, A = 4.5e10, 1e-6  # tpu-v5e ICI: one-way bytes/s per link, hop latency
V = 2**30


@pytest.mark.parametrize("nbytes", [V, 1e4])
@pytest.mark.parametrize("n", [3, 8])
@pytest.mark.parametrize("chunks", [1, 4, 16])
def test_ring_reduce_against_the_tandem(chunks, n, nbytes):
    r = run_collective("reduce", System("tpu-v5e", topology=f"ring:{n}", trace=False), nbytes,
                       algorithm="unidirectional", chunks=chunks, root=2)
    expected = (n - 1) * A + (n - 1 + chunks - 1) * nbytes / chunks / B
    assert r.time_s == pytest.approx(expected, rel=1e-9)
    assert r.analytic_s == pytest.approx(expected, rel=1e-9)


def test_through_a_switch():
    """Each hop chip -> switch -> chip, two latencies, the bytes at a port's 18 x 25 GB/s."""
    r = run_collective("reduce", System("h100", topology="switch:8", trace=False), V, algorithm="unidirectional",
                       chunks=8)
    assert r.time_s == pytest.approx(7 * 2 * A + (7 + 8 - 1) * V / 8 / (18 * 2.5e10), rel=1e-9)


@pytest.mark.parametrize("topology,n", [("switch:5", 5), ("ring:6", 6), ("nodes:2:4", 8)])
@pytest.mark.parametrize("chunks", [1, 3])
def test_numeric_equals_numpy(topology, n, chunks):
    rng = np.random.default_rng(7)
    data = rng.standard_normal((n, 12 * chunks))
    chip = "tpu-v5e" if topology.startswith("ring") else "h100"
    root = 1
    r = run_collective("reduce", System(chip, topology=topology), data=data, root=root, algorithm="unidirectional",
                       chunks=chunks)
    np.testing.assert_allclose(r.outputs[root], data.sum(axis=0), rtol=1e-12, atol=1e-12)


def test_calibrated_gpus_run_nccl_ring_reduce_and_ideal_runs_keep_their_choice():
    """NCCL's tuner runs Reduce as Ring only (tuning.cc); a calibrated GPU Reduce now runs it (before: the custom
    switch_relay kernel, for want of a ring Reduce). An ideal run's `auto` keeps the fastest closed form."""
    for topology in ("switch:8", "nodes:2:8"):
        r = run_collective("reduce", System("h100", topology=topology, calibrated=True, trace=False), 2.0**20)
        assert r.algorithm == "unidirectional"
        assert r.time_s >= r.topology_bound_s * (1 - 1e-9)
    ideal = run_collective("reduce", System("h100", topology="switch:8", trace=False), 2.0**20)
    assert ideal.algorithm == "switch_relay"


def test_a_grid_is_refused():
    with pytest.raises(PodsimError, match="one axis"):
        run_collective("reduce", System("tpu-v5e", topology="torus:4x4", trace=False), V, algorithm="unidirectional")
