"""`podsim compare A.json B.json` (issue 30 item 6): two real saved runs, through the CLI."""
import json

import pytest

from simulator.frontend.cli import main


def _save(capsys, tmp_path, name, *argv):
    """Run ``argv`` writing --trace NAME.trace.json and --json to NAME.json; the run's own JSON result."""
    trace = tmp_path / f"{name}.trace.json"
    assert main([*argv, "--trace", str(trace), "--json"]) == 0
    text = capsys.readouterr().out
    (tmp_path / f"{name}.json").write_text(text)
    return json.loads(text), str(tmp_path / f"{name}.json"), str(trace)


def _compare(capsys, *argv):
    assert main(["compare", *argv, "--json"]) == 0, capsys.readouterr().err
    return {r["what"]: r for r in json.loads(capsys.readouterr().out)["rows"]}


def test_double_buffer_one_against_two_buffers(capsys, tmp_path):
    """The book's case: 0.4 ms of loads and 0.2 ms of compute in 2 blocks: one buffer runs load, compute, load,
    compute = 0.6 ms; two overlap the second load with the first compute: 0.2 + 0.2 + 0.1 = 0.5 ms. The MXU
    is busy 0.2 ms in both, so the exposed time (end to end minus compute) falls from 0.4 to 0.3 ms."""
    one, one_json, one_trace = _save(capsys, tmp_path, "one", "run", "double_buffer", "--set", "buffers=1")
    two, two_json, two_trace = _save(capsys, tmp_path, "two", "run", "double_buffer")
    for a, b in ((one_json, two_json), (one_trace, two_trace), (one_json, two_trace)):
        rows = _compare(capsys, a, b)
        assert rows["end to end"]["a"] == pytest.approx(0.6e-3) and rows["end to end"]["b"] == pytest.approx(0.5e-3)
        assert rows["end to end"]["change"] == pytest.approx(-1 / 6)
        assert rows["exposed"]["a"] == pytest.approx(0.4e-3) and rows["exposed"]["b"] == pytest.approx(0.3e-3)
        assert rows["busy mxu"]["a"] == pytest.approx(0.2e-3) == rows["busy mxu"]["b"]
        assert rows["bytes hbm_read"]["a"] == pytest.approx(one["bytes"]["hbm_read"])
        assert rows["bytes hbm_read"]["change"] == pytest.approx(0.0)
    gantt = tmp_path / "diff.png"
    assert main(["compare", one_trace, two_trace, "--gantt", str(gantt)]) == 0
    text = capsys.readouterr().out
    assert gantt.stat().st_size > 1000 and "end to end" in text and "-16.7%" in text


def test_collective_algorithms_by_link_group(capsys, tmp_path):
    """AllReduce of 64 MB over a 4x4 torus, bidirectional rings against one-way rings (full simulation): each
    one-way ring carries the whole 2 (n - 1) / n V per axis stage on one direction, so the "+" links carry
    twice the bytes and the "-" links none; the bytes over ICI in all are the same."""
    base = ["collective", "all_reduce", "--chip", "tpu-v5e", "--topology", "torus:4x4", "--bytes", "64MB",
            "--mode", "full"]
    a, _, a_trace = _save(capsys, tmp_path, "bi", *base, "--algorithm", "bidirectional")
    b, _, b_trace = _save(capsys, tmp_path, "uni", *base, "--algorithm", "unidirectional")
    rows = _compare(capsys, a_trace, b_trace)
    assert rows["end to end"]["a"] == pytest.approx(a["end_to_end_s"], rel=1e-9)
    assert rows["end to end"]["b"] == pytest.approx(b["end_to_end_s"], rel=1e-9)
    assert rows["bytes ici"]["a"] == pytest.approx(rows["bytes ici"]["b"])
    plus, minus = rows["link bytes, ICI axis 0 +"], rows["link bytes, ICI axis 0 -"]
    assert plus["b"] == pytest.approx(2 * plus["a"]) and minus["b"] is None and minus["a"] > 0


def test_bad_inputs_are_one_line_errors(capsys, tmp_path):
    _, res, trace = _save(capsys, tmp_path, "x", "run", "double_buffer")
    assert main(["compare", res, trace, "--gantt", str(tmp_path / "d.png")]) == 2
    assert "A is a --json result (no spans)" in capsys.readouterr().err
    (tmp_path / "other.json").write_text('{"hello": 1}')
    assert main(["compare", res, str(tmp_path / "other.json")]) == 2
    assert "neither a run's --json result" in capsys.readouterr().err
    assert main(["compare", res, str(tmp_path / "missing.json")]) == 2
    assert "no such file" in capsys.readouterr().err
