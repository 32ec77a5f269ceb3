"""tpp.costs.calculators: each transcribed formula on a small case worked by hand from its source.

The expected numbers below were computed with pen and paper from the source lines quoted in
each function's docstring (not from tpp.costs.calculators' output); the arithmetic is in the
comments.
"""

import pytest
from tpp.costs import calculators as c


def test_playbook_activation_sp_gelu_by_hand():
    # a=2, b=1, h=4, h_ff=16, L=1, s=3, v=10, tp=2, bf16 (2 bytes), no recompute, GeLU, SP
    # attention = s b h/tp (2*5+1) + (2*2+1) a s^2 b = 6*11 + 5*2*9 = 156 (s^2 term not / tp)
    # ff = 12*2/2 + 3*16*2/2 + 12/2 + 3*16*2/2 = 12 + 48 + 6 + 48 = 114; LN 2 * 12 = 24
    # other = 12/2 + 2*12*2/2 + 3*10*4/2 = 6 + 24 + 60 = 90
    r = c.playbook_activation_bytes(2, 1, 4, 16, 1, 3, 10, tp=2, ff_activation="gelu",
                                    seq_parallel=True)
    assert (r["attention"], r["feedforward"], r["layernorm"]) == (156, 114, 24)
    assert r["layer"] == 294 and r["total"] == 384


def test_playbook_swiglu_counts_four_dff_tensors_and_full_recompute_ignores_tp():
    # swiglu, no SP, tp=2: ff = s b h e + s b h_ff e/tp + s b h + 3 s b h_ff e/tp
    #                         = 24 + 48 + 12 + 144 = 228
    r = c.playbook_activation_bytes(2, 1, 4, 16, 1, 3, 10, tp=2, ff_activation="swiglu")
    assert r["feedforward"] == 228
    # full recompute with SP: LayerInput = s b h e = 24 per layer, whatever tp
    full = c.playbook_activation_bytes(2, 1, 4, 16, 5, 3, 10, tp=4, recomputation="full",
                                       seq_parallel=True)
    assert full["layer"] == 24


def test_playbook_params_and_states_by_hand():
    # h (v + s) + L (12 h^2 + 13 h) + 2 h = 4*13 + (192 + 52) + 8 = 304
    assert c.playbook_params(4, 1, 3, 10) == 304
    r = c.playbook_param_grad_opt_bytes(4, 1, 3, 10, k=8, dp=2, zero=1)
    assert r == {"parameters": 608, "gradients": 608, "optimizer": 12 * 304 / 2}
    with pytest.raises(ValueError, match="zero"):
        c.playbook_param_grad_opt_bytes(4, 1, 3, 10, zero=4)


def test_megatron_weight_optimizer_by_hand():
    # h=8, a=2, g=1, f=16, V=10, L=2, tp=2, pp=1, SwiGLU, RMSNorm, untied:
    # attn = 2*64*(1 + 1/2) = 192; mlp = 2*8*16*3/2 = 384; emb = 80
    # shard = (576*2 + 80)/2 + 80/2 = 656; replicated = 2*8*2 + 8 = 40 -> 696 params * 18
    kw = dict(hidden_size=8, num_layers=2, num_attention_heads=2, num_query_groups=1,
              ffn_hidden_size=16, padded_vocab_size=10, tp=2)
    assert c.megatron_weight_optimizer_bytes(**kw) == pytest.approx(696 * 18)
    # distributed optimizer over dp=4: 6 + 12/4 = 9 bytes per parameter
    assert c.megatron_weight_optimizer_bytes(**kw, dp=4, distributed_optimizer=True) == \
        pytest.approx(696 * 9)


def test_megatron_activation_by_hand():
    # SP: s=4, b=1, h=8, f=32, L=2, tp=2, pp=1, V=10
    # 32*(18 + 16)*2 = 2176; + 8*4 + 32 = 2240; + 32*4*(1 + 10/8) = 288 -> 2528 / 2
    assert c.megatron_activation_bytes_sp(4, 1, 8, 32, 2, tp=2, padded_vocab_size=10) == 1264
    # interleaved pp=4, vpp=2: (2176 + 128 + 128) * (1 + 3/8) / 2 = 1672
    assert c.megatron_activation_bytes_sp(4, 1, 8, 32, 2, tp=2, pp=4, vpp=2,
                                          num_microbatches=1) == pytest.approx(1672)
    # without SP: 32*(10 + 12)*2 = 1408; + 64 = 1472; + (4*10/2 + 32)*2 = 104 -> 1576 * 1.05
    assert c.megatron_activation_bytes_no_sp(4, 1, 8, 2, tp=2, padded_vocab_size=10) == \
        pytest.approx(1654.8)


def test_megatron_interleaving_not_capped_by_microbatches():
    assert c.megatron_interleaved_penalty(8, 2) == 1 + 7 / 16
    assert c.megatron_in_flight_microbatches(8, 2, num_microbatches=1) == 12  # ceil(11.5)
    assert c.megatron_in_flight_microbatches(4, None, num_microbatches=2) == 2


def test_megatron_flops_by_hand_and_against_the_2024_form():
    # b=1, s=4, L=1, h=8, a=2, g=1, f=16, V=10, SwiGLU: q=8, kv=4
    # per token 6*(8*16*3 + 8*16 + 64 + 80) = 3936 -> x4 tokens = 15744
    # core 3*2*8/2*2 = 48 per b s^2 = 16 -> 768 ; total 16512 ; unhalved core 1536 -> 17280
    kw = dict(batch_size=1, seq_length=4, num_layers=1, hidden_size=8, num_attention_heads=2,
              num_query_groups=1, ffn_hidden_size=16, padded_vocab_size=10)
    assert c.megatron_flops(**kw) == 16512
    assert c.megatron_flops(**kw, causal_halving=False) == 17280
    # the formula at 8873b55^: 12 b s L h^2 ((1 + g/a + s/h) q/h + f/h 3/2 + V/(2 L h))
    assert 12 * 4 * 64 * ((1 + 0.5 + 0.5) + 2 * 1.5 + 10 / 16) == 17280


def test_deepspeed_zero2_code_and_docs():
    assert c.deepspeed_zero2_gpu_bytes(1000, 8) == 2000 + 2250
    assert c.deepspeed_zero2_gpu_bytes(1000, 8, cpu_offload=True) == 2000
    assert c.deepspeed_zero2_gpu_bytes_before_5099(1000, 8) == 4000 + 2000
    # memory.rst prints 15.93GB (offload none) and 5.31GB (offload cpu) for 2851M params, 8 GPUs
    assert round(c.deepspeed_zero2_gpu_bytes_before_5099(2851_000_000, 8) / 2**30, 2) == 15.93
    assert round(c.deepspeed_zero2_gpu_bytes(2851_000_000, 8) / 2**30, 2) != 15.93
    assert round(c.deepspeed_zero2_gpu_bytes(2851_000_000, 8, True) / 2**30, 2) == 5.31


def test_cookbook_flops_by_hand():
    # L=1, h=2, s=3, V=5, tokens=10, MHA, ff=4, 2 linears, checkpointing: iter_factor 4
    # qkv 4*2*3*10*4 = 960; QK^T and PV 4*2*10*3*2 = 480 each; proj 4*2*10*4 = 320
    # ffn int(4*2*2*4)*10*4 = 2560; embedding 10*(8 + 2*2*5) = 280 (not x iter_factor)
    r = c.cookbook_flops(1, 2, 3, 5, 10)
    assert (r["qkv"], r["attention_matrix"], r["attention_over_values"]) == (960, 480, 480)
    assert (r["linear_projection"], r["ffn"], r["embedding"]) == (320, 2560, 280)
    assert r["total"] == 5080
    # int() truncation: 4*2*3*2.6875 = 64.5 -> 64
    assert c.cookbook_flops(1, 2, 3, 5, 10, ffn_expansion_factor=2.6875,
                            num_mlp_linears=3)["ffn"] == 64 * 10 * 4


@pytest.mark.parametrize("bad", [0, -1, True])
def test_bad_configuration_raises(bad):
    with pytest.raises(ValueError):
        c.playbook_params(bad, 1, 1, 1)
    with pytest.raises(ValueError):
        c.deepspeed_zero2_gpu_bytes(10, bad)
