"""scripts/gpu_step_breakdown.py: a published GPU row's step, factor by factor; a bad row name is one clear error."""
from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("gpu_step_breakdown", ROOT / "scripts" / "gpu_step_breakdown.py")
assert SPEC is not None and SPEC.loader is not None
breakdown = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(breakdown)


def test_a_row_prints_its_published_value_and_every_factor(capsys):
    name = "mcore2024 gpt-177b 2304xh100"
    row = next(r for r in csv.DictReader((ROOT / "simulator/hardware/data/calibration/gpu_training.csv").open())
               if r["run"] == name)
    assert breakdown.main([name]) == 0
    out = capsys.readouterr().out
    assert out.startswith(name) and f"published {float(row['measured']):g}" in out
    shares = [float(line.split()[3].rstrip("%")) for line in out.splitlines() if line.strip().endswith(" s")
              and "bound" in line]
    assert {"matmul_s", "bubble_s", "p2p_s", "exposed_tp_s"} <= {line.split()[0] for line in out.splitlines()[2:]}
    assert 95 < sum(shares) < 115  # the factors, each a share of the step, cover it (bubble and stalls overlap)


def test_an_unknown_row_is_named(capsys):
    assert breakdown.main(["no such run"]) == 2
    err = capsys.readouterr().err
    assert "no published GPU row 'no such run'" in err and "mcore2024 gpt-1.7b 48xh100" in err
