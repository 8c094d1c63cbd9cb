"""Collectives inside Transformer steps, sharded matmuls, MoE layers and compiled programs go through the same
`auto` selection as a lone collective (issue 14): none forces an algorithm, and where a result lists its
collectives it names the algorithm auto chose."""
from pathlib import Path

import pytest

from scenarios import moe_layer, sharded_matmul, transformer_step
from simulator.collectives import api, run_collective
from simulator.engine.system import System
from simulator.frontend.hlo import simulate_hlo
from simulator.workloads.mesh import Mesh, parse_mesh

HLO = Path(__file__).resolve().parent / "data" / "hlo"


@pytest.fixture
def tuned(monkeypatch):
    """Every call of the tuner: (algorithm asked for, kind, the chosen algorithm, the alternatives)."""
    calls = []
    tune = api.tune

    def spy(name, kind, net, groups, make_job, *args, **kwargs):
        choice = tune(name, kind, net, groups, make_job, *args, **kwargs)
        calls.append((name, kind, choice.algorithm.name, choice.alternatives))
        return choice

    monkeypatch.setattr(api, "tune", spy)
    return calls


@pytest.mark.parametrize("mode,mesh,topology", [("decode", "model=4", "switch:4"),
                                                ("train", "data=2,model=4", "switch:8")])
def test_transformer_steps_let_auto_choose_every_collective(tuned, mode, mesh, topology):
    transformer_step.run(model="gpt2", mode=mode, batch=8, context=128, seq=128, mesh=mesh, chip="h100",
                         topology=topology, trace=False)
    assert tuned and all(name == "auto" for name, *_ in tuned)
    for _, _, chosen, alternatives in tuned:  # the fastest closed form, as for a lone collective
        assert chosen == alternatives[0]["algorithm"]
    assert {chosen for *_, chosen, _ in tuned} - {"unidirectional", "bidirectional", "line"}  # not just rings


def test_sharded_matmul_steps_name_autos_algorithm(tuned):
    r = sharded_matmul.run(spec="A[I,J_X]@B[J_X,K]->C[I,K]", mesh="X=8", topology="switch:8", chip="h100",
                           I=1024, J=1024, K=1024, verify=False, cases=False)
    steps = [s for row in r.extra["strategies"] for s in row["steps"] if s["kind"] not in ("matmul", "slice")]
    assert steps and all(name == "auto" for name, *_ in tuned)
    for s in steps:
        system = System("h100", topology="switch:8", trace=False)
        mesh = Mesh(parse_mesh("X=8"), system.graph)
        alone = run_collective(s["kind"], system, s["bytes"], axes=["X"], mesh=mesh)
        assert s["algorithm"] == alone.algorithm


def test_moe_layer_names_the_all_to_all_algorithm():
    r = moe_layer.run(model="mixtral-8x7b", chips=8, topology="switch:8", chip="h100", trace=False)
    a2a_bytes = 8 * 256 * 2 * 4096 * 2  # chips x tokens per chip (default) x top-2 x d_model x bf16
    alone = run_collective("all_to_all", System("h100", topology="switch:8", trace=False), a2a_bytes)
    assert r.extra["all_to_all_algorithm"] == alone.algorithm == "direct"  # pairwise through the switch


def test_compiled_programs_name_each_collectives_algorithm(tuned):
    result = simulate_hlo(HLO / "block_train.txt", mesh="X=4,Y=2")
    rows = [row for row in result.extra["collectives"] if row["kind"] != "collective_permute" and row["bytes"]]
    assert rows and all("algorithm" in row for row in rows)
    assert all(name == "auto" for name, *_ in tuned)
    assert {row["algorithm"] for row in rows} <= {chosen for *_, chosen, _ in tuned}
