"""podsim: a discrete-event simulator of ML accelerator chips and their interconnects.

The package is layered; each layer imports only from the layers below it (a test reads the imports):

=============  ==========================================================================
ground floor   `units`, `errors`, `analytic` (closed forms every result is checked against)
hardware       chip specifications, presets, calibration data
engine         channels, memory pools, chips, network, `System`, trace
collectives    schedules, groups, algorithms behind a registry, plan / run / start API
acceleration   fast runs with the exact figures (quotients, replay, reruns), one `executor`
workloads      pipelines, meshes, sharding, attention, Transformer configs, budgets, steps
report         `Result`, plots, exports
frontend       the `podsim` CLI, sweeps, scenario loading, validation
=============  ==========================================================================

The names below are the public API a user script needs; import them from here::

    from simulator import System, run_collective, Result
"""
import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

#: The public API by name: the module each name lives in. They load on first use (PEP 562), so that
#: ``import simulator`` -- and with it ``podsim --help`` -- does not import every layer, NetworkX and SciPy.
PUBLIC = {name: module for module, names in (
    ("simulator.collectives", ("run_collective", "start_collective")),
    ("simulator.engine.faults", ("ChipFail", "ChipPause", "ChipSlow", "FaultPlan", "Jitter", "LinkDegraded",
                                 "LinkDown", "LinkLatency", "applying")),
    ("simulator.engine.spmd", ("spmd",)),
    ("simulator.engine.system", ("System",)),
    ("simulator.errors", ("PodsimError",)),
    ("simulator.hardware.specs", ("ChipSpec", "get_chip")),
    ("simulator.report.result", ("Result",)),
    ("simulator.workloads.budget", ("Parallelism", "decode_budget", "train_budget")),
    ("simulator.workloads.mesh", ("Mesh",)),
    ("simulator.workloads.pipeline", ("Operand", "Step", "run_steps")),
    ("simulator.workloads.served", ("served_concurrent", "served_request")),
    ("simulator.workloads.sharding", ("sharded_matmul",)),
    ("simulator.workloads.simulate", ("simulate_decode", "simulate_train")),
    ("simulator.workloads.transformer", ("TransformerConfig", "get_model", "load_config_file")),
) for name in names}
SUBMODULES = ("analytic", "plots")  #: public names that are modules: simulator.analytic, simulator.report.plots
_SUBMODULE_PATHS = {"analytic": "simulator.analytic", "plots": "simulator.report.plots"}


def __getattr__(name: str) -> Any:
    """Load a public name on first use (and keep it, so the next use is a plain attribute)."""
    if name in PUBLIC:
        value = getattr(importlib.import_module(PUBLIC[name]), name)
    elif name in _SUBMODULE_PATHS:
        value = importlib.import_module(_SUBMODULE_PATHS[name])
    else:
        raise AttributeError(f"module 'simulator' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(PUBLIC) | set(SUBMODULES))


__version__ = "0.1.0"

#: Modules that moved when the package was layered (2026-11-30), by old name: importing the old name still works
#: (the same module, with a DeprecationWarning) until `MOVED_REMOVAL`; the README says so too.
MOVED = {f"simulator.{old}": f"simulator.{new}" for old, new in (
    ("attention", "workloads.attention"), ("budget", "workloads.budget"), ("calibration", "hardware.calibration"),
    ("channel", "engine.channel"), ("chip", "engine.chip"), ("cli", "frontend.cli"), ("export", "report.export"),
    ("memory", "engine.memory"), ("mesh", "workloads.mesh"), ("network", "engine.network"),
    ("pipeline", "workloads.pipeline"), ("plots", "report.plots"), ("result", "report.result"),
    ("scenario", "frontend.scenario"), ("sharding", "workloads.sharding"), ("specs", "hardware.specs"),
    ("sweep", "frontend.sweep"), ("system", "engine.system"), ("trace", "engine.trace"),
    ("transformer", "workloads.transformer"), ("validate", "frontend.validate"), ("workload", "workloads.simulate"),
    ("collectives.symmetry", "acceleration.automorphisms"),  # one symmetry module (issue 28)
    # the acceleration layer gathered into one subpackage (issue 28, 2026-12-02)
    ("collectives.quotient", "acceleration.quotient"), ("collectives.automorphisms", "acceleration.automorphisms"),
    ("collectives.slice_symmetry", "acceleration.slice_symmetry"),
    ("collectives.ring_quotient", "acceleration.ring_quotient"),
    ("workloads.plans.symmetry", "acceleration.step_symmetry"),
    ("workloads.plans.node_quotients", "acceleration.node_quotients"),
    ("workloads.plans.replay", "acceleration.replay"), ("workloads.plans.templates", "acceleration.templates"),
    ("workloads.plans.reruns", "acceleration.reruns"),
    # the rest of the layer (issue 28, 2026-12-03): flow aggregation (with the engine's delivery it runs on), route
    # search by rotation; the engine and collectives reach them through `engine.speedups`, `collectives.fast_path`
    ("engine.delivery", "acceleration.aggregate"), ("engine.route_symmetry", "acceleration.route_symmetry"))}
MOVED_REMOVAL = "2027-06-01"  #: the first release without the old import paths


class _Moved(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old module name of `MOVED` and loads it as the module it became, warning where it was imported."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> ModuleSpec | None:
        return importlib.util.spec_from_loader(fullname, self) if fullname in MOVED else None

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        warnings.warn(f"{spec.name} moved to {MOVED[spec.name]}: import that; the old path goes on {MOVED_REMOVAL}",
                      DeprecationWarning, stacklevel=2)  # (the import machinery's own frames are skipped)
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module it became is already loaded."""


if not any(isinstance(f, _Moved) for f in sys.meta_path):
    sys.meta_path.append(_Moved())

__all__ = [
    "ChipFail", "ChipPause", "ChipSlow", "ChipSpec", "FaultPlan", "Jitter", "LinkDegraded", "LinkDown", "LinkLatency",
    "Mesh", "Operand", "Parallelism", "PodsimError", "Result", "Step", "System", "TransformerConfig", "analytic",
    "applying", "decode_budget", "get_chip", "get_model", "load_config_file", "plots", "run_collective", "run_steps",
    "served_concurrent", "served_request", "sharded_matmul", "simulate_decode", "simulate_train", "spmd",
    "start_collective", "train_budget",
]
