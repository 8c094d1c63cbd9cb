"""The sharding scenarios: sharded_matmul, contracting_split, mlp_layers, collective_matmul."""
import json

import pytest

from scenarios import collective_matmul, contracting_split, mlp_layers, sharded_matmul
from simulator.frontend.cli import main

B, A, PEAK = 4.5e10, 1e-6, 1.97e14  # tpu-v5e: ICI one-way per link, hop latency, bf16 FLOP/s


def test_sharded_matmul_cli_contract(capsys):
    assert main(["run", "sharded_matmul", "--mesh", "X=4,Y=2", "--set", "spec=A[I_X,J]@B[J,K_Y]->C[I_X,K_Y]",
                 "--set", "I=1024", "--set", "J=2048", "--set", "K=4096", "--set", "cases=false", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["chosen"] == "local matmul" and data["verified"] is True
    (only,) = data["strategies"]
    assert only["communication_s"] == 0
    # local [256, 2048] @ [2048, 2048] on the MXU
    assert only["time_s"] == pytest.approx(2 * 256 * 2048 * 2048 / PEAK, rel=1e-9)


def test_sharded_matmul_four_cases_side_by_side():
    r = sharded_matmul.run(I=256, J=512, K=1024)
    cases = r.extra["cases"]
    assert list(cases) == list(sharded_matmul.BOOK_CASES)
    assert all(c["verified"] for c in cases.values())
    assert [s["communication_s"] for s in cases["no communication"]["strategies"]] == [0.0]
    assert r.extra["concatenation_fails"] is True


def test_contracting_split_crossover():
    r = contracting_split.run(d_values=(2048, 8192, 32768))
    analytic_d = 2 * PEAK / B
    assert r.extra["analytic_crossover_d"] == pytest.approx(analytic_d)  # about 8755
    assert abs(r.extra["crossover_d"] - analytic_d) <= 2  # even D, bisection on end-to-end simulated times
    bounds = [p["bound"] for p in r.extra["points"]]
    assert bounds == ["communication", "communication", "compute"]


@pytest.mark.parametrize("chunks", [1, 3])
def test_contracting_split_crossover_does_not_depend_on_chunking(chunks):
    """Serial (one chunk) or overlapped, the MXU races the link chunk by chunk: D = 2 P / B either way."""
    r = contracting_split.run(B=256, F=1024, chunks=chunks, d_values=(2,))
    assert abs(r.extra["crossover_d"] - 2 * PEAK / B) <= 2


def test_mlp_layers_reduce_scatter_beats_all_reduce_beats_gathering_h():
    r = mlp_layers.run(B=512, D=1024, F=4096, M=4)
    times = {s["name"]: s["time_s"] for s in r.extra["strategies"]}
    assert times["row-sharded W_out, ReduceScatter"] < times["row-sharded W_out, AllReduce"] \
        < times["column-sharded W_out, gather H"]
    assert r.extra["verified"] is True
    for s in r.extra["strategies"]:
        assert s["time_s"] == pytest.approx(s["analytic_s"], rel=0.01)
    link = {s["name"]: s["link_bytes"] for s in r.extra["strategies"]}
    assert link["row-sharded W_out, AllReduce"] == pytest.approx(2 * link["row-sharded W_out, ReduceScatter"])


def test_collective_matmul_overlaps_and_matches_its_closed_forms():
    r = collective_matmul.run(n=4, B=1024, D=2048, F=4096)
    e = r.extra
    assert e["overlapped_s"] == pytest.approx(e["analytic_overlapped_s"], rel=1e-9)
    assert e["unoverlapped_s"] == pytest.approx(e["analytic_unoverlapped_s"], rel=1e-9)
    assert e["overlapped_s"] < e["unoverlapped_s"]
    assert r.metrics["overlap_s"] > 0 and e["unoverlapped_overlap_s"] == 0
    assert e["verified"] is True


@pytest.mark.parametrize("argv", [
    ["run", "sharded_matmul", "--set", "spec=A[I,J_X]@B[J_Y,K]"],
    ["run", "sharded_matmul", "--set", "spec=A[I_Z,J]@B[J,K]"],
    ["run", "sharded_matmul", "--set", "I=1020", "--set", "spec=A[I_XY,J]@B[J,K]"],
    ["run", "sharded_matmul", "--mesh", "X=3,Y=3"],
    ["run", "sharded_matmul", "--set", "spec=nonsense"],
    ["run", "contracting_split", "--set", "d_values=3,5"],
    ["run", "collective_matmul", "--set", "n=0"],
])
def test_bad_sharding_input_is_one_line_exit_2(capsys, argv):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
