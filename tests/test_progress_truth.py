"""Progress that is true (issue 29 item 4): whatever its callers send, a watch's estimate is never negative and
never below the events already simulated, its simulated time never goes back, and counts only grow; Monte
Carlo draws and `podsim plan`'s layouts and finalists are counted."""
from __future__ import annotations

import io
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.engine.system import System
from simulator.engine.watch import RunWatch, count_steps, watching
from simulator.frontend.cli import main
from simulator.frontend.progress import Progress, line
from simulator.workloads.pipeline import Operand, Step, run_steps

UPDATES = st.lists(st.one_of(
    st.tuples(st.just("expect"), st.integers(-10**9, 10**9)),  # corrections take work back: negative counts
    st.tuples(st.just("tick"), st.floats(0, 1e3, allow_nan=False), st.integers(0, 10**6), st.integers(0, 3)),
    st.tuples(st.just("clock"), st.floats(0, 1e3, allow_nan=False), st.integers(0, 3)),
), max_size=60)


@given(UPDATES)
def test_any_sequence_of_updates_keeps_the_watch_true(updates):
    watch = RunWatch()
    clocks: dict[int, list[float]] = {}  # the oracle: each system's readings; its simulated time is its last,
    replaced = 0.0  # and a reading behind its last is a new system at the same id (the old one's time stays)
    before = 0.0
    for update in updates:
        if update[0] == "expect":
            watch.expect(update[1], "hint")
        else:
            now, run = (update[1], update[3]) if update[0] == "tick" else (update[1], update[2])
            if update[0] == "tick":
                watch.tick(now, update[2], run)
            else:
                watch.clock(now, run)
            last = clocks.setdefault(run, [0.0])[-1]
            replaced += last if now < last else 0.0
            clocks[run].append(now)
        assert watch.estimate is None or watch.estimate >= 0
        assert watch.total is None or watch.total >= watch.events >= 0
        assert watch.simulated_s >= before - 1e-9 * max(1.0, before)  # monotone (to float rounding)
        before = watch.simulated_s
        text = line(watch, 5.0)
        assert "-" not in text.split("events")[0]  # no negative count in the line
    expected = replaced + sum(readings[-1] for readings in clocks.values())
    assert watch.simulated_s == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_a_correction_takes_back_at_most_what_was_expected():
    watch = RunWatch()
    watch.expect(100, "hint")
    watch.expect(-97_044_968, "hint")  # what once printed "about -97,044,968 events"
    assert watch.estimate == 0
    watch.tick(1e-3, 260_819)  # and "260,819 of about 163,960"
    assert watch.total == 260_819 and "of about 260,819" in watch.so_far()


def test_two_systems_one_after_the_other_add_their_simulated_times():
    watch = RunWatch()
    ends = []
    with watching(watch):
        for n in (3, 5):
            system = System()
            run_steps(system, [Step(f"b{i}", (Operand(f"b{i}", "x", 1e3),), flops=1e3) for i in range(n)])
            ends.append(system.run())
    assert watch.now_s == ends[-1]  # the last system's clock
    assert watch.simulated_s == pytest.approx(sum(ends), rel=1e-12)  # both runs, not the last one only


def test_counts_only_grow_and_stay_within_their_total():
    watch = RunWatch()
    with watching(watch):
        count_steps("draws", 1, 4)
        count_steps("draws", 3, 4)
        with pytest.raises(ValueError, match="must grow"):
            count_steps("draws", 2, 4)
        with pytest.raises(ValueError, match="within 0..total"):
            count_steps("draws", 5, 4)
    count_steps("draws", 9, 4)  # no watch: nothing to tell
    assert watch.counted() == "draws 3 of 4"


def test_the_progress_line_shows_the_counts():
    stream = io.StringIO()
    watch = RunWatch(estimate=1_000)
    watch.started -= 20.0
    watch.count("layouts priced", 40, 96)
    watch.tick(2e-3, 10)
    Progress(stream)(watch)
    assert stream.getvalue().strip().endswith("; layouts priced 40 of 96")


def _counted(monkeypatch, argv: list[str]) -> tuple[int, dict[str, list[tuple[int, int]]]]:
    seen: dict[str, list[tuple[int, int]]] = {}
    record = RunWatch.count

    def spy(self, what, done, total):
        seen.setdefault(what, []).append((done, total))
        record(self, what, done, total)

    monkeypatch.setattr(RunWatch, "count", spy)
    return main(argv), seen


def test_monte_carlo_counts_every_draw(monkeypatch, capsys):
    status, seen = _counted(monkeypatch, ["run", "double_buffer", "--jitter", "5%", "--samples", "4", "--json"])
    assert status == 0 and json.loads(capsys.readouterr().out)["samples"] == 4
    assert seen["draws"] == [(1, 4), (2, 4), (3, 4), (4, 4)]


def test_plan_counts_layouts_priced_and_finalists_simulated_and_prints_them(monkeypatch, capsys):
    status, seen = _counted(monkeypatch, ["plan", "gpt2", "--chips", "4", "--batch", "8", "--seq", "512",
                                          "--top", "2"])
    text = capsys.readouterr().out
    layouts = seen["layouts priced"]
    assert status == 0 and [d for d, _ in layouts] == list(range(1, layouts[-1][1] + 1))
    assert seen["finalists simulated"] == [(0, 2), (1, 2), (2, 2)]
    assert "2 finalists simulated" in text.splitlines()[0] and " sim " in text


def test_without_a_terminal_the_first_line_comes_after_two_seconds():
    """Issue 34: runs of 9-13 s printed nothing (the first plain line waited ten seconds)."""
    import io
    import time

    from simulator.engine.watch import RunWatch
    from simulator.frontend.progress import FIRST_LINE_S, LINE_EVERY_S, Progress

    stream = io.StringIO()
    progress = Progress(stream)
    watch = RunWatch(estimate=1_000)
    watch.started, watch.events = time.monotonic() - (FIRST_LINE_S + 0.5), 10
    progress(watch)
    assert stream.getvalue().count("\n") == 1
    progress(watch)  # the next one a whole LINE_EVERY_S later
    assert stream.getvalue().count("\n") == 1 and LINE_EVERY_S > FIRST_LINE_S
