"""Expert parallelism with a token count that ``ep`` does not divide (issue 21): every rank
holds its block of ``np.array_split`` (the first ``T mod ep`` ranks one token more), the layer
still equals the dense computation, and bytes and tokens are reported per rank."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tpp import expert_parallel as ex
from tpp.tensor_parallel.activations import gelu


def _layer(rng, t, d, e, ff):
    return (rng.standard_normal((t, d)), rng.standard_normal((d, e)),
            rng.standard_normal((e, d, ff)), rng.standard_normal((e, ff, d)))


def _blocks(t, ep):
    """Independent split: numpy's array_split of the token indices."""
    return [list(b) for b in np.array_split(np.arange(t), ep)]


def _dense(x, rw, w1, w2, k, keep=None):
    y = np.zeros_like(x)
    for t in range(x.shape[0]):
        logits = x[t] @ rw
        chosen = sorted(range(len(logits)), key=lambda e: (-logits[e], e))[:k]
        g = np.exp(logits[chosen] - logits[chosen].max())
        g /= g.sum()
        for j, e in enumerate(chosen):
            if keep is None or keep[t, j]:
                y[t] += g[j] * (gelu(x[t] @ w1[e]) @ w2[e])
    return y


def test_token_bounds_match_array_split():
    for t in range(0, 30):
        for ep in range(1, 7):
            b = ex.token_bounds(t, ep)
            sizes = [b[r + 1] - b[r] for r in range(ep)]
            assert sizes == [len(blk) for blk in _blocks(t, ep)]


def test_seven_tokens_on_three_ranks_reported_per_rank():
    rng = np.random.default_rng(21)
    x, rw, w1, w2 = _layer(rng, 7, 4, 6, 5)
    res = ex.moe_forward(x, rw, w1, w2, 3, top_k=2)
    assert res.local_tokens == (3, 2, 2)
    np.testing.assert_allclose(res.output, _dense(x, rw, w1, w2, 2), rtol=1e-12, atol=1e-12)
    # bytes each rank sends in the dispatch, counted from the routing independently
    owner = res.routing.experts // 2                      # 2 experts per rank
    want = []
    for r, blk in enumerate(_blocks(7, 3)):
        rows_out = int(np.sum(owner[blk] != r))
        want.append(rows_out * 4 * 8)                     # d = 4 float64 values per row
    dispatch = [rec for rec in res.ledger if rec.tag == "moe.dispatch"][0]
    assert list(dispatch.bytes_sent_per_rank) == want
    assert sum(res.tokens_per_rank) == 7 * 2


@settings(max_examples=30, deadline=None)
@given(ep=st.integers(2, 4), el=st.integers(1, 2), t=st.integers(1, 13), k=st.integers(1, 2),
       cf=st.sampled_from([None, 0.5, 1.0, 2.0]), seed=st.integers(0, 10**6))
def test_any_token_count_equals_dense(ep, el, t, k, cf, seed):
    e = ep * el
    k = min(k, e)
    rng = np.random.default_rng(seed)
    x, rw, w1, w2 = _layer(rng, t, 3, e, 2)
    res = ex.moe_forward(x, rw, w1, w2, ep, top_k=k, capacity_factor=cf)
    assert res.local_tokens == tuple(len(b) for b in _blocks(t, ep))
    keep = None
    if cf is not None:
        cap = math.ceil(cf * math.ceil(t / ep) * k / e)
        assert res.capacity == cap
        keep = np.zeros((t, k), dtype=bool)
        for blk in _blocks(t, ep):
            used = {}
            for j in range(k):
                for tok in blk:
                    ee = int(res.routing.experts[tok, j])
                    used[ee] = used.get(ee, 0) + 1
                    keep[tok, j] = used[ee] <= cap
        assert res.dropped == int((~keep).sum())
    np.testing.assert_allclose(res.output, _dense(x, rw, w1, w2, k, keep),
                               rtol=1e-10, atol=1e-10)


def test_fewer_tokens_than_ranks():
    rng = np.random.default_rng(3)
    x, rw, w1, w2 = _layer(rng, 2, 3, 4, 2)
    res = ex.moe_forward(x, rw, w1, w2, 4, top_k=1)
    assert res.local_tokens == (1, 1, 0, 0)
    np.testing.assert_allclose(res.output, _dense(x, rw, w1, w2, 1), rtol=1e-12, atol=1e-12)


def test_token_bounds_rejects_bad_input():
    with pytest.raises(ValueError, match="ep=0 must be an integer >= 1"):
        ex.token_bounds(4, 0)
    with pytest.raises(ValueError, match="tokens=-1 must be an integer >= 0"):
        ex.token_bounds(-1, 2)
