"""Start-up stays lazy: what `podsim --help`, `podsim chips` and a one-block run import (issue 29 item 5).

No timing here (benchmarks/startup.py times them): each command runs in a fresh interpreter and reports which
heavy modules it loaded. --help and chips need none of NumPy, NetworkX, SciPy, SimPy or the collectives; a
one-block double-buffer run needs a System of one chip (NumPy, SimPy) but no graph (NetworkX loads with a
topology), neither SciPy nor the collectives nor the other scenarios.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from simulator.frontend.command_help import EXTERNAL

HEAVY = ("numpy", "networkx", "scipy", "simpy", "matplotlib", "topologies", "simulator.collectives",
         "simulator.workloads.hlo", "simulator.workloads.plans.train", "scenarios.collective_matmul")

PROBE = """
import contextlib, io, json, sys
HEAVY = json.loads(sys.argv.pop(1))
from simulator.frontend.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    try:
        status = main(sys.argv[1:])
    except SystemExit as stop:
        status = stop.code
print(json.dumps({"status": status, "loaded": [m for m in HEAVY if m in sys.modules]}))
"""


def loaded(*argv: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", PROBE, json.dumps(HEAVY), *argv], capture_output=True, text=True,
                         check=True)
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["status"] in (0, None), out.stderr
    return report["loaded"]


@pytest.mark.parametrize("argv", [["--help"], ["chips"], ["model", "--help"], ["collective", "--help"]])
def test_help_and_chips_import_nothing_heavy(argv):
    assert loaded(*argv) == []


def test_a_one_block_run_imports_only_what_a_system_needs():
    assert loaded("run", "double_buffer", "--set", "blocks=1") == ["numpy", "simpy"]  # a lone chip: no graph


def test_a_run_on_a_topology_still_loads_networkx():
    assert {"networkx", "topologies"} <= set(loaded("send", "--topology", "ring:2", "--src", "0", "--dst", "1",
                                                    "--bytes", "1MB"))


COMMAND_MODULES = tuple(module for module, _ in EXTERNAL.values())  #: the commands with modules of their own


def test_help_and_a_run_import_no_other_command_s_module():
    """`podsim --help` and `podsim run` register the other commands as stubs: none of their modules loads."""
    for argv in (["--help"], ["run", "double_buffer", "--set", "blocks=1"]):
        probe = subprocess.run([sys.executable, "-c", PROBE, json.dumps(COMMAND_MODULES), *argv], capture_output=True,
                               text=True, check=True)
        assert json.loads(probe.stdout.strip().splitlines()[-1])["loaded"] == [], argv


def test_a_stub_s_help_line_is_its_command_s_own():
    """The top-level help from stubs equals the one from every command's full parser (the same lines, in order)."""
    import argparse

    from simulator.frontend.cli import build_parser

    def lines(parser: argparse.ArgumentParser) -> list[tuple[str, str | None]]:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        return [(choice.dest, choice.help) for choice in sub._choices_actions]

    full, stubs = build_parser(), build_parser(only=())
    assert lines(full) == lines(stubs) and len(lines(full)) >= 15
    assert full.format_help() == stubs.format_help()


def test_an_unknown_algorithm_is_still_one_line_naming_the_valid_ones(capsys):
    from simulator.frontend.cli import main

    assert main(["collective", "all_gather", "--topology", "ring:8", "--bytes", "1MB", "--algorithm", "tre"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "invalid choice: 'tre'" in err and "'unidirectional'" in err


def test_the_lazy_public_api_resolves_every_name():
    import simulator

    assert set(simulator.__all__) == set(simulator.PUBLIC) | set(simulator.SUBMODULES)
    assert all(getattr(simulator, name) is not None for name in simulator.__all__)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        simulator.nothing  # noqa: B018


def test_the_parser_s_hlo_dtype_policies_are_the_cost_model_s():
    from simulator.frontend import hlo_cmd
    from simulator.workloads.hlo import cost

    assert hlo_cmd.DTYPE_POLICIES == cost.DTYPE_POLICIES
