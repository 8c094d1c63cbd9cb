"""The program model of an HLO module: computations of instructions, with what each instruction means.

An `Instruction` keeps what the text says (name, opcode, result shape, operand names, attributes,
its line) and answers questions about it: the computations it calls, its replica groups, a
``while`` loop's trip count, a dot's contracting dimensions, its source line. A `Computation` is a
list of instructions in program order (the schedule when the module ``is_scheduled``); a `Module`
holds the computations, the entry, the device count and the source-location tables.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from simulator.errors import PodsimError
from simulator.workloads.hlo.syntax import Shape

#: Attributes that name a called computation (``branch_computations`` holds a list).
CALL_ATTRS = ("calls", "to_apply", "body", "condition", "true_computation", "false_computation",
              "branch_computations")
COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute",
               "collective-broadcast", "ragged-all-to-all")


@dataclass
class Instruction:
    """One HLO instruction as written: ``name = shape opcode(operands), attributes``."""

    name: str
    opcode: str
    shape: Shape
    operands: tuple[str, ...]
    attrs: dict[str, str]
    line: int
    computation: str = ""
    is_root: bool = False
    literal: str = ""  #: the text in parentheses of ``constant`` and ``parameter`` (not operand names)
    groups: list[list[int]] | None = None  #: replica groups as device ids (collectives)
    pairs: list[tuple[int, int]] | None = None  #: source -> target device ids (collective-permute)
    metadata: dict[str, str] = field(default_factory=dict)

    def called(self) -> list[str]:
        """Names of the computations this instruction calls, in attribute order."""
        out = []
        for key in CALL_ATTRS:
            value = self.attrs.get(key)
            if value:
                out += [v.strip().lstrip("%") for v in value.strip("{}").split(",") if v.strip()]
        return out

    @property
    def channel_id(self) -> int | None:
        value = self.attrs.get("channel_id")
        return int(value) if value and value.isdigit() else None

    @property
    def base_opcode(self) -> str:
        """The collective an async ``-start`` / ``-done`` belongs to (``all-gather-start`` -> ``all-gather``)."""
        for suffix in ("-start", "-done", "-update"):
            if self.opcode.endswith(suffix):
                return self.opcode[: -len(suffix)]
        return self.opcode

    def trip_count(self) -> int | None:
        """A ``while`` loop's trip count from ``backend_config`` (``known_trip_count.n``), or None."""
        config = self.backend_config()
        n = config.get("known_trip_count", {}).get("n") if isinstance(config, dict) else None
        return int(n) if n is not None and str(n).isdigit() else None

    def backend_config(self) -> Any:
        """``backend_config`` parsed as JSON (a quoted string is unquoted first); {} when absent or not JSON."""
        raw = self.attrs.get("backend_config", "")
        if raw.startswith('"'):
            raw = raw[1:-1].replace('\\"', '"').replace("\\\\", "\\")
        try:
            return json.loads(raw) if raw else {}
        except ValueError:
            return {}

    def int_list(self, key: str) -> list[int]:
        """An attribute such as ``lhs_contracting_dims={1}`` or ``dimensions={0}`` as ints ([] if absent)."""
        return [int(v) for v in re.findall(r"\d+", self.attrs.get(key, ""))]

    @property
    def op_name(self) -> str:
        return self.metadata.get("op_name", "")


@dataclass
class Computation:
    """Instructions in program order; ``root`` is the one marked ROOT (else the last)."""

    name: str
    instructions: list[Instruction]
    line: int
    is_entry: bool = False
    by_name: dict[str, Instruction] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.by_name = {i.name: i for i in self.instructions}

    @property
    def root(self) -> Instruction:
        return next((i for i in self.instructions if i.is_root), self.instructions[-1])

    def parameters(self) -> list[Instruction]:
        """Parameter instructions ordered by their number."""
        params = [i for i in self.instructions if i.opcode == "parameter"]
        return sorted(params, key=lambda i: int(i.literal) if i.literal.isdigit() else 0)


@dataclass
class Module:
    """An HLO module: computations by name, the entry, devices, and source-location tables."""

    name: str
    computations: dict[str, Computation]
    entry: str
    num_partitions: int = 1
    replica_count: int = 1
    source: str = "<text>"
    files: dict[int, str] = field(default_factory=dict)
    locations: dict[int, dict[str, int]] = field(default_factory=dict)
    frames: dict[int, dict[str, int]] = field(default_factory=dict)

    @property
    def n_devices(self) -> int:
        """Devices the SPMD program runs on: partitions x replicas (device ids 0 .. n-1)."""
        return self.num_partitions * self.replica_count

    @property
    def entry_computation(self) -> Computation:
        return self.computations[self.entry]

    def computation(self, name: str) -> Computation:
        if name not in self.computations:
            raise PodsimError(f"{self.source}: computation {name!r} is called but not defined")
        return self.computations[name]

    def operand_shapes(self, instr: Instruction) -> list[Shape]:
        """Result shapes of ``instr``'s operands (looked up in its computation)."""
        comp = self.computations[instr.computation]
        return [comp.by_name[o].shape for o in instr.operands]

    def source_line(self, instr: Instruction) -> str:
        """``file:line`` where the instruction came from (metadata, or its stack frame), or ''."""
        meta = instr.metadata
        if meta.get("source_file"):
            return f"{meta['source_file']}:{meta.get('source_line', '?')}"
        frame = meta.get("stack_frame_id")
        if frame and frame.isdigit() and int(frame) in self.frames:
            location = self.locations.get(self.frames[int(frame)].get("file_location_id", -1), {})
            name = self.files.get(location.get("file_name_id", -1))
            if name:
                return f"{name}:{location.get('line', '?')}"
        return ""

    def instructions(self) -> list[Instruction]:
        """Every instruction of every computation."""
        return [i for c in self.computations.values() for i in c.instructions]
