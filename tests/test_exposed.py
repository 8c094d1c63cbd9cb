"""Exposed time has one definition (`simulator.analytic.exposed_s`) and is never negative.

Exposed: time on the critical path when the named resource is busy and compute is not. Checked by hand on a
small op and a small trace, over a property sweep of layouts and options of the closed-form training step,
and through the CLI on the layout where it once came out negative (issue 34's reproducer).
"""
import json

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from simulator import analytic
from simulator.engine.trace import Span, Trace, compute_metrics
from simulator.frontend.cli import main
from simulator.hardware.specs import get_chip
from simulator.workloads.plans import PlanError, TrainOptions, parse_plan_mesh, train_plan
from simulator.workloads.plans.estimate import op_s
from simulator.workloads.plans.ops import Comm, Op, Work
from simulator.workloads.transformer import get_model

V5E = get_chip("tpu-v5e")


class _Link:
    """A stand-in for `links.AxisLink`: a collective takes V / 1 GB/s (1 ms per MB), whatever its kind."""

    n = 4
    stages = ()
    hierarchical = False

    def time_s(self, kind: str, nbytes: float) -> float:
        return nbytes / 1e9


def test_exposed_s_is_the_path_beyond_compute_and_refuses_a_negative():
    assert analytic.exposed_s(3e-3, 2e-3) == pytest.approx(1e-3)
    assert analytic.exposed_s(2e-3, 2e-3) == 0.0
    with pytest.raises(ArithmeticError, match="negative"):
        analytic.exposed_s(1e-3, 2e-3)


def test_op_exposed_time_by_hand():
    """MXU work of 2 ms; ring attention (3 ms, sequence) and a collective matmul (1 ms, model) start with it;
    then a 0.5 ms AllReduce (model). By hand: the op takes max(2, 3, 1) + 0.5 = 3.5 ms, of which 1 ms is exposed
    on sequence (the longest overlapped collective outlasting the work) and 0.5 ms on model."""
    work = Work(2e-3 * V5E.peak_flops_per_s(), 0.0, 0.0, 0.0, 0.0)
    op = Op("attention", work, overlapped=(Comm("all_gather", ("sequence",), 3e6, "sequence"),
                                           Comm("all_reduce", ("model",), 1e6, "model")),
            after=(Comm("all_reduce", ("model",), 0.5e6, "model"),))
    links = {"sequence": _Link(), "model": _Link()}
    exposed: dict[str, float] = {}
    assert op_s(op, V5E, links, exposed) == pytest.approx(3.5e-3)
    assert exposed == pytest.approx({"sequence": 1e-3, "model": 0.5e-3})
    hidden: dict[str, float] = {}  # collectives shorter than the work hide under it
    short = Op("mlp", work, overlapped=(Comm("all_reduce", ("model",), 1.5e6, "model"),))
    assert op_s(short, V5E, links, hidden) == pytest.approx(2e-3) and hidden == {"model": 0.0}


def test_trace_exposed_by_hand():
    """Compute [0, 1] and [2, 3] ms, a link busy [0.5, 2.5] ms: of the 3 ms, 1 ms has no compute running."""
    trace = Trace()
    for start, end, kind in ((0.0, 1e-3, "compute"), (2e-3, 3e-3, "compute"), (0.5e-3, 2.5e-3, "send")):
        trace.spans.append(Span(0, "mxu" if kind == "compute" else "link 0->1", "x", start, end, kind))
    assert compute_metrics(trace)["exposed_s"] == pytest.approx(1e-3)


MESHES = ["fsdp=4,sequence=4,model=4", "fsdp=8,sequence=2,model=4", "fsdp=16,model=4", "data=2,fsdp=8,model=4",
          "fsdp=4,sequence=4,pipeline=2,model=2", "fsdp=8,pipeline=4,model=2", "fsdp=64", "sequence=8,model=8",
          "data=4,sequence=4,model=4"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mesh=st.sampled_from(MESHES), microbatches=st.sampled_from([1, 2, 4, 8]), zero=st.integers(0, 3),
       overlap=st.booleans(), checkpoint=st.sampled_from(["none", "minimal", "full"]),
       schedule=st.sampled_from(["1f1b", "gpipe", "interleaved"]), seq=st.sampled_from([1024, 8192]))
@example(mesh=MESHES[0], microbatches=8, zero=2, overlap=True, checkpoint="none", schedule="1f1b", seq=8192)
def test_closed_form_exposed_is_never_negative(mesh, microbatches, zero, overlap, checkpoint, schedule, seq):
    opts = TrainOptions(microbatches=microbatches, zero=zero, tp_overlap=overlap, checkpoint=checkpoint,
                        schedule=schedule)
    try:
        out = train_plan(get_model("llama-3-8b"), V5E, 64, seq, parse_plan_mesh(mesh), opts, simulate=False,
                         trace=False)
    except PlanError:
        return  # a layout the model refuses (batch per chip, pipeline stages) has no exposed time to check
    closed = out["closed_form"]
    assert all(t >= 0.0 for t in closed["exposed_comm_s"].values()), closed["exposed_comm_s"]
    assert closed["exposed_comm_total_s"] <= closed["step_time_s"]


def test_cli_reproducer_exposed_is_non_negative_and_defined(capsys):
    """Issue 34: this layout printed ``fsdp -63.02 ms``."""
    args = ["model", "llama-3-8b", "--mode", "train", "--batch", "64", "--seq", "8192", "--mesh",
            "fsdp=4,sequence=4,model=4", "--microbatches", "8", "--zero", "2", "--tp-overlap", "--no-simulate"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "-" not in text.split("exposed communication:")[1].split(";")[0]
    assert analytic.EXPOSED_MEANING in text
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["exposed_comm_s"] and min(out["exposed_comm_s"].values()) >= 0.0
