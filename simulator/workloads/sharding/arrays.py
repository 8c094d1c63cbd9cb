"""How big a sharded array is on each device: the book's ``A[I_XY, J]`` applied to a typed shape on a mesh.

A dimension split over mesh axes X and Y keeps ``size / (|X| |Y|)`` of its length on each device; axes
that split no dimension hold copies (the array is replicated over them), and an unreduced output
``{U_X}`` holds one partial sum per device along X, counted as copies of the same shape. So each device
holds ``bytes / (product of the splitting axes)`` and the mesh as a whole ``bytes_per_device x devices``
(book, sharding: "A[I_X, J] on a mesh X=4, Y=2 keeps a quarter on each device, twice").

Examples
--------
>>> out = shard_array("fp32[1024,4096]", "A[I_XY, J]", "X=8,Y=2")
>>> out["local_shape"], out["bytes_per_device"], out["total_bytes"], out["replication"]
([64, 4096], 1048576, 16777216, 1)
>>> shard_array("bf16[256,1024]", "A[I_X, J]", "X=4,Y=2")["replication"]
2
"""
from __future__ import annotations

import math
import re
from typing import Any

from simulator.errors import PodsimError
from simulator.hardware.specs import DTYPE_BYTES, check_dtype
from simulator.units import MAX_BYTES, parse_int, show
from simulator.workloads.mesh import MeshAxes, MeshSpec, parse_mesh
from simulator.workloads.sharding.notation import ArraySpec, _validate_array, axes_text, parse_array

_TYPED = re.compile(r"^\s*(?P<dtype>[A-Za-z][A-Za-z0-9]*)\s*\[(?P<dims>[^\]]*)\]\s*$")
MAX_DIM = 2**60  #: largest dimension length taken (the bytes of the whole array are bounded separately)


def parse_typed_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """``"fp32[1024,4096]"`` -> ``("fp32", (1024, 4096))``; a dtype from `DTYPE_BYTES`, lengths >= 1."""
    m = _TYPED.match(text) if isinstance(text, str) else None
    if not m or not m.group("dims").strip():
        raise PodsimError(f"array {show(text)} must look like DTYPE[D0,D1,...], e.g. fp32[1024,4096] "
                          f"(dtypes: {', '.join(DTYPE_BYTES)})")
    check_dtype(m.group("dtype"))
    dims = tuple(parse_int(d.strip(), name=f"dimension {i} of {text.strip()}", maximum=MAX_DIM)
                 for i, d in enumerate(m.group("dims").split(",")))
    return m.group("dtype"), dims


def shard_array(array: str, spec: str | ArraySpec, mesh: str | MeshSpec) -> dict[str, Any]:
    """The local shape and bytes of ``array`` (``"DTYPE[shape]"``) sharded as ``spec`` on ``mesh``.

    Returns ``local_shape``, ``bytes_per_device`` (bytes), ``array_bytes`` (the whole array once),
    ``total_bytes`` (every device's copy, summed over the mesh), ``replication`` (copies of each element:
    the devices over the product of the splitting axes), ``devices`` and which axes split, replicate or
    hold partial sums. `PodsimError` when an axis is not in the mesh, is used twice, or does not divide
    its dimension, or when the spec's rank is not the array's.
    """
    dtype, shape = parse_typed_shape(array)
    arr = parse_array(spec) if isinstance(spec, str) else spec
    axes = MeshAxes(parse_mesh(mesh) if isinstance(mesh, str) else mesh)
    if len(arr.dims) != len(shape):
        raise PodsimError(f"{arr} names {len(arr.dims)} dimension(s) but {array.strip()} has {len(shape)}; "
                          "give one per dimension, e.g. " + _example(len(shape)))
    names = [d.name for d in arr.dims]
    if len(set(names)) != len(names):
        raise PodsimError(f"{arr}: dimension names must differ (got {', '.join(names)})")
    for axis in [a for d in arr.dims for a in d.axes] + list(arr.partial):
        if axis not in axes.names:
            raise PodsimError(f"{arr}: axis {axis!r} is not in mesh {axes.text}; mesh axes: {', '.join(axes.names)}")
    splits = [math.prod(axes.size(a) for a in d.axes) for d in arr.dims]
    _validate_array(arr, axes, dict(zip(names, splits, strict=True)))  # an axis used twice (sizes that divide)
    for d, size, split in zip(arr.dims, shape, splits, strict=True):
        if size % split:
            near = sorted({max(split, size // split * split), (size // split + 1) * split})
            raise PodsimError(f"{arr}: dimension {d.name}={size} does not split over {axes_text(d.axes)} = {split} "
                              f"devices; give a multiple of {split} (e.g. {' or '.join(map(str, near))}) or fewer axes")
    itemsize = DTYPE_BYTES[dtype]
    whole = math.prod(shape) * itemsize
    if whole > MAX_BYTES:
        raise PodsimError(f"{array.strip()} holds {whole:.3g} bytes; at most {MAX_BYTES:.3g} are accepted")
    local = [n // s for n, s in zip(shape, splits, strict=True)]
    devices = math.prod(axes.sizes)
    per_device = math.prod(local) * itemsize
    split_axes = [a for d in arr.dims for a in d.axes]
    return {"array": f"{dtype}[{','.join(map(str, shape))}]", "spec": str(arr), "mesh": axes.text,
            "dtype": dtype, "shape": list(shape), "local_shape": local, "devices": devices,
            "bytes_per_device": per_device, "array_bytes": whole, "total_bytes": per_device * devices,
            "replication": devices // math.prod(splits),
            "split_axes": split_axes, "partial_axes": list(arr.partial),
            "replicated_axes": [a for a in axes.names if a not in split_axes and a not in arr.partial]}


def _example(rank: int) -> str:
    return "A[" + ", ".join(["I_X"] + [chr(ord("J") + i) for i in range(rank - 1)]) + "]"


__all__ = ["MeshAxes", "parse_typed_shape", "shard_array"]
