"""The README's examples run: its scenario-of-your-own block and its tour commands."""
import json
import re
import shlex
from pathlib import Path

import pytest

from simulator.frontend.cli import main

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


PYTHON = re.findall(r"```python\n(.*?)```", README, flags=re.S)


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
    exec(compile(block, "README.md", "exec"), {"__name__": "readme"})
    printed = capsys.readouterr().out
    m, k, n = 2048, 8192, 8192
    matmul_s = 2 * m * (k // 16) * n / 197e12
    allreduce_s = run_collective("all_reduce", System("tpu-v5e", topology="torus:4x4"), 2 * m * n).time_s
    assert printed == f"step {(matmul_s + allreduce_s) * 1e3:.3f} ms\n"
    assert f"{matmul_s * 1e6:.1f} us of matmul, then a {allreduce_s * 1e6:.1f} us AllReduce" in block


TOUR = [line.split("#")[0].strip()[2:] for line in README.splitlines() if line.startswith("$ podsim")]


@pytest.mark.parametrize("command", TOUR)
def test_tour_commands_run(command, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (toml,) = re.findall(r"```toml\n(.*?)```", README, flags=re.S)  # the README's own chip file
    (tmp_path / "my_chip.toml").write_text(toml)
    (tmp_path / "config.json").write_text(json.dumps({  # a small Hugging Face llama config
        "model_type": "llama", "hidden_size": 512, "intermediate_size": 1536, "num_hidden_layers": 4,
        "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 1000}))
    assert main(shlex.split(command)[1:]) == 0
    assert capsys.readouterr().out.strip()


def test_scenario_table_lists_every_scenario_with_its_question():
    from simulator.frontend.scenario import list_scenarios

    rows = dict(re.findall(r"^\| `(\w+)` \| (.+?) \|$", README, flags=re.M))
    assert rows == list_scenarios()


def _shown_outputs() -> list[tuple[str, list[str]]]:
    """(command, the output lines the README shows under it) for every console example with output."""
    examples = []
    for block in re.findall(r"```console\n(.*?)```", README, flags=re.S):
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
    return examples


@pytest.mark.parametrize("command,shown", _shown_outputs(), ids=lambda v: v if isinstance(v, str) else "")
def test_shown_output_is_what_the_command_prints(command, shown, capsys):
    assert main(shlex.split(command)[1:]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[:len(shown)] == shown  # the README shows the first lines, word for word


def test_readme_shows_a_grouped_link_summary():
    assert any(len(shown) > 10 and any("ICI axis" in line for line in shown) for _, shown in _shown_outputs())
