"""``podsim compare A.json B.json``: what changed between two saved runs, and their timelines stacked.

Each file is a run's ``--json`` result (`simulator.report.result.Result.to_json`: ``end_to_end_s``,
``busy_s``, ``exposed_s``, ``bytes``) or its ``--trace`` (a Perfetto trace-event document; its spans are
read back into a `Trace` and measured as the run measured them, `simulator.engine.trace.compute_metrics`,
and its ``otherData`` carries the run's bytes per interface and its links' kinds and axes). The table:
end to end, exposed time, busy time per unit (the busiest chip's), per link group (the busiest link of the
group: ICI axis and direction, DCN, NVLink, ...), bytes per link group (a trace's spans) and bytes per
interface (ici, dcn, hbm_read, ...), A, B,
B - A and the change. ``--gantt`` draws both timelines on one time axis (`plots.timeline_diff`; two traces
needed: a ``--json`` result has no spans).

Every figure is what the saved run reported: a simulated time (a bound: ideal peak rates) unless the run
was calibrated.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from simulator.analytic import EXPOSED_MEANING
from simulator.errors import PodsimError
from simulator.frontend.command_help import HELP
from simulator.units import format_quantity, show


def add_compare_parser(sub: Any) -> None:
    """Register ``podsim compare`` on the subcommand set ``sub``."""
    p = sub.add_parser("compare", help=HELP["compare"])
    p.add_argument("a", metavar="A.json", help="the first run: a --json result or a --trace file")
    p.add_argument("b", metavar="B.json", help="the second run, the same kinds")
    p.add_argument("--gantt", metavar="DIFF.png", help="both timelines on one time axis (two --trace files)")
    p.add_argument("--json", action="store_true")


def cmd_compare(args: argparse.Namespace) -> None:
    if args.gantt:
        from simulator.report.plots import check_picture_path

        check_picture_path(args.gantt)
    runs = [load_run(path) for path in (args.a, args.b)]
    rows = compare_rows(*runs)
    if args.gantt:
        _gantt(runs, args.gantt)
    out = {"a": args.a, "b": args.b, "rows": rows}
    if args.json:
        from simulator.report.result import dumps_json

        print(dumps_json(out))
    else:
        print(render(out))


def load_run(path: str) -> dict[str, Any]:
    """One saved run as ``{"source", "end_to_end_s", "exposed_s", "busy_s", "link_busy_s", "bytes", "trace"}``."""
    shown = show(path, 80)
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise PodsimError(f"{shown}: no such file (give a file written by --json or --trace)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise PodsimError(f"{shown} is not a JSON file podsim wrote ({err.__class__.__name__}); give a file written "
                          "by --json or --trace") from None
    if isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        return _from_trace(doc, shown)
    if isinstance(doc, dict) and isinstance(doc.get("end_to_end_s"), (int, float)) and "busy_s" in doc:
        return _from_result(doc, shown)
    raise PodsimError(f"{shown} is neither a run's --json result (end_to_end_s, busy_s) nor a --trace file "
                      "(traceEvents); `podsim run`, `collective` and `hlo` write both")


def _from_result(doc: dict[str, Any], shown: str) -> dict[str, Any]:
    from simulator.report.links import is_link, link_groups

    busy = doc.get("busy_s") or {}
    if doc.get("exposed_s") is None or not busy:
        raise PodsimError(f"{shown} was run with tracing off (no busy times); rerun it with tracing on")
    groups = {g.label: g.max_s for g in link_groups(busy, {})}
    return {"source": "json", "end_to_end_s": doc["end_to_end_s"], "exposed_s": doc["exposed_s"],
            "busy_s": {u: v for u, v in busy.items() if not is_link(u)}, "link_busy_s": groups,
            "link_bytes": {}, "bytes": dict(doc.get("bytes") or {}), "trace": None}


def _from_trace(doc: dict[str, Any], shown: str) -> dict[str, Any]:
    from simulator.engine.trace import compute_metrics
    from simulator.report.links import group_of, is_link, link_groups

    trace = trace_from_chrome(doc, shown)
    if not trace.spans:
        raise PodsimError(f"{shown} holds no spans to compare")
    m = compute_metrics(trace)
    link_bytes: dict[str, float] = {}
    for span in trace.spans:
        if is_link(span.unit):
            label = group_of(trace.links.get(span.unit))[1]
            link_bytes[label] = link_bytes.get(label, 0.0) + span.nbytes
    return {"source": "trace", "end_to_end_s": m["end_to_end_s"], "exposed_s": m["exposed_s"],
            "busy_s": {u: v for u, v in m["busy_s"].items() if not is_link(u)},
            "link_busy_s": {g.label: g.max_s for g in link_groups(m["busy_s"], trace.links)},
            "link_bytes": link_bytes, "bytes": dict(trace.bytes_by_interface), "trace": trace}


def trace_from_chrome(doc: dict[str, Any], shown: str = "trace") -> Any:
    """A `Trace` from a Chrome trace-event document `simulator.report.export.chrome_trace` wrote: its spans
    (complete events, µs -> s), its memory pools' live bytes (counters named ``<pool> live``), and from
    ``otherData.podsim`` the bytes per interface and the links' attributes."""
    from simulator.engine.trace import PoolTimeline, Span, Trace

    chips: dict[Any, Any] = {}
    units: dict[tuple[Any, Any], str] = {}
    events = doc["traceEvents"]
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            name = str(e.get("args", {}).get("name", e.get("pid")))
            chip = name.removeprefix("chip ")
            chips[e.get("pid")] = int(chip) if chip.isdigit() else chip
        elif e.get("ph") == "M" and e.get("name") == "thread_name":
            units[(e.get("pid"), e.get("tid"))] = str(e.get("args", {}).get("name", e.get("tid")))
    trace = Trace()
    pools: dict[tuple[Any, str], list[tuple[float, float]]] = {}
    try:
        for e in events:
            if e.get("ph") == "X":
                args = e.get("args", {})
                start = float(e["ts"]) / 1e6
                trace.add(Span(chips.get(e["pid"], e["pid"]), units.get((e["pid"], e.get("tid")), "unit"),
                               str(e.get("name", "")), start, start + float(e["dur"]) / 1e6, str(e.get("cat", "")),
                               float(args.get("bytes", 0.0)), float(args.get("flops", 0.0))))
            elif e.get("ph") == "C" and str(e.get("name", "")).endswith(" live"):
                key = (chips.get(e["pid"], e["pid"]), e["name"].removesuffix(" live"))
                pools.setdefault(key, []).append((float(e["ts"]) / 1e6, float(e["args"]["bytes"])))
    except (KeyError, TypeError, ValueError) as err:
        raise PodsimError(f"{shown}: a trace event lacks {err} (give a file written by --trace)") from None
    trace.spans.sort(key=lambda s: (s.start, s.end))
    trace.pools = [PoolTimeline(chip, name, 0.0, timeline) for (chip, name), timeline in pools.items()]
    extra = (doc.get("otherData") or {}).get("podsim") or {}
    trace.bytes_by_interface.update(extra.get("bytes", {}))
    trace.links.update(extra.get("links", {}))
    return trace


def compare_rows(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per figure either run reports: ``{"what", "unit", "a", "b", "change"}`` (None where a run has
    none; ``change`` (B - A) / A, None where A is 0 or missing)."""
    rows = [_row("end to end", "s", a["end_to_end_s"], b["end_to_end_s"]),
            _row("exposed", "s", a["exposed_s"], b["exposed_s"])]
    kinds = (("busy_s", "busy ", "s"), ("link_busy_s", "busiest link, ", "s"), ("link_bytes", "link bytes, ", "B"),
             ("bytes", "bytes ", "B"))
    for key, prefix, unit in kinds:
        for name in sorted(set(a[key]) | set(b[key])):
            rows.append(_row(prefix + name, unit, a[key].get(name), b[key].get(name)))
    return rows


def _row(what: str, unit: str, a: float | None, b: float | None) -> dict[str, Any]:
    change = (b - a) / a if a and b is not None else None
    return {"what": what, "unit": unit, "a": a, "b": b, "change": change}


def render(out: dict[str, Any]) -> str:
    """The table of `compare_rows`, A and B named by their files."""
    rows = out["rows"]
    width = max(len(r["what"]) for r in rows)
    lines = [f"A = {show(out['a'], 60)}, B = {show(out['b'], 60)}",
             f"  {'':<{width}} {'A':>12} {'B':>12} {'B - A':>12} {'change':>8}"]
    for r in rows:
        a, b = (format_quantity(v, r["unit"]) if v is not None else "-" for v in (r["a"], r["b"]))
        diff = format_quantity(r["b"] - r["a"], r["unit"]) if None not in (r["a"], r["b"]) else "-"
        change = f"{r['change']:+.1%}" if r["change"] is not None else "-"
        lines.append(f"  {r['what']:<{width}} {a:>12} {b:>12} {diff:>12} {change:>8}")
    note = ("  (busy: the busiest chip's; busiest link: the group's busiest direction; link bytes: the spans the trace "
            "holds, a reduced run's representative rings only; times as each run reported them: a bound, ideal peak "
            "rates, unless it was calibrated)")
    return "\n".join([*lines, note,
                      f"  ({EXPOSED_MEANING})"])


def _gantt(runs: list[dict[str, Any]], path: str) -> None:
    from simulator.report import plots

    missing = [name for name, r in zip("AB", runs, strict=True) if r["trace"] is None]
    if missing:
        raise PodsimError(f"--gantt draws spans, and {' and '.join(missing)} is a --json result (no spans); give "
                          "the --trace files of both runs")
    ax = plots.timeline_diff(runs[0]["trace"], runs[1]["trace"], labels=("A", "B"))
    plots.save(ax, path)
