"""Lexical pieces of HLO text: balanced brackets, top-level splits, shapes, ``key=value`` lists.

Everything here works on one line of text and reports positions as 0-based offsets into it, so the
parser can name the line and column of whatever does not read. No JAX is needed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from simulator.errors import PodsimError

#: Bytes per element of every HLO primitive type podsim knows (pred is stored as one byte; 4-bit types
#: take half a byte; ``token`` carries no data).
DTYPE_BYTES: dict[str, float] = {
    "pred": 1, "s2": 0.25, "u2": 0.25, "s4": 0.5, "u4": 0.5, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "s32": 4, "u32": 4,
    "s64": 8, "u64": 8, "f16": 2, "bf16": 2, "f32": 4, "f64": 8, "c64": 8, "c128": 16, "f8e5m2": 1, "f8e4m3": 1,
    "f8e4m3fn": 1, "f8e4m3b11fnuz": 1, "f8e5m2fnuz": 1, "f8e4m3fnuz": 1, "f8e3m4": 1, "f8e8m0fnu": 1,
    "f4e2m1fn": 0.5, "token": 0, "opaque": 0,
}
FLOAT_TYPES = frozenset(t for t in DTYPE_BYTES if t[0] in "fb" or t.startswith("c"))
_OPEN, _CLOSE = "([{", ")]}"


class SyntaxFault(PodsimError):
    """A piece of a line that does not read; ``offset`` is where (0-based), the parser adds line and column."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.offset = offset


@dataclass(frozen=True)
class Shape:
    """An array shape (``dtype`` and ``dims``) or a tuple of shapes (``dtype`` None, ``parts``)."""

    dtype: str | None
    dims: tuple[int, ...] = ()
    parts: tuple[Shape, ...] = ()

    @property
    def is_tuple(self) -> bool:
        return self.dtype is None

    @property
    def elements(self) -> int:
        """Elements of an array shape (1 for a scalar); the sum over a tuple's leaves."""
        if self.is_tuple:
            return sum(p.elements for p in self.parts)
        count = 1
        for d in self.dims:
            count *= d
        return count

    @property
    def nbytes(self) -> float:
        """Bytes of the array (or of all a tuple's leaves)."""
        if self.is_tuple:
            return sum(p.nbytes for p in self.parts)
        return self.elements * DTYPE_BYTES[self.dtype or "token"]

    def leaves(self) -> list[Shape]:
        """The array shapes inside, depth first."""
        return [leaf for p in self.parts for leaf in p.leaves()] if self.is_tuple else [self]

    def __str__(self) -> str:
        if self.is_tuple:
            return "(" + ", ".join(map(str, self.parts)) + ")"
        return f"{self.dtype}[{','.join(map(str, self.dims))}]"


def skip_space(text: str, i: int) -> int:
    while i < len(text) and text[i].isspace():
        i += 1
    return i


def closing(text: str, i: int) -> int:
    """Index just past the bracket that closes ``text[i]`` (one of ``([{``), skipping quoted strings."""
    stack = []
    j = i
    while j < len(text):
        c = text[j]
        if c == '"':
            j = _string_end(text, j)
            continue
        if c in _OPEN:
            stack.append(_CLOSE[_OPEN.index(c)])
        elif c in _CLOSE:
            if not stack or stack.pop() != c:
                raise SyntaxFault(f"unexpected {c!r}", j)
            if not stack:
                return j + 1
        j += 1
    raise SyntaxFault(f"{text[i]!r} is never closed", i)


def _string_end(text: str, i: int) -> int:
    j = i + 1
    while j < len(text):
        if text[j] == "\\":
            j += 2
            continue
        if text[j] == '"':
            return j + 1
        j += 1
    raise SyntaxFault("string is never closed", i)


def split_top(text: str, start: int, end: int, sep: str = ",") -> list[tuple[int, str]]:
    """Pieces of ``text[start:end]`` between top-level ``sep`` characters, each with its start offset."""
    pieces, depth, j, begin = [], 0, start, start
    while j < end:
        c = text[j]
        if c == '"':
            j = _string_end(text, j)
            continue
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
        elif c == sep and depth == 0:
            pieces.append((begin, text[begin:j]))
            begin = j + 1
        j += 1
    pieces.append((begin, text[begin:end]))
    return [(o + len(p) - len(p.lstrip()), p.strip()) for o, p in pieces if p.strip()]


def blank_comments(line: str) -> str:
    """``line`` with ``/*...*/`` comments outside strings replaced by spaces (offsets keep their meaning)."""
    if "/*" not in line:
        return line
    out, j = list(line), 0
    while j < len(line):
        if line[j] == '"':
            j = _string_end(line, j)
        elif line.startswith("/*", j):
            k = line.find("*/", j + 2)
            if k < 0:
                raise SyntaxFault("comment is never closed", j)
            out[j:k + 2] = " " * (k + 2 - j)
            j = k + 2
        else:
            j += 1
    return "".join(out)


_DTYPE = re.compile(r"[a-z][a-z0-9]*")
_DIM = re.compile(r"\s*(<=)?\s*(\d+|\?)\s*")


def parse_shape(text: str, i: int) -> tuple[Shape, int]:
    """The shape starting at ``text[i]`` (``f32[2,3]{1,0}``, ``(s32[], bf16[4])``, ``token[]``) and the
    offset after it (layouts, tilings and memory spaces in braces are read past and dropped)."""
    i = skip_space(text, i)
    if i < len(text) and text[i] == "(":
        end = closing(text, i)
        parts = []
        for offset, _piece in split_top(text, i + 1, end - 1):
            shape, after = parse_shape(text, offset)
            if skip_space(text, after) < end - 1 and text[skip_space(text, after)] != ",":
                raise SyntaxFault("expected ',' or ')' after a tuple element's shape", skip_space(text, after))
            parts.append(shape)
        return Shape(None, (), tuple(parts)), end
    m = _DTYPE.match(text, i)
    if not m:
        raise SyntaxFault("expected a shape such as f32[128,256] or (s32[], bf16[8])", i)
    dtype = m.group()
    if dtype not in DTYPE_BYTES:
        raise SyntaxFault(f"unknown element type {dtype!r}; known: {', '.join(sorted(DTYPE_BYTES))}", i)
    j = m.end()
    if j >= len(text) or text[j] != "[":
        raise SyntaxFault(f"expected '[' after element type {dtype!r}", j)
    end = closing(text, j)
    dims = []
    for offset, piece in split_top(text, j + 1, end - 1):
        d = _DIM.fullmatch(piece)
        if not d or d.group(2) == "?":
            raise SyntaxFault(f"dimension {piece!r} is not a whole number (dynamic '?' sizes are not supported)",
                              offset)
        dims.append(int(d.group(2)))
    j = end
    if j < len(text) and text[j] == "{":
        j = closing(text, j)
    return Shape(dtype, tuple(dims)), j


def parse_attributes(text: str, start: int) -> dict[str, tuple[int, str]]:
    """``, key=value, key=value`` from ``text[start:]`` -> {key: (offset of value, value)}.

    The named-mesh spelling ``replica_groups=mesh[...], device_ids=(...) {axes}`` carries a top-level
    comma; its ``device_ids`` piece is folded back into ``replica_groups``.
    """
    out: dict[str, tuple[int, str]] = {}
    last = ""
    for offset, piece in split_top(text, start, len(text)):
        key, eq, value = piece.partition("=")
        key = key.strip()
        if key == "device_ids" and last == "replica_groups" and out[last][1].startswith("mesh["):
            out[last] = (out[last][0], f"{out[last][1]}, {piece}")
            continue
        if not eq or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", key):
            raise SyntaxFault(f"expected key=value, found {piece[:40]!r}", offset)
        out[key] = (offset + len(piece) - len(value.lstrip()), value.strip())
        last = key
    return out


def parse_metadata(value: str) -> dict[str, str]:
    """``{op_name="a/b" source_line=3 stack_frame_id=2}`` -> {key: text} (quotes removed)."""
    body = value.strip()
    body = body[1:-1] if body.startswith("{") and body.endswith("}") else body
    out = {}
    for m in re.finditer(r'([A-Za-z_]+)=("(?:[^"\\]|\\.)*"|\S+)', body):
        raw = m.group(2)
        out[m.group(1)] = _unquote(raw) if raw.startswith('"') else raw
    return out


def _unquote(raw: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), raw[1:-1])
