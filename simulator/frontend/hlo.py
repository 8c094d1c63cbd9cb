"""`simulate_hlo`: a compiled XLA program (HLO text) run on a pod, reported as a `Result`.

The result holds the step time, the time per op kind (matmul, elementwise, each collective kind), the
top ops by time with their HLO names and source lines, every collective with its groups and bytes,
the ops podsim skipped (with what they would have cost), the program's FLOPs and bytes per device
(``per_device``: as simulated; ``per_device_as_compiled``: every shape as written and loop bodies once,
XLA's own ``cost_analysis()`` accounting), and the usual metrics and trace (so ``--gantt``, ``--trace``
and ``--csv`` work as for scenarios).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from simulator.engine.system import System, resolve_chip
from simulator.errors import PodsimError
from simulator.hardware.specs import ChipSpec
from simulator.report.result import Result
from simulator.units import format_quantity
from simulator.workloads.hlo import Module, parse_hlo, read_hlo
from simulator.workloads.hlo.cost import Costing, program_totals
from simulator.workloads.hlo.executor import Executor, HloRun
from simulator.workloads.hlo.placement import Placement
from simulator.workloads.mesh import default_topology_for, parse_mesh

KIND_ORDER = ("matmul", "elementwise", "all_gather", "reduce_scatter", "all_reduce", "all_to_all",
              "collective_permute", "broadcast")


def load_program(program: Module | str | Path) -> Module:
    """A parsed module from a `Module`, HLO text, or the path of an HLO text file."""
    if isinstance(program, Module):
        return program
    if isinstance(program, str) and "HloModule" in program:
        return parse_hlo(program)
    if isinstance(program, (str, Path)):
        return read_hlo(program)
    raise PodsimError(f"program={type(program).__name__}: give HLO text, the path of an HLO text file or a Module")


def simulate_hlo(program: Module | str | Path, *, chip: str | ChipSpec = "tpu-v5e", topology: Any = None,
                 mesh: str | None = None, placement: Sequence[int] | None = None, dtype: str = "source",
                 async_collectives: bool = False, calibrated: bool = False, trace: bool = True,
                 top: int = 10) -> Result:
    """Simulate one execution of ``program`` on ``topology`` (a spec such as ``torus:4x2``; default: the
    chip's slice of ``mesh``'s shape).

    ``mesh`` (``X=4,Y=2``) says how the program's device ids, row-major over its JAX mesh, lie on the
    topology (as ``--mesh`` lays a mesh); ``placement`` lists each device's chip instead. ``dtype``:
    ``source`` (default: bf16 work the CPU backend widened to f32 counts as bf16, its inserted converts
    are free) or ``compiled`` (every shape as written). ``async_collectives`` overlaps synchronous
    collectives with the compute after them (see `simulator.workloads.hlo.executor.Executor`).
    """
    module = load_program(program)
    spec = resolve_chip(chip)
    if topology is None:
        if mesh is None:
            raise PodsimError("give a topology (e.g. torus:4x2) or a mesh (e.g. X=4,Y=2) to lay the program on")
        topology = default_topology_for(parse_mesh(mesh), spec)
    system = System(spec, topology=topology, trace=trace, calibrated=calibrated)
    where = Placement(system, module.n_devices, mesh, placement)
    run = Executor(module, where, dtype, async_collectives).run()
    costing = Costing(module, dtype)
    extra = _extra(module, run, costing, where, top)
    params = {"program": module.source, "module": module.name, "chip": spec.name, "topology": str(topology),
              "mesh": mesh, "placement": list(placement) if placement is not None else None, "dtype": dtype,
              "async_collectives": async_collectives, "calibrated": calibrated}
    headline = (f"{module.name} on {module.n_devices} x {spec.name} ({topology}): "
                f"{format_quantity(run.step_time_s, 's')} per step")
    return Result("hlo", params, system.metrics(), extra=extra, trace=system.trace, headline=headline,
                  details=details(extra))


def _extra(module: Module, run: HloRun, costing: Costing, where: Placement, top: int) -> dict[str, Any]:
    step = run.step_time_s
    return {"step_time_s": step, "devices": module.n_devices, "placement": where.describe(),
            "breakdown": breakdown(run), "top_ops": top_ops(run, module, top),
            "collectives": [{"name": name, **row} for name, row in run.collectives.items()],
            "skipped": [{"name": name, **row} for name, row in run.skipped.items()],
            "warnings": run.warnings, "per_device": program_totals(costing),
            "per_device_as_compiled": program_totals(Costing(module, "compiled"), unroll=False)}


def breakdown(run: HloRun) -> dict[str, dict[str, float]]:
    """Per op kind: ops run on a device, seconds the device spent on them (collectives: waiting for them),
    share of the step; collectives add ``in_flight_s`` (start to finish, overlapped or not)."""
    out: dict[str, dict[str, float]] = defaultdict(lambda: {"ops": 0, "time_s": 0.0})
    for row in run.by_op.values():
        out[row["kind"]]["ops"] += row["count"]
        out[row["kind"]]["time_s"] += row["time_s"]
    for row in run.collectives.values():
        out[row["kind"]]["in_flight_s"] = out[row["kind"]].get("in_flight_s", 0.0) + row["in_flight_s"]
    step = run.step_time_s
    for row in out.values():
        row["share"] = row["time_s"] / step if step > 0 else 0.0
    order = {k: i for i, k in enumerate(KIND_ORDER)}
    return dict(sorted(out.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0])))


def top_ops(run: HloRun, module: Module, top: int) -> list[dict[str, Any]]:
    """The ``top`` instructions by time on a device (all their executions together)."""
    rows = sorted(run.by_op.items(), key=lambda kv: (-kv[1]["time_s"], kv[0]))[:top]
    step = run.step_time_s
    return [{"name": name, **row, "share": row["time_s"] / step if step > 0 else 0.0} for name, row in rows]


def details(extra: dict[str, Any]) -> list[str]:
    """Summary lines: placement, time by op kind, top ops, skipped ops and warnings."""
    per = extra["per_device"]
    lines = [f"{extra['devices']} devices, {extra['placement']}",
             f"per device: {format_quantity(per['flops'], 'FLOP')} ({format_quantity(per['matmul_flops'], 'FLOP')}"
             f" on the MXU), {format_quantity(per['bytes'], 'B')} through HBM and collectives",
             "time by op kind (per device; collectives: time the device waited, and start to finish):",
             f"  {'kind':<19}{'ops':>6}{'time':>12}{'share':>8}{'in flight':>12}"]
    for kind, row in extra["breakdown"].items():
        flight = format_quantity(row["in_flight_s"], "s") if "in_flight_s" in row else ""
        lines.append(f"  {kind:<19}{row['ops']:>6}{format_quantity(row['time_s'], 's'):>12}"
                     f"{100 * row['share']:>7.1f}%{flight:>12}".rstrip())
    if extra["top_ops"]:
        lines.append("top ops by time:")
    for row in extra["top_ops"]:
        where = row["source"] or f"line {row['line']}"
        name = _short(row["op_name"], 48)
        lines.append(f"  {format_quantity(row['time_s'], 's'):>10} {100 * row['share']:5.1f}%  %{row['name']:<24} "
                     f"{row['kind']:<14} x{row['count']:<4} {where}" + (f"  ({name})" if name else ""))
    groups: dict[tuple, list[float]] = defaultdict(lambda: [0, 0.0])
    for row in extra["collectives"]:
        key = (row["kind"], row.get("over", "point to point"), row["groups"], row["group_size"])
        groups[key][0] += row["count"]
        groups[key][1] += row["count"] * row["bytes"]
    for (kind, over, n, size), (count, nbytes) in groups.items():
        lines.append(f"collectives: {count} x {kind} over {over} ({n} group(s) of {size}), "
                     f"{format_quantity(nbytes, 'B')} in all")
    lines += [f"warning: {w}" for w in extra["warnings"]]
    return lines


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."
