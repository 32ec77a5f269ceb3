"""Serving layouts: memory fit, prefill vs decode, the autoregressive pipeline."""

import pytest
from tpp import serving
from tpp.hardware import GB
from tpp.serving import deployment as D

SEED = dict(n_params=70e9)  # the serving lesson's "70B in fp16 is 140 GB"


def test_memory_first_70b_on_h100():
    # 140 GB of weights on one 80 GB GPU: does not fit, by 60 GB; TP2 holds 70 GB and fits
    tp1 = serving.decode_step("llama2_70b", 1, 16, **SEED)
    assert not tp1.fits and tp1.overflow_bytes == 60 * GB
    tp2 = serving.decode_step("llama2_70b", 2, 16, **SEED)
    assert tp2.fits and tp2.overflow_bytes == 0
    # the KV cache counts too: 512 sequences of 1000 tokens, 8 KV heads of 128, 80 layers, bf16
    kv = 512 * 1000 * 2 * 80 * 8 * 128 * 2
    tp2_long = serving.decode_step("llama2_70b", 2, 512, context_len=1000, **SEED)
    assert tp2_long.kv_bytes_per_gpu == kv // 2
    assert not tp2_long.fits and tp2_long.overflow_bytes == 70 * GB + kv // 2 - 80 * GB


def test_layout_memory_is_weights_over_tp_pp_plus_the_stage_cache():
    lay = D.serving_layout("llama2_70b", tp=8, pp=2, batch=512, microbatches=2,
                           context_len=1000, **SEED)
    kv_all = 512 * 1000 * 2 * 80 * 8 * 128 * 2
    assert lay.memory_bytes_per_gpu == 70e9 * 2 / 16 + kv_all / 16
    assert lay.fits and lay.gpus == 16
    one = D.serving_layout("llama2_70b", tp=1, batch=16, **SEED)
    assert not one.fits and one.overflow_bytes == 60 * GB


def test_dp_multiplies_throughput_not_latency_or_memory():
    a = D.serving_layout("llama2_70b", tp=8, batch=16, **SEED)
    b = D.serving_layout("llama2_70b", tp=8, dp=4, batch=16, **SEED)
    assert b.tokens_per_second == pytest.approx(4 * a.tokens_per_second)
    assert b.token_latency == a.token_latency
    assert b.memory_bytes_per_gpu == a.memory_bytes_per_gpu and b.gpus == 32


def test_decode_rounds_steady_state():
    # m < p: a group waits for its own token to leave the last stage -> p t_stage per round
    r = D.decode_rounds(4, 2, 1.0, 0.0, tokens=6)
    assert r[-1] - r[-2] == 4.0
    # m >= p: every stage busy m t_stage per round, the p2p hops hidden
    r = D.decode_rounds(4, 6, 1.0, 0.1, tokens=6)
    assert r[-1] - r[-2] == pytest.approx(6.0)
    # a single pass (one token) of m groups through p stages: (m + p - 1) t_stage (GPipe fill)
    assert D.decode_rounds(4, 6, 1.0, 0.0, tokens=1) == [9.0]


def test_pp_does_not_shorten_the_token_latency():
    tp8 = D.serving_layout("llama2_70b", tp=8, batch=16, **SEED)
    pp2 = D.serving_layout("llama2_70b", tp=8, pp=2, batch=16, microbatches=2, **SEED)
    assert pp2.memory_bytes_per_gpu < tp8.memory_bytes_per_gpu / 1.9
    assert pp2.token_latency >= tp8.token_latency * 0.95
    lone = D.serving_layout("llama2_70b", tp=8, pp=2, batch=16, microbatches=1, **SEED)
    assert lone.bubble_fraction == pytest.approx(0.5, abs=0.01)  # (p - m)/p, plus the hop


def test_prefill_compute_bound_decode_memory_bound():
    p = D.prefill_step("llama2_70b", 8, 1, 2048)
    assert p.compute_bound and p.intensity > 1000
    d = serving.decode_step("llama2_70b", 8, 16, compute_model="roofline")
    assert not d.compute_bound and D.decode_intensity(d) == pytest.approx(16, rel=1e-9)


def test_bad_layouts_raise():
    with pytest.raises(ValueError, match="pp=3 must divide n_layers=80"):
        D.serving_layout("llama2_70b", tp=8, pp=3)
    with pytest.raises(ValueError, match="microbatches=3 must divide batch=16"):
        D.serving_layout("llama2_70b", tp=8, pp=2, batch=16, microbatches=3)


def test_prefill_allreduce_and_flops_by_hand():
    p = D.prefill_step("llama2_70b", 8, 1, 128)
    assert p.allreduce_time == pytest.approx(2 * 80 * (2 * 7 / 8) * 128 * 8192 * 2 / 450e9)
    assert D.prefill_step("llama2_70b", 1, 1, 128).allreduce_time == 0.0
    # FLOPs: 2 tokens x matmul weights per layer + 4 b s^2 h attention scores, over TP ranks
    d, dkv, ff = 8192, 8 * 128, 28672
    per_layer = 2 * 128 * (2 * d * d + 2 * d * dkv + 3 * d * ff) + 4 * 128 * 128 * d
    assert p.flops_per_gpu == pytest.approx(80 * per_layer / 8)
