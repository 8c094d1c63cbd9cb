"""The wheel a non-editable `pip install .` builds ships every subpackage and its data files."""
from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def source_tree(dest: Path) -> Path:
    """Copy the files git would ship (tracked, plus untracked ones it does not ignore) to ``dest``."""
    names = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.split("\n")
    for name in filter(None, names):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


def test_wheel_ships_every_subpackage_and_the_calibration_data(tmp_path: Path):
    src = source_tree(tmp_path / "src")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path / "dist"), str(src)], check=True, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("podsim-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    packages = sorted(str(p.parent.relative_to(src)) for top in ("simulator", "topologies", "scenarios")
                      for p in (src / top).rglob("__init__.py"))
    assert len(packages) >= 9
    assert [p for p in packages if f"{p}/__init__.py" not in shipped] == []
    data = [p.relative_to(src).as_posix() for p in (src / "simulator/hardware/data").rglob("*") if p.is_file()]
    assert data and [d for d in data if d not in shipped] == []
