"""Calibrated GPU-node alternatives against their own simulation (issue 31: closed forms equal to their simulation
wherever ``auto`` ranks by them).

On H100 nodes:2:8 and nodes:4:8 at 64 MB, every alternative a calibrated run lists is a forecast: the calibrated
closed form of that algorithm under the protocol NCCL's tuner would run it with. The oracle is the event-driven
simulation of the same algorithm asked for by name (``algorithm=NAME``, the same protocol and pieces): they agree
within ``REL``. The cases that do not are strict xfails, each with its cause (`OFF`). Algorithms in
simulator/collectives/nvls*.py and hierarchical.py (NVLS, NVLSTree, the hierarchical AllReduce) are left to
their own tests and not listed here.
"""
from __future__ import annotations

from functools import cache
from typing import Any

import pytest

from simulator.collectives import run_collective
from simulator.engine.system import System

REL = 0.05
V = 64e6
NOT_HERE = {"nvls", "nvls_tree", "hierarchical", "hierarchical_pipelined"}  #: see the module docstring

_TREE = ("the tree's closed form pipelines pieces as if every hop's link were its own; in the simulation an interior "
         "GPU's NVLink port carries its up and down pieces at once")
#: (topology, kind, algorithm) -> why its forecast is more than REL off its simulation (forecast / simulation)
OFF = {("nodes:4:8", "all_reduce", "binary_tree"): _TREE + " (0.896)",
       ("nodes:4:8", "all_reduce", "double_binary_tree"): _TREE + " (0.886)"}

_ROOT = {"broadcast": ("line", "rail_chains", "unidirectional"), "reduce": ("rail_chains", "unidirectional",
                                                                           "root_direct"),
         "gather": ("rail_gather", "root_direct"), "scatter": ("rail_gather", "root_direct")}
_RINGS = ("line", "unidirectional", "recursive_halving_doubling", "direct")
_ALL_REDUCE = ("unidirectional", "line", "recursive_halving_doubling", "two_shot", "double_binary_tree",
               "recursive_doubling", "binary_tree", "one_shot")
#: (topology, kind) -> the alternatives a calibrated run lists there (`NOT_HERE` aside), written out so that
#: collecting the tests runs nothing; `test_the_listed_alternatives_are_these` keeps it true
LISTED = {(topology, kind): names for topology in ("nodes:2:8", "nodes:4:8")
          for kind, names in {**_ROOT, "all_gather": _RINGS, "reduce_scatter": _RINGS, "all_reduce": _ALL_REDUCE,
                              "all_to_all": ("direct", "line", "unidirectional")}.items()}


@cache
def _alternatives(topology: str, kind: str) -> dict[str, dict[str, Any]]:
    r = run_collective(kind, System("h100", topology=topology, calibrated=True, trace=False), V)
    return {a["algorithm"]: a for a in r.alternatives if a["algorithm"] not in NOT_HERE}


def _cases() -> list[Any]:
    out = []
    for (topology, kind), names in LISTED.items():
        for name in names:
            why = OFF.get((topology, kind, name))
            marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
            out.append(pytest.param(topology, kind, name, marks=marks, id=f"{topology}-{kind}-{name}"))
    return out


@pytest.mark.parametrize(("topology", "kind"), sorted(LISTED))
def test_the_listed_alternatives_are_these(topology: str, kind: str) -> None:
    """`LISTED` is what a calibrated run lists (a new alternative gets tested), and `OFF` names only those."""
    assert set(_alternatives(topology, kind)) == set(LISTED[(topology, kind)])
    assert {name for t, k, name in OFF if (t, k) == (topology, kind)} <= set(LISTED[(topology, kind)])


@pytest.mark.parametrize(("topology", "kind", "name"), _cases())
def test_node_alternative_forecast_equals_its_simulation(topology: str, kind: str, name: str) -> None:
    alt = _alternatives(topology, kind)[name]
    assert alt["time_is"] == "forecast"
    forced = run_collective(kind, System("h100", topology=topology, calibrated=True, trace=False), V, algorithm=name)
    assert forced.protocol == alt.get("protocol"), name
    assert alt["time_s"] == pytest.approx(forced.time_s, rel=REL), \
        f"{name}: forecast {alt['time_s'] * 1e6:.2f} us, simulated {forced.time_s * 1e6:.2f} us"
