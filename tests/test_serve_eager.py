"""vLLM 0.6's eager prefill (simulator.workloads.serving.eager): the layer's kernels against Vidur's held-out
operator profiles, the step against the ideal bound, and where it applies."""
from __future__ import annotations

import csv
import math
from collections import defaultdict

import pytest

from simulator.hardware.calibration import DATA
from simulator.hardware.gpu_kernels import gpu_kernels
from simulator.hardware.specs import get_chip
from simulator.workloads.budget import Parallelism
from simulator.workloads.serving.arrivals import Arrival
from simulator.workloads.serving.costs import StepCosts
from simulator.workloads.serving.eager import eager_prefill_s, layer_kernels
from simulator.workloads.serving.scheduler import SchedulerConfig
from simulator.workloads.serving.simulate import ServeSetup, run_stream
from simulator.workloads.transformer import TransformerConfig, get_model

H100 = get_chip("h100")
#: CodeLlama-34B's shapes (its Hugging Face config.json: hidden 8192, intermediate 22016, 48 layers, 64 heads,
#: 8 KV heads, vocab 32000): the model of Vidur's held-out operator rows
CODELLAMA_34B = TransformerConfig(name="codellama-34b", d_model=8192, d_ff=22016, n_layers=48, n_heads=64,
                                  n_kv_heads=8, vocab_size=32000)
#: Vidur's operator name -> the layer kernel it profiles (one residual add of the layer's two)
VIDUR_OPS = {"attn_pre_proj": "qkv_proj", "attn_post_proj": "o_proj", "mlp_up_proj": "gate_up_proj",
             "mlp_down_proj": "down_proj", "mlp_act": "mlp_act", "input_layernorm": "input_layernorm",
             "add": "residual_add"}


def _held_out_groups() -> dict[tuple[str, int, int], dict[str, float]]:
    """Vidur's held-out CodeLlama-34B rows at prefill sizes (>= 512 tokens): (chip, tp, tokens) -> op -> seconds."""
    groups: dict[tuple[str, int, int], dict[str, float]] = defaultdict(dict)
    with (DATA / "calibration" / "gpu_kernels_vidur.csv").open() as f:
        for r in csv.DictReader(f):
            if r["set"] == "held_out" and "CodeLlama-34b" in r["model"] and int(r["tokens"]) >= 512:
                groups[(r["chip"], int(r["tp"]), int(r["tokens"]))][r["op"]] = float(r["measured_s"])
    return groups


def test_a_layers_kernels_match_vidurs_held_out_codellama_profiles():
    """The layer's GEMMs, SiLU-and-multiply, RMSNorm and residual add summed, against the same operators as Vidur
    profiled them (CodeLlama-34B, A100 and H100, tensor parallel 1-8, 512-4096 tokens; rows the kernel model was
    not fitted to): every group within 15%, geomean within 6%."""
    groups = _held_out_groups()
    assert len(groups) == 32  # 2 chips x 4 degrees x 4 token counts
    errors = []
    for (chip, tp, tokens), ops in groups.items():
        kernels = gpu_kernels(chip)
        assert kernels is not None
        mine = dict(layer_kernels(CODELLAMA_34B, kernels, tp, 1, tokens))
        measured = sum(ops[op] for op in VIDUR_OPS)
        predicted = sum(mine[name] for name in VIDUR_OPS.values())
        errors.append(abs(math.log(predicted / measured)))
        assert predicted == pytest.approx(measured, rel=0.15), (chip, tp, tokens)
    assert math.exp(sum(errors) / len(errors)) - 1 < 0.06


@pytest.mark.parametrize("model,tp,n,tokens,context", [("llama-3-8b", 1, 10, 137, 0), ("llama-3-8b", 2, 1, 2000, 0),
                                                       ("llama-3-70b", 2, 10, 137, 0), ("llama-3-70b", 8, 4, 512, 256),
                                                       ("mistral-7b", 1, 1, 16, 0)])
def test_the_eager_step_is_never_below_the_ideal_bound(model, tp, n, tokens, context):
    """FLOPs at peak, bytes at spec HBM bandwidth and the AllReduces at line rate bound the step from below."""
    cfg = get_model(model)
    bound = StepCosts(cfg, H100, tp, calibrated=False).bound_s(0, 0, [(tokens, context)] * n)
    eager = eager_prefill_s(cfg, H100, tp, n, tokens, context)
    assert eager is not None and eager >= bound


def test_norms_and_adds_run_whole_on_every_worker():
    """The RMSNorms and residual adds move the whole [tokens, d_model] activation on each GPU (4 and 6 bytes per
    element): their time does not shrink with the tensor-parallel degree, where the GEMMs' does."""
    cfg, kernels = get_model("llama-3-70b"), gpu_kernels("h100")
    assert kernels is not None
    one, eight = (dict(layer_kernels(cfg, kernels, tp, 4, 1024)) for tp in (1, 8))
    assert eight["input_layernorm"] == one["input_layernorm"] == kernels.memory_kernel_time_s(4096 * 8192 * 4, "norm")
    assert eight["residual_add"] == kernels.memory_kernel_time_s(4096 * 8192 * 6, "elementwise")
    assert eight["gate_up_proj"] < one["gate_up_proj"] / 4


def test_only_vllm_06_multi_step_prices_the_prefill_eagerly():
    """vLLM V0 with multi-step windows (vLLM 0.6) pays the eager prefill; one-step vLLM (V1: piecewise CUDA graphs)
    and the bound keep their prices."""
    cfg = get_model("llama-3-8b")

    def ttft(steps: int, kind: str = "forecast") -> float:
        sched = SchedulerConfig(chunk_tokens=0, whole_budget_tokens=2048, num_steps=steps)
        setup = ServeSetup(cfg, H100, Parallelism(1, 1), sched=sched, max_model_len=4096, engine="vllm")
        first = run_stream(setup, [Arrival(0.0, 1000, 1)], kind, frontend_s=0.0).done[0].first_token_s
        assert first is not None
        return first

    eager = eager_prefill_s(cfg, H100, 1, 1, 1000)
    fitted = StepCosts(cfg, H100, 1, engine="vllm").forecast_s(0, 0, [(1000, 0)])
    assert eager is not None and eager != pytest.approx(fitted, rel=0.01)
    assert ttft(1) == pytest.approx(fitted, rel=1e-12)
    assert ttft(10) > eager  # plus the host time of one call
    assert ttft(10, "bound") == ttft(1, "bound")


def test_models_without_a_kernel_by_kernel_price_keep_the_fitted_factors():
    """MoE and 8-bit weights, and TPUs: no eager price (None), and StepCosts keeps the fitted step."""
    for cfg, chip in ((get_model("mixtral-8x7b"), H100), (get_model("llama-3-8b").replace(weight_elem_bytes=1), H100),
                      (get_model("llama-3-8b"), get_chip("tpu-v5e"))):
        assert eager_prefill_s(cfg, chip, 1, 1, 128) is None
        assert not StepCosts(cfg, chip, 1, engine="vllm", eager_prefill=True).eager_prefill


def test_bad_counts_get_one_line_errors():
    with pytest.raises(ValueError, match="tokens=0 must be a whole number >= 1"):
        eager_prefill_s(get_model("llama-3-8b"), H100, 1, 1, 0)
