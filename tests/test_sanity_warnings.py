"""Issue 30 item 4: legal runs that cannot be what the user meant say so, with the numbers (through the CLI)."""
import json

from simulator.frontend.cli import main
from simulator.hardware.specs import PRESETS

V5E = PRESETS["tpu-v5e"]


def _run(capsys, *argv):
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def test_load_s_reading_more_than_hbm_holds_warns(capsys):
    """load_s=0.4 s at v5e's 819 GB/s is 0.4 x 8.19e11 = 328 GB from a 16 GiB chip: 19.1 x its HBM."""
    text = _run(capsys, "run", "double_buffer", "--set", "load_s=0.4")
    line = next(x for x in text.splitlines() if "warning:" in x)
    assert "load_s=0.4 s" in line and "328 GB" in line and "16 GiB" in line
    assert f"{0.4 * V5E.hbm_bandwidth_bytes_per_s / V5E.hbm_capacity_bytes:.3g} x" in line
    data = json.loads(_run(capsys, "run", "double_buffer", "--set", "load_s=0.4", "--json"))
    assert "warning:" in json.dumps(data)
    assert "warning" not in _run(capsys, "run", "double_buffer")  # 0.4 ms reads 328 MB: no warning


def test_a_collective_whose_per_chip_array_exceeds_hbm_warns(capsys):
    """A 1 PB AllReduce: every chip holds the whole unreduced array, 1e15 / 2^34 = 58,208 x a v5e's 16 GiB."""
    text = _run(capsys, "collective", "all_reduce", "--chip", "tpu-v5e", "--topology", "torus:4x4", "--bytes", "1PB")
    line = next(x for x in text.splitlines() if "warning:" in x)
    assert "1 PB" in line and f"{1e15 / V5E.hbm_capacity_bytes:.3g} x" in line
    out = json.loads(_run(capsys, "collective", "all_reduce", "--chip", "tpu-v5e", "--topology", "torus:4x4",
                           "--bytes", "1PB", "--json"))
    assert out["warnings"] == [line.strip()]
    # an AllToAll holds V / n per chip: 16 x 1.5 GiB = 24 GiB over 16 chips is 1.5 GiB each, no warning
    assert "warning" not in _run(capsys, "collective", "all_to_all", "--chip", "tpu-v5e", "--topology", "torus:4x4",
                                 "--bytes", str(24 * 2**30))


def test_a_calibrated_collective_warns_as_the_ideal_one_does(capsys):
    """--calibrated runs one (calibrated) simulation; the over-HBM warning is the same: 200 GB gathered on each of
    4 chips is 200e9 / 2^34 = 11.6 x a v5e's 16 GiB."""
    argv = ["collective", "all_gather", "--chip", "tpu-v5e", "--topology", "torus:4", "--bytes", "200GB"]
    line = next(x for x in _run(capsys, *argv, "--calibrated").splitlines() if "warning:" in x)
    assert "200 GB" in line and f"{200e9 / V5E.hbm_capacity_bytes:.3g} x" in line
    assert json.loads(_run(capsys, *argv, "--calibrated", "--json"))["warnings"] == [line.strip()]
