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

from simulator.engine.trace import Trace
from simulator.hardware.specs import ChipSpec
from simulator.units import format_quantity


def jsonable(value: Any) -> Any:
    """``value`` with specs, tuples, numpy scalars and non-finite floats made JSON-safe (inf -> None)."""
    if isinstance(value, ChipSpec):
        return value.name
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalar
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


@dataclass
class Result:
    """One scenario run: ``params`` echo the inputs so a result can always be traced to them."""

    scenario: str
    params: dict[str, Any]
    metrics: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)
    trace: Trace | None = None
    headline: str = ""  #: one sentence: what won, by how much, and why

    def __getitem__(self, key: str) -> Any:
        return self.extra[key] if key in self.extra else self.metrics[key]

    def to_json(self) -> dict[str, Any]:
        """One flat JSON-ready dict: scenario, params, metrics, then scenario-specific keys."""
        return jsonable({"scenario": self.scenario, "params": self.params, **self.metrics, **self.extra})

    def dumps(self) -> str:
        """`to_json` as a JSON string (allow_nan off: strict JSON)."""
        return json.dumps(self.to_json(), indent=2, allow_nan=False)

    def summary(self) -> str:
        """A few human lines: headline, time against closed form, busy time per unit, bytes."""
        m = self.metrics
        lines = [f"{self.scenario}: {self.headline}" if self.headline else self.scenario]
        lines.append(f"  end to end  {format_quantity(m['end_to_end_s'], 's')}")
        if m["busy_s"] is None:
            return "\n".join(lines + ["  (tracing off: no busy times)"])
        if "analytic_s" in self.extra and self.extra["analytic_s"] is not None:
            lines.append(f"  closed form {format_quantity(self.extra['analytic_s'], 's')}")
        lines.append(f"  overlap {format_quantity(m['overlap_s'], 's')}, exposed {format_quantity(m['exposed_s'], 's')}"
                     f", bounds [{format_quantity(m['lower_bound_s'], 's')}, "
                     f"{format_quantity(m['upper_bound_s'], 's')}]")
        for unit, busy in m["busy_s"].items():
            lines.append(f"  busy {unit:<12} {format_quantity(busy, 's'):>12}  ({100 * m['utilization'][unit]:.1f}%)")
        for interface, nbytes in m["bytes"].items():
            lines.append(f"  bytes {interface:<11} {format_quantity(nbytes, 'B'):>12}")
        return "\n".join(lines)
