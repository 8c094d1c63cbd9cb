"""Issue 30 (Done when): the docs define bound, forecast, exposed and each memory figure once, the README links
the page, and the keys it names are the keys `podsim model --mode train --json` prints."""
import json
import re
from pathlib import Path

from simulator.frontend.cli import main

ROOT = Path(__file__).resolve().parents[1]
CONCEPTS = (ROOT / "docs" / "concepts.md").read_text()
TERMS = ["Bound", "Forecast", "Closed form", "Exposed", "Busy", "State", "Transient peak", "Peak",
         "Closed-form estimate", "Train state", "buffers_effective"]


def test_each_term_is_defined_once():
    defined = [t.rstrip(".") for t in re.findall(r"^\*\*(.+?)\*\*", CONCEPTS, flags=re.M)]
    assert sorted(defined) == sorted(TERMS)  # every term, each once


def test_the_readme_links_the_page():
    assert "(docs/concepts.md)" in (ROOT / "README.md").read_text()


def test_the_memory_keys_it_names_are_the_ones_printed(capsys):
    named = set(re.findall(r"`((?:memory|hbm|simulated_memory|train_state|min)_\w+)`", CONCEPTS))
    assert main(["model", "gpt2", "--mode", "train", "--batch", "8", "--seq", "1024", "--mesh", "fsdp=4",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert named and named <= set(out), named - set(out)
    assert out["memory_peak_bytes"] == out["memory_state_bytes"] + out["memory_transient_peak_bytes"]
