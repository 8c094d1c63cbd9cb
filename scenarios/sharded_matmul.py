"""Which way of running a sharded matmul is cheapest, and is its result right?

Given the book's notation (``A[I_X, J] @ B[J, K_Y] -> C[I_X, K_Y]``), sizes and a mesh, podsim lists
every strategy -- no communication, AllGather an operand first, local matmul then AllReduce or
ReduceScatter of partial sums -- with its collectives, simulated and closed-form time, compute and
communication split and the busiest link's bytes; picks the cheapest by closed form; and runs it on
real arrays through the simulated collectives against numpy (``verified``). With ``cases`` the four
book cases run side by side at the same sizes.
"""
from __future__ import annotations

from typing import Any

from simulator.engine.system import System, resolve_chip
from simulator.errors import PodsimError
from simulator.hardware.specs import ChipSpec
from simulator.report.result import Result
from simulator.units import format_quantity
from simulator.workloads.mesh import Mesh, default_topology_for, parse_mesh
from simulator.workloads.sharding import parse_matmul, run_strategy, sharded_matmul, strategies

BOOK_CASES = {
    "no communication": "A[I_X,J]@B[J,K_Y]->C[I_X,K_Y]",
    "one operand sharded on the contraction": "A[I,J_X]@B[J,K]",
    "both sharded on the contraction": "A[I,J_X]@B[J_X,K]->C[I,K]",
    "both want the same axis": "A[I_X,J]@B[J,K_X]",
}


DEFAULT_SPEC = "A[I,J_X]@B[J_X,K]->C[I,K]"


def run(*, spec: str = DEFAULT_SPEC, I: int = 1024, J: int = 2048, K: int = 4096,  # noqa: E741
        mesh: str = "X=4,Y=2", topology: str | None = None, dtype: str = "bf16", verify: bool = True,
        cases: bool = True, chip: str | ChipSpec = "tpu-v5e", trace: bool = True) -> Result:
    """Compare the strategies of ``spec`` (and, with ``cases``, of the four book cases)."""
    spec_obj = parse_matmul(spec)
    sizes = _sizes(spec_obj, I, J, K)
    chip_spec = resolve_chip(chip)
    topology = topology or default_topology_for(parse_mesh(mesh), chip_spec)
    try:
        main = sharded_matmul(spec_obj, sizes, mesh, chip_spec, topology, dtype, verify)
    except PodsimError as err:  # about the spec, which the user never wrote: say it is the default
        text = str(err)
        if spec == DEFAULT_SPEC and (text.startswith(("A[", "B[", "C[")) or "is not in mesh" in text):
            raise PodsimError(f"the default spec {spec} (--set spec=... gives another) on mesh {mesh}: "
                              f"{text}") from None
        raise
    system = System(chip_spec, topology=topology, trace=trace)
    chosen = next(s for s in strategies(spec_obj) if s.name == main["chosen"])
    run_strategy(chosen, spec_obj, sizes, system, Mesh(parse_mesh(mesh), system.graph), dtype)
    extra: dict[str, Any] = {k: main[k] for k in ("strategies", "chosen", "verified", "concatenation_fails")}
    extra["verified_sizes"] = main.get("verified_sizes")
    if cases:  # the book cases use X and Y; on a mesh without both, those that need a missing axis are skipped
        axes = set(parse_mesh(mesh).names)
        runnable = {name: text for name, text in BOOK_CASES.items() if _axes(parse_matmul(text)) <= axes}
        extra["cases"], why = {}, {name: "needs mesh axes X and Y" for name in BOOK_CASES if name not in runnable}
        for name, text in runnable.items():  # a book case the sizes do not divide is skipped with its reason
            try:
                extra["cases"][name] = _summary(sharded_matmul(text, _sizes(parse_matmul(text), I, J, K), mesh,
                                                               chip_spec, topology, dtype, verify))
            except PodsimError as err:
                why[name] = f"{text}: {err}"
        extra["cases_skipped"] = [name for name in BOOK_CASES if name in why]
        extra["cases_skipped_why"] = why
    best = min(main["strategies"], key=lambda s: s["analytic_s"])
    return Result(
        scenario="sharded_matmul",
        params=dict(spec=spec, I=I, J=J, K=K, mesh=mesh, topology=topology, dtype=dtype, chip=chip_spec.name),
        metrics=system.metrics(), extra=extra, trace=system.trace,
        headline=_headline(main, best), details=_details(main, extra.get("cases"), extra.get("cases_skipped_why")),
    )


def _sizes(spec: Any, i: int, j: int, k: int) -> dict[str, int]:
    names = [spec.a.dims[0].name, spec.a.dims[1].name, spec.b.dims[1].name]
    if len(set(names)) != 3:
        raise PodsimError(f"{spec}: expected three distinct dimension names, got {names}")
    return dict(zip(names, (i, j, k), strict=True))


def _axes(spec: Any) -> set[str]:
    """Every mesh axis the spec names (in shardings and partial sums)."""
    arrays = [a for a in (spec.a, spec.b, spec.c) if a is not None]
    return {axis for a in arrays for d in a.dims for axis in d.axes} | {axis for a in arrays for axis in a.partial}


def _summary(r: dict[str, Any]) -> dict[str, Any]:
    return {"spec": r["spec"], "chosen": r["chosen"], "verified": r["verified"],
            "strategies": [{k: s[k] for k in ("name", "time_s", "analytic_s", "compute_s", "communication_s",
                                              "max_link_bytes", "output")} for s in r["strategies"]]}


def strategy_table(strategies: list[dict[str, Any]], chosen: str) -> list[str]:
    """One line per candidate strategy (``*`` marks the chosen one): closed form, simulated, compute and
    communication time, then the strategy, whose name lists its collectives in order."""
    def time(seconds: float) -> str:
        return format_quantity(seconds, "s")

    header = f"  {'closed form':>11} {'simulated':>10} {'compute':>10} {'communication':>14}"
    lines = [header + "  strategy (collectives in order)"]
    for s in sorted(strategies, key=lambda s: s["analytic_s"]):
        mark = "*" if s["name"] == chosen else " "
        lines.append(f"{mark} {time(s['analytic_s']):>11} {time(s['time_s']):>10} {time(s['compute_s']):>10} "
                     f"{time(s['communication_s']):>14}  {s['name']}")
    return lines


def _details(main: dict[str, Any], cases: dict[str, Any] | None, skipped: dict[str, str] | None = None) -> list[str]:
    verified = {True: "matches numpy", False: "DOES NOT match numpy", None: "not run on arrays"}[main["verified"]]
    small = main.get("verified_sizes")
    if main["verified"] is not None and small and small != main["sizes"]:
        verified += " at " + ", ".join(f"{k}={v}" for k, v in small.items())
    lines = [f"strategies of {main['spec']} (* chosen; result {verified}):"]
    lines += [f"  {line}" for line in strategy_table(main["strategies"], main["chosen"])]
    if cases:
        lines.append("the book's four cases at the same sizes (chosen strategy, simulated time):")
        for name, case in cases.items():
            best = next(s for s in case["strategies"] if s["name"] == case["chosen"])
            lines.append(f"  {name}: {case['spec']}: {case['chosen']}, {format_quantity(best['time_s'], 's')}")
    for name, why in (skipped or {}).items():
        lines.append(f"  skipped {name}: {why}")
    return lines


def _headline(main: dict[str, Any], best: dict[str, Any]) -> str:
    others = [s for s in main["strategies"] if s is not best]
    why = f"{best['communication_s'] * 1e6:.4g} us of communication, {best['compute_s'] * 1e6:.4g} us of compute"
    if not others:
        return f"{main['spec']}: {best['name']} is the only strategy ({why})"
    runner_up = min(others, key=lambda s: s["analytic_s"])
    return (f"{main['spec']}: {best['name']} wins ({best['time_s'] * 1e6:.4g} us: {why}); next best "
            f"{runner_up['name']} takes {runner_up['time_s'] / best['time_s']:.2f}x as long")
