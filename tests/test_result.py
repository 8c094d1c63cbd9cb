"""The text summary of a `Result`: units first, then links grouped by kind, axis and direction.

Oracles: the groups and their sizes come from the topology graph's edge attributes; busy times from
bytes over bandwidth (a link direction runs at its full rate whenever it carries a message).
"""
from __future__ import annotations

from collections import Counter

import pytest

from simulator import Result, System, run_collective
from simulator.engine.trace import Span, Trace, compute_metrics
from simulator.errors import PodsimError
from simulator.report.links import group_of, link_groups, link_load, link_sort_key
from simulator.units import format_quantity

V = 64e6


def _result(system: System) -> Result:
    return Result("step", {}, system.metrics(), trace=system.trace, headline="a 64-chip step")


@pytest.fixture(scope="module")
def all_reduce_64():
    system = System("tpu-v5p", topology="torus:4x4x4")
    run_collective("all_reduce", system, V, mode="full")
    return system


def test_64_chip_summary_groups_links_by_axis_and_direction(all_reduce_64):
    system = all_reduce_64
    text = _result(system).summary()
    lines = text.splitlines()
    # the graph: 6 groups (3 axes x 2 directions) of 64 link directions each
    expected = Counter((d["axis"], d["direction"]) for _, _, d in system.graph.edges(data=True))
    assert len(expected) == 6 and set(expected.values()) == {64}
    rows = [line for line in lines if line.startswith("    ICI axis")]
    assert len(rows) == 6
    for (axis, direction), count in expected.items():
        (row,) = [r for r in rows if r.startswith(f"    ICI axis {axis} {'+' if direction > 0 else '-'} ")]
        assert int(row.split()[4]) == count
    assert not any(line.startswith("  busy link") for line in lines)
    # headline, end to end, overlap, 2 link header lines, 6 groups, 1 bytes line (no compute units ran), what
    # exposed means
    assert len(lines) == 3 + 2 + 6 + len(system.metrics()["bytes"]) + 1
    assert "384 busy directions" in text


def test_links_all_lists_every_link_direction(all_reduce_64):
    lines = _result(all_reduce_64).summary(links="all").splitlines()
    listed = [line.split()[2] for line in lines if line.startswith("  busy link")]
    assert len(listed) == all_reduce_64.graph.number_of_edges() == 384
    assert listed == sorted(listed, key=lambda u: link_sort_key(f"link {u}"))
    assert listed[:2] == ["0->1", "0->3"]  # chips in numeric order: 0->16 comes after 0->3
    assert not any("ICI axis" in line for line in lines)


def test_json_keeps_every_link(all_reduce_64):
    data = _result(all_reduce_64).to_json()
    assert sum(unit.startswith("link ") for unit in data["busy_s"]) == 384


def test_group_row_numbers_against_bytes_over_bandwidth():
    system = System("tpu-v5p", topology="torus:4x4x4")
    run_collective("all_gather", system, V, axes=[2], algorithm="unidirectional", mode="full")
    # a unidirectional ring of 4 sends (n - 1) / n of V over every + link of axis 2, one message at a time
    busy = 3 / 4 * V / system.spec.ici_bandwidth_bytes_per_s
    (group,) = link_groups(system.metrics()["busy_s"], system.trace.links)
    assert group.label == "ICI axis 2 +" and group.count == 64
    assert group.min_s == pytest.approx(busy, rel=1e-9) and group.max_s == pytest.approx(busy, rel=1e-9)
    row = next(line for line in _result(system).summary().splitlines() if "ICI axis 2 +" in line)
    assert row.count(format_quantity(busy, "s")) == 3  # min, median, max


def test_summary_rejects_an_unknown_link_view(all_reduce_64):
    with pytest.raises(PodsimError, match="links='some'.*grouped, all"):
        _result(all_reduce_64).summary(links="some")


def test_groups_of_switched_and_dcn_links():
    nodes = System("h100", topology="nodes:2:8")
    run_collective("all_reduce", nodes, V)
    labels = [g.label for g in link_groups(nodes.metrics()["busy_s"], nodes.trace.links)]
    assert labels == ["NVLink chip->switch", "NVLink switch->chip", "IB chip->switch", "IB switch->chip"]
    assert group_of({"kind": "dcn", "src_role": "switch", "dst_role": "chip"})[1] == "DCN switch->chip"
    assert group_of(None)[1] == "links"  # a hand-made trace without link descriptions


def test_median_min_max_and_busiest_on_hand_made_busy_times():
    busy = {"link 0->1": 3.0, "link 1->2": 1.0, "link 2->3": 2.0, "link 10->11": 3.0, "mxu": 9.0}
    info = {u: {"kind": "ici", "axis": 0, "direction": 1} for u in busy if u.startswith("link")}
    (g,) = link_groups(busy, info)
    assert (g.count, g.min_s, g.median_s, g.max_s) == (4, 1.0, 2.5, 3.0)
    assert g.busiest() == ["0->1", "10->11", "2->3"]  # ties by chip number, not by text


def test_details_print_between_the_times_and_the_busy_lines():
    t = Trace()
    t.add(Span(0, "mxu", "mm", 0.0, 1e-3, flops=1.0))
    text = Result("s", {}, compute_metrics(t), trace=t, details=["table line"]).summary()
    lines = text.splitlines()
    assert lines.index("  table line") == 2 and lines[3].startswith("  overlap")


def test_link_load_is_bytes_over_period_against_bandwidth():
    # two messages share [1, 3] s; one alone [5, 6] s at half the nominal rate (a derated link)
    spans = [Span(0, "link 0->1", "a", 1.0, 3.0, "send", 6.0), Span(0, "link 0->1", "b", 2.0, 3.0, "send", 2.0),
             Span(0, "link 0->1", "c", 5.0, 6.0, "send", 2.0)]
    assert link_load(spans, 4.0) == [(1.0, 3.0, 1.0), (5.0, 6.0, 0.5)]
    assert link_load(spans) == [(1.0, 3.0, 1.0), (5.0, 6.0, 1.0)]


def test_strict_json_names_where_an_infinity_sits():
    import math

    from simulator.errors import NonFiniteError
    from simulator.report.result import dumps_json, jsonable

    assert jsonable({"a": [1.0, math.inf]}) == {"a": [1.0, None]}  # lenient: what sweeps tabulate
    with pytest.raises(NonFiniteError, match=r"result\.a\[1\] is inf"):
        dumps_json({"a": [1.0, math.inf]})
    with pytest.raises(NonFiniteError, match=r"result\.busy_s\.mxu is nan"):
        Result("s", {}, {"busy_s": {"mxu": math.nan}}).dumps()


def test_a_non_finite_number_reaching_the_cli_is_an_internal_error_not_bad_input(capsys, monkeypatch):
    import math

    from simulator.frontend import cli, roofline_cmd

    monkeypatch.setattr(roofline_cmd.analytic, "roofline", lambda *a: {"intensity_flops_per_byte": math.inf})
    assert cli.main(["roofline", "--chip", "tpu-v5e", "--matmul", "8,8,8", "--json"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == ("podsim: internal error: result.intensity_flops_per_byte is inf, which no output may hold; "
                   "please report this with the command\n")
