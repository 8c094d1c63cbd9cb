"""The package's layers import in one direction only.

There is no line cap: a concept lives in one module, even a long one, rather than split over two.

Every import in every module of `simulator/` (including those inside functions) is read with `ast` and
resolved to the layer it names; a module may import from its own layer or a lower one.

The acceleration layer (`simulator/acceleration/`, between collectives and workloads) has a door of its own
(issue 28, docs/acceleration.md): **only the executor imports acceleration internals; only the step drivers
(`EXECUTOR_USERS`) import the executor**, and the modules below it that reach it are its two doors (`DOORS`),
each by name at run time and only its own provider: `simulator.collectives.fast_path` (the `FastPath` protocol
the collectives API owns and the executor registers into: quotients, reduced mode, flow aggregation) and
`simulator.engine.speedups` (the `RouteFinder` the engine owns, which route search by rotation registers into;
its `StandIns`, which the acceleration layer sets on a trace, needs no loading).
"""
from __future__ import annotations

import ast
import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "simulator"
#: lowest first; a module's layer is its subpackage, or its own name on the ground floor
LAYERS = ["units", "errors", "analytic", "hardware", "engine", "collectives", "acceleration", "workloads", "report",
          "frontend"]
GROUND = {"units": 0, "errors": 0, "analytic": 0}
ACCEL = "simulator.acceleration"
EXECUTOR = f"{ACCEL}.executor"
#: the only modules outside the acceleration layer that import its executor
EXECUTOR_USERS = {"simulator.workloads.plans.step", "simulator.workloads.simulate"}
#: the only modules that name the layer otherwise, each its own provider: by a string, loaded at run time
#: (dependency inversion)
DOORS = {"simulator.collectives.fast_path": EXECUTOR,
         "simulator.engine.speedups": f"{ACCEL}.route_symmetry"}
DOOR = "simulator.collectives.fast_path"
#: every mechanism of the layer lives in it (issue 28): none of these is left below it
MECHANISMS = {"aggregate", "automorphisms", "chain_run", "executor", "node_quotients", "orbit_run", "quotient",
              "reduced", "replay", "reruns", "ring_quotient", "route_symmetry", "slice_symmetry", "step_symmetry",
              "templates", "unfolding"}


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
            if node.module in ("simulator", ACCEL):  # a package's modules may be imported as names of it
                out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
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


def door_violations(module: str, tree: ast.AST) -> list[str]:
    """What ``module`` (outside `simulator.acceleration`) does against the acceleration layer's door."""
    if module == ACCEL or module.startswith(ACCEL + "."):
        return []
    bad = []
    for line, name in imported(tree):
        if not (name == ACCEL or name.startswith(ACCEL + ".")):
            continue
        if name != EXECUTOR:
            bad.append(f"line {line}: imports the acceleration internal {name} (only {EXECUTOR} is public)")
        elif module not in EXECUTOR_USERS:
            bad.append(f"line {line}: imports {EXECUTOR} (only {sorted(EXECUTOR_USERS)} do)")
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
                  and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    named = [(n.lineno, n.value) for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
             and id(n) not in docstrings and n.value.startswith(ACCEL)]
    bad += [f"line {line}: names {value} in a string (only {sorted(DOORS)} load the layer by name, each its own "
            "provider)" for line, value in named if DOORS.get(module) != value]
    return bad


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_only_the_executor_imports_acceleration_internals(path: Path):
    bad = door_violations(dotted(path), ast.parse(path.read_text()))
    assert bad == [], f"{dotted(path)}: {bad}"


def test_the_door_rule_catches_a_reach_in():
    inside = "from simulator.acceleration.quotient import unfold\nfrom simulator.acceleration import replay\n"
    assert len(door_violations("simulator.workloads.budget", ast.parse(inside))) == 2
    assert door_violations("simulator.acceleration.executor", ast.parse(inside)) == []  # its own internals
    use = "from simulator.acceleration.executor import executor\n"
    assert door_violations("simulator.workloads.simulate", ast.parse(use)) == []
    assert len(door_violations("simulator.report.plots", ast.parse(use))) == 1  # not one of EXECUTOR_USERS
    by_name = 'import importlib\nimportlib.import_module("simulator.acceleration.replay")\n'
    assert len(door_violations("simulator.engine.trace", ast.parse(by_name))) == 1
    assert len(door_violations(DOOR, ast.parse(by_name))) == 1  # a door names its own provider only
    own = 'import importlib\nimportlib.import_module("simulator.acceleration.route_symmetry")\n'
    assert door_violations("simulator.engine.speedups", ast.parse(own)) == []
    assert len(door_violations("simulator.engine.network", ast.parse(own))) == 1
    assert len(door_violations("simulator.engine.network",
                               ast.parse("from simulator.acceleration.route_symmetry import UnitRotation"))) == 1


def test_every_mechanism_lives_in_the_layer():
    """The layer's modules are its mechanisms (no fewer: a mechanism moved back below would be missed), and no
    module below the layer still holds one: flow aggregation left `collectives.schedule` (its runner, the engine's
    `delivery`), route search by rotation and trace unfolding left the engine."""
    here = {p.stem for p in (ROOT / "acceleration").glob("*.py") if p.stem != "__init__"}
    assert here == MECHANISMS
    below = {dotted(p) for p in modules() if (r := rank(dotted(p))) is not None and r < LAYERS.index("acceleration")}
    assert {"simulator.engine.delivery", "simulator.engine.route_symmetry"}.isdisjoint(below)
    schedule = ast.parse((ROOT / "collectives" / "schedule.py").read_text())
    defined = {n.name for n in ast.walk(schedule) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    assert {"_execute_aggregated", "_Aggregated", "_single_link", "Aggregated"}.isdisjoint(defined)
    trace = ast.parse((ROOT / "engine" / "trace.py").read_text())
    fields = {n.target.id for n in ast.walk(trace) if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    assert "stood_for" in fields and {"images", "chip_images"}.isdisjoint(fields)


def _same_members(protocol: type, implementation: type, count: int) -> None:
    """Every public method of ``protocol`` (``count`` of them) on ``implementation``, with the same parameters."""
    wanted = [name for name, _ in inspect.getmembers(protocol, inspect.isfunction) if not name.startswith("_")]
    assert len(wanted) == count
    for name in wanted:
        assert list(inspect.signature(getattr(protocol, name)).parameters) == \
            list(inspect.signature(getattr(implementation, name)).parameters), name


def test_the_executor_implements_the_collectives_fast_path():
    """Every method of the protocol the collectives API owns, with the same parameters, on the `Executor`."""
    from simulator.acceleration.executor import FAST, Executor
    from simulator.collectives.fast_path import PROVIDER, FastPath, fast_path

    assert PROVIDER == EXECUTOR == DOORS["simulator.collectives.fast_path"]
    _same_members(FastPath, Executor, 9)
    assert fast_path() is FAST


def test_the_layer_implements_the_engine_s_protocols():
    """`RouteFinder` (registered by its provider) and `StandIns` (`Unfolding`), each member with its parameters."""
    from simulator.acceleration.route_symmetry import FINDER, UnitRotation
    from simulator.acceleration.unfolding import Unfolding
    from simulator.engine import speedups

    assert DOORS["simulator.engine.speedups"] == speedups.PROVIDER
    _same_members(speedups.RouteFinder, type(FINDER), 1)
    _same_members(speedups.RouteSymmetry, UnitRotation, 2)
    _same_members(speedups.StandIns, Unfolding, 4)
    assert speedups.route_finder() is FINDER


def test_the_engine_alone_loads_route_search_by_name_and_not_the_executor():
    """A fresh interpreter that builds a node system's routes (engine only) finds them by rotation, loading the
    light provider by name and not the executor (0.2 s of imports)."""
    probe = """
import json, sys
from simulator.engine.system import System
net = System("h100", topology="nodes:4:8", trace=False).network
before = "simulator.acceleration.route_symmetry" in sys.modules
net.routes(9, 30)
print(json.dumps([before, "simulator.acceleration.route_symmetry" in sys.modules,
                  "simulator.acceleration.executor" in sys.modules, type(net._symmetry).__name__]))
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.splitlines()[-1]) == [False, True, False, "UnitRotation"]


def test_a_collective_alone_loads_the_fast_path_by_name_and_runs_on_the_quotient():
    """A fresh interpreter that imports only the collectives API still runs fast (the executor registered itself
    on first need), with the exact run's time; the exact mode asks the executor for nothing."""
    probe = """
import json, sys
from simulator.collectives import run_collective
from simulator.engine.system import System
assert "simulator.acceleration.executor" not in sys.modules
fast = run_collective("all_reduce", System("h100", topology="nodes:4:8"), 64e6)
exact = run_collective("all_reduce", System("h100", topology="nodes:4:8"), 64e6, mode="full")
print(json.dumps([fast.mode, fast.quotient_order, fast.time_s, exact.mode, exact.time_s,
                  "simulator.acceleration.executor" in sys.modules]))
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    fast_mode, order, fast_s, exact_mode, exact_s, loaded = json.loads(out.stdout.splitlines()[-1])
    assert (fast_mode, exact_mode, loaded) == ("quotient", "full", True) and order > 1
    assert fast_s == pytest.approx(exact_s, rel=1e-9)


#: where an old path is a fallback for running against an older source tree (``--tree``), after the new one
OLD_TREES = {("benchmarks/thousand_gpus.py", "simulator.collectives.ring_quotient")}


def old_paths(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, old name) for every import of a module by a name it had before it moved (`simulator.MOVED`)."""
    import simulator

    out = []
    for node in ast.walk(tree):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        out += [(node.lineno, name) for name in names if name in simulator.MOVED]
    return out


def test_the_project_s_own_code_imports_no_old_path():
    """Old paths are for users' scripts (they warn); the repository's modules, tests, benchmarks, scripts and
    scenarios import each module by the name it has now (a merge that brings an old path back is caught here)."""
    top = ROOT.parent
    files = [p for d in ("simulator", "tests", "benchmarks", "scripts", "scenarios") for p in (top / d).rglob("*.py")]
    bad = [f"{p.relative_to(top)} line {line}: {name}" for p in files
           for line, name in old_paths(ast.parse(p.read_text(encoding="utf-8")))
           if (str(p.relative_to(top)), name) not in OLD_TREES]
    assert len(files) > 300
    assert bad == []
    assert old_paths(ast.parse("from simulator.workloads.plans import symmetry\nimport simulator.collectives.quotient"))


def test_the_rule_catches_an_upward_import():
    tree = ast.parse("from simulator.frontend.cli import main\nfrom simulator import analytic")
    names = [name for _, name in imported(tree)]
    assert names == ["simulator.frontend.cli", "simulator.analytic"]
    assert rank("simulator.frontend.cli") > rank("simulator.engine.system") > rank("simulator.analytic")
