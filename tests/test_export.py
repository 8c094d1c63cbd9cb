"""simulator.report.export (Chrome trace JSON, CSV) and simulator.report.plots (Gantt charts) on a hand-made trace."""
from __future__ import annotations

import csv
import json
import struct

import pytest

from simulator.engine.trace import Span, Trace
from simulator.errors import PodsimError
from simulator.report import export, plots

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def trace() -> Trace:
    """Two chips, each with an HBM load followed by an MXU matmul; one span has no label."""
    t = Trace()
    for span in (
        Span(0, "hbm", "w0", 0.0, 1e-6, kind="load", nbytes=1e6),
        Span(0, "mxu", "mm0", 1e-6, 3e-6, kind="compute", flops=2e9),
        Span(1, "hbm", "w1", 0.5e-6, 2e-6, kind="load", nbytes=2e6),
        Span(1, "mxu", "", 2e-6, 2.5e-6, kind="compute", flops=1e9),
    ):
        t.add(span)
    return t


def test_chrome_trace_metadata_tracks(trace):
    doc = export.chrome_trace(trace)
    events = doc["traceEvents"]
    processes = [e for e in events if e["ph"] == "M" and e["name"] == "process_name"]
    threads = [e for e in events if e["ph"] == "M" and e["name"] == "thread_name"]
    assert len(processes) == 2  # one per chip
    assert len({e["pid"] for e in processes}) == 2
    assert sorted(e["args"]["name"] for e in processes) == ["chip 0", "chip 1"]
    assert len(threads) == 4  # one per (chip, unit)
    pid_of = {e["args"]["name"]: e["pid"] for e in processes}
    tracks = {(e["pid"], e["args"]["name"]) for e in threads}
    assert tracks == {(pid_of[f"chip {c}"], u) for c in (0, 1) for u in ("hbm", "mxu")}
    assert len({(e["pid"], e["tid"]) for e in threads}) == 4
    json.dumps(doc)  # serialisable as is


def test_chrome_trace_complete_events_in_microseconds(trace):
    events = export.chrome_trace(trace)["traceEvents"]
    pid_of = {e["args"]["name"]: e["pid"] for e in events if e["name"] == "process_name"}
    tid_of = {(e["pid"], e["args"]["name"]): e["tid"] for e in events if e["name"] == "thread_name"}
    complete = [e for e in events if e["ph"] == "X"]
    assert len(complete) == len(trace.spans)
    for span, event in zip(trace.spans, complete, strict=True):
        assert event["ts"] == pytest.approx(span.start * 1e6, rel=1e-12, abs=1e-12)
        assert event["dur"] == pytest.approx((span.end - span.start) * 1e6, rel=1e-12)
        assert event["pid"] == pid_of[f"chip {span.chip}"]
        assert event["tid"] == tid_of[(event["pid"], span.unit)]
        assert event["name"] == (span.label or span.kind)
        assert event["cat"] == span.kind
        assert event["args"]["bytes"] == span.nbytes and event["args"]["flops"] == span.flops
    # by hand: the matmul on chip 0 runs from 1 us to 3 us
    matmul = next(e for e in complete if e["name"] == "mm0")
    assert matmul["ts"] == pytest.approx(1.0) and matmul["dur"] == pytest.approx(2.0)


def test_write_chrome_trace_round_trips(trace, tmp_path):
    path = export.write_chrome_trace(trace, tmp_path / "t.json")
    assert json.loads(path.read_text()) == json.loads(json.dumps(export.chrome_trace(trace)))


def test_write_csv_round_trips(trace, tmp_path):
    path = export.write_csv(trace, tmp_path / "spans.csv")
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["chip", "unit", "label", "kind", "start_s", "end_s", "bytes", "flops"]
    assert len(rows) == 1 + len(trace.spans)
    for span, row in zip(trace.spans, rows[1:], strict=True):
        chip, unit, label, kind, start, end, nbytes, flops = row
        assert (chip, unit, label, kind) == (str(span.chip), span.unit, span.label, span.kind)
        assert float(start) == span.start and float(end) == span.end  # exact: written with repr
        assert float(nbytes) == span.nbytes and float(flops) == span.flops


def test_writers_refuse_a_missing_folder(trace, tmp_path):
    for write in (export.write_chrome_trace, export.write_csv, plots.save_gantt):
        with pytest.raises(PodsimError, match="no_such_dir"):
            write(trace, tmp_path / "no_such_dir" / "out")


def test_save_gantt_writes_a_png(trace, tmp_path):
    path = plots.save_gantt(trace, tmp_path / "g.png", title="two chips")
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert width > 100 and height > 100


def test_gantt_draws_on_a_given_ax(trace):
    from matplotlib.figure import Figure

    ax = Figure().add_subplot()
    assert plots.gantt(trace, ax=ax, title="mine") is ax
    assert ax.get_title() == "mine"
    bars = [path.get_extents() for c in ax.collections for path in c.get_paths()]
    assert len(bars) == len(trace.spans)  # one bar per span
    # the trace ends at 3 us, so the axis is in microseconds and each bar is its duration in us
    assert "µs" in ax.get_xlabel()
    widths = sorted(b.width for b in bars)
    assert widths == pytest.approx(sorted((s.end - s.start) * 1e6 for s in trace.spans), rel=1e-9)
    labels = {t.get_text() for t in ax.get_yticklabels()}
    assert labels == {f"chip {c} {u}" for c in (0, 1) for u in ("hbm", "mxu")}


# --- counter tracks: memory live bytes and link utilisation ------------------------------------------------
def _counters(doc: dict, name: str) -> list[tuple[float, dict]]:
    return [(e["ts"], e["args"]) for e in doc["traceEvents"] if e["ph"] == "C" and e["name"] == name]


def test_vmem_counter_follows_the_allocations():
    from simulator import System

    system = System("tpu-v5e")
    chip = system.chip

    def program():  # hold 10 MB, add 5 MB after 1 ms, free the 10 MB after 2 ms, the rest after 3 ms
        first = yield chip.vmem.allocate(10e6, "a")
        yield system.env.timeout(1e-3)
        second = yield chip.vmem.allocate(5e6, "b")
        yield system.env.timeout(1e-3)
        chip.vmem.free(first)
        yield chip.matmul(128, 128, 128, "mm")  # a span, so chip 0 has a process in the trace
        yield system.env.timeout(3e-3 - system.env.now)
        chip.vmem.free(second)

    system.process(program(), "program")
    system.run()
    doc = export.chrome_trace(system.trace)
    steps = [(ts, args["bytes"]) for ts, args in _counters(doc, "vmem live")]
    assert steps == [(0.0, 10e6), (pytest.approx(1000.0), 15e6), (pytest.approx(2000.0), 5e6),
                     (pytest.approx(3000.0), 0.0)]
    assert _counters(doc, "hbm live") == []  # HBM held nothing: no track
    pid = next(e["pid"] for e in doc["traceEvents"] if e["name"] == "vmem live")
    assert {"ph": "M", "name": "process_name", "pid": pid, "args": {"name": "chip 0"}} in doc["traceEvents"]
    assert not any(e["ph"] == "C" for e in export.chrome_trace(system.trace, counters=False)["traceEvents"])


def _line_with_messages(starts_s: list[float], nbytes: float, efficiency: float | None = None):
    from simulator import System

    system = System("tpu-v5e", topology="line:2")
    if efficiency is not None:
        system.network.set_link_efficiency(lambda kind: efficiency)
    link = system.network.link(0, 1)

    def sender(t: float, i: int):
        yield system.env.timeout(t)
        yield link.transfer(nbytes, f"m{i}", "send")

    for i, t in enumerate(starts_s):
        system.process(sender(t, i), f"m{i}")
    system.run()
    return export.chrome_trace(system.trace)


def test_link_counter_is_one_while_a_message_moves_and_zero_between():
    b, lat, v = 45e9, 1e-6, 45e3  # v5e ICI: 45 GB/s one way, 1 us per hop; 45 kB take 1 us
    doc = _line_with_messages([0.0, 10e-6], v)
    got = [(ts, args["utilisation"]) for ts, args in _counters(doc, "link 0->1")]
    expected = [(lat, 1.0), (lat + v / b, 0.0), (10e-6 + lat, 1.0), (10e-6 + lat + v / b, 0.0)]
    assert got == [(pytest.approx(t * 1e6, rel=1e-9), pytest.approx(u, abs=1e-12)) for t, u in expected]
    pid = next(e["pid"] for e in doc["traceEvents"] if e["ph"] == "X" and e["name"] == "m0")
    assert {e["pid"] for e in doc["traceEvents"] if e["ph"] == "C"} == {pid}  # under the link's spans


def test_link_counter_of_shared_and_derated_links():
    b, lat, v = 45e9, 1e-6, 45e3
    shared = _line_with_messages([0.0, 0.0], v)  # two messages share the link: one period of 2v / b, full rate
    assert [(ts, a["utilisation"]) for ts, a in _counters(shared, "link 0->1")] == [
        (pytest.approx(lat * 1e6), pytest.approx(1.0)), (pytest.approx((lat + 2 * v / b) * 1e6), 0.0)]
    slow = _line_with_messages([0.0], v, efficiency=0.5)  # derated to half: half the nominal bandwidth, twice as long
    assert [(ts, a["utilisation"]) for ts, a in _counters(slow, "link 0->1")] == [
        (pytest.approx(lat * 1e6), pytest.approx(0.5)), (pytest.approx((lat + 2 * v / b) * 1e6), 0.0)]


@pytest.mark.parametrize("name,match", [("db.txt", r"'txt' is not a picture format; use one of .*png.*svg"),
                                        ("db", "has no picture suffix"), ("no/such/db.png", "does not exist")])
def test_picture_paths_are_refused_before_drawing(tmp_path, name, match):
    with pytest.raises(PodsimError, match=match):
        plots.check_picture_path(tmp_path / name)


def test_any_format_matplotlib_draws_is_accepted(trace, tmp_path):
    path = plots.save_gantt(trace, tmp_path / "g.svg")
    assert path.read_text().lstrip().startswith("<?xml")


@pytest.mark.parametrize("writer", [export.write_chrome_trace, export.write_csv])
def test_a_folder_is_not_a_file_to_write(trace, tmp_path, writer):
    with pytest.raises(PodsimError, match="it is a folder"):
        writer(trace, tmp_path)


def test_a_failing_write_names_the_file(trace, tmp_path, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(type(tmp_path), "write_text", full)
    with pytest.raises(PodsimError, match=r"cannot write .*t.json.*: No space left on device"):
        export.write_chrome_trace(trace, tmp_path / "t.json")


@pytest.mark.parametrize("flag,name", [("--gantt", "db.txt"), ("--trace", "."), ("--csv", "none/x.csv")])
def test_cli_refuses_an_output_path_before_running(capsys, monkeypatch, tmp_path, flag, name):
    from simulator.frontend import cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli, "load_scenario", lambda name: pytest.fail("the scenario ran"))
    assert cli.main(["run", "double_buffer", flag, name]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err
