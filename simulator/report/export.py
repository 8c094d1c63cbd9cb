"""Trace exports: Chrome trace-event JSON (opens in Perfetto / chrome://tracing) and CSV.

Perfetto layout: one process per chip (``pid``), one track (``tid``) per unit, complete ("X")
events with times in microseconds, named by ``process_name`` / ``thread_name`` metadata events.
Under the spans, counter ("C") tracks: each memory pool's live bytes (``hbm live bytes``, ``vmem live
bytes``) after every change, and each link direction's utilisation (``link 0->1 utilisation``: the
fraction of its nominal bandwidth in use, 0 when idle) at the start and end of every busy period.
``otherData.podsim`` keeps the run's bytes per interface and each link's kind, axis and direction, so a
saved trace can be measured again (`podsim compare`).
"""
from __future__ import annotations

import contextlib
import csv
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from simulator.engine.trace import PoolTimeline, Span, Trace
from simulator.errors import PodsimError
from simulator.report.links import link_load, spans_by_link
from simulator.units import show

_UNIT_ORDER = ("hbm", "vmem", "mxu", "vpu")


def track_ids(spans: list[Span]) -> tuple[dict[Any, int], dict[tuple[Any, str], int]]:
    chips = sorted({s.chip for s in spans}, key=lambda c: (isinstance(c, str), str(c).zfill(8)))
    pids = {chip: i for i, chip in enumerate(chips)}
    units = sorted({(s.chip, s.unit) for s in spans},
                   key=lambda cu: (pids[cu[0]], _UNIT_ORDER.index(cu[1]) if cu[1] in _UNIT_ORDER else 9, cu[1]))
    return pids, {cu: i for i, cu in enumerate(units)}


def chrome_trace(trace: Trace, counters: bool = True) -> dict[str, Any]:
    """The trace as a Chrome trace-event document (``{"traceEvents": [...]}``), times in µs.

    ``counters`` adds the memory and link counter tracks (see the module docstring). A fast run's trace is
    unfolded first (`Trace.whole`): every chip and link a representative stood for has its spans.
    """
    trace = trace.whole()
    pids, tids = track_ids(trace.spans)
    pools = used_pools(trace) if counters else []
    for pool in pools:
        pids.setdefault(pool.chip, len(pids))
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
    if counters:
        events += memory_counters(pools, pids) + link_counters(trace, pids)
    links = {unit: {k: v for k, v in info.items() if k in LINK_KEYS} for unit, info in trace.links.items()}
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"podsim": {"bytes": dict(trace.bytes_by_interface), "links": links}}}


#: The link attributes a trace file keeps (`otherData.podsim.links`), for `podsim compare`'s link groups.
LINK_KEYS = ("kind", "axis", "direction", "src_role", "dst_role", "bandwidth_bytes_per_s")


def used_pools(trace: Trace) -> list[PoolTimeline]:
    """The memory pools that held any bytes during the run."""
    return [p for p in trace.pools if any(live > 0 for _, live in p.timeline)]


def live_steps(pool: PoolTimeline) -> list[tuple[float, float]]:
    """``(time s, live bytes)`` of ``pool``, one point per time (the value after the last change then)."""
    steps: dict[float, float] = {}
    for t, live in pool.timeline:
        steps[t] = live
    return list(steps.items())


def memory_counters(pools: list[PoolTimeline], pids: dict[Any, int]) -> list[dict[str, Any]]:
    """Counter events of each pool's live bytes, one per change."""
    return [{"ph": "C", "name": f"{pool.name} live", "pid": pids[pool.chip], "ts": t * 1e6, "args": {"bytes": live}}
            for pool in pools for t, live in live_steps(pool)]


def link_counters(trace: Trace, pids: dict[Any, int]) -> list[dict[str, Any]]:
    """Counter events of each link direction's utilisation: its value at each busy period's start, 0 at its end."""
    events = []
    for unit, spans in spans_by_link(trace.spans).items():
        bandwidth = trace.links.get(unit, {}).get("bandwidth_bytes_per_s")
        pid = pids[spans[0].chip]
        for start, end, fraction in link_load(spans, bandwidth):
            for t, value in ((start, fraction), (end, 0.0)):
                events.append({"ph": "C", "name": unit, "pid": pid, "ts": t * 1e6, "args": {"utilisation": value}})
    return events


def open_for_write(path: str | Path) -> Path:
    """``path`` as a `Path` once it is known to be writable: its folder exists and may be written, and it
    is not itself a folder. Commands call this before a run, so a bad path fails in a second, not after
    a long simulation."""
    path = Path(path)
    shown = show(str(path), 80)
    if not str(path).strip() or path.is_dir():
        raise PodsimError(f"cannot write {shown}: it is a folder; give a file name such as out.json")
    if not path.parent.is_dir():
        raise PodsimError(f"cannot write {shown}: folder {show(str(path.parent), 80)} does not exist")
    if not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise PodsimError(f"cannot write {shown}: permission denied")
    return path


@contextlib.contextmanager
def writing(path: Path) -> Iterator[None]:
    """Turn an operating-system failure while writing ``path`` (disk full, a device that refuses) into
    one `PodsimError` naming the file."""
    try:
        yield
    except OSError as err:
        raise PodsimError(f"cannot write {show(str(path), 80)}: {err.strerror or err}") from None


def write_chrome_trace(trace: Trace, path: str | Path) -> Path:
    """Write `chrome_trace` to ``path`` (open it at ui.perfetto.dev)."""
    path = open_for_write(path)
    with writing(path):
        path.write_text(chrome_trace_text(trace))
    return path


def chrome_trace_text(trace: Trace) -> str:
    """`chrome_trace` as JSON text."""
    return json.dumps(chrome_trace(trace))


CSV_COLUMNS = ("chip", "unit", "label", "kind", "start_s", "end_s", "bytes", "flops")


def write_csv(trace: Trace, path: str | Path) -> Path:
    """Write one row per span with the columns in `CSV_COLUMNS`."""
    path = open_for_write(path)
    with writing(path), path.open("w", newline="") as f:
        write_csv_rows(trace, f)
    return path


def write_csv_rows(trace: Trace, f: Any) -> None:
    """The CSV of `write_csv` on the open text stream ``f`` (a file, or stdout); a fast run's trace unfolded
    (`Trace.whole`)."""
    trace = trace.whole()
    writer = csv.writer(f)
    writer.writerow(CSV_COLUMNS)
    for s in trace.spans:
        writer.writerow([s.chip, s.unit, s.label, s.kind, repr(s.start), repr(s.end), s.nbytes, s.flops])


def counter_trace(tracks: dict[str, dict[str, list[tuple[float, float]]]]) -> dict[str, Any]:
    """A Chrome trace-event document of counter ("C") tracks alone: ``tracks[process][counter]`` is a list of
    ``(time s, value)`` points (each value holds until the next), one process per key (a serving replica),
    times in µs."""
    events: list[dict[str, Any]] = []
    for pid, (process, counters) in enumerate(tracks.items()):
        events.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": process}})
        for name, points in counters.items():
            events += [{"ph": "C", "name": name, "pid": pid, "ts": t * 1e6, "args": {"value": v}} for t, v in points]
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_counter_trace(tracks: dict[str, dict[str, list[tuple[float, float]]]], path: str | Path) -> Path:
    """Write `counter_trace` to ``path`` (open it at ui.perfetto.dev)."""
    path = open_for_write(path)
    with writing(path):
        path.write_text(json.dumps(counter_trace(tracks)))
    return path
