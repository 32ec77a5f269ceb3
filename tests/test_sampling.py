"""Rank-consistent sampling on the simulated TP group (tpp.serving.sampling)."""

import numpy as np
import pytest
from tpp.collectives import ProcessGroup
from tpp.serving import sampling as S

MODEL = S.init_tiny_lm()
PROMPTS = np.random.default_rng(1).integers(0, MODEL.vocab, size=(48, 4))


def run(**kw):
    kw.setdefault("n_tokens", 48)
    return S.generate(MODEL, 4, PROMPTS, **kw)


def test_ring_allreduce_gives_bitwise_equal_logits_and_no_divergence():
    g = run(allreduce="ring", rng="same")
    assert g.logits_equal_steps == g.steps and g.max_logit_diff == 0.0
    assert (S.tokens_until_divergence(g) == g.steps).all()
    assert np.nansum(g.flip_probability) == 0.0


def test_own_order_allreduce_differs_in_ulps_only():
    g = run(allreduce="own_order", rng="same")
    assert g.logits_equal_steps == 0          # the ranks' logits are never bitwise equal ...
    assert 0 < g.max_logit_diff < 1e-4        # ... but differ by a few float32 ULPs
    p = np.nanmean(g.flip_probability)
    assert 0 < p < 1e-5                       # a flip needs a draw within ULPs of a boundary


def test_two_ranks_sum_identically_in_either_order():
    # float addition is commutative: with two ranks the "own order" is the same sum
    g = S.generate(MODEL, 2, PROMPTS[:8], 16, allreduce="own_order")
    assert g.logits_equal_steps == g.steps


def test_per_rank_generators_diverge_almost_at_once():
    g = run(rng="per_rank")
    d = S.tokens_until_divergence(g)
    assert (d < g.steps).mean() > 0.9 and np.median(d) <= 3


def test_bf16_own_order_diverges_and_the_flip_probability_predicts_how_often():
    g = S.generate(MODEL, 4, PROMPTS, 96, allreduce="own_order", comm_precision="bfloat16")
    d = S.tokens_until_divergence(g)
    observed = int((d < g.steps).sum())
    predicted = float(np.nansum(g.flip_probability))  # expected number of first flips
    assert observed >= 3
    assert abs(observed - predicted) < 4 * np.sqrt(predicted) + 2


def test_sample_on_rank0_and_broadcast_never_diverges_and_is_in_the_ledger():
    g = S.generate(MODEL, 4, PROMPTS, 96, allreduce="own_order", rng="per_rank",
                   comm_precision="bfloat16", sampler="rank0_broadcast")
    assert (S.tokens_until_divergence(g) == g.steps).all()
    assert g.logits_equal_steps < g.steps     # the logits still differ: only the tokens agree
    casts = [r for r in g.group.ledger if r.op == "broadcast"]
    assert len(casts) == g.steps and all(r.tag == "sample.broadcast" for r in casts)
    assert casts[0].payload_bytes == 8 * len(PROMPTS)  # one int64 token id per sequence


def test_broken_fix_diverges():
    # the exercise's deliberate break: every rank samples with its own generator again
    g = S.generate(MODEL, 4, PROMPTS, 24, rng="per_rank", sampler="independent")
    assert (S.tokens_until_divergence(g) < g.steps).any()
    assert not [r for r in g.group.ledger if r.op == "broadcast"]


def test_one_shot_all_reduce_ledger_and_order():
    grp = ProcessGroup(3)
    xs = [np.float32([1e8]), np.float32([1.0]), np.float32([-1e8])]
    out = S.one_shot_all_reduce(grp, xs)
    # rank 0: (1e8 + 1) - 1e8 = 0; rank 1: (1 - 1e8) + 1e8 = 0; rank 2: (-1e8 + 1e8) + 1 = 1
    assert [float(o[0]) for o in out] == [0.0, 0.0, 1.0]
    rec = grp.ledger[-1]
    assert rec.algorithm == "one_shot" and rec.steps == 1
    assert rec.bytes_sent_per_rank == (8, 8, 8)


def test_round_bfloat16():
    x = np.float32([1.0 + 2**-8, 1.0 + 3 * 2**-8, 3.14159, -2.5e-3])
    assert list(S.round_bfloat16(x)) == [1.0, 1.0 + 2**-6, 3.140625, np.float32(-0.0025024414)]


def test_sample_tokens_inverse_cdf():
    logits = np.log(np.float32([[0.25, 0.25, 0.5]]))
    for u, k in ((0.0, 0), (0.24, 0), (0.26, 1), (0.74, 2), (0.999, 2)):
        assert S.sample_tokens(logits, np.array([u]), 1.0)[0] == k
    assert S.sample_tokens(logits, np.array([0.0]), 0.0)[0] == 2


def test_bad_settings_raise():
    with pytest.raises(ValueError, match="allreduce='tree'"):
        run(allreduce="tree")
    with pytest.raises(ValueError, match="tp=3 must divide n_heads=8"):
        S.generate(MODEL, 3, PROMPTS, 4)
    with pytest.raises(ValueError, match="temperature=-1"):
        S.sample_tokens(np.zeros((1, 3), np.float32), np.zeros(1), -1)


def test_flip_probability_is_the_measure_of_disagreeing_draws():
    a = np.log(np.float32([[0.5, 0.5, 1e-9]]))
    b = np.log(np.float32([[0.6, 0.4, 1e-9]]))
    # u in [0.5, 0.6): rank a picks token 1, rank b token 0; everywhere else they agree
    assert S.flip_probability([a, b], 1.0)[0] == pytest.approx(0.1, abs=1e-6)
    assert S.flip_probability([a, a, a], 1.0)[0] == 0.0
    us = np.random.default_rng(0).random(20000)
    split = np.mean([S.sample_tokens(a, u[None], 1.0)[0] != S.sample_tokens(b, u[None], 1.0)[0]
                     for u in us])
    assert split == pytest.approx(0.1, abs=0.01)


def test_custom_sampler_plugs_into_the_loop():
    def rank0_then_broadcast(group, logits, us, temperature):
        tok = S.sample_tokens(logits[0], us[0], temperature).astype(np.int64)
        return group.broadcast([tok] + [None] * (group.size - 1))

    mine = S.generate(MODEL, 4, PROMPTS[:16], 32, rng="per_rank", sampler=rank0_then_broadcast)
    ref = S.generate(MODEL, 4, PROMPTS[:16], 32, rng="per_rank", sampler="rank0_broadcast")
    assert np.array_equal(mine.tokens, ref.tokens)
    with pytest.raises(ValueError, match="returned 1 token arrays for 4 ranks"):
        S.generate(MODEL, 4, PROMPTS[:4], 2, sampler=lambda g, lg, u, t: [np.zeros(4)])


def test_generate_settings_in_two_workers_equals_one_after_another_bit_for_bit():
    settings = {"ring": dict(), "bf16": dict(allreduce="own_order", comm_precision="bfloat16"),
                "fix": dict(allreduce="own_order", rng="per_rank", sampler="rank0_broadcast")}
    par = S.generate_settings(MODEL, 4, PROMPTS[:16], 24, settings, processes=2)
    assert list(par) == list(settings)
    for name, kw in settings.items():
        one = S.generate(MODEL, 4, PROMPTS[:16], 24, **kw)
        g = par[name]
        assert np.array_equal(g.tokens, one.tokens) and g.settings == one.settings
        assert np.array_equal(g.flip_probability, one.flip_probability, equal_nan=True)
        assert (g.logits_equal_steps, g.max_logit_diff) == (one.logits_equal_steps,
                                                            one.max_logit_diff)
        assert g.group.ledger == one.group.ledger
    with pytest.raises(ValueError, match="sampler by name"):
        S.generate_settings(MODEL, 4, PROMPTS, 2, {"own": dict(sampler=lambda *a: a)})
    with pytest.raises(ValueError, match="processes"):
        S.generate_settings(MODEL, 4, PROMPTS, 2, settings, processes=0)


def test_gelu_of_float32_uses_the_correctly_rounded_cube_and_float64_keeps_pow():
    from fractions import Fraction

    from tpp.tensor_parallel.activations import _C, _K, gelu

    x32 = np.random.default_rng(3).standard_normal(40000).astype(np.float32) * 3
    x = x32.astype(np.float64)
    cube = np.array([float(Fraction(v) ** 3) for v in x])  # the exact cube, rounded once
    assert np.array_equal(gelu(x32), 0.5 * x * (1.0 + np.tanh(_C * (x + _K * cube))))
    assert np.array_equal(gelu(x), 0.5 * x * (1.0 + np.tanh(_C * (x + _K * x**3))))
