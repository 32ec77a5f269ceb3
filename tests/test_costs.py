"""Tests of tpp.costs (memory, TP communication, FLOPs) and tpp.symbolic.tp_costs."""

from fractions import Fraction

import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from tpp.costs import flops, memory, tp
from tpp.models import model
from tpp.symbolic import tp_costs as S


@st.composite
def layer_shapes(draw):
    t = draw(st.sampled_from([1, 2, 3, 4, 8]))
    a = t * draw(st.integers(1, 4))
    dh = draw(st.integers(1, 16))
    s = t * draw(st.integers(1, 64))
    b = draw(st.integers(1, 4))
    return s, b, a * dh, a, t


@settings(max_examples=80, deadline=None)
@given(layer_shapes(), st.sampled_from(["none", "selective", "full"]))
def test_generalised_count_equals_korthikanti(shape, recompute):
    s, b, h, a, t = shape
    if t == 1:
        assert memory.activation_bytes_per_layer(s, b, h, a, 1, False, recompute) == \
            memory.korthikanti_activation_bytes(s, b, h, a, 1, "none", recompute)
    assert memory.activation_bytes_per_layer(s, b, h, a, t, False, recompute) == \
        memory.korthikanti_activation_bytes(s, b, h, a, t, "tp", recompute)
    assert memory.activation_bytes_per_layer(s, b, h, a, t, True, recompute) == \
        memory.korthikanti_activation_bytes(s, b, h, a, t, "tp_sp", recompute)


def test_korthikanti_gpt3_by_hand():
    # GPT-3 175B layer, s=2048, b=1, h=12288, a=96 (Korthikanti et al. 2022, Table 3 model)
    s, b, h, a = 2048, 1, 12288, 96
    sbh = s * b * h
    assert memory.korthikanti_activation_bytes(s, b, h, a) == sbh * 34 + 5 * a * s * s * b
    # TP 8: 10 sbh + 24 sbh / 8 + 5 a s^2 b / 8
    assert memory.korthikanti_activation_bytes(s, b, h, a, 8, "tp") == \
        10 * sbh + 3 * sbh + Fraction(5 * a * s * s * b, 8)
    assert memory.korthikanti_activation_bytes(s, b, h, a, 8, "tp_sp", "selective") == \
        Fraction(34 * sbh, 8)


def test_sp_saves_exactly_the_replicated_part():
    s, b, h, a, t = 64, 2, 64, 8, 4
    tp_only = memory.activation_bytes_per_layer(s, b, h, a, t, False)
    tp_sp = memory.activation_bytes_per_layer(s, b, h, a, t, True)
    assert tp_only - tp_sp == 10 * s * b * h * (t - 1) // t


def test_gqa_kv_replication_in_memory_terms():
    # 4 KV heads, TP 8: each rank keeps 1 whole KV head (not 1/2)
    terms = memory.activation_terms_per_layer(16, 1, 64, 8, 8, n_kv_heads=4)
    assert terms["k"] == 2 * 16 * 1 * 8  # one head of width 8
    # 24 heads, 8 KV heads, TP 12: 12 ranks cannot share 8 KV heads evenly
    with pytest.raises(ValueError, match="TP=12 exceeds n_kv_heads=8 and is not a multiple of "
                       "it, so KV heads cannot be replicated evenly: use TP=8 or a multiple"):
        memory.activation_terms_per_layer(16, 1, 96, 24, 12, n_kv_heads=8)
    with pytest.raises(ValueError, match="a=12 heads must be a multiple of n_kv_heads=8.*change "
                                         "n_kv_heads"):
        memory.activation_terms_per_layer(16, 1, 96, 12, 4, n_kv_heads=8)


def test_invalid_memory_configs():
    with pytest.raises(ValueError, match="pass t=1"):
        memory.korthikanti_activation_bytes(8, 1, 8, 2, 2, "none")
    with pytest.raises(ValueError, match="scheme='tp_x': use one of none, tp, tp_sp"):
        memory.korthikanti_activation_bytes(8, 1, 8, 2, 2, "tp_x")
    with pytest.raises(ValueError, match="TP=3 must divide the number of heads a=4"):
        memory.activation_bytes_per_layer(6, 1, 8, 4, 3)
    with pytest.raises(ValueError, match="TP=4 to divide s=6"):
        memory.activation_bytes_per_layer(6, 1, 8, 4, 4, sp=True)


def test_layer_params_per_rank():
    m = model("llama2_70b")
    d, f = 8192, 28672
    assert memory.layer_params_per_rank(m, 1) == m.params_per_layer
    # TP 8: Q,O 2*d*d/8, K,V 2*d*1024/8 (one KV head each), MLP 3*d*f/8, norms 2*d replicated
    assert memory.layer_params_per_rank(m, 8) == 2 * d * d // 8 + 2 * d * 128 + 3 * d * f // 8 \
        + 2 * d
    # TP 16 replicates KV: K,V one head of 128 each on every rank
    assert memory.layer_params_per_rank(m, 16, replicate_kv=True) == \
        2 * d * d // 16 + 2 * d * 128 + 3 * d * f // 16 + 2 * d
    with pytest.raises(ValueError, match="lower TP to 8 or pass replicate_kv=True"):
        memory.layer_params_per_rank(m, 16)
    assert memory.layer_weight_bytes_per_rank(m, 8) == 2 * memory.layer_params_per_rank(m, 8)


def test_tp_volume_llama7b_by_hand():
    # Seed 1, Sec. 2.3: B=8, T=4096, d=4096, bf16, 32 layers, TP 8
    payload = 8 * 4096 * 4096 * 2
    assert payload == 268_435_456  # 268 MB (256 MiB), not "~130 MB"
    assert tp.tp_payload_bytes(8, 4096, 4096) == payload
    assert tp.tp_collectives_per_layer("forward") == {"all_reduce": 2}
    assert tp.tp_collectives_per_layer("step") == {"all_reduce": 4}
    per_step = tp.tp_bytes_sent_per_rank(8, 4096, 4096, 8, 32, "step")
    assert per_step == 128 * Fraction(2 * 7, 8) * payload
    fwd = tp.tp_bytes_sent_per_rank(8, 4096, 4096, 8, 32, "forward")
    assert fwd == 64 * Fraction(14, 8) * payload


@pytest.mark.parametrize("t", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("phase", ["forward", "backward", "step"])
def test_sp_moves_the_same_bytes(t, phase):
    args = (2, 16, 24, t, 3, phase)
    tp_bytes = tp.tp_bytes_sent_per_rank(*args, sp=False)
    sp_bytes = tp.tp_bytes_sent_per_rank(*args, sp=True, regather=False)
    assert tp_bytes == sp_bytes
    # the backward re-gather of the saved shards adds 2 all-gathers per layer
    extra = tp.tp_bytes_sent_per_rank(*args, sp=True) - sp_bytes
    n_bwd = 0 if phase == "forward" else 1
    assert extra == n_bwd * 3 * 2 * Fraction(t - 1, t) * tp.tp_payload_bytes(2, 16, 24)


def test_full_recompute_adds_forward_collectives():
    assert tp.tp_collectives_per_layer("step", recompute="full") == {"all_reduce": 6}
    assert tp.tp_collectives_per_layer("step", sp=True, recompute="full") == \
        {"all_gather": 6, "reduce_scatter": 6}


def test_tp_comm_time_by_hand():
    # one all-reduce of 268435456 bytes over 8 ranks at 450e9 B/s, alpha = 2us:
    # 14 steps * 2e-6 + 1.75 * 268435456 / 450e9
    t = tp.tp_comm_time(8, 4096, 4096, 8, 450e9, 2e-6, phase="forward")
    assert t == pytest.approx(2 * (14 * 2e-6 + 1.75 * 268435456 / 450e9), rel=1e-12)
    assert tp.tp_comm_time(8, 4096, 4096, 1, 450e9, 2e-6) == 0.0
    with pytest.raises(ValueError, match="bandwidth=0 must be > 0 bytes/s"):
        tp.tp_comm_time(1, 1, 1, 2, 0)


def test_ring_factor_and_steps():
    assert tp.ring_factor("all_reduce", 8) == Fraction(7, 4)
    assert tp.ring_factor("all_gather", 4) == Fraction(3, 4)
    assert tp.ring_steps("all_reduce", 8) == 14
    with pytest.raises(ValueError, match="unknown op 'gather': use one of all_reduce"):
        tp.ring_steps("gather", 8)


def test_training_layer_time_and_crossover():
    m = model("llama2_7b")
    fl = flops.training_flops_per_layer(m, 8, 4096)
    times = {t: tp.tp_training_layer_time(8, 4096, 4096, t, fl, 989e12, 25e9).total
             for t in (1, 2, 4, 8)}
    # over 25 GB/s the per-layer comm of TP2 (4 * 1.0 * 268 MB / 25 GB/s = 43 ms) exceeds the
    # compute saved (half of ~0.05 s), so TP1 is best
    assert tp.tp_crossover_degree(times) == 1
    times_nv = {t: tp.tp_training_layer_time(8, 4096, 4096, t, fl, 989e12, 450e9).total
                for t in (1, 2, 4, 8)}
    assert tp.tp_crossover_degree(times_nv) > 1
    with pytest.raises(ValueError, match="times is empty: pass {tp_degree: seconds}"):
        tp.tp_crossover_degree({})


def test_flops_by_hand():
    m = model("llama2_7b")
    d, f = 4096, 11008
    assert flops.layer_matmul_params(m) == 4 * d * d + 3 * d * f
    assert flops.forward_flops_per_layer(m, 1, 10) == 2 * 10 * (4 * d * d + 3 * d * f) \
        + 4 * 100 * d
    assert flops.training_flops_per_layer(m, 1, 10) == 3 * flops.forward_flops_per_layer(m, 1, 10)
    assert flops.decode_flops_per_token(m, 70e9) == 140e9


# ---- symbolic == numeric ---------------------------------------------------------------------
@pytest.mark.parametrize("scheme,sp_on,tp_on", [("none", False, False), ("tp", False, True),
                                                 ("tp_sp", True, True)])
@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_symbolic_terms_sum_to_korthikanti(scheme, sp_on, tp_on, recompute):
    assert sp.simplify(S.activation_sum(sp_on, recompute, tp_on)
                       - S.korthikanti(scheme, recompute)) == 0


@pytest.mark.parametrize("scheme", ["none", "tp", "tp_sp"])
def test_symbolic_equals_numeric_memory(scheme):
    vals = dict(s=128, b=2, h=96, a=12, t=1 if scheme == "none" else 4)
    sym = S.korthikanti(scheme).subs({getattr(S, k): v for k, v in vals.items()})
    num = memory.korthikanti_activation_bytes(**vals, scheme=scheme)
    assert sp.Rational(num.numerator, num.denominator) == sym


def test_symbolic_volumes():
    assert S.sp_equals_tp() == 0
    vals = {S.b: 8, S.s: 4096, S.h: 4096, S.e: 2, S.t: 8, S.L: 32}
    num = tp.tp_bytes_sent_per_rank(8, 4096, 4096, 8, 32, "step")
    assert S.tp_bytes_per_step().subs(vals) == sp.Rational(num.numerator, num.denominator)
    assert sp.simplify(S.tp_bytes_per_step() - 8 * S.L * (S.t - 1) / S.t * S.b * S.s * S.h
                       * S.e) == 0


def test_training_crossover_bandwidth_flips_the_order():
    m = model("llama2_7b")
    fl = flops.training_flops_per_layer(m, 8, 4096)
    bw = tp.tp_crossover_bandwidth(8, 4096, 4096, 4, 8, fl, 989e12)
    # by hand: V(t) = 4 * 2(t-1)/t * P, C = fl / 989e12
    p = 8 * 4096 * 4096 * 2
    c = fl / 989e12
    assert bw == pytest.approx((4 * 1.75 * p - 4 * 1.5 * p) / (c / 4 - c / 8), rel=1e-12)
    for f, winner in ((0.99, 4), (1.01, 8)):
        times = {t: tp.tp_training_layer_time(8, 4096, 4096, t, fl, 989e12, bw * f).total
                 for t in (4, 8)}
        assert tp.tp_crossover_degree(times) == winner
    with pytest.raises(ValueError, match="need t_high > t_low >= 1, got t_low=8, t_high=4"):
        tp.tp_crossover_bandwidth(8, 4096, 4096, 8, 4, fl, 989e12)


def test_kv_heads_per_rank_is_attention_splits_rule():
    """One rule, one place: memory.kv_heads_per_rank answers (and fails) exactly as
    attention_split with KV replication, over a grid of KV heads and TP degrees."""
    from tpp.tensor_parallel.attention import attention_split

    for n_kv in (1, 2, 3, 4, 8, 12):
        for t in range(1, 33):
            n_heads = 96
            try:
                want = attention_split(n_heads, n_kv, t, replicate_kv=True).kv_heads_per_rank
            except ValueError as err:
                with pytest.raises(ValueError) as got:
                    memory.kv_heads_per_rank(n_kv, t, n_heads=n_heads)
                assert str(got.value) == str(err)
                continue
            assert memory.kv_heads_per_rank(n_kv, t, n_heads=n_heads) == want
            assert memory.kv_heads_per_rank(n_kv, t) == want


def test_kv_heads_per_rank_delegates(monkeypatch):
    """A change to attention_split's rule reaches memory.kv_heads_per_rank (no second copy)."""
    import tpp.costs.memory as mem
    from tpp.tensor_parallel.attention import AttentionSplit

    monkeypatch.setattr(mem, "attention_split",
                        lambda h, kv, t, replicate_kv=False: AttentionSplit(t, h, kv, h // t, 7, 1))
    assert mem.kv_heads_per_rank(8, 2) == 7
