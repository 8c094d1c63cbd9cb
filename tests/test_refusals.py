"""Inputs podsim once ran silently wrong (exit 0) are refused in one line (exit 2), or give the corrected number:
issue 34's list."""
import pytest

from simulator.frontend.cli import main


def fails(capsys, *argv: str) -> str:
    """The one-line error of a refused command (exit status 2)."""
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


@pytest.mark.parametrize("argv,reached", [
    (["model", "gpt2", "--context", "100000"], "100,001"),  # the case
    (["model", "gpt2", "--context", "1024"], "1,025"),  # the new token's position is past the table
    (["model", "gpt2", "--mode", "prefill", "--seq", "2048"], "2,048"),
    (["model", "gpt2", "--mode", "train", "--seq", "2048", "--batch", "8", "--no-simulate"], "2,048"),
    (["run", "transformer_step", "--set", "model=gpt2", "--set", "context=4096"], "4,097"),
])
def test_a_context_past_the_models_positions_is_refused(capsys, argv, reached):
    err = fails(capsys, *argv)
    assert f"reaches position {reached}, but gpt2's positions end at 1,024 (max_positions)" in err


def test_a_context_within_the_positions_runs(capsys):
    assert main(["model", "gpt2", "--context", "1023", "--no-simulate"]) == 0  # positions 0 ... 1023
    capsys.readouterr()
