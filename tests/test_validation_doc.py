"""docs/validation.md is what scripts/make_validation_doc.py makes of `podsim validate` now: the page cannot drift
from the code, and its summary rows are the errors recomputed here from the page's own rows."""
from __future__ import annotations

import math
import re
from pathlib import Path

from conftest import load_script

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "validation.md"


def _script():
    return load_script("make_validation_doc")


def test_page_is_current():
    assert _script().main(["--check"]) == 0, "run python scripts/make_validation_doc.py"


def test_gpu_training_summary_recomputed_from_the_rows():
    """The GPU training family's summary (fit and held out) from its rows' measured and forecast columns,
    recomputed with math (the page rounds to 4 significant digits, so within 0.2 points)."""
    text = PAGE.read_text()
    family = "Training step, GPU (published runs)"
    section = text.split(f"## {family}\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (.+?) \| ([\d.,e+-]+) \| ([\d.,e+-]+) \| .+? \| [+-][\d.]+% \| (fit|held out) \|$",
                      section, re.M)
    assert len(rows) > 50
    for which in ("fit", "held out"):
        logs = [abs(math.log(float(p.replace(",", "")) / float(m.replace(",", "")))) for _, m, p, s in rows
                if s == which]
        summary = re.search(rf"^\| {re.escape(family)} \| {which} \| (\d+) \| ([\d.]+)% \| ([\d.]+)% \|", text, re.M)
        assert summary and int(summary.group(1)) == len(logs)
        assert abs(float(summary.group(2)) - (math.exp(sum(logs) / len(logs)) - 1) * 100) < 0.2
        assert abs(float(summary.group(3)) - (math.exp(max(logs)) - 1) * 100) < 0.2
