"""tpp.data_parallel and tpp.costs.zero: a ZeRO step equals one device, ledger == closed forms."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tpp.costs import zero
from tpp.data_parallel import MLP, Adam, DataParallel, reference_step


def _reference(mlp: MLP, x, y, steps: int, adam: Adam) -> list[np.ndarray]:
    units = [u.copy() for u in mlp.init_units]
    opt = [(np.zeros(u.size), np.zeros(u.size)) for u in units]
    for s in range(1, steps + 1):
        units, opt = reference_step(mlp, units, opt, x, y, adam, s)
    return units


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 6), min_size=2, max_size=4),
    dp=st.integers(1, 8),
    stage=st.sampled_from(zero.STAGES),
    m=st.integers(1, 3),
    rows=st.integers(1, 2),
    steps=st.integers(1, 3),
    seed=st.integers(0, 10**6),
)
def test_zero_step_equals_one_device_and_ledger_equals_closed_form(
    sizes, dp, stage, m, rows, steps, seed
):
    mlp = MLP(sizes, seed=seed)
    rng = np.random.default_rng(seed + 1)
    b = dp * m * rows
    x, y = rng.normal(size=(b, sizes[0])), rng.normal(size=(b, sizes[-1]))
    adam = Adam(lr=0.05)
    ref = _reference(mlp, x, y, steps, adam)
    run = DataParallel(mlp, dp, stage, adam, microbatches=m)
    for _ in range(steps):
        run.step(x, y)
    for r in range(dp):  # every rank sees the one-device weights
        for a, e in zip(run.full_weights(r), ref, strict=True):
            np.testing.assert_allclose(a, e, rtol=1e-12, atol=1e-13)
    expected = steps * sum(zero.dp_bytes_per_rank(n, dp, stage, "fp64", m)
                           for n in mlp.unit_params())
    assert run.group.ledger_bytes_per_rank() == (expected,) * dp
    counts: dict[str, int] = {}
    for rec in run.group.ledger:
        counts[rec.op] = counts.get(rec.op, 0) + 1
    want = {op: c * steps * mlp.n_layers for op, c in zero.dp_collectives(stage, m).items()}
    assert counts == want
    for r in range(dp):  # memory held between steps == ZeRO's closed form (K = 3 x 8 bytes)
        held = run.state_bytes(r)
        terms = [zero.model_state_terms(n, dp, stage, 8, 8, 24) for n in mlp.unit_params()]
        assert held == {k: sum(t[k] for t in terms) for k in held}


def test_weights_change_and_stage_matters():
    # a negative control: the step really trains, and stages differ in bytes, not in results
    mlp = MLP([4, 3, 2], seed=3)
    x = np.arange(32.0).reshape(8, 4) / 10
    y = np.ones((8, 2))
    runs = [DataParallel(mlp, 4, s) for s in zero.STAGES]
    for run in runs:
        run.step(x, y)
    assert not np.allclose(runs[0].full_weights()[0], mlp.init_units[0])
    sent = [run.group.ledger_bytes_per_rank()[0] for run in runs]
    assert sent[0] == sent[1] == sent[2] < sent[3]
    assert sent[3] * 2 == sent[0] * 3  # ZeRO-3 sends 1.5x plain DP with one microbatch


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 10**12), dp=st.integers(1, 4096))
def test_model_state_bytes_closed_form(n, dp):
    s = -(-n // dp)
    assert zero.model_state_bytes(n, dp, 0) == 16 * n
    assert zero.model_state_bytes(n, dp, 1) == 4 * n + 12 * s
    assert zero.model_state_bytes(n, dp, 2) == 2 * n + 14 * s
    assert zero.model_state_bytes(n, dp, 3) == 16 * s
    assert [zero.model_state_bytes(n, dp, k) for k in zero.STAGES] == sorted(
        (zero.model_state_bytes(n, dp, k) for k in zero.STAGES), reverse=True)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 10**12), dp=st.integers(1, 4096), m=st.integers(1, 64))
def test_dp_bytes_closed_form(n, dp, m):
    p = -(-n // dp) * dp * 2  # padded payload in bf16 bytes
    assert zero.dp_bytes_per_rank(n, dp, 0) * dp == 2 * (dp - 1) * p
    assert zero.dp_bytes_per_rank(n, dp, 1, microbatches=m) * dp == 2 * (dp - 1) * p
    assert zero.dp_bytes_per_rank(n, dp, 2, microbatches=m) * dp == (m + 1) * (dp - 1) * p
    assert zero.dp_bytes_per_rank(n, dp, 3, microbatches=m) * dp == 3 * m * (dp - 1) * p


def test_zero_paper_headline_example():
    # Rajbhandari et al. 2020, Fig. 1: 7.5B parameters, N_d = 64, K = 12:
    # 120 GB baseline, 31.4 GB (P_os), 16.6 GB (P_os+g), 1.88 GB (P_os+g+p)
    got = [zero.model_state_bytes(7_500_000_000, 64, k) / 1e9 for k in zero.STAGES]
    assert [round(g, 2) for g in got] == [120.0, 31.41, 16.64, 1.88]


@pytest.mark.parametrize("call, message", [
    (lambda: zero.model_state_bytes(10, 2, 4), "ZeRO stage=4"),
    (lambda: zero.model_state_bytes(10, 2, True), "ZeRO stage=True"),
    (lambda: zero.model_state_bytes(0, 2, 1), "n_params=0 must be an int >= 1"),
    (lambda: zero.model_state_bytes(10, 0, 1), "dp=0 must be an int >= 1"),
    (lambda: zero.model_state_bytes(10, 2, 1, param_bytes=-1), "param_bytes=-1"),
    (lambda: zero.dp_bytes_per_rank(10, 2, 3, microbatches=0), "microbatches=0"),
    (lambda: zero.dp_bytes_per_rank(1, 2, 3, dtype="int4"), "fractional byte count"),
    (lambda: zero.dp_bytes_per_rank(3, 2, 0, dtype="fp7"), "unknown dtype"),
    (lambda: DataParallel(MLP([2, 2]), 2, 5), "ZeRO stage=5"),
    (lambda: DataParallel(MLP([2, 2]), 0, 1), "size=0"),
    (lambda: DataParallel(MLP([2, 2]), 2, 1, microbatches=0), "microbatches=0"),
    (lambda: MLP([2]), "give >= 2 positive int widths"),
    (lambda: DataParallel(MLP([2, 2]), 2, 1).step(np.zeros((3, 2)), np.zeros((3, 2))),
     "multiple of 2"),
    (lambda: DataParallel(MLP([2, 2]), 2, 1).step(np.zeros((4, 3)), np.zeros((4, 2))),
     "x must be"),
])
def test_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()
