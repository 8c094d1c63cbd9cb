"""Attention on real arrays (numpy reference, FlashAttention tiling, batched decode) and its closed forms.

Pure functions: no simulation here. `dense_attention` is the oracle; `flash_attention` walks the
sources block by block keeping, per query, a running max ``m``, numerator vector ``n`` and
denominator ``z`` (REFERENCE.md "Transformer accounting": rescale to a common max and combine);
`decode_attention` is the batched decode kernel for requests whose KV caches differ in length.

Shapes: ``q [T, h]``, ``k [S, h]``, ``v [S, h_v]`` (leading batch / head axes are allowed where noted).
Masks are boolean, ``True`` = the query may attend to that source. A query that may attend to no
source at all gets an output of zeros (the empty sum), never NaN.

Causal convention: the T queries are the *last* T positions of the S sources (aligned bottom-right, as
in decode and in FlashAttention-2), so query i sees sources ``j <= i + S - T``.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from simulator.errors import PodsimError
from simulator.units import positive_int


def causal_mask(t: int, s: int) -> np.ndarray:
    """``[t, s]`` boolean mask: query i sees source j when ``j <= i + s - t`` (queries are the last t)."""
    return np.arange(s)[None, :] <= np.arange(t)[:, None] + (s - t)


def _check_qkv(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> None:
    if q.ndim < 2 or k.ndim < 2 or v.ndim < 2:
        raise PodsimError(f"q, k, v must be at least 2-D ([..., T, h]); got shapes {q.shape}, {k.shape}, {v.shape}")
    if q.shape[-1] != k.shape[-1]:
        raise PodsimError(f"q head width {q.shape[-1]} != k head width {k.shape[-1]}; they must match")
    if k.shape[-2] != v.shape[-2]:
        raise PodsimError(f"k has {k.shape[-2]} sources but v has {v.shape[-2]}; they must match")


def _scores(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """``q k^T / sqrt(h)``: ``[..., T, S]``."""
    return (q @ np.swapaxes(k, -1, -2)) / np.sqrt(q.shape[-1])


def dense_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """``softmax(q k^T / sqrt(h)) v`` with the whole ``[T, S]`` score matrix at once (the reference).

    Numerically stable: each row's max is subtracted before ``exp``. ``mask`` (boolean, broadcastable
    to ``[..., T, S]``) hides sources; fully hidden rows give zeros. Leading axes broadcast.
    """
    q, k, v = np.asarray(q, dtype=float), np.asarray(k, dtype=float), np.asarray(v, dtype=float)
    _check_qkv(q, k, v)
    scores = _scores(q, k)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    row_max = scores.max(axis=-1, keepdims=True, initial=-np.inf)
    safe_max = np.where(np.isfinite(row_max), row_max, 0.0)  # an all-hidden row: exp(-inf) = 0 everywhere
    p = np.exp(scores - safe_max)
    z = p.sum(axis=-1, keepdims=True)
    return np.divide(p @ v, z, out=np.zeros(p.shape[:-1] + v.shape[-1:]), where=z > 0)


def block_partials(q: np.ndarray, k: np.ndarray, v: np.ndarray,
                   mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One source block's ``(m, n, z)``: row max ``[T]``, numerator ``exp(s - m) v`` ``[T, h_v]``, denominator ``[T]``.

    A row with every source hidden has ``m = -inf``, ``n = 0``, ``z = 0`` (it contributes nothing).
    """
    scores = _scores(q, k)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    m = scores.max(axis=-1, initial=-np.inf)
    p = np.exp(scores - np.where(np.isfinite(m), m, 0.0)[:, None])
    return m, p @ v, p.sum(axis=-1)


def _rescale(m_old: np.ndarray, m_new: np.ndarray) -> np.ndarray:
    """``exp(m_old - m_new)``, with 0 where ``m_old`` is -inf (nothing seen yet: nothing to keep)."""
    finite = np.isfinite(m_old)
    return np.where(finite, np.exp(np.where(finite, m_old, 0.0) - np.where(finite, m_new, 0.0)), 0.0)


def combine(m1: np.ndarray, n1: np.ndarray, z1: np.ndarray, m2: np.ndarray, n2: np.ndarray,
            z2: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merge two partial results at the common max ``m = max(m1, m2)``.

    ``n = n1 exp(m1 - m) + n2 exp(m2 - m)``, ``z = z1 exp(m1 - m) + z2 exp(m2 - m)``; the output of
    everything merged so far is ``n / z``.
    """
    m = np.maximum(m1, m2)
    a1, a2 = _rescale(m1, m), _rescale(m2, m)
    return m, n1 * a1[:, None] + n2 * a2[:, None], z1 * a1 + z2 * a2


def flash_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, block_size: int,
                    causal: bool = False) -> np.ndarray:
    """Attention tiled over source blocks of ``block_size`` (the last block may be shorter).

    Never forms the ``[T, S]`` score matrix: per block it computes `block_partials` and folds them
    into the running ``(m, n, z)`` with `combine`; the result is ``n / z``. ``q [T, h]``, ``k [S, h]``,
    ``v [S, h_v]``; ``causal`` applies `causal_mask`.
    """
    positive_int(block_size, name="block_size")
    q, k, v = np.asarray(q, dtype=float), np.asarray(k, dtype=float), np.asarray(v, dtype=float)
    _check_qkv(q, k, v)
    if q.ndim != 2:
        raise PodsimError(f"flash_attention takes 2-D q [T, h]; got shape {q.shape} (loop over heads)")
    t, s = q.shape[0], k.shape[0]
    m, n, z = np.full(t, -np.inf), np.zeros((t, v.shape[-1])), np.zeros(t)
    visible = causal_mask(t, s) if causal else None
    for start in range(0, s, block_size):
        stop = min(start + block_size, s)
        mask = visible[:, start:stop] if visible is not None else None
        m, n, z = combine(m, n, z, *block_partials(q, k[start:stop], v[start:stop], mask))
    return np.divide(n, z[:, None], out=np.zeros_like(n), where=z[:, None] > 0)


def decode_attention(q: np.ndarray, caches: Sequence[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """One decode step for B requests, each with its own KV cache of its own length.

    As a batched kernel does it: every cache is padded to the longest length ``S_max`` in one stacked
    ``[B, S_max, h]`` array, the padding is masked out, and one batched softmax runs. ``q [B, h]``
    (one new token per request); ``caches[b] = (k [S_b, h], v [S_b, h_v])``. Returns ``[B, h_v]``:
    row b is request b's output, which depends on its own cache only.
    """
    q = np.asarray(q, dtype=float)
    if q.ndim != 2 or q.shape[0] != len(caches):
        raise PodsimError(f"q must be [B, h] with one row per cache; got shape {q.shape} for {len(caches)} caches")
    keys = [np.asarray(k, dtype=float) for k, _ in caches]
    values = [np.asarray(v, dtype=float) for _, v in caches]
    for b, (k, v) in enumerate(zip(keys, values, strict=True)):
        if k.ndim != 2 or v.ndim != 2 or k.shape[0] != v.shape[0] or k.shape[1] != q.shape[1]:
            raise PodsimError(f"cache {b}: k {k.shape} and v {v.shape} must be [S_b, {q.shape[1]}] and [S_b, h_v]")
    lengths = np.array([k.shape[0] for k in keys])
    s_max, h_v = int(lengths.max(initial=0)), values[0].shape[1] if values else 0
    k_pad = np.zeros((len(keys), s_max, q.shape[1]))  # [B, S_max, h]
    v_pad = np.zeros((len(keys), s_max, h_v))  # [B, S_max, h_v]
    for b, (k, v) in enumerate(zip(keys, values, strict=True)):
        k_pad[b, : k.shape[0]], v_pad[b, : v.shape[0]] = k, v
    valid = np.arange(s_max)[None, :] < lengths[:, None]  # [B, S_max]: False on the padding
    out = dense_attention(q[:, None, :], k_pad, v_pad, valid[:, None, :])  # [B, 1, h_v]
    return out[:, 0, :]


# -- closed forms (per layer; ``elem_bytes`` per element of every tensor, bf16 = 2) ---------------------------------

def attention_flops(t: int, s: int, h: int, heads: int) -> float:
    """MXU FLOPs of attention: ``Q K^T`` (2tsh) plus ``P V`` (2tsh) per head = ``4 t s h heads``.

    The softmax's element-wise work is not counted here (it runs on the vector unit).
    """
    return 4.0 * t * s * h * heads


def dense_attention_hbm_bytes(t: int, s: int, h: int, heads: int, elem_bytes: float = 2) -> float:
    """HBM bytes of unfused attention, per head: read Q [t,h], K [s,h], V [s,h]; write the scores
    [t,s] and read them back for the softmax; write the probabilities [t,s] and read them back for
    ``P V``; write O [t,h]. Total ``elem_bytes * heads * (2th + 2sh + 4ts)``; every tensor in
    ``elem_bytes`` per element; weights and the projections that make Q, K, V are not counted.
    """
    return elem_bytes * heads * (2.0 * t * h + 2.0 * s * h + 4.0 * t * s)


def flash_attention_hbm_bytes(t: int, s: int, h: int, heads: int, elem_bytes: float = 2) -> float:
    """HBM bytes of tiled attention, per head: read Q, K, V once and write O once --
    ``elem_bytes * heads * (2th + 2sh)``. Assumes one head's Q block, output accumulator and a K, V
    block fit in VMEM together, so Q stays resident while K and V stream past; no ``[t, s]`` tensor
    ever reaches HBM.
    """
    return elem_bytes * heads * (2.0 * t * h + 2.0 * s * h)
