"""Expert parallelism: moe_forward equals the dense reference (random shapes, EP degrees, top-k,
with and without a capacity factor); the all-to-all bytes equal the closed forms exactly; drops
are counted; every error message."""

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tpp import expert_parallel as ex
from tpp.collectives import ProcessGroup
from tpp.costs import expert_parallel as cost
from tpp.tensor_parallel.activations import gelu


def _layer(rng, t, d, e, ff):
    return (rng.standard_normal((t, d)), rng.standard_normal((d, e)),
            rng.standard_normal((e, d, ff)), rng.standard_normal((e, ff, d)))


def _dense_loop(x, rw, w1, w2, k, keep=None):
    """Independent reference: every token, every expert, a softmax over the chosen logits."""
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


def _independent_keep(experts, ep, n_exp, cap):
    """GShard's priority written again: first choices, then second choices, in token order."""
    t, k = experts.shape
    tl = t // ep
    keep = np.zeros((t, k), dtype=bool)
    for r in range(ep):
        count = {}
        order = [(j, tok) for j in range(k) for tok in range(r * tl, (r + 1) * tl)]
        for j, tok in order:
            e = int(experts[tok, j])
            count[e] = count.get(e, 0) + 1
            keep[tok, j] = count[e] <= cap
    return keep


@settings(max_examples=40, deadline=None)
@given(ep=st.integers(1, 4), el=st.integers(1, 3), tl=st.integers(1, 5), d=st.integers(1, 4),
       ff=st.integers(1, 4), k=st.integers(1, 3), cf=st.sampled_from([None, 0.5, 1.0, 1.25, 3.0]),
       seed=st.integers(0, 10**6))
def test_moe_forward_equals_dense_reference(ep, el, tl, d, ff, k, cf, seed):
    e = ep * el
    k = min(k, e)
    rng = np.random.default_rng(seed)
    x, rw, w1, w2 = _layer(rng, ep * tl, d, e, ff)
    res = ex.moe_forward(x, rw, w1, w2, ep, top_k=k, capacity_factor=cf)
    if cf is None:
        keep = None
        assert res.dropped == 0 and res.capacity is None
    else:
        cap = math.ceil(cf * tl * k / e)
        assert res.capacity == cap
        keep = _independent_keep(res.routing.experts, ep, e, cap)
        np.testing.assert_array_equal(res.keep, keep)
        assert res.dropped == int((~keep).sum()) == sum(res.dropped_per_expert)
    np.testing.assert_allclose(res.output, _dense_loop(x, rw, w1, w2, k, keep),
                               rtol=1e-11, atol=1e-11)
    # tokens per rank: rows each rank's experts processed, all rows accounted for
    assert sum(res.tokens_per_rank) + res.dropped == ep * tl * k
    assert res.tokens_per_rank == tuple(
        int(np.isin(res.routing.experts[res.keep], range(r * el, (r + 1) * el)).sum())
        for r in range(ep))
    # ledger: dispatch, then combine sending the same rows back the other way
    assert [r.tag for r in res.ledger] == ["moe.dispatch", "moe.combine"]
    if cf is None:     # every row that leaves its rank, counted from the routing
        rows = ex.dispatch_rows(res.routing.experts, ep, e)
        want = tuple(int(rows[r].sum() - rows[r, r]) * d * 8 for r in range(ep))
        back = tuple(int(rows[:, r].sum() - rows[r, r]) * d * 8 for r in range(ep))
    else:              # fixed buffers: the closed form, whatever the routing
        want = back = tuple([int(cost.moe_all_to_all_bytes_per_rank(
            tl, d, k, ep, n_experts=e, capacity_factor=cf, dtype="fp64"))] * ep)
    assert res.ledger[0].bytes_sent_per_rank == want
    assert res.ledger[1].bytes_sent_per_rank == back


@settings(max_examples=25, deadline=None)
@given(ep=st.integers(1, 4), el=st.integers(1, 3), reps=st.integers(1, 3), d=st.integers(1, 4),
       seed=st.integers(0, 10**6))
def test_balanced_routing_bytes_equal_closed_form(ep, el, reps, d, seed):
    """A router that sends each rank's tokens evenly over all experts (top-1): the dropless
    ledger equals (ep-1)/ep * T_r k d e exactly, for dispatch and for combine."""
    e = ep * el
    tl = e * reps
    rng = np.random.default_rng(seed)
    x = np.zeros((ep * tl, e + d))
    x[:, e:] = rng.standard_normal((ep * tl, d))
    for tok in range(ep * tl):
        x[tok, tok % e] = 1.0          # one-hot feature: the router picks expert tok % e
    rw = np.zeros((e + d, e))
    rw[:e, :e] = 10 * np.eye(e)
    w1, w2 = rng.standard_normal((e, e + d, 3)), rng.standard_normal((e, 3, e + d))
    res = ex.moe_forward(x, rw, w1, w2, ep, top_k=1)
    assert res.tokens_per_rank == tuple([tl] * ep)
    want = cost.moe_all_to_all_bytes_per_rank(tl, e + d, 1, ep, n_experts=e, dtype="fp64")
    assert want == Fraction(ep - 1, ep) * tl * (e + d) * 8
    for rec in res.ledger:
        assert rec.bytes_sent_per_rank == tuple([want] * ep)
    assert sum(res.bytes_sent_per_rank()) == 2 * ep * want


def test_skewed_router_overloads_one_rank_and_capacity_drops_are_counted():
    rng = np.random.default_rng(0)
    x, rw, w1, w2 = _layer(rng, 32, 4, 8, 3)
    rw[:, 0] += 100.0 * np.sign(x.mean(axis=0))   # expert 0 wins more often
    x = np.abs(x) * np.sign(x.mean(axis=0))
    res = ex.moe_forward(x, rw, w1, w2, 4, top_k=1)
    assert res.tokens_per_expert[0] == 32 and res.tokens_per_rank == (32, 0, 0, 0)
    capped = ex.moe_forward(x, rw, w1, w2, 4, top_k=1, capacity_factor=1.0)
    assert capped.capacity == 1 and capped.tokens_per_rank == (4, 0, 0, 0)
    assert capped.dropped == 28 and capped.dropped_per_expert[0] == 28


def test_layer_bytes_and_time():
    one = cost.moe_all_to_all_bytes_per_rank(1024, 4096, 2, 8)
    assert one == Fraction(7, 8) * 1024 * 2 * 4096 * 2
    assert cost.moe_layer_bytes_per_rank(1024, 4096, 2, 8, "forward") == 2 * one
    assert cost.moe_layer_bytes_per_rank(1024, 4096, 2, 8) == 4 * one
    t = cost.moe_comm_time(1024, 4096, 2, 8, bandwidth=1e9, latency=1e-6)
    assert t == pytest.approx(4 * 7 * 1e-6 + float(4 * one) / 1e9)
    capped = cost.moe_all_to_all_bytes_per_rank(10, 4, 2, 2, n_experts=4, capacity_factor=1.25)
    assert capped == Fraction(1, 2) * 4 * 7 * 4 * 2     # C = ceil(1.25 * 10 * 2 / 4) = 7


def _msg(fn, *args, **kw):
    with pytest.raises(ValueError) as e:
        fn(*args, **kw)
    return str(e.value)


def test_error_messages():
    rng = np.random.default_rng(0)
    x, rw, w1, w2 = _layer(rng, 6, 4, 6, 3)
    assert _msg(ex.moe_forward, x, rw, w1, w2, 4) == (
        "n_experts=6 is not divisible by ep=4: choose an ep that divides 6 so that every rank "
        "holds the same number of experts")
    assert _msg(ex.moe_forward, x, rw, w1, w2, 2, top_k=7) == (
        "top_k=7 > n_experts=6: choose top_k <= 6")
    assert _msg(ex.moe_forward, x, rw, w1, w2, 2, top_k=0) == "top_k=0 must be an integer >= 1"
    assert _msg(ex.moe_forward, x, rw, w1, w2, 0) == "ep=0 must be an integer >= 1"
    assert _msg(ex.moe_forward, x, rw, w1, w2, 2, capacity_factor=0) == (
        "capacity_factor=0 must be > 0 (e.g. 1.25), or None for dropless routing")
    assert _msg(ex.moe_forward, x[0], rw, w1, w2, 2) == (
        "x has shape (4,): pass tokens as a 2-d array (tokens, d)")
    assert _msg(ex.moe_forward, x, rw[:3], w1, w2, 2) == (
        "router_w has shape (3, 6): pass (d=4, n_experts)")
    assert _msg(ex.moe_forward, x, rw, w1[:5], w2, 2) == (
        "w1 has shape (5, 4, 3): pass (n_experts=6, d=4, d_ff)")
    assert _msg(ex.moe_forward, x, rw, w1, w2[:, :2], 2) == (
        "w2 has shape (6, 2, 4): pass (n_experts=6, d_ff=3, d=4)")
    assert _msg(ex.moe_forward, x, rw, w1, w2, 2, group=ProcessGroup(3)) == (
        "group has size 3 but ep=2: pass a ProcessGroup of size 2 or None")
    assert _msg(ex.route, x, rw, 9) == "top_k=9 > n_experts=6: choose top_k <= 6"
    assert _msg(ex.all_to_all_v, ProcessGroup(2), [[x]]) == (
        "all_to_all_v needs 2 lists of 2 arrays (one per destination)")
    assert _msg(cost.moe_all_to_all_bytes_per_rank, 8, 4, 2, 3, n_experts=8) == (
        "n_experts=8 is not divisible by ep=3: choose an ep that divides it")
    assert _msg(cost.moe_all_to_all_bytes_per_rank, 8, 4, 9, 2, n_experts=8) == (
        "top_k=9 > n_experts=8: choose top_k <= 8")
    assert _msg(cost.moe_all_to_all_bytes_per_rank, 8, 4, 2, 2, capacity_factor=1.0) == (
        "capacity_factor needs n_experts: pass n_experts=E")
    assert _msg(cost.moe_layer_bytes_per_rank, 8, 4, 2, 2, "both") == (
        "phase='both': use one of forward, backward, step")
    assert _msg(cost.moe_comm_time, 8, 4, 2, 2, 0) == "bandwidth=0 must be > 0 bytes/s"
    assert _msg(cost.moe_all_to_all_bytes_per_rank, 0, 4, 2, 2) == (
        "tokens_per_rank=0 must be a positive int")


def test_all_to_all_v_is_the_groups_collective_and_counts_bytes_by_hand():
    """Pieces of any row count, rank r to rank j: the group moves them and records one
    all_to_all; the bytes below are counted from the shapes (8 bytes per float64)."""
    g = ProcessGroup(3)
    rows = [[1, 2, 0], [3, 0, 1], [0, 4, 2]]             # rows[r][j]: rank r -> rank j
    pieces = [[np.full((rows[r][j], 2), 10.0 * r + j) for j in range(3)] for r in range(3)]
    got = g.all_to_all_v(pieces, tag="t")
    for j in range(3):
        for r in range(3):
            np.testing.assert_array_equal(got[j][r], pieces[r][j])
            assert got[j][r] is not pieces[r][j]
    (rec,) = g.ledger
    sent = (16 * (2 + 0), 16 * (3 + 1), 16 * (0 + 4))     # 2 floats a row, own piece not sent
    assert (rec.op, rec.group_size, rec.bytes_sent_per_rank, rec.steps, rec.algorithm,
            rec.tag) == ("all_to_all", 3, sent, 2, "pairwise-v", "t")
    assert rec.payload_bytes == 16 * max(3, 4, 6)         # the largest rank's input


def test_moe_dispatch_and_combine_go_through_the_group():
    calls = []

    class Counting(ProcessGroup):
        def all_to_all_v(self, pieces, *, tag=""):
            calls.append(tag)
            return super().all_to_all_v(pieces, tag=tag)

    x, rw, w1, w2 = _layer(np.random.default_rng(3), 8, 4, 4, 3)
    res = ex.moe_forward(x, rw, w1, w2, ep=2, group=Counting(2))
    assert calls == ["moe.dispatch", "moe.combine"]
    assert [r.tag for r in res.ledger] == calls
