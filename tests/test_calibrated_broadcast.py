"""A calibrated ring broadcast on GPUs pipelines its array in chunks, as NCCL's ring broadcast does: the root's
array, cut into c pieces, follows the n - 1 hops of the ring one piece behind another, so it takes
``base + (n - 1 + c - 1)(step + V / (c rate))`` -- checked against that closed form worked by hand from
NCCL's figures (src/graph/tuning.cc) and the committed calibration, with c the best power of two."""
import json

import pytest

from simulator.collectives import run_collective
from simulator.collectives.ring import PRICED_TRANSFERS
from simulator.engine.system import System
from simulator.hardware.calibration import DATA

US = 1e-6
#: NVIDIA/nccl src/graph/tuning.cc, ring: per-step latency over NVLink and per-call base latency (us), and the
#: payload per wire byte of each protocol's line (LL: 4 data + 4 flag bytes; LL128: 120 + 8; Simple: all data)
NCCL = {"LL": (0.6, 6.6, 4 / 8), "LL128": (1.9, 14.0, 120 / 128), "Simple": (3.4, 8.4, 1.0)}
A100_NVLINK = 3.0e11


def _rate(nbytes: float, protocol: str) -> float:
    """Bytes/s of one NVLink under ``protocol``: peak x calibrated fraction at V x the protocol's payload share."""
    link = json.loads((DATA / "calibration.json").read_text())["chips"]["a100"]["links"]["nvlink"]
    fraction = link["peak_fraction"] / (1 + (link["half_size_bytes"] / nbytes) ** link["exponent"])
    return A100_NVLINK * fraction * NCCL[protocol][2]


def _pipelined(nbytes: float, n: int, protocol: str, pieces: int) -> float:
    """Base latency, then the first piece over n - 1 hops and each later piece one hop behind."""
    step, base, _ = NCCL[protocol]
    return base * US + (n - 1 + pieces - 1) * (step * US + nbytes / pieces / _rate(nbytes, protocol))


def _best(nbytes: float, n: int, protocol: str) -> tuple[float, int]:
    """(seconds, pieces) of the fastest power-of-two cut whose transfers stay within the budget."""
    counts = [2**k for k in range(20) if 2**k * (n - 1) <= PRICED_TRANSFERS]
    return min((_pipelined(nbytes, n, protocol, c), c) for c in counts)


def _a100() -> System:
    return System("a100", topology="switch:8", calibrated=True, trace=False)


@pytest.mark.parametrize("protocol", ["LL", "LL128", "Simple"])
@pytest.mark.parametrize("nbytes", [65536.0, 2.0**20, 2.0**26, 2.0**30])
def test_a_calibrated_ring_broadcast_is_chunk_pipelined(protocol, nbytes):
    r = run_collective("broadcast", _a100(), nbytes, algorithm="unidirectional", protocol=protocol)
    expected, pieces = _best(nbytes, 8, protocol)
    assert r.protocol == protocol
    assert r.time_s == pytest.approx(expected, rel=1e-6)
    assert r.analytic_s == pytest.approx(r.time_s, rel=1e-6)  # the simulation equals its calibrated closed form
    if pieces > 1:  # one piece would cross the seven hops whole, one after another
        assert r.time_s < _pipelined(nbytes, 8, protocol, 1)


def test_a_large_broadcast_runs_at_the_order_of_the_link_rate():
    """V / rate bounds it below (the root's link carries all of V); pipelined, the fill is a fraction of it, so
    it takes under twice that -- where one piece would cross the n - 1 = 7 hops whole, 7 V / rate."""
    v = 2.0**30
    r = run_collective("broadcast", _a100(), v, algorithm="unidirectional", protocol="Simple")
    assert v / _rate(v, "Simple") < r.time_s < 2 * v / _rate(v, "Simple")


def test_explicit_chunks_are_kept():
    r = run_collective("broadcast", _a100(), 2.0**20, algorithm="unidirectional", protocol="LL", chunks=1)
    assert r.time_s == pytest.approx(_pipelined(2.0**20, 8, "LL", 1), rel=1e-6)


@pytest.mark.parametrize("topology", ["switch:8", "nodes:2:8"])
@pytest.mark.parametrize("nbytes", [65536.0, 2.0**20, 2.0**26])
def test_no_broadcast_beats_the_topology_bound_and_ideal_runs_keep_one_piece(topology, nbytes):
    for calibrated in (False, True):
        system = System("h100", topology=topology, calibrated=calibrated, trace=False)
        r = run_collective("broadcast", system, nbytes)
        assert r.time_s >= r.topology_bound_s * (1 - 1e-9)
    ideal = System("h100", topology="switch:8", trace=False)
    one = run_collective("broadcast", ideal, nbytes, algorithm="unidirectional")
    assert one.time_s == pytest.approx(run_collective("broadcast", ideal, nbytes, algorithm="unidirectional",
                                                      chunks=1).time_s, rel=1e-12)
