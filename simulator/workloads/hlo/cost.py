"""What each HLO instruction costs, from its shapes: MXU matmuls, VPU FLOPs, HBM bytes, or a collective.

Accounting (the same rules as XLA's ``HloCostAnalysis`` where it has one):

- a ``dot`` is ``2 x batch x m x k x n`` FLOPs on the MXU; a ``convolution`` ``2 x output elements x
  (kernel elements / output features)``, run as an [m, k] @ [k, n] matmul;
- element-wise ops are one FLOP per output element (transcendentals counted apart), a ``reduce`` one per
  input element it folds into another (inputs less outputs) times the FLOPs of its reducer; all of it runs on
  the VPU;
- a fusion reads its operands from HBM once and writes its result once (a fused parameter used only by
  slices reads only the slices; a dynamic-update-slice root writes only the update, in place), and does
  the MXU and VPU work of the instructions inside;
- an unfused op reads its operands and writes its result; ``parameter``, ``constant``, tuples and
  bitcasts are free.

Dtypes: the CPU backend computes bf16 programs in f32, inserting converts (they carry no
``convert_element_type`` in their metadata, unlike a user's ``astype``). With ``dtype="source"`` a value
produced by such a convert counts in the dtype it had before (so dots and collectives move and multiply
bf16), and fusions that only convert (with the layout copies and transposes the CPU backend fuses into
them) cost nothing; ``dtype="compiled"`` takes every shape as written.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from simulator.errors import PodsimError
from simulator.workloads.hlo.model import COLLECTIVES, Computation, Instruction, Module
from simulator.workloads.hlo.syntax import DTYPE_BYTES, FLOAT_TYPES, Shape

DTYPE_POLICIES = ("source", "compiled")
FREE = frozenset({"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "after-all", "add-dependency",
                  "partition-id", "replica-id", "opt-barrier", "optimization-barrier", "domain"})
TRANSCENDENTAL = frozenset({"exponential", "exponential-minus-one", "log", "log-plus-one", "tanh", "logistic",
                            "sqrt", "rsqrt", "cbrt", "sine", "cosine", "tan", "atan2", "power", "erf"})
ELEMENTWISE = TRANSCENDENTAL | frozenset({
    "add", "subtract", "multiply", "divide", "maximum", "minimum", "remainder", "and", "or", "xor", "not", "negate",
    "abs", "sign", "floor", "ceil", "round-nearest-afz", "round-nearest-even", "compare", "select", "clamp",
    "convert", "is-finite", "shift-left", "shift-right-arithmetic", "shift-right-logical", "popcnt", "clz", "real",
    "imag", "complex", "bitcast-convert", "reduce-precision", "stochastic-convert", "map"})
#: Ops that only move data through HBM (reads and writes, no arithmetic worth counting).
MOVEMENT = frozenset({"copy", "copy-start", "transpose", "broadcast", "reshape", "slice", "dynamic-slice",
                      "dynamic-update-slice", "concatenate", "pad", "reverse", "gather", "scatter", "iota",
                      "sort", "reduce", "reduce-window", "select-and-scatter", "rng", "rng-bit-generator",
                      "get-dimension-size", "set-dimension-size"})
CONTROL = frozenset({"while", "call", "conditional", "fusion", "async-start", "async-update", "async-done",
                     "copy-done"})
MATMUL = frozenset({"dot", "convolution"})
_SLICES = frozenset({"slice", "dynamic-slice", "gather"})
_DTYPE_ONLY = frozenset({"parameter", "convert", "bitcast", "reshape"})
#: A fusion of only these, around a compiler-inserted convert, is the CPU backend's dtype and layout shuffle.
_CPU_SHUFFLE = _DTYPE_ONLY | {"copy", "transpose"}


@dataclass
class OpCost:
    """The work of one instruction on one device.

    ``kind``: ``matmul``, ``elementwise`` (VPU and HBM work), ``free``, ``control`` (loops, calls: their
    bodies cost), a collective kind (``all_gather``, ...), or ``unsupported`` (skipped; ``read_bytes`` and
    ``write_bytes`` still say what it would move).
    """

    kind: str
    read_bytes: float = 0.0
    write_bytes: float = 0.0
    matmuls: list[tuple[int, int, int, int, str]] = field(default_factory=list)  #: (batch, m, k, n, dtype)
    flops: float = 0.0  #: useful FLOPs (matmul and element-wise, transcendentals apart)
    transcendentals: float = 0.0
    elided: bool = False  #: a convert the CPU backend inserted (free with dtype="source")

    @property
    def vpu_flops(self) -> float:
        """Element-wise work on the VPU (FLOPs plus transcendentals, less the matmul FLOPs)."""
        return max(0.0, self.flops - sum(2.0 * b * m * k * n for b, m, k, n, _ in self.matmuls)) + self.transcendentals

    @property
    def nbytes(self) -> float:
        return self.read_bytes + self.write_bytes


def podsim_dtype(dtype: str) -> str:
    """The podsim dtype whose MXU rate an HLO element type runs at (1-byte types: the 8-bit rate)."""
    size = DTYPE_BYTES.get(dtype, 4)
    return "int8" if size <= 1 else "bf16" if size == 2 else "fp32"


def user_convert(instr: Instruction) -> bool:
    """A convert the program asked for (``astype``), not one the compiler inserted."""
    return "convert_element_type" in instr.op_name


class Costing:
    """Costs and source shapes of the instructions of ``module`` under a dtype policy."""

    def __init__(self, module: Module, dtype: str = "source") -> None:
        if dtype not in DTYPE_POLICIES:
            raise PodsimError(f"dtype={dtype!r}; valid: {', '.join(DTYPE_POLICIES)} (source: the program's own "
                              "dtypes where the CPU backend widened them; compiled: every shape as written)")
        self.module, self.policy = module, dtype
        self._cache: dict[tuple, tuple[dict[str, Shape], dict[str, OpCost]]] = {}

    def computation(self, comp: Computation, params: tuple[Shape, ...] | None = None) -> tuple[dict[str, Shape],
                                                                                             dict[str, OpCost]]:
        """(source shape, cost) of every instruction of ``comp`` given its parameters' source shapes."""
        params = params or tuple(p.shape for p in comp.parameters())
        key = (comp.name, params)
        if key not in self._cache:
            src: dict[str, Shape] = {}
            costs: dict[str, OpCost] = {}
            for instr in comp.instructions:
                src[instr.name] = self._source(instr, src, params, comp)
                costs[instr.name] = self._cost(instr, src)
            self._cache[key] = (src, costs)
        return self._cache[key]

    # -- source shapes -----------------------------------------------------------------------------------
    def _source(self, instr: Instruction, src: dict[str, Shape], params: tuple[Shape, ...], comp: Computation
                ) -> Shape:
        if self.policy == "compiled":
            return instr.shape
        ops = [src[o] for o in instr.operands]
        op = instr.opcode
        if op == "parameter":
            index = int(instr.literal) if instr.literal.isdigit() else 0
            return params[index] if index < len(params) else instr.shape
        if op == "get-tuple-element" and ops and ops[0].is_tuple:
            index = int(instr.attrs.get("index", "0"))
            return ops[0].parts[index] if index < len(ops[0].parts) else instr.shape
        if op == "tuple":
            return Shape(None, (), tuple(ops))
        if op in ("while", "opt-barrier", "optimization-barrier") and ops:
            return ops[0] if _same_layout(ops[0], instr.shape) else instr.shape
        if op in ("bitcast", "reshape", "copy", "transpose", "broadcast", "slice", "dynamic-slice") and ops:
            return _as(instr.shape, ops[0])
        if self._is_widening(instr, ops):
            return _as(instr.shape, ops[0])
        if op == "convert" or (op == "fusion" and user_convert(self.module.computation(instr.called()[0]).root)):
            return instr.shape  # the program asked for this type
        narrow = _narrowest(ops)
        if narrow and instr.shape.dtype in FLOAT_TYPES and DTYPE_BYTES[narrow] < DTYPE_BYTES[instr.shape.dtype]:
            return Shape(narrow, instr.shape.dims)
        return instr.shape

    def _is_widening(self, instr: Instruction, ops: list[Shape]) -> bool:
        """A compiler-inserted convert (or a fusion of nothing else) whose result is its operand retyped."""
        if len(ops) != 1 or ops[0].is_tuple or instr.shape.is_tuple:
            return False
        if instr.opcode == "convert":
            return not user_convert(instr)
        if instr.opcode == "fusion":
            inner = self.module.computation(instr.called()[0]).instructions
            converts = [i for i in inner if i.opcode == "convert"]
            return (all(i.opcode in _CPU_SHUFFLE for i in inner) and bool(converts)
                    and not any(map(user_convert, converts)))
        return False

    # -- costs ---------------------------------------------------------------------------------------------
    def _cost(self, instr: Instruction, src: dict[str, Shape]) -> OpCost:
        op = instr.base_opcode if instr.base_opcode in COLLECTIVES else instr.opcode
        if op == "async-start":  # an async wrapper costs what it wraps; only collectives run asynchronously
            root = self.module.computation(instr.called()[0]).root if instr.called() else None
            op = root.base_opcode if root is not None and root.base_opcode in COLLECTIVES else "async-wrapped"
        ops = [src[o] for o in instr.operands]
        out = src[instr.name]
        if op in FREE or instr.opcode.endswith("-done") or instr.opcode == "async-update":
            return OpCost("free")
        if self.policy == "source" and self._is_widening(instr, ops):
            return OpCost("free", elided=True)
        if op in COLLECTIVES:
            result = self._collective_result(instr, ops, out)
            flops = _reduction_flops(op, result) * self._reducer_flops(instr)
            return OpCost(op.replace("-", "_"), _bytes(ops), result.nbytes, flops=flops)
        if op == "fusion":
            return self._fusion(instr, ops, out)
        if op in CONTROL:
            return OpCost("control")
        if op in MATMUL:
            mm = _matmul_shape(instr, ops, out)
            return OpCost("matmul", _bytes(ops), out.nbytes, [mm], 2.0 * mm[0] * mm[1] * mm[2] * mm[3])
        if op in ELEMENTWISE or op in MOVEMENT:
            flops, trans = _vector_flops(instr, ops, out, self._reducer_flops(instr))
            read, write = _moved(instr, ops, out)
            return OpCost("elementwise", read, write, flops=flops, transcendentals=trans)
        return OpCost("unsupported", _bytes(ops), out.nbytes)

    def _reducer_flops(self, instr: Instruction) -> int:
        """FLOPs of one application of a reduction's ``to_apply`` computation (its element-wise ops)."""
        name = instr.attrs.get("to_apply", "").lstrip("%")
        if not name or name not in self.module.computations:
            return 1
        return max(1, sum(i.opcode in ELEMENTWISE for i in self.module.computations[name].instructions))

    def _collective_result(self, instr: Instruction, ops: list[Shape], out: Shape) -> Shape:
        """The result array of a collective: an async start's result is a tuple (operand, result, ...), an
        ``async-start``'s result is its wrapped collective's."""
        if instr.opcode == "async-start":
            out = self.module.computation(instr.called()[0]).root.shape
        elif out.is_tuple and instr.opcode.endswith("-start") and len(out.parts) >= 2:
            out = out.parts[1]
        return _as(out, ops[0]) if len(ops) == 1 else out

    def _fusion(self, instr: Instruction, ops: list[Shape], out: Shape) -> OpCost:
        comp = self.module.computation(instr.called()[0])
        inner_src, inner = self.computation(comp, tuple(ops))
        matmuls = [mm for c in inner.values() for mm in c.matmuls]
        flops = sum(c.flops for c in inner.values())
        trans = sum(c.transcendentals for c in inner.values())
        unsupported = [i.opcode for i in comp.instructions if inner[i.name].kind == "unsupported"]
        if unsupported:
            return OpCost("unsupported", _bytes(ops), out.nbytes)
        read = sum(_param_read(comp, p, inner_src) for p in comp.parameters())
        root = comp.root
        write = out.nbytes
        if root.opcode == "dynamic-update-slice":
            write = inner_src[root.operands[1]].nbytes
        return OpCost("matmul" if matmuls else "elementwise", read, write, matmuls, flops, trans)


def _bytes(shapes: list[Shape]) -> float:
    return sum(s.nbytes for s in shapes)


def _as(shape: Shape, like: Shape) -> Shape:
    """``shape`` in ``like``'s element type (source dtypes flow through reshapes and slices)."""
    if shape.is_tuple or like.is_tuple or like.dtype == shape.dtype:
        return shape
    if shape.dtype in FLOAT_TYPES and like.dtype in FLOAT_TYPES and DTYPE_BYTES[like.dtype] < DTYPE_BYTES[shape.dtype]:
        return Shape(like.dtype, shape.dims)
    return shape


def _same_layout(a: Shape, b: Shape) -> bool:
    if a.is_tuple != b.is_tuple:
        return False
    if not a.is_tuple:
        return a.dims == b.dims
    return len(a.parts) == len(b.parts) and all(map(_same_layout, a.parts, b.parts))


def _narrowest(ops: list[Shape]) -> str | None:
    """The float type of the float operands when they all share one (else None)."""
    types = {s.dtype for s in ops if not s.is_tuple and s.dtype in FLOAT_TYPES and s.elements > 1}
    return types.pop() if len(types) == 1 else None


def _matmul_shape(instr: Instruction, ops: list[Shape], out: Shape) -> tuple[int, int, int, int, str]:
    """(batch, m, k, n, podsim dtype) of a dot or convolution."""
    dtype = podsim_dtype(ops[0].dtype or "f32") if ops else "fp32"
    if instr.opcode == "dot":
        lhs, rhs = ops[0].dims, ops[1].dims
        lb, lc = instr.int_list("lhs_batch_dims"), instr.int_list("lhs_contracting_dims")
        rb, rc = instr.int_list("rhs_batch_dims"), instr.int_list("rhs_contracting_dims")
        batch = math.prod(lhs[d] for d in lb)
        k = math.prod(lhs[d] for d in lc)
        m = math.prod(s for d, s in enumerate(lhs) if d not in lb and d not in lc)
        n = math.prod(s for d, s in enumerate(rhs) if d not in rb and d not in rc)
        return batch, m, k, n, dtype
    labels = instr.attrs.get("dim_labels", "")
    kernel = ops[1].dims if len(ops) > 1 else ()
    kernel_labels = labels.split("_")[1].split("->")[0] if labels.count("_") >= 1 else ""
    o = kernel[kernel_labels.index("o")] if "o" in kernel_labels and len(kernel_labels) == len(kernel) else 1
    k = math.prod(kernel) // max(o, 1)
    return 1, out.elements // max(o, 1), k, o, dtype


def _vector_flops(instr: Instruction, ops: list[Shape], out: Shape, reducer: int = 1) -> tuple[float, float]:
    """(FLOPs, transcendentals) of an element-wise or data-movement op (``reducer``: FLOPs per reduction)."""
    if instr.opcode in TRANSCENDENTAL:
        return 0.0, float(out.elements)
    if instr.opcode in ELEMENTWISE:
        return float(out.elements), 0.0
    if instr.opcode == "reduce":  # one FLOP per input element folded into another
        return float(reducer * max(0, sum(s.elements for s in ops[: max(1, len(ops) // 2)]) - out.elements)), 0.0
    if instr.opcode == "reduce-window":
        size = [int(v) for v in re.findall(r"\d+", instr.attrs.get("window", "").split("stride")[0])]
        return float(reducer * out.elements * max(0, math.prod(size) - 1)), 0.0
    return 0.0, 0.0


def _reduction_flops(opcode: str, out: Shape) -> float:
    """All-reduce and reduce-scatter add one FLOP per element of their result (as XLA counts them)."""
    return float(out.elements) if opcode in ("all-reduce", "reduce-scatter") else 0.0


def _moved(instr: Instruction, ops: list[Shape], out: Shape) -> tuple[float, float]:
    """HBM bytes (read, written) of an unfused op: in-place updates and slices move only their part."""
    if instr.opcode == "dynamic-update-slice":
        update = ops[1].nbytes
        return update + _bytes(ops[2:]), update
    if instr.opcode in _SLICES:
        return out.nbytes + _bytes(ops[1:]), out.nbytes
    return _bytes(ops), out.nbytes


def _param_read(comp: Computation, param: Instruction, src: dict[str, Shape]) -> float:
    """HBM bytes a fusion reads of one parameter: all of it, or only the slices when nothing else uses it."""
    users = [i for i in comp.instructions if param.name in i.operands]
    if users and all(u.opcode in _SLICES and u.operands[0] == param.name for u in users):
        return sum(src[u.name].nbytes for u in users)
    if users and all(u.opcode == "dynamic-update-slice" and u.operands[0] == param.name for u in users):
        return 0.0  # updated in place: the untouched part is never read
    return src[param.name].nbytes


def program_totals(costing: Costing, unroll: bool = True) -> dict[str, float]:
    """Work of one device over the whole program: ``flops`` (matmul and element-wise), ``matmul_flops``,
    ``transcendentals``, ``bytes`` (HBM reads and writes of every op, collectives' operands and results
    included) and ``collective_bytes``. ``unroll`` counts each loop body once per trip; without it once
    (as XLA's ``cost_analysis()`` does)."""
    totals = dict.fromkeys(("flops", "matmul_flops", "transcendentals", "bytes", "collective_bytes"), 0.0)
    _add_totals(costing, costing.module.entry_computation, None, 1.0, unroll, totals, 0)
    return totals


def _add_totals(costing: Costing, comp: Computation, params: tuple[Shape, ...] | None, times: float, unroll: bool,
                totals: dict[str, float], depth: int) -> None:
    if depth > 64:
        raise PodsimError(f"{costing.module.source}: computations call each other more than 64 deep (recursion?)")
    src, costs = costing.computation(comp, params)
    for instr in comp.instructions:
        cost = costs[instr.name]
        if instr.opcode == "while":
            body = costing.module.computation(instr.attrs.get("body", "").lstrip("%"))
            trips = (instr.trip_count() or 1) if unroll else 1
            carried = (src[instr.operands[0]],) if instr.operands else None
            _add_totals(costing, body, carried, times * trips, unroll, totals, depth + 1)
        elif instr.opcode in ("call", "conditional"):
            operands = instr.operands[1:2] if instr.opcode == "conditional" else instr.operands
            callee = costing.module.computation(instr.called()[0])
            _add_totals(costing, callee, tuple(src[o] for o in operands), times, unroll, totals, depth + 1)
        else:
            totals["flops"] += times * cost.flops
            totals["matmul_flops"] += times * sum(2.0 * b * m * k * n for b, m, k, n, _ in cost.matmuls)
            totals["transcendentals"] += times * cost.transcendentals
            totals["bytes"] += times * cost.nbytes
            if cost.kind not in ("matmul", "elementwise", "free", "control", "unsupported"):
                totals["collective_bytes"] += times * cost.nbytes
