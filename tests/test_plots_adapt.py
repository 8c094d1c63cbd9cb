"""Issue 30 item 7: plots and defaults that adapt -- plan's plot on log axes where values span decades, with its
simulated rows named; matmul_roofline's block dividing any n; the trace's VMEM counter (through the CLI)."""
import json

import pytest

from simulator.frontend.cli import main
from simulator.report.plots import _scale, plan_scatter


def _json(capsys, *argv):
    assert main([*argv, "--json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_scale_is_log_past_a_decade():
    assert _scale([1.0, 10.0]) == "linear" and _scale([1.0, 10.5]) == "log" and _scale([0.0, 5.0]) == "linear"


def test_plan_plot_is_log_where_memory_spans_decades_and_names_its_simulated_rows(capsys, tmp_path):
    """llama-3-8b on 16 v5e chips: from fsdp=16 (state sharded 16 ways, ~10 GiB a chip) to layouts that replicate
    it (over 100 GiB) the memory peaks span more than a decade, so that axis is log; each axis is log exactly when
    its values span more than a decade."""
    out = _json(capsys, "plan", "llama-3-8b", "--chip", "tpu-v5e", "--chips", "16", "--batch", "32", "--seq", "4096",
                "--top", "2")
    memory = [r["memory_peak_bytes"] / 2**30 for r in out["plans"]] + [16.0]
    times = [r["step_time_s"] for r in out["plans"]]
    ax = plan_scatter(out["plans"], 16 * 2**30, labels=["one", "two"])
    assert ax.get_xscale() == ("log" if max(memory) / min(memory) > 10 else "linear")
    assert ax.get_yscale() == ("log" if max(times) / min(times) > 10 else "linear")
    assert max(memory) / min(memory) > 10  # this plan's memory spans decades: the case
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "1: one" in legend and "2: two" in legend
    picture = tmp_path / "plan.png"
    assert main(["plan", "gpt2", "--chip", "tpu-v5e", "--chips", "8", "--batch", "16", "--seq", "1024", "--top", "1",
                 "--plot", str(picture)]) == 0
    assert picture.stat().st_size > 1000


@pytest.mark.parametrize("n,block", [(2049, 683), (16384, 256), (1000, 250), (4096 * 3, 256)])
def test_matmul_roofline_picks_a_block_that_divides_n(capsys, n, block):
    """2049 = 3 x 683: its divisors 1, 3, 683, 2049; 683 is nearest 256 by ratio (2.67 against 85 for 3)."""
    out = _json(capsys, "run", "matmul_roofline", "--set", "k=2049", "--set", f"n={n}", "--set", "m_values=16,512")
    assert out["params"]["block_n"] == block and n % block == 0


def test_matmul_roofline_given_block_still_must_divide(capsys):
    assert main(["run", "matmul_roofline", "--set", "n=2049", "--set", "block_n=256"]) == 2
    assert "block_n=256 must divide n=2049" in capsys.readouterr().err


def test_double_buffer_trace_carries_the_vmem_counter_the_gantt_draws(capsys, tmp_path):
    """Sized blocks: 2 blocks of 32 MiB double-buffered hold both at once, a 64 MiB VMEM peak, in the Perfetto
    counter as in the Gantt's lane (both from the pool's timeline). Blocks given as times hold nothing, and the
    text says so."""
    trace = tmp_path / "x.json"
    assert main(["run", "double_buffer", "--set", "load_bytes=64MiB", "--set", "compute_flops=1e11",
                 "--trace", str(trace), "--gantt", str(tmp_path / "x.png")]) == 0
    capsys.readouterr()
    doc = json.loads(trace.read_text())
    live = [e["args"]["bytes"] for e in doc["traceEvents"] if e["ph"] == "C" and e["name"] == "vmem live"]
    assert max(live) == pytest.approx(64 * 2**20) and live[-1] == 0
    assert main(["run", "double_buffer"]) == 0
    assert "hold no VMEM" in capsys.readouterr().out
