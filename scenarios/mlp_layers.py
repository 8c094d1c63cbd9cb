"""How should two MLP layers be sharded: keep H sharded and reduce once, or gather H?

``H = relu(A @ W_in)``, ``C = H @ W_out`` on a ``model`` axis of M chips. The book's layout shards
W_in by columns and W_out by rows: H stays sharded ``[B, F_X]`` and only the final partial sums are
reduced -- by AllReduce (every chip gets C) or ReduceScatter (C split over X, half the link bytes). The
naive layout shards W_out by columns and must AllGather H ``[B, F]`` first, F/D times more data.
Each strategy is simulated (matmuls on the MXU, relu on the VPU, collectives on the links), priced
by closed form, and checked on real arrays against numpy (``verified``).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from simulator.engine.system import System, resolve_chip
from simulator.hardware.specs import ChipSpec
from simulator.report.result import Result
from simulator.workloads.mesh import Mesh, default_topology_for, parse_mesh
from simulator.workloads.sharding import (
    check_blocks,
    parse_matmul,
    run_strategy,
    strategies,
    validate,
    verification_sizes,
)

LAYER_1 = "A[B,D]@W[D,F_X]->H[B,F_X]"
#: layout name -> (layer-2 spec, operands gathered before the local matmul)
LAYOUTS = {
    "row-sharded W_out, AllReduce": ("H[B,F_X]@W[F_X,D]->C[B,D]", []),
    "row-sharded W_out, ReduceScatter": ("H[B,F_X]@W[F_X,D]->C[B_X,D]", []),
    "column-sharded W_out, gather H": ("H[B,F_X]@W[F,D_X]->C[B,D_X]", ["H"]),
}


def _layer(system: System, mesh: Mesh, text: str, gathered: list[str], sizes: dict[str, int],
           arrays: Any = None) -> dict[str, Any]:
    spec = parse_matmul(text)
    validate(spec, mesh, sizes)
    names = {"A": spec.a.name, "B": spec.b.name}
    strategy = next(s for s in strategies(spec) if [names[p.tensor] for p in s.pre] == gathered)
    return {"spec": spec, "strategy": strategy,
            "run": run_strategy(strategy, spec, sizes, system, mesh, arrays=arrays)}


def _simulate(chip: ChipSpec, topology: str, mesh_text: str, sizes: dict[str, int], layout: str,
              trace: bool, arrays: Any = None) -> tuple[System, dict[str, Any]]:
    system = System(chip, topology=topology, trace=trace)
    mesh = Mesh(parse_mesh(mesh_text), system.graph)
    first = _layer(system, mesh, LAYER_1, [], sizes, arrays[:2] if arrays else None)
    rows, cols = first["run"]["shape"]
    for c in system.chips:
        c.vector(rows * cols, "relu")  # one op per element of H, on the VPU
    system.run()
    h = np.maximum(arrays[0] @ arrays[1], 0) if arrays else None
    text, gathered = LAYOUTS[layout]
    second = _layer(system, mesh, text, gathered, sizes, (h, arrays[2]) if arrays else None)
    return system, {"first": first, "second": second, "mesh": mesh}


def _closed_form(chip: ChipSpec, parts: dict[str, Any], sizes: dict[str, int], m: int) -> float:
    logs = parts["first"]["run"]["log"] + parts["second"]["run"]["log"]
    relu = sizes["B"] * sizes["F"] / m / chip.vpu_flops_per_s
    return sum(e["analytic_s"] for e in logs) + relu


def run(*, B: int = 2048, D: int = 4096, F: int = 16384, M: int = 4, topology: str | None = None,  # noqa: N803
        verify: bool = True, chip: str | ChipSpec = "tpu-v5e", trace: bool = True) -> Result:
    """Simulate the three layouts of the two-layer MLP on ``M`` chips of a ``model`` axis."""
    spec = resolve_chip(chip)
    mesh_text = f"X={M}"
    topology = topology or default_topology_for(parse_mesh(mesh_text), spec)
    sizes = {"B": B, "D": D, "F": F}
    rows, chosen_system = [], None
    for name, (layout, _) in LAYOUTS.items():
        system, parts = _simulate(spec, topology, mesh_text, sizes, name, trace)
        comm = [e for p in ("first", "second") for e in parts[p]["run"]["log"] if e["kind"] != "matmul"]
        rows.append({"name": name, "layer_2": layout, "time_s": system.env.now,
                     "analytic_s": _closed_form(spec, parts, sizes, M),
                     "collectives": [e["step"] for e in comm], "communication_s": sum(e["time_s"] for e in comm),
                     "link_bytes": sum(system.network.link_bytes().values())})
        if chosen_system is None or system.env.now < chosen_system.env.now:
            chosen_system = system
    if verify:
        _verify_all(rows, spec, topology, mesh_text, sizes)
    best = min(rows, key=lambda r: r["time_s"])
    naive = rows[-1]
    return Result(
        scenario="mlp_layers", params=dict(B=B, D=D, F=F, M=M, topology=topology, chip=spec.name),
        metrics=chosen_system.metrics(),
        extra={"strategies": rows, "chosen": best["name"], "verified": all(r.get("verified") for r in rows)
               if verify else None,
               "placement": Mesh(parse_mesh(mesh_text), chosen_system.graph).describe()["placement"],
               "speedup_over_gathering_h": naive["time_s"] / best["time_s"]},
        trace=chosen_system.trace,
        headline=(f"{best['name']} wins: {best['time_s'] * 1e6:.4g} us vs {naive['time_s'] * 1e6:.4g} us gathering H "
                  f"({naive['link_bytes'] / max(best['link_bytes'], 1):.3g}x the bytes over links)"),
    )


def _verify_all(rows: list[dict[str, Any]], chip: ChipSpec, topology: str, mesh_text: str,
                sizes: dict[str, int]) -> None:
    rng = np.random.default_rng(0)
    for row in rows:
        probe = Mesh(parse_mesh(mesh_text), System(chip, topology=topology).graph)
        small = verification_sizes(parse_matmul(row["layer_2"]), probe, sizes)
        a = rng.standard_normal((small["B"], small["D"]))
        w_in, w_out = rng.standard_normal((small["D"], small["F"])), rng.standard_normal((small["F"], small["D"]))
        _, parts = _simulate(chip, topology, mesh_text, small, row["name"], False, (a, w_in, w_out))
        second = parts["second"]
        reference = np.maximum(a @ w_in, 0) @ w_out
        error = check_blocks(parts["mesh"], second["run"]["blocks"], reference, second["strategy"].c,
                             second["strategy"].partial)
        row["verified"] = bool(error <= 1e-9 * max(1.0, float(np.abs(reference).max())) * small["F"])
        row["verify_max_error"] = error

