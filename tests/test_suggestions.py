"""Issue 30 item 5: an error suggests only values that work (each suggestion is run here and must succeed) and
names the user's own input. Through the CLI."""
import re

import pytest

from simulator.frontend.cli import main

TRAIN = ["model", "llama-3-8b", "--mode", "train", "--seq", "1024", "--no-simulate"]


def _error(capsys, argv):
    assert main(argv) == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("argv,flag", [
    # batch 10 on data=4: 12 splits, but 12 / 4 = 3 sequences per group that 4 interleaved microbatches cannot
    # divide (the old suggestion, which then failed); 16 gives 4 per group, a multiple of pipeline=4
    (["--mesh", "pipeline=4,data=4", "--schedule", "interleaved", "--microbatches", "4", "--batch", "10"], "--batch"),
    (["--mesh", "data=4", "--microbatches", "3", "--batch", "10"], "--batch"),  # 12: 3 per group, 3 divides it
    (["--mesh", "data=2", "--microbatches", "5", "--batch", "16"], "--microbatches"),  # 8 per group: 4
    (["--mesh", "pipeline=2,data=2", "--schedule", "interleaved", "--microbatches", "3", "--batch", "24"],
     "--microbatches"),  # 12 per group, a multiple of 2 dividing 12 nearest 3: 2
])
def test_every_suggestion_runs(capsys, argv, flag):
    err = _error(capsys, TRAIN + argv)
    found = re.search(r"nearest valid (?:batch is|choice is --microbatches) (\d+)", err)
    assert found, err
    value = found.group(1)
    fixed = list(argv)
    fixed[fixed.index(flag) + 1] = value
    # the suggestion passes every layout rule; whether the state then fits one chip's HBM is another question
    assert main(TRAIN + fixed + ["--json", "--ignore-memory"]) == 0, capsys.readouterr().err
    capsys.readouterr()


def test_the_issue_batch_suggestion_is_the_one_that_works(capsys):
    """The old rule named the nearest multiple of the chip count (12 here), which then failed for the
    microbatches; the suggestion now is 16, the nearest batch every rule accepts."""
    err = _error(capsys, TRAIN + ["--mesh", "pipeline=4,data=4", "--schedule", "interleaved", "--microbatches", "4",
                                  "--batch", "10"])
    assert "the nearest valid batch is 16" in err


def test_no_suggestion_when_none_works(capsys):
    """12 / 4 = 3 sequences per group: no multiple of pipeline=4 divides 3, so no microbatch count is named."""
    err = _error(capsys, TRAIN + ["--mesh", "pipeline=4,data=4", "--schedule", "interleaved", "--microbatches", "4",
                                  "--batch", "12"])
    assert "nearest valid" not in err and "divisor of 3" in err


def test_sharded_matmul_errors_name_the_users_own_spec_and_mesh(capsys):
    """mesh=Y=8 with the default spec: the error names that spec as the default and the mesh the user gave."""
    err = _error(capsys, ["run", "sharded_matmul", "--set", "mesh=Y=8"])
    assert "the default spec A[I,J_X]@B[J_X,K]->C[I,K] (--set spec=" in err and "mesh Y=8" in err
    err = _error(capsys, ["run", "sharded_matmul", "--set", "mesh=X=3,Y=2"])
    assert "the default spec A[I,J_X]@B[J_X,K]->C[I,K]" in err and "J=2048" in err and "X = 3" in err
    err = _error(capsys, ["run", "sharded_matmul", "--set", "mesh=X=3,Y=2", "--set", "spec=A[I,J_X]@B[J_X,K]"])
    assert "default" not in err and err.startswith("podsim: error: A[I, J_X]")  # the user's own spec, as written


def test_sharded_matmul_book_case_that_does_not_divide_is_skipped_with_why(capsys):
    """mesh X=4,Y=3: the user's spec (J over X=4) runs; the book case sharding K over Y=3 (4096 / 3) used to stop
    the run with an error naming a spec the user never wrote. It is skipped, with its spec and reason."""
    assert main(["run", "sharded_matmul", "--set", "mesh=X=4,Y=3"]) == 0
    out = capsys.readouterr().out
    assert "skipped no communication: A[I_X,J]@B[J,K_Y]->C[I_X,K_Y]" in out and "K=4096" in out
