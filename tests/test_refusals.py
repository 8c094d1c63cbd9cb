"""Inputs podsim once ran silently wrong (exit 0) are refused in one line (exit 2), or give the corrected number:
issue 34's list."""
import csv
import io
import json
from pathlib import Path

import pytest

from simulator.frontend.cli import main
from simulator.hardware.specs import get_chip
from simulator.report.export import CSV_COLUMNS
from simulator.workloads.transformer import get_model


def fails(capsys, *argv: str) -> str:
    """The one-line error of a refused command (exit status 2)."""
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


@pytest.mark.parametrize("argv,reached", [
    (["model", "gpt2", "--context", "100000"], "100,001"),  # the case
    (["model", "gpt2", "--context", "1024"], "1,025"),  # the new token's position is past the table
    (["model", "gpt2", "--mode", "prefill", "--seq", "2048"], "2,048"),
    (["model", "gpt2", "--mode", "train", "--seq", "2048", "--batch", "8", "--no-simulate"], "2,048"),
    (["run", "transformer_step", "--set", "model=gpt2", "--set", "context=4096"], "4,097"),
])
def test_a_context_past_the_models_positions_is_refused(capsys, argv, reached):
    err = fails(capsys, *argv)
    assert f"reaches position {reached}, but gpt2's positions end at 1,024 (max_positions)" in err


def test_a_context_within_the_positions_runs(capsys):
    assert main(["model", "gpt2", "--context", "1023", "--no-simulate"]) == 0  # positions 0 ... 1023
    capsys.readouterr()


DATA = Path(__file__).parent / "data" / "hlo"


def test_an_hlo_collective_along_a_dimension_its_array_lacks_is_refused(capsys, tmp_path):
    text = (DATA / "async_tpu_style.txt").read_text(encoding="utf-8")
    gather = next(line for line in text.splitlines() if "all-gather-start(" in line)
    path = tmp_path / "gather_dim7.txt"
    path.write_text(text.replace(gather, gather.replace("dimensions={0}", "dimensions={7}")), encoding="utf-8")
    err = fails(capsys, "hlo", str(path), "--chip", "tpu-v5e", "--topology", "torus:2x4")
    assert "dimensions={7}" in err and "%w2 is bf16[256, 2048], an array of rank 2 with dimensions 0 to 1" in err
    assert main(["hlo", str(DATA / "async_tpu_style.txt"), "--chip", "tpu-v5e", "--topology", "torus:2x4"]) == 0


def test_an_hlo_dot_contracting_a_dimension_its_operand_lacks_is_refused(capsys, tmp_path):
    text = (DATA / "matmul_case1.txt").read_text(encoding="utf-8")
    dot = next(line for line in text.splitlines() if " dot(" in line and "rhs_contracting_dims={" in line)
    start = dot.index("rhs_contracting_dims={")
    bad = dot[:start] + "rhs_contracting_dims={5}" + dot[dot.index("}", start) + 1:]
    path = tmp_path / "dot_dim5.txt"
    path.write_text(text.replace(dot, bad), encoding="utf-8")
    err = fails(capsys, "hlo", str(path), "--chip", "tpu-v5e", "--topology", "torus:2x4")
    assert "rhs_contracting_dims={5}" in err and "an array of rank 2" in err


TRAIN = ["model", "llama-3-8b", "--mode", "train", "--batch", "16", "--seq", "1024", "--mesh", "fsdp=16",
         "--no-simulate"]


@pytest.mark.parametrize("flag,value,reason", [
    ("--compute-dtype", "fp8", "a training step computes in its model's own dtype"),
    ("--kv-sharding", "sequence", "a training step keeps none"),
    ("--context", "4096", "a training step's tokens are --seq"),
    ("--weight-dtype", "int8", "a training step keeps its model's own dtype"),
    ("--kv-dtype", "int8", "a training step keeps no KV cache"),
])
def test_a_flag_training_does_not_read_is_refused_with_the_reason(capsys, flag, value, reason):
    err = fails(capsys, *TRAIN, flag, value)
    assert reason in err and f"drop {flag}" in err


def test_a_schedule_without_a_pipeline_axis_is_refused(capsys):
    err = fails(capsys, *TRAIN, "--schedule", "gpipe")
    assert "--schedule gpipe orders a pipeline's microbatches, but --mesh fsdp=16 has no pipeline axis" in err
    assert "is a training pipeline's" in fails(capsys, "model", "llama-3-8b", "--schedule", "gpipe")
    assert main(["model", "gpt2", "--mode", "train", "--batch", "8", "--seq", "1024", "--mesh", "pipeline=2",
                 "--microbatches", "4", "--schedule", "gpipe", "--no-simulate"]) == 0
    assert main(TRAIN) == 0  # the defaults (1f1b, no context) are not flags the user gave
    capsys.readouterr()


def test_text_and_json_show_the_steps_one_mfu_with_a_projection(capsys):
    """Issue 34: --tokens-total replaced the step's MFU (model FLOPs with attention) by the projection's (6 N T)."""
    args = ["model", "gpt2", "--mode", "train", "--mesh", "data=4", "--batch", "8", "--seq", "1024", "--no-simulate"]
    assert main([*args, "--json"]) == 0
    alone = json.loads(capsys.readouterr().out)
    assert main([*args, "--tokens-total", "1e9", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mfu"] == alone["mfu"]
    peak = get_chip("tpu-v5e").peak_flops_per_s("bf16")
    six_n_t = 6 * get_model("gpt2").params(active=True) * 1e9
    assert out["projection_mfu"] == pytest.approx(six_n_t / (out["time_to_train_s"] * 4 * peak))
    assert main([*args, "--tokens-total", "1e9"]) == 0
    text = capsys.readouterr().out
    assert f"MFU {out['mfu']:.1%}," in text and f"MFU {out['projection_mfu']:.1%} counting 6 N T" in text


def test_csv_dash_writes_the_spans_to_stdout_and_the_summary_to_stderr(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "double_buffer", "--csv", "-"]) == 0
    out, err = capsys.readouterr()
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0] == list(CSV_COLUMNS) and len(rows) > 1
    assert err.startswith("double_buffer:") and not (tmp_path / "-").exists()
    assert main(["run", "double_buffer", "--trace", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["traceEvents"]


@pytest.mark.parametrize("argv,message", [
    (["--trace", "x.json", "--csv", "x.json"], "--trace and --csv both name 'x.json'"),
    (["--trace", "x.json", "--csv", "./x.json"], "one would overwrite the other"),
    (["--trace", "-", "--csv", "-"], "would both write to stdout"),
    (["--csv", "-", "--json"], "--csv - and --json would both write to stdout"),
    (["--gantt", "-"], "a picture is not written to stdout"),
])
def test_outputs_that_collide_are_refused(capsys, tmp_path, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    assert message in fails(capsys, "run", "double_buffer", *argv)
    assert not list(tmp_path.iterdir())  # refused before anything ran or was written


def test_a_roofline_whose_intensity_overflows_is_refused(capsys):
    err = fails(capsys, "roofline", "--chip", "tpu-v5e", "--flops", "1e12", "--bytes", "1e-300")
    assert "--bytes 1e-300 makes the intensity (FLOP/byte) inf" in err
    assert main(["roofline", "--chip", "tpu-v5e", "--flops", "1e12", "--bytes", "1e9", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["intensity_flops_per_byte"] == pytest.approx(1e12 / 1e9)
