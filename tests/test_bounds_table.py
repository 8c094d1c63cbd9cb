"""scripts/collective_bounds_table.py (issue 31, item 3): every row over 1.3x the bound carries a reason."""
from __future__ import annotations

from pathlib import Path

from conftest import load_script


def test_the_table_explains_every_gap_on_the_quick_shapes(tmp_path: Path) -> None:
    module = load_script("collective_bounds_table")
    out = tmp_path / "table.md"
    assert module.main(["--quick", "--out", str(out)]) == 0
    text = out.read_text()
    rows = [line for line in text.splitlines() if line.startswith("| tpu")]
    assert rows and all(float(r.split("|")[7]) >= 1.0 - 1e-6 for r in rows if "refused" not in r)  # none beats it
