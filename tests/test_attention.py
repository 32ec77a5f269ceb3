"""Tests of tpp.tensor_parallel.attention: sharded MHA/GQA == unsharded reference, fwd and bwd."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tpp.collectives import ProcessGroup
from tpp.tensor_parallel.attention import (
    Attention,
    ShardedAttention,
    attention_split,
    init_attention_weights,
)


def naive_attention(x, w, n_heads, n_kv_heads, causal=True):
    """Loop-by-loop reference (one sequence, (s, d)), independent of the einsum code."""
    s, d = x.shape
    dh = w["wq"].shape[1] // n_heads
    g = n_heads // n_kv_heads
    out = np.zeros((s, n_heads * dh))
    for hd in range(n_heads):
        kv = hd // g
        q = x @ w["wq"][:, hd * dh:(hd + 1) * dh]
        k = x @ w["wk"][:, kv * dh:(kv + 1) * dh]
        v = x @ w["wv"][:, kv * dh:(kv + 1) * dh]
        for i in range(s):
            js = range(i + 1) if causal else range(s)
            sc = np.array([q[i] @ k[j] / np.sqrt(dh) for j in js])
            pr = np.exp(sc - sc.max())
            pr /= pr.sum()
            out[i, hd * dh:(hd + 1) * dh] = sum(p * v[j] for p, j in zip(pr, js, strict=True))
    return out @ w["wo"]


@st.composite
def configs(draw):
    n_kv = draw(st.sampled_from([1, 2, 4]))
    n_heads = n_kv * draw(st.sampled_from([1, 2, 3]))
    divisors = [t for t in range(1, n_heads + 1) if n_heads % t == 0
                and (n_kv % t == 0 if t <= n_kv else t % n_kv == 0)]
    tp = draw(st.sampled_from(divisors))
    dh = draw(st.integers(1, 4))
    s = draw(st.integers(1, 6))
    b = draw(st.integers(1, 2))
    p = draw(st.sampled_from([None, 0.0, 0.4]))
    causal = draw(st.booleans())
    seed = draw(st.integers(0, 2**16))
    return n_heads, n_kv, tp, dh, s, b, p, causal, seed


@settings(max_examples=60, deadline=None)
@given(configs(), st.booleans())
def test_sharded_equals_reference(cfg, recompute_core):
    n_heads, n_kv, tp, dh, s, b, p, causal, seed = cfg
    d = 3 + dh
    w = init_attention_weights(d, n_heads, n_kv, d_head=dh, seed=seed)
    rng = np.random.default_rng(seed + 1)
    x, dy = rng.standard_normal((s, b, d)), rng.standard_normal((s, b, d))
    ref = Attention(**w, n_heads=n_heads, n_kv_heads=n_kv, causal=causal, dropout_p=p, seed=seed)
    sh = ShardedAttention(**w, tp=tp, n_heads=n_heads, n_kv_heads=n_kv, causal=causal,
                          replicate_kv=True, dropout_p=p, seed=seed, recompute_core=recompute_core)
    np.testing.assert_allclose(sh.forward(x), ref.forward(x), rtol=1e-12, atol=1e-12)
    for r in range(tp):  # every rank holds the same all-reduced output
        np.testing.assert_allclose(sh.outputs[r], sh.outputs[0], rtol=0, atol=1e-13)
    np.testing.assert_allclose(sh.backward(dy), ref.backward(dy), rtol=1e-11, atol=1e-12)
    for k in ("wq", "wk", "wv", "wo"):
        np.testing.assert_allclose(sh.grads[k], ref.grads[k], rtol=1e-11, atol=1e-12)
    # one all-reduce each way on the TP group, of the (s, b, d) float64 activation
    assert [(r.op, r.tag) for r in sh.group.ledger] == [("all_reduce", "g.forward"),
                                                        ("all_reduce", "f.backward")]
    assert all(r.payload_bytes == s * b * d * 8 for r in sh.group.ledger)


@pytest.mark.parametrize("n_heads,n_kv", [(4, 4), (6, 2), (4, 1)])
@pytest.mark.parametrize("causal", [True, False])
def test_reference_equals_naive_loops(n_heads, n_kv, causal):
    d = 8
    w = init_attention_weights(d, n_heads, n_kv, d_head=3, seed=4)
    x = np.random.default_rng(5).standard_normal((5, d))
    ref = Attention(**w, n_heads=n_heads, n_kv_heads=n_kv, causal=causal)
    np.testing.assert_allclose(ref.forward(x), naive_attention(x, w, n_heads, n_kv, causal),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("p", [None, 0.3])
def test_reference_backward_matches_finite_differences(p):
    n_heads, n_kv, d = 4, 2, 6
    w = init_attention_weights(d, n_heads, n_kv, d_head=2, seed=7)
    rng = np.random.default_rng(8)
    x, dy = rng.standard_normal((4, 2, d)), rng.standard_normal((4, 2, d))

    def loss(x_, w_):
        return float((Attention(**w_, n_heads=n_heads, n_kv_heads=n_kv, dropout_p=p, seed=1)
                      .forward(x_) * dy).sum())

    ref = Attention(**w, n_heads=n_heads, n_kv_heads=n_kv, dropout_p=p, seed=1)
    ref.forward(x)
    dx = ref.backward(dy)
    eps = 1e-6
    for idx in [(0, 0, 0), (3, 1, 5), (2, 0, 3)]:
        e = np.zeros_like(x)
        e[idx] = eps
        assert (loss(x + e, w) - loss(x - e, w)) / (2 * eps) == pytest.approx(dx[idx], abs=1e-7)
    for key in ("wq", "wk", "wv", "wo"):
        wp = {k: v.copy() for k, v in w.items()}
        wm = {k: v.copy() for k, v in w.items()}
        wp[key][1, 1] += eps
        wm[key][1, 1] -= eps
        fd = (loss(x, wp) - loss(x, wm)) / (2 * eps)
        assert fd == pytest.approx(ref.grads[key][1, 1], abs=1e-7)


def test_two_dimensional_input():
    w = init_attention_weights(8, 4, 2, seed=0)
    x = np.random.default_rng(0).standard_normal((5, 8))
    sh = ShardedAttention(**w, tp=2, n_heads=4, n_kv_heads=2)
    y = sh.forward(x)
    assert y.shape == (5, 8)
    assert sh.backward(np.ones((5, 8))).shape == (5, 8)


def test_kv_replication_cost_by_hand():
    # 8 query heads, 2 KV heads of width 4, d = 16, TP 8: each KV head lives on 4 ranks
    d, dh = 16, 4
    w = init_attention_weights(d, 8, 2, d_head=dh, seed=1)
    sh = ShardedAttention(**w, tp=8, n_heads=8, n_kv_heads=2, replicate_kv=True)
    assert sh.split.replicas == 4 and sh.split.kv_heads_per_rank == 1
    assert [sh.split.kv_heads(r) for r in range(8)] == [[0]] * 4 + [[1]] * 4
    rep = sh.kv_replication("bf16", tokens=10)
    assert rep["kv_weight_bytes_per_rank"] == 2 * d * dh * 2          # W_K and W_V, one head
    assert rep["kv_weight_bytes_extra"] == (8 - 2) * 2 * d * dh * 2   # 6 extra head copies
    assert rep["kv_cache_bytes_per_token_per_rank"] == 2 * dh * 2
    assert rep["kv_cache_bytes_per_token_extra"] == (8 - 2) * 2 * dh * 2
    assert rep["kv_cache_bytes_per_rank"] == 10 * 2 * dh * 2
    # training: the 4 replicas of each KV head all-reduce their W_K and W_V gradients
    x = np.random.default_rng(2).standard_normal((3, d))
    sh.forward(x)
    sh.backward(np.ones((3, d)))
    for grp in sh.kv_groups:
        assert grp.size == 4
        assert [r.tag for r in grp.ledger] == ["kv_replica.wk", "kv_replica.wv"]
        assert all(r.payload_bytes == d * dh * 8 for r in grp.ledger)
    # no replication below the KV-head count
    sh2 = ShardedAttention(**w, tp=2, n_heads=8, n_kv_heads=2)
    assert sh2.kv_replication()["kv_weight_bytes_extra"] == 0 and sh2.kv_groups == []


def test_saved_tensors_shrink_with_selective_recompute():
    w = init_attention_weights(8, 4, 4, seed=0)
    x = np.random.default_rng(0).standard_normal((6, 8))
    full = ShardedAttention(**w, tp=2, n_heads=4, dropout_p=0.1)
    sel = ShardedAttention(**w, tp=2, n_heads=4, dropout_p=0.1, recompute_core=True)
    full.forward(x)
    sel.forward(x)
    fb, sb = full.saved_bytes(), sel.saved_bytes()
    # per rank: 2 heads x 6 x 6 scores: softmax (2 B) + mask (1 B) + dropout output (2 B)
    assert sum(fb.values()) - sum(sb.values()) == 5 * 2 * 6 * 6
    assert fb["q"] == 2 * 6 * 4  # 6 tokens x 2 heads x d_head 2, 2 bytes each


def test_gqa_divisibility_errors():
    with pytest.raises(ValueError, match=r"^TP=16 must divide n_kv_heads=8: lower TP to 8 or "
                                         r"pass replicate_kv=True$"):
        attention_split(64, 8, 16)
    with pytest.raises(ValueError, match="TP=3 must divide n_heads=8: lower TP to 2"):
        attention_split(8, 8, 3)
    with pytest.raises(ValueError, match="not a multiple of it.*use TP=8 or a multiple of 8"):
        attention_split(96, 8, 12, replicate_kv=True)
    with pytest.raises(ValueError, match="TP=4 must divide n_kv_heads=6"):
        attention_split(12, 6, 4)
    with pytest.raises(ValueError, match="n_heads=8 must be a multiple of n_kv_heads=3"):
        attention_split(8, 3, 1)
    assert attention_split(64, 8, 16, replicate_kv=True).replicas == 2
    w = init_attention_weights(8, 4, 2, seed=0)
    with pytest.raises(ValueError, match="lower TP to 2 or pass replicate_kv=True"):
        ShardedAttention(**w, tp=4, n_heads=4, n_kv_heads=2)


def test_weight_shape_errors():
    w = init_attention_weights(8, 4, 2, seed=0)
    with pytest.raises(ValueError, match=r"wk has shape \(8, 2\).*= \(8, 4\)"):
        ShardedAttention(w["wq"], w["wk"][:, :2], w["wv"], w["wo"], tp=2, n_heads=4,
                         n_kv_heads=2)
    with pytest.raises(ValueError, match="pass a ProcessGroup of size 2"):
        ShardedAttention(**w, tp=2, n_heads=4, n_kv_heads=2, group=ProcessGroup(4))
    sh = ShardedAttention(**w, tp=2, n_heads=4, n_kv_heads=2)
    with pytest.raises(ValueError, match="call forward before backward"):
        sh.backward(np.ones((3, 8)))
    with pytest.raises(ValueError, match=r"pass \(s, 8\) or \(s, b, 8\)"):
        sh.forward(np.ones((3, 7)))
