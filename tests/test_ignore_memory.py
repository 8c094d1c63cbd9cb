"""A training state that does not fit HBM is refused (exit 2) unless --ignore-memory, which then says so in text and
JSON; a decode or prefill budget answers the question (``fits`` false, the batch that fits) and is not refused.

Oracles by hand: a 70B model's weights alone (2 bytes a parameter, bf16) pass one 16 GiB chip; its training
state (weights, gradients, Adam's fp32 moments and master copy: 16 bytes a parameter) passes it by far.
"""
from __future__ import annotations

import json

import pytest

from simulator.frontend.cli import main
from simulator.frontend.model_cmd import IGNORED_MEMORY
from simulator.hardware.specs import get_chip
from simulator.workloads.transformer import get_model

GIB = 2**30
CAP = get_chip("tpu-v5e").hbm_capacity_bytes
N = get_model("llama-3-70b").params()
CASES = {"train": ["model", "llama-3-70b", "--mode", "train", "--chip", "tpu-v5e", "--mesh", "data=1", "--no-simulate"],
         "decode": ["model", "llama-3-70b", "--chip", "tpu-v5e", "--no-simulate"],
         "prefill": ["model", "llama-3-70b", "--mode", "prefill", "--chip", "tpu-v5e", "--seq", "128", "--no-simulate"],
         "abstract": ["model", "--params", "70e9", "--kv-bytes-per-token", "300e3", "--chip", "tpu-v5e"]}


def test_the_hand_oracle_says_none_of_these_fit():
    assert 2 * N > CAP and 16 * N > 50 * CAP  # weights alone; the training state by far


TRAIN = ["train"]
SERVING = ["decode", "prefill", "abstract"]


@pytest.mark.parametrize("case", TRAIN)
def test_a_state_that_does_not_fit_is_refused_naming_need_and_capacity(case, capsys):
    assert main(CASES[case]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("podsim: error: ") and "does not fit" in err
    assert f"of {CAP / GIB:.2f} GiB HBM" in err and "--ignore-memory" in err


@pytest.mark.parametrize("case", SERVING)
def test_a_serving_budget_that_does_not_fit_says_so_and_exits_0(case, capsys):
    """The public contract asks `podsim model llama-2-7b --batch 4 --context 2048 --chip tpu-v5e` for ``fits``."""
    assert main([*CASES[case], "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fits"] is False and "ignore_memory" not in out
    need = out.get("memory_per_chip_bytes", out.get("hbm_needed_per_chip_bytes"))
    assert need > CAP


@pytest.mark.parametrize("case", TRAIN)
def test_ignore_memory_prices_it_and_every_output_says_so(case, capsys):
    assert main([*CASES[case], "--ignore-memory", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fits"] is False and out["ignore_memory"] is True
    assert out["notes"][0].startswith(IGNORED_MEMORY)
    need = out.get("memory_per_chip_bytes", out.get("hbm_needed_per_chip_bytes"))
    assert need > CAP and need >= (2 * N if case != "abstract" else 2 * 70e9)  # at least the bf16 weights
    assert f"needs {need / GIB:.2f} GiB per chip" in out["notes"][0]
    assert main([*CASES[case], "--ignore-memory"]) == 0
    text = capsys.readouterr().out
    assert IGNORED_MEMORY in text and "fit" in text.replace(IGNORED_MEMORY, "")  # the verdict and the note


def test_a_state_that_fits_is_not_touched(capsys):
    assert main(["model", "gpt2", "--chip", "tpu-v5e", "--no-simulate", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fits"] is True and "ignore_memory" not in out and not any("ignore" in n for n in out.get("notes", []))
