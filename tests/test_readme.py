"""The README's and the docs' examples run: the scenario-of-your-own and scripting blocks, every `$ podsim`
command of the README's tour and of the guide and explanation pages, and the output they show."""
import json
import re
import shlex
from pathlib import Path

import pytest

from simulator.frontend.cli import main

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"
#: the pages whose console examples are run (README first); generated pages are checked by their own tests
PAGES = [ROOT / "README.md", *sorted((DOCS / "guide").glob("*.md")), *sorted((DOCS / "explanation").glob("*.md"))]
TEXTS = {page: page.read_text() for page in PAGES}
WRITE = (DOCS / "guide" / "write_a_scenario.md").read_text()
CHIP = (DOCS / "guide" / "add_a_chip.md").read_text()

PYTHON = re.findall(r"```python\n(.*?)```", WRITE, flags=re.S)


def test_python_example_runs_as_a_scenario_file(tmp_path, capsys):
    (block,) = [b for b in PYTHON if "def run(" in b]
    path = tmp_path / "third_buffer.py"
    path.write_text(block)
    results = {}
    for buffers in (2, 3):
        assert main(["run", str(path), "--set", f"buffers={buffers}", "--json"]) == 0
        results[buffers] = json.loads(capsys.readouterr().out)["end_to_end_s"]
    assert results[3] < results[2]  # the question the example asks: yes, a third buffer helps


def test_scripting_example_prints_matmul_then_allreduce(capsys):
    """The spmd / start_collective example: every chip's K/16 matmul (2 M K/16 N FLOPs at the v5e peak),
    then an AllReduce of the bf16 partial products, as long as the same AllReduce run on its own."""
    from simulator import System, run_collective

    (block,) = [b for b in PYTHON if "spmd(" in b]
    exec(compile(block, "write_a_scenario.md", "exec"), {"__name__": "docs"})
    printed = capsys.readouterr().out
    m, k, n = 2048, 8192, 8192
    matmul_s = 2 * m * (k // 16) * n / 197e12
    allreduce_s = run_collective("all_reduce", System("tpu-v5e", topology="torus:4x4"), 2 * m * n).time_s
    assert printed == f"step {(matmul_s + allreduce_s) * 1e3:.3f} ms\n"
    assert f"{matmul_s * 1e6:.1f} us of matmul, then a {allreduce_s * 1e6:.1f} us AllReduce" in block


def _commands(text: str) -> list[str]:
    return [line.split("#")[0].strip()[2:] for line in text.splitlines() if line.startswith("$ podsim")]


#: every tour command once (the README's tour repeats some of the tutorial's)
TOUR = list(dict.fromkeys(c for text in TEXTS.values() for c in _commands(text)))


def test_the_readme_tour_is_short_and_every_command_is_run():
    readme = _commands(README)
    assert 8 <= len(readme) <= 15 and set(readme) <= set(TOUR)
    assert len(README.splitlines()) <= 200


@pytest.mark.parametrize("command", TOUR)
def test_tour_commands_run(command, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (toml,) = re.findall(r"```toml\n(.*?)```", CHIP, flags=re.S)  # the add-a-chip page's own chip file
    (tmp_path / "my_chip.toml").write_text(toml)
    (tmp_path / "config.json").write_text(json.dumps({  # a small Hugging Face llama config
        "model_type": "llama", "hidden_size": 512, "intermediate_size": 1536, "num_hidden_layers": 4,
        "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 1000}))
    assert main(shlex.split(command)[1:]) == 0
    assert capsys.readouterr().out.strip()


def test_scenario_table_lists_every_scenario_with_its_question():
    from simulator.frontend.scenario import list_scenarios

    table = (DOCS / "reference" / "scenarios.md").read_text()
    rows = dict(re.findall(r"^\| `(\w+)` \| (.+?) \|$", table, flags=re.M))
    assert rows == list_scenarios()


def _shown_outputs() -> list[tuple[str, list[str]]]:
    """(command, the output lines a page shows under it) for every console example with output."""
    examples = []
    for text in TEXTS.values():
        for block in re.findall(r"```console\n(.*?)```", text, flags=re.S):
            lines = block.splitlines()
            for i, line in enumerate(lines):
                if line.startswith("$ podsim"):
                    shown = []
                    for after in lines[i + 1:]:
                        if after.startswith("$ "):
                            break
                        shown.append(after)
                    if shown:
                        examples.append((line.split("#")[0].strip()[2:], shown))
    return list({(c, tuple(s)): (c, s) for c, s in examples}.values())


@pytest.mark.parametrize("command,shown", _shown_outputs(), ids=lambda v: v if isinstance(v, str) else "")
def test_shown_output_is_what_the_command_prints(command, shown, capsys):
    assert main(shlex.split(command)[1:]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[:len(shown)] == shown  # the page shows the first lines, word for word


def test_readme_shows_a_run_and_the_tutorial_a_grouped_link_summary():
    shown = _shown_outputs()
    assert any(c in _commands(README) for c, _ in shown)
    tutorial = TEXTS[DOCS / "guide" / "tutorial.md"]
    assert any(len(lines) > 10 and any("ICI axis" in line for line in lines) and c in _commands(tutorial)
               for c, lines in shown)
