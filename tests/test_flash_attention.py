"""Attention: tiled == dense == a naive per-query loop; decode keeps requests apart; bytes and FLOPs by hand."""
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scenarios import flash_attention as scenario
from simulator.errors import CapacityError, PodsimError, SpecError
from simulator.frontend.cli import main
from simulator.workloads import attention


def naive_attention(q, k, v, visible=None):
    """One query at a time: weights exp(s_j - max) / sum over visible sources; none visible -> zeros."""
    out = np.zeros((q.shape[0], v.shape[1]))
    for i in range(q.shape[0]):
        cols = [j for j in range(k.shape[0]) if visible is None or visible(i, j)]
        if not cols:
            continue
        scores = np.array([q[i] @ k[j] / math.sqrt(q.shape[1]) for j in cols])
        w = np.exp(scores - scores.max())
        out[i] = (w / w.sum()) @ v[cols]
    return out


def arrays(seed, t, s, h, hv):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((t, h)) * 3, rng.standard_normal((s, h)) * 3, rng.standard_normal((s, hv))


def test_causal_mask_by_hand():
    # 2 queries are the last 2 of 3 positions: query 0 sees sources 0, 1; query 1 sees all three
    assert attention.causal_mask(2, 3).tolist() == [[True, True, False], [True, True, True]]
    assert attention.causal_mask(3, 3).tolist() == [[True, False, False], [True, True, False], [True, True, True]]


def test_dense_matches_naive_loop_with_and_without_mask():
    q, k, v = arrays(1, 9, 13, 5, 3)
    np.testing.assert_allclose(attention.dense_attention(q, k, v), naive_attention(q, k, v), rtol=0, atol=1e-12)
    causal = attention.dense_attention(q, k, v, attention.causal_mask(9, 13))
    np.testing.assert_allclose(causal, naive_attention(q, k, v, lambda i, j: j <= i + 4), rtol=0, atol=1e-12)


def test_dense_is_stable_for_huge_scores():
    q, k, v = arrays(2, 4, 6, 3, 2)
    out = attention.dense_attention(q * 1e4, k, v)  # exp of raw scores would overflow
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, naive_attention(q * 1e4, k, v), rtol=0, atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(t=st.integers(1, 20), s=st.integers(1, 20), h=st.integers(1, 8), hv=st.integers(1, 6),
       block=st.integers(1, 25), causal=st.booleans(), seed=st.integers(0, 2**16))
def test_flash_equals_dense(t, s, h, hv, block, causal, seed):
    q, k, v = arrays(seed, t, s, h, hv)
    reference = attention.dense_attention(q, k, v, attention.causal_mask(t, s) if causal else None)
    tiled = attention.flash_attention(q, k, v, block, causal=causal)
    np.testing.assert_allclose(tiled, reference, rtol=0, atol=1e-10)


def test_combine_rescales_to_the_common_max():
    # two one-source blocks with scores 0 and log(3): weights 1 and 3 -> out = (1*v1 + 3*v2) / 4
    m, n, z = attention.combine(np.array([0.0]), np.array([[2.0]]), np.array([1.0]),
                                np.array([math.log(3)]), np.array([[10.0]]), np.array([1.0]))
    assert m[0] == pytest.approx(math.log(3))
    assert (n / z[:, None])[0, 0] == pytest.approx((1 * 2.0 + 3 * 10.0) / 4)


def test_flash_rejects_bad_block():
    q, k, v = arrays(0, 4, 4, 2, 2)
    with pytest.raises(PodsimError, match="block_size"):
        attention.flash_attention(q, k, v, 0)


# --- decode -------------------------------------------------------------------------------------------

def caches_of(rng, lengths, h=6, hv=4):
    return [(rng.standard_normal((n, h)), rng.standard_normal((n, hv))) for n in lengths]


def test_decode_each_request_sees_only_its_own_cache():
    rng = np.random.default_rng(7)
    lengths = (3, 11, 1, 7)
    caches = caches_of(rng, lengths)
    q = rng.standard_normal((4, 6))
    out = attention.decode_attention(q, caches)
    assert out.shape == (4, 4)
    for b, (k, v) in enumerate(caches):
        np.testing.assert_allclose(out[b], naive_attention(q[b:b + 1], k, v)[0], rtol=0, atol=1e-12)


def test_decode_kv_separation():
    rng = np.random.default_rng(8)
    caches = caches_of(rng, (5, 9, 2))
    q = rng.standard_normal((3, 6))
    before = attention.decode_attention(q, caches)
    changed = list(caches)
    changed[1] = caches_of(rng, (23,))[0]  # new content, and now the longest: every cache pads further
    after = attention.decode_attention(q, changed)
    np.testing.assert_allclose(after[0], before[0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(after[2], before[2], rtol=0, atol=1e-12)
    assert np.abs(after[1] - before[1]).max() > 1e-3  # request 1 itself did change


def test_decode_shape_errors():
    rng = np.random.default_rng(9)
    with pytest.raises(PodsimError, match="one row per cache"):
        attention.decode_attention(rng.standard_normal((2, 6)), caches_of(rng, (3,)))
    with pytest.raises(PodsimError, match="cache 0"):
        attention.decode_attention(rng.standard_normal((1, 5)), caches_of(rng, (3,)))


# --- closed forms ---------------------------------------------------------------------------------------

def test_closed_forms_by_hand():
    # 4 x 4096 x 4096 x 128 x 8 = 2^2 * 2^12 * 2^12 * 2^7 * 2^3
    assert attention.attention_flops(4096, 4096, 128, 8) == 2**36
    # per head: Q, K, V, O are 2^19 elements each; scores and probs 2^24 each, written and read back
    assert attention.dense_attention_hbm_bytes(4096, 4096, 128, 8, 2) == 2 * 8 * (4 * 2**19 + 4 * 2**24)
    assert attention.flash_attention_hbm_bytes(4096, 4096, 128, 8, 2) == 2 * 8 * 4 * 2**19
    # T != S: Q and O are T x h, K and V S x h
    assert attention.flash_attention_hbm_bytes(10, 30, 4, 2, 1) == 2 * (10 * 4 * 2 + 30 * 4 * 2)


# --- scenario ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def headline():
    return scenario.run()


def test_headline_bytes_flops_and_times(headline):
    dense, tiled = headline.extra["dense"], headline.extra["tiled"]
    assert dense["hbm_bytes"] == 2**25 + 2**30 == dense["analytic_hbm_bytes"]
    assert tiled["hbm_bytes"] == 2**25 == tiled["analytic_hbm_bytes"]
    assert dense["flops"] == tiled["flops"] == 2**36
    assert headline.extra["flops_equal"] is True
    assert headline.extra["hbm_saving"] == 33  # (2^25 + 2^30) / 2^25
    assert tiled["time_s"] < dense["time_s"]
    # dense cannot beat its own HBM traffic at 820 GB/s; tiled cannot beat its MXU work at 197 TFLOP/s
    assert dense["time_s"] >= (2**25 + 2**30) / 8.2e11
    assert tiled["time_s"] >= 2**36 / 1.97e14
    assert dense["bytes_by_tensor"]["scores"] == {"read": 8 * 2 * 4096**2, "written": 8 * 2 * 4096**2}
    assert "scores" not in tiled["bytes_by_tensor"] and "probs" not in tiled["bytes_by_tensor"]
    assert headline.extra["verified"] is True
    assert headline.headline.startswith("tiled wins")


@pytest.mark.parametrize("T,S,h,heads,block", [(256, 1000, 64, 2, 384), (100, 37, 16, 3, 8), (512, 512, 128, 1, 4096)])
def test_simulated_bytes_equal_closed_form(T, S, h, heads, block):  # noqa: N803
    r = scenario.run(T=T, S=S, head_dim=h, heads=heads, block=block)
    dense, tiled = r.extra["dense"], r.extra["tiled"]
    assert dense["hbm_bytes"] == 2 * heads * (2 * T * h + 2 * S * h + 4 * T * S)
    assert tiled["hbm_bytes"] == 2 * heads * (2 * T * h + 2 * S * h)
    assert dense["flops"] == tiled["flops"] == 4 * T * S * h * heads
    assert tiled["hbm_bytes"] < dense["hbm_bytes"]
    assert r.metrics["bytes"]["hbm_read"] + r.metrics["bytes"]["hbm_write"] == tiled["hbm_bytes"]


@pytest.mark.parametrize("kwargs,match,error", [
    ({"block": 0}, "block", PodsimError), ({"T": -1}, "T=-1", PodsimError), ({"heads": 1.5}, "heads", PodsimError),
    ({"dtype": "fp64"}, "fp64", SpecError), ({"variant": "fused"}, "fused", PodsimError),
    ({"T": 2**20}, "VMEM", CapacityError),
])
def test_bad_input(kwargs, match, error):
    with pytest.raises(error, match=match):
        scenario.run(**kwargs)


def test_cli_json(capsys):
    assert main(["run", "flash_attention", "--set", "T=512", "--set", "S=768", "--set", "block=200", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["verified"] is True and data["flops_equal"] is True
    assert data["tiled"]["hbm_bytes"] == 2 * 8 * (2 * 512 * 128 + 2 * 768 * 128)
    assert {"end_to_end_s", "busy_s", "bytes", "flops", "params"} <= set(data)
    assert main(["run", "flash_attention", "--set", "block=0"]) == 2
    assert "block" in capsys.readouterr().err
