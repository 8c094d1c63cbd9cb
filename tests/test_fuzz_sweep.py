"""Fuzz `podsim sweep` with generated --out files for --resume and generated --grid text.

Every invocation exits 0 or 2 with no traceback; stdout (--json) holds no inf or nan (no NaN/Infinity
constants); a refused --resume leaves the file byte for byte as it was, and an accepted one leaves a
sweep CSV holding every grid point.
"""
from __future__ import annotations

import contextlib
import csv
import io
import json
import string

from hypothesis import event, given, settings
from hypothesis import strategies as st

from simulator.frontend.cli import main
from simulator.frontend.sweep import cell, parse_cell, write_csv

HEADERS = [["blocks", "end_to_end_s", "error", "seconds"], ["blocks", "error", "seconds"], ["blocks", "buffers",
           "error", "seconds"], ["x", "error", "seconds"], ["blocks", "seconds", "error"], ["blocks"], []]
CELLS = st.one_of(st.sampled_from(["", "1", "2", "3", "0.5", "-1", "nan", "inf", "1e400", "True", "0.0004"]),
                  st.text(max_size=8))


@st.composite
def tables(draw: st.DrawFn) -> bytes:
    """A CSV close to a sweep's: a header from HEADERS (or made up), rows of odd cells (most with a wall
    time last, a few a cell short or long), maybe cut short anywhere."""
    header = draw(st.one_of(st.sampled_from(HEADERS[:2]), st.sampled_from(HEADERS), st.lists(st.text(max_size=6),
                                                                                             max_size=4)))
    rows = []
    for _ in range(draw(st.integers(0, 4))):
        cells = draw(st.lists(CELLS, min_size=len(header), max_size=len(header)))
        if cells and draw(st.integers(0, 3)):
            cells[-1] = draw(st.sampled_from(["0.1", "0", "1e-05", "3"]))
        rows.append(cells[:draw(st.sampled_from([-1, None, None, None]))] + draw(st.sampled_from([[], [], ["x"]])))
    stream = io.StringIO()
    csv.writer(stream, lineterminator=draw(st.sampled_from(["\n", "\r\n"]))).writerows([header, *rows])
    text = stream.getvalue()
    return (text[:draw(st.integers(0, len(text)))] if draw(st.integers(0, 3)) == 0 else text).encode()


FILES = st.one_of(tables(), tables(), st.binary(max_size=64), st.text(max_size=64).map(str.encode))


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def finite_json(text: str) -> dict:
    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} on stdout")

    return json.loads(text, parse_constant=refuse)


@settings(max_examples=150, deadline=None)
@given(content=FILES)
def test_resume_from_any_file(tmp_path_factory, content):
    path = tmp_path_factory.mktemp("resume") / "rows.csv"
    path.write_bytes(content)
    code, out, err = run("sweep", "double_buffer", "--grid", "blocks=1,2", "--workers", "1", "--out", str(path),
                         "--resume", "--json")
    event(f"exit {code}")  # pytest --hypothesis-show-statistics: how often a file is taken (about 1 in 6)
    assert code in (0, 2) and "Traceback" not in err
    if code == 2:
        assert out == "" and err.startswith("podsim: error: --resume: ") and err.count("\n") == 1
        assert path.read_bytes() == content and [p.name for p in path.parent.iterdir()] == ["rows.csv"]
        return
    data = finite_json(out)
    rows = list(csv.DictReader(io.StringIO(path.read_bytes().decode(), newline="")))
    assert data["rows_count"] == len(rows) >= 2 and list(rows[0])[-2:] == ["error", "seconds"]
    assert [r["blocks"] for r in rows[:2]] == ["1", "2"]  # the grid's points first, in grid order


@settings(max_examples=150, deadline=None)
@given(key=st.sampled_from(["load_s", "chip", "trace", "nope", "blocks,"]),
       text=st.one_of(st.text(max_size=20), st.text(alphabet=string.digits + "e.-+,;msuinfa ", max_size=12)))
def test_any_grid_text(key, text):
    code, out, err = run("sweep", "double_buffer", "--grid", f"{key}={text}", "--workers", "1", "--json")
    assert code in (0, 2) and "Traceback" not in err
    if code == 2:
        assert out == "" and err.startswith("podsim: error: ") and err.count("\n") == 1
    else:
        assert finite_json(out)["rows_count"] >= 1


@given(text=st.text(max_size=30))
def test_a_cell_read_back_is_written_the_same(text):
    assert cell(parse_cell(text)) == text


@given(rows=st.lists(st.lists(st.text(max_size=8), min_size=2, max_size=2), max_size=3))
def test_written_cells_read_back_the_same(rows):
    stream = io.StringIO()
    write_csv([dict(zip("ab", row, strict=True)) for row in rows], stream, ["a", "b"])
    assert list(csv.reader(io.StringIO(stream.getvalue(), newline=""))) == [["a", "b"], *rows]
