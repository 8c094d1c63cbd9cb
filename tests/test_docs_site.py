"""The documentation site: every page is in mkdocs.yml's nav, every internal link and anchor resolves, every
command shown in a code block parses with podsim's own parser, the JSON keys page names keys the commands
print, and the plug-in algorithm of the how-to runs, against a closed form worked out by hand and numpy."""
from __future__ import annotations

import json
import re
import shlex
import sys
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from conftest import load_script

from simulator.frontend.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
NOT_PAGES = ("examples", "book_models")  #: folders of docs/ that hold files, not pages (mkdocs.yml exclude_docs)
PAGES = sorted(p for p in DOCS.rglob("*.md") if p.relative_to(DOCS).parts[0] not in NOT_PAGES)
FENCE = re.compile(r"^(```|~~~).*?^\1", flags=re.S | re.M)


def _nav() -> list[str]:
    """The page paths of mkdocs.yml's nav (commented-out entries are not in it)."""
    text = (ROOT / "mkdocs.yml").read_text()
    nav = text[text.index("\nnav:"):]
    return re.findall(r"^\s*-\s+(?:[^:#\n]+:\s+)?([\w/.-]+\.md)\s*$", nav, flags=re.M)


def test_every_page_is_in_the_nav_once_and_every_nav_entry_exists():
    nav = _nav()
    pages = [p.relative_to(DOCS).as_posix() for p in PAGES]
    assert len(nav) == len(set(nav)), nav
    assert sorted(nav) == sorted(pages), (set(pages) - set(nav), set(nav) - set(pages))
    assert {"index.md", "guide/tutorial.md", "reference/cli.md", "explanation/bounds_and_forecasts.md"} <= set(nav)


def _slug(heading: str) -> str:
    """Python-Markdown's toc slug: the anchor mkdocs gives a heading."""
    text = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _prose(text: str) -> str:
    """The text outside fenced code blocks and inline code (links there are examples, not links)."""
    return re.sub(r"`[^`\n]*`", "", FENCE.sub("", text))


def _anchors(page: Path) -> set[str]:
    return {_slug(h) for h in re.findall(r"^#{1,6}\s+(.+?)\s*$", FENCE.sub("", page.read_text()), flags=re.M)}


def _links() -> list[tuple[Path, str]]:
    out = []
    for page in [ROOT / "README.md", *PAGES]:
        for target in re.findall(r"\]\(([^)\s]+)\)", _prose(page.read_text())):
            if not re.match(r"[a-z]+:", target):  # http:, https:, mailto: are not checked here
                out.append((page, target))
    return out


def test_the_anchor_slug_is_the_one_mkdocs_makes():
    assert _slug("Sweeps (and sweeps on Dask)") == "sweeps-and-sweeps-on-dask"
    assert _slug("podsim run") == "podsim-run"
    assert _slug("Calibrated training steps: the MFU real TPU runs get, from 1 to 32 slices") == \
        "calibrated-training-steps-the-mfu-real-tpu-runs-get-from-1-to-32-slices"


@pytest.mark.parametrize("page,target", _links(), ids=lambda v: v.name if isinstance(v, Path) else v)
def test_internal_links_and_anchors_resolve(page, target):
    path, _, anchor = target.partition("#")
    resolved = (page.parent / path).resolve() if path else page
    assert resolved.exists(), f"{page.relative_to(ROOT)} links {target}: no such file"
    if page.parent != ROOT and resolved.suffix == ".md":
        assert DOCS in resolved.parents, f"{page.relative_to(ROOT)} links {target}, outside the site"
    if anchor and resolved.suffix == ".md":
        assert anchor in _anchors(resolved), f"{page.relative_to(ROOT)} links {target}: no such heading"


def _shown_commands() -> list[tuple[str, str]]:
    """(page, command) for every `podsim ...` line of a fenced code block in the README and the docs."""
    out = []
    for page in [ROOT / "README.md", *PAGES]:
        for block in FENCE.finditer(page.read_text()):
            for line in block.group(0).splitlines():
                line = line.strip()
                line = line[2:] if line.startswith("$ ") else line
                synopsis = "[--" in line or "(--" in line  # a usage pattern, not a command
                if line.startswith("podsim ") and "&&" not in line and not synopsis:
                    out.append((page.relative_to(ROOT).as_posix(), line))
    return out


COMMANDS = _shown_commands()


def test_the_docs_show_many_commands():
    assert len(COMMANDS) >= 50 and {p for p, _ in COMMANDS} >= {"README.md", "docs/guide/tutorial.md"}


@pytest.mark.parametrize("page,command", COMMANDS, ids=lambda v: v)
def test_every_shown_command_parses_with_the_real_parser(page, command):
    argv = shlex.split(command, comments=True)[1:]
    try:
        build_parser().parse_args(argv)
    except SystemExit as exc:  # --help and friends; no shown command asks for them
        pytest.fail(f"{page}: {command!r} exits {exc.code}")
    # the parser raises PodsimError (one line, exit 2 from main) for anything it refuses


def test_a_wrong_command_is_caught_by_the_same_check():
    from simulator.errors import PodsimError

    with pytest.raises(PodsimError):
        build_parser().parse_args(shlex.split("run double_buffer --sett blocks=2"))


def _keys(section: str) -> set[str]:
    text = (DOCS / "reference" / "json_keys.md").read_text()
    start = text.index(section)
    end = text.find("\n## ", start + 1)
    return set(re.findall(r"^\| `(\w+)` \|", text[start:end if end > 0 else None], flags=re.M))


def _json(capsys, *argv: str) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_json_keys_named_are_the_keys_printed(capsys):
    run = _keys("## Every result")
    collective = _keys("## Collectives")
    assert len(run) >= 10 and len(collective) >= 15
    printed = set(_json(capsys, "run", "double_buffer"))
    assert run <= printed, run - printed
    printed = set(_json(capsys, "collective", "all_reduce", "--chip", "tpu-v5e", "--topology", "torus:8",
                        "--bytes", "64MB"))
    assert collective <= printed, collective - printed


# --- the plug-in of docs/guide/add_a_collective_algorithm.md -------------------------------------------------

EXAMPLES = DOCS / "examples"
NV_B, NV_A = 4.5e11, 1e-6  # h100 preset: NVLink egress per GPU each way (18 x 25 GB/s), chip-to-switch latency


@pytest.fixture
def switch_gather():
    from simulator.collectives import unregister

    unregister("switch_gather")
    module = load_script(EXAMPLES / "switch_gather.py")
    yield module
    unregister("switch_gather")


def test_the_plug_in_runs_at_its_hand_closed_form(switch_gather, capsys):
    data = _json(capsys, "collective", "all_gather", "--chip", "h100", "--topology", "switch:8", "--bytes", "64MB",
                 "--algorithm", "switch_gather")
    expected = 2 * NV_A + 7 * 8e6 / NV_B  # 7 shards of 8 MB out of every port at once, chip -> switch -> chip
    assert data["algorithm"] == "switch_gather"
    assert data["time_s"] == pytest.approx(expected, rel=1e-9)
    assert data["analytic_s"] == pytest.approx(expected, rel=1e-9)
    assert data["time_s"] >= data["topology_bound_s"] * (1 - 1e-12)
    listed = {row["name"] for row in _json(capsys, "algorithms")["algorithms"]}
    assert "switch_gather" in listed


def test_the_plug_in_moves_real_data(switch_gather):
    from simulator import System, run_collective

    data = np.random.default_rng(7).standard_normal((4, 5))
    result = run_collective("all_gather", System("h100", topology="switch:4"), data=data, algorithm="switch_gather")
    for device in range(4):
        np.testing.assert_array_equal(result.outputs[device], data.reshape(-1))


def test_auto_prices_the_plug_in_beside_the_others(switch_gather):
    from simulator import System, run_collective

    result = run_collective("all_gather", System("h100", topology="switch:8"), 64e6)
    assert "switch_gather" in json.dumps(result.alternatives)


def test_the_how_to_example_prints_what_its_comment_says(switch_gather, monkeypatch, capsys):
    page = (DOCS / "guide" / "add_a_collective_algorithm.md").read_text()
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", page, flags=re.S) if "import switch_gather" in b]
    monkeypatch.setitem(sys.modules, "switch_gather", switch_gather)  # the registered module, not a second copy
    exec(compile(block, "add_a_collective_algorithm.md", "exec"), {})
    printed = float(capsys.readouterr().out)
    assert printed == pytest.approx(2 * NV_A + 7 * 8e6 / NV_B, rel=1e-9)
    assert f"{printed * 1e6:.1f} us" in block
