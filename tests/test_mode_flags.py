"""Flags a mode does not read are refused with the reason, and numeric inputs stay meaningful once derived.

Decode and prefill refuse the training step's flags (as --mode train refuses decode's: tests/test_refusals.py);
decode refuses --seq (its new tokens are one per request). A utilisation, a token count, a KV size or a memory
budget whose derived value overflows or means nothing is refused by name (`simulator.units.check_derived`).
"""
from __future__ import annotations

import json

import pytest

from simulator.frontend.cli import main
from simulator.frontend.model_cmd import SERVE_IGNORES
from simulator.hardware.specs import get_chip

TRAIN_ONLY = {"--zero": "2", "--microbatches": "2", "--checkpoints-per-layer": "full", "--virtual-stages": "3",
              "--tp-overlap": None, "--sequence-attention": "allgather", "--no-master-copy": None,
              "--no-reshard-after-forward": None, "--framework": "megatron-lm"}


def _err(capsys, argv):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("podsim: error: ") and "\n" not in err and "Traceback" not in err
    return err


def test_every_training_flag_is_listed():
    assert {f"--{k.replace('_', '-')}" for k in SERVE_IGNORES} == set(TRAIN_ONLY)


@pytest.mark.parametrize("mode", ["decode", "prefill"])
@pytest.mark.parametrize("flag", sorted(TRAIN_ONLY))
def test_a_training_flag_in_decode_or_prefill_is_refused_with_the_reason(capsys, mode, flag):
    value = TRAIN_ONLY[flag]
    err = _err(capsys, ["model", "gpt2", "--mode", mode, flag, *([value] if value else []), "--no-simulate"])
    assert f"a {mode} step" in err and f"(drop {flag}, or add --mode train)" in err


@pytest.mark.parametrize("flag", sorted(set(TRAIN_ONLY) - {"--framework"}))  # (that one needs a GPU forecast)
def test_the_same_flags_are_read_in_train(capsys, flag):
    value = TRAIN_ONLY[flag]
    argv = ["model", "gpt2", "--mode", "train", "--batch", "8", "--seq", "128", "--mesh", "fsdp=2,pipeline=2",
            "--microbatches", "4", "--schedule", "interleaved", "--no-simulate", "--json"]
    if flag not in argv:
        argv[-2:-2] = [flag, *([value] if value else [])]
    assert main(argv) == 0, capsys.readouterr().err
    json.loads(capsys.readouterr().out)


def test_the_defaults_are_what_train_ran_before(capsys):
    """Defaults moved from argparse to `check_mode_flags`: an unflagged train step is unchanged (ZeRO 3, one
    microbatch, no checkpoints, ring attention)."""
    argv = ["model", "gpt2", "--mode", "train", "--batch", "8", "--seq", "128", "--mesh", "fsdp=2", "--no-simulate",
            "--json"]
    assert main(argv) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main([*argv, "--zero", "3", "--microbatches", "1", "--checkpoints-per-layer", "none",
                 "--sequence-attention", "ring", "--virtual-stages", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["step_time_s"] == plain["step_time_s"]


def test_decode_refuses_seq_and_prefill_reads_it(capsys):
    assert "--seq is prefill's prompt tokens" in _err(capsys, ["model", "gpt2", "--seq", "128", "--no-simulate"])
    assert main(["model", "gpt2", "--mode", "prefill", "--seq", "128", "--no-simulate", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["mode"] == "prefill"


def test_an_assumed_utilisation_whose_run_time_overflows_is_refused(capsys):
    peak = get_chip("tpu-v5e").peak_flops_per_s("bf16")
    assert 6 * 7e9 * 1e18 / (peak * 1e-300) == float("inf")  # by hand: 6 N T / (chips peak MFU) overflows
    err = _err(capsys, ["model", "--params", "7e9", "--mode", "train", "--tokens-total", "1e18",
                        "--assume-mfu", "1e-300"])
    assert "--assume-mfu 1e-300 makes the time to train (s) inf" in err


@pytest.mark.parametrize("argv,named", [
    (["model", "--params", "7e9", "--kv-bytes-per-token", "1e-300"], "--kv-bytes-per-token 1e-300"),  # was a traceback
    (["model", "gpt2", "--mode", "train", "--tokens-total", "1e-300", "--no-simulate"], "less than one token"),
    (["model", "gpt2", "--max-memory", "1e-300", "--no-simulate"], "--max-memory 1e-300"),
])
def test_inputs_meaningless_once_derived_are_refused(capsys, argv, named):
    assert named in _err(capsys, argv)
