"""Rank-local programs on simulated ranks (tpp.collectives.spmd): results and ledgers equal the
list-of-arrays API, rendezvous errors are raised (never hang), and bad input says what to do."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from tpp.collectives import Communicator, ProcessGroup, SimulatedCommunicator, spmd
from tpp.tensor_parallel import MLP, ShardedMLP, shard_columns, shard_rows
from tpp.tensor_parallel.mlp import sharded_mlp_backward, sharded_mlp_forward


def _all_ops(x, *, comm):
    return (comm.all_reduce(x, tag="ar"), comm.reduce_scatter(x, axis=0),
            comm.all_gather(x, axis=1), comm.all_to_all(x, axis=0),
            comm.broadcast(x if comm.rank == 1 else None, root=1))


@pytest.mark.parametrize("n", [2, 3, 4])
def test_each_collective_equals_the_process_group(n):
    rng = np.random.default_rng(n)
    xs = [rng.standard_normal((2 * n, 3)) for _ in range(n)]
    group = ProcessGroup(n)
    outs = spmd(_all_ops, n, [(x,) for x in xs], group=group)
    ref = ProcessGroup(n)
    expect = [ref.all_reduce(xs, tag="ar"), ref.reduce_scatter(xs, axis=0),
              ref.all_gather(xs, axis=1), ref.all_to_all(xs, axis=0),
              ref.broadcast([None, xs[1]] + [None] * (n - 2), root=1)]
    for k, exp in enumerate(expect):
        for r in range(n):
            np.testing.assert_array_equal(outs[r][k], exp[r])
    assert group.ledger == ref.ledger          # recorded once per collective, in program order
    assert [rec.op for rec in group.ledger] == [
        "all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast"]


def test_simulated_communicator_implements_the_interface():
    seen = spmd(lambda *, comm: isinstance(comm, Communicator) and comm.size, 3)
    assert seen == [3, 3, 3]
    assert isinstance(spmd(lambda *, comm: comm, 2)[1], SimulatedCommunicator)


@pytest.mark.parametrize("act", ["gelu", "swiglu"])
def test_per_rank_mlp_program_equals_the_wrapper_and_the_reference(act):
    rng = np.random.default_rng(7)
    tp, d, d_ff = 4, 6, 16
    w1, w2 = rng.standard_normal((d, d_ff)), rng.standard_normal((d_ff, d))
    w3 = rng.standard_normal((d, d_ff)) if act == "swiglu" else None
    x, dy = rng.standard_normal((5, d)), rng.standard_normal((5, d))
    w1s, w2s = shard_columns(w1, tp), shard_rows(w2, tp)
    w3s = shard_columns(w3, tp) if w3 is not None else [None] * tp

    def step(x, a, b, c, dy, *, comm):
        y, cache = sharded_mlp_forward(x, a, b, c, comm=comm)
        return y, sharded_mlp_backward(dy, cache, comm=comm)

    group = ProcessGroup(tp)
    outs = spmd(step, tp, [(x, w1s[r], w2s[r], w3s[r], dy) for r in range(tp)], group=group)
    wrap = ShardedMLP(w1, w2, tp, activation=act, w3=w3)
    y = wrap.forward(x)
    dx = wrap.backward(dy)
    ref = MLP(w1, w2, activation=act, w3=w3)
    y_ref, dx_ref = ref.forward(x), ref.backward(dy)
    for r in range(tp):
        np.testing.assert_array_equal(outs[r][0], y)
        np.testing.assert_array_equal(outs[r][1][0], dx)
        np.testing.assert_array_equal(outs[r][1][1]["w1"], wrap.shard_grads["w1"][r])
    np.testing.assert_allclose(y, y_ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dx, dx_ref, rtol=1e-12, atol=1e-12)
    assert group.ledger == wrap.group.ledger
    assert [rec.tag for rec in group.ledger] == ["g.forward", "f.backward"]


def test_negative_controls_as_variants():
    rng = np.random.default_rng(3)
    T, d, d_ff = 4, 4, 8
    w1, w2 = rng.standard_normal((d, d_ff)), rng.standard_normal((d_ff, d))
    x, dy = rng.standard_normal((3, d)), rng.standard_normal((3, d))
    ref = MLP(w1, w2)
    ref.forward(x)
    dx_ref = ref.backward(dy)
    both = ShardedMLP(w1, w2, T, variant="all-reduce both ways")
    both.forward(x)
    np.testing.assert_allclose(both.backward(dy), T * dx_ref, rtol=1e-12)
    np.testing.assert_allclose(both.grads["w1"], T * ref.grads["w1"], rtol=1e-12)
    assert [r.tag for r in both.group.ledger] == ["g.forward", "g.backward (wrong)", "f.backward"]
    nof = ShardedMLP(w1, w2, T, variant="no f")
    nof.forward(x)
    dx0 = nof.backward(dy)
    np.testing.assert_array_equal(dx0, nof.dx_partials[0])
    np.testing.assert_allclose(sum(nof.dx_partials), dx_ref, rtol=1e-12, atol=1e-13)
    assert np.linalg.norm(dx0 - dx_ref) > 0.1 * np.linalg.norm(dx_ref)
    with pytest.raises(ValueError, match="unknown variant 'no g': use one of"):
        ShardedMLP(w1, w2, T, variant="no g")


def test_a_rank_calling_a_different_collective_is_an_error_on_every_rank():
    def prog(*, comm):
        x = np.ones(4)
        return comm.all_gather(x) if comm.rank == 1 else comm.all_reduce(x)

    with pytest.raises(ValueError, match="rank 1 called all_gather.*but rank 0 called all_reduce"):
        spmd(prog, 3)


def test_a_rank_that_skips_a_collective_times_out_instead_of_hanging():
    def prog(*, comm):
        if comm.rank != 2:
            comm.all_reduce(np.ones(2))
        return comm.rank

    with pytest.raises(TimeoutError, match=r"waited 0.5 s in all_reduce for rank\(s\) \[2\]"):
        spmd(prog, 3, timeout=0.5)


def test_a_failing_rank_releases_the_others_and_its_error_is_raised():
    seen: list[type] = []  # what interrupted the waiting ranks: a release, not their timeout

    def prog(*, comm):
        if comm.rank == 0:
            raise KeyError("rank 0 broke")
        try:
            comm.all_reduce(np.ones(2))
        except BaseException as exc:
            seen.append(type(exc))
            raise
        return comm.rank

    with pytest.raises(KeyError, match="rank 0 broke"):
        spmd(prog, 4, timeout=30)
    assert len(seen) == 3 and not any(issubclass(t, TimeoutError) for t in seen), seen


def test_shape_errors_reach_every_rank():
    def prog(*, comm):
        return comm.all_reduce(np.ones(2 + comm.rank))

    with pytest.raises(ValueError, match="rank 1 has shape"):
        spmd(prog, 2)


def test_subgroups_have_their_own_ledgers():
    def prog(*, comm):
        sub = comm.new_subgroups([[0, 1], [2, 3]], name="pair")
        return sub.rank, sub.all_reduce(np.array([float(comm.rank)]))

    group = ProcessGroup(4)
    outs = spmd(prog, 4, group=group)
    assert [o[0] for o in outs] == [0, 1, 0, 1]
    assert [float(o[1][0]) for o in outs] == [1.0, 1.0, 5.0, 5.0]


@pytest.mark.parametrize(("size", "args", "msg"), [
    (0, None, "size=0 must be a positive integer"),
    (2, [()], "args has 1 entries for size=2: pass one tuple"),
    (2, np.zeros(2), "args must be a list with one tuple"),
])
def test_bad_spmd_arguments(size, args, msg):
    with pytest.raises(ValueError, match=msg):
        spmd(lambda *, comm: None, size, args)
    with pytest.raises(ValueError, match="group has size 3 but size=2"):
        spmd(lambda *, comm: None, 2, group=ProcessGroup(3))


def test_distributed_says_how_to_install_torch_when_it_is_missing(monkeypatch):
    import tpp.distributed as td

    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "torch.distributed", None)
    assert td.torch_available() is False
    with pytest.raises(ImportError, match=r'pip install -e "\.\[torch\]".*torch==2\.13\.0'):
        td.spmd(lambda *, comm: None, 2)
    with pytest.raises(ImportError, match="tpp.distributed needs PyTorch"):
        td.World(2)
