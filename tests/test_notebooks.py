"""The notebooks run top to bottom, draw at least one figure each, and are committed without outputs."""
from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")  # provides the "python3" kernel the notebooks name

NOTEBOOKS_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = ("01_roofline.ipynb", "02_memory_hierarchy.ipynb", "03_collectives.ipynb", "04_sharding.ipynb",
             "05_transformer_decode.ipynb", "06_training_plans.ipynb", "07_calibrated_steps.ipynb", "08_serving.ipynb")


def _read(name: str) -> nbformat.NotebookNode:
    return nbformat.read(NOTEBOOKS_DIR / name, as_version=4)


def _code_cells(nb: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    return [c for c in nb.cells if c.cell_type == "code"]


def test_every_notebook_is_listed():
    assert sorted(p.name for p in NOTEBOOKS_DIR.glob("*.ipynb")) == sorted(NOTEBOOKS)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_is_stored_without_outputs(name):
    nb = _read(name)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    stale = [i for i, c in enumerate(_code_cells(nb)) if c.outputs or c.execution_count is not None]
    assert stale == [], f"{name}: code cells {stale} carry outputs or an execution count; clear them before committing"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_and_draws(name):
    nb = _read(name)
    client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOKS_DIR)}})
    client.execute()  # raises CellExecutionError, naming the cell, if any cell raises
    outputs = [o for c in _code_cells(nb) for o in c.outputs]
    errors = [o for o in outputs if o.output_type == "error"]
    assert errors == [], f"{name}: {[f'{e.ename}: {e.evalue}' for e in errors]}"
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert images, f"{name}: no cell displayed a figure (end a plotting cell with ax.figure)"
