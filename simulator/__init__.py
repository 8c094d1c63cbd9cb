"""podsim: a discrete-event simulator of ML accelerator chips and their interconnects.

The package is layered; each layer imports only from the layers below it (a test reads the imports):

=============  ==========================================================================
ground floor   `units`, `errors`, `analytic` (closed forms every result is checked against)
hardware       chip specifications, presets, calibration data
engine         channels, memory pools, chips, network, `System`, trace
collectives    schedules, groups, algorithms behind a registry, plan / run / start API
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

from simulator import analytic
from simulator.collectives import run_collective, start_collective
from simulator.engine.faults import (
    ChipFail,
    ChipPause,
    ChipSlow,
    FaultPlan,
    Jitter,
    LinkDegraded,
    LinkDown,
    LinkLatency,
    applying,
)
from simulator.engine.spmd import spmd
from simulator.engine.system import System
from simulator.errors import PodsimError
from simulator.hardware.specs import ChipSpec, get_chip
from simulator.report import plots
from simulator.report.result import Result
from simulator.workloads.budget import Parallelism, decode_budget, train_budget
from simulator.workloads.mesh import Mesh
from simulator.workloads.pipeline import Operand, Step, run_steps
from simulator.workloads.served import served_concurrent, served_request
from simulator.workloads.sharding import sharded_matmul
from simulator.workloads.simulate import simulate_decode, simulate_train
from simulator.workloads.transformer import TransformerConfig, get_model, load_config_file

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
    ("transformer", "workloads.transformer"), ("validate", "frontend.validate"), ("workload", "workloads.simulate"))}
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
