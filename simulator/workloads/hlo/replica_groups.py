"""Replica groups in the three spellings XLA prints, expanded to lists of device ids.

- explicit: ``{{0,1},{2,3}}`` (``{}`` is one group of every device);
- iota: ``[2,4]<=[4,2]T(1,0)`` -- ``iota(8).reshape(4,2).transpose(1,0)`` cut into 2 groups of 4;
- named mesh axes: ``mesh['x'=4,'y'=2] {'y'}``, optionally with ``, device_ids=([2,2,2]T(0,2,1))`` (a
  non-trivial device order) and sub-axes ``'x':(1)2`` (pre-size 1, size 2: the major half of x). Devices
  whose coordinates differ only along the named axes form one group, as XLA's
  ``MeshAxesReplicaGroupList::flattened_replica_groups`` builds them.

Errors are `SyntaxFault` with the offset (into the attribute value) of what does not read.
"""
from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

from simulator.workloads.hlo.syntax import SyntaxFault, closing, split_top

if TYPE_CHECKING:  # NumPy loads where a device array is built: `podsim --help` reads the HLO package
    import numpy as np

_IOTA = re.compile(r"\[([\d,\s]+)\]<=\[([\d,\s]+)\](?:T\(([\d,\s]+)\))?")
_MESH_AXIS = re.compile(r"'?([A-Za-z_][\w.]*)'?\s*=\s*(\d+)")
_AXIS_REF = re.compile(r"'?([A-Za-z_][\w.]*)'?(?::\((\d+)\)(\d+))?")


def _ints(text: str) -> list[int]:
    return [int(p) for p in text.replace(" ", "").split(",") if p]


def parse_groups(text: str, n_devices: int) -> list[list[int]]:
    """Device ids of each replica group spelled by ``text`` (see the module docstring)."""
    text = text.strip()
    if text.startswith("mesh["):
        groups = _mesh_groups(text)
    elif text.startswith("["):
        groups = _iota_groups(text)
    elif text.startswith("{"):
        groups = _explicit(text)
        if not groups:
            return [list(range(n_devices))]
    else:
        raise SyntaxFault("replica groups must read {{0,1},{2,3}}, [2,4]<=[8] or mesh['x'=4] {'x'}", 0)
    bad = sorted({d for g in groups for d in g if not 0 <= d < n_devices})
    if bad:
        raise SyntaxFault(f"replica groups name device(s) {bad[:5]} but the program has {n_devices} device(s) "
                          f"(ids 0..{n_devices - 1})", 0)
    return groups


def _explicit(text: str) -> list[list[int]]:
    end = closing(text, 0)
    groups = []
    for offset, piece in split_top(text, 1, end - 1):
        if not (piece.startswith("{") and piece.endswith("}")) or not re.fullmatch(r"[\d,\s]*", piece[1:-1]):
            raise SyntaxFault(f"replica group {piece[:30]!r} must be a list of device ids such as {{0,1}}", offset)
        groups.append(_ints(piece[1:-1]))
    return groups


def _iota_groups(text: str) -> list[list[int]]:
    m = _IOTA.fullmatch(text.replace(" ", ""))
    if not m:
        raise SyntaxFault("iota replica groups must read [G,N]<=[dims] or [G,N]<=[dims]T(perm)", 0)
    shape, dims = _ints(m.group(1)), _ints(m.group(2))
    perm = _ints(m.group(3)) if m.group(3) else list(range(len(dims)))
    if len(shape) != 2 or math.prod(shape) != math.prod(dims) or sorted(perm) != list(range(len(dims))):
        raise SyntaxFault(f"iota replica groups {text!r}: [G,N] must hold as many ids as the iota dims, and T(...) "
                          "must permute them", 0)
    import numpy as np

    return np.arange(math.prod(dims)).reshape(dims).transpose(perm).reshape(shape).tolist()


def _device_array(spec: str, sizes: list[int]) -> np.ndarray:
    """Device ids laid on the mesh: iota, or ``device_ids=(...)`` as an iota with transpose or a list."""
    import numpy as np

    n = math.prod(sizes)
    if not spec:
        return np.arange(n).reshape(sizes)
    spec = spec.strip().replace(" ", "")
    m = re.fullmatch(r"\[([\d,]+)\](?:T\(([\d,]+)\))?", spec)
    if m:
        dims = _ints(m.group(1))
        perm = _ints(m.group(2)) if m.group(2) else list(range(len(dims)))
        if math.prod(dims) != n or sorted(perm) != list(range(len(dims))):
            raise SyntaxFault(f"device_ids={spec!r} does not hold the mesh's {n} devices", 0)
        return np.arange(n).reshape(dims).transpose(perm).reshape(sizes)
    ids = _ints(re.sub(r"[\[\]{}]", ",", spec))
    if sorted(ids) != list(range(n)):
        raise SyntaxFault(f"device_ids must be a permutation of 0..{n - 1}", 0)
    return np.array(ids).reshape(sizes)


def _mesh_groups(text: str) -> list[list[int]]:
    head_end = closing(text, 4)
    axes = [(m.group(1), int(m.group(2))) for m in map(_MESH_AXIS.fullmatch, (p for _, p in
                                                                          split_top(text, 5, head_end - 1))) if m]
    if len(axes) != len(split_top(text, 5, head_end - 1)):
        raise SyntaxFault("mesh axes must read 'name'=size", 5)
    rest = text[head_end:].strip()
    device_spec = ""
    if rest.startswith(","):
        m = re.match(r",\s*device_ids=\(", rest)
        if not m:
            raise SyntaxFault("expected ', device_ids=(...)' after the mesh", head_end)
        end = closing(rest, m.end() - 1)
        device_spec, rest = rest[m.end():end - 1], rest[end:].strip()
    if not (rest.startswith("{") and rest.endswith("}")):
        raise SyntaxFault("expected the grouped axes in braces, e.g. {'x'}", len(text) - len(rest))
    names = [a for a, _ in axes]
    sizes = [s for _, s in axes]
    refs: dict[int, list[tuple[int, int | None, int | None]]] = {}
    for order, (_, piece) in enumerate(split_top(rest, 1, len(rest) - 1)):
        m = _AXIS_REF.fullmatch(piece)
        if not m or m.group(1) not in names:
            raise SyntaxFault(f"grouped axis {piece!r} is not an axis of the mesh ({', '.join(names)})",
                              len(text) - len(rest))
        pre = int(m.group(2)) if m.group(2) else None
        size = int(m.group(3)) if m.group(3) else None
        refs.setdefault(names.index(m.group(1)), []).append((order, pre, size))
    array = _device_array(device_spec, sizes)
    dims, grouped = _reindex(sizes, refs)
    keep = [d for d in range(len(dims)) if d not in grouped]
    per_group = math.prod(dims[d] for d in grouped)
    return array.reshape(dims).transpose(keep + grouped).reshape(-1, per_group).tolist()


def _reindex(sizes: list[int], refs: dict[int, list[tuple[int, int | None, int | None]]]) -> tuple[list[int],
                                                                                               list[int]]:
    """Mesh dims split where sub-axes cut them, and the indices of the grouped dims (by mesh axis)."""
    dims: list[int] = []
    grouped: list[int] = []
    for axis, size in enumerate(sizes):
        if axis not in refs:
            dims.append(size)
            continue
        here = sorted(refs[axis], key=lambda r: r[1] or 1)
        if len(here) == 1 and here[0][1] is None:
            grouped.append(len(dims))
            dims.append(size)
            continue
        pieces: list[tuple[int, int | None]] = []  # (size, original order or None for padding)
        prefix = 1
        for order, pre, sub in here:
            if pre is None or sub is None or pre % prefix or size % (pre * sub):
                raise SyntaxFault(f"sub-axes of mesh axis {axis} do not tile its size {size}", 0)
            if pre != prefix:
                pieces.append((pre // prefix, None))
            pieces.append((sub, order))
            prefix = pre * sub
        if prefix != size:
            pieces.append((size // prefix, None))
        base = len(dims)
        ordered = sorted((order, base + k) for k, (_, order) in enumerate(pieces) if order is not None)
        grouped += [index for _, index in ordered]
        dims += [s for s, _ in pieces]
    return dims, grouped


def parse_pairs(text: str, n_devices: int) -> list[tuple[int, int]]:
    """``source_target_pairs={{0,1},{1,2}}`` -> [(0, 1), (1, 2)]."""
    pairs = []
    for group in _explicit(text.strip()) if text.strip().startswith("{") else [[]]:
        if len(group) != 2:
            raise SyntaxFault(f"source_target_pairs must be pairs such as {{0,1}}, found {group}", 0)
        pairs.append((group[0], group[1]))
    bad = sorted({d for p in pairs for d in p if not 0 <= d < n_devices})
    if bad:
        raise SyntaxFault(f"source_target_pairs name device(s) {bad[:5]} outside 0..{n_devices - 1}", 0)
    return pairs
