"""`Result`: what a scenario returns -- its parameters echoed, metrics, closed forms, the trace.

Simulated and closed-form numbers stand side by side: ``metrics`` come from the trace, ``extra``
carries scenario numbers such as ``analytic_s`` or ``critical_batch``. `to_json` flattens both into
one JSON object with ``scenario`` and ``params``.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from simulator.analytic import EXPOSED_MEANING
from simulator.engine.trace import Trace
from simulator.errors import NonFiniteError, PodsimError
from simulator.hardware.specs import ChipSpec
from simulator.report.links import is_link, link_groups, link_sort_key
from simulator.units import format_quantity


def jsonable(value: Any, *, strict: bool = False, where: str = "result") -> Any:
    """``value`` with specs, tuples and numpy scalars made JSON-safe. A non-finite float becomes None, or
    with ``strict`` (what commands print) raises `NonFiniteError` naming its place (``result.busy_s.hbm``):
    a number with no finite value must be replaced by None, with a note, where it is computed."""
    if isinstance(value, ChipSpec):
        return value.name
    if isinstance(value, dict):
        return {str(k): jsonable(v, strict=strict, where=f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v, strict=strict, where=f"{where}[{i}]") for i, v in enumerate(value)]
    if hasattr(value, "item") and callable(value.item):  # numpy scalar
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        if strict:
            raise NonFiniteError(f"{where} is {value!r}, which no output may hold")
        return None
    return value


def dumps_json(value: Any) -> str:
    """``value`` as the indented, strict JSON a command prints (`NonFiniteError` for inf or NaN)."""
    return json.dumps(jsonable(value, strict=True), indent=2, allow_nan=False)


@dataclass
class Result:
    """One scenario run: ``params`` echo the inputs so a result can always be traced to them."""

    scenario: str
    params: dict[str, Any]
    metrics: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)
    trace: Trace | None = None
    headline: str = ""  #: one sentence: what won, by how much, and why
    details: list[str] = field(default_factory=list)  #: lines the text summary shows (a table, notes)

    def __getitem__(self, key: str) -> Any:
        return self.extra[key] if key in self.extra else self.metrics[key]

    def to_json(self) -> dict[str, Any]:
        """One flat JSON-ready dict: scenario, params, metrics, then scenario-specific keys."""
        out: dict[str, Any] = jsonable({"scenario": self.scenario, "params": self.params, **self.metrics,
                                        **self.extra})
        return out

    def dumps(self) -> str:
        """The flat dict of `to_json` as strict JSON text: `NonFiniteError` for inf or NaN anywhere."""
        return dumps_json({"scenario": self.scenario, "params": self.params, **self.metrics, **self.extra})

    def summary(self, links: str = "grouped") -> str:
        """Human lines: headline, time against closed form, `details`, busy time per unit, links, bytes.

        ``links="grouped"`` folds the link directions into one row per kind (ICI axis and direction,
        DCN, NVLink, IB) with count, min / median / max busy time and the busiest three;
        ``links="all"`` lists every busy link direction on its own line.
        """
        if links not in LINK_VIEWS:
            raise PodsimError(f"links={links!r}; valid: {', '.join(LINK_VIEWS)}")
        m = self.metrics
        lines = [f"{self.scenario}: {self.headline}" if self.headline else self.scenario]
        if "end_to_end_s" in m:  # absent when nothing was simulated (closed forms only)
            lines.append(f"  end to end  {format_quantity(m['end_to_end_s'], 's')}")
        if "analytic_s" in self.extra and self.extra["analytic_s"] is not None:
            lines.append(f"  closed form {format_quantity(self.extra['analytic_s'], 's')}")
        lines += [f"  {line}" for line in self.details]
        lines += [f"  note: {note}" for note in m.get("notes", ())]  # a topology that is not the chip's own
        if "end_to_end_s" not in m:
            return "\n".join(lines + ["  (nothing simulated: closed forms only)"])
        if m["busy_s"] is None:
            return "\n".join(lines + ["  (tracing off: no busy times)"])
        lines.append(f"  overlap {format_quantity(m['overlap_s'], 's')}, exposed {format_quantity(m['exposed_s'], 's')}"
                     f", bounds [{format_quantity(m['lower_bound_s'], 's')}, "
                     f"{format_quantity(m['upper_bound_s'], 's')}]")
        units = sorted((u for u in m["busy_s"] if not is_link(u)), key=_unit_key)
        shown = units + (sorted((u for u in m["busy_s"] if is_link(u)), key=link_sort_key) if links == "all" else [])
        for unit in shown:
            busy = m["busy_s"][unit]
            lines.append(f"  busy {unit:<12} {format_quantity(busy, 's'):>12}  ({100 * m['utilization'][unit]:.1f}%)")
        if links == "grouped":
            lines += self._link_lines()
        for interface, nbytes in m["bytes"].items():
            lines.append(f"  bytes {interface:<11} {format_quantity(nbytes, 'B'):>12}")
        return "\n".join([*lines, f"  ({EXPOSED_MEANING})"])

    def _link_lines(self) -> list[str]:
        info = self.trace.links if self.trace is not None else {}
        groups = link_groups(self.metrics["busy_s"], info)
        if not groups:
            return []
        e2e = self.metrics["end_to_end_s"]
        width = max(len(g.label) for g in groups)
        lines = [f"  links: {sum(g.count for g in groups)} busy directions, busy time by group "
                 "(--links all lists each)",
                 f"    {'group':<{width}} {'count':>5} {'min':>10} {'median':>10} {'max':>10} {'':6}  busiest"]
        for g in groups:
            peak = f"({100 * g.max_s / e2e:.0f}%)" if e2e > 0 else ""
            lines.append(f"    {g.label:<{width}} {g.count:>5} {format_quantity(g.min_s, 's'):>10} "
                         f"{format_quantity(g.median_s, 's'):>10} {format_quantity(g.max_s, 's'):>10} {peak:<6}  "
                         f"{', '.join(g.busiest())}")
        return lines


#: How `Result.summary` shows links: grouped by kind, or every link direction on its own line.
LINK_VIEWS = ("grouped", "all")
_UNIT_ORDER = ("hbm", "vmem", "mxu", "vpu")


def _unit_key(unit: str) -> tuple[int, str]:
    return (_UNIT_ORDER.index(unit) if unit in _UNIT_ORDER else len(_UNIT_ORDER), unit)
