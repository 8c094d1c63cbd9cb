"""The largest batch a decode or prefill budget states, against the hand count (free HBM / KV bytes a request).

Llama-3-70B by hand: 80 layers, d_model 8192, 8 KV heads of 128, d_ff 28672, vocab 128256, untied embeddings.
Per layer 2 x 8192^2 (Q, O) + 2 x 8192 x 1024 (K, V) + 3 x 8192 x 28672 (MLP) + 2 x 8192 (norms) = 855,654,400
parameters; x 80 + 2 x 128256 x 8192 + 8192 = 70,553,706,496. KV per position: 2 (K, V) x 80 x 8 x 128 x 2 B
= 327,680 B, an eighth of it on each of 8 chips sharding by heads.
"""
import math

from simulator.frontend.model_text import max_batch_text
from simulator.hardware.specs import get_chip
from simulator.workloads.budget import Parallelism, decode_budget
from simulator.workloads.transformer import get_model

PARAMS = 80 * (2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 28672 + 2 * 8192) + 2 * 128256 * 8192 + 8192
FREE = 80 * 2**30 - PARAMS * 2 / 8  # H100 HBM beside each chip's bf16 weight shard, bytes
KV_POSITION = 2 * 80 * 8 * 128 * 2 / 8  # each chip's share of one cached position, bytes


def _budget(**kw: object) -> dict:
    return decode_budget(get_model("llama-3-70b"), get_chip("h100"), par=Parallelism(model=8), **kw)


def test_context_zero_is_one_cached_position_and_names_the_batch_at_a_real_context():
    out = _budget(batch=1, context=0)
    assert get_model("llama-3-70b").params() == PARAMS == 70_553_706_496
    assert out["max_batch"] == math.floor(FREE / KV_POSITION)  # 1.67 M requests of one position: true, not useful
    assert out["max_batch_positions"] == 1
    ref = out["max_batch_reference"]
    assert ref["max_batch"] == math.floor(FREE / (KV_POSITION * (ref["context"] + 1)))
    assert 300 < ref["max_batch"] < 1000  # a batch a 70B on 8 GPUs serves at 4k (about 400)
    text = max_batch_text(out)
    assert "1 cached position a request" in text and f"at context {ref['context']:,}: {ref['max_batch']:,}" in text


def test_a_long_context_states_its_own_batch_only():
    out = _budget(batch=1, context=8192)
    assert out["max_batch"] == math.floor(FREE / (KV_POSITION * 8193))
    assert "at context" not in max_batch_text(out) and "8,193 cached positions" in max_batch_text(out)


def test_prefill_counts_the_prompt_it_writes():
    """A prefill of 2048 tokens from context 0 leaves 2048 cached positions a request, not 1."""
    out = _budget(batch=1, context=0, new_tokens=2048)
    assert out["max_batch_positions"] == 2048
    assert out["max_batch"] == math.floor(FREE / (KV_POSITION * 2048))
    assert out["hbm_needed_per_chip_bytes"] == PARAMS * 2 / 8 + KV_POSITION * 2048
