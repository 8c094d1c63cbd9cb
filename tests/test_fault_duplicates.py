"""A link fault names a cable (both directions): naming it twice is refused, never multiplied (issue 31, h31tree).

main applied ``link:0->1=0.5`` and ``link:1->0=0.5`` as 0.5 x 0.5 = 0.25 on both directions: torus:8 AllReduce
of 1 GB on tpu-v5e took 22.77 ms, exactly what ``link:0->1=0.25`` takes, where one half-speed cable takes
21.10 ms. Each cable now takes one fault of each kind; the refusal names both faults, on one line, exit 2.
"""
import pytest

from simulator import System
from simulator.engine.faults import ChipSlow, LinkDegraded, LinkDown, LinkLatency
from simulator.errors import FaultError
from simulator.frontend.cli import main

B = 4.5e10  # tpu-v5e ICI one-way bytes/s per link


def _cli(capsys, topology, *faults):
    args = ["collective", "all_reduce", "--chip", "tpu-v5e", "--topology", topology, "--bytes", "1MB"]
    for f in faults:
        args += ["--fault", f]
    rc = main(args)
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("topology,first,second", [
    ("torus:8", "link:0->1=0.5", "link:1->0=0.5"),  # both directions of one cable
    ("torus:8", "link:0->1=0.5", "link:0->1=0.5"),  # the same spec twice
    ("torus:4x4", "link:0,0->0,1=0.5", "link:1->0=0.5"),  # coordinates and indices naming one cable
    ("torus:8", "link:2->3=latency:1us", "link:3->2=latency:1us"),
    ("torus:8", "link:2->3=down", "link:3->2=0.5"),
    ("torus:8", "link:2->3=0.5", "link:2->3=down")])
def test_a_cable_named_twice_is_one_line_naming_both(capsys, topology, first, second):
    rc, err = _cli(capsys, topology, first, second)
    assert rc == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert second in err and first in err and "names cable" in err


def test_a_fraction_and_a_latency_on_one_cable_both_apply():
    """Different kinds on one cable are two facts about it: the bandwidth halves once, the latency adds once."""
    healthy = System("tpu-v5e", topology="torus:8").graph.edges[0, 1]
    g = System("tpu-v5e", topology="torus:8", faults=[LinkDegraded(0, 1, 0.5), LinkLatency(1, 0, 2e-6)]).graph
    for a, b in ((0, 1), (1, 0)):
        assert g.edges[a, b]["bandwidth_bytes_per_s"] == pytest.approx(0.5 * B)
        assert g.edges[a, b]["latency_s"] == pytest.approx(healthy["latency_s"] + 2e-6)


def test_one_fault_halves_both_directions_once():
    g = System("tpu-v5e", topology="torus:8", faults=[LinkDegraded(1, 0, 0.5)]).graph
    assert g.edges[0, 1]["bandwidth_bytes_per_s"] == pytest.approx(0.5 * B)
    assert g.edges[1, 0]["bandwidth_bytes_per_s"] == pytest.approx(0.5 * B)


def test_the_python_api_refuses_the_duplicate_too():
    with pytest.raises(FaultError, match=r"link:1->0=0.5 names cable 0<->1 again, after link:0->1=0.5"):
        System("tpu-v5e", topology="torus:8", faults=[LinkDegraded(0, 1, 0.5), LinkDegraded(1, 0, 0.5)])
    with pytest.raises(FaultError, match="names cable"):
        System("tpu-v5e", topology="torus:8", faults=[LinkDown(0, 1), LinkDown(1, 0)])


@pytest.mark.parametrize("faults", [
    [ChipSlow(3, 1e-5, ("hbm",)), LinkDegraded(3, 4, 1e-5)],  # a slow chip on a slow cable: 1e-10 of its speed
    [ChipSlow(3, 1e-5, ("hbm",)), ChipSlow(3, 1e-5, ("hbm",))],  # two slow-downs of one chip's HBM
])
def test_multiplied_slowdowns_below_the_floor_are_refused(faults: list) -> None:
    """Each factor is at least `MIN_SPEED` (1e-9) on its own, but their product, 1e-10, prices nothing real (a link
    at 4.5 B/s): refused with the product named, as two degradations of one cable are."""
    with pytest.raises(FaultError, match="multiplying"):
        System("tpu-v5e", topology="torus:8", faults=faults)


def test_multiplied_slowdowns_above_the_floor_are_kept() -> None:
    """1e-4 x 1e-4 = 1e-8 of 45 GB/s is above the floor: the cable 3-4 keeps 450 B/s each way."""
    net = System("tpu-v5e", topology="torus:8", faults=[ChipSlow(3, 1e-4, ("hbm",)),
                                                       LinkDegraded(3, 4, 1e-4)]).network
    assert net.graph.edges[3, 4]["bandwidth_bytes_per_s"] == pytest.approx(4.5e10 * 1e-8, rel=1e-9)
