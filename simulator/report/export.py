"""Trace exports: Chrome trace-event JSON (opens in Perfetto / chrome://tracing) and CSV.

Perfetto layout: one process per chip (``pid``), one track (``tid``) per unit, complete ("X")
events with times in microseconds, named by ``process_name`` / ``thread_name`` metadata events.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from simulator.engine.trace import Span, Trace
from simulator.errors import PodsimError

_UNIT_ORDER = ("hbm", "vmem", "mxu", "vpu")


def track_ids(spans: list[Span]) -> tuple[dict[Any, int], dict[tuple[Any, str], int]]:
    chips = sorted({s.chip for s in spans}, key=lambda c: (isinstance(c, str), str(c).zfill(8)))
    pids = {chip: i for i, chip in enumerate(chips)}
    units = sorted({(s.chip, s.unit) for s in spans},
                   key=lambda cu: (pids[cu[0]], _UNIT_ORDER.index(cu[1]) if cu[1] in _UNIT_ORDER else 9, cu[1]))
    return pids, {cu: i for i, cu in enumerate(units)}


def chrome_trace(trace: Trace) -> dict[str, Any]:
    """The trace as a Chrome trace-event document (``{"traceEvents": [...]}``), times in µs."""
    pids, tids = track_ids(trace.spans)
    events: list[dict[str, Any]] = []
    for chip, pid in pids.items():
        events.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": f"chip {chip}"}})
    for (chip, unit), tid in tids.items():
        events.append({"ph": "M", "name": "thread_name", "pid": pids[chip], "tid": tid, "args": {"name": unit}})
    for s in trace.spans:
        events.append({
            "ph": "X", "name": s.label or s.kind, "cat": s.kind, "pid": pids[s.chip], "tid": tids[(s.chip, s.unit)],
            "ts": s.start * 1e6, "dur": (s.end - s.start) * 1e6,
            "args": {"bytes": s.nbytes, "flops": s.flops},
        })
    return {"traceEvents": events, "displayTimeUnit": "ns"}


def open_for_write(path: str | Path) -> Path:
    path = Path(path)
    if not path.parent.exists():
        raise PodsimError(f"cannot write {str(path)!r}: folder {str(path.parent)!r} does not exist")
    return path


def write_chrome_trace(trace: Trace, path: str | Path) -> Path:
    """Write `chrome_trace` to ``path`` (open it at ui.perfetto.dev)."""
    path = open_for_write(path)
    path.write_text(json.dumps(chrome_trace(trace)))
    return path


CSV_COLUMNS = ("chip", "unit", "label", "kind", "start_s", "end_s", "bytes", "flops")


def write_csv(trace: Trace, path: str | Path) -> Path:
    """Write one row per span with the columns in `CSV_COLUMNS`."""
    path = open_for_write(path)
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_COLUMNS)
        for s in trace.spans:
            writer.writerow([s.chip, s.unit, s.label, s.kind, repr(s.start), repr(s.end), s.nbytes, s.flops])
    return path
