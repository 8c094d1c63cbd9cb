"""The book's sharding notation: parse ``A[I_X, J] @ B[J, K_Y] -> C[I_X, K_Y]`` and check it on a mesh.

Each dimension may carry mesh axes after ``_`` (one letter per axis, ``I_XY`` = split over X then Y, X
the outer index; or ``I_{data,model}`` for longer names); an output may carry unreduced partial sums,
``C[I, K]{U_X}``. `validate` explains what is wrong with a spec on a given mesh and sizes.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from simulator.errors import PodsimError
from simulator.units import positive_int
from simulator.workloads.mesh import Mesh, MeshAxes

_ARRAY = re.compile(r"^\s*(?P<name>[A-Za-z]\w*)\s*\[(?P<dims>[^\]]*)\]\s*(?:\{\s*U_(?P<partial>[^}]*)\})?\s*$")
_DIM = re.compile(r"^\s*(?P<name>[A-Za-z][A-Za-z0-9]*)\s*(?:_(?P<axes>\{[^}]*\}|[A-Za-z]+))?\s*$")


@dataclass(frozen=True)
class Dim:
    """A named dimension and the mesh axes that split it (outermost first)."""

    name: str
    axes: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.name + (f"_{axes_text(self.axes)}" if self.axes else "")


@dataclass(frozen=True)
class ArraySpec:
    """``name[dims]{U_partial}``: a sharded array, optionally holding unreduced partial sums."""

    name: str
    dims: tuple[Dim, ...]
    partial: tuple[str, ...] = ()

    def __str__(self) -> str:
        text = f"{self.name}[{', '.join(map(str, self.dims))}]"
        return text + (f"{{U_{axes_text(self.partial)}}}" if self.partial else "")


@dataclass(frozen=True)
class MatmulSpec:
    """``A[I, J] @ B[J, K] -> C[I, K]`` with shardings; ``c`` is None when no output is written."""

    a: ArraySpec
    b: ArraySpec
    c: ArraySpec | None

    def __str__(self) -> str:
        return f"{self.a} @ {self.b}" + (f" -> {self.c}" if self.c else "")


def axes_text(axes: tuple[str, ...]) -> str:
    """Mesh axes as the notation writes them: ``XY`` for one-letter names, ``{data,model}`` otherwise."""
    return "".join(axes) if all(len(a) == 1 for a in axes) else "{" + ",".join(axes) + "}"


def _parse_axes(text: str | None) -> tuple[str, ...]:
    if not text:
        return ()
    text = text.strip()
    if text.startswith("{"):
        return tuple(a.strip() for a in text[1:-1].split(",") if a.strip())
    return tuple(text)


def parse_array(text: str) -> ArraySpec:
    """Parse one array, e.g. ``A[I_X, J]`` or ``C[I, K]{U_X}``."""
    m = _ARRAY.match(text)
    if not m:
        raise PodsimError(f"{text.strip()!r} is not an array spec; expected e.g. A[I_X, J] or C[I, K]{{U_X}}")
    dims = []
    for part in re.split(r",(?![^{]*\})", m.group("dims")):  # commas inside {a,b} belong to the axes
        d = _DIM.match(part)
        if not d:
            raise PodsimError(f"{text.strip()!r}: dimension {part.strip()!r} must look like I, I_X, I_XY or I_{{a,b}}")
        dims.append(Dim(d.group("name"), _parse_axes(d.group("axes"))))
    return ArraySpec(m.group("name"), tuple(dims), _parse_axes(m.group("partial")))


def parse_matmul(text: str) -> MatmulSpec:
    """Parse ``A[I_X, J] @ B[J, K_Y] -> C[I_X, K_Y]`` (the output part is optional)."""
    if not isinstance(text, str) or "@" not in text:
        raise PodsimError(f"matmul spec {text!r} must look like A[I_X, J] @ B[J, K_Y] -> C[I_X, K_Y]")
    lhs, _, out = text.partition("->")
    left, _, right = lhs.partition("@")
    return MatmulSpec(parse_array(left), parse_array(right), parse_array(out) if out.strip() else None)


def validate(spec: MatmulSpec, mesh: Mesh, sizes: dict[str, int]) -> None:
    """Raise `PodsimError` explaining what is wrong with ``spec`` on ``mesh`` with ``sizes``."""
    arrays = [spec.a, spec.b] + ([spec.c] if spec.c else [])
    for arr in arrays:
        _validate_array(arr, mesh, sizes)
    if len(spec.a.dims) != 2 or len(spec.b.dims) != 2:
        raise PodsimError(f"{spec}: only 2-D operands are supported (A[I, J] @ B[J, K])")
    if spec.a.partial or spec.b.partial:
        raise PodsimError(f"{spec}: an operand holding partial sums {{U_..}} must be reduced before a matmul")
    (i, j), (j2, k) = spec.a.dims, spec.b.dims
    if j.name != j2.name:
        raise PodsimError(f"{spec}: A's last dimension {j.name} must be B's first (the contraction); got {j2.name}")
    if i.name == k.name or i.name == j.name or k.name == j.name:
        raise PodsimError(f"{spec}: dimensions must have distinct names (got {i.name}, {j.name}, {k.name})")
    if j.axes and j2.axes and j.axes != j2.axes:
        raise PodsimError(f"{spec}: A splits the contraction {j.name} over {axes_text(j.axes)} but B over "
                          f"{axes_text(j2.axes)}; the local blocks would multiply mismatched slices of {j.name} "
                          f"(legal shapes, wrong math). Shard both the same way or gather one first")
    if spec.c is not None and [d.name for d in spec.c.dims] != [i.name, k.name]:
        raise PodsimError(f"{spec}: the output must be C[{i.name}, {k.name}]; got {spec.c}")


def _validate_array(arr: ArraySpec, mesh: MeshAxes, sizes: dict[str, int]) -> None:
    used = [a for d in arr.dims for a in d.axes] + list(arr.partial)
    for axis in used:
        mesh.index(axis)  # raises, naming the mesh's axes
    twice = sorted({a for a in used if used.count(a) > 1})
    if twice:
        raise PodsimError(f"{arr}: mesh axis {twice[0]} is used twice in one array; an axis can split one "
                          "dimension (or hold partial sums) at a time")
    for d in arr.dims:
        if d.name not in sizes:
            raise PodsimError(f"{arr}: no size given for dimension {d.name}; sizes given: {', '.join(sizes)}")
        positive_int(sizes[d.name], name=f"dimension {d.name}")
        split = math.prod(mesh.size(a) for a in d.axes)
        if sizes[d.name] % split:
            raise PodsimError(f"{arr}: dimension {d.name}={sizes[d.name]} is not divisible by "
                              f"{axes_text(d.axes)} = {split} devices")
