"""Numeric payloads: how a collective's array is cut into keys, and the real numpy arrays that move.

Keys (what a `Transfer` carries) by kind, for a group of positions ``pos`` and ``parts`` parts:
AllGather ``(part, owner position)``; ReduceScatter and AllReduce ``(part, shard position)``;
AllToAll ``(part, source position, target position)`` (each chunk cut into ``parts`` pieces, as equal as
the chunk's elements allow); Broadcast and Reduce ``("piece", j)``; Gather and Scatter ``(0, owner position)``
(the root's output is the gathered array, or the sum; each member's after Scatter its shard). In numeric mode each
key holds a numpy array, so a result that matches numpy proves the data movement, not just its timing.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from simulator.collectives.groups import Group
from simulator.errors import PodsimError


def n_keys(kind: str, n: int, parts: int, chunks: int) -> int:
    """How many keys the array of one group is cut into."""
    return {"all_to_all": n * n * parts, "broadcast": chunks, "reduce": chunks}.get(kind, n * parts)


def check_data(kind: str, data: np.ndarray, n_chips: int, n: int, parts: int, chunks: int) -> float:
    """Validate numeric input; return V in bytes (the full array of one group)."""
    if not isinstance(data, np.ndarray) or data.ndim != 2 or data.shape[0] != n_chips:
        shape = getattr(data, "shape", None)
        raise PodsimError(f"data must be a 2-D numpy array with one row per chip ({n_chips} rows); got shape {shape}")
    m = data.shape[1]
    split = {"all_gather": parts, "gather": 1, "all_to_all": n, "broadcast": chunks,
             "reduce": chunks}.get(kind, n * parts)
    if m % split:
        raise PodsimError(f"data rows of {m} elements do not split into {split} equal pieces for {kind}; "
                          f"use a multiple of {split}")
    row_bytes = m * data.itemsize
    return {"all_gather": row_bytes * n, "gather": row_bytes * n, "all_to_all": row_bytes * n}.get(kind, row_bytes)


def initial_buffers(kind: str, groups: list[Group], data: np.ndarray, parts: int, chunks: int,
                    root_pos: tuple[int, ...]) -> dict[Any, dict[Any, np.ndarray]]:
    """Each device's keys before the collective (device -> key -> array), cut from its row of ``data``."""
    buffers: dict[Any, dict[Any, np.ndarray]] = defaultdict(dict)
    for g in groups:
        positions = g.positions()
        for pos, dev in g.members.items():
            row = data[dev]
            if kind == "gather":
                buffers[dev][(0, pos)] = row
            elif kind == "scatter":
                if pos == root_pos:
                    for s, shard in zip(positions, np.split(row, len(positions)), strict=True):
                        buffers[dev][(0, s)] = shard
            elif kind == "reduce":
                for j, piece in enumerate(np.split(row, chunks)):
                    buffers[dev][("piece", j)] = piece
            elif kind == "all_gather":
                for p, piece in enumerate(np.split(row, parts)):
                    buffers[dev][(p, pos)] = piece
            elif kind in ("reduce_scatter", "all_reduce"):
                for s, shard in zip(positions, np.split(row, len(positions)), strict=True):
                    for p, piece in enumerate(np.split(shard, parts)):
                        buffers[dev][(p, s)] = piece
            elif kind == "all_to_all":
                for t, chunk in zip(positions, np.split(row, len(positions)), strict=True):
                    for p, piece in enumerate(np.array_split(chunk, parts)):
                        buffers[dev][(p, pos, t)] = piece
            elif pos == root_pos:
                for j, piece in enumerate(np.split(row, chunks)):
                    buffers[dev][("piece", j)] = piece
    return buffers


def outputs(kind: str, groups: list[Group], buffers: dict[Any, dict[Any, np.ndarray]], parts: int,
            chunks: int, root_pos: tuple[int, ...] | None = None) -> dict[Any, np.ndarray]:
    """Each device's result (device -> array), assembled from its keys after the collective; Reduce gives
    the roots' only (the other members' buffers hold partial sums), Gather the others their own shard."""
    out = {}
    for g in groups:
        positions = g.positions()
        for pos, dev in g.members.items():
            b = buffers[dev]
            if kind == "reduce" and pos != root_pos:
                continue
            if kind in ("gather", "scatter"):
                pieces = [b[(0, s)] for s in positions] if kind == "gather" and pos == root_pos else [b[(0, pos)]]
            elif kind in ("all_gather", "all_reduce"):
                pieces = [b[(p, s)] for s in positions for p in range(parts)]
            elif kind == "reduce_scatter":
                pieces = [b[(p, pos)] for p in range(parts)]
            elif kind == "all_to_all":
                pieces = [b[(p, o, pos)] for o in positions for p in range(parts)]
            else:
                pieces = [b[("piece", j)] for j in range(chunks)]
            out[dev] = np.concatenate(pieces)
    return out
