"""``podsim collective KIND --array DTYPE[shape] --sharding SPEC --mesh X=4,Y=4``: V from a sharded array.

The book writes a collective on a sharded array, AllGather_X(A[B_X, D_Y]) or AllReduce_Z(A[B_X, D_Y]{U_Z}),
and its answer starts from the bytes each chip holds. This module turns that notation into the collective's
V (bytes, the full gathered / unreduced array of one group, as ``--bytes`` means) and the topology axes it
runs over, so no one divides by hand:

- AllGather over axes G: the array must be split over every axis of G; V is one chip's block times the
  product of G's sizes (the block gathered over G).
- ReduceScatter and AllReduce over G: the array must be unreduced ({U_G}) over every axis of G; V is one
  chip's block (its partial sum, whole).

Mesh axes map to the topology's axes in order (the first mesh axis is topology axis 0), and ``--axes`` may
name mesh axes (``--axes X`` or ``X,Y``); the mesh's sizes must be the topology's.
"""
from __future__ import annotations

import math
from typing import Any

from simulator.errors import PodsimError
from simulator.workloads.sharding.arrays import shard_array

KINDS = ("all_gather", "reduce_scatter", "all_reduce")


def array_collective(kind: str, array: str, sharding: str, mesh: str, axes_text: str | None,
                     topology_shape: tuple[int, ...] | None) -> tuple[float, list[int], dict[str, Any]]:
    """(V in bytes, topology axis indices, the shard figures) of ``kind`` on ``array`` sharded as ``sharding``.

    ``axes_text`` names mesh axes (``X,Y``) or gives topology indices (``0,1``); None: every axis the array
    is split over (AllGather) or unreduced over (ReduceScatter, AllReduce). ``topology_shape`` is the
    topology's grid shape (None for a topology without one: refused)."""
    if kind not in KINDS:
        raise PodsimError(f"--array works for {', '.join(KINDS)}; for {kind} give --bytes")
    fig = shard_array(array, sharding, mesh)
    names = [part.split("=")[0].strip() for part in fig["mesh"].split(",")]
    sizes = [int(part.split("=")[1]) for part in fig["mesh"].split(",")]
    if topology_shape is None or tuple(sizes) != tuple(topology_shape):
        shape = "no grid" if topology_shape is None else "x".join(map(str, topology_shape))
        raise PodsimError(f"--mesh {mesh} must have the topology's axes in order ({shape}); e.g. --mesh "
                          + ",".join(f"{chr(88 + i) if i < 3 else 'A' + str(i)}={s}"
                                     for i, s in enumerate(topology_shape or (4, 4))))
    need = fig["split_axes"] if kind == "all_gather" else fig["partial_axes"]
    if axes_text is None:
        chosen = [a for a in names if a in need]
    else:
        chosen = []
        for token in (t.strip() for t in axes_text.split(",")):
            if token in names:
                chosen.append(token)
            elif token.isdigit() and int(token) < len(names):
                chosen.append(names[int(token)])
            else:
                raise PodsimError(f"--axes {axes_text!r}: {token!r} is not a mesh axis of {mesh} "
                                  f"(axes: {', '.join(names)}) nor a topology axis index below {len(names)}")
    missing = [a for a in chosen if a not in need]
    if not chosen or missing:
        what = "split" if kind == "all_gather" else "unreduced ({U_...})"
        raise PodsimError(f"{kind} over {', '.join(missing or ['no axis'])}: {fig['spec']} is not {what} over "
                          f"{', '.join(missing) or 'any mesh axis'}; axes it is {what} over: "
                          f"{', '.join(need) or 'none'}")
    local = fig["bytes_per_device"]
    v = local * math.prod(sizes[names.index(a)] for a in chosen) if kind == "all_gather" else local
    return float(v), sorted(names.index(a) for a in chosen), fig
