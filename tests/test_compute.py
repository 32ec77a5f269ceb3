"""tpp.costs.compute: the kernel-level roofline the planner times layers with."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tpp import hardware, models
from tpp.costs import compute as cc
from tpp.costs import flops as cf

A100 = hardware.gpu("a100_sxm_80gb")
H100 = hardware.gpu("h100_sxm")


@settings(max_examples=200, deadline=None)
@given(m=st.integers(1, 20000), n=st.integers(1, 20000), k=st.integers(1, 20000),
       gpu=st.sampled_from([A100, H100]))
def test_gemm_never_beats_either_roof(m, n, k, gpu):
    t = cc.gemm_time(m, n, k, gpu)
    assert t >= 2 * m * n * k / gpu.matmul_flops_bf16
    assert t >= 2 * (m * k + k * n + m * n) / gpu.achievable_memory_bandwidth
    assert cc.gemm_time(m + 256, n, k, gpu) >= t  # more rows never take less time


def test_wave_quantization_one_tile_too_many_costs_a_wave():
    # exactly one wave of 256 x 128 tiles on the SMs, then one row more: every tile shape
    # now needs a partial extra wave (128 x 128 tiles: 3 waves of half the area = 1.5x)
    assert H100.sms == 12 * 11
    m, n, k = 256 * 12, 128 * 11, 8192
    one = cc.gemm_time(m, n, k, H100) - cc.KERNEL_LAUNCH
    more = cc.gemm_time(m + 1, n, k, H100) - cc.KERNEL_LAUNCH
    assert 2 * m * n * k / one == pytest.approx(H100.matmul_flops_bf16)
    assert more == pytest.approx(1.5 * one, rel=0.01)


def test_large_square_gemm_runs_at_the_measured_matmul_rate():
    n = 16384
    t = cc.gemm_time(n, n, n, H100)
    assert 2 * n**3 / t == pytest.approx(H100.matmul_flops_bf16, rel=0.02)


def test_matrix_vector_is_memory_bound():
    n = 32768
    t = cc.gemm_time(1, n, n, H100) - cc.KERNEL_LAUNCH
    assert t == pytest.approx(2 * (n * n + 2 * n) / H100.achievable_memory_bandwidth)


def test_layer_gemm_flops_equal_the_flop_count():
    m = models.model("llama3_70b")
    tokens = 4096
    gemm = sum(2 * a * b * c for a, b, c in cc.layer_gemms(m, tokens, 1))
    attn = 4 * tokens * tokens * m.d_model
    assert gemm + attn == cf.forward_flops_per_layer(m, 1, tokens)


def test_layer_time_shapes():
    m = models.model("llama3_405b")
    lt = cc.layer_time(m, 1, 8192, 8, H100)
    assert 1.9 * lt.gemm_f < lt.gemm_b < 2.1 * lt.gemm_f  # dgrad + wgrad
    assert lt.backward > lt.forward > 0
    # FlashAttention-3 is faster than -2 on Hopper; eager materialises the scores
    f3 = cc.layer_time(m, 1, 8192, 8, H100, attention="flash3")
    assert f3.attention_f < lt.attention_f
    eager = cc.layer_time(m, 1, 8192, 8, H100, attention="eager")
    assert eager.elementwise_f > lt.elementwise_f
    # CP halves the query tokens: the weight GEMMs take about half
    half = cc.layer_time(m, 1, 8192, 8, H100, cp=2)
    assert half.gemm_f == pytest.approx(lt.gemm_f / 2, rel=0.1)
    # without SP the norms and residuals run on every TP rank's full sequence
    assert cc.layer_time(m, 1, 8192, 8, H100, sp=False).elementwise_f > lt.elementwise_f


def test_optimizer_step_is_bytes_over_bandwidth():
    assert cc.optimizer_step_time(10**9, H100) == pytest.approx(
        30e9 / (0.9 * H100.memory_bandwidth))


def test_bus_bandwidth_is_eighty_percent_of_the_line():
    ndr = hardware.link("ib_ndr")
    assert ndr.bus_bandwidth == pytest.approx(0.8 * 50e9)


@pytest.mark.parametrize("call, message", [
    (lambda: cc.gemm_time(0, 1, 1, H100), "m=0"),
    (lambda: cc.gemm_time(1, 1, 1, hardware.GPU("x", 1, 1.0, 1.0, 0.0, "nvlink4", "")),
     "no achievable matmul rate"),
    (lambda: cc.layer_time(models.model("llama3_8b"), 1, 64, 1, H100, attention="sdpa"),
     "attention='sdpa'"),
    (lambda: cc.layer_time(models.model("llama3_8b"), 1, 64, 1, A100, attention="flash3"),
     "no flash3 efficiency"),
    (lambda: cc.layer_time(models.model("llama3_8b"), 1, 63, 1, H100, cp=2), "CP=2"),
    (lambda: cc.optimizer_step_time(-1, H100), "n_params=-1"),
])
def test_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()
