"""Tests of tpp.hardware (units, presets) and tpp.models (parameter counts)."""

from fractions import Fraction

import pytest
from tpp import hardware as hw
from tpp.models import MODELS, ModelConfig, model, model_names


def test_gb_and_gib_are_not_mixed():
    h100 = hw.gpu("h100_sxm")
    # the datasheet says "80 GB": decimal gigabytes
    assert h100.memory == 80 * 10**9
    assert h100.memory != 80 * 2**30
    # 80e9 / 2**30 = 74.505805969... GiB, computed by hand: 80e9 / 1073741824
    assert h100.memory_GiB == pytest.approx(74.50580596923828, rel=1e-15)
    assert h100.memory_GB == 80.0
    assert hw.GiB == 1073741824 and hw.GB == 1000000000
    assert hw.to_GiB(80 * hw.GB) < 80 < hw.to_GB(80 * hw.GiB)


def test_h200_and_h100_bandwidths_and_flops():
    assert hw.gpu("h200_sxm").memory == 141 * 10**9
    assert hw.gpu("h200_sxm").memory_bandwidth == 4.8e12
    assert hw.gpu("h100_sxm").memory_bandwidth == 3.35e12
    # dense bf16 is half the sparse datasheet figure 1979 TFLOP/s
    assert hw.gpu("h100_sxm").peak_flops_bf16 == pytest.approx(1979e12 / 2, rel=1e-3)


def test_link_directions_and_bits():
    nv4 = hw.link("nvlink4")
    assert nv4.bidirectional == 900e9 and nv4.bandwidth == 450e9
    assert hw.link("nvlink3").bandwidth == 300e9
    # bits -> bytes: 400 Gb/s = 400e9 / 8 = 50e9 bytes/s
    assert hw.gbit_per_s(400) == 50e9
    assert hw.link("ib_ndr").bandwidth == 50e9
    assert hw.link("ib_hdr").bandwidth == 25e9
    assert hw.link("eth_100g").bandwidth == 12.5e9
    # PCIe Gen4 x16: 16 GT/s * 16 lanes * (128/130) / 8 bits = 31.507... GB/s per direction
    assert hw.link("pcie4_x16").bandwidth == pytest.approx(16e9 * 16 * 128 / 130 / 8)
    assert hw.link("pcie5_x16").bandwidth == pytest.approx(2 * hw.link("pcie4_x16").bandwidth)
    for ln in hw.LINKS.values():
        assert ln.bidirectional == pytest.approx(2 * ln.bandwidth)
        assert ln.source and ln.latency_source


def test_every_preset_has_a_source():
    for g in hw.GPUS.values():
        assert g.source and g.link in hw.LINKS
    for m in MODELS.values():
        assert m.source


def test_bytes_per_element():
    assert hw.bytes_per_element("bf16") == 2
    assert hw.bytes_per_element("FP32") == 4
    assert hw.bytes_per_element("fp8") == 1
    assert hw.bytes_per_element("int4") == Fraction(1, 2)
    with pytest.raises(ValueError, match="use one of.*bf16"):
        hw.bytes_per_element("bf17")


def test_lookups_list_valid_names():
    with pytest.raises(ValueError, match="unknown link 'nvlink9'.*nvlink4.*ib_ndr"):
        hw.link("nvlink9")
    with pytest.raises(ValueError, match="unknown GPU.*h100_sxm"):
        hw.gpu("h100")
    with pytest.raises(ValueError, match="unknown model.*llama2_70b"):
        model("llama-70b")
    assert hw.link("NVLink4") is hw.link("nvlink4")
    assert model("LLaMA2-70B") is MODELS["llama2_70b"]
    assert set(model_names()) >= {"llama2_7b", "llama2_70b", "llama3_70b", "llama3_405b",
                                  "gpt3_175b"}


# Parameter counts published with the released checkpoints (Hugging Face model cards / configs)
PUBLISHED = {
    "llama2_7b": 6_738_415_616,
    "llama2_70b": 68_976_648_192,
    "llama3_8b": 8_030_261_248,
    "llama3_70b": 70_553_706_496,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_llama_param_counts_match_published(name):
    assert model(name).params == PUBLISHED[name]


def test_llama2_7b_count_by_hand():
    d, f, v, L = 4096, 11008, 32000, 32
    per_layer = 4 * d * d + 3 * d * f + 2 * d
    assert model("llama2_7b").params_per_layer == per_layer
    assert model("llama2_7b").params == L * per_layer + 2 * v * d + d


def test_gpt3_count_by_hand():
    d, v, L, ctx = 12288, 50257, 96, 2048
    per_layer = 12 * d * d + 13 * d  # 4d^2 + 4d (attn) + 8d^2 + 5d (MLP) + 4d (two LayerNorms)
    m = model("gpt3_175b")
    assert m.params_per_layer == per_layer
    assert m.params == L * per_layer + v * d + ctx * d + 2 * d


@pytest.mark.parametrize("name", sorted(MODELS))
def test_computed_count_is_near_nominal(name):
    m = model(name)
    assert abs(m.nominal_error()) < 0.04, (m.params, m.nominal_params)


def test_gqa_shapes():
    m = model("llama2_70b")
    assert (m.d_head, m.d_kv, m.group_size) == (128, 1024, 8)
    # KV cache per token: 2 (K,V) * 80 layers * 1024 * 2 bytes
    assert m.kv_cache_bytes_per_token() == 2 * 80 * 1024 * 2
    assert m.weight_bytes("bf16") == 2 * m.params
    assert m.weight_bytes("int4") == m.params // 2


def test_invalid_model_config():
    with pytest.raises(ValueError, match="n_heads=64 must be a multiple of n_kv_heads=6"):
        ModelConfig("bad", 2, 8192, 64, 6, 100, 10, 1e9, "test")
    with pytest.raises(ValueError, match="d_model=100 must be divisible by n_heads=64"):
        ModelConfig("bad", 2, 100, 64, 8, 100, 10, 1e9, "test")
