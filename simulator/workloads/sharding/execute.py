"""Running a sharding strategy on a system: its collectives and local matmul, optionally on real arrays.

With arrays, every device's blocks move through the simulated collectives and `check_blocks` holds
the result against the unsharded numpy matmul; `verification_sizes` shrinks the problem so that the
same strategy and collectives run on small arrays.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from simulator import analytic
from simulator.collectives import run_collective
from simulator.hardware.specs import DTYPE_BYTES
from simulator.workloads.mesh import Mesh
from simulator.workloads.sharding.candidates import Reshard, Strategy
from simulator.workloads.sharding.notation import MatmulSpec

if TYPE_CHECKING:  # annotations only: no import at run time (and no cycle)
    from simulator.engine.system import System


def _block(mesh: Mesh, dev: Any, axes: tuple[str, ...]) -> tuple[int, int]:
    """(index, count) of ``dev``'s block of a dimension split over ``axes`` (outermost first)."""
    index, count = 0, 1
    coords = mesh.coords(dev)
    for a in axes:
        n = mesh.size(a)
        index, count = index * n + coords[mesh.index(a)], count * n
    return index, count


def _take(array: np.ndarray, dim: int, index: int, count: int) -> np.ndarray:
    size = array.shape[dim] // count
    return np.take(array, range(index * size, (index + 1) * size), axis=dim)


def _shard(mesh: Mesh, full: np.ndarray, axes: tuple[tuple[str, ...], tuple[str, ...]]) -> dict[Any, np.ndarray]:
    out = {}
    for dev in mesh.chips:
        block = full
        for d in (0, 1):
            block = _take(block, d, *_block(mesh, dev, axes[d]))
        out[dev] = block
    return out


class _Runner:
    """Runs one strategy's collectives and matmul on a system; with arrays, moves them for real."""

    def __init__(self, system: System, mesh: Mesh, elem_bytes: int, dtype: str) -> None:
        self.system, self.mesh, self.elem, self.dtype = system, mesh, elem_bytes, dtype
        self.log: list[dict[str, Any]] = []

    def collective(self, step: Reshard, local: dict[Any, np.ndarray] | None, shape: tuple[int, int]) -> Any:
        """Run ``step`` on local blocks of ``shape``; returns the new blocks (or None) and their shape."""
        dim = step.dim or 0
        moved = (shape[dim], shape[1 - dim])
        rows = None
        if local is not None:
            rows = np.stack([np.moveaxis(local[d], dim, 0).reshape(-1) for d in sorted(local)])
        nbytes = self.elem * shape[0] * shape[1] * (math.prod(self.mesh.size(a) for a in step.axes)
                                                    if step.kind == "all_gather" else 1)
        start = self.system.env.now
        r = run_collective(step.kind, self.system, None if rows is not None else nbytes, axes=list(step.axes),
                           mesh=self.mesh, data=rows)
        factor = math.prod(self.mesh.size(a) for a in step.axes)
        new0 = moved[0] * factor if step.kind == "all_gather" else moved[0] // factor \
            if step.kind == "reduce_scatter" else moved[0]
        new_shape = (new0, moved[1]) if dim == 0 else (moved[1], new0)
        self.log.append({"step": str(step), "kind": step.kind, "start_s": start, "time_s": r.time_s,
                         "analytic_s": r.analytic_s, "bytes": r.nbytes, "max_link_bytes": r.max_link_bytes,
                         "algorithm": r.algorithm})
        if local is None:
            return None, new_shape
        assert r.outputs is not None  # a collective given data returns data
        blocks = {d: np.moveaxis(r.outputs[d].reshape(new0, moved[1]), 0, dim) for d in sorted(local)}
        return blocks, new_shape

    def matmul(self, m: int, k: int, n: int) -> float:
        start = self.system.env.now
        for chip in self.system.chips:
            chip.matmul(m, k, n, "local matmul", self.dtype)
        self.system.run()
        spec = self.system.spec
        closed = analytic.padded_matmul_flops(m, k, n, spec.mxu_dim, spec.sublanes) / spec.peak_flops_per_s(self.dtype)
        self.log.append({"step": "local matmul", "kind": "matmul", "start_s": start,
                         "time_s": self.system.env.now - start, "analytic_s": closed,
                         "flops": analytic.matmul_flops(m, k, n)})
        return closed


def run_strategy(strategy: Strategy, spec: MatmulSpec, sizes: dict[str, int], system: System, mesh: Mesh,
                 dtype: str = "bf16", arrays: tuple[np.ndarray, np.ndarray] | None = None,
                 concatenate_partials: bool = False) -> dict[str, Any]:
    """Simulate ``strategy``; with ``arrays`` (A, B) also compute every device's C block.

    ``concatenate_partials`` swaps each AllReduce for an AllGather (concatenating partial sums instead
    of adding them) -- the classic mistake, kept so the tests can show the check catches it.
    """

    runner = _Runner(system, mesh, DTYPE_BYTES[dtype], dtype)
    (i, j), (_, k) = ((sizes[d.name] for d in spec.a.dims), (sizes[d.name] for d in spec.b.dims))
    orig_a = (spec.a.dims[0].axes, spec.a.dims[1].axes)  # a matrix: two dimensions
    orig_b = (spec.b.dims[0].axes, spec.b.dims[1].axes)
    a_loc = _shard(mesh, arrays[0], orig_a) if arrays else None
    b_loc = _shard(mesh, arrays[1], orig_b) if arrays else None
    a_shape = (i // _n(mesh, orig_a[0]), j // _n(mesh, orig_a[1]))
    b_shape = (j // _n(mesh, orig_b[0]), k // _n(mesh, orig_b[1]))
    for step in strategy.pre:
        if step.tensor == "A":
            a_loc, a_shape = runner.collective(step, a_loc, a_shape)
        else:
            b_loc, b_shape = runner.collective(step, b_loc, b_shape)
    a_loc, a_shape = _slice_to(mesh, a_loc, a_shape, 1, strategy.a[1], j)
    b_loc, b_shape = _slice_to(mesh, b_loc, b_shape, 0, strategy.b[0], j)
    runner.matmul(a_shape[0], a_shape[1], b_shape[1])
    c_loc = {d: a_loc[d] @ b_loc[d] for d in a_loc} if arrays else None
    c_shape = (a_shape[0], b_shape[1])
    for step in strategy.post:
        if concatenate_partials and step.kind == "all_reduce":
            step = Reshard("all_gather", "C", step.axes, 0, "rows")
        if step.kind == "slice":  # each device keeps its own part of its block: no communication
            d, parts = step.dim, _n(mesh, step.axes)
            assert d is not None  # a slice names its dimension
            c_shape = (c_shape[0] // parts, c_shape[1]) if d == 0 else (c_shape[0], c_shape[1] // parts)
            if c_loc is not None:
                c_loc = {dev: _take(block, d, *_block(mesh, dev, step.axes)) for dev, block in c_loc.items()}
            runner.log.append({"step": str(step), "kind": "slice", "start_s": system.env.now, "time_s": 0.0,
                               "analytic_s": 0.0})
            continue
        c_loc, c_shape = runner.collective(step, c_loc, c_shape)
    return {"log": runner.log, "blocks": c_loc, "shape": c_shape, "time_s": system.env.now}


def _n(mesh: Mesh, axes: tuple[str, ...]) -> int:
    return math.prod(mesh.size(a) for a in axes)


def _slice_to(mesh: Mesh, local: dict[Any, np.ndarray] | None, shape: tuple[int, int], dim: int,
              axes: tuple[str, ...], full: int) -> tuple[Any, tuple[int, int]]:
    """Slice a replicated contraction dimension locally (free) to match the other operand's split."""
    target = full // _n(mesh, axes)
    if shape[dim] == target:
        return local, shape
    new = (target, shape[1]) if dim == 0 else (shape[0], target)
    if local is None:
        return None, new
    return {d: _take(block, dim, *_block(mesh, d, axes)) for d, block in local.items()}, new


def check_blocks(mesh: Mesh, blocks: dict[Any, np.ndarray], reference: np.ndarray,
                 c_axes: tuple[tuple[str, ...], tuple[str, ...]], partial: tuple[str, ...]) -> float:
    """Largest error between the devices' C blocks and the reference (partial sums summed first)."""
    sums: dict[tuple, np.ndarray] = {}
    for dev, block in blocks.items():
        key = tuple(c for c, name in zip(mesh.coords(dev), mesh.names, strict=True) if name not in partial)
        sums[key] = sums.get(key, 0) + block
    worst = 0.0
    for dev in blocks:
        key = tuple(c for c, name in zip(mesh.coords(dev), mesh.names, strict=True) if name not in partial)
        want = _take(_take(reference, 0, *_block(mesh, dev, c_axes[0])), 1, *_block(mesh, dev, c_axes[1]))
        got = sums[key]
        if got.shape != want.shape:
            return math.inf
        worst = max(worst, float(np.max(np.abs(got - want))))
    return worst


def verification_sizes(spec: MatmulSpec, mesh: Mesh, sizes: dict[str, int], per_device: int = 16) -> dict[str, int]:
    """Sizes for the numeric check: each dimension cut to at most ``per_device`` rows per shard of its
    finest split (a divisor of the real size), so the same strategy and collectives run on small arrays."""
    arrays = [spec.a, spec.b] + ([spec.c] if spec.c else [])
    out = {}
    for name, size in sizes.items():
        split = math.lcm(1, *(_n(mesh, d.axes) for arr in arrays for d in arr.dims if d.name == name),
                         *(mesh.size(p) for p in mesh.names))
        out[name] = split * math.gcd(size // split, per_device)  # divides size, at most split x per_device
    return out
