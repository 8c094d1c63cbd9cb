"""`Network.priced`: ring phase profiles shared by every job priced on one network.

A multi-axis ring closed form prices each axis's phase by a profile (`timing.chain_phase_profile`) that depends on
the network's links, the algorithm, the phase and the rings -- not on the job's bytes. Jobs on one network share
it. Every closed form must then be what it was when each job priced its own profiles, whatever was priced on the
network before (other kinds, sizes, axes and algorithms, in any order), and a step's estimate priced on the
system's own network must equal the estimate on a network of its own.
"""
from __future__ import annotations

import random

import pytest

from simulator.collectives import plan_collective
from simulator.engine.faults import LinkDegraded
from simulator.engine.system import System, resolve_chip
from simulator.workloads.plans import parse_plan_mesh, train_plan
from simulator.workloads.transformer import get_model

CASES = [(kind, nbytes, axes) for kind in ("all_gather", "reduce_scatter", "all_reduce")
         for nbytes in (64e3, 8e6, 1e9) for axes in ((0,), (1,), (0, 1), (0, 1, 2))]


class _Unkept(dict):  # type: ignore[type-arg]
    """A `Network.priced` that keeps nothing: every job prices its own profiles, as before they were shared."""

    def __setitem__(self, key: object, value: object) -> None:
        pass


def _unshared(topology: str, **kwargs: object) -> System:
    system = System("tpu-v5p", topology=topology, **kwargs)  # type: ignore[arg-type]
    assert system.network is not None
    system.network.priced = _Unkept()
    return system


def _alternatives(system: System, kind: str, nbytes: float, axes: tuple[int, ...]) -> dict[str, float]:
    plan = plan_collective(kind, system, nbytes, axes=list(axes))
    return {a["algorithm"]: a["time_s"] for a in plan.alternatives}


@pytest.mark.parametrize("topology", ["torus:4x4x4", "mesh:2x4x4"])
def test_shared_profiles_price_as_a_fresh_network(topology: str) -> None:
    shared = System("tpu-v5p", topology=topology)
    order = list(CASES)
    random.Random(7).shuffle(order)
    on_shared = {case: _alternatives(shared, *case) for case in order}
    assert shared.network is not None and shared.network.priced, "ring closed forms priced through the shared cache"
    for case in CASES:
        fresh = _alternatives(_unshared(topology), *case)
        assert on_shared[case] == fresh, case  # bit-identical: the same floats as profiles priced job by job


def test_profiles_are_per_network() -> None:
    """A degraded link makes another network: its profiles are its own, not the healthy one's."""
    healthy = System("tpu-v5p", topology="torus:4x4x4")
    slow = System("tpu-v5p", topology="torus:4x4x4", faults=[LinkDegraded((0, 0, 0), (1, 0, 0), 0.5)])
    first = _alternatives(healthy, "all_gather", 1e9, (0,))
    second = _alternatives(slow, "all_gather", 1e9, (0,))
    assert min(second.values()) > min(first.values())
    assert second == _alternatives(_unshared("torus:4x4x4", faults=[LinkDegraded((0, 0, 0), (1, 0, 0), 0.5)]),
                                   "all_gather", 1e9, (0,))


def test_train_estimate_on_the_systems_network_equals_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """`train_plan` prices its estimate on the system it simulates: the same closed form and step as on a network
    of its own (`axis_links` without ``net``)."""
    import simulator.workloads.plans.train as train_mod

    def run() -> dict:
        return train_plan(get_model("llama-3-70b"), resolve_chip("tpu-v5p"), 8, 2048, parse_plan_mesh("data=8,model=8"),
                          trace=False)

    together = run()
    real = train_mod.axis_links
    monkeypatch.setattr(train_mod, "axis_links", lambda mesh, graph, chip, net=None, cache=None:
                        real(mesh, graph, chip, None, cache))
    apart = run()
    assert together["closed_form"] == apart["closed_form"]
    assert together["step_time_s"] == apart["step_time_s"]


@pytest.mark.parametrize("chip,topology", [("h100", "switch:8"), ("tpu-v5p", "torus:4x4x4")])
def test_a_calibrated_price_reads_its_own_links(chip: str, topology: str) -> None:
    """A calibrated price runs the closed form on a view of the network at the calibrated rates
    (`protocol.priced_view`, the same routes over another graph): its profiles are its own, not the ideal ones
    priced on the network a moment before (that sharing once gave switch:8's 1 KB LL `unidirectional` forecast
    34.6 us against 15.1 us simulated)."""
    def forecasts(system: System) -> dict[str, float]:
        out = {}
        for kind in ("all_gather", "all_reduce"):
            for nbytes in (1024.0, 64e6):
                plan = plan_collective(kind, system, nbytes)
                out.update({f"{kind} {nbytes} {a['algorithm']}": a["time_s"] for a in plan.alternatives})
        return out

    shared = forecasts(System(chip, topology=topology, calibrated=True))
    unshared = System(chip, topology=topology, calibrated=True)
    assert unshared.network is not None
    unshared.network.priced = _Unkept()
    assert shared == forecasts(unshared)
