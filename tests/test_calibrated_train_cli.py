"""`podsim model --mode train --calibrated` on a TPU: the calibrated whole step and its breakdown (issue 20)."""
from __future__ import annotations

import json

from simulator.frontend.cli import main


def test_model_cli_prints_the_calibrated_breakdown(capsys):
    args = ["model", "gpt2", "--mode", "train", "--chip", "tpu-v5e", "--mesh", "fsdp=4", "--batch", "8", "--seq",
            "512", "--checkpoints-per-layer", "minimal", "--calibrated"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "calibrated whole step (published TPU runs)" in text and "dcn" in text and "ideal" in text
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    cal = out["calibrated_step"]
    assert out["calibrated_mfu"] == cal["mfu"] < cal["ideal"]["mfu"]
    assert set(cal["factors"]) == {"matmul_s", "attention_s", "vector_s", "recompute_s", "exposed_ici_s",
                                   "optimizer_s", "dcn_s", "overhead_s"}
