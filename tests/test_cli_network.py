"""`podsim collective`, `podsim send` and `podsim run collective_sweep` on the command line."""
import json

import pytest

from simulator.frontend.cli import main

B, A = 4.5e10, 1e-6  # tpu-v5e ICI one-way per link, hop latency
KEYS = ["time_s", "analytic_s", "algbw_bytes_per_s", "busbw_bytes_per_s", "max_link_bytes"]


def _json(capsys, *argv):
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("kind", ["all_gather", "reduce_scatter", "all_reduce", "all_to_all", "broadcast"])
def test_collective_json_keys(capsys, kind):
    data = _json(capsys, "collective", kind, "--chip", "tpu-v5e", "--topology", "torus:8", "--bytes", "64MB")
    assert all(k in data for k in KEYS)
    assert data["time_s"] == pytest.approx(data["analytic_s"], rel=0.01)


def test_collective_all_reduce_on_a_ring_by_hand(capsys):
    data = _json(capsys, "collective", "all_reduce", "--chip", "tpu-v5e", "--topology", "ring:8", "--bytes", "64MB")
    # RS + AG, each 4 bidirectional steps putting 3.5 shards of 8 MB on every link (the antipode's split)
    expected = 2 * (4 * A + 3.5 * 8e6 / B)
    assert data["time_s"] == pytest.approx(expected, rel=1e-9)
    assert data["busbw_bytes_per_s"] == pytest.approx(64e6 / expected * 2 * 7 / 8, rel=1e-9)
    assert data["max_link_bytes"] == pytest.approx(2 * 3.5 * 8e6)


def test_collective_axes_and_trace(capsys, tmp_path):
    trace = tmp_path / "c.json"
    data = _json(capsys, "collective", "all_gather", "--chip", "tpu-v5e", "--topology", "torus:4x4", "--bytes",
                 "16MB", "--axes", "1", "--mode", "full", "--trace", str(trace))
    assert data["group_size"] == 4 and data["groups"] == 4
    events = json.loads(trace.read_text())["traceEvents"]
    threads = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert threads and all(t.startswith("link ") for t in threads)


def test_send_json(capsys):
    data = _json(capsys, "send", "--chip", "tpu-v5e", "--topology", "torus:4x4", "--src", "0,0", "--dst", "1,1",
                 "--bytes", "1MB")
    assert (data["hops"], data["links_used"]) == (2, 2)
    assert data["time_s"] == pytest.approx(2 * A + 1e6 / (2 * B), rel=1e-12)
    assert data["first_byte_s"] == pytest.approx(2 * A, rel=1e-12)


def test_send_store_and_forward_single_path(capsys):
    data = _json(capsys, "send", "--chip", "tpu-v5e", "--topology", "mesh:8", "--src", "0", "--dst", "3",
                 "--bytes", "9MB", "--switching", "store_and_forward", "--chunks", "3", "--single-path")
    assert data["time_s"] == pytest.approx((3 + 3 - 1) * (A + 3e6 / B), rel=1e-12)


def test_collective_sweep_scenario(capsys):
    data = _json(capsys, "run", "collective_sweep", "--topology", "ring:8", "--set", "kind=all_gather",
                 "--set", "sizes=1024,1048576,1073741824")
    assert [p["regime"] for p in data["points"]] == ["latency", "bandwidth", "bandwidth"]
    # crossover: latency term 4 steps * A equals bandwidth term 3.5 shards of V / 8 over B  ->  V = 64/7 A B
    assert data["analytic_crossover_bytes"] == pytest.approx(64 / 7 * A * B, rel=1e-6)
    assert data["crossover_bytes"] == pytest.approx(64 / 7 * A * B, rel=1e-6)
    for p in data["points"]:
        assert p["time_s"] == pytest.approx(p["analytic_s"], rel=0.01)


BAD = {
    "unknown kind": ["collective", "all_sum", "--topology", "torus:4", "--bytes", "1MB"],
    "axis not in topology": ["collective", "all_gather", "--topology", "torus:4x4", "--bytes", "1MB", "--axes", "7"],
    "unparsable axes": ["collective", "all_gather", "--topology", "torus:4x4", "--bytes", "1MB", "--axes", "x"],
    "bad topology": ["collective", "all_gather", "--topology", "torus:4x", "--bytes", "1MB"],
    "zero bytes": ["collective", "all_gather", "--topology", "torus:4", "--bytes", "0"],
    "bad chunks": ["collective", "broadcast", "--topology", "torus:4", "--bytes", "1MB", "--chunks", "0"],
    "bad switching": ["send", "--topology", "torus:4", "--src", "0", "--dst", "1", "--bytes", "1", "--switching", "x"],
    "coordinate off the torus": ["send", "--topology", "torus:4x4", "--src", "0,0", "--dst", "4,4", "--bytes", "1MB"],
    "chip index off": ["send", "--topology", "switch:4", "--src", "0", "--dst", "9", "--bytes", "1MB"],
    "gpu slice": ["collective", "all_gather", "--chip", "h100", "--topology", "slice:4x4", "--bytes", "1MB"],
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_network_input_is_one_line_exit_2(capsys, case):
    assert main(BAD[case]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
