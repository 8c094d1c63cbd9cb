"""Small API defects a notebook author hit: plan-search rows usable as inputs, `mfu_vs_slices.draw` returning its
Figure, `podsim validate`'s rows as data, the book's alpha / M_X / M_Y beside the critical batches, the serving
functions at the package top, host links labelled as host links.

Oracles are built by hand (option objects written out, result dicts typed in, the book's v5p numbers: 4.59e14
FLOP/s, 9e10 B/s one way per ICI link), never read back from the code under test.
"""
import json

import pytest

from simulator.errors import PodsimError
from simulator.hardware.specs import get_chip
from simulator.workloads.plans.layout import MeshPlan, TrainOptions
from simulator.workloads.plans.search import options_of, search, simulate_one, train_options
from simulator.workloads.transformer import TransformerConfig

TINY = TransformerConfig(name="tiny", d_model=256, d_ff=1024, n_layers=4, n_heads=4, vocab_size=128,
                         tied_embeddings=True)


# 1. plan-search rows: ``options`` and ``mesh`` are plain dicts; they stand for TrainOptions and MeshPlan

@pytest.mark.parametrize("opts,plan", [
    (TrainOptions(microbatches=2, schedule="gpipe", checkpoint="full", zero=1, tp_overlap=True),
     MeshPlan({"pipeline": 2, "fsdp": 2, "model": 2})),
    (TrainOptions(microbatches=4, schedule="interleaved", virtual_stages=2, checkpoint="minimal"),
     MeshPlan({"pipeline": 2, "data": 2})),
    (TrainOptions(zero=3), MeshPlan({"data": 4})),  # no fsdp: the row says zero: null
])
def test_a_rows_options_read_back_as_the_options_it_reports(opts, plan):
    row_options = json.loads(json.dumps(options_of(opts, plan)))  # as a notebook reads the CLI's JSON
    assert train_options(row_options) == opts
    assert train_options(opts) is opts


def test_train_options_names_an_unknown_key():
    with pytest.raises(PodsimError, match="'micro_batches'.*valid:.*microbatches"):
        train_options({"micro_batches": 2})


def test_simulate_one_takes_a_search_rows_own_dicts():
    chip = get_chip("tpu-v5e")
    found = search(TINY, chip, 4, "train", 8, 128, top=0)
    row = next(r for r in found["plans"] if r["fits"] and "model" in r["mesh"])
    assert not row["simulated"]
    opts = TrainOptions(microbatches=row["options"]["microbatches"], schedule=row["options"]["schedule"],
                        checkpoint=row["options"]["checkpoint"], tp_overlap=row["options"]["tp_overlap"],
                        zero=row["options"]["zero"] or 3, virtual_stages=row["options"].get("virtual_stages", 2))
    assert opts != TrainOptions()  # the row's options matter: a dict read as the defaults would price otherwise
    plan = MeshPlan(dict(row["mesh"]))
    by_dicts = simulate_one(TINY, chip, "train", 8, 128, row["mesh"], row["options"], None)
    by_objects = simulate_one(TINY, chip, "train", 8, 128, plan, opts, None)
    assert by_dicts["simulated"] and by_dicts["options"] == row["options"] and by_dicts["mesh"] == row["mesh"]
    assert by_dicts["step_time_s"] == by_objects["step_time_s"]
    assert by_dicts["closed_form_s"] == pytest.approx(row["closed_form_s"], rel=1e-12)  # the row it came from


def test_simulate_one_takes_a_serving_rows_options():
    chip = get_chip("tpu-v5e")
    row = {"mesh": {"data": 2, "model": 2}, "options": {"layout": "2d:1x2", "kv_sharding": "2d (heads)"}}
    by_dict = simulate_one(TINY, chip, "decode", 8, 256, row["mesh"], row["options"], None)
    by_text = simulate_one(TINY, chip, "decode", 8, 256, MeshPlan({"data": 2, "model": 2}), "2d:1x2", None)
    assert by_dict["options"]["layout"] == "2d:1x2" and by_dict["step_time_s"] == by_text["step_time_s"]


# 2. mfu_vs_slices.draw returns the Figure; it saves only when given a path

def _mfu_result():
    from simulator.report.result import Result

    curves = {"m16": [{"slices": 1, "mfu_published_convention": 0.5}, {"slices": 4, "mfu_published_convention": 0.4}],
              "m64": [{"slices": 1, "mfu_published_convention": 0.6}, {"slices": 4, "mfu_published_convention": 0.3}]}
    published = [{"model": "m16", "slices": 4, "published_mfu": 0.45, "set": "held out"}]
    return Result(scenario="mfu_vs_slices", params={"chip": "tpu-v5e"}, metrics={},
                  extra={"curves": curves, "published": published, "calibrated": True})


def test_mfu_vs_slices_draw_returns_the_figure_and_writes_nothing(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    from scenarios import mfu_vs_slices

    monkeypatch.chdir(tmp_path)
    fig = mfu_vs_slices.draw(_mfu_result())
    assert isinstance(fig, Figure) and list(tmp_path.iterdir()) == []
    (ax,) = fig.axes
    lines = {line.get_label(): list(line.get_ydata()) for line in ax.get_lines()}
    assert lines["m16 (podsim)"] == pytest.approx([50, 40]) and lines["m64 (podsim)"] == pytest.approx([60, 30])
    assert [45] in [pytest.approx(list(line.get_ydata())) for line in ax.get_lines()]  # the published point
    plt.close(fig)


def test_mfu_vs_slices_draw_saves_when_given_a_path(tmp_path):
    from matplotlib.figure import Figure

    from scenarios import mfu_vs_slices

    fig = mfu_vs_slices.draw(_mfu_result(), tmp_path / "m.png", dpi=50)
    assert isinstance(fig, Figure) and fig.axes[0].get_xlabel() == "slices of 256 tpu-v5e (over DCN)"
    assert (tmp_path / "m.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(PodsimError, match="picture"):
        mfu_vs_slices.draw(_mfu_result(), tmp_path / "m.txt")


# 3. podsim validate's rows as data

def _validation():
    case = {"family": "F", "case": "1 MiB", "measured": 10.0, "predicted": 11.0, "unit": "us", "error": 0.1,
            "set": "fit"}
    held = {**case, "case": "2 MiB", "predicted": 8.0, "error": -0.2, "set": "held out"}
    families = {"F": {"fit": {"cases": 1, "geomean_error": 0.1, "worst_error": 0.1, "meets_target": True},
                      "held_out": {"cases": 1, "geomean_error": 0.25, "worst_error": 0.25, "meets_target": False}},
                "G": {"fit": {"cases": 0, "geomean_error": None, "worst_error": None, "meets_target": None},
                      "held_out": {"cases": 0, "geomean_error": None, "worst_error": None, "meets_target": None}}}
    return {"cases": [case, held], "families": families, "target_error": 0.1, "notes": {"F": "why"}}


def test_validate_rows_are_the_tables_lines():
    from simulator.frontend.validate import case_rows, render, summary_rows

    result = _validation()
    assert case_rows(result) == result["cases"]
    assert summary_rows(result) == [
        {"family": "F", "set": "fit", "cases": 1, "geomean_error": 0.1, "worst_error": 0.1, "meets_target": True,
         "target_error": 0.1},
        {"family": "F", "set": "held_out", "cases": 1, "geomean_error": 0.25, "worst_error": 0.25,
         "meets_target": False, "target_error": 0.1}]
    table, summary, notes = render(result).split("\n\n")
    assert len(table.splitlines()) == 1 + 2 and "-20.0%" in table.splitlines()[2]
    assert summary.splitlines()[1].endswith("geometric-mean error 25.0%, worst 25.0% (MISSES the 10% target)")
    assert notes == "note (F): why"


# 4. the book's alpha, M_X and M_Y beside the critical batches

@pytest.mark.parametrize("mesh,m_x,m_y", [("fsdp=16,model=4", 2, 1), ("fsdp=4,model=16", 1, 2)])
def test_critical_batch_axes_give_the_books_m_x_and_m_y(capsys, mesh, m_x, m_y):
    """v5p torus:4x4x4: fsdp=16 spans two wrapped axes of 4 (M_X = 2), model=4 one (M_Y = 1); alpha = C / W_ici =
    4.59e14 / (2 x 9e10) = 2550, and FSDP + TP turns compute-bound at alpha^2 / (M_X M_Y F) (the current edition)."""
    from simulator.frontend.cli import main

    assert main(["model", "llama-3-8b", "--mode", "train", "--chip", "tpu-v5p", "--mesh", mesh, "--batch", "64",
                 "--seq", "1024", "--no-simulate", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    axes = out["critical_batch_axes"]
    assert axes["alpha"] == pytest.approx(2550) and axes["w_ici_bytes_per_s"] == pytest.approx(1.8e11)
    assert (axes["M_X"], axes["M_Y"]) == (pytest.approx(m_x), pytest.approx(m_y))
    assert axes["M"] == {"fsdp": pytest.approx(m_x), "model": pytest.approx(m_y)}
    crit = out["critical_batch_per_chip"]
    assert set(crit) == {"fsdp", "model", "fsdp+model", "2d_weight_stationary"}  # still keyed by strategy only
    assert crit["fsdp+model"] == pytest.approx(2550**2 / (14336 * m_x * m_y))


# 5. the serving functions at the package top

def test_served_functions_are_exported_from_simulator():
    import simulator
    from simulator.workloads import served

    assert simulator.served_request is served.served_request
    assert simulator.served_concurrent is served.served_concurrent
    assert {"served_request", "served_concurrent"} <= set(simulator.__all__)
    assert all(hasattr(simulator, name) for name in simulator.__all__)


# 6. host links: PCIe chip->host / host->chip, switches unchanged

def test_host_links_are_labelled_as_host_links():
    from simulator.engine.system import System
    from simulator.report.links import group_of, link_groups

    system = System("tpu-v5e", topology="ring:4+hosts:2")

    def offload_and_back(env):
        yield system.offload(0, 16e6)
        yield system.reload(0, 16e6)

    system.env.process(offload_and_back(system.env))
    system.run()
    groups = link_groups(system.metrics()["busy_s"], system.trace.links)
    assert [(g.label, g.busiest()) for g in groups] == [("PCIe chip->host", ["0->host0"]),
                                                         ("PCIe host->chip", ["host0->0"])]
    assert groups[0].max_s == pytest.approx(16e6 / 1.6e10, rel=1e-3)  # 16 MB over v5e's 16 GB/s PCIe
    assert group_of({"kind": "nvlink", "src_role": "chip", "dst_role": "switch"})[1] == "NVLink chip->switch"
    assert group_of({"kind": "ib", "src_role": "switch", "dst_role": "chip"})[1] == "IB switch->chip"
    assert group_of({"kind": "pcie", "src_role": "chip"})[1] == "PCIe chip->switch"  # far end unknown
