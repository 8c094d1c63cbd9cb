"""--fault, --jitter, --samples and --seed on the command line (issue 18): specs, JSON, Monte Carlo, reports."""
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.engine.faults import ChipFail, ChipPause, ChipSlow, Jitter, LinkDegraded, LinkDown, LinkLatency
from simulator.errors import FaultError
from simulator.frontend import montecarlo
from simulator.frontend.cli import main
from simulator.frontend.fault_args import parse_fault, parse_jitter
from simulator.report.tails import critical_shares, tail_stats

COLLECTIVE = ["collective", "all_gather", "--chip", "tpu-v5e", "--topology", "torus:8", "--bytes", "16MB"]
JITTERED = ["run", "double_buffer", "--jitter", "5%", "--samples", "5", "--seed", "3", "--json"]


def run_json(capsys, argv, status=0):
    assert main(argv) == status
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("text,fault", [
    ("link:0->1=down", LinkDown(0, 1)),
    ("link:0,0->1,0=down", LinkDown((0, 0), (1, 0))),
    ("link:3->sw0=50%", LinkDegraded(3, "sw0", 0.5)),
    ("link:0->1=0.25", LinkDegraded(0, 1, 0.25)),
    ("link:0->1=latency:2us", LinkLatency(0, 1, 2e-6)),
    ("chip:17=slow:0.8", ChipSlow(17, 0.8)),
    ("chip:1,2=slow:0.5:mxu+hbm", ChipSlow((1, 2), 0.5, ("mxu", "hbm"))),
    ("chip:3=pause:1ms:0.5ms", ChipPause(3, 1e-3, 0.5e-3)),
    ("chip:5=fail", ChipFail(5)),
    ("chip:5=fail:2ms", ChipFail(5, 2e-3)),
])
def test_fault_specs(text, fault):
    assert parse_fault(text) == fault


@pytest.mark.parametrize("text,jitter", [("5%", Jitter("lognormal", 0.05)), ("gamma:0.1", Jitter("gamma", 0.1)),
                                         ("uniform:10%:mxu+link", Jitter("uniform", 0.1, ("mxu", "link")))])
def test_jitter_specs(text, jitter):
    assert parse_jitter(text) == jitter


@pytest.mark.parametrize("text,message", [("link:0-1=down", "must look like link:SRC->DST"),
                                          ("link:0->1=1.5", r"fraction in \(0, 1\]"),
                                          ("chip:2=slow:0", r"fraction in \(0, 1\]"),
                                          ("chip:x y=fail", "is not a chip")])
def test_bad_fault_specs_name_the_spec_and_what_is_valid(text, message):
    with pytest.raises(FaultError, match=message) as err:
        parse_fault(text)
    assert str(err.value).startswith(f"--fault {text!r}")


def test_a_collective_with_a_fault_reports_it_as_applied(capsys):
    out = run_json(capsys, [*COLLECTIVE, "--fault", "link:0->1=down", "--json"])
    assert (out["algorithm"] == "line" or "detour" in out["note"]) and out["time_s"] > 0  # line, or ring detouring
    (fault,) = out["faults"]
    assert fault["spec"] == "link:0->1=down" and fault["link"] == "0->1" and fault["directions"] == ["0->1", "1->0"]
    assert "axis 0 no longer wraps" in fault["effect"]
    assert main([*COLLECTIVE, "--fault", "link:0->1=down"]) == 0
    assert "no longer wraps" in capsys.readouterr().out


def test_monte_carlo_reports_the_tail_and_is_the_same_for_the_same_seed(capsys):
    out = run_json(capsys, JITTERED)
    assert out["samples"] == 5 and len(out["sample_times_s"]) == 5
    times = np.array(out["sample_times_s"])
    assert out["mean_s"] == pytest.approx(times.mean()) and out["max_s"] == times.max()
    assert out["p50_s"] <= out["p90_s"] <= out["p99_s"] <= out["max_s"]
    assert out["end_to_end_s"] == out["max_s"] == times[out["worst_sample"]]  # the worst draw, run again
    assert out["critical"] == [{"element": "chip 0", "count": 5, "share": 1.0}]
    assert out["jitter"] == {"distribution": "lognormal", "cv": 0.05, "units": ["mxu", "vpu", "hbm", "link"]}
    assert run_json(capsys, JITTERED) == out
    assert run_json(capsys, [*JITTERED[:-2], "4", "--json"])["sample_times_s"] != out["sample_times_s"]


def test_draws_in_worker_processes_equal_draws_here(capsys, monkeypatch):
    argv = [*COLLECTIVE, "--jitter", "10%", "--samples", "4", "--seed", "9", "--json"]
    monkeypatch.setattr(montecarlo, "PARALLEL_AFTER_S", float("inf"))
    here = run_json(capsys, argv)
    monkeypatch.setattr(montecarlo, "PARALLEL_AFTER_S", 0.0)
    monkeypatch.setattr(montecarlo.os, "cpu_count", lambda: 2)
    assert run_json(capsys, argv)["sample_times_s"] == here["sample_times_s"]


def test_monte_carlo_draws_the_distribution_and_the_worst_draw(tmp_path, capsys):
    picture = tmp_path / "tail.png"
    argv = [*COLLECTIVE, "--jitter", "10%", "--samples", "3", "--gantt", str(picture), "--fault", "chip:2=slow:0.5"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "collective over 3 draws (seed 0)" in text and "critical:" in text and "chip:2=slow:0.5" in text
    assert picture.stat().st_size > 10_000


def test_a_failed_chip_ends_the_command_with_its_report(capsys):
    assert main([*COLLECTIVE, "--fault", "chip:5=fail", "--json"]) == montecarlo.EXIT_INCOMPLETE
    printed = capsys.readouterr()
    out, err = json.loads(printed.out), printed.err
    assert out["completed"] is False and out["failed_chips"] == [{"chip": 5, "at_s": 0.0}]
    assert out["incomplete"][0]["operation"] == "all_gather"
    assert err.count("\n") == 1 and "failed chip 5" in err and "Traceback" not in err


def test_faults_reach_scenarios_sends_and_model_steps(capsys):
    slow = run_json(capsys, ["run", "double_buffer", "--fault", "chip:0=slow:0.5:mxu", "--json"])
    assert slow["end_to_end_s"] == pytest.approx(0.4e-3 + 2 * 0.1e-3)  # each block's compute doubles: 0.2 ms
    assert slow["faults"][0] == {"fault": "chip_slow", "chip": 0, "factor": 0.5, "units": ["mxu"],
                                 "spec": "chip:0=slow:0.5:mxu"}
    send = ["send", "--topology", "torus:4x4", "--src", "0,0", "--dst", "0,2", "--bytes", "1MB", "--json"]
    around = run_json(capsys, [*send, "--fault", "link:0,0->0,1=down"])
    assert around["routes"] == [[0, 3, 2]] and around["time_s"] == run_json(capsys, send)["time_s"]
    model = ["model", "gpt2", "--mode", "train", "--mesh", "data=4", "--batch", "8", "--json"]
    assert run_json(capsys, [*model, "--fault", "chip:2=slow:0.5"])["step_time_s"] > \
        run_json(capsys, model)["step_time_s"]


def test_samples_need_a_simulated_time(capsys):
    assert main(["model", "gpt2", "--no-simulate", "--samples", "2"]) == 2
    assert "--samples needs the simulated time" in capsys.readouterr().err


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(1e-9, 1e3), min_size=1, max_size=300))
def test_p99_is_never_below_p50(times):
    stats = tail_stats(times)
    assert stats["p50_s"] <= stats["p90_s"] <= stats["p99_s"] <= stats["max_s"]
    assert min(times) <= stats["mean_s"] * (1 + 1e-12) and stats["mean_s"] <= stats["max_s"] * (1 + 1e-12)


def test_critical_shares_count_every_draw():
    shares = critical_shares(["chip 3", "link 0->1", "chip 3", None])
    assert shares == [{"element": "chip 3", "count": 2, "share": 0.5}, {"element": "link 0->1", "count": 1,
                                                                          "share": 0.25}]
