"""Compiled XLA programs (HLO text) on podsim: read the text, map its devices onto a topology's chips,
and run it on a `System` (dots on the MXU, fusions through HBM and the VPU, collectives on the links).

The reader (`parse`, `model`, `replica_groups`, `syntax`) is pure text processing and needs no JAX.
"""
from simulator.workloads.hlo.model import Computation, Instruction, Module
from simulator.workloads.hlo.parse import HloParseError, parse_hlo, read_hlo
from simulator.workloads.hlo.syntax import Shape

__all__ = ["Computation", "HloParseError", "Instruction", "Module", "Shape", "parse_hlo", "read_hlo"]
