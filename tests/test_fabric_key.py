"""Node-system symmetry groups are reused between steps only on identical fabrics (`fabric_key`)."""
from __future__ import annotations

from simulator.acceleration.node_quotients import fabric_key
from simulator.engine.system import System


def test_identical_fabrics_share_a_key_and_others_do_not() -> None:
    a = fabric_key(System("h100", topology="nodes:4:8").network)
    assert a is not None
    assert a == fabric_key(System("h100", topology="nodes:4:8").network)
    assert a != fabric_key(System("a100", topology="nodes:4:8").network)  # other link bandwidths
    assert a != fabric_key(System("h100", topology="nodes:2:8").network)
    assert a != fabric_key(System("h100", topology="fattree:4:8").network)
