"""The book's sharding notation and sharded matmul strategies.

``A[I_X, J] @ B[J, K_Y] -> C[I_X, K_Y]``: each dimension may carry mesh axes after ``_`` (one letter
per axis, ``I_XY`` = split over X then Y, X the outer index; or ``I_{data,model}`` for longer names);
an output may carry unreduced partial sums, ``C[I, K]{U_X}``.

For a sharded matmul podsim enumerates strategies -- AllGather an operand first (whole dimension
shardings at a time), multiply the local blocks (slicing a replicated operand for free to match the
other's contraction sharding), then reduce partial sums (AllReduce, or ReduceScatter onto an output
dimension) or gather the output -- prices each with the closed forms of its collectives plus the
local matmul time (padded FLOPs over the MXU peak; operands assumed resident), picks the cheapest,
and simulates every candidate on the topology. Numeric mode runs the chosen strategy on real arrays
through the simulated collectives and checks the result against the unsharded numpy matmul.
"""
from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from simulator import analytic
from simulator.collectives import run_collective
from simulator.errors import PodsimError
from simulator.hardware.specs import DTYPE_BYTES, check_dtype
from simulator.units import positive_int
from simulator.workloads.mesh import Mesh

_ARRAY = re.compile(r"^\s*(?P<name>[A-Za-z]\w*)\s*\[(?P<dims>[^\]]*)\]\s*(?:\{\s*U_(?P<partial>[^}]*)\})?\s*$")
_DIM = re.compile(r"^\s*(?P<name>[A-Za-z][A-Za-z0-9]*)\s*(?:_(?P<axes>\{[^}]*\}|[A-Za-z]+))?\s*$")


@dataclass(frozen=True)
class Dim:
    """A named dimension and the mesh axes that split it (outermost first)."""

    name: str
    axes: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.name + (f"_{_axes_text(self.axes)}" if self.axes else "")


@dataclass(frozen=True)
class ArraySpec:
    """``name[dims]{U_partial}``: a sharded array, optionally holding unreduced partial sums."""

    name: str
    dims: tuple[Dim, ...]
    partial: tuple[str, ...] = ()

    def __str__(self) -> str:
        text = f"{self.name}[{', '.join(map(str, self.dims))}]"
        return text + (f"{{U_{_axes_text(self.partial)}}}" if self.partial else "")


@dataclass(frozen=True)
class MatmulSpec:
    """``A[I, J] @ B[J, K] -> C[I, K]`` with shardings; ``c`` is None when no output is written."""

    a: ArraySpec
    b: ArraySpec
    c: ArraySpec | None

    def __str__(self) -> str:
        return f"{self.a} @ {self.b}" + (f" -> {self.c}" if self.c else "")


def _axes_text(axes: tuple[str, ...]) -> str:
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
        raise PodsimError(f"{spec}: A splits the contraction {j.name} over {_axes_text(j.axes)} but B over "
                          f"{_axes_text(j2.axes)}; the local blocks would multiply mismatched slices of {j.name} "
                          f"(legal shapes, wrong math). Shard both the same way or gather one first")
    if spec.c is not None and [d.name for d in spec.c.dims] != [i.name, k.name]:
        raise PodsimError(f"{spec}: the output must be C[{i.name}, {k.name}]; got {spec.c}")


def _validate_array(arr: ArraySpec, mesh: Mesh, sizes: dict[str, int]) -> None:
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
                              f"{_axes_text(d.axes)} = {split} devices")


@dataclass
class Step:
    """One collective of a strategy: ``kind`` over mesh ``axes`` on ``tensor``'s dimension ``dim``."""

    kind: str
    tensor: str
    axes: tuple[str, ...]
    dim: int | None = None  #: 0 or 1: the dimension gathered or scattered onto
    dim_name: str = ""
    array: str = ""  #: the array's own name (H, W, ...) for display; ``tensor`` is its role A, B or C

    def __str__(self) -> str:
        onto = f" on {self.dim_name}" if self.dim is not None else ""
        return f"{self.kind} {self.array or self.tensor} over {_axes_text(self.axes)}{onto}"


@dataclass
class Strategy:
    """Collectives before and after one local matmul, with the shardings they lead to."""

    pre: list[Step]
    post: list[Step]
    a: tuple[tuple[str, ...], tuple[str, ...]]  #: A's (I, J) axes after the pre-steps (and free slicing)
    b: tuple[tuple[str, ...], tuple[str, ...]]  #: B's (J, K) axes
    c: tuple[tuple[str, ...], tuple[str, ...]]  #: C's (I, K) axes at the end
    partial: tuple[str, ...]  #: partial-sum axes left at the end
    results: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        steps = [str(s) for s in self.pre] + ["local matmul"] + [str(s) for s in self.post]
        return ", then ".join(steps)


def _options(axes_0: tuple[str, ...], axes_1: tuple[str, ...]) -> list[tuple[tuple[int, ...], ...]]:
    """Which dimensions of an operand to gather (whole shardings): none, dim 0, dim 1, both."""
    dims = [d for d, ax in ((0, axes_0), (1, axes_1)) if ax]
    return [c for r in range(len(dims) + 1) for c in itertools.combinations(dims, r)]


def strategies(spec: MatmulSpec) -> list[Strategy]:
    """Every strategy that yields the requested output (or C[I_A, K_B] fully reduced, by default)."""
    (ai, aj), (bj, bk) = ((d.axes for d in spec.a.dims), (d.axes for d in spec.b.dims))
    out: list[Strategy] = []
    for ga, gb in itertools.product(_options(ai, aj), _options(bj, bk)):
        s = _candidate(spec, (ai, aj), (bj, bk), ga, gb)
        if s is not None and all(s.name != o.name for o in out):
            out.append(s)
    return out


def _candidate(spec: MatmulSpec, a: tuple, b: tuple, ga: tuple[int, ...], gb: tuple[int, ...]) -> Strategy | None:
    pre = [Step("all_gather", "A", a[d], d, spec.a.dims[d].name, spec.a.name) for d in ga] + \
        [Step("all_gather", "B", b[d], d, spec.b.dims[d].name, spec.b.name) for d in gb]
    ai, aj = (() if 0 in ga else a[0]), (() if 1 in ga else a[1])
    bj, bk = (() if 0 in gb else b[0]), (() if 1 in gb else b[1])
    if aj and bj and aj != bj:
        return None
    if (1 in ga and bj) or (0 in gb and aj):
        return None  # gathering the contraction only to slice it back to the other operand's split
    contract = aj or bj  # a replicated operand is sliced locally to match the other
    aj, bj = contract, contract
    if set(ai) & set(bk) or set(contract) & (set(ai) | set(bk)):
        return None
    natural = (a[0], b[1]) if not set(a[0]) & set(b[1]) else (ai, bk)  # case 4: any output will do
    want = spec.c or ArraySpec("C", (Dim(spec.a.dims[0].name, natural[0]), Dim(spec.b.dims[1].name, natural[1])))
    post = _finish((ai, bk), contract, (want.dims[0].axes, want.dims[1].axes), want.partial,
                   (spec.a.dims[0].name, spec.b.dims[1].name))
    if post is None:
        return None
    gathered_out = {0: set(a[0]) if 0 in ga else set(), 1: set(b[1]) if 1 in gb else set()}
    if any(s.kind == "slice" and set(s.axes) & gathered_out[s.dim] for s in post):
        return None  # gathering an operand only to slice the output back the same way
    for step in post:
        step.array = want.name
    return Strategy(pre, post, (ai, aj), (bj, bk), (want.dims[0].axes, want.dims[1].axes), want.partial)


def _finish(have: tuple[tuple[str, ...], tuple[str, ...]], partial: tuple[str, ...],
            want: tuple[tuple[str, ...], tuple[str, ...]], want_partial: tuple[str, ...],
            names: tuple[str, str]) -> list[Step] | None:
    """Steps turning C[have]{U_partial} into C[want]{U_want_partial}, or None if not supported: a
    ReduceScatter onto a dimension the partial axes should split, an AllReduce over the partial axes
    left, an AllGather of an over-split tail, or a free local slice of a dimension that is replicated
    over the axes that should split it."""
    if set(want_partial) - set(partial):
        return None
    steps: list[Step] = []
    slices: list[Step] = []  # last: an axis may split another dimension until the collectives are done
    left = [p for p in partial if p not in want_partial]
    for d in (0, 1):
        extra = want[d][len(have[d]):] if want[d][:len(have[d])] == have[d] else None
        if extra is None:
            if have[d][:len(want[d])] == want[d] and not left:  # output over-sharded: gather the tail
                steps.append(Step("all_gather", "C", have[d][len(want[d]):], d, names[d]))
                continue
            return None
        if extra and not set(extra) & set(partial):  # replicated along these axes: keep one's own slice
            slices.append(Step("slice", "C", tuple(extra), d, names[d]))
        elif extra:
            if not set(extra) <= set(left):
                return None
            steps.append(Step("reduce_scatter", "C", tuple(extra), d, names[d]))
            left = [p for p in left if p not in extra]
    if left:  # after any ReduceScatter, which shrinks what is left to reduce
        steps.append(Step("all_reduce", "C", tuple(left)))
    return steps + slices


# -- running a strategy ------------------------------------------------------------------------------------------

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

    def __init__(self, system: Any, mesh: Mesh, elem_bytes: int, dtype: str) -> None:
        self.system, self.mesh, self.elem, self.dtype = system, mesh, elem_bytes, dtype
        self.log: list[dict[str, Any]] = []

    def collective(self, step: Step, local: dict[Any, np.ndarray] | None, shape: tuple[int, int]) -> Any:
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
                         "analytic_s": r.analytic_s, "bytes": r.nbytes, "max_link_bytes": r.max_link_bytes})
        if local is None:
            return None, new_shape
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


def run_strategy(strategy: Strategy, spec: MatmulSpec, sizes: dict[str, int], system: Any, mesh: Mesh,
                 dtype: str = "bf16", arrays: tuple[np.ndarray, np.ndarray] | None = None,
                 concatenate_partials: bool = False) -> dict[str, Any]:
    """Simulate ``strategy``; with ``arrays`` (A, B) also compute every device's C block.

    ``concatenate_partials`` swaps each AllReduce for an AllGather (concatenating partial sums instead
    of adding them) -- the classic mistake, kept so the tests can show the check catches it.
    """

    runner = _Runner(system, mesh, DTYPE_BYTES[dtype], dtype)
    (i, j), (_, k) = ((sizes[d.name] for d in spec.a.dims), (sizes[d.name] for d in spec.b.dims))
    orig_a = tuple(d.axes for d in spec.a.dims)
    orig_b = tuple(d.axes for d in spec.b.dims)
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
            step = Step("all_gather", "C", step.axes, 0, "rows")
        if step.kind == "slice":  # each device keeps its own part of its block: no communication
            d, parts = step.dim, _n(mesh, step.axes)
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


def sharded_matmul(spec: str | MatmulSpec, sizes: dict[str, int], mesh: str, chip: Any = "tpu-v5e",
                   topology: Any = None, dtype: str = "bf16", verify: bool = True, seed: int = 0) -> dict[str, Any]:
    """Compare every strategy for ``spec`` on ``mesh`` and verify the cheapest with real arrays.

    Returns the strategies (each with its collectives, simulated ``time_s`` and closed-form
    ``analytic_s``, compute and communication split, busiest link's bytes and output sharding), the
    ``chosen`` one (lowest closed-form time), ``verified`` (the chosen strategy's numeric result
    equals numpy's unsharded matmul), and ``concatenation_fails`` (for strategies that reduce
    partial sums: concatenating them instead of adding fails that check).
    """
    from simulator.engine.system import System, resolve_chip
    from simulator.workloads.mesh import default_topology_for, parse_mesh

    spec = parse_matmul(spec) if isinstance(spec, str) else spec
    check_dtype(dtype)
    chip = resolve_chip(chip)
    mesh_spec = parse_mesh(mesh) if isinstance(mesh, str) else mesh
    topology = topology or default_topology_for(mesh_spec, chip)

    def fresh() -> tuple[Any, Mesh]:
        system = System(chip, topology=topology)
        return system, Mesh(mesh_spec, system.graph)

    _, probe = fresh()
    validate(spec, probe, sizes)
    candidates = strategies(spec)
    if not candidates:
        raise PodsimError(f"{spec}: no strategy reaches this output sharding from these inputs")
    rows = [_price(s, spec, sizes, *fresh(), dtype) for s in candidates]
    best = min(range(len(rows)), key=lambda n: (rows[n]["analytic_s"], n))
    out = {"spec": str(spec), "mesh": probe.text, "topology": str(topology), "sizes": dict(sizes),
           "strategies": rows, "chosen": rows[best]["name"], "verified": None, "concatenation_fails": None}
    if verify:
        small = verification_sizes(spec, probe, sizes)
        out["verified_sizes"] = small
        out.update(_verify(candidates[best], spec, small, fresh, dtype, seed))
    return out


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


def _price(s: Strategy, spec: MatmulSpec, sizes: dict[str, int], system: Any, mesh: Mesh, dtype: str) -> dict[str, Any]:
    run = run_strategy(s, spec, sizes, system, mesh, dtype)
    comm = [e for e in run["log"] if e["kind"] != "matmul"]
    compute = [e for e in run["log"] if e["kind"] == "matmul"]
    links = system.network.link_bytes()
    return {"name": s.name, "collectives": [e["step"] for e in comm], "time_s": run["time_s"],
            "analytic_s": sum(e["analytic_s"] for e in run["log"]),
            "compute_s": sum(e["time_s"] for e in compute), "communication_s": sum(e["time_s"] for e in comm),
            "max_link_bytes": max(links.values(), default=0.0), "link_bytes_total": sum(links.values()),
            "output": str(ArraySpec("C", (Dim(spec.a.dims[0].name, s.c[0]), Dim(spec.b.dims[1].name, s.c[1])),
                                    s.partial)),
            "steps": run["log"]}


def _verify(s: Strategy, spec: MatmulSpec, sizes: dict[str, int], fresh: Any, dtype: str, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    i, j, k = sizes[spec.a.dims[0].name], sizes[spec.a.dims[1].name], sizes[spec.b.dims[1].name]
    a, b = rng.standard_normal((i, j)), rng.standard_normal((j, k))
    reference = a @ b
    tol = 1e-9 * max(1.0, float(np.abs(reference).max())) * j
    system, mesh = fresh()
    good = run_strategy(s, spec, sizes, system, mesh, dtype, arrays=(a, b))
    error = check_blocks(mesh, good["blocks"], reference, s.c, s.partial)
    out: dict[str, Any] = {"verified": bool(error <= tol), "verify_max_error": error}
    if any(step.kind == "all_reduce" for step in s.post):
        system, mesh = fresh()
        bad = run_strategy(s, spec, sizes, system, mesh, dtype, arrays=(a, b), concatenate_partials=True)
        out["concatenation_fails"] = bool(check_blocks(mesh, bad["blocks"], reference, s.c, s.partial) > tol)
    return out
