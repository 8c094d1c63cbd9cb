"""The package data README carries every preset's headline numbers, so the facts ship with their sources."""
from pathlib import Path

import pytest

from simulator.hardware.specs import PRESETS, GiB

README = Path(__file__).resolve().parents[1] / "simulator" / "hardware" / "data" / "README.md"


def _table() -> dict[str, list[str]]:
    """Rows of the README's preset table: preset name -> its cells."""
    text = README.read_text()
    section = text[text.index("## Chip presets"):text.index("TPU on-chip")]
    rows = [line.strip("|").split("|") for line in section.splitlines() if line.startswith("| ")]
    return {cells[0].split()[0].strip(): [c.strip() for c in cells] for cells in rows[1:]}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_readme_lists_each_preset_with_its_numbers_and_source(name):
    cells = _table()[name]
    spec = PRESETS[name]
    assert float(cells[1]) == spec.peak_bf16_flops_per_s
    assert float(cells[2].split()[0]) == spec.peak_int8_flops_per_s
    assert float(cells[3].split()[0]) == pytest.approx(spec.hbm_capacity_bytes / GiB)
    assert float(cells[4].split()[0]) == spec.hbm_bandwidth_bytes_per_s
    assert cells[-1]  # a source

