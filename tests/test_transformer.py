"""Transformer configs: exact published parameter counts, config files, and clear errors."""
import json

import pytest

from simulator.workloads.transformer import (
    PRESETS,
    ModelError,
    TransformerConfig,
    get_model,
    load_config_file,
    load_hf_config,
)

#: Published totals (model cards / HF safetensors metadata); MoE: (total, active).
PUBLISHED = {
    "llama-2-7b": 6_738_415_616, "llama-2-13b": 13_015_864_320, "llama-3-8b": 8_030_261_248,
    "llama-3-70b": 70_553_706_496, "mistral-7b": 7_241_732_096, "mixtral-8x7b": 46_702_792_704,
    "qwen2-7b": 7_615_616_512, "gpt2": 124_439_808, "gpt2-xl": 1_557_611_200,
}


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_preset_parameter_counts_are_exact(name):
    assert get_model(name).params() == PUBLISHED[name]


def test_mixtral_active_parameters_by_hand():
    d, f, layers = 4096, 14336, 32
    attention = 2 * d * d + 2 * d * 1024
    per_layer_active = attention + 2 * 3 * d * f + d * 8 + 2 * d  # two experts, router, two norms
    assert get_model("mixtral-8x7b").params(active=True) == layers * per_layer_active + 2 * 32000 * d + d
    assert get_model("mixtral-8x7b").params(active=True) == 12_879_925_248


def test_gpt2_counts_by_hand():
    d, v, pos, layers = 768, 50257, 1024, 12
    per_layer = 2 * 2 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * 4 * d + 4 * d) + (4 * d * d + d)
    assert get_model("gpt2").params() == v * d + pos * d + layers * per_layer + 2 * d


def test_every_preset_is_listed():
    assert set(PRESETS) == set(PUBLISHED)


@pytest.mark.parametrize("kwargs,match", [
    (dict(d_model=4096, n_heads=30), "does not divide d_model"),
    (dict(n_kv_heads=5), "n_kv_heads=5 does not divide n_heads=32"),
    (dict(n_experts=8, experts_per_token=9), "experts_per_token=9"),
    (dict(experts_per_token=2), "needs n_experts"),
    (dict(norm="batchnorm"), "norm='batchnorm'"),
    (dict(n_layers=0), "n_layers=0"),
    (dict(weight_elem_bytes=-2), "weight_elem_bytes=-2"),
    (dict(learned_positions=True), "max_positions"),
])
def test_inconsistent_configs_are_rejected(kwargs, match):
    base = dict(name="x", d_model=4096, d_ff=11008, n_layers=32, n_heads=32, vocab_size=32000)
    with pytest.raises(ModelError, match=match):
        TransformerConfig(**{**base, **kwargs})


def test_unknown_preset_lists_presets():
    with pytest.raises(ModelError, match="unknown model 'llama-9'.*llama-2-7b"):
        get_model("llama-9")


def test_toml_config_with_and_without_base(tmp_path):
    path = tmp_path / "m.toml"
    path.write_text('base = "llama-2-7b"\nn_layers = 16\n')
    assert load_config_file(path).params() == (PUBLISHED["llama-2-7b"] - 2 * 32000 * 4096 - 4096) // 32 * 16 \
        + 2 * 32000 * 4096 + 4096
    path.write_text("[model]\nd_model = 64\nd_ff = 128\nn_layers = 2\nn_heads = 4\nvocab_size = 100\n")
    small = load_config_file(path)
    assert small.params() == 100 * 64 * 2 + 2 * (4 * 64 * 64 + 3 * 64 * 128 + 2 * 64) + 64


@pytest.mark.parametrize("text,match", [("d_model = 64\n", "missing field"), ("foo = 1\n", "unknown field"),
                                        ("d_model = [\n", "not valid TOML"),
                                        ('base = "llama-2-7b"\nn_heads = "many"\n', "n_heads='many'")])
def test_bad_toml_configs(tmp_path, text, match):
    path = tmp_path / "m.toml"
    path.write_text(text)
    with pytest.raises(ModelError, match=match):
        load_config_file(path)


HF_LLAMA3_8B = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
                "tie_word_embeddings": False}
HF_GPT2 = {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "n_positions": 1024,
           "vocab_size": 50257}
HF_MIXTRAL = {"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
              "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000, "num_local_experts": 8,
              "num_experts_per_tok": 2}
HF_QWEN2 = {"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
            "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064, "tie_word_embeddings": False}


@pytest.mark.parametrize("data,expected", [(HF_LLAMA3_8B, "llama-3-8b"), (HF_GPT2, "gpt2"),
                                           (HF_MIXTRAL, "mixtral-8x7b"), (HF_QWEN2, "qwen2-7b")])
def test_hf_configs_map_to_the_presets(tmp_path, data, expected):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    assert load_hf_config(path).params() == PUBLISHED[expected]


@pytest.mark.parametrize("data,match", [({"model_type": "bert"}, "cannot map model_type 'bert'"),
                                        ({"model_type": "llama", "hidden_size": 8},
                                         "llama config lacks 'num_attention_heads'"),
                                        ([1, 2], "must hold a table of fields"),
                                        ({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 0},
                                         "num_attention_heads=0 must be an integer from 1"),
                                        ({"model_type": "llama", "hidden_size": 100, "num_attention_heads": 3,
                                          "intermediate_size": 8, "num_hidden_layers": 1, "vocab_size": 8},
                                         "does not divide hidden_size=100"),
                                        ({"model_type": "gpt2", "n_embd": "768"}, "n_embd='768' must be an integer"),
                                        ({"model_type": "gpt2", "n_embd": 8, "n_layer": 1, "n_head": 1,
                                          "vocab_size": 8, "n_positions": 8, "tie_word_embeddings": "yes"},
                                         "tie_word_embeddings='yes' must be true or false"),
                                        ({"model_type": "llama", "x": [[[[[[[[[[1]]]]]]]]]]}, "levels deep")])
def test_hf_configs_we_cannot_map(tmp_path, data, match):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ModelError, match=match):
        load_hf_config(path)


def test_hf_config_missing_or_not_json(tmp_path):
    with pytest.raises(ModelError, match="does not exist"):
        load_hf_config(tmp_path / "nope.json")
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(ModelError, match="not valid JSON"):
        load_hf_config(bad)
