"""Walk docs/book.md: every worked question's command still gives the page's figure, and a "match" is the book's
answer within its stated tolerance (the book's answers are typed in the page, from its chapters; the page
itself comes from scripts/make_book.py, whose catalogue must agree with it)."""
from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
from pathlib import Path

import pytest
from conftest import load_script

ROOT = Path(__file__).resolve().parents[1]
ROW = re.compile(r"^\| (\d+) \| ([\w-]+) \| (.+?) \| (`podsim (.+?)`|—) \| (\S+) \| (\S*) \| (\S*) \| (.+) \|$", re.M)
ROWS = ROW.findall((ROOT / "docs" / "book.md").read_text())
RUN = [r for r in ROWS if r[4]]
SLOW = ("superpod",)  #: commands of a thousand GPUs: a few seconds each, run as benchmarks


def _script():
    return load_script("make_book")


def _field(out: dict, path: str) -> float:
    for key in path.split("."):
        out = out[int(key)] if isinstance(out, list) else out[key]
    return float(out)


def test_the_page_covers_every_chapter_and_agrees_with_its_generator():
    chapters = {r[1] for r in ROWS}
    assert {"roofline", "tpus", "sharding", "transformers", "training", "inference", "gpus"} <= chapters
    catalogue = _script().QUESTIONS
    assert len(catalogue) == len(ROWS)
    for (chapter, question, command, path, book, _), row in zip(catalogue, ROWS, strict=True):
        assert (chapter, question, command or "", path or "—") == (row[1], row[2], row[4], row[5])
        assert (book is None) == (row[6] == "")
        if book is not None:
            assert float(row[6]) == pytest.approx(book, rel=1e-3)
    assert sum(r[8].startswith("match") for r in ROWS) >= 75


def test_the_pages_counts_are_its_rows():
    text = (ROOT / "docs" / "book.md").read_text()
    counts = re.search(r"(\d+) questions: (\d+) match, (\d+) differ with a documented reason, (\d+) are not", text)
    assert counts, "the page's summary line is missing"
    verdicts = [r[8] for r in ROWS]
    assert [int(c) for c in counts.groups()] == [len(ROWS), sum(v.startswith("match") for v in verdicts),
                                                sum(v.startswith("differs") for v in verdicts),
                                                sum(v.startswith("not expressible") for v in verdicts)]


@pytest.mark.parametrize("row", [pytest.param(r, marks=pytest.mark.benchmark) if any(s in r[4] for s in SLOW)
                                 else r for r in RUN], ids=[f"{r[0]} {r[1]}" for r in RUN])
def test_each_command_gives_the_page_figure_and_the_books_answer(row, monkeypatch):
    from simulator.frontend.cli import main

    number, _, _, _, command, path, book, shown, verdict = row
    monkeypatch.chdir(ROOT)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main([*shlex.split(command), "--json"]) == 0
    value = _field(json.loads(buf.getvalue()), path)
    assert value == pytest.approx(float(shown), rel=1e-5), f"row {number}: the page is stale; run scripts/make_book.py"
    if verdict == "match (exact)":
        assert value == float(book)
    elif verdict.startswith("match"):
        tol = float(re.search(r"within ([\d.]+)%", verdict).group(1)) / 100
        assert value == pytest.approx(float(book), rel=tol)
    else:
        assert verdict.startswith("differs: ") and len(verdict) > 40  # the documented reason


def test_unexpressible_rows_say_why():
    for row in ROWS:
        if not row[4]:
            assert row[8].startswith("not expressible: ") and len(row[8]) > 30
