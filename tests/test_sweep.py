"""Sweeps: the CSV contract, grid order, determinism across workers, failing points, resume, Ctrl-C,
a real Dask cluster, the Python API and every bad input (one line on stderr, exit status 2).

Expected times come from REFERENCE.md's double-buffer pipeline: two buffers take max(qa, qc) + min(a, c),
one buffer q(a + c); the default task loads for 0.4 ms and computes for 0.2 ms in total.
"""
from __future__ import annotations

import csv
import io
import json
import os

import pytest

from simulator.frontend.cli import main
from simulator.frontend.sweep import (
    SweepError,
    SweepInterrupted,
    cell,
    grid_values,
    parse_cell,
    sweep,
    sweep_frame,
)

GRID = {"blocks": ["1", "2", "4"], "buffers": ["1", "2"]}

#: A scenario whose run() is interrupted (as by Ctrl-C) at x == 3; it returns x / 1000 (scaled by SCALE).
STOPPING = '''"""Stops at x == 3 as if Ctrl-C was pressed."""
from simulator.report.result import Result


SCALE = 1


def run(*, x: int = 1) -> Result:
    if x == 3:
        raise KeyboardInterrupt
    return Result("stopping", {"x": x}, {"end_to_end_s": SCALE * x * 1e-3}, extra={"x": x, "y": {"z": [1, 2]}})
'''

#: A scenario whose worker process dies (as if killed by the OOM killer) at x == 3.
DYING = '''"""Its process dies at x == 3."""
import os

from simulator.report.result import Result


def run(*, x: int = 1) -> Result:
    if x == 3:
        os._exit(3)
    return Result("dying", {"x": x}, {"end_to_end_s": x * 1e-3})
'''


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def read_csv(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def without_seconds(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if k != "seconds"} for row in rows]


def pipeline_ms(q: int, buffers: int, load_ms: float = 0.4, compute_ms: float = 0.2) -> float:
    a, c = load_ms / q, compute_ms / q
    return q * (a + c) if buffers == 1 else max(q * a, q * c) + min(a, c)


def test_cli_writes_csv_to_dev_stdout(capsys):
    code, out, err = run_cli(capsys, "sweep", "double_buffer", "--grid", "blocks=1,2", "--out", "/dev/stdout")
    assert code == 0, err
    rows = read_csv(out)
    assert [r["blocks"] for r in rows] == ["1", "2"]
    assert list(rows[0])[0] == "blocks" and list(rows[0])[-2:] == ["error", "seconds"]
    assert [float(r["end_to_end_s"]) * 1e3 for r in rows] == pytest.approx([0.6, 0.5])
    assert {"flops", "analytic_s", "overlap_s", "exposed_s", "lower_bound_s", "upper_bound_s"} <= set(rows[0])
    assert all(r["error"] == "" and float(r["seconds"]) > 0 for r in rows)


def test_rows_follow_grid_order_and_match_the_closed_form():
    rows = sweep("double_buffer", GRID, workers=1)
    assert [(r["blocks"], r["buffers"]) for r in rows] == [(1, 1), (1, 2), (2, 1), (2, 2), (4, 1), (4, 2)]
    for r in rows:
        assert r["end_to_end_s"] * 1e3 == pytest.approx(pipeline_ms(r["blocks"], r["buffers"]))
        assert r["analytic_s"] == pytest.approx(r["end_to_end_s"])


def test_trace_is_off_unless_set_and_nested_dicts_are_flattened():
    plain = sweep("double_buffer", {"blocks": [2]}, workers=1)[0]
    assert plain["busy_s"] is None and plain["overlap_s"] is None  # no spans: sweeps need numbers only
    traced = sweep("double_buffer", {"blocks": [2]}, {"trace": "true"}, workers=1)[0]
    assert traced["busy_s.hbm"] == pytest.approx(0.4e-3) and traced["busy_s.mxu"] == pytest.approx(0.2e-3)
    assert traced["overlap_s"] == pytest.approx(0.1e-3) and traced["trace"] is True
    assert list(traced)[:2] == ["blocks", "trace"]


def test_same_rows_with_one_or_two_workers():
    grid = {"blocks": [str(q) for q in range(1, 9)], "buffers": ["1", "2", "3"], "load_s": ["0.1ms", "0.4ms"]}
    one = sweep("double_buffer", grid, workers=1)
    two = sweep("double_buffer", grid, workers=2)
    batched = sweep("double_buffer", grid, workers=2, chunk_size=5)
    assert len(one) == 48 and without_seconds(one) == without_seconds(two) == without_seconds(batched)
    assert list(one[0]) == list(two[0])


def test_a_failing_point_records_its_error_and_the_others_run(capsys, tmp_path):
    out = tmp_path / "rows.csv"
    code, stdout, err = run_cli(capsys, "sweep", "double_buffer", "--grid", "blocks=1,0,2", "--workers", "2",
                                "--out", str(out))
    assert code == 0, err
    assert "3 rows (1 failed)" in stdout
    rows = read_csv(out.read_text())
    assert [r["blocks"] for r in rows] == ["1", "0", "2"]
    assert "blocks=0" in rows[1]["error"] and rows[1]["end_to_end_s"] == ""
    assert rows[0]["error"] == rows[2]["error"] == "" and float(rows[2]["end_to_end_s"]) == pytest.approx(5e-4)


def test_resume_skips_finished_points_and_appends_the_rest(capsys, tmp_path):
    out = tmp_path / "rows.csv"
    assert run_cli(capsys, "sweep", "double_buffer", "--grid", "blocks=1,2", "--grid", "buffers=2",
                   "--out", str(out))[0] == 0
    first = read_csv(out.read_text())
    with open(out, "a") as stream:
        stream.write("3,2,0.0004")  # a row cut short (the sweep was killed mid-write): run again
    code, _, err = run_cli(capsys, "sweep", "double_buffer", "--grid", "blocks=1,2,3,4", "--grid", "buffers=2",
                           "--out", str(out), "--resume", "--workers", "1")
    assert code == 0, err
    rows = read_csv(out.read_text())
    assert [r["blocks"] for r in rows] == ["1", "2", "3", "4"]  # all present, in grid order, no duplicates
    assert rows[:2] == first  # finished points kept as they were (same seconds: not run again)
    assert all(r["error"] == "" for r in rows)


def test_resume_runs_again_a_last_row_cut_after_its_last_comma(tmp_path):
    out = tmp_path / "rows.csv"
    first = sweep("double_buffer", {"blocks": ["1", "2"]}, out=out, workers=1)
    text = out.read_text()
    out.write_text(text[:text.rindex(",") + 1])  # killed while writing the last row's seconds
    rows = sweep("double_buffer", {"blocks": ["1", "2"]}, out=out, resume=True, workers=1)
    assert rows[0] == first[0] and rows[1]["seconds"] > 0  # the cut row ran again (its seconds had been lost)
    assert rows[1]["end_to_end_s"] * 1e3 == pytest.approx(pipeline_ms(2, 2)) and rows[1]["error"] == ""
    assert out.read_text().splitlines()[:2] == text.splitlines()[:2]


def test_resume_matches_coerced_values_not_spelling(tmp_path):
    out = tmp_path / "rows.csv"
    first = sweep("double_buffer", {"load_s": ["0.4ms"]}, out=out, workers=1)
    rows = sweep("double_buffer", {"load_s": ["4e-4", "1ms"]}, out=out, resume=True, workers=1)
    assert [r["load_s"] for r in rows] == [0.0004, 0.001]
    assert rows[0]["seconds"] == first[0]["seconds"]  # 4e-4 is 0.4ms: not run again
    assert len(read_csv(out.read_text())) == 2


def test_ctrl_c_keeps_finished_rows_and_exits_130(capsys, tmp_path):
    scenario, out = tmp_path / "stopping.py", tmp_path / "rows.csv"
    scenario.write_text(STOPPING)
    code, _, err = run_cli(capsys, "sweep", str(scenario), "--grid", "x=1,2,3,4", "--workers", "1", "--out", str(out))
    assert code == 130
    assert err.strip() == f"podsim: sweep interrupted after 2 of 4 points; rows kept in {out}, rerun with --resume " \
        "to finish"
    assert [r["x"] for r in read_csv(out.read_text())] == ["1", "2"]


def test_ctrl_c_in_a_pool_worker_stops_the_sweep(tmp_path):
    scenario = tmp_path / "stopping.py"
    scenario.write_text(STOPPING)
    with pytest.raises(SweepInterrupted) as stop:
        sweep(str(scenario), {"x": ["1", "2", "3", "4"]}, workers=2, out=tmp_path / "rows.csv")
    kept = [r["x"] for r in stop.value.rows]  # 1 or 2 finished before 3 started in its worker
    assert kept and set(kept) <= {1, 2, 4} and kept == sorted(kept)
    assert "--resume" in str(stop.value)


def test_dask_cluster_gives_the_local_rows(capsys, tmp_path):
    distributed = pytest.importorskip("distributed")
    out = tmp_path / "rows.csv"
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as c:
        code, _, err = run_cli(capsys, "sweep", "double_buffer", "--grid", "blocks=1,0,2,4", "--grid", "buffers=1,2",
                               "--scheduler", c.scheduler_address, "--out", str(out))
    assert code == 0, err
    local = sweep("double_buffer", {"blocks": ["1", "0", "2", "4"], "buffers": ["1", "2"]}, workers=1)
    assert without_seconds(read_csv(out.read_text())) == without_seconds([
        {k: cell(v) for k, v in row.items()} for row in local])


def test_json_prints_one_object(capsys):
    code, out, err = run_cli(capsys, "sweep", "double_buffer", "--grid", "buffers=1,2", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["rows_count"] == 2 and data["failed"] == 0 and data["columns"][0] == "buffers"
    assert [r["end_to_end_s"] * 1e3 for r in data["rows"]] == pytest.approx([0.6, 0.5])


@pytest.mark.parametrize(("args", "expected"), [
    (["--grid", "nope=1,2"], "valid: blocks, buffers"),
    (["--grid", "blocks="], "has no values"),
    (["--grid", "blocks=1,,2"], "empty value"),
    (["--grid", "blocks=1", "--grid", "blocks=2"], "given twice"),
    (["--grid", "blocks=1", "--set", "blocks=2"], "given twice"),
    (["--grid", "blocks=1,1"], "lists '1' twice"),
    (["--grid", "blocks=a,b"], "blocks='a'"),
    (["--grid", "blocks"], "KEY=V1,V2"),
    ([], "at least one --grid"),
    (["--grid", "blocks=1", "--workers", "0"], "--workers=0 must be an integer >= 1"),
    (["--grid", "blocks=1", "--workers", "2", "--scheduler", "tcp://127.0.0.1:1"], "not allowed with"),
    (["--grid", "blocks=1", "--scheduler", "tcp://127.0.0.1:1"], "Dask"),
    (["--grid", "blocks=1", "--out", "MISSING/rows.csv"], "cannot write --out"),
    (["--grid", "blocks=1", "--out", "."], "--out '.' is not a regular file"),
    (["--grid", "blocks=1", "--resume"], "--resume needs --out"),
    (["--grid", "blocks=1", "--json", "--out", "/dev/stdout"], "both write to stdout"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, tmp_path, args, expected):
    args = [str(tmp_path / a) if a.startswith("MISSING") else a for a in args]
    code, out, err = run_cli(capsys, "sweep", "double_buffer", *args)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("podsim: error: ") and expected in err


@pytest.mark.parametrize(("content", "expected"), [
    (b"\x89PNG\r\n\x1a\n\x00\xff\xfe rows", "not UTF-8 text"),
    (b"blocks,measured_ms\n1,0.61\n2,0.52\n", "header does not end with the columns error,seconds"),
    (b"blocks,blocks,error,seconds\n1,1,,0.1\n", "'blocks' twice"),
    (b"blocks,error,seconds\n1,,0.1,extra\n2,,0.1\n", "row 2 has 4 cells under a header of 3"),
    (b"blocks,error,seconds\n1,,fast\n", "row 2 has seconds='fast'"),
    (b"blocks,error,seconds\n1,,-1\n", "row 2 has seconds='-1'"),
    (b"blocks,error,seconds\n1," + b"x" * 200_000 + b",0.1\n", "unreadable as CSV: field larger than field limit"),
])
def test_resume_refuses_a_file_no_sweep_wrote_and_leaves_it_byte_for_byte(capsys, tmp_path, content, expected):
    out = tmp_path / "rows.csv"
    out.write_bytes(content)
    code, stdout, err = run_cli(capsys, "sweep", "double_buffer", "--grid", "blocks=1,2", "--out", str(out),
                                "--resume", "--workers", "1")
    assert code == 2 and stdout == "" and err.count("\n") == 1
    assert "is not a sweep CSV" in err and expected in err and "left as it was" in err
    assert out.read_bytes() == content and sorted(p.name for p in tmp_path.iterdir()) == ["rows.csv"]


def test_resume_rewrites_its_own_rows_byte_for_byte(tmp_path):
    out = tmp_path / "rows.csv"
    sweep("double_buffer", {"blocks": ["2", "4"]}, {"chip": "tpu-v4"}, out=out, workers=1)
    before = out.read_text().splitlines()
    sweep("double_buffer", {"blocks": ["1", "2", "4", "8"]}, {"chip": "tpu-v4"}, out=out, resume=True, workers=1)
    after = out.read_text().splitlines()
    assert after[0] == before[0] and after[2:4] == before[1:]  # header, and the two old rows, unchanged
    assert [line.split(",")[0] for line in after[1:]] == ["1", "2", "4", "8"]


@pytest.mark.parametrize(("header", "expected"), [
    ("other,error,seconds", "no column 'blocks'"),
    ("blocks,buffers,error,seconds", "column 'buffers' this sweep does not set"),
])
def test_resume_refuses_a_file_of_another_sweep(capsys, tmp_path, header, expected):
    out = tmp_path / "rows.csv"
    out.write_text(f"{header}\n1,2,,0.1\n")
    code, _, err = run_cli(capsys, "sweep", "double_buffer", "--grid", "blocks=1", "--out", str(out), "--resume")
    assert code == 2 and expected in err and err.count("\n") == 1


def test_api_rows_and_frame(monkeypatch):
    rows = sweep("double_buffer", {"blocks": [1, 2]}, {"buffers": 1}, workers=1)
    assert [(r["blocks"], r["buffers"], r["error"]) for r in rows] == [(1, 1, ""), (2, 1, "")]
    assert [r["end_to_end_s"] for r in rows] == pytest.approx([0.6e-3, 0.6e-3])
    monkeypatch.setitem(__import__("sys").modules, "pandas", None)
    with pytest.raises(SweepError, match="pip install pandas"):
        sweep_frame("double_buffer", {"blocks": [1]}, workers=1)


def test_api_frame_with_pandas():
    pytest.importorskip("pandas")
    frame = sweep_frame("double_buffer", {"blocks": [1, 2]}, workers=1)
    assert list(frame["blocks"]) == [1, 2] and list(frame.columns)[-2:] == ["error", "seconds"]


def test_api_rejects_bad_workers_and_both_backends():
    with pytest.raises(SweepError, match="--workers=0 must be an integer >= 1"):
        sweep("double_buffer", {"blocks": [1]}, workers=0)
    with pytest.raises(SweepError, match="not both"):
        sweep("double_buffer", {"blocks": [1]}, workers=2, scheduler="tcp://127.0.0.1:1")


def test_grid_values_and_cells():
    assert grid_values("blocks", "1, 2,4") == ["1", "2", "4"]
    assert grid_values("axes", "0;0,1") == ["0", "0,1"]  # ';' separates values that contain commas
    assert [cell(v) for v in (None, 0.1, (0, 1), True, "x")] == ["", "0.1", "0,1", "True", "x"]
    assert [parse_cell(t) for t in ("", "3", "0.25", "tpu-v5e")] == [None, 3, 0.25, "tpu-v5e"]
    assert [parse_cell(t) for t in ("007", "nan", "inf", "1e3", " 3")] == ["007", "nan", "inf", "1e3", " 3"]


def test_progress_bar_on_stderr_only_when_asked(capsys):
    sweep("double_buffer", {"blocks": [1, 2]}, workers=1, progress=True)
    out, err = capsys.readouterr()
    assert out == "" and "sweep" in err and "2/2" in err and err.endswith("\n")
    sweep("double_buffer", {"blocks": [1, 2]}, workers=1)
    assert capsys.readouterr() == ("", "")


def test_scenario_files_run_from_relative_paths_in_workers(tmp_path, monkeypatch):
    scenario = tmp_path / "stopping.py"
    scenario.write_text(STOPPING)
    monkeypatch.chdir(tmp_path)
    rows = sweep("./stopping.py", {"x": ["1", "2"]}, workers=2)
    assert [r["end_to_end_s"] for r in rows] == [1e-3, 2e-3]
    assert list(rows[0]) == ["x", "end_to_end_s", "result.x", "error", "seconds"]  # a metric never shadows a parameter


def test_a_worker_that_dies_is_one_line_and_the_finished_rows_stay(capsys, tmp_path):
    scenario, out = tmp_path / "dying.py", tmp_path / "rows.csv"
    scenario.write_text(DYING)
    code, _, err = run_cli(capsys, "sweep", str(scenario), "--grid", "x=1,2,3,4", "--workers", "2", "--out", str(out))
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("podsim: error: a worker process failed:") and "--resume runs the rest" in err
    kept = [r["x"] for r in read_csv(out.read_text())]
    assert set(kept) <= {"1", "2", "4"} and kept == sorted(kept)


def test_workers_load_a_scenario_file_again_when_it_changes(tmp_path):
    scenario = tmp_path / "stopping.py"
    scenario.write_text(STOPPING)
    first = sweep(str(scenario), {"x": ["1", "2"]}, workers=2)
    scenario.write_text(STOPPING.replace("SCALE = 1", "SCALE = 10"))
    stat = scenario.stat()
    os.utime(scenario, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))  # a later edit, even on coarse clocks
    second = sweep(str(scenario), {"x": ["1", "2"]}, workers=2)  # the same worker processes, kept by joblib
    assert [r["end_to_end_s"] for r in first] == pytest.approx([1e-3, 2e-3])
    assert [r["end_to_end_s"] for r in second] == pytest.approx([1e-2, 2e-2])


def test_grid_points_are_made_lazily_in_product_order():
    import itertools
    import tracemalloc

    from simulator.frontend.sweep_table import GridPoints

    axes = {"a": [1, 2, 3], "b": ["x", "y"], "c": [0.5, 1.5, 2.5, 3.5]}
    points = GridPoints(axes, {"fixed": 7})
    expected = [{"a": a, "b": b, "c": c, "fixed": 7} for a, b, c in itertools.product(*axes.values())]
    assert len(points) == len(expected) and list(points) == expected
    assert [points[i] for i in range(len(points))] == expected and points[-1] == expected[-1]
    assert points[2:5] == expected[2:5]
    with pytest.raises(IndexError):
        points[len(expected)]
    tracemalloc.start()
    huge = GridPoints({k: list(range(1000)) for k in "abc"}, {})  # 1e9 points, three axes of 1,000 values
    middle = huge[123_456_789]
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(huge) == 10**9 and middle == {"a": 123, "b": 456, "c": 789}
    assert peak < 1_000_000  # the axes' values, not the product (a tuple of 1e9 dicts: hundreds of GB)


def test_an_absurd_grid_is_refused_up_front_with_its_size(capsys):
    values = ",".join(str(i) for i in range(1, 1001))
    status = main(["sweep", "collective_matmul", "--grid", f"B={values}", "--grid", f"D={values}",
                   "--grid", f"F={values}"])
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1
    assert "1,000,000,000 points (1,000 x 1,000 x 1,000)" in err
