"""Metrics computed from spans, on hand-built traces whose answers are worked out by hand."""
import pytest

from simulator.engine.trace import Span, Trace, compute_metrics, intersection_length, merge_intervals


def _trace(*spans):
    t = Trace()
    for s in spans:
        t.add(s)
    return t


def test_merge_and_intersect_intervals():
    assert merge_intervals([(3, 4), (0, 1), (0.5, 2), (5, 5)]) == [(0, 2), (3, 4)]
    assert intersection_length([(0, 2), (3, 4)], [(1, 3.5)]) == pytest.approx(1.5)


def test_double_buffer_shaped_trace():
    # load 0-2, load 2-4 (HBM); compute 2-3, 4-5 (MXU): the second load overlaps the first compute
    t = _trace(Span(0, "hbm", "b0", 0, 2, "load", 10), Span(0, "hbm", "b1", 2, 4, "load", 10),
               Span(0, "mxu", "b0", 2, 3, "compute", flops=7), Span(0, "mxu", "b1", 4, 5, "compute", flops=7))
    m = compute_metrics(t)
    assert m["end_to_end_s"] == 5
    assert m["busy_s"] == {"hbm": 4, "mxu": 2}
    assert m["overlap_s"] == 1
    assert m["exposed_s"] == 3
    assert m["lower_bound_s"] == 4 and m["upper_bound_s"] == 6
    assert m["flops"] == 14
    assert m["utilization"] == {"hbm": 0.8, "mxu": 0.4}


def test_busy_is_per_unit_on_its_busiest_chip_and_upper_bound_per_chip():
    t = _trace(Span(0, "mxu", "a", 0, 1), Span(1, "mxu", "b", 0, 3), Span(1, "hbm", "c", 0, 1, "load"),
               Span(0, "hbm", "d", 1, 2, "load"))
    m = compute_metrics(t)
    assert m["busy_s"] == {"mxu": 3, "hbm": 1}
    assert m["upper_bound_s"] == 4  # chip 1: 3 + 1
    assert m["overlap_s"] == 2  # compute busy [0, 3), movement busy [0, 2)


def test_disabled_trace_keeps_flop_count_but_no_spans():
    t = Trace(enabled=False)
    t.add(Span(0, "mxu", "a", 0, 1, flops=5))
    assert t.spans == [] and t.flops_total == 5
