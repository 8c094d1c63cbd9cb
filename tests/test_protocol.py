"""NCCL's protocols (LL, LL128, Simple) in the calibrated mode: NCCL's figures by hand, the tuner's choice per
algorithm, simulation equal to the calibrated closed form, ideal results untouched, bad input."""
import json
import math

import pytest

from simulator.collectives import run_collective
from simulator.collectives.protocol import LL
from simulator.engine.system import System
from simulator.errors import PodsimError
from simulator.frontend.cli import main
from simulator.hardware.calibration import DATA

US = 1e-6
#: NVIDIA/nccl src/graph/tuning.cc, ring: per-step latency over NVLink and per-call base latency (us), and the
#: payload per wire byte of each protocol's line (LL: 4 data + 4 flag bytes; LL128: 120 + 8; Simple: all data)
NCCL = {"LL": (0.6, 6.6, 4 / 8), "LL128": (1.9, 14.0, 120 / 128), "Simple": (3.4, 8.4, 1.0)}
A100_NVLINK = 3.0e11


def _curve(chip: str, nbytes: float) -> float:
    """The calibrated NVLink fraction at V bytes, from the committed constants: peak / (1 + (half / V) ** p)."""
    link = json.loads((DATA / "calibration.json").read_text())["chips"][chip]["links"]["nvlink"]
    return link["peak_fraction"] / (1 + (link["half_size_bytes"] / nbytes) ** link["exponent"])


def _ring_by_hand(nbytes: float, n: int, protocol: str) -> float:
    """Unidirectional ring AllReduce over a switch: base latency, then 2(n-1) steps, each a step latency (two hops)
    plus a shard at the protocol's share of the calibrated link rate."""
    step, base, payload = NCCL[protocol]
    rate = A100_NVLINK * _curve("a100", nbytes) * payload
    return base * US + 2 * (n - 1) * (step * US + nbytes / n / rate)


def _a100(topology: str = "switch:8") -> System:
    return System("a100", topology=topology, calibrated=True, trace=False)


@pytest.mark.parametrize("protocol", ["LL", "LL128", "Simple"])
@pytest.mark.parametrize("nbytes", [1024.0, 65536.0, 2.0**20, 2.0**30])
def test_a_forced_protocol_runs_the_ring_at_nccls_figures(protocol, nbytes):
    r = run_collective("all_reduce", _a100(), nbytes, algorithm="unidirectional", protocol=protocol)
    assert r.protocol == protocol
    assert r.time_s == pytest.approx(_ring_by_hand(nbytes, 8, protocol), rel=1e-9)
    assert r.analytic_s == pytest.approx(r.time_s, rel=1e-9)  # the calibrated closed form beside the simulation


@pytest.mark.parametrize("nbytes", [2.0**k for k in range(10, 34, 2)])
def test_the_tuner_picks_each_algorithms_fastest_protocol(nbytes):
    r = run_collective("all_reduce", _a100(), nbytes, algorithm="unidirectional")
    by_hand = {p: _ring_by_hand(nbytes, 8, p) for p in NCCL}
    assert r.protocol == min(by_hand, key=by_hand.get)
    (ring,) = [a for a in r.alternatives if a["algorithm"] == "unidirectional"]
    assert ring["protocols"] == pytest.approx(by_hand, rel=1e-9)
    assert ring["protocol"] == r.protocol and ring["time_s"] == pytest.approx(min(by_hand.values()), rel=1e-9)


def test_small_arrays_take_ll_and_large_ones_simple_with_the_crossovers_between():
    picks = [run_collective("all_reduce", _a100(), 2.0**k, algorithm="unidirectional").protocol for k in range(10, 34)]
    assert picks[0] == "LL" and picks[-1] == "Simple"
    first = {p: picks.index(p) for p in set(picks)}
    assert sorted(first, key=first.get) == [p for p in ("LL", "LL128", "Simple") if p in first]  # in that order
    assert picks == sorted(picks, key=["LL", "LL128", "Simple"].index)  # and never back


@pytest.mark.parametrize("topology,algorithm", [
    ("switch:8", "unidirectional"), ("switch:8", "two_shot"), ("switch:8", "one_shot"),
    ("switch:8", "recursive_doubling"), ("nodes:2:4", "two_shot"), ("nodes:2:4", "hierarchical"),
    ("nodes:2:4", "recursive_doubling")])  # closed forms that equal the ideal simulation exactly
def test_simulation_equals_the_calibrated_closed_form_under_every_protocol(topology, algorithm):
    for protocol in ("LL", "LL128", "Simple"):
        r = run_collective("all_reduce", _a100(topology), 4e6, algorithm=algorithm, protocol=protocol)
        assert r.time_s == pytest.approx(r.analytic_s, rel=1e-6), (algorithm, protocol)


def test_auto_chooses_algorithm_and_protocol_together_and_lists_each_pair():
    """On a calibrated GPU system auto runs NCCL's choice (1 KiB on 8 A100: Ring/LL, tests/test_nccl_tuner.py),
    though a custom kernel (one-shot) has the faster closed form: it stays an alternative, labelled."""
    r = run_collective("all_reduce", _a100(), 1024.0)
    times = {a["algorithm"]: a["time_s"] for a in r.alternatives}
    assert (r.algorithm, r.protocol) == ("unidirectional", "LL") and r.nccl["algorithm"] == "Ring"
    assert min(times, key=times.get) == "one_shot" and r.alternatives[0]["protocol"] == "LL"
    labels = {a["algorithm"]: (a["nccl"], a["source"]) for a in r.alternatives}
    assert labels["one_shot"] == (False, "custom kernel") and labels["unidirectional"] == (True, "NCCL Ring")
    for a in r.alternatives:
        assert a["time_s"] == min(a["protocols"].values()) and a["protocol"] in a["protocols"]


def test_nvls_keeps_its_own_fit_and_reports_simple():
    r = run_collective("all_reduce", System("h100", topology="switch:8", calibrated=True, trace=False), 2.0**30,
                       algorithm="nvls")
    assert r.protocol == "Simple"
    (nvls,) = [a for a in r.alternatives if a["algorithm"] == "nvls"]
    assert list(nvls["protocols"]) == ["Simple"]


def test_ideal_and_tpu_results_carry_no_protocol_and_forcing_one_there_is_an_error():
    for system in (System("h100", topology="switch:8", trace=False),
                   System("tpu-v5e", topology="torus:4x4", calibrated=True, trace=False)):
        r = run_collective("all_reduce", system, 1e6)
        assert r.protocol is None and all("protocol" not in a for a in r.alternatives)
        with pytest.raises(PodsimError, match="calibrated GPU system"):
            run_collective("all_reduce", system, 1e6, protocol="LL")


def test_bad_protocols_are_one_line_errors():
    with pytest.raises(PodsimError, match=r"protocol='LL64'; valid: auto, LL, LL128, Simple"):
        run_collective("all_reduce", _a100(), 1e6, protocol="LL64")
    h100 = System("h100", topology="switch:8", calibrated=True, trace=False)
    with pytest.raises(PodsimError, match="cannot run algorithm 'nvls'.*Simple") as err:
        run_collective("all_reduce", h100, 1e6, algorithm="nvls", protocol="LL")
    assert "\n" not in str(err.value)
    assert run_collective("all_reduce", h100, 1e6, protocol="LL").algorithm != "nvls"  # auto skips what cannot


def test_a_hop_keeps_latency_beyond_the_wire_and_links_return_to_their_own_afterwards():
    assert LL.latency("nvlink", 1e-6) == pytest.approx(0.3e-6)  # the wire's 1 us replaced by half LL's step
    assert LL.latency("nvlink", 4e-6) == pytest.approx(3.3e-6)  # a fault's 3 us stays on top
    assert LL.latency("ici", 1e-6) == 1e-6  # no protocol on TPU links
    system = _a100()
    run_collective("all_reduce", system, 1e6, protocol="LL")
    links = system.network.links.values()
    assert all(c.latency_s == c.nominal_latency_s == 1e-6 for c in links)
    assert all(c.bandwidth_bytes_per_s == c.nominal_bandwidth_bytes_per_s for c in links)


def test_the_protocol_choice_matters_most_for_small_messages():
    """At 1 KB LL's latency wins by a wide margin; at 1 GiB the protocols differ by their payload efficiency."""
    small = {p: _ring_by_hand(1024.0, 8, p) for p in NCCL}
    assert small["LL"] < 0.5 * small["Simple"]
    big = {p: _ring_by_hand(2.0**30, 8, p) for p in NCCL}
    assert big["LL"] / big["Simple"] == pytest.approx(2.0, rel=0.02)
    assert math.isclose(big["LL128"] / big["Simple"], 128 / 120, rel_tol=0.02)


def test_cli_collective_json_names_the_protocol(capsys):
    assert main(["collective", "all_reduce", "--chip", "h100", "--topology", "switch:8", "--bytes", "1KB",
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["protocol"] is None  # ideal links: no protocol
    assert main(["collective", "all_reduce", "--chip", "a100", "--topology", "switch:8", "--bytes", "1KB",
                 "--algorithm", "unidirectional", "--calibrated", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["calibrated_algorithm"], data["calibrated_protocol"]) == ("unidirectional", "LL")
    assert data["calibrated_time_s"] == pytest.approx(_ring_by_hand(1000.0, 8, "LL"), rel=1e-9)
