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
from simulator.workloads.budget import Parallelism
from simulator.workloads.mesh import Mesh
from simulator.workloads.pipeline import Operand, Step, run_steps
from simulator.workloads.served import served_concurrent, served_request
from simulator.workloads.sharding import sharded_matmul
from simulator.workloads.simulate import simulate_decode, simulate_train
from simulator.workloads.transformer import TransformerConfig, get_model

__version__ = "0.1.0"

__all__ = [
    "ChipFail", "ChipPause", "ChipSlow", "ChipSpec", "FaultPlan", "Jitter", "LinkDegraded", "LinkDown", "LinkLatency",
    "Mesh", "Operand", "Parallelism", "PodsimError", "Result", "Step", "System", "TransformerConfig", "analytic",
    "applying", "get_chip", "get_model", "plots", "run_collective", "run_steps", "served_concurrent", "served_request",
    "sharded_matmul", "simulate_decode", "simulate_train", "spmd", "start_collective",
]
