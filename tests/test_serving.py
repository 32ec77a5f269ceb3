"""Tests of the decode-step model (tpp.serving) and the second seed's serving numbers."""

import pytest
import sympy as sp
from tpp import serving
from tpp.costs import memory
from tpp.hardware import GB, GiB, MiB
from tpp.models import ModelConfig
from tpp.symbolic import tp_costs as S

SEED = dict(n_params=70e9)  # the seed's "70B model in fp16 is 140 GB"


def test_decode_step_by_hand():
    st = serving.decode_step("llama2_70b", 8, 16, "nvlink4", "h100_sxm", **SEED)
    weights = 140e9 / 8
    payload = 16 * 8192 * 2
    sent = 2 * 80 * (2 * 7 / 8) * payload
    assert st.weight_bytes_per_gpu == 140 * GB // 8
    assert st.allreduce_payload_bytes == payload
    assert st.allreduces_per_step == 160
    assert st.allreduce_sent_per_gpu == sent
    assert st.step_time == pytest.approx(weights / 3.35e12 + sent / 450e9, rel=1e-12)
    assert st.tokens_per_second == pytest.approx(16 / st.step_time)


def test_tp1_has_no_allreduce():
    st = serving.decode_step("llama2_70b", 1, 16, **SEED)
    assert st.allreduces_per_step == 0 and st.allreduce_time == 0
    assert st.step_time == pytest.approx(140e9 / 3.35e12)


def test_latency_term():
    st = serving.decode_step("llama2_70b", 8, 16, latency=2e-6, **SEED)
    assert st.allreduce_latency_time == pytest.approx(160 * 14 * 2e-6)


def test_kv_cache_read_and_replication():
    # LLaMA-2 70B: 8 KV heads of 128; TP 16 replicates, each rank reads 1 head per layer
    st = serving.decode_step("llama2_70b", 16, 4, context_len=1000, **SEED)
    assert st.kv_bytes_per_gpu == 2 * 4 * 1000 * 2 * 80 * 1 * 128
    st8 = serving.decode_step("llama2_70b", 8, 4, context_len=1000, **SEED)
    assert st8.kv_bytes_per_gpu == st.kv_bytes_per_gpu  # no saving from TP 8 to TP 16


def test_invalid_configs():
    with pytest.raises(ValueError, match="TP=16 must divide n_kv_heads=8: lower TP to 8 or pass "
                                         "replicate_kv=True"):
        serving.decode_step("llama2_70b", 16, 16, replicate_kv=False)
    with pytest.raises(ValueError, match="TP=3 must divide n_heads=64"):
        serving.decode_step("llama2_70b", 3, 16)
    with pytest.raises(ValueError, match="compute_model='flops': use 'memory' or 'roofline'"):
        serving.decode_step("llama2_70b", 2, 16, compute_model="flops")
    with pytest.raises(ValueError, match="unknown link 'nvlink9': use one of .*nvlink4"):
        serving.decode_step("llama2_70b", 2, 16, "nvlink9")


def test_kv_replication_needs_a_multiple_of_the_kv_heads():
    # 24 query heads, 8 KV heads: TP 12 divides the query heads, but 12 ranks cannot share
    # 8 KV heads evenly (replication needs TP to be a multiple of 8)
    cfg = ModelConfig("gqa24", 2, 96, 24, 8, 256, 100, 1e6, "test")
    with pytest.raises(ValueError, match="TP=12 exceeds n_kv_heads=8 and is not a multiple of "
                                         "it.*use TP=8 or a multiple of 8"):
        serving.decode_step(cfg, 12, 4)
    with pytest.raises(ValueError, match="use TP=8 or a multiple of 8"):
        memory.layer_params_per_rank(cfg, 12, replicate_kv=True)
    # TP 24 = 3 x 8 replicates each KV head on 3 ranks: every rank reads one KV head
    st = serving.decode_step(cfg, 24, 4, context_len=10)
    assert st.kv_bytes_per_gpu == 2 * 4 * 10 * 2 * 2 * 1 * 4  # bf16, K+V, 2 layers, d_head 4


# ---- the second seed's numbers ---------------------------------------------------------------
def test_seed2_about_70_MB_and_016_ms():
    st = serving.decode_step("llama2_70b", 8, 16, "nvlink4", **SEED)
    # payload summed over the 160 all-reduces: 160 * 262144 = 41.9 MB (not 70)
    assert st.allreduce_payload_per_step == 160 * 262144
    # bytes each GPU sends with the ring factor 1.75: exactly 70 MiB = 73.4 MB
    assert st.allreduce_sent_per_gpu == 70 * MiB
    assert round(st.allreduce_time * 1e3, 2) == 0.16  # at 450 GB/s per direction


def test_seed2_simulator_panel():
    curve = serving.scaling_curve("llama2_70b", 16, "nvlink4", **SEED)
    # "weights / GPU 32.6 GB" at TP4 is GiB: 35 GB = 32.6 GiB
    w4 = curve[4].weight_bytes_per_gpu
    assert w4 == 35 * GB and round(w4 / GiB, 1) == 32.6
    # "60.0 MB per step" at TP4 is 60 MiB sent per GPU (ring factor 1.5)
    assert curve[4].allreduce_sent_per_gpu == 60 * MiB
    # TP1 38.9 ms does not follow from 140 GB at 3.35 TB/s (41.8 ms) ...
    assert round(curve[1].step_time * 1e3, 1) == 41.8
    # ... but does if the 140e9 bytes are counted in GiB (130.4) and divided by 3.35e12
    mixed = serving.scaling_curve("llama2_70b", 16, "nvlink4", memory_bandwidth=3.35e12 * GiB / GB,
                                  bidirectional=True, **SEED)
    assert [round(mixed[t].step_time * 1e3, 1) for t in (1, 2, 4)] == [38.9, 19.5, 9.8]
    assert round(mixed[4].step_time * 1e3, 2) == 9.80  # needs the 900 GB/s bidirectional figure
    assert round(mixed[8].step_time * 1e3, 1) == 4.9
    # with the 450 GB/s the text states, TP4 would be 9.87 ms
    half = serving.decode_step("llama2_70b", 4, 16, memory_bandwidth=3.35e12 * GiB / GB, **SEED)
    assert round(half.step_time * 1e3, 2) == 9.87
    # efficiency at TP4 stays ~99% under both sets of assumptions
    for c in (curve, mixed):
        assert round(c[1].step_time / (4 * c[4].step_time), 2) >= 0.98


@pytest.mark.parametrize("compute_model", ["memory", "roofline"])
def test_seed2_tp8_wins_on_nvlink_at_small_batch(compute_model):
    curve = serving.scaling_curve("llama2_70b", 16, "nvlink4", compute_model=compute_model,
                                  **SEED)
    assert serving.best_tp_degree(curve) == 8
    assert curve[1].step_time / curve[8].step_time > 7.5


@pytest.mark.parametrize("link", ["pcie4_x16", "eth_100g", "eth_200g"])
@pytest.mark.parametrize("compute_model", ["memory", "roofline"])
def test_seed2_tp1_beats_tp8_at_batch_512_on_slow_links(link, compute_model):
    curve = serving.scaling_curve("llama2_70b", 512, link, compute_model=compute_model, **SEED)
    assert curve[1].step_time < curve[8].step_time


def test_seed2_claim_depends_on_compute_model_on_pcie5():
    # PCIe Gen5 at batch 512: weights-only model -> TP1 (barely); roofline -> TP8
    mem = serving.scaling_curve("llama2_70b", 512, "pcie5_x16", **SEED)
    roof = serving.scaling_curve("llama2_70b", 512, "pcie5_x16", compute_model="roofline", **SEED)
    assert mem[1].step_time < mem[8].step_time
    assert roof[8].step_time < roof[1].step_time
    assert roof[1].compute_bound  # 2 * 70e9 * 512 / 989e12 = 72 ms > 140e9 / 3.35e12 = 42 ms


def test_crossover_bandwidth_symbolic_equals_numeric():
    num = serving.crossover_bandwidth("llama2_70b", 4, 8, 16, **SEED)
    sym = S.decode_crossover_bandwidth(4, 8)
    assert sp.simplify(sym - 4 * S.batch * S.B_mem * S.L * S.h / S.N) == 0
    val = sym.subs({S.batch: 16, S.B_mem: 3.35e12, S.L: 80, S.h: 8192, S.N: 70e9})
    assert float(val) == pytest.approx(num, rel=1e-12)


@pytest.mark.parametrize("batch", [1, 16, 512])
def test_crossover_bandwidth_flips_the_order(batch):
    bw = serving.crossover_bandwidth("llama2_70b", 4, 8, batch, **SEED)
    lo = {t: serving.decode_step("llama2_70b", t, batch, link_bandwidth=bw * 0.99, **SEED)
          for t in (4, 8)}
    hi = {t: serving.decode_step("llama2_70b", t, batch, link_bandwidth=bw * 1.01, **SEED)
          for t in (4, 8)}
    assert lo[4].step_time < lo[8].step_time
    assert hi[8].step_time < hi[4].step_time


def test_symbolic_decode_time_equals_numeric():
    st = serving.decode_step("llama2_70b", 4, 32, **SEED)
    expr = S.decode_step_time().subs({S.N: 70e9, S.e: 2, S.t: 4, S.B_mem: 3.35e12, S.L: 80,
                                      S.batch: 32, S.h: 8192, S.B_link: 450e9})
    assert float(expr) == pytest.approx(st.step_time, rel=1e-12)


def test_symbolic_decode_time_with_latency_equals_numeric():
    st = serving.decode_step("llama2_70b", 8, 16, latency=2e-6, **SEED)
    expr = S.decode_step_time(latency=True).subs({
        S.N: 70e9, S.e: 2, S.t: 8, S.B_mem: 3.35e12, S.L: 80, S.batch: 16, S.h: 8192,
        S.B_link: 450e9, S.alpha: 2e-6})
    assert float(expr) == pytest.approx(st.step_time, rel=1e-12)
    # the latency term by hand: 160 all-reduces x 2(8-1) ring steps x 2 us
    assert st.allreduce_latency_time == pytest.approx(160 * 14 * 2e-6, rel=1e-12)


@pytest.mark.parametrize("op", ["all_reduce", "reduce_scatter", "all_gather"])
def test_symbolic_tp_ring_factor_equals_bus_factor(op):
    from tpp.collectives import bus_factor
    for n in range(1, 17):
        f = bus_factor(op, n)
        assert S.ring_factor(op).subs(S.t, n) == sp.Rational(f.numerator, f.denominator)
    with pytest.raises(ValueError, match="unknown op 'gather': use one of all_reduce"):
        S.ring_factor("gather")


def test_memory_fit_counts_weights_and_kv_cache_against_the_gpu():
    from tpp.hardware import gpu

    cap = gpu("h100_sxm").memory
    one = serving.decode_step("llama2_70b", 1, 16)  # 70B in bf16 on one 80 GB GPU
    assert one.memory_bytes_per_gpu == one.weight_bytes_per_gpu > cap
    assert not one.fits and one.overflow_bytes == one.weight_bytes_per_gpu - cap
    eight = serving.decode_step("llama2_70b", 8, 16)
    assert eight.fits and eight.overflow_bytes == 0
    # the KV cache counts: a long context at a large batch overflows even TP8
    long = serving.decode_step("llama2_70b", 8, 512, context_len=32768)
    assert long.memory_bytes_per_gpu == long.weight_bytes_per_gpu + long.kv_bytes_per_gpu
    assert not long.fits
