"""Context parallelism: ring attention and Ulysses equal full attention (random shapes, CP
degrees, GQA, causal or not, both layouts); ledger bytes and work per rank equal the closed
forms exactly; the online-softmax merge is exact; the backward matches finite differences;
every error message."""

import itertools
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tpp import context_parallel as cpm
from tpp.collectives import ProcessGroup
from tpp.context_parallel.backward import ring_attention_backward
from tpp.costs import context_parallel as cost


def _naive_attention(q, k, v, causal):
    """Loop over queries and heads: a reference written independently of the library."""
    s, h, d = q.shape
    g = h // k.shape[1]
    out = np.zeros_like(q)
    for i in range(s):
        for j in range(h):
            keys = range(i + 1) if causal else range(s)
            sc = np.array([q[i, j] @ k[t, j // g] for t in keys]) / np.sqrt(d)
            w = np.exp(sc - sc.max())
            out[i, j] = sum(w[n] * v[t, j // g] for n, t in enumerate(keys)) / w.sum()
    return out


def _qkv(rng, s, h, hkv, d):
    return (rng.standard_normal((s, h, d)), rng.standard_normal((s, hkv, d)),
            rng.standard_normal((s, hkv, d)))


@settings(max_examples=40, deadline=None)
@given(cp=st.integers(1, 8), mult=st.integers(1, 3), hkv=st.integers(1, 3),
       group=st.integers(1, 3), d=st.integers(1, 5), causal=st.booleans(),
       layout=st.sampled_from(cpm.LAYOUTS), seed=st.integers(0, 10**6))
def test_ring_attention_equals_full_attention(cp, mult, hkv, group, d, causal, layout, seed):
    rng = np.random.default_rng(seed)
    s = 2 * cp * mult
    h = hkv * group
    q, k, v = _qkv(rng, s, h, hkv, d)
    res = cpm.ring_attention(q, k, v, cp, causal=causal, layout=layout)
    ref = cpm.attention_reference(q, k, v, causal)
    np.testing.assert_allclose(res.output, ref, rtol=1e-12, atol=1e-12)
    # ledger: one send of a K/V block per rank per step, cp - 1 steps
    sent = res.bytes_sent_per_rank()
    assert sent == tuple([int(cost.ring_attention_bytes_per_rank(s, hkv, d, cp, "fp64"))] * cp)
    assert len(res.ledger) == cp * (cp - 1)
    assert all(r.op == "send" and r.tag.startswith("ring.kv") for r in res.ledger)
    # work: closed form, and the total is every visible pair once per head
    assert res.work_per_rank == cost.attention_work_per_rank(s, cp, h, causal, layout)
    assert sum(res.work_per_rank) == h * (s * (s + 1) // 2 if causal else s * s)
    # the shards are the rank's own tokens
    for r in range(cp):
        np.testing.assert_array_equal(res.shards[r], res.output[res.positions[r]])


@pytest.mark.parametrize("causal", [True, False])
def test_reference_equals_naive_loops(causal):
    rng = np.random.default_rng(3)
    q, k, v = _qkv(rng, 7, 4, 2, 3)
    np.testing.assert_allclose(cpm.attention_reference(q, k, v, causal),
                               _naive_attention(q, k, v, causal), rtol=1e-12, atol=1e-12)


@settings(max_examples=30, deadline=None)
@given(cp=st.sampled_from([1, 2, 3, 4]), hmul=st.integers(1, 2), g=st.integers(1, 2),
       c=st.integers(1, 3), d=st.integers(1, 4), causal=st.booleans(),
       layout=st.sampled_from(cpm.LAYOUTS), seed=st.integers(0, 10**6))
def test_ulysses_equals_full_attention(cp, hmul, g, c, d, causal, layout, seed):
    rng = np.random.default_rng(seed)
    hkv = cp * hmul
    h = hkv * g
    s = 2 * cp * c
    q, k, v = _qkv(rng, s, h, hkv, d)
    res = cpm.ulysses_attention(q, k, v, cp, causal=causal, layout=layout)
    np.testing.assert_allclose(res.output, cpm.attention_reference(q, k, v, causal),
                               rtol=1e-12, atol=1e-12)
    assert [r.tag for r in res.ledger] == ["ulysses.q", "ulysses.k", "ulysses.v", "ulysses.out"]
    expected = cost.ulysses_bytes_per_rank(s, h, hkv, d, cp, "fp64")
    assert res.bytes_sent_per_rank() == tuple([expected] * cp)
    assert len(set(res.work_per_rank)) == 1
    assert sum(res.work_per_rank) == h * (s * (s + 1) // 2 if causal else s * s)


def test_ring_bytes_closed_form_by_hand():
    # cp=4, s=16, one K/V head of size 2, fp64: 3 sends of (2, 4, 1, 2) doubles = 3 * 128 bytes
    assert cost.ring_attention_bytes_per_rank(16, 1, 2, 4, "fp64") == 384
    assert cost.ulysses_bytes_per_rank(16, 4, 4, 2, 4, "fp64") == Fraction(3, 4) * 4 * 2 * 8 * 16


def test_contiguous_causal_is_imbalanced_zigzag_is_not():
    s, cp = 64, 4
    rng = np.random.default_rng(0)
    q, k, v = _qkv(rng, s, 1, 1, 2)
    cont = cpm.ring_attention(q, k, v, cp, layout="contiguous").work_per_rank
    zig = cpm.ring_attention(q, k, v, cp, layout="zigzag").work_per_rank
    c = s // cp
    assert cont == tuple(i * c * c + c * (c + 1) // 2 for i in range(cp))   # rank i: i full blocks
    assert cont[-1] / cont[0] == (3 * 256 + 136) / 136
    assert len(set(zig)) == 1 and sum(zig) == sum(cont)


@settings(max_examples=50, deadline=None)
@given(n1=st.integers(1, 5), n2=st.integers(1, 5), d=st.integers(1, 4),
       scale=st.floats(0.1, 30.0), seed=st.integers(0, 10**6))
def test_online_softmax_merge_is_exact_and_order_free(n1, n2, d, scale, seed):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((3, 2, d)) * scale
    k = rng.standard_normal((n1 + n2, 2, d))
    v = rng.standard_normal((n1 + n2, 2, d))
    a = cpm.block_partial(q, k[:n1], v[:n1])
    b = cpm.block_partial(q, k[n1:], v[n1:])
    full = cpm.block_partial(q, k, v)
    for m in (cpm.online_softmax_merge(a, b), cpm.online_softmax_merge(b, a)):
        np.testing.assert_allclose(cpm.finalize(m), cpm.finalize(full), rtol=1e-11, atol=1e-12)
        np.testing.assert_array_equal(m.m, full.m)


def test_naive_merge_without_rescaling_is_wrong():
    """Negative control: adding the two partials without the e^(m_i - m) factors is not
    attention, so the test above can fail."""
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((3, 1, 2)) * 4, rng.standard_normal((6, 1, 2)),
               rng.standard_normal((6, 1, 2)))
    a, b = cpm.block_partial(q, k[:3], v[:3]), cpm.block_partial(q, k[3:], v[3:])
    wrong = (a.acc + b.acc) / (a.l + b.l)[..., None]
    assert not np.allclose(wrong, cpm.finalize(cpm.block_partial(q, k, v)))


def test_zigzag_chunks():
    assert [[(r.start, r.stop) for r in ch] for ch in cpm.rank_chunks(8, 2, "zigzag")] == [
        [(0, 2), (6, 8)], [(2, 4), (4, 6)]]
    assert [p.tolist() for p in cpm.rank_positions(6, 3)] == [[0, 1], [2, 3], [4, 5]]


def test_ring_time_and_overlap():
    # block compute 4 c^2 h d / F against send 2 c h_kv d e / B
    t = cost.ring_attention_time(8, 2, 1, 4, 2, peak_flops=1e3, bandwidth=8.0, dtype="fp64")
    assert t.compute_per_step == pytest.approx(4 * 16 * 2 * 4 / 1e3)
    assert t.comm_per_step == pytest.approx(2 * 4 * 1 * 4 * 8 / 8.0)
    assert not t.hidden and t.total == pytest.approx(t.compute_per_step + t.comm_per_step)
    assert t.exposed_comm == pytest.approx(t.comm_per_step - t.compute_per_step)
    c_min = cost.ring_overlap_min_block(2, 1, 1e3, 8.0, dtype="fp64")
    assert c_min == pytest.approx(1e3 * 8 * 1 / (2 * 2 * 8.0))
    for c, hidden in ((int(c_min) + 1, True), (max(1, int(c_min) - 1), False)):
        tc = cost.ring_attention_time(2 * c, 2, 1, 4, 2, 1e3, 8.0, dtype="fp64")
        assert tc.hidden is hidden
    assert cost.ring_attention_time(8, 2, 1, 4, 1, 1e3, 8.0).exposed_comm == 0


# ---- errors ----------------------------------------------------------------------------------
def _msg(fn, *args, **kw):
    with pytest.raises(ValueError) as e:
        fn(*args, **kw)
    return str(e.value)


def test_error_messages():
    q, k, v = np.zeros((6, 4, 2)), np.zeros((6, 2, 2)), np.zeros((6, 2, 2))
    assert _msg(cpm.ring_attention, q, k, v, 4) == (
        "seq=6 is not divisible by cp=4: pad the sequence to a multiple of 4 or choose a cp "
        "that divides it")
    assert _msg(cpm.ring_attention, q, k, v, 2, layout="zigzag") == (
        "seq=6 is not divisible by 2*cp=4 (zigzag cuts 2*cp chunks): pad the sequence to a "
        "multiple of 4 or use layout='contiguous'")
    assert _msg(cpm.ring_attention, q, k, v, 2, layout="striped") == (
        "layout='striped': use one of contiguous, zigzag")
    assert _msg(cpm.ring_attention, q, k, v, 0) == "cp=0 must be an integer >= 1"
    assert _msg(cpm.ulysses_attention, q, k, v, 3) == (
        "Ulysses needs n_heads=4 and n_kv_heads=2 divisible by cp=3: choose a cp that divides "
        "both, replicate K/V heads up to a multiple of cp, or use ring_attention")
    assert _msg(cpm.ulysses_attention, np.zeros((8, 4, 2)), np.zeros((8, 2, 2)),
                np.zeros((8, 2, 2)), 4).startswith("Ulysses needs n_heads=4 and n_kv_heads=2")
    assert _msg(cpm.ring_attention, q, np.zeros((6, 3, 2)), np.zeros((6, 3, 2)), 2) == (
        "n_heads=4 is not a multiple of n_kv_heads=3: GQA needs every K/V head shared by the "
        "same number of query heads")
    assert _msg(cpm.ring_attention, q[0], k, v, 2) == (
        "q has shape (4, 2): pass a 3-d array (seq, heads, d_head)")
    assert _msg(cpm.ring_attention, q, k, v[:, :1], 2) == (
        "k has shape (6, 2, 2) but v has shape (6, 1, 2): give them one shape")
    assert _msg(cpm.ring_attention, q, k[:4], v[:4], 2) == (
        "q (6, 4, 2) and k (4, 2, 2) must agree on seq and d_head: pass (seq, heads, d_head) "
        "arrays of one sequence")
    assert _msg(cpm.ring_attention, q, k, v, 2, group=ProcessGroup(3)) == (
        "group has size 3 but cp=2: pass a ProcessGroup of size 2 or None")
    assert _msg(cost.attention_work_per_rank, 6, 2, layout="zigzag") == (
        "s=6 is not divisible by 4 (zigzag layout, cp=2): pad the sequence to a multiple of 4")
    assert _msg(cost.attention_work_per_rank, 6, 2, layout="x") == (
        "layout='x': use 'contiguous' or 'zigzag'")
    assert _msg(cost.ring_attention_bytes_per_rank, 6, 1, 2, 4) == (
        "s=6 is not divisible by cp=4: pad the sequence to a multiple")
    assert _msg(cost.ulysses_bytes_per_rank, 8, 4, 2, 2, 4) == (
        "Ulysses needs n_heads=4 and n_kv_heads=2 divisible by cp=4: choose a cp that divides "
        "both or use ring attention")
    assert _msg(cost.ring_attention_bytes_per_rank, 0, 1, 2, 4) == "s=0 must be a positive int"
    assert _msg(cost.ring_attention_time, 8, 2, 1, 4, 2, 0, 1.0) == (
        "peak_flops (FLOP/s) and bandwidth (bytes/s) must be > 0")
    assert _msg(cost.ring_attention_time, 8, 2, 1, 4, 2, 1.0, 1.0, mfu=2) == (
        "mfu=2 must be in (0, 1]")
    assert _msg(cost.ring_attention_time, 8, 2, 1, 4, 2, 1.0, 1.0, latency=-1) == (
        "latency=-1 must be >= 0 s")
    assert _msg(cost.ring_overlap_min_block, 2, 1, 0, 1.0) == (
        "peak_flops and bandwidth must be > 0 and mfu in (0, 1]")


def test_all_pairs_of_small_configs_agree():
    """Exhaustive small grid (complements the random search): CP = 1..8, both layouts."""
    rng = np.random.default_rng(7)
    for cp, layout, causal in itertools.product(range(1, 9), cpm.LAYOUTS, (True, False)):
        s = 2 * cp * 2
        q, k, v = _qkv(rng, s, 2, 1, 3)
        res = cpm.ring_attention(q, k, v, cp, causal, layout)
        np.testing.assert_allclose(res.output, _naive_attention(q, k, v, causal),
                                   rtol=1e-11, atol=1e-12)


# ---- backward --------------------------------------------------------------------------------
def _numeric_grads(q, k, v, do, causal, eps=1e-6):
    def loss():
        return float((cpm.attention_reference(q, k, v, causal) * do).sum())
    grads = []
    for arr in (q, k, v):
        g = np.zeros_like(arr)
        for idx in np.ndindex(arr.shape):
            keep = arr[idx]
            arr[idx] = keep + eps
            up = loss()
            arr[idx] = keep - eps
            down = loss()
            arr[idx] = keep
            g[idx] = (up - down) / (2 * eps)
        grads.append(g)
    return grads


@pytest.mark.parametrize("cp,layout,causal", [(1, "contiguous", True), (2, "zigzag", True),
                                              (4, "contiguous", True), (4, "zigzag", False)])
def test_ring_backward_matches_finite_differences(cp, layout, causal):
    rng = np.random.default_rng(cp)
    q, k, v = _qkv(rng, 8, 4, 2, 3)
    do = rng.standard_normal(q.shape)
    grads = ring_attention_backward(q, k, v, do, cp, causal, layout)
    for got, want in zip((grads.dq, grads.dk, grads.dv), _numeric_grads(q, k, v, do, causal),
                         strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


@settings(max_examples=25, deadline=None)
@given(cp=st.integers(2, 6), mult=st.integers(1, 2), hkv=st.integers(1, 2),
       group=st.integers(1, 3), d=st.integers(1, 4), causal=st.booleans(),
       layout=st.sampled_from(cpm.LAYOUTS), seed=st.integers(0, 10**6))
def test_ring_backward_equals_single_rank_and_counts_bytes(cp, mult, hkv, group, d, causal,
                                                           layout, seed):
    rng = np.random.default_rng(seed)
    s = 2 * cp * mult
    q, k, v = _qkv(rng, s, hkv * group, hkv, d)
    do = rng.standard_normal(q.shape)
    ring = ring_attention_backward(q, k, v, do, cp, causal, layout)
    single = ring_attention_backward(q, k, v, do, 1, causal)
    for a, b in ((ring.dq, single.dq), (ring.dk, single.dk), (ring.dv, single.dv)):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-11)
    want = cost.ring_attention_backward_bytes_per_rank(s, hkv, d, cp, "fp64")
    assert ring.bytes_sent_per_rank() == tuple([want] * cp)
    assert want == (2 * cp - 1) * 2 * (s // cp) * hkv * d * 8
    assert single.ledger == []


def test_ring_backward_errors():
    q, k, v = np.zeros((4, 2, 2)), np.zeros((4, 1, 2)), np.zeros((4, 1, 2))
    assert _msg(ring_attention_backward, q, k, v, np.zeros((4, 2, 3)), 2) == (
        "do has shape (4, 2, 3): pass the output's gradient, shape (4, 2, 2)")
    assert _msg(ring_attention_backward, q, k, v, q, 3).startswith("seq=4 is not divisible")


def test_causal_zigzag_step_is_half_a_block_and_threshold_doubles():
    """Issue 21: a causal ring step (zig-zag split) computes half a block, counted by the
    simulated ring, so a K/V send needs blocks twice as long to hide."""
    from tpp import context_parallel as cpm

    rng = np.random.default_rng(21)
    s, h, hkv, d, cp = 32, 2, 1, 4, 4
    q = rng.standard_normal((s, h, d))
    k, v = rng.standard_normal((s, hkv, d)), rng.standard_normal((s, hkv, d))
    ring = cpm.ring_attention(q, k, v, cp, causal=True, layout="zigzag")
    t = cost.ring_attention_time(s, h, hkv, d, cp, peak_flops=1.0, bandwidth=1.0,
                                 causal=True, dtype="fp64")
    assert t.compute_per_step == 4 * d * ring.work_per_rank[0] / cp
    full = cost.ring_attention_time(s, h, hkv, d, cp, 1.0, 1.0, dtype="fp64")
    c = s // cp
    assert full.compute_per_step == 4 * c * c * h * d
    # half a block plus the diagonal triangles' extra c/2 pairs, spread over the cp steps
    assert t.compute_per_step == 4 * d * h * (c * c / 2 + c / (2 * cp))
    for F, B in ((1e15, 4.5e11), (1e15, 5e10)):
        assert cost.ring_overlap_min_block(64, 8, F, B, causal=True) == pytest.approx(
            2 * cost.ring_overlap_min_block(64, 8, F, B))
    # at the causal threshold the half-block step and the send take the same time
    F, B = 8e3, 16.0
    c_min = cost.ring_overlap_min_block(2, 1, F, B, dtype="fp64", causal=True)
    assert c_min == F * 8 * 1 / (2 * B)
    half_step = 2 * c_min**2 * 2 * d / F
    send = 2 * c_min * 1 * d * 8 / B
    assert half_step == pytest.approx(send)
