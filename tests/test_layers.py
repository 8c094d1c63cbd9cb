"""The package's layers import in one direction only.

There is no line cap: a concept lives in one module, even a long one, rather than split over two.

Every import in every module of `simulator/` (including those inside functions) is read with `ast` and
resolved to the layer it names; a module may import from its own layer or a lower one.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "simulator"
#: lowest first; a module's layer is its subpackage, or its own name on the ground floor
LAYERS = ["units", "errors", "analytic", "hardware", "engine", "collectives", "acceleration", "workloads", "report",
          "frontend"]
GROUND = {"units": 0, "errors": 0, "analytic": 0}


def rank(module: str) -> int | None:
    """Layer rank of a dotted module name inside `simulator` (None for the package itself)."""
    parts = module.split(".")
    if parts[0] != "simulator" or len(parts) == 1:
        return None
    return GROUND.get(parts[1], LAYERS.index(parts[1]) if parts[1] in LAYERS else None)


def modules() -> list[Path]:
    return sorted(p for p in ROOT.rglob("*.py") if p != ROOT / "__init__.py")


def dotted(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def imported(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, dotted name) for every import; `from simulator import x` names `simulator.x`."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "simulator":
                out += [(node.lineno, f"simulator.{a.name}") for a in node.names]
            else:
                out.append((node.lineno, node.module))
    return out


def test_every_module_has_a_layer():
    assert [p for p in modules() if rank(dotted(p)) is None] == []


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_down(path: Path):
    own = rank(dotted(path))
    bad = [f"line {line}: {name}" for line, name in imported(ast.parse(path.read_text()))
           if name.startswith("simulator") and (r := rank(name)) is not None and r > own]
    # the package root re-exports everything, so importing names from it is importing upward
    bad += [f"line {line}: {name}" for line, name in imported(ast.parse(path.read_text())) if name == "simulator"]
    assert bad == [], f"{dotted(path)} (layer {own}) imports from higher layers: {bad}"


def test_the_rule_catches_an_upward_import():
    tree = ast.parse("from simulator.frontend.cli import main\nfrom simulator import analytic")
    names = [name for _, name in imported(tree)]
    assert names == ["simulator.frontend.cli", "simulator.analytic"]
    assert rank("simulator.frontend.cli") > rank("simulator.engine.system") > rank("simulator.analytic")
