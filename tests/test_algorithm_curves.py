"""The collectives page's algorithm picture and crossovers: closed forms against size, auto on top, spot points
against simulation, a crossover by hand, and the page's numbers as the code computes them."""
import struct
from pathlib import Path

import pytest

from simulator.collectives import plan_collective, run_collective
from simulator.engine.system import System
from simulator.report import algorithms, plots

PAGE = (Path(__file__).resolve().parents[1] / "docs" / "explanation" / "collectives.md").read_text()
SIZES = [2.0**k for k in range(10, 34)]  # 1 KiB .. 8 GiB
A, B, N = 1e-6, 4.5e11, 8  # H100 preset: hop latency, NVLink one-way bytes/s per GPU; GPUs on the switch


def _h100(topology: str, calibrated: bool = False) -> System:
    return System("h100", topology=topology, calibrated=calibrated, trace=False)


@pytest.fixture(scope="module")
def node():
    """Ideal curves and crossovers of AllReduce on one 8-GPU H100 node."""
    system = _h100("switch:8")
    data = algorithms.curves("all_reduce", system, SIZES)
    return system, data, algorithms.crossovers("all_reduce", system, data)


def test_the_one_shot_two_shot_crossover_by_hand(node):
    """one_shot: 2 hops, each GPU's port carries (n-1)V; two_shot: 4 hops, 2(n-1)V/n: equal at V = 2ab / 5.25."""
    _, _, cuts = node
    first = cuts[0]
    assert (first["from"], first["to"]) == ("one_shot", "two_shot")
    assert first["size_bytes"] == pytest.approx(2 * A * B / ((N - 1) - 2 * (N - 1) / N), rel=0.01)


def test_auto_is_the_lowest_curve_and_changes_only_at_the_crossovers(node):
    system, data, cuts = node
    for i, choice in enumerate(data["auto"]):
        alive = [t[i] for t in data["algorithms"].values() if t[i] is not None]
        assert choice["time_s"] == min(alive)
    labels = [c["algorithm"] for c in data["auto"]]
    assert len(cuts) == sum(a != b for a, b in zip(labels, labels[1:], strict=False)) == 2
    for cut in cuts:  # each within 1% of where the choice flips
        assert plan_collective("all_reduce", system, cut["size_bytes"] * 0.99).algorithm.name == cut["from"]
        assert plan_collective("all_reduce", system, cut["size_bytes"] * 1.01).algorithm.name == cut["to"]
    assert data["algorithms"]["one_shot"][0] == pytest.approx(2 * A + (N - 1) * SIZES[0] / B, rel=1e-9)


@pytest.mark.parametrize("topology,sizes,top", [("switch:8", [4096.0, 2.0**20, 2.0**26], None),
                                                ("nodes:2:8", [4096.0, 2.0**20], 5)])
def test_spot_points_against_simulation(topology, sizes, top):
    """At a few sizes the applicable algorithms (on two nodes the five fastest by closed form) are simulated: auto's
    pick runs within 5% of its closed form and within 5% of the fastest simulated algorithm."""
    for nbytes in sizes:
        plan = plan_collective("all_reduce", _h100(topology), nbytes)
        simulated = {a["algorithm"]: run_collective("all_reduce", _h100(topology), nbytes,
                                                    algorithm=a["algorithm"]).time_s for a in plan.alternatives[:top]}
        chosen = plan.algorithm.name
        assert simulated[chosen] == pytest.approx(plan.alternatives[0]["time_s"], rel=0.05), (topology, nbytes)
        assert simulated[chosen] <= 1.05 * min(simulated.values()), (topology, nbytes, simulated)


def _shown(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.3g} B"


def test_the_page_states_the_crossovers_the_code_finds(node):
    _, _, cuts = node
    for cut in cuts:
        assert f"`{cut['from']}` up to {_shown(cut['size_bytes'])}" in PAGE or \
            f"`{cut['from']}` to {_shown(cut['size_bytes'])}" in PAGE, cut
    system = _h100("switch:8", calibrated=True)
    data = algorithms.curves("all_reduce", system, SIZES[::2])
    calibrated = algorithms.crossovers("all_reduce", system, data)
    # calibrated: NCCL's own choice (tests/test_nccl_tuner.py), the Ring/LL -> NVLS cut at about 1.26 MB by hand
    assert [(c["from"], c["to"]) for c in calibrated] == [("unidirectional (LL)", "nvls (Simple)")]
    text = " ".join(PAGE.split())
    for cut in calibrated:
        algorithm, protocol = cut["from"].split(" (")
        assert f"`{algorithm}` ({protocol} to {_shown(cut['size_bytes'])}" in text, cut
    assert "](../images/allreduce_algorithms.png)" in PAGE


def test_the_figure_draws_every_panel(tmp_path, node):
    _, data, cuts = node
    ax = algorithms.figure([("one node", data, cuts)], columns=1)
    assert {line.get_label() for line in ax.lines} >= {*data["algorithms"], "auto"}
    assert len([line for line in ax.lines if line.get_linestyle() == ":"]) == len(cuts)  # the crossovers
    path = plots.save(ax, tmp_path / "curves.png", dpi=40)
    raw = path.read_bytes()
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", raw[16:24])
    assert width > 200 and height > 150
