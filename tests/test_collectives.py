"""Tests of tpp.collectives: results vs numpy references, ledger bytes vs closed forms
written out by hand, the ring's chunk schedule, and ValueError messages."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tpp.collectives import (
    ProcessGroup,
    alpha_beta_time,
    bus_factor,
    ring_bytes_per_rank,
    ring_steps,
)

SETTINGS = settings(max_examples=60, deadline=None)
sizes = st.integers(min_value=1, max_value=16)


def int_valued(rng: np.random.Generator, n: int, shape, dtype=np.float64) -> list[np.ndarray]:
    """Small integers stored as floats: sums are exact in any order, so results compare with ==."""
    return [rng.integers(-100, 100, size=shape).astype(dtype) for _ in range(n)]


# ---------------------------------------------------------------- all-reduce
@SETTINGS
@given(n=sizes, shape=st.lists(st.integers(1, 7), min_size=0, max_size=3),
       seed=st.integers(0, 2**32 - 1))
def test_all_reduce_equals_numpy_sum(n, shape, seed):
    rng = np.random.default_rng(seed)
    arrays = int_valued(rng, n, tuple(shape))
    ref = np.sum(np.stack(arrays), axis=0)
    g = ProcessGroup(n)
    out = g.all_reduce(arrays)
    assert len(out) == n
    for o in out:
        assert o.shape == ref.shape and o.dtype == ref.dtype
        np.testing.assert_array_equal(o, ref)


@SETTINGS
@given(n=sizes, m=st.integers(1, 40), seed=st.integers(0, 2**32 - 1))
def test_all_reduce_random_floats_close_and_bit_identical_across_ranks(n, m, seed):
    rng = np.random.default_rng(seed)
    arrays = [rng.normal(size=(m, 3)) for _ in range(n)]
    out = ProcessGroup(n).all_reduce(arrays)
    np.testing.assert_allclose(out[0], np.sum(arrays, axis=0), rtol=1e-12, atol=1e-12)
    for o in out[1:]:  # the all-gather phase copies the same reduced chunks
        assert o.tobytes() == out[0].tobytes()


@pytest.mark.parametrize("op,ref", [("max", np.max), ("min", np.min), ("prod", np.prod)])
def test_all_reduce_other_reductions(op, ref):
    rng = np.random.default_rng(0)
    arrays = int_valued(rng, 5, (4, 6))
    out = ProcessGroup(5).all_reduce(arrays, op=op)
    np.testing.assert_array_equal(out[2], ref(np.stack(arrays), axis=0))


def test_inputs_are_not_modified():
    arrays = [np.full(8, float(r)) for r in range(4)]
    before = [a.copy() for a in arrays]
    g = ProcessGroup(4)
    g.all_reduce(arrays)
    g.reduce_scatter(arrays)
    g.all_gather(arrays)
    for a, b in zip(arrays, before, strict=True):
        np.testing.assert_array_equal(a, b)


@SETTINGS
@given(n=sizes, k=st.integers(1, 5), itemsize=st.sampled_from([2, 4, 8]))
def test_all_reduce_ledger_matches_closed_form_exactly(n, k, itemsize):
    dtype = {2: np.float16, 4: np.float32, 8: np.float64}[itemsize]
    arrays = [np.ones(n * k, dtype=dtype) for _ in range(n)]
    payload = n * k * itemsize
    g = ProcessGroup(n)
    g.all_reduce(arrays)
    (rec,) = g.ledger
    expected = 2 * (n - 1) * payload // n  # exact: n divides payload
    assert 2 * (n - 1) * payload % n == 0
    assert rec.op == "all_reduce" and rec.group_size == n
    assert rec.payload_bytes == payload
    assert rec.bytes_sent_per_rank == (expected,) * n
    assert rec.steps == 2 * (n - 1)
    assert ring_bytes_per_rank("all_reduce", payload, n) == expected


@SETTINGS
@given(n=st.integers(2, 16), elems=st.integers(1, 60))
def test_all_reduce_uneven_chunks_total_is_exact(n, elems):
    """With uneven chunks each rank sends all chunks but one per phase."""
    arrays = [np.ones(elems) for _ in range(n)]
    g = ProcessGroup(n)
    g.all_reduce(arrays)
    sent = g.ledger[-1].bytes_sent_per_rank
    assert sum(sent) == 2 * (n - 1) * elems * 8
    lo, hi = elems // n, -(-elems // n)
    for b in sent:
        assert 2 * (elems - hi) * 8 <= b <= 2 * (elems - lo) * 8
    # the mean over ranks equals the exact closed form
    assert Fraction(sum(sent), n) == Fraction(2 * (n - 1), n) * elems * 8


def test_ring_schedule_follows_the_textbook_rule():
    """RS phase: in step s rank r sends chunk (r - s) mod N to r+1; AG: chunk (r + 1 - s)."""
    n = 5
    trace = []
    ProcessGroup(n).all_reduce([np.arange(10.0) for _ in range(n)], trace=trace)
    assert len(trace) == 2 * (n - 1) * n
    for t in trace:
        assert t.dst == (t.src + 1) % n
        if t.phase == "reduce_scatter":
            assert t.chunk == (t.src - t.step) % n
        else:
            assert t.chunk == (t.src + 1 - t.step) % n
        assert t.nbytes == 2 * 8


def test_group_of_one_is_a_copy_and_sends_nothing():
    g = ProcessGroup(1)
    a = np.arange(6.0).reshape(2, 3)
    (o,) = g.all_reduce([a])
    np.testing.assert_array_equal(o, a)
    assert g.ledger[0].bytes_sent_per_rank == (0,) and g.ledger[0].steps == 0


# ---------------------------------------------------------------- reduce-scatter / all-gather
@SETTINGS
@given(n=sizes, k=st.integers(1, 4), other=st.integers(1, 5), axis=st.sampled_from([0, 1, -1]),
       seed=st.integers(0, 2**32 - 1))
def test_reduce_scatter_gives_slice_r_of_the_sum(n, k, other, axis, seed):
    rng = np.random.default_rng(seed)
    shape = [other, other + 1]
    shape[axis] = n * k
    arrays = int_valued(rng, n, tuple(shape))
    total = np.sum(np.stack(arrays), axis=0)
    g = ProcessGroup(n)
    out = g.reduce_scatter(arrays, axis=axis)
    for r in range(n):
        idx = [slice(None)] * 2
        idx[axis] = slice(r * k, (r + 1) * k)
        np.testing.assert_array_equal(out[r], total[tuple(idx)])
    rec = g.ledger[-1]
    payload = arrays[0].nbytes
    assert rec.payload_bytes == payload
    assert rec.bytes_sent_per_rank == ((n - 1) * payload // n,) * n
    assert rec.steps == n - 1


@SETTINGS
@given(n=sizes, shape=st.lists(st.integers(1, 5), min_size=1, max_size=3), axis=st.integers(0, 2),
       seed=st.integers(0, 2**32 - 1))
def test_all_gather_is_concatenation(n, shape, axis, seed):
    axis = axis % len(shape)
    rng = np.random.default_rng(seed)
    arrays = [rng.normal(size=shape) for _ in range(n)]
    g = ProcessGroup(n)
    out = g.all_gather(arrays, axis=axis)
    ref = np.concatenate(arrays, axis=axis)
    for o in out:
        np.testing.assert_array_equal(o, ref)
    rec = g.ledger[-1]
    assert rec.payload_bytes == ref.nbytes  # all_gather: the OUTPUT size
    assert rec.bytes_sent_per_rank == ((n - 1) * arrays[0].nbytes,) * n
    assert rec.steps == n - 1


@SETTINGS
@given(n=sizes, k=st.integers(1, 4), seed=st.integers(0, 2**32 - 1))
def test_all_reduce_equals_reduce_scatter_then_all_gather(n, k, seed):
    rng = np.random.default_rng(seed)
    arrays = int_valued(rng, n, (n * k, 3))
    g = ProcessGroup(n)
    ar = g.all_reduce(arrays)
    rs = g.reduce_scatter(arrays)
    ag = g.all_gather(rs)
    for a, b in zip(ar, ag, strict=True):
        np.testing.assert_array_equal(a, b)
    r_ar, r_rs, r_ag = g.ledger
    assert r_ar.payload_bytes == r_rs.payload_bytes == r_ag.payload_bytes
    assert r_ar.bytes_sent_per_rank == tuple(
        x + y for x, y in zip(r_rs.bytes_sent_per_rank, r_ag.bytes_sent_per_rank, strict=True))
    assert r_ar.steps == r_rs.steps + r_ag.steps


# ---------------------------------------------------------------- broadcast, send, all-to-all
@pytest.mark.parametrize("n,root", [(1, 0), (2, 1), (5, 3), (16, 0)])
def test_broadcast(n, root):
    a = np.arange(12.0).reshape(3, 4) + root
    arrays = [None] * n
    arrays[root] = a
    g = ProcessGroup(n)
    out = g.broadcast(arrays, root=root)
    for o in out:
        np.testing.assert_array_equal(o, a)
    rec = g.ledger[-1]
    assert sum(rec.bytes_sent_per_rank) == (n - 1) * a.nbytes
    assert max(rec.bytes_sent_per_rank) == (a.nbytes if n > 1 else 0)
    assert rec.bytes_sent_per_rank[(root - 1) % n] == 0  # end of the chain


def test_send_records_p2p():
    g = ProcessGroup(4)
    a = np.ones((2, 5), dtype=np.float32)
    b = g.send(a, src=1, dst=3)
    np.testing.assert_array_equal(a, b)
    assert b is not a
    rec = g.ledger[-1]
    assert rec.op == "send" and rec.bytes_sent_per_rank == (0, 40, 0, 0) and rec.steps == 1


@pytest.mark.parametrize("n", [1, 2, 3, 7])
def test_all_to_all_is_a_transpose_of_blocks(n):
    arrays = [np.array([[100 * src + dst] for dst in range(n)], dtype=float) for src in range(n)]
    g = ProcessGroup(n)
    out = g.all_to_all(arrays)
    for r in range(n):
        np.testing.assert_array_equal(out[r][:, 0], [100 * src + r for src in range(n)])
    # each rank keeps its own block and sends the other n-1 blocks of 8 bytes directly
    rec = g.ledger[-1]
    assert rec.payload_bytes == n * 8
    assert rec.bytes_sent_per_rank == ((n - 1) * 8,) * n
    assert rec.steps == n - 1 and rec.algorithm == ("pairwise" if n > 1 else "none")


# ---------------------------------------------------------------- closed forms
@pytest.mark.parametrize("n", range(1, 65))
def test_bus_factors_by_hand(n):
    assert bus_factor("all_reduce", n) == Fraction(2 * n - 2, n)
    assert bus_factor("reduce_scatter", n) == Fraction(n - 1, n)
    assert bus_factor("all_gather", n) == Fraction(n - 1, n)
    assert bus_factor("broadcast", n) == 1
    assert isinstance(bus_factor("all_reduce", n), Fraction)
    assert bus_factor("all-reduce", n) == bus_factor("all_reduce", n)


def test_alpha_beta_time_by_hand():
    # 8 ranks, 1 GB over 450 GB/s, 5 us per step: 14 * 5e-6 + 1.75 * 1e9 / 450e9
    t = alpha_beta_time("all_reduce", 10**9, 8, bandwidth=450e9, latency=5e-6)
    assert t == pytest.approx(14 * 5e-6 + 1.75 / 450, rel=1e-15)
    assert alpha_beta_time("all_gather", 800, 4, 100.0) == pytest.approx(6.0)
    assert alpha_beta_time("all_reduce", 800, 1, 100.0, 1.0) == 0.0
    assert ring_steps("reduce_scatter", 9) == 8


def test_ring_bytes_uneven_rounds_up():
    assert ring_bytes_per_rank("all_reduce", 10, 3) == math.ceil(Fraction(40, 3))
    assert ring_bytes_per_rank("broadcast", 10, 3) == 10
    assert ring_bytes_per_rank("broadcast", 10, 1) == 0


# ---------------------------------------------------------------- invalid input
@pytest.mark.parametrize("size", [0, -3, 2.5, True])
def test_bad_group_size(size):
    with pytest.raises(ValueError, match="positive integer: use size >= 1"):
        ProcessGroup(size)


def test_wrong_number_of_arrays():
    g = ProcessGroup(4)
    with pytest.raises(ValueError, match=r"got 3 arrays for a group of size 4: pass exactly one"):
        g.all_reduce([np.ones(4)] * 3)
    with pytest.raises(ValueError, match="wrap the arrays in a list"):
        g.all_reduce(np.ones((4, 4)))


def test_shape_mismatch_names_the_ranks_and_shapes():
    g = ProcessGroup(3)
    arrays = [np.ones((3, 4)), np.ones((3, 4)), np.ones((3, 5))]
    with pytest.raises(ValueError, match=r"rank 2 has shape \(3, 5\) but rank 0 has shape "
                       r"\(3, 4\): every rank must pass an array of the same shape"):
        g.all_reduce(arrays)
    for fn in (g.reduce_scatter, g.all_gather):
        with pytest.raises(ValueError, match="rank 2 has shape"):
            fn(arrays)


def test_dtype_mismatch():
    g = ProcessGroup(2)
    with pytest.raises(ValueError, match="rank 1 has dtype float32 but rank 0 has dtype float64: "
                       "cast"):
        g.all_reduce([np.ones(4), np.ones(4, dtype=np.float32)])


def test_reduce_scatter_not_divisible():
    g = ProcessGroup(4)
    with pytest.raises(ValueError, match="axis 0 has length 10, not divisible by the group size 4:"
                       " pad"):
        g.reduce_scatter([np.ones(10)] * 4)
    with pytest.raises(ValueError, match="axis 0 has length 5, not divisible by the group size "
                       "4: pad that axis to a multiple of 4"):
        g.all_to_all([np.ones(5)] * 4)
    with pytest.raises(ValueError, match="axis=2 is out of range"):
        g.reduce_scatter([np.ones((4, 4))] * 4, axis=2)


def test_unknown_ops():
    with pytest.raises(ValueError, match="unknown op 'all_sum': use one of all_reduce"):
        bus_factor("all_sum", 4)
    with pytest.raises(ValueError, match="unknown reduction op 'avg': use one of sum"):
        ProcessGroup(2).all_reduce([np.ones(2)] * 2, op="avg")
    with pytest.raises(ValueError, match="n=0 must be a positive integer"):
        bus_factor("all_reduce", 0)


def test_bad_alpha_beta_arguments():
    with pytest.raises(ValueError, match="bandwidth=0 must be > 0"):
        alpha_beta_time("all_reduce", 100, 4, 0)
    with pytest.raises(ValueError, match="latency=-1 must be >= 0"):
        alpha_beta_time("all_reduce", 100, 4, 1e9, latency=-1)
    with pytest.raises(ValueError, match="payload_bytes=-5 is negative"):
        ring_bytes_per_rank("all_reduce", -5, 4)


def test_bad_broadcast_and_send():
    g = ProcessGroup(3)
    with pytest.raises(ValueError, match="root=3 is not a rank of this group: use 0..2"):
        g.broadcast([np.ones(2)] * 3, root=3)
    with pytest.raises(ValueError, match="rank 1 passed shape"):
        g.broadcast([np.ones(2), np.ones(3), None])
    with pytest.raises(ValueError, match="dst=5 is not a rank"):
        g.send(np.ones(2), 0, 5)
    with pytest.raises(ValueError, match="send to a different rank"):
        g.send(np.ones(2), 1, 1)


@pytest.mark.parametrize("n", [2, 3, 6])
def test_reduce_scatter_and_all_gather_schedules(n):
    """RS: in step s rank r sends chunk (r - s - 1) mod N, so rank r ends with chunk r;
    AG: rank r forwards chunk (r - s) mod N (its own shard at step 0)."""
    rs_trace, ag_trace = [], []
    g = ProcessGroup(n)
    shards = g.reduce_scatter([np.ones((n, 2)) for _ in range(n)], trace=rs_trace)
    g.all_gather(shards, trace=ag_trace)
    assert len(rs_trace) == len(ag_trace) == n * (n - 1)
    for t in rs_trace:
        assert t.dst == (t.src + 1) % n and t.chunk == (t.src - t.step - 1) % n
    for t in ag_trace:
        assert t.dst == (t.src + 1) % n and t.chunk == (t.src - t.step) % n
    last = [t for t in rs_trace if t.step == n - 2]
    assert all(t.chunk == t.dst for t in last)  # the last message completes the receiver's chunk


def test_empty_and_integer_arrays():
    g = ProcessGroup(3)
    out = g.all_reduce([np.zeros((0, 4))] * 3)
    assert out[0].shape == (0, 4) and g.ledger[-1].bytes_sent_per_rank == (0, 0, 0)
    ints = [np.arange(7, dtype=np.int64) * (r + 1) for r in range(3)]
    out = g.all_reduce(ints)
    assert out[1].dtype == np.int64
    np.testing.assert_array_equal(out[1], np.arange(7) * 6)


def test_record_is_frozen_and_has_the_contract_fields():
    g = ProcessGroup(2)
    g.all_reduce([np.ones(4)] * 2, tag="here")
    rec = g.ledger[0]
    assert (rec.op, rec.group_size, rec.payload_bytes, rec.steps, rec.algorithm, rec.tag) == (
        "all_reduce", 2, 32, 2, "ring", "here")
    assert rec.total_bytes == 64
    with pytest.raises(AttributeError):
        rec.op = "x"


def test_group_of_size_is_the_one_rule_for_an_optional_group():
    from tpp.collectives import group_of_size

    g = ProcessGroup(3, name="x")
    assert group_of_size(g, 3, label="TP", name="tp3") is g
    new = group_of_size(None, 2, label="cp", name="cp")
    assert (new.size, new.name) == (2, "cp")
    with pytest.raises(ValueError, match="group has size 3 but TP=2: pass a ProcessGroup of "
                       "size 2 or None"):
        group_of_size(g, 2, label="TP", name="tp2")
    with pytest.raises(ValueError, match="group must be a ProcessGroup of size ep=2, got list"):
        group_of_size([g], 2, label="ep", name="ep")
