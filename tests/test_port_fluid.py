"""`simulator.collectives.port_fluid.fluid_time` against cases worked by hand: fair-shared ports, latencies that add
along a cut-through route, dependencies. Against the network's own simulation: tests/test_calibrated_node_pick.py
and tests/test_nvls_tree.py (``nvls_tree``'s closed form)."""
from __future__ import annotations

import pytest

from simulator.collectives.port_fluid import Flow, fluid_time

B = 1e9  #: bytes/s


def test_one_flow_pays_latency_then_bytes():
    assert fluid_time({"p": (2e-6, B)}, [Flow(["p"], 1e6)]) == pytest.approx(2e-6 + 1e-3)


def test_two_flows_share_a_port_fairly():
    """Two of 1 MB and one of 3 MB together: 3 share until 3 ms (each 1 MB), the last 2 MB alone: 5 ms."""
    flows = [Flow(["p"], 1e6), Flow(["p"], 1e6), Flow(["p"], 3e6)]
    assert fluid_time({"p": (0.0, B)}, flows) == pytest.approx(5e-3)


def test_a_weight_stands_for_identical_flows():
    """Weight 3 of 1 MB beside one of 1 MB: four flows, 4 ms, as four separate entries."""
    folded = fluid_time({"p": (0.0, B)}, [Flow(["p"], 1e6, weight=3), Flow(["p"], 1e6)])
    assert folded == pytest.approx(fluid_time({"p": (0.0, B)}, [Flow(["p"], 1e6) for _ in range(4)]))
    assert folded == pytest.approx(4e-3)


def test_a_route_cuts_through_and_its_latencies_add():
    """Two ports of 1 and 3 us, the second half as fast: the head reaches it after 1 + 3 us, its bytes take
    2 ms there: 2.004 ms."""
    ports = {"a": (1e-6, B), "b": (3e-6, B / 2)}
    assert fluid_time(ports, [Flow(["a", "b"], 1e6)]) == pytest.approx(4e-6 + 2e-3)


def test_a_dependent_flow_starts_when_its_dependency_arrives():
    """A chain of two 1 MB flows on two ports, then one on the first port that waits for both: 3 ms, plus three
    latencies of 1 us."""
    ports = {"a": (1e-6, B), "b": (1e-6, B)}
    flows = [Flow(["a"], 1e6), Flow(["b"], 1e6, [0]), Flow(["a"], 1e6, [0, 1])]
    assert fluid_time(ports, flows) == pytest.approx(3e-3 + 3e-6)


def test_a_later_flow_slows_one_in_flight():
    """1 MB starts on p at 0; a second 1 MB joins p at 0.5 ms (after a 0.5 MB flow on q): the first has 0.5 MB
    left, at half speed that is 1 ms (it ends at 1.5 ms); the second has then 0.5 MB left, alone: 2 ms. Not the
    1.5 ms of the second's chain alone, nor the 2.5 ms of the three flows' bytes end to end."""
    ports = {"p": (0.0, B), "q": (0.0, B)}
    flows = [Flow(["p"], 1e6), Flow(["q"], 0.5e6), Flow(["p"], 1e6, [1])]
    assert fluid_time(ports, flows) == pytest.approx(2e-3)


def test_a_flow_of_no_bytes_arrives_at_once():
    ports = {"p": (1e-6, B)}
    assert fluid_time(ports, [Flow(["p"], 0.0), Flow(["p"], 1e6, [0])]) == pytest.approx(1e-6 + 1e-3)
