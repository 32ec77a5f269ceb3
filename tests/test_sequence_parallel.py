"""Tests of sequence parallelism: the operator pair, and a transformer layer under TP and TP+SP
equal to the unsharded reference (forward and backward), its ledger and its activation memory."""

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tpp.collectives import ProcessGroup
from tpp.costs import memory, tp
from tpp.tensor_parallel import sequence as seq
from tpp.tensor_parallel.block import (
    ShardedTransformerBlock,
    TransformerBlock,
    init_block_weights,
)
from tpp.tensor_parallel.dropout import dropout_mask


# ---- the operators ---------------------------------------------------------------------------
@settings(max_examples=30, deadline=None)
@given(st.sampled_from([1, 2, 3, 4]), st.integers(1, 3), st.integers(1, 4), st.integers(0, 999))
def test_gather_and_reduce_scatter_are_adjoint(t, rows, width, seed):
    rng = np.random.default_rng(seed)
    shards = [rng.standard_normal((rows, width)) for _ in range(t)]
    fulls = [rng.standard_normal((rows * t, width)) for _ in range(t)]
    g = ProcessGroup(t)
    gathered = seq.gather_from_sequence_parallel_region(shards, g)
    for r in range(t):
        np.testing.assert_array_equal(gathered[r], np.concatenate(shards, axis=0))
    scattered = seq.gather_from_sequence_parallel_region_backward(fulls, g)
    total = sum(fulls)
    for r in range(t):
        # the ring adds the t contributions in another order than sum(): allow a few ulps
        np.testing.assert_allclose(scattered[r], total[r * rows:(r + 1) * rows], rtol=1e-13,
                                   atol=1e-13)
    # <AG(x), y> == <x, RS(y)>: the backward of the all-gather is its adjoint
    lhs = sum(float((gathered[r] * fulls[r]).sum()) for r in range(t))
    rhs = sum(float((shards[r] * scattered[r]).sum()) for r in range(t))
    assert lhs == pytest.approx(rhs, rel=1e-12, abs=1e-12)


def test_operator_pair_moves_all_reduce_bytes():
    t, rows, width = 4, 3, 5
    full = [np.ones((rows * t, width)) for _ in range(t)]
    g_sp, g_tp = ProcessGroup(t), ProcessGroup(t)
    rs = seq.reduce_scatter_to_sequence_parallel_region(full, g_sp)
    seq.gather_from_sequence_parallel_region(rs, g_sp)
    g_tp.all_reduce(full)
    assert [r.tag for r in g_sp.ledger] == ["sp.reduce_scatter", "sp.all_gather"]
    assert g_sp.ledger_bytes_per_rank() == g_tp.ledger_bytes_per_rank()
    assert g_tp.ledger_bytes_per_rank()[0] == 2 * (t - 1) * rows * width * 8


def test_scatter_and_split_errors():
    g = ProcessGroup(2)
    parts = seq.scatter_to_sequence_parallel_region(np.arange(8.0).reshape(4, 2), g)
    assert [p.tolist() for p in parts] == [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]
    assert g.ledger == []
    back = seq.scatter_to_sequence_parallel_region_backward(parts, g)
    np.testing.assert_array_equal(back[1], np.arange(8.0).reshape(4, 2))
    with pytest.raises(ValueError, match="s=5 must be divisible by TP=2"):
        seq.split_sequence(np.ones((5, 2)), 2)
    with pytest.raises(ValueError, match="pass one array per rank"):
        seq.gather_from_sequence_parallel_region([np.ones(2)], g)


def test_dropout_masks_are_deterministic():
    a = dropout_mask((4, 3), 0.5, seed=1, site="mlp")
    assert a.dtype == np.uint8
    np.testing.assert_array_equal(a, dropout_mask((4, 3), 0.5, seed=1, site="mlp"))
    assert not np.array_equal(dropout_mask((40, 30), 0.5, 1, "mlp"),
                              dropout_mask((40, 30), 0.5, 2, "mlp"))
    assert not np.array_equal(dropout_mask((40, 30), 0.5, 1, "mlp"),
                              dropout_mask((40, 30), 0.5, 1, "attention"))
    assert dropout_mask((5, 5), 0.0, 0, "mlp").all()
    with pytest.raises(ValueError, match=r"must be in \[0, 1\)"):
        dropout_mask((2,), 1.0, 0, "mlp")


# ---- the layer -------------------------------------------------------------------------------
@st.composite
def block_configs(draw):
    t = draw(st.sampled_from([1, 2, 4]))
    n_kv = draw(st.sampled_from([1, 2, 4]))
    n_heads = n_kv * draw(st.sampled_from([1, 2]))
    if n_heads % t or (t > n_kv and t % n_kv):
        n_heads, n_kv = 4, 4
        t = draw(st.sampled_from([1, 2, 4]))
    dh = draw(st.integers(1, 3))
    d = n_heads * dh
    d_ff = t * draw(st.integers(1, 4))
    s = t * draw(st.integers(1, 3))
    b = draw(st.integers(1, 2))
    p = draw(st.sampled_from([0.0, 0.25]))
    recompute = draw(st.sampled_from(["none", "selective", "full"]))
    seed = draw(st.integers(0, 2**16))
    return t, n_heads, n_kv, d, d_ff, s, b, p, recompute, seed


@settings(max_examples=40, deadline=None)
@given(block_configs())
def test_tp_and_tp_sp_blocks_equal_reference(cfg):
    t, n_heads, n_kv, d, d_ff, s, b, p, recompute, seed = cfg
    w = init_block_weights(d, n_heads, n_kv, d_ff, seed=seed)
    rng = np.random.default_rng(seed + 1)
    x, dy = rng.standard_normal((s, b, d)), rng.standard_normal((s, b, d))
    ref = TransformerBlock(w, n_heads, n_kv, dropout_p=p, seed=seed)
    y = ref.forward(x)
    dx = ref.backward(dy)
    for sp_on in (False, True):
        blk = ShardedTransformerBlock(w, t, n_heads, n_kv, sequence_parallel=sp_on,
                                      recompute=recompute, replicate_kv=True, dropout_p=p,
                                      seed=seed)
        np.testing.assert_allclose(blk.forward(x), y, rtol=1e-11, atol=1e-12)
        counted = blk.saved_bytes(rank=t - 1)
        np.testing.assert_allclose(blk.backward(dy), dx, rtol=1e-10, atol=1e-11)
        for k, v in ref.grads.items():
            np.testing.assert_allclose(blk.grads[k], v, rtol=1e-10, atol=1e-11, err_msg=k)
        # memory counted from the tensors the layer keeps == the generalised closed form
        assert counted == memory.activation_terms_per_layer(s, b, d, n_heads, t, sp_on,
                                                            recompute, d_ff, n_kv)


@settings(max_examples=25, deadline=None)
@given(st.sampled_from([1, 2, 4]), st.integers(1, 2), st.integers(1, 3), st.integers(1, 2),
       st.sampled_from(["none", "selective", "full"]), st.booleans())
def test_counted_memory_equals_korthikanti(t, heads_per_rank, dh, b, recompute, sp_on):
    a = t * heads_per_rank
    h = a * dh
    s = 2 * t
    w = init_block_weights(h, a, seed=0)  # MHA, d_ff = 4h: the paper's layer
    blk = ShardedTransformerBlock(w, t, a, sequence_parallel=sp_on, recompute=recompute)
    blk.forward(np.random.default_rng(0).standard_normal((s, b, h)))
    counted = sum(blk.saved_bytes().values())
    scheme = "tp_sp" if sp_on else ("tp" if t > 1 else "none")
    expected = memory.korthikanti_activation_bytes(s, b, h, a, t, scheme, recompute)
    assert Fraction(counted) == expected


def test_korthikanti_by_hand_on_a_small_layer():
    # s=8, b=2, h=16, a=4, t=2, d_ff=64: no SP -> sbh (10 + 24/2 + 5*4*8/(16*2)) = 256 * 27
    w = init_block_weights(16, 4, seed=3)
    x = np.random.default_rng(1).standard_normal((8, 2, 16))
    tp_blk = ShardedTransformerBlock(w, 2, 4)
    tp_blk.forward(x)
    assert sum(tp_blk.saved_bytes().values()) == 256 * 27
    sp_blk = ShardedTransformerBlock(w, 2, 4, sequence_parallel=True)
    sp_blk.forward(x)
    assert sum(sp_blk.saved_bytes().values()) == 256 * (34 + 10) // 2  # sbh/t (34 + 5as/h)


def _bytes(ledger, tags=None, exclude=()):
    return sum(r.bytes_sent_per_rank[0] for r in ledger
               if (tags is None or r.tag in tags) and r.tag not in exclude)


@pytest.mark.parametrize("t", [2, 3, 4])
def test_sp_ledger_moves_tp_bytes(t):
    s, b, d, a = 2 * t, 2, 6 * t, t
    w = init_block_weights(d, a, seed=t)
    rng = np.random.default_rng(t)
    x, dy = rng.standard_normal((s, b, d)), rng.standard_normal((s, b, d))
    blocks = {}
    for sp_on in (False, True):
        blk = ShardedTransformerBlock(w, t, a, sequence_parallel=sp_on)
        blk.forward(x)
        n_fwd = len(blk.group.ledger)
        blk.backward(dy)
        blocks[sp_on] = (blk.group.ledger[:n_fwd], blk.group.ledger[n_fwd:])
    (tp_f, tp_b), (sp_f, sp_b) = blocks[False], blocks[True]
    assert [r.op for r in tp_f] == ["all_reduce"] * 2
    assert [r.op for r in sp_f] == ["all_gather", "reduce_scatter"] * 2
    # forward: the same bytes, and the closed form (fp64 payload b*s*d*8)
    assert _bytes(tp_f) == _bytes(sp_f) == tp.tp_bytes_sent_per_rank(b, s, d, t, 1, "forward",
                                                                      dtype="fp64")
    # backward: the same bytes once SP's extra traffic is set aside
    extra = ("sp.regather", "sp.layernorm_grads")
    assert _bytes(tp_b) == _bytes(sp_b, exclude=extra)
    # ... which is: two re-gathers of the saved input shards + the LayerNorm weight gradients
    assert _bytes(sp_b, tags=("sp.regather",)) == 2 * Fraction(t - 1, t) * s * b * d * 8
    assert _bytes(sp_b, tags=("sp.layernorm_grads",)) == 2 * Fraction(t - 1, t) * 4 * d * 8
    assert _bytes(sp_b, exclude=("sp.layernorm_grads",)) == tp.tp_bytes_sent_per_rank(
        b, s, d, t, 1, "backward", sp=True, dtype="fp64")


@pytest.mark.parametrize("sp_on", [False, True])
def test_full_recompute_repeats_forward_collectives(sp_on):
    t, s, b, d, a = 2, 4, 1, 8, 2
    w = init_block_weights(d, a, seed=0)
    blk = ShardedTransformerBlock(w, t, a, sequence_parallel=sp_on, recompute="full")
    x = np.random.default_rng(0).standard_normal((s, b, d))
    blk.forward(x)
    blk.backward(np.ones((s, b, d)))
    ops = [r.op for r in blk.group.ledger if r.tag != "sp.layernorm_grads"]
    expected = tp.tp_collectives_per_layer("step", sp=sp_on, recompute="full")
    assert {op: ops.count(op) for op in set(ops)} == expected


def test_block_errors():
    w = init_block_weights(8, 4, seed=0)
    with pytest.raises(ValueError, match="s=3 must be divisible by TP=2"):
        ShardedTransformerBlock(w, 2, 4, sequence_parallel=True).forward(np.ones((3, 8)))
    with pytest.raises(ValueError, match="recompute='some': use one of none, selective, full"):
        ShardedTransformerBlock(w, 2, 4, recompute="some")
    with pytest.raises(ValueError, match=r"dropout_p=1\.0 must be a float in \[0, 1\)"):
        TransformerBlock(w, 4, dropout_p=1.0)
    with pytest.raises(ValueError, match=r"weights lack \['w2'\]: pass a dict with keys"):
        TransformerBlock({k: v for k, v in w.items() if k != "w2"}, 4)
    w_gqa = init_block_weights(8, 4, 2, seed=0)
    with pytest.raises(ValueError, match="TP=4 must divide n_kv_heads=2: lower TP to 2 or pass "
                                         "replicate_kv=True"):
        ShardedTransformerBlock(w_gqa, 4, 4, 2)
    with pytest.raises(ValueError, match="d_ff=32 is not divisible by TP=3"):
        ShardedTransformerBlock(init_block_weights(12, 3, seed=0, d_ff=32), 3, 3)


def test_without_regather_sp_keeps_gathered_inputs():
    t, s, b, d, a = 2, 4, 1, 8, 2
    w = init_block_weights(d, a, seed=1)
    x = np.random.default_rng(1).standard_normal((s, b, d))
    ref = TransformerBlock(w, a)
    ref.forward(x)
    dx = ref.backward(np.ones((s, b, d)))
    blk = ShardedTransformerBlock(w, t, a, sequence_parallel=True, regather=False)
    blk.forward(x)
    kept = blk.saved_bytes()
    shard = memory.activation_terms_per_layer(s, b, d, a, t, sp=True)
    # the two projection inputs are kept whole (s rows) instead of as s/t-row shards
    assert kept["qkv_input"] == 2 * s * b * d == t * shard["qkv_input"]
    assert kept["fc1_input"] == 2 * s * b * d
    np.testing.assert_allclose(blk.backward(np.ones((s, b, d))), dx, rtol=1e-11, atol=1e-12)
    assert "sp.regather" not in [r.tag for r in blk.group.ledger]
