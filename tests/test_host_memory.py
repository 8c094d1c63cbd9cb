"""Host memory as simulator events: topologies with hosts, offload and reload over PCIe, the host_offload
scenario, and the one-line errors of host transfers that cannot happen.

Oracles from REFERENCE.md (PCIe about 1.6e10 B/s per TPU, v5e 1.97e14 bf16 FLOP/s), the 1 us PCIe hop
latency and 2e11 B/s of host DRAM the host model assumes, and bytes over bandwidth.
"""
import json

import pytest

from simulator.collectives import run_collective
from simulator.engine.host import HostTransferError
from simulator.engine.system import System
from simulator.frontend.cli import main
from topologies import parse_spec
from topologies.errors import TopologyError

PCIE_V5E, PCIE_H100, LAT, DRAM = 1.6e10, 6.4e10, 1e-6, 2e11
C_V5E = 1.97e14


def _timed(system, *steps):
    """Run ``steps`` (chip, "offload" | "reload", bytes) one after another on one process; their end times."""
    ends = []

    def go():
        for chip, what, nbytes in steps:
            ends.append((yield getattr(system, what)(chip, nbytes)))

    system.process(go(), "host transfers")
    system.run()
    return ends


def test_hosts_in_a_spec_link_every_chip_over_its_pcie():
    g = parse_spec("torus:4x4+hosts:4", System("tpu-v5e").spec)
    hosts = sorted(v for v, d in g.nodes(data=True) if d.get("role") == "host")
    assert hosts == ["host0", "host1", "host2", "host3"]
    assert g.nodes["host2"]["chips"] == (8, 9, 10, 11)
    assert g.edges[9, "host2"]["bandwidth_bytes_per_s"] == PCIE_V5E and g.edges[9, "host2"]["kind"] == "pcie"


@pytest.mark.parametrize("spec", ["torus:4x4+host:4", "torus:4x4+hosts:0", "torus:4x4+hosts:", "torus:4x4+dcn:2"])
def test_a_bad_host_suffix_says_what_is_valid(spec):
    with pytest.raises(TopologyError, match="hosts:"):
        parse_spec(spec)


def test_offload_then_reload_each_take_latency_plus_bytes_over_pcie():
    system = System("tpu-v5e", topology="torus:4x4+hosts:4")
    v = 1.6e9
    ends = _timed(system, (5, "offload", v), (5, "reload", v))
    assert ends[0] == pytest.approx(LAT + v / PCIE_V5E, rel=1e-12)
    assert ends[1] == pytest.approx(2 * (LAT + v / PCIE_V5E), rel=1e-12)
    pool = system.host_memory.pools["host1"]
    assert pool.peak_bytes == v and pool.live_bytes == 0  # held between the two, freed by the reload


def test_chips_of_one_host_share_its_dram():
    """Eight H100s offloading at once: each PCIe link would take V / 6.4e10, the shared DRAM 8 V / 2e11."""
    system = System("h100", topology="switch:8+hosts:8")
    v = 1e9
    ends = []

    def one(chip):
        ends.append((yield system.offload(chip, v)))

    for chip in range(8):
        system.process(one(chip), f"chip {chip}")
    system.run()
    assert max(ends) == pytest.approx(max(LAT + v / PCIE_H100, 8 * v / DRAM), rel=1e-9)
    assert 8 * v / DRAM > LAT + v / PCIE_H100  # DRAM-bound here


def test_reloading_more_than_was_offloaded_is_refused():
    system = System("tpu-v5e", topology="torus:4x4+hosts:4")
    _timed(system, (0, "offload", 1e6))
    with pytest.raises(HostTransferError, match=r"reload of 2000000 bytes on chip 0 is more than the 1000000"):
        system.reload(0, 2e6)
    with pytest.raises(HostTransferError, match="chip 99 has no host"):
        system.offload(99, 1e6)


def test_a_partial_reload_keeps_the_rest_for_later():
    system = System("tpu-v5e", topology="torus:4x4+hosts:4")
    _timed(system, (0, "offload", 3e6), (0, "reload", 1e6))
    assert system.host_memory.held_bytes(0) == pytest.approx(2e6)
    with pytest.raises(HostTransferError, match="more than the 2000000"):
        system.reload(0, 3e6)


def test_a_topology_without_hosts_says_how_to_add_them():
    system = System("tpu-v5e", topology="torus:4x4")
    with pytest.raises(HostTransferError) as err:
        system.offload(0, 1e6)
    message = str(err.value)
    assert "\n" not in message and "'torus:4x4'" in message and "+hosts:H" in message


@pytest.mark.parametrize("spec,chip,kind", [("multislice:2:4x4", "tpu-v5e", "all_to_all"),
                                            ("nodes:2:8", "h100", "all_reduce"),
                                            ("torus:4x4", "tpu-v5e", "all_reduce")])
def test_hosts_leave_collectives_as_they_were(spec, chip, kind):
    """Host links carry no collective: the same routes, time, book estimate and bound with and without hosts."""
    plain = run_collective(kind, System(chip, topology=spec, trace=False), 64e6)
    hosted = run_collective(kind, System(chip, topology=f"{spec}+hosts:4", trace=False), 64e6)
    for field in ("algorithm", "time_s", "book_s", "topology_bound_s"):
        assert getattr(hosted, field) == getattr(plain, field), field


def _scenario(capsys, **params):
    argv = ["run", "host_offload", "--json"]
    for key, value in params.items():
        argv += ["--set", f"{key}={value}"]
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("layer_flops", [4e12, 1e12])  # compute hides the offloads; PCIe-bound
def test_host_offload_scenario_follows_the_flow_shop_closed_form(capsys, layer_flops):
    layers, a = 8, 256e6
    out = _scenario(capsys, layers=layers, activation_bytes=a, layer_flops=layer_flops)
    c, t = layer_flops / C_V5E, LAT + a / PCIE_V5E  # 4 chips per host: DRAM share 5e10 > PCIe 1.6e10
    forward = c + t + (layers - 1) * max(c, t)
    backward = t + 2 * c + (layers - 1) * max(t, 2 * c)
    assert out["end_to_end_s"] == pytest.approx(forward + backward, rel=1e-3)
    if c >= t:  # offloads keep up: HBM holds two layers' activations, not eight
        assert out["hbm_activation_peak_bytes"] == pytest.approx(2 * a)
    else:
        assert out["end_to_end_s"] > 3 * layers * c * 1.2  # the PCIe roof shows


def test_host_offload_on_a_topology_without_hosts_is_one_line(capsys):
    assert main(["run", "host_offload", "--set", "topology=torus:4x4"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "+hosts:H" in err
