"""Tests of tpp.tensor_parallel: sharded layers vs the unsharded reference (forward, dx and
every weight gradient), the reference vs finite differences, the ledger (one all-reduce each
way, at g.forward and f.backward) and ValueError messages."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tpp.collectives import ProcessGroup
from tpp.tensor_parallel import (
    MLP,
    ColumnParallelLinear,
    CopyToTP,
    ReduceFromTP,
    RowParallelLinear,
    ShardedMLP,
    gelu,
    gelu_grad,
    silu,
    silu_grad,
)

SETTINGS = settings(max_examples=40, deadline=None)


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))


def make(seed, d, d_ff, n_tokens, swiglu):
    rng = np.random.default_rng(seed)
    w1 = rng.normal(size=(d, d_ff)) / math.sqrt(d)
    w2 = rng.normal(size=(d_ff, d)) / math.sqrt(d_ff)
    w3 = rng.normal(size=(d, d_ff)) / math.sqrt(d) if swiglu else None
    x = rng.normal(size=(n_tokens, d))
    dy = rng.normal(size=(n_tokens, d))
    return w1, w2, w3, x, dy


# ---------------------------------------------------------------- sharded == reference
@SETTINGS
@given(tp=st.integers(1, 11), k=st.integers(1, 4), d=st.integers(1, 9),
       n_tokens=st.integers(1, 6), act=st.sampled_from(["gelu", "swiglu"]),
       seed=st.integers(0, 2**32 - 1))
def test_sharded_mlp_equals_reference(tp, k, d, n_tokens, act, seed):
    d_ff = tp * k
    w1, w2, w3, x, dy = make(seed, d, d_ff, n_tokens, act == "swiglu")
    ref = MLP(w1, w2, activation=act, w3=w3)
    sh = ShardedMLP(w1, w2, tp, activation=act, w3=w3)
    y_ref, y = ref.forward(x), sh.forward(x)
    assert y.shape == x.shape
    assert rel_err(y, y_ref) <= 1e-12
    for y_r in sh.outputs:  # every rank holds the same all-reduced output
        np.testing.assert_array_equal(y_r, y)
    dx_ref, dx = ref.backward(dy), sh.backward(dy)
    assert rel_err(dx, dx_ref) <= 1e-12
    keys = {"w1", "w2", "w3"} if act == "swiglu" else {"w1", "w2"}
    assert set(sh.grads) == set(ref.grads) == keys
    for name in keys:
        assert sh.grads[name].shape == ref.grads[name].shape
        assert rel_err(sh.grads[name], ref.grads[name]) <= 1e-12
        assert len(sh.shard_grads[name]) == tp
    # the assembled gradient is the concatenation of the shards along the sharded axis
    np.testing.assert_array_equal(sh.grads["w1"], np.concatenate(sh.shard_grads["w1"], axis=1))
    np.testing.assert_array_equal(sh.grads["w2"], np.concatenate(sh.shard_grads["w2"], axis=0))


@SETTINGS
@given(tp=st.integers(1, 11), n_tokens=st.integers(1, 5), d=st.integers(1, 6),
       act=st.sampled_from(["gelu", "swiglu"]))
def test_one_all_reduce_each_way_on_the_ledger(tp, n_tokens, d, act):
    w1, w2, w3, x, dy = make(0, d, 2 * tp, n_tokens, act == "swiglu")
    sh = ShardedMLP(w1, w2, tp, activation=act, w3=w3)
    sh.forward(x)
    assert [(r.op, r.tag) for r in sh.group.ledger] == [("all_reduce", "g.forward")]
    sh.backward(dy)
    assert [(r.op, r.tag) for r in sh.group.ledger] == [
        ("all_reduce", "g.forward"), ("all_reduce", "f.backward")]
    for rec in sh.group.ledger:
        assert rec.group_size == tp
        assert rec.payload_bytes == n_tokens * d * 8  # activation (n, d) in float64
        assert sum(rec.bytes_sent_per_rank) == 2 * (tp - 1) * n_tokens * d * 8


def test_mlp_matches_formula_written_out():
    """The reference against the formula evaluated entry by entry with math.tanh."""
    w1, w2, w3, x, _ = make(3, 3, 4, 2, True)
    c = math.sqrt(2 / math.pi)

    def gelu_scalar(v):
        return 0.5 * v * (1 + math.tanh(c * (v + 0.044715 * v**3)))

    def silu_scalar(v):
        return v / (1 + math.exp(-v))

    for act in ("gelu", "swiglu"):
        y = MLP(w1, w2, act, w3 if act == "swiglu" else None).forward(x)
        for i in range(2):
            for j in range(3):
                acc = 0.0
                for f in range(4):
                    h1 = sum(x[i, a] * w1[a, f] for a in range(3))
                    h3 = sum(x[i, a] * w3[a, f] for a in range(3))
                    a_f = gelu_scalar(h1) if act == "gelu" else silu_scalar(h1) * h3
                    acc += a_f * w2[f, j]
                assert y[i, j] == pytest.approx(acc, rel=1e-12, abs=1e-14)


@pytest.mark.parametrize("act", ["gelu", "swiglu"])
def test_reference_gradients_by_finite_differences(act):
    w1, w2, w3, x, dy = make(7, 4, 6, 3, act == "swiglu")
    params = {"x": x, "w1": w1, "w2": w2}
    if act == "swiglu":
        params["w3"] = w3

    def loss(p):  # L = sum(y * dy), so dL/dy = dy
        return float(np.sum(MLP(p["w1"], p["w2"], act, p.get("w3")).forward(p["x"]) * dy))

    m = MLP(w1, w2, act, w3)
    m.forward(x)
    analytic = {"x": m.backward(dy), **m.grads}
    h = 1e-6
    for name, value in params.items():
        fd = np.zeros_like(value)
        for idx in np.ndindex(value.shape):
            plus = {k: v.copy() for k, v in params.items()}
            minus = {k: v.copy() for k, v in params.items()}
            plus[name][idx] += h
            minus[name][idx] -= h
            fd[idx] = (loss(plus) - loss(minus)) / (2 * h)
        assert rel_err(analytic[name], fd) < 1e-7, name


def test_activation_derivatives_by_finite_differences():
    v = np.linspace(-6, 6, 97)
    h = 1e-6
    np.testing.assert_allclose(gelu_grad(v), (gelu(v + h) - gelu(v - h)) / (2 * h), atol=1e-8)
    np.testing.assert_allclose(silu_grad(v), (silu(v + h) - silu(v - h)) / (2 * h), atol=1e-8)
    # tanh-GELU stays within 1e-3 of the exact erf GELU
    exact = np.array([0.5 * t * (1 + math.erf(t / math.sqrt(2))) for t in v])
    assert np.max(np.abs(gelu(v) - exact)) < 1e-3
    assert np.all(np.isfinite(silu(np.array([-1000.0, 1000.0]))))


# ---------------------------------------------------------------- layers and operators
@pytest.mark.parametrize("tp", [1, 2, 3, 6])
def test_column_and_row_parallel_linear(tp):
    rng = np.random.default_rng(tp)
    x = rng.normal(size=(4, 5))
    w = rng.normal(size=(5, 6))
    col = ColumnParallelLinear(w, tp)
    ys = col.forward(x)
    np.testing.assert_allclose(np.concatenate(ys, axis=1), x @ w, rtol=1e-13)
    dy = rng.normal(size=(4, 6))
    dxs = col.backward(np.split(dy, tp, axis=1))
    np.testing.assert_allclose(sum(dxs), dy @ w.T, rtol=1e-12)
    np.testing.assert_allclose(col.grad, x.T @ dy, rtol=1e-12)

    w2 = rng.normal(size=(6, 5))
    row = RowParallelLinear(w2, tp)
    h = rng.normal(size=(4, 6))
    zs = row.forward(np.split(h, tp, axis=1))
    np.testing.assert_allclose(sum(zs), h @ w2, rtol=1e-12)
    dz = rng.normal(size=(4, 5))
    dhs = row.backward(dz)
    np.testing.assert_allclose(np.concatenate(dhs, axis=1), dz @ w2.T, rtol=1e-13)
    np.testing.assert_allclose(row.grad, h.T @ dz, rtol=1e-12)


def test_f_and_g_are_conjugate():
    g = ProcessGroup(3)
    f_op, g_op = CopyToTP(g), ReduceFromTP(g)
    x = np.arange(4.0)
    xs = f_op.forward(x)
    assert len(xs) == 3 and all(np.array_equal(a, x) for a in xs) and g.ledger == []
    parts = [np.full(4, float(r + 1)) for r in range(3)]
    np.testing.assert_array_equal(f_op.backward(parts)[1], np.full(4, 6.0))
    np.testing.assert_array_equal(g_op.forward(parts)[2], np.full(4, 6.0))
    n_before = len(g.ledger)
    assert all(np.array_equal(a, x) for a in g_op.backward(x))
    assert len(g.ledger) == n_before == 2
    assert [r.tag for r in g.ledger] == ["f.backward", "g.forward"]


def test_group_is_reused_when_given():
    w1, w2, _, x, _ = make(0, 4, 8, 2, False)
    grp = ProcessGroup(4, name="tp")
    sh = ShardedMLP(w1, w2, 4, group=grp)
    sh.forward(x)
    assert sh.group is grp and len(grp.ledger) == 1


# ---------------------------------------------------------------- invalid input
def test_invalid_tp_and_divisibility():
    w1, w2, w3, _, _ = make(0, 4, 10, 2, True)
    for tp in (0, -2):
        with pytest.raises(ValueError, match=f"TP={tp} must be a positive integer: use TP >= 1"):
            ShardedMLP(w1, w2, tp)
    with pytest.raises(ValueError, match="d_ff=10 is not divisible by TP=4: choose a TP that "
                       "divides d_ff"):
        ShardedMLP(w1, w2, 4)
    with pytest.raises(ValueError, match="group has size 2 but TP=5: pass a ProcessGroup of "
                       "size 5"):
        ShardedMLP(w1, w2, 5, group=ProcessGroup(2))


def test_invalid_shapes_and_activation():
    w1, w2, w3, x, _ = make(0, 4, 8, 2, True)
    with pytest.raises(ValueError, match=r"W2 has shape \(8, 5\) but W1 has shape \(4, 8\): W2 "
                       r"must be \(d_ff, d\) = \(8, 4\)"):
        MLP(w1, np.ones((8, 5)))
    with pytest.raises(ValueError, match=r"W3 has shape \(4, 6\).*must be \(d, d_ff\)"):
        ShardedMLP(w1, w2, 2, activation="swiglu", w3=np.ones((4, 6)))
    with pytest.raises(ValueError, match="needs the gate weight w3"):
        ShardedMLP(w1, w2, 2, activation="swiglu")
    with pytest.raises(ValueError, match="w3 is only used by activation='swiglu'"):
        MLP(w1, w2, activation="gelu", w3=w3)
    with pytest.raises(ValueError, match="unknown activation 'relu': use 'gelu' or 'swiglu'"):
        ShardedMLP(w1, w2, 2, activation="relu")
    sh = ShardedMLP(w1, w2, 2)
    with pytest.raises(ValueError, match=r"x has shape \(2, 5\) but the model width is d=4"):
        sh.forward(np.ones((2, 5)))
    with pytest.raises(ValueError, match="call forward before backward"):
        sh.backward(np.ones((2, 4)))
    sh.forward(x)
    with pytest.raises(ValueError, match=r"dy has shape \(3, 4\) but y has shape \(2, 4\)"):
        sh.backward(np.ones((3, 4)))


def test_invalid_linear_inputs():
    with pytest.raises(ValueError, match="d_out=6 is not divisible by TP=4"):
        ColumnParallelLinear(np.ones((3, 6)), 4)
    row = RowParallelLinear(np.ones((6, 3)), 3)
    with pytest.raises(ValueError, match="split x along its last axis first"):
        row.forward(np.ones((2, 6)))
    with pytest.raises(ValueError, match=r"rank 0's input has shape \(2, 3\).*\(\.\.\., 2\)"):
        row.forward([np.ones((2, 3))] * 3)
    with pytest.raises(ValueError, match="got 2 arrays for TP=3"):
        row.forward([np.ones((2, 2))] * 2)


def test_linear_backward_checks_dy_shape():
    col = ColumnParallelLinear(np.ones((3, 6)), 2)
    col.forward(np.ones((4, 3)))
    with pytest.raises(ValueError, match=r"dy has shape \(4, 6\) but the local output has shape "
                       r"\(4, 3\): pass the gradient of forward's output"):
        col.backward([np.ones((4, 6))] * 2)
    row = RowParallelLinear(np.ones((6, 5)), 2)
    row.forward([np.ones((4, 3))] * 2)
    with pytest.raises(ValueError, match=r"dy has shape \(4, 3\) but the output has shape "
                       r"\(4, 5\): pass the gradient"):
        row.backward(np.ones((4, 3)))
    with pytest.raises(ValueError, match="call forward before backward"):
        RowParallelLinear(np.ones((6, 5)), 2).backward(np.ones((4, 5)))
