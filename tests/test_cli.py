"""The podsim command line: chips, list, run, roofline, output files, and one-line errors (exit 2).

Expected numbers come from REFERENCE.md: the double-buffer pipeline t = max(qa, qc) + min(a, c)
(one buffer: q(a + c)), the 8 MB / 32 MB weight-reuse example, the roofline formulas and the v5e
numbers (1.97e14 bf16 FLOP/s, 8.2e11 B/s HBM, peak intensity about 240).
"""
from __future__ import annotations

import csv
import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.frontend.cli import main
from simulator.units import format_quantity

PRESET_NAMES = ("tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu7x", "h100", "h200", "b200")
V5E_BF16 = 1.97e14
V5E_HBM = 8.2e11
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, *argv: str) -> dict:
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def pipeline_time(q: int, a: float, c: float, buffers: int) -> float:
    """REFERENCE.md: two buffers max(qa, qc) + min(a, c); one buffer q(a + c)."""
    return q * (a + c) if buffers == 1 else max(q * a, q * c) + min(a, c)


# --- listing ------------------------------------------------------------------------------------------


def test_chips_lists_every_preset(capsys):
    code, out, _ = run_cli(capsys, "chips")
    assert code == 0
    first_words = {line.split()[0] for line in out.splitlines() if line.strip()}
    assert set(PRESET_NAMES) <= first_words


def test_chips_json(capsys):
    data = run_json(capsys, "chips")
    assert set(PRESET_NAMES) <= set(data)
    assert data["tpu-v5e"]["peak_bf16_flops_per_s"] == pytest.approx(V5E_BF16)
    assert data["tpu-v5e"]["hbm_bandwidth_bytes_per_s"] == pytest.approx(V5E_HBM)
    assert data["h100"]["wraparound"] == "switch"


def test_list_shows_the_scenarios(capsys):
    code, out, _ = run_cli(capsys, "list")
    assert code == 0
    listed = {line.split()[0] for line in out.splitlines() if line.strip()}
    assert {"double_buffer", "weight_reuse", "matmul_roofline"} <= listed
    data = run_json(capsys, "list")
    assert {"double_buffer", "weight_reuse", "matmul_roofline"} <= set(data)
    assert all(isinstance(q, str) and q for q in data.values())


# --- run ----------------------------------------------------------------------------------------------

RUN_KEYS = {"end_to_end_s", "busy_s", "bytes", "flops", "overlap_s", "exposed_s", "lower_bound_s",
            "upper_bound_s", "params", "analytic_s"}


def test_run_double_buffer_json_matches_reference_pipeline(capsys):
    data = run_json(capsys, "run", "double_buffer")
    assert set(data) >= RUN_KEYS
    q, a, c = 2, 0.4e-3 / 2, 0.2e-3 / 2  # 0.4 ms of loading, 0.2 ms of compute, 2 blocks
    expected = pipeline_time(q, a, c, buffers=2)
    assert expected == pytest.approx(0.5e-3, rel=1e-12)
    assert data["end_to_end_s"] == pytest.approx(expected, rel=1e-9)
    assert data["analytic_s"] == pytest.approx(expected, rel=1e-9)
    assert data["busy_s"]["hbm"] == pytest.approx(q * a, rel=1e-9)
    assert data["busy_s"]["mxu"] == pytest.approx(q * c, rel=1e-9)
    # the second block's load overlaps the first compute (c); the last compute runs alone
    assert data["overlap_s"] == pytest.approx(c, rel=1e-9)
    assert data["exposed_s"] == pytest.approx(expected - q * c, rel=1e-9)
    assert data["lower_bound_s"] == pytest.approx(max(q * a, q * c), rel=1e-9)
    assert data["upper_bound_s"] == pytest.approx(q * a + q * c, rel=1e-9)
    assert data["bytes"]["hbm_read"] == pytest.approx(0.4e-3 * V5E_HBM, rel=1e-9)
    assert data["flops"] == pytest.approx(0.2e-3 * V5E_BF16, rel=1e-9)
    assert data["params"]["blocks"] == 2 and data["params"]["buffers"] == 2


def test_run_double_buffer_one_buffer(capsys):
    data = run_json(capsys, "run", "double_buffer", "--set", "buffers=1")
    expected = pipeline_time(2, 0.2e-3, 0.1e-3, buffers=1)
    assert expected == pytest.approx(0.6e-3, rel=1e-12)
    assert data["end_to_end_s"] == pytest.approx(expected, rel=1e-9)
    assert data["params"]["buffers"] == 1
    assert data["overlap_s"] == pytest.approx(0.0, abs=1e-15)


def test_run_double_buffer_set_quantities(capsys):
    data = run_json(capsys, "run", "double_buffer", "--set", "blocks=4", "--set", "load_s=0.8ms",
                    "--set", "compute_s=1.2ms")
    q, a, c = 4, 0.8e-3 / 4, 1.2e-3 / 4
    assert data["end_to_end_s"] == pytest.approx(pipeline_time(q, a, c, 2), rel=1e-9)  # 1.4 ms
    assert data["params"]["blocks"] == 4


@pytest.mark.parametrize(("order", "weights_read"), [("input_major", 32e6), ("weight_major", 8e6)])
def test_run_weight_reuse_orders(capsys, order, weights_read):
    data = run_json(capsys, "run", "weight_reuse", "--set", f"order={order}")
    tensors = data["bytes_by_tensor"]
    assert tensors["weights"]["read"] == pytest.approx(weights_read, rel=1e-9)
    # X is 1000 x 2000 bf16 = 4 MB: read once input-major, once per weight block (2) weight-major
    inputs = 2 * 1000 * 2000
    assert tensors["inputs"]["read"] == pytest.approx(inputs * (2 if order == "weight_major" else 1), rel=1e-9)
    # one output (1000 x 2000 bf16) written in two column blocks, not two outputs
    assert tensors["outputs"]["written"] == pytest.approx(2 * 1000 * 2000, rel=1e-9)


def test_run_matmul_roofline_critical_batch(capsys):
    data = run_json(capsys, "run", "matmul_roofline")
    assert 230 <= data["critical_batch"] <= 260  # about the v5e peak intensity, 1.97e14 / 8.2e11 = 240


def test_run_text_summary(capsys):
    code, out, _ = run_cli(capsys, "run", "double_buffer")
    assert code == 0
    assert out.startswith("double_buffer")
    assert "500 us" in out  # 0.5 ms end to end


def test_run_with_chip_file(capsys, tmp_path):
    chip = tmp_path / "fast.toml"
    chip.write_text('base = "tpu-v5e"\nname = "fast"\nhbm_bandwidth_bytes_per_s = "1TB/s"\n'
                    'peak_bf16_flops_per_s = "100TFLOP/s"\n')
    data = run_json(capsys, "run", "double_buffer", "--chip-file", str(chip),
                    "--set", "load_bytes=40MB", "--set", "compute_flops=2e9")
    a, c = 20e6 / 1e12, 1e9 / 1e14  # per block, 2 blocks
    assert data["params"]["chip"] == "fast"
    assert data["end_to_end_s"] == pytest.approx(pipeline_time(2, a, c, 2), rel=1e-9)  # 50 us


# --- roofline -----------------------------------------------------------------------------------------

ROOFLINE_KEYS = {"t_compute_s", "t_memory_s", "lower_bound_s", "upper_bound_s", "intensity_flops_per_byte",
                 "peak_intensity_flops_per_byte", "bound"}


def test_roofline_matmul_1024_cubed(capsys):
    data = run_json(capsys, "roofline", "--chip", "tpu-v5e", "--matmul", "1024,1024,1024")
    assert set(data) >= ROOFLINE_KEYS
    n = 1024
    flops, nbytes = 2 * n**3, 2 * 3 * n * n
    assert data["intensity_flops_per_byte"] == pytest.approx(1024 / 3, rel=1e-12)
    assert data["bound"] == "compute"
    assert data["t_compute_s"] == pytest.approx(flops / V5E_BF16, rel=1e-12)
    assert data["t_memory_s"] == pytest.approx(nbytes / V5E_HBM, rel=1e-12)
    assert data["lower_bound_s"] == pytest.approx(flops / V5E_BF16, rel=1e-12)
    assert data["upper_bound_s"] == pytest.approx(flops / V5E_BF16 + nbytes / V5E_HBM, rel=1e-12)
    assert data["peak_intensity_flops_per_byte"] == pytest.approx(V5E_BF16 / V5E_HBM, rel=1e-12)


@pytest.mark.parametrize(("nbytes_text", "nbytes", "bound"), [("1GB", 1e9, "compute"), ("100GB", 1e11, "memory")])
def test_roofline_flops_and_bytes(capsys, nbytes_text, nbytes, bound):
    data = run_json(capsys, "roofline", "--chip", "tpu-v5e", "--flops", "1e12", "--bytes", nbytes_text)
    assert data["bound"] == bound  # intensity 1000 or 10 against a ridge of about 240
    assert data["intensity_flops_per_byte"] == pytest.approx(1e12 / nbytes, rel=1e-12)
    assert data["t_compute_s"] == pytest.approx(1e12 / V5E_BF16, rel=1e-12)
    assert data["t_memory_s"] == pytest.approx(nbytes / V5E_HBM, rel=1e-12)
    assert data["lower_bound_s"] == pytest.approx(max(1e12 / V5E_BF16, nbytes / V5E_HBM), rel=1e-12)


def test_roofline_text_output(capsys):
    code, out, _ = run_cli(capsys, "roofline", "--chip", "tpu-v5e", "--flops", "1e12", "--bytes", "100GB")
    assert code == 0
    assert "memory-bound" in out


def test_roofline_int8_uses_the_8bit_peak(capsys):
    data = run_json(capsys, "roofline", "--chip", "tpu-v5e", "--flops", "1e12", "--bytes", "1GB", "--dtype", "int8")
    assert data["t_compute_s"] == pytest.approx(1e12 / 3.94e14, rel=1e-12)


def test_roofline_with_chip_file(capsys, full_chip_file):
    data = run_json(capsys, "roofline", "--chip-file", str(full_chip_file), "--flops", "1e12", "--bytes", "1GB")
    assert data["chip"] == "my-chip"
    assert data["t_compute_s"] == pytest.approx(1e12 / 197e12, rel=1e-12)
    assert data["t_memory_s"] == pytest.approx(1e9 / 819e9, rel=1e-12)
    assert data["bound"] == "compute"


# --- output files -------------------------------------------------------------------------------------


def test_run_writes_trace_gantt_and_csv(capsys, tmp_path):
    trace, gantt, table = tmp_path / "t.json", tmp_path / "g.png", tmp_path / "s.csv"
    code, _, err = run_cli(capsys, "run", "double_buffer", "--trace", str(trace), "--gantt", str(gantt),
                           "--csv", str(table))
    assert code == 0, err

    events = json.loads(trace.read_text())["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    assert len(complete) == 4  # 2 blocks x (load + compute)
    loads = [e for e in complete if e["cat"] == "load"]
    computes = [e for e in complete if e["cat"] == "compute"]
    assert len(loads) == 2 and len(computes) == 2
    for e in loads:  # 0.4 ms of loading over 2 blocks: 200 us each
        assert e["dur"] == pytest.approx(0.4e-3 / 2 * 1e6, rel=1e-9)
    for e in computes:
        assert e["dur"] == pytest.approx(0.2e-3 / 2 * 1e6, rel=1e-9)
    assert max(e["ts"] + e["dur"] for e in complete) == pytest.approx(500, rel=1e-9)  # 0.5 ms in us

    data = gantt.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert width > 100 and height > 100

    with table.open(newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["chip", "unit", "label", "kind", "start_s", "end_s", "bytes", "flops"]
    assert len(rows) - 1 == len(complete)
    assert sorted(float(r[5]) - float(r[4]) for r in rows[1:]) == pytest.approx([1e-4, 1e-4, 2e-4, 2e-4], rel=1e-9)


# --- bad input: one line on stderr, exit status 2 -----------------------------------------------------


def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


# id -> (argv from tmp_path, fragments the message must contain; a tuple fragment means "any of these")
BAD_INPUT = {
    "unknown-scenario": (lambda d: ["run", "no_such_scenario"], ["no_such_scenario"]),
    "unknown-chip": (lambda d: ["run", "double_buffer", "--chip", "tpu-v99"], ["tpu-v99", "tpu-v5e"]),
    "unknown-set-key": (lambda d: ["run", "double_buffer", "--set", "frob=1"], ["frob", "blocks", "load_s"]),
    "set-without-equals": (lambda d: ["run", "double_buffer", "--set", "blocks"], ["blocks", "="]),
    "unparsable-quantity": (lambda d: ["run", "double_buffer", "--set", "load_s=abc"], ["load_s", "abc"]),
    "zero-blocks": (lambda d: ["run", "double_buffer", "--set", "blocks=0"], ["blocks=0"]),
    "negative-blocks": (lambda d: ["run", "double_buffer", "--set", "blocks=-1"], ["blocks=-1"]),
    "fractional-blocks": (lambda d: ["run", "double_buffer", "--set", "blocks=2.5"], ["blocks", "2.5"]),
    # the message may echo the typed text or its SI value (-1 ms = -0.001 s)
    "negative-time": (lambda d: ["run", "double_buffer", "--set", "load_s=-1ms"], ["load_s", ("-1ms", "-0.001")]),
    "nan-time": (lambda d: ["run", "double_buffer", "--set", "load_s=nan"], ["load_s", "nan"]),
    "inf-size": (lambda d: ["run", "double_buffer", "--set", "load_bytes=inf"], ["load_bytes", "inf"]),
    "block-larger-than-vmem": (
        lambda d: ["run", "double_buffer", "--chip", "tpu-v5e", "--set", "load_bytes=1GB", "--set", "blocks=1"],
        ["VMEM", ("1GB", "1000000000", "1e+09", "1e9")]),
    "chip-file-missing-field": (
        lambda d: ["run", "double_buffer", "--chip-file",
                   _write(d / "half.toml", 'name = "half"\npeak_bf16_flops_per_s = 1e14\n')],
        ["half.toml", "hbm_bandwidth_bytes_per_s"]),
    "chip-file-mistyped-field": (
        lambda d: ["roofline", "--chip-file",
                   _write(d / "typo.toml", 'base = "tpu-v5e"\nhbm_bandwidth_bytes_per_s = "fast"\n'),
                   "--flops", "1e12", "--bytes", "1GB"],
        ["hbm_bandwidth_bytes_per_s", "fast"]),
    "chip-file-does-not-exist": (
        lambda d: ["run", "double_buffer", "--chip-file", str(d / "nowhere.toml")], ["nowhere.toml"]),
    "scenario-file-raises-on-import": (
        lambda d: ["run", _write(d / "explodes.py", 'raise RuntimeError("boom-on-import")\n')],
        ["explodes.py", "boom-on-import"]),
    "scenario-file-does-not-exist": (lambda d: ["run", str(d / "ghost.py")], ["ghost.py"]),
    "roofline-without-work": (lambda d: ["roofline", "--chip", "tpu-v5e"], ["--matmul", "--flops"]),
    "roofline-bad-matmul": (lambda d: ["roofline", "--chip", "tpu-v5e", "--matmul", "1,2"], ["1,2"]),
    "roofline-bad-flops": (
        lambda d: ["roofline", "--chip", "tpu-v5e", "--flops", "lots", "--bytes", "1GB"], ["lots"]),
    "unknown-subcommand": (lambda d: ["frobnicate"], ["frobnicate"]),
    "trace-into-missing-folder": (
        lambda d: ["run", "double_buffer", "--trace", str(d / "no_such_dir" / "t.json")], ["no_such_dir"]),
}


def _check_one_line_error(code: int, err: str, fragments: list) -> None:
    assert code == 2
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    for fragment in fragments:
        options = fragment if isinstance(fragment, tuple) else (fragment,)
        assert any(option in lines[0] for option in options), (fragment, lines[0])


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_is_one_line_and_exit_2(capsys, tmp_path, case):
    make_argv, fragments = BAD_INPUT[case]
    code, _, err = run_cli(capsys, *make_argv(tmp_path))
    _check_one_line_error(code, err, fragments)


# --- the installed console script (subprocess: only a few, they are slow) ----------------------------


def _podsim() -> str:
    found = shutil.which("podsim") or str(Path(sys.executable).parent / "podsim")
    assert Path(found).exists(), found
    return found


def test_console_script_chips_json(tmp_path):
    proc = subprocess.run([_podsim(), "chips", "--json"], capture_output=True, text=True, cwd=tmp_path,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert set(PRESET_NAMES) <= set(json.loads(proc.stdout))


@pytest.mark.parametrize("case", ["unknown-chip", "unparsable-quantity"])
def test_console_script_bad_input(tmp_path, case):
    make_argv, fragments = BAD_INPUT[case]
    proc = subprocess.run([_podsim(), *make_argv(tmp_path)], capture_output=True, text=True, cwd=tmp_path,
                          timeout=60, check=False)
    assert proc.stdout == ""
    _check_one_line_error(proc.returncode, proc.stderr, fragments)


# --- text summaries: links grouped by kind, the sharded matmul's strategy table ---------------------------
SHARDED = ("run", "sharded_matmul", "--mesh", "X=4,Y=2", "--set", "cases=false", "--set", "verify=false")


def test_run_groups_links_unless_links_all(capsys):
    _, grouped, _ = run_cli(capsys, *SHARDED)
    _, every, _ = run_cli(capsys, *SHARDED, "--links", "all")
    # X=4 on a v5e 4x2 slice: a line of 4 (no wraparound) in each of the 2 columns = 6 links, 12 directions
    assert "busy link" not in grouped and "12 busy directions" in grouped
    rows = [line.split() for line in grouped.splitlines() if line.startswith("    ICI axis 0")]
    assert [(r[3], int(r[4])) for r in rows] == [("+", 6), ("-", 6)]
    assert len([line for line in every.splitlines() if line.startswith("  busy link")]) == 12
    code, _, err = run_cli(capsys, *SHARDED, "--links", "some")
    assert code == 2 and "invalid choice: 'some'" in err and len(err.strip().splitlines()) == 1


def test_sharded_matmul_prints_its_strategy_table(capsys):
    _, text, _ = run_cli(capsys, *SHARDED)
    data = run_json(capsys, *SHARDED)
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  strategies of"))
    table = lines[start + 2:start + 2 + len(data["strategies"])]
    assert len(data["strategies"]) == 2
    for s in data["strategies"]:
        (row,) = [r for r in table if r.endswith(f"  {s['name']}")]
        assert row.lstrip().startswith("*") == (s["name"] == data["chosen"])
        fields = row.replace("*", " ").split()
        assert " ".join(fields[0:2]) == format_quantity(s["analytic_s"], "s")
        assert " ".join(fields[2:4]) == format_quantity(s["time_s"], "s")
    assert "all_reduce C over X" in table[0]  # the chosen strategy, cheapest first
