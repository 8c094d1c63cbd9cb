"""Transformer models: `TransformerConfig`, public presets, exact parameter counts, HF config files.

Accounting follows REFERENCE.md ("Transformer accounting"): attention projections Q and O are
D x (N_Q H), K and V are D x (N_KV H); a gated MLP has three D x F matrices, a plain one two; the
embedding is D x V, counted once when tied to the output projection. Norms, biases and learned
position tables are counted where the model has them, so presets reproduce the published totals.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.errors import PodsimError
from simulator.hardware.documents import read_document, table
from simulator.units import check_int, check_number, show


class ModelError(PodsimError):
    """A model configuration that is inconsistent, unknown or cannot be read."""


@dataclass(frozen=True, kw_only=True)
class TransformerConfig:
    """Dimensions and options of a decoder-only Transformer (bytes per element for each tensor kind)."""

    name: str = "custom"
    d_model: int  #: D, residual width
    d_ff: int  #: F, MLP hidden width (per expert for MoE)
    n_layers: int  #: L
    n_heads: int  #: N_Q query heads
    # Given as None, these two are set in __post_init__: an int on every constructed config, which is the type
    # readers see (the ignore is for the None default only).
    n_kv_heads: int = None  # type: ignore[assignment]  #: N_KV (GQA); None: n_heads
    head_dim: int = None  # type: ignore[assignment]  #: H; None: d_model / n_heads
    vocab_size: int
    gated_mlp: bool = True  #: SwiGLU-style gate and up projections (3 matrices) or plain (2)
    tied_embeddings: bool = False  #: output projection shares the embedding matrix
    qkv_bias: bool = False  #: biases on Q, K, V only (Qwen2)
    linear_bias: bool = False  #: biases on every linear layer (GPT-2)
    norm: str = "rmsnorm"  #: rmsnorm (scale only) or layernorm (scale and bias)
    learned_positions: bool = False  #: a max_positions x D position table (GPT-2)
    max_positions: int = 0
    n_experts: int = 0  #: MoE experts per layer (0 = dense MLP)
    experts_per_token: int = 0  #: top-k
    n_shared_experts: int = 0  #: experts every token uses
    weight_elem_bytes: float = 2
    act_elem_bytes: float = 2
    kv_elem_bytes: float = 2

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ModelError(f"model name={show(self.name)} must be a non-empty string")
        for f in ("d_model", "d_ff", "n_layers", "n_heads", "vocab_size"):
            _check_int(self.name, f, getattr(self, f), 1)
        for f in _FLAGS:
            if not isinstance(getattr(self, f), bool):
                raise ModelError(f"model {self.name!r}: {f}={show(getattr(self, f))} must be true or false")
        if self.n_kv_heads is None:
            object.__setattr__(self, "n_kv_heads", self.n_heads)
        if self.head_dim is None:
            if self.d_model % self.n_heads:
                raise ModelError(f"model {self.name!r}: n_heads={self.n_heads} does not divide d_model="
                                 f"{self.d_model}; give head_dim explicitly or use a divisor of d_model")
            object.__setattr__(self, "head_dim", self.d_model // self.n_heads)
        _check_int(self.name, "n_kv_heads", self.n_kv_heads, 1)
        _check_int(self.name, "head_dim", self.head_dim, 1)
        if self.n_heads % self.n_kv_heads:
            raise ModelError(f"model {self.name!r}: n_kv_heads={self.n_kv_heads} does not divide n_heads="
                             f"{self.n_heads}; each KV head must serve a whole group of query heads")
        self._check_moe_and_options()

    def _check_moe_and_options(self) -> None:
        for f in ("max_positions", "n_experts", "experts_per_token", "n_shared_experts"):
            _check_int(self.name, f, getattr(self, f), 0)
        if self.n_experts and not 1 <= self.experts_per_token <= self.n_experts:
            raise ModelError(f"model {self.name!r}: experts_per_token={self.experts_per_token} must be between 1 "
                             f"and n_experts={self.n_experts}")
        if not self.n_experts and self.experts_per_token:
            raise ModelError(f"model {self.name!r}: experts_per_token={self.experts_per_token} needs n_experts > 0")
        if self.norm not in ("rmsnorm", "layernorm"):
            raise ModelError(f"model {self.name!r}: norm={show(self.norm)}; valid: rmsnorm, layernorm")
        if self.learned_positions and self.max_positions < 1:
            raise ModelError(f"model {self.name!r}: learned_positions needs max_positions >= 1")
        for f in ("weight_elem_bytes", "act_elem_bytes", "kv_elem_bytes"):  # from 1 bit to fp64
            check_number(getattr(self, f), name=f, minimum=0.125, maximum=8, unit="bytes", error=ModelError,
                         where=f"model {self.name!r}: ")

    def position_note(self, tokens: int, what: str) -> str | None:
        """A note when a sequence of ``tokens`` positions (``what``: the input that sets it, as the user wrote it)
        runs past ``max_positions`` where the model has them (a learned position table has no row beyond its end):
        the step is priced as if the table were longer, which the model itself cannot run. None within them."""
        if self.max_positions and tokens > self.max_positions:
            return (f"{what} reaches position {tokens:,}, but {self.name}'s positions end at {self.max_positions:,} "
                    f"(max_positions): priced as if its position table were longer; the model itself cannot run "
                    f"past {self.max_positions:,}")
        return None

    def replace(self, **changes: Any) -> TransformerConfig:
        """A copy with ``changes`` applied (validated again)."""
        return dataclasses.replace(self, **changes)

    # -- parameter counts -----------------------------------------------------------------------------------
    @property
    def q_width(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.n_kv_heads * self.head_dim

    def attention_params(self) -> int:
        """Q, K, V, O projections of one layer, with their biases."""
        d, q, kv = self.d_model, self.q_width, self.kv_width
        weights = d * q + 2 * d * kv + q * d
        bias = (q + 2 * kv) if (self.qkv_bias or self.linear_bias) else 0
        return weights + bias + (d if self.linear_bias else 0)

    def expert_params(self) -> int:
        """One MLP (or one expert): gate, up and down projections (two matrices if not gated)."""
        d, f = self.d_model, self.d_ff
        mats = (3 if self.gated_mlp else 2) * d * f
        bias = ((2 if self.gated_mlp else 1) * f + d) if self.linear_bias else 0
        return mats + bias

    def norm_params(self) -> int:
        return self.d_model * (2 if self.norm == "layernorm" else 1)

    def layer_params(self, active: bool = False) -> int:
        """One layer: attention, MLP or experts (all, or only those a token uses), router, two norms."""
        if self.n_experts:
            used = (self.experts_per_token if active else self.n_experts) + self.n_shared_experts
            mlp = used * self.expert_params() + self.d_model * self.n_experts
        else:
            mlp = self.expert_params()
        return self.attention_params() + mlp + 2 * self.norm_params()

    def embedding_params(self) -> int:
        """Token embedding, output projection (unless tied) and learned positions."""
        table = self.vocab_size * self.d_model
        return table * (1 if self.tied_embeddings else 2) + \
            (self.max_positions * self.d_model if self.learned_positions else 0)

    def params(self, active: bool = False) -> int:
        """Total parameters (or those one token uses, for MoE), final norm included."""
        return self.n_layers * self.layer_params(active) + self.embedding_params() + self.norm_params()

    def matmul_params_per_token(self) -> int:
        """Weights a token multiplies by: every layer's active linear layers and the output projection.

        The embedding lookup and norms are not matmuls; a tied embedding is still used as the output
        projection, so it counts here once.
        """
        if self.n_experts:
            mlp = (self.experts_per_token + self.n_shared_experts) * self.d_model * self.d_ff * \
                (3 if self.gated_mlp else 2) + self.d_model * self.n_experts
        else:
            mlp = self.d_model * self.d_ff * (3 if self.gated_mlp else 2)
        attn = 2 * self.d_model * self.q_width + 2 * self.d_model * self.kv_width
        return self.n_layers * (attn + mlp) + self.vocab_size * self.d_model


#: Largest value of each integer field: far past any published model, small enough that every count
#: and byte total stays an exact, finite number (and that a typo such as d_model = 1e30 is caught).
MAXIMA = {"d_model": 2**20, "d_ff": 2**22, "n_layers": 10_000, "n_heads": 2**16, "n_kv_heads": 2**16,
          "head_dim": 2**16, "vocab_size": 2**24, "max_positions": 2**24, "n_experts": 2**16,
          "experts_per_token": 2**16, "n_shared_experts": 2**16}
_FLAGS = ("gated_mlp", "tied_embeddings", "qkv_bias", "linear_bias", "learned_positions")


def _check_int(model: str, field: str, value: Any, minimum: int) -> None:
    check_int(value, name=field, minimum=minimum, maximum=MAXIMA[field], error=ModelError, where=f"model {model!r}: ")


def _llama(name: str, d: int, f: int, layers: int, heads: int, kv: int, vocab: int, **kw: Any) -> TransformerConfig:
    return TransformerConfig(name=name, d_model=d, d_ff=f, n_layers=layers, n_heads=heads, n_kv_heads=kv,
                             vocab_size=vocab, **kw)


def _gpt2(name: str, d: int, layers: int, heads: int) -> TransformerConfig:
    return TransformerConfig(name=name, d_model=d, d_ff=4 * d, n_layers=layers, n_heads=heads, vocab_size=50257,
                             gated_mlp=False, tied_embeddings=True, linear_bias=True, norm="layernorm",
                             learned_positions=True, max_positions=1024)


#: Public models; each count equals the published total (see tests/test_transformer.py).
PRESETS: dict[str, TransformerConfig] = {c.name: c for c in (
    _llama("llama-2-7b", 4096, 11008, 32, 32, 32, 32000),
    _llama("llama-2-13b", 5120, 13824, 40, 40, 40, 32000),
    _llama("llama-3-8b", 4096, 14336, 32, 32, 8, 128256),
    _llama("llama-3-70b", 8192, 28672, 80, 64, 8, 128256),
    _llama("mistral-7b", 4096, 14336, 32, 32, 8, 32000),
    _llama("mixtral-8x7b", 4096, 14336, 32, 32, 8, 32000, n_experts=8, experts_per_token=2),
    _llama("qwen2-7b", 3584, 18944, 28, 28, 4, 152064, qkv_bias=True),
    _gpt2("gpt2", 768, 12, 12),
    _gpt2("gpt2-xl", 1600, 48, 25),
)}


def get_model(name: str) -> TransformerConfig:
    """The preset called ``name``; `ModelError` listing the presets otherwise."""
    if not isinstance(name, str) or name not in PRESETS:
        raise ModelError(f"unknown model {name!r}; presets: {', '.join(PRESETS)} (or --config F.toml / --hf-config)")
    return PRESETS[name]


_FIELDS = {f.name for f in dataclasses.fields(TransformerConfig)}


def model_from_dict(data: dict[str, Any], origin: str = "config") -> TransformerConfig:
    """A config from a dict of `TransformerConfig` fields; ``base`` names a preset to start from."""
    if not isinstance(data, dict):
        raise ModelError(f"{origin}: expected a table of fields, got {type(data).__name__} {show(data)}")
    unknown = sorted(set(data) - _FIELDS - {"base"})
    if unknown:
        raise ModelError(f"{origin}: unknown field(s) {', '.join(unknown)}; valid fields: {', '.join(sorted(_FIELDS))}")
    values = dataclasses.asdict(get_model(data["base"])) if "base" in data else {"name": origin}
    values.update({k: v for k, v in data.items() if k != "base"})
    missing = [f for f in ("d_model", "d_ff", "n_layers", "n_heads", "vocab_size") if f not in values]
    if missing:
        raise ModelError(f"{origin}: missing field(s) {', '.join(missing)}")
    try:
        return TransformerConfig(**values)
    except TypeError as err:
        raise ModelError(f"{origin}: {err}") from None


def load_config_file(path: str | Path) -> TransformerConfig:
    """Read a TOML file of `TransformerConfig` fields (top level or a [model] table)."""
    data = read_document(path, "TOML", "config file", ModelError)
    data = table(data, "model", Path(path).name, ModelError)
    return model_from_dict(data, origin=Path(path).name)


HF_TYPES = ("llama", "mistral", "mixtral", "qwen2", "gpt2")


def load_hf_config(path: str | Path) -> TransformerConfig:
    """Read a Hugging Face ``config.json`` (llama, mistral, mixtral, qwen2, gpt2) into a config.

    Every field is type- and range-checked before any arithmetic uses it (``num_attention_heads: 0``
    is an error naming the field, not a division by zero).
    """
    data = read_document(path, "JSON", "config file", ModelError)
    kind = data.get("model_type")
    if kind not in HF_TYPES:
        raise ModelError(f"{Path(path).name}: cannot map model_type {show(kind)}; supported: {', '.join(HF_TYPES)}")
    hf = _HFFields(data, f"{Path(path).name}: {kind} config")
    values = _hf_gpt2(hf) if kind == "gpt2" else _hf_llama(hf, kind)
    given = data.get("_name_or_path")
    values["name"] = given if isinstance(given, str) and given.strip() else Path(path).parent.name or kind
    return model_from_dict(values, origin=Path(path).name)


class _HFFields:
    """Checked access to a Hugging Face config's fields (``null`` counts as absent, as in transformers)."""

    _REQUIRED = object()

    def __init__(self, data: dict[str, Any], where: str) -> None:
        self.data, self.where = data, where

    def int(self, key: str, default: Any = _REQUIRED) -> Any:
        """Field ``key`` as an integer from 1 to 2**24, or ``default`` when absent."""
        value = self.data.get(key)
        if value is None:
            if default is self._REQUIRED:
                raise ModelError(f"{self.where} lacks {key!r}")
            return default
        return check_int(value, name=key, maximum=2**24, error=ModelError, where=f"{self.where}: ")

    def flag(self, key: str, default: bool) -> bool:
        """Field ``key`` as true or false, or ``default`` when absent."""
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise ModelError(f"{self.where}: {key}={show(value)} must be true or false")
        return value


def _hf_llama(hf: _HFFields, kind: str) -> dict[str, Any]:
    d, heads = hf.int("hidden_size"), hf.int("num_attention_heads")
    values = {
        "d_model": d, "d_ff": hf.int("intermediate_size"), "n_layers": hf.int("num_hidden_layers"),
        "n_heads": heads, "n_kv_heads": hf.int("num_key_value_heads", heads),
        "head_dim": hf.int("head_dim", None) or _divide(d, heads, hf), "vocab_size": hf.int("vocab_size"),
        "tied_embeddings": hf.flag("tie_word_embeddings", False),
        "qkv_bias": kind == "qwen2" or hf.flag("attention_bias", False),
    }
    if kind == "mixtral":
        values.update(n_experts=hf.int("num_local_experts"), experts_per_token=hf.int("num_experts_per_tok"))
    return values


def _divide(d: int, heads: int, hf: _HFFields) -> int:
    if d % heads:
        raise ModelError(f"{hf.where}: num_attention_heads={heads} does not divide hidden_size={d}; give head_dim")
    return d // heads


def _hf_gpt2(hf: _HFFields) -> dict[str, Any]:
    d = hf.int("n_embd")
    return {"d_model": d, "d_ff": hf.int("n_inner", 4 * d), "n_layers": hf.int("n_layer"),
            "n_heads": hf.int("n_head"), "vocab_size": hf.int("vocab_size"), "gated_mlp": False,
            "tied_embeddings": hf.flag("tie_word_embeddings", True), "linear_bias": True,
            "norm": "layernorm", "learned_positions": True, "max_positions": hf.int("n_positions")}
