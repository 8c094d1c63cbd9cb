"""Read HLO text (``compiled.as_text()``, an XLA dump) into a `Module` -- pure parsing, no JAX.

Reads the ``HloModule`` header (``num_partitions``, ``replica_count``), the source tables that newer
XLA prints (``FileNames``, ``FileLocations``, ``StackFrames``), and every computation: one instruction
per line, ``[ROOT] %name = SHAPE opcode(OPERANDS), key=value, ...``. Operands may carry their shapes
(``f32[8]{0} %x``, as TPU dumps print them) or not. Whatever does not read raises `HloParseError`
naming the file, line and column and what was expected.
"""
from __future__ import annotations

import re
from pathlib import Path

from simulator.errors import PodsimError
from simulator.workloads.hlo.model import COLLECTIVES, Computation, Instruction, Module
from simulator.workloads.hlo.replica_groups import parse_groups, parse_pairs
from simulator.workloads.hlo.syntax import (
    SyntaxFault,
    blank_comments,
    closing,
    parse_attributes,
    parse_metadata,
    parse_shape,
    skip_space,
    split_top,
)

MAX_FILE_BYTES = 512 * 2**20  #: an HLO text larger than this is refused (a big model's dump is tens of MB)
_INSTR = re.compile(r"\s*(ROOT\s+)?%?([A-Za-z0-9_.\-]+)\s*=\s*")
_HEADER = re.compile(r"\s*(ENTRY\s+)?%?([A-Za-z0-9_.\-]+)\s*(\(|\{)")
_OPCODE = re.compile(r"[a-z][a-z0-9\-_]*")
_SECTIONS = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")


class HloParseError(PodsimError):
    """HLO text that does not read: the message names ``file:line:column`` and what was expected."""


def read_hlo(path: str | Path) -> Module:
    """Parse the HLO text file at ``path``."""
    path = Path(path)
    if not path.is_file():
        raise HloParseError(f"HLO file {str(path)!r} does not exist or is not a file")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise HloParseError(f"HLO file {str(path)!r} is {path.stat().st_size:,} bytes; at most {MAX_FILE_BYTES:,}")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise HloParseError(f"HLO file {str(path)!r} is not UTF-8 text (byte {err.start}); give the text of "
                            "compiled.as_text() or an XLA dump (*.txt)") from None
    return parse_hlo(text, str(path))


def parse_hlo(text: str, source: str = "<text>") -> Module:
    """Parse HLO module text; ``source`` names it in error messages."""
    return _Parser(text, source).module()


class _Parser:
    def __init__(self, text: str, source: str) -> None:
        self.lines = text.splitlines()
        self.source = source
        self.header: dict[str, str] = {}
        self.tables: dict[str, dict[int, str]] = {s: {} for s in _SECTIONS}
        self.computations: dict[str, Computation] = {}
        self.entry = ""

    def fail(self, line: int, col: int, message: str) -> HloParseError:
        return HloParseError(f"{self.source}:{line}:{col}: {message}")

    def module(self) -> Module:
        n, section = 0, None
        current: tuple[str, int, bool, list[Instruction]] | None = None
        while n < len(self.lines):
            raw, n = self.lines[n], n + 1
            try:
                line = blank_comments(raw)
            except SyntaxFault as fault:
                raise self.fail(n, fault.offset + 1, str(fault)) from None
            stripped = line.strip()
            if not stripped or stripped.startswith("//"):
                section = None if not stripped else section
                continue
            if current is not None:
                if stripped == "}":
                    self._close(current)
                    current = None
                else:
                    current[3].append(self._instruction(line, n, current[0]))
                continue
            if stripped.startswith("HloModule"):
                self._module_header(line, n)
            elif stripped in _SECTIONS:
                section = stripped
            elif section and re.match(r"\d+\s", stripped):
                number, _, value = stripped.partition(" ")
                self.tables[section][int(number)] = value.strip()
            elif stripped.endswith("{") and (m := _HEADER.match(line)) and not _INSTR.match(line):
                current = (m.group(2), n, bool(m.group(1)), [])
            else:
                raise self.fail(n, len(line) - len(line.lstrip()) + 1,
                                f"expected 'HloModule', a computation 'NAME (...) -> SHAPE {{' or '}}', "
                                f"found {stripped[:40]!r}")
        if current is not None:
            raise self.fail(current[1], 1, f"computation {current[0]!r} is never closed with '}}'")
        return self._finish()

    def _module_header(self, line: str, n: int) -> None:
        m = re.match(r"\s*HloModule\s+([^\s,]+)", line)
        if not m:
            raise self.fail(n, 1, "expected 'HloModule NAME, ...'")
        try:
            attrs = parse_attributes(line, m.end())
        except SyntaxFault as fault:
            raise self.fail(n, fault.offset + 1, str(fault)) from None
        self.header = {"name": m.group(1), **{k: v for k, (_, v) in attrs.items()}}

    def _close(self, current: tuple[str, int, bool, list[Instruction]]) -> None:
        name, line, is_entry, instructions = current
        if not instructions:
            raise self.fail(line, 1, f"computation {name!r} has no instructions")
        if name in self.computations:
            raise self.fail(line, 1, f"computation {name!r} is defined twice")
        self.computations[name] = Computation(name, instructions, line, is_entry)
        if is_entry:
            self.entry = name

    def _instruction(self, line: str, n: int, computation: str) -> Instruction:
        m = _INSTR.match(line)
        if not m:
            raise self.fail(n, skip_space(line, 0) + 1, "expected an instruction 'NAME = SHAPE opcode(operands)'")
        try:
            return self._read_instruction(line, n, m, computation)
        except SyntaxFault as fault:
            raise self.fail(n, fault.offset + 1, str(fault)) from None

    def _read_instruction(self, line: str, n: int, m: re.Match, computation: str) -> Instruction:
        shape, i = parse_shape(line, m.end())
        i = skip_space(line, i)
        op = _OPCODE.match(line, i)
        if not op:
            raise SyntaxFault("expected an opcode such as add, dot or all-gather", i)
        j = op.end()
        if j >= len(line) or line[j] != "(":
            raise SyntaxFault(f"expected '(' after opcode {op.group()!r}", j)
        end = closing(line, j)
        opcode = op.group()
        literal, operands = "", []
        if opcode in ("constant", "parameter", "iota"):
            literal = line[j + 1:end - 1].strip()
        else:
            operands = [self._operand(line, o, p) for o, p in split_top(line, j + 1, end - 1)]
        rest = skip_space(line, end)
        if rest < len(line) and line[rest] != ",":
            raise SyntaxFault("expected ',' before the attributes", rest)
        attrs = parse_attributes(line, rest + 1) if rest < len(line) else {}
        instr = Instruction(m.group(2), opcode, shape, tuple(operands), {k: v for k, (_, v) in attrs.items()}, n,
                            computation, bool(m.group(1)), literal)
        if "metadata" in attrs:
            instr.metadata = parse_metadata(attrs["metadata"][1])
        self._collective_fields(instr, attrs)
        return instr

    @staticmethod
    def _operand(line: str, offset: int, piece: str) -> str:
        """An operand's name: the last token of ``[SHAPE] %name``."""
        name = piece.split()[-1].lstrip("%")
        if not re.fullmatch(r"[A-Za-z0-9_.\-]+", name):
            raise SyntaxFault(f"operand {piece[:40]!r} is not an instruction name such as %add.1", offset)
        return name

    def _collective_fields(self, instr: Instruction, attrs: dict[str, tuple[int, str]]) -> None:
        devices = self._devices()
        if "replica_groups" in attrs and instr.base_opcode in COLLECTIVES:
            offset, value = attrs["replica_groups"]
            try:
                instr.groups = parse_groups(value, devices)
            except SyntaxFault as fault:
                raise SyntaxFault(f"replica_groups: {fault}", offset + fault.offset) from None
        if "source_target_pairs" in attrs:
            offset, value = attrs["source_target_pairs"]
            try:
                instr.pairs = parse_pairs(value, devices)
            except SyntaxFault as fault:
                raise SyntaxFault(f"source_target_pairs: {fault}", offset + fault.offset) from None

    def _devices(self) -> int:
        return _count(self.header.get("num_partitions")) * _count(self.header.get("replica_count"))

    def _finish(self) -> Module:
        if "name" not in self.header:
            raise self.fail(1, 1, "no 'HloModule NAME' line: is this HLO text (compiled.as_text())?")
        if not self.computations:
            raise self.fail(len(self.lines), 1, "no computations in the module")
        entry = self.entry or next(reversed(self.computations))
        for comp in self.computations.values():
            for instr in comp.instructions:
                self._check_references(comp, instr)
                self._check_dims(comp, instr)
        return Module(self.header["name"], self.computations, entry, _count(self.header.get("num_partitions")),
                      _count(self.header.get("replica_count")), self.source,
                      {k: v.strip('"') for k, v in self.tables["FileNames"].items()},
                      {k: _ints(v) for k, v in self.tables["FileLocations"].items()},
                      {k: _ints(v) for k, v in self.tables["StackFrames"].items()})

    def _check_references(self, comp: Computation, instr: Instruction) -> None:
        text = self.lines[instr.line - 1]
        for name in instr.operands:
            if name not in comp.by_name:
                raise self.fail(instr.line, _column(text, name, text.find("(")),
                                f"operand %{name} of %{instr.name} is not defined in computation {comp.name!r}")
        for name in instr.called():
            if name not in self.computations:
                raise self.fail(instr.line, _column(text, name, text.find("=")),
                                f"%{instr.name} calls computation {name!r}, which is not defined")


    def _check_dims(self, comp: Computation, instr: Instruction) -> None:
        """A dimension attribute names a dimension its array has: a collective's ``dimensions`` its operand's,
        a dot's ``lhs_*_dims`` / ``rhs_*_dims`` its left / right operand's."""
        for key, index in _DIM_ATTRS.get(instr.base_opcode, ()):
            if key not in instr.attrs or index >= len(instr.operands):
                continue
            shape = comp.by_name[instr.operands[index]].shape
            rank = len(shape.dims)
            bad = next((d for d in instr.int_list(key) if d >= rank), None)
            if shape.is_tuple or bad is None:
                continue
            valid = f"dimensions 0 to {rank - 1}" if rank else "no dimensions (a scalar)"
            raise self.fail(instr.line, max(self.lines[instr.line - 1].find(key), 0) + 1,
                            f"%{instr.name} ({instr.opcode}) has {key}={{{bad}}}, but its operand "
                            f"%{instr.operands[index]} is {shape.dtype}{list(shape.dims)}, an array of rank {rank} "
                            f"with {valid}")

#: The attributes that name dimensions of an operand, by opcode: (attribute, operand index).
_DIM_ATTRS = {**{op: (("dimensions", 0),) for op in ("all-gather", "reduce-scatter", "all-to-all")},
              "dot": (("lhs_batch_dims", 0), ("lhs_contracting_dims", 0), ("rhs_batch_dims", 1),
                      ("rhs_contracting_dims", 1))}


def _column(text: str, name: str, start: int) -> int:
    """1-based column of ``name`` (its ``%`` if it has one) in ``text`` at or after ``start``."""
    at = max(text.find(name, max(start, 0)), 0)
    return at if at > 0 and text[at - 1] == "%" else at + 1


def _count(value: str | None) -> int:
    return int(value) if value and value.isdigit() and int(value) > 0 else 1


def _ints(text: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"(\w+)=(-?\d+)", text)}
