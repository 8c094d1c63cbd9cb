"""From a JAX function to a simulated step: lower it on CPU with fake devices, then `simulate_hlo`.

Needs the ``podsim[jax]`` extra (the HLO reader itself does not). JAX runs on the host CPU with as
many fake devices as the mesh has (``--xla_force_host_platform_device_count``, set before JAX starts;
if JAX already started with too few, the error says how to start it). The program is compiled for a
`jax.sharding.Mesh` of those devices in order, so device d of the HLO is row-major mesh index d --
the order `simulate_hlo` lays on the topology with the same mesh.

Example::

    prog = compile_jax(lambda a, b: a @ b, ((1024, 2048), "bf16", ("X", None)),
                       ((2048, 512), "bf16", (None, "Y")), mesh="X=4,Y=2")
    result = simulate_jax(lambda a, b: a @ b, ..., mesh="X=4,Y=2", chip="tpu-v5e")
"""
from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from simulator.errors import PodsimError
from simulator.report.result import Result
from simulator.workloads.mesh import parse_mesh

FLAG = "--xla_force_host_platform_device_count"
#: XLA options that only shorten LLVM's code generation (the HLO text stays the same)
FAST_COMPILE = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}
_DTYPES = {"bf16": "bfloat16", "fp32": "float32", "f32": "float32", "f16": "float16", "int8": "int8",
           "s32": "int32", "fp8": "float8_e4m3fn"}


@dataclass
class CompiledProgram:
    """A function compiled for a mesh of fake CPU devices: its HLO text and XLA's own cost analysis."""

    text: str
    cost_analysis: dict[str, float]
    mesh: str
    n_devices: int


def jax_for(n_devices: int) -> Any:
    """The ``jax`` module, started (if it has not been) with at least ``n_devices`` CPU devices."""
    flags = os.environ.get("XLA_FLAGS", "")
    if FLAG not in flags:  # read when JAX starts its CPU backend (its first operation), not at import
        os.environ["XLA_FLAGS"] = f"{flags} {FLAG}={n_devices}".strip()
    try:
        import jax
    except ImportError:
        raise PodsimError("simulating a JAX function needs JAX: pip install 'podsim[jax]' (reading HLO text "
                          "with podsim hlo does not)") from None
    have = len(jax.devices("cpu"))
    if have < n_devices:
        raise PodsimError(f"JAX started with {have} CPU device(s) but the mesh needs {n_devices}; start Python "
                          f"with XLA_FLAGS={FLAG}={n_devices} (set before JAX is first imported)")
    return jax


def compile_jax(fn: Callable[..., Any], *args: Any, mesh: str, out_specs: Any = None) -> CompiledProgram:
    """Compile ``fn`` for ``mesh`` (``X=4,Y=2``) on fake CPU devices; returns its HLO and cost analysis.

    Each argument is a ``jax.ShapeDtypeStruct`` (with its sharding) or ``(shape, dtype, spec)``: a shape
    tuple, a dtype (``bf16``, ``fp32``, ... or a numpy dtype) and a partition spec -- one mesh axis name
    (or a tuple of names, or None) per dimension. ``out_specs`` gives the output's specs the same way
    (one spec, or a list of specs for a function that returns a list; None lets XLA choose).
    """
    import numpy as np

    spec = parse_mesh(mesh)
    if any(p is not None for p in spec.placement):
        raise PodsimError(f"mesh {mesh!r}: placement (@) belongs to simulate_hlo, not to the JAX mesh")
    n = math.prod(spec.sizes)
    jax = jax_for(n)
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    devices = np.array(jax.devices("cpu")[:n]).reshape(spec.sizes)
    jmesh = Mesh(devices, spec.names)
    abstract = [_abstract(jax, a, jmesh, NamedSharding, PartitionSpec) for a in args]
    out = None
    if out_specs is not None:  # a list: one spec per output; anything else: the one output's spec
        shardings = [NamedSharding(jmesh, _pspec(PartitionSpec, s))
                     for s in (out_specs if isinstance(out_specs, list) else [out_specs])]
        out = shardings if isinstance(out_specs, list) else shardings[0]
    # podsim never runs the binary: skip LLVM's optimisations (the HLO text is the same, compiling is faster)
    lowered = jax.jit(fn, out_shardings=out).lower(*abstract)
    try:
        compiled = lowered.compile(FAST_COMPILE)
    except Exception:  # a JAX without these options: compile as it likes (a real failure raises again)
        compiled = lowered.compile()
    costs = compiled.cost_analysis()
    costs = costs[0] if isinstance(costs, list) else costs
    return CompiledProgram(compiled.as_text(), {k: float(v) for k, v in (costs or {}).items()}, mesh, n)


def simulate_jax(fn: Callable[..., Any], *args: Any, mesh: str, out_specs: Any = None, **options: Any) -> Result:
    """`compile_jax`, then `simulator.frontend.hlo.simulate_hlo` with the same mesh; ``options`` go to
    ``simulate_hlo`` (``chip``, ``topology``, ``dtype``, ``async_collectives``, ...). The result's
    ``xla_cost_analysis`` holds XLA's own figures beside podsim's ``per_device_as_compiled``."""
    from simulator.frontend.hlo import simulate_hlo

    program = compile_jax(fn, *args, mesh=mesh, out_specs=out_specs)
    result = simulate_hlo(program.text, mesh=mesh, **options)
    result.extra["xla_cost_analysis"] = program.cost_analysis
    return result


def _pspec(pspec: Any, spec: Any) -> Any:
    if isinstance(spec, pspec):
        return spec
    if spec is None:
        return pspec()
    return pspec(*[tuple(s) if isinstance(s, list) else s for s in spec])


def _abstract(jax: Any, arg: Any, jmesh: Any, named: Any, pspec: Any) -> Any:
    if isinstance(arg, jax.ShapeDtypeStruct):
        return arg
    if not isinstance(arg, Sequence) or len(arg) != 3:
        raise PodsimError(f"argument {arg!r}: give a jax.ShapeDtypeStruct or (shape, dtype, spec), e.g. "
                          "((1024, 2048), 'bf16', ('X', None))")
    shape, dtype, spec = arg
    dtype = getattr(jax.numpy, _DTYPES.get(dtype, dtype)) if isinstance(dtype, str) else dtype
    return jax.ShapeDtypeStruct(tuple(shape), dtype, sharding=named(jmesh, _pspec(pspec, spec)))
