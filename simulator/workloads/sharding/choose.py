"""Compare every strategy of a sharded matmul by simulation, choose the cheapest, verify it numerically.

Each candidate is priced by the closed forms of its collectives plus the local matmul time (padded
FLOPs over the MXU peak; operands assumed resident) and simulated on the topology; the cheapest by
closed form is run on real arrays and checked against numpy.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from simulator.errors import PodsimError
from simulator.hardware.specs import check_dtype
from simulator.workloads.mesh import Mesh
from simulator.workloads.sharding.candidates import Strategy, strategies
from simulator.workloads.sharding.execute import check_blocks, run_strategy, verification_sizes
from simulator.workloads.sharding.notation import ArraySpec, Dim, MatmulSpec, parse_matmul, validate

if TYPE_CHECKING:  # annotations only: no import at run time (and no cycle)
    from simulator.engine.system import System


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
    out = {"spec": str(spec), "mesh": probe.text, **probe.describe(), "sizes": dict(sizes),
           "strategies": rows, "chosen": rows[best]["name"], "verified": None, "concatenation_fails": None}
    if verify:
        small = verification_sizes(spec, probe, sizes)
        out["verified_sizes"] = small
        out.update(_verify(candidates[best], spec, small, fresh, dtype, seed))
    return out


def _price(s: Strategy, spec: MatmulSpec, sizes: dict[str, int], system: System, mesh: Mesh,
           dtype: str) -> dict[str, Any]:
    run = run_strategy(s, spec, sizes, system, mesh, dtype)
    comm = [e for e in run["log"] if e["kind"] != "matmul"]
    compute = [e for e in run["log"] if e["kind"] == "matmul"]
    links = system.network.link_bytes() if system.network is not None else {}
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
