"""``podsim serve`` from the command line (issue 33): the JSON contract, bound beside forecast, determinism per
seed, the Perfetto counters and the picture, trace CSVs in, one-line refusals; the validation family's data."""
from __future__ import annotations

import csv
import json

import pytest

from simulator.frontend.cli import main
from simulator.frontend.validate_serving import run_requests, serving_rows
from simulator.hardware.calibration import DATA

BASE = ("serve", "llama-3-8b", "--chip", "h100", "--duration", "20s", "--prompt-len", "256", "--output-len", "32")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, *argv: str) -> dict:
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def test_json_has_every_figure_labelled_bound_and_forecast(capsys):
    out = run_json(capsys, *BASE, "--rate", "4", "--calibrated", "--slo-ttft", "300ms", "--slo-tpot", "30ms")
    for kind in ("bound", "forecast"):
        assert out[kind]["kind"] == kind
        for metric in ("ttft_s", "tpot_s", "e2e_s"):
            assert set(out[kind][metric]) >= {"p50", "p90", "p99", "max"}
        assert out[kind]["requests"] == out["requests"]
        assert {"requests_per_s", "output_tokens_per_s", "goodput_requests_per_s"} <= set(out[kind])
    # the calibrated steps are slower than the ideal ones, so every latency is at least the bound's
    assert out["forecast"]["tpot_s"]["p50"] >= out["bound"]["tpot_s"]["p50"]
    assert out["forecast"]["ttft_s"]["p50"] >= out["bound"]["ttft_s"]["p50"]
    assert set(out["labels"]) == {"bound", "forecast"}


def test_same_seed_same_answer(capsys):
    one = run_json(capsys, *BASE, "--rate", "3", "--seed", "5")
    two = run_json(capsys, *BASE, "--rate", "3", "--seed", "5")
    other = run_json(capsys, *BASE, "--rate", "3", "--seed", "6")
    assert one == two
    assert one["bound"] != other["bound"]


def test_text_output_names_bound_and_forecast(capsys):
    code, out, err = run(capsys, *BASE, "--rate", "2", "--calibrated")
    assert code == 0, err
    assert "bound" in out and "forecast" in out and "TTFT p50/p90/p99/max" in out


def test_trace_csv_in_perfetto_and_plot_out(capsys, tmp_path):
    requests = tmp_path / "requests.csv"
    requests.write_text("arrival_time,input_tokens,output_tokens\n0,100,5\n0.5,200,8\n1.0,50,3\n")
    counters, picture = tmp_path / "out.json", tmp_path / "out.png"
    out = run_json(capsys, "serve", "llama-3-8b", "--chip", "h100", "--trace", str(requests), "--trace", str(counters),
                   "--plot", str(picture))
    assert out["requests"] == 3
    events = json.loads(counters.read_text())["traceEvents"]
    names = {e["name"] for e in events if e["ph"] == "C"}
    assert {"batch size", "running requests", "waiting requests", "kv occupancy"} <= names
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_disaggregated_and_replicas_run(capsys):
    out = run_json(capsys, *BASE, "--rate", "2", "--topology", "nodes:2:8", "--prefill-mesh", "model=2",
                   "--decode-mesh", "data=2,model=2", "--calibrated")
    assert out["chips"] == 6 and out["kv_link"]["bandwidth_bytes_per_s"] > 0
    assert out["forecast"]["kv_transfer_s"]["mean"] > 0


def test_tpu_mesh_runs_and_names_what_is_uncalibrated(capsys):
    out = run_json(capsys, "serve", "llama-3-8b", "--chip", "tpu-v5e", "--mesh", "data=2,model=4", "--rate", "2",
                   "--duration", "10s", "--calibrated", "--output-len", "16")
    assert out["uncalibrated"] and out["forecast"]["requests"] == out["requests"]


def test_find_rate_reports_the_rate(capsys):
    out = run_json(capsys, *BASE, "--find-rate", "--slo-ttft", "200ms", "--slo-tpot", "15ms")
    assert out["find_rate"]["rate_per_s"] == out["rate_per_s"] > 0
    assert out["bound"]["slo_attainment"] >= 0.9


@pytest.mark.parametrize("argv,needle", [
    (("--rate", "0"), "--rate"),
    (("--rate", "-3"), "--rate"),
    ((), "exactly one of --rate"),
    (("--find-rate",), "needs a target"),
    (("--rate", "1", "--max-model-len", "100"), "longer than the context"),
    (("--rate", "1", "--prompt-len", "uniform:5"), "--prompt-len"),
    (("--rate", "1", "--preempt", "drop"), "--preempt"),
    (("--rate", "1", "--prefill-mesh", "model=2"), "go together"),
    (("--rate", "1", "--duration", "0"), "--duration"),
    (("--rate", "nan"), "--rate"),
    (("--rate", "1", "--scheduler-steps", "0"), "--scheduler-steps"),
])
def test_bad_input_is_one_line_exit_2(capsys, argv, needle):
    code, out, err = run(capsys, *BASE, *argv)
    assert code == 2 and out == ""
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err


def test_kv_that_cannot_hold_one_request_exit_2(capsys):
    code, _, err = run(capsys, "serve", "llama-3-70b", "--chip", "h100", "--rate", "1")
    assert code == 2 and "cannot hold one request" in err and err.count("\n") == 1


def test_prompt_past_a_learned_position_table_exit_2(capsys):
    # GPT-2 has 1,024 learned positions: a 2,000-token prompt cannot run, whatever --max-model-len says
    code, out, err = run(capsys, "serve", "gpt2", "--chip", "h100", "--rate", "1", "--prompt-len", "2000")
    assert code == 2 and out == "" and "1,024 positions" in err and err.count("\n") == 1


def test_empty_trace_exit_2(capsys, tmp_path):
    empty = tmp_path / "e.csv"
    empty.write_text("arrival_s,prompt_tokens,output_tokens\n")
    code, _, err = run(capsys, "serve", "llama-3-8b", "--chip", "h100", "--trace", str(empty))
    assert code == 2 and "empty trace" in err


def test_validation_rows_carry_sources_and_are_all_held_out():
    rows = serving_rows()
    assert rows and all(r["source"].startswith("https://") and r["set"] == "held_out" for r in rows)
    with (DATA / "calibration" / "serving_requests.csv").open() as f:
        runs = {r["run"] for r in csv.DictReader(f)}
    assert {r["run"] for r in rows} <= runs
    assert len(run_requests("lambda-h100-llama3-8b-p80")) == 80
    assert sum(a.prompt_tokens for a in run_requests("lambda-h100-llama3-8b-p80")) == 19504  # the file's total


def test_tensor_parallel_runs_are_a_family_of_their_own():
    from simulator.frontend.validate import Case
    from simulator.frontend.validate_serving import FAMILY, TP_FAMILY, serving_cases

    tp = {r["run"] for r in serving_rows() if int(r["gpus"]) > 1}
    assert {"lambda-h100x2-llama3-8b-p10", "lambda-h100x8-llama3-70b-p10"} <= tp
    cases = [c for c in serving_cases(Case) if c.family in (FAMILY, TP_FAMILY)]
    assert len(cases) == len(serving_rows())
    assert all((c.family == TP_FAMILY) == (c.name.split()[0] in tp) for c in cases)
    # 10 prompts of the same ShareGPT draw as the one-GPU runs (the file's total_input_tokens)
    assert sum(a.prompt_tokens for a in run_requests("lambda-h100x8-llama3-70b-p10")) == 1369


def test_plan_serve_ranks_layouts_by_chips_needed(capsys):
    out = run_json(capsys, "plan", "llama-3-8b", "--chip", "h100", "--chips", "8", "--mode", "serve", "--rate", "30",
                   "--batch", "256", "--seq", "512", "--output-len", "64", "--slo-ttft", "500ms", "--slo-tpot", "20ms")
    rows = [r for r in out["plans"] if r["chips_needed"] is not None]
    assert rows and [r["chips_needed"] for r in rows] == sorted(r["chips_needed"] for r in rows)
    for r in rows:
        assert r["replicas"] == -(-30 // r["per_replica_rate_per_s"])  # ceil(rate / per-replica rate)
        assert r["chips_needed"] == r["replicas"] * r["mesh"]["model"]


def test_the_docs_example_prints_what_the_page_shows(capsys):
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "serving.md").read_text()
    block = page.split("## Example\n\n```\n", 1)[1].split("```", 1)[0]
    command, shown = block.split("\n", 1)
    code, out, err = run(capsys, *command.removeprefix("$ podsim ").split())
    assert code == 0, err
    assert out == shown


def test_the_stream_families_report_their_own_target_as_they_stand():
    """Each request-stream family is judged on issue 33's 15%, and its note and the rendered line say what the
    numbers say (meets or misses), so a note cannot outlive the result it describes."""
    from simulator.frontend.validate import render, validate
    from simulator.frontend.validate_serving import FAMILY, TP_FAMILY

    result = validate()
    lines = render(result).splitlines()
    for family in (FAMILY, TP_FAMILY):
        held = result["families"][family]["held_out"]
        assert held["target_error"] == 0.15 and held["meets_target"] == (held["geomean_error"] <= 0.15)
        word = "meets" if held["meets_target"] else "misses"
        assert result["notes"][family].startswith(f"{word} the 15% target")
        assert any(line.startswith(family) and "held_out" in line and f"{word.upper() if word == 'misses' else word} "
                   "the 15% target" in line for line in lines)


def test_the_cli_names_the_preemption_modes_the_simulator_runs():
    """serve_cmd spells them itself so the parser does not import the simulator (`podsim --help` stays light)."""
    from simulator.frontend.serve_cmd import PREEMPT_MODES
    from simulator.workloads.serving.simulate import PREEMPT_MODES as RUN

    assert PREEMPT_MODES == RUN
