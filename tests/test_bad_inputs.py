"""Walk docs/bad_inputs.md: every catalogued bad input exits 2 with exactly its documented one-line error."""
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROWS = re.findall(r"^\| (\d+) \| ([^|]+) \| `podsim (.+?)` \| (.+) \|$", (ROOT / "docs" / "bad_inputs.md").read_text(),
                  flags=re.M)


def test_the_catalogue_has_at_least_forty_inputs_across_every_area():
    assert len(ROWS) >= 40
    areas = {area.strip() for _, area, _, _ in ROWS}
    assert {"CLI", "chip files", "topology specs", "mesh specs", "sharding specs", "model configs",
            "scenario parameters"} <= areas


def test_the_catalogue_is_the_scripts_cases_numbered_in_order():
    """docs/bad_inputs.md is what scripts/make_bad_inputs.py writes: its cases, in order, numbered 1..n (a row
    added or removed by hand would be lost or come back at the next regeneration)."""
    from conftest import load_script

    script = load_script("make_bad_inputs")
    assert [(area.strip(), command) for _, area, command, _ in ROWS] == script.CASES
    assert [int(n) for n, _, _, _ in ROWS] == list(range(1, len(ROWS) + 1))


@pytest.mark.parametrize("number,area,command,message", ROWS, ids=[f"{n} {c}" for n, _, c, _ in ROWS])
def test_bad_input_gives_its_documented_error(number, area, command, message, capsys, monkeypatch):
    from simulator.frontend.cli import main

    monkeypatch.chdir(ROOT)
    assert main(shlex.split(command)) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.count("\n") == 1 and err.endswith("\n")
    assert err.strip() == message.replace("\\|", "|")


@pytest.mark.parametrize("number", ["3", "35", "53", "61"])
def test_the_installed_console_script_behaves_the_same(number):
    podsim = shutil.which("podsim") or str(Path(os.sys.executable).parent / "podsim")
    _, _, command, message = next(r for r in ROWS if r[0] == number)
    done = subprocess.run([podsim, *shlex.split(command)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.strip() == message and "Traceback" not in done.stderr
