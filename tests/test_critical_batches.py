"""The book's communication critical batches per strategy, as `podsim model --mode train` reports them for
its mesh (How To Scale Your Model, training chapter and inference chapter question 7).

Oracles from the book and the REFERENCE numbers (v5p: 4.59e14 FLOP/s, 9e10 B/s one way per ICI link,
so W_ici = 1.8e11 both ways along a wrapped axis and alpha = C / W_ici = 2550), never from podsim.
"""
import json

import pytest

from simulator.frontend.cli import main
from simulator.workloads import critical

C, W_ICI = 4.59e14, 2 * 9e10
ALPHA = C / W_ICI  # 2550
D, F = 4096, 14336  # llama-3-8b


def _train(capsys, mesh):
    assert main(["model", "llama-3-8b", "--mode", "train", "--chip", "tpu-v5p", "--mesh", mesh, "--batch", "64",
                 "--seq", "1024", "--no-simulate", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # physical axes under each logical axis, in units of a whole wrapped axis's W_ICI (issue 13): a factor of an
    # axis ({"axis", "size", "stride"}) is a line (one way to each neighbour, W_ICI / 2) unless it is the outer
    # factor of more than 2 (a ring through the wrap link), and its neighbours are ``stride`` hops apart, each
    # link shared by ``stride`` groups
    sides = [int(n) for n in out["topology"].split(":")[1].split("x")]

    def weight(d):
        if isinstance(d, int):
            return 1
        ring = d["size"] * d["stride"] == sides[d["axis"]] and d["size"] > 2
        return (1 if ring else 0.5) / d["stride"]
    axes = {a: sum(map(weight, dims)) for a, dims in out["placement"].items()}
    return out["critical_batch_per_chip"], out.get("critical_batch_notes", {}), axes


def test_fsdp_and_mixed_fsdp_tensor_parallelism(capsys):
    """FSDP: alpha / M_X tokens per chip; mixed, the book's current edition: alpha^2 / (M_X M_Y F) (alpha^2 / (2F)
    = 227 for F = 14,336); the older edition's 4 alpha^2 / (F M_X M_Y) = 907 in the note."""
    crit, notes, axes = _train(capsys, "fsdp=16,model=4")
    assert (axes["fsdp"], axes["model"]) == (2, 1)
    assert crit["fsdp"] == pytest.approx(ALPHA / 2)
    assert crit["fsdp+model"] == pytest.approx(ALPHA**2 / (F * 2 * 1))
    assert crit["fsdp+model"] == pytest.approx(227, abs=1)
    assert "907" in notes["fsdp+model"] and "227" in notes["fsdp+model"]


@pytest.mark.parametrize("mesh,bound", [("fsdp=16,model=4", True), ("fsdp=4,model=16", False)])
def test_tensor_parallelism_is_bound_by_ways_not_batch(capsys, mesh, bound):
    """The book: model parallelism is ICI-bound once Y > M_Y F / alpha, whatever the batch."""
    crit, notes, axes = _train(capsys, mesh)
    y = int(mesh.split("model=")[1])
    assert (y <= axes["model"] * F / ALPHA) is bound
    assert crit["model"] == (0.0 if bound else None)
    assert ("compute-bound at any batch" in notes["model"]) is bound


def _book_2d(chips, w):
    """Inference chapter, question 7: T_math = 4BDF/(NC), T_comms = 2BD/(XW) + 4BF/(YZ W) at the best split."""
    splits = [(x, chips // x) for x in range(1, chips + 1) if chips % x == 0]
    comms = min(2 * D / x + 4 * F / yz for x, yz in splits) / w
    return 4 * D * F / (chips * C) >= comms


@pytest.mark.parametrize("mesh", ["fsdp=16,model=4", "fsdp=4,model=16", "fsdp=2,model=32"])
def test_two_d_weight_stationary_by_the_book(capsys, mesh):
    crit, notes, axes = _train(capsys, mesh)
    chips = int(mesh.split("model=")[1])
    bound = _book_2d(chips, axes["model"] * W_ICI)
    assert crit["2d_weight_stationary"] == (0.0 if bound else None)
    assert "2-D weight-stationary" in notes["2d_weight_stationary"]


def test_two_d_weight_stationary_moves_less_than_1d_beyond_81_chips():
    """The book's F = 4D case: the optimal split is X = sqrt(N / 8), YZ = sqrt(8 N), traffic 11.3 BD / (sqrt(N) W)."""
    d, n, w = 1024, 128, 1.0
    _, note, split = critical.weight_stationary_2d(1.0, w, d, 4 * d, n)
    assert split == {"x": 4, "yz": 32}  # sqrt(128 / 8) = 4, sqrt(8 x 128) = 32
    assert 2 * d / 4 + 4 * 4 * d / 32 == pytest.approx(128**0.5 * d / n**0.5)  # = 11.3 D / sqrt(N)
    assert "X = 4" in note


@pytest.mark.parametrize(("mesh", "nodes"), [("data=16", 2), ("data=32", 4)])
def test_gpu_data_parallelism_over_few_nodes_is_the_books_x_minus_one_over_x(capsys, mesh, nodes):
    """The book (gpus, "What happens when X is small?"): over X nodes the ring moves (X - 1) / X of the weights,
    so B / N > alpha (X - 1) / X with alpha = 990e12 / 400e9 = 2,475 across H100 nodes: 1,237 for 2 nodes."""
    assert main(["model", "llama-2-7b", "--mode", "train", "--chip", "h100", "--mesh", mesh, "--batch", "64",
                 "--seq", "1024", "--no-simulate", "--ignore-memory", "--json"]) == 0
    book = json.loads(capsys.readouterr().out)["critical_batch_per_chip_book"]
    assert book["data"] == pytest.approx(990e12 / 400e9, rel=1e-12)
    assert book["data_small_x"] == pytest.approx(990e12 / 400e9 * (nodes - 1) / nodes, rel=1e-12)
