"""mlp_memory: the gated MLP's live set against REFERENCE.md's 448 / 256 / 320 MiB, by hand."""
import json

import pytest

from scenarios import mlp_memory
from simulator.errors import CapacityError, PodsimError
from simulator.frontend.cli import main

MIB = 2**20
V5E_BF16 = 1.97e14  # tpu-v5e MXU peak, FLOP/s

# Hand-built live sets (MiB) after each named point: residual 64, gate 192, up 192, output 64.
IN_PLACE = [
    ("allocate residual", 64),
    ("allocate gate", 64 + 192),                  # 256
    ("allocate up", 64 + 192 + 192),              # 448: the peak
    ("gate = act(gate) * up (in place)", 448),    # no new buffer
    ("free up", 448 - 192),                       # 256
    ("allocate output", 256 + 64),                # 320
    ("free gate", 320 - 192),                     # 128
    ("output += residual (in place)", 128),
    ("free residual", 128 - 64),                  # 64: the output lives on
]
SEPARATE = [
    ("allocate residual", 64),
    ("allocate gate", 256),
    ("allocate up", 448),
    ("allocate product", 448 + 192),              # 640: the peak
    ("product = act(gate) * up", 640),
    ("free gate", 640 - 192),
    ("free up", 448 - 192),                       # 256
    ("allocate output", 256 + 64),                # 320
    ("free product", 320 - 192),
    ("output += residual (in place)", 128),
    ("free residual", 64),
]


@pytest.fixture(scope="module")
def results():
    return {mode: mlp_memory.run(in_place=mode) for mode in (True, False)}


def test_reference_points_in_place(results):
    r = results[True]
    assert r.extra["peak_bytes"] == 448 * MIB
    assert r.extra["after_free_up_bytes"] == 256 * MIB
    assert r.extra["after_output_bytes"] == 320 * MIB
    assert r.extra["analytic_peak_bytes"] == 448 * MIB
    assert r.extra["final_live_bytes"] == 64 * MIB


def test_separate_product_peaks_at_640_mib(results):
    r = results[False]
    assert r.extra["peak_bytes"] == (64 + 3 * 192) * MIB == 640 * MIB
    assert r.extra["analytic_peak_bytes"] == 640 * MIB
    assert r.extra["after_free_up_bytes"] == 256 * MIB
    assert r.extra["after_output_bytes"] == 320 * MIB
    assert results[True].extra["in_place_saving_bytes"] == 192 * MIB
    assert "448" in results[True].headline and "640" in results[True].headline


@pytest.mark.parametrize("mode,expected", [(True, IN_PLACE), (False, SEPARATE)])
def test_timeline_names_and_bytes_in_order(results, mode, expected):
    timeline = results[mode].extra["timeline"]
    assert [(p["event"], p["live_bytes"] / MIB) for p in timeline] == expected
    times = [p["time_s"] for p in timeline]
    assert times == sorted(times)


@pytest.mark.parametrize("mode", [True, False])
def test_in_place_events_change_nothing_and_peak_is_timeline_max(results, mode):
    r = results[mode]
    timeline = r.extra["timeline"]
    for before, point in zip(timeline, timeline[1:], strict=False):
        if "in place" in point["event"]:
            assert point["live_bytes"] == before["live_bytes"]
    top = max(p["live_bytes"] for p in timeline)
    assert r.extra["peak_bytes"] == top
    assert r.extra["peak_time_s"] == next(p["time_s"] for p in timeline if p["live_bytes"] == top)


def test_timeline_agrees_with_the_pool_and_peak_time_is_the_gate_matmul():
    system, timeline = mlp_memory.simulate("tpu-v5e", 64 * MIB, 192 * MIB, True, 8192, "bf16")
    pool_points = [live for _, live in system.chip.hbm.timeline[1:]]  # every change the pool saw
    assert pool_points == [p["live_bytes"] for p in timeline if "in place" not in p["event"]]
    # up is allocated when the gate matmul [8192, 4096] @ [4096, 12288] ends: 64 MiB / (8192 x 2 B) = 4096 wide
    gate_s = 2 * 8192 * 4096 * 12288 / V5E_BF16
    assert system.chip.hbm.peak_time_s == pytest.approx(gate_s, rel=1e-12)


def test_output_can_set_the_peak():
    # residual 256 MiB, branches 64 MiB: r+2b = 384 MiB, but r + b + output(= r) = 576 MiB
    r = mlp_memory.run(residual_bytes=256 * MIB, branch_bytes=64 * MIB)
    assert r.extra["peak_bytes"] == 576 * MIB == r.extra["analytic_peak_bytes"]
    assert r.extra["after_output_bytes"] == 576 * MIB


@pytest.mark.parametrize("kwargs,name", [
    ({"residual_bytes": 0}, "residual_bytes"),
    ({"residual_bytes": -64 * MIB}, "residual_bytes"),
    ({"branch_bytes": 0}, "branch_bytes"),
    ({"branch_bytes": -1.0}, "branch_bytes"),
    ({"tokens": 0}, "tokens"),
    ({"branch_bytes": 1000}, "branch_bytes"),   # not a whole number of [tokens, width] rows
    ({"in_place": "yes"}, "in_place"),
    ({"dtype": "fp64"}, "fp64"),
])
def test_bad_input_names_the_value(kwargs, name):
    with pytest.raises(PodsimError, match=name):
        mlp_memory.run(**kwargs)


def test_branch_larger_than_hbm():
    with pytest.raises(CapacityError, match=f"branch_bytes.*{16 * 2**30}"):
        mlp_memory.run(branch_bytes=32 * 2**30)  # v5e holds 16 GiB


def test_cli_json(capsys):
    assert main(["run", "mlp_memory", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["peak_bytes"] == 448 * 2**20
    assert {"end_to_end_s", "busy_s", "bytes", "flops", "params"} <= set(data)
    assert main(["run", "mlp_memory", "--set", "in_place=false", "--set", "residual_bytes=64MiB", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["peak_bytes"] == 640 * 2**20


def test_cli_bad_size_is_one_line(capsys):
    assert main(["run", "mlp_memory", "--set", "branch_bytes=0"]) == 2
    err = capsys.readouterr().err
    assert "branch_bytes" in err and len(err.strip().splitlines()) == 1
