"""The CLI reference page is generated from podsim's parser and up to date: every subcommand and every option
the parser has is on the page, and ``scripts/make_cli_reference.py --check`` passes."""
from __future__ import annotations

import argparse
from pathlib import Path

from conftest import load_script

from simulator.frontend.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "reference" / "cli.md"


def _script():
    return load_script("make_cli_reference")


def test_the_page_is_what_the_script_writes_from_the_parser(capsys):
    assert _script().main(["--check"]) == 0, "run: python scripts/make_cli_reference.py"


def test_check_fails_on_a_stale_page(tmp_path, monkeypatch, capsys):
    script = _script()
    stale = tmp_path / "cli.md"
    stale.write_text(PAGE.read_text().replace("## podsim run\n", "## podsim run (stale)\n"))
    monkeypatch.setattr(script, "PAGE", stale)
    monkeypatch.setattr(script, "ROOT", tmp_path)
    assert script.main(["--check"]) == 1
    assert "out of date" in capsys.readouterr().err


def test_every_subcommand_and_option_is_on_the_page():
    page = PAGE.read_text()
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert len(sub.choices) >= 15
    for name, parser in sub.choices.items():
        section = page[page.index(f"\n## podsim {name}\n"):]
        section = section[:section.find("\n## ", 1)]
        for action in parser._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"`{flag}`" in section, (name, flag)
