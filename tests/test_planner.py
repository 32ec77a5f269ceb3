"""tpp.planner: layouts, rank maps, placement, the rules of evaluate and plan, every error."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tpp import models, planner
from tpp.costs import zero
from tpp.planner import Layout, chunk_rank, evaluate, layers_per_chunk, plan

LLAMA = models.model("llama3_405b")
degrees = st.sampled_from([1, 2, 3, 4, 8])


@settings(max_examples=100, deadline=None)
@given(tp=degrees, cp=degrees, dp=degrees, pp=degrees, data=st.data())
def test_rank_map_is_a_bijection_with_tp_innermost(tp, cp, dp, pp, data):
    lay = Layout(tp=tp, pp=pp, dp=dp, cp=cp)
    assert lay.gpus == tp * cp * dp * pp
    r = data.draw(st.integers(0, lay.gpus - 1))
    c = lay.coords(r)
    assert lay.rank(**c) == r
    assert lay.group("tp", r) == list(range(r - c["tp"], r - c["tp"] + tp))  # consecutive
    for axis in planner.AXES:  # a group varies exactly one coordinate
        g = lay.group(axis, r)
        assert len(set(g)) == lay.degree(axis) and r in g
        assert all({k: v for k, v in lay.coords(q).items() if k != axis}
                   == {k: v for k, v in c.items() if k != axis} for q in g)
    if tp <= 8 and 8 % tp == 0:
        assert lay.nodes_spanned("tp", 8) == 1


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 200), chunks=st.integers(1, 200))
def test_layer_placement(n, chunks):
    if chunks > n + 2:  # more chunks than layers + embedding + head
        with pytest.raises(ValueError, match="use at most"):
            layers_per_chunk(n, chunks)
        return
    c = layers_per_chunk(n, chunks)
    assert len(c) == chunks and sum(c) == n and min(c) >= 0
    if n % chunks == 0:
        assert set(c) == {n // chunks}
    else:  # embedding and head each take one slot: loads (with them) differ by at most one
        loads = [c[0] + 1] + c[1:-1] + [c[-1] + 1] if chunks > 1 else [c[0] + 2]
        assert max(loads) - min(loads) <= 1
        assert min(c[1:-1], default=1) >= 1  # only the two end chunks may hold no layer


def test_llama3_405b_one_layer_chunks_match_the_paper():
    # Dubey et al. 2024, Sec. 3.3.2: "the first model chunk on the first stage has only the
    # embedding, and the last model chunk on the last stage has only output projection and
    # loss": 128 one-slot chunks, v = 8 on PP = 16 (Megatron: account_for_embedding/loss)
    c = layers_per_chunk(126, 128)
    assert c[0] == 0 and c[-1] == 0 and set(c[1:-1]) == {1}
    per_rank = [sum(c[k] for k in range(128) if chunk_rank(k, 16) == r) for r in range(16)]
    assert per_rank == [7] + [8] * 14 + [7]
    assert planner.max_chunks(126) == 128
    with pytest.raises(ValueError, match="use at most 128 chunks"):
        layers_per_chunk(126, 129)


def test_llama3_405b_placement_matches_the_paper():
    # Dubey et al. 2024, Sec. 3.3.2: one layer fewer on the first and the last stage
    assert layers_per_chunk(126, 16) == [7] + [8] * 14 + [7]


def _ev(lay, **kw):
    args = dict(seq_len=8192, global_batch=2048)
    args.update(kw)
    return evaluate(LLAMA, lay, **args)


@pytest.mark.parametrize("lay, kw, words", [
    (Layout(tp=16, pp=16, dp=64), {}, "larger than a node"),
    (Layout(tp=3, pp=16, dp=64), {}, "does not divide the 128 attention heads"),
    (Layout(tp=8, pp=256, dp=8), {}, "more stages than the layers plus the embedding"),
    (Layout(tp=8, pp=16, dp=100), {}, "does not split into DP=100"),
    (Layout(tp=8, pp=16, dp=128, virtual=9), {}, "144 pipeline chunks"),
    (Layout(tp=8, pp=16, dp=128, virtual=2, microbatch_size=2), {}, "multiple of PP=16"),
    (Layout(tp=8, pp=16, dp=16, cp=3), {}, "CP=3"),
    (Layout(tp=8, pp=1, dp=1), {"global_batch": 1}, "GB a process can allocate on a H100 SXM 80GB"),
])
def test_every_rule_is_a_problem_in_words(lay, kw, words):
    est = _ev(lay, **kw)
    assert not est.fits
    assert any(words in p for p in est.problems), est.problems


def test_kv_head_rule():
    m = models.model("llama2_70b")  # 8 KV heads
    est = evaluate(m, Layout(tp=4, pp=1, dp=1), seq_len=4096, global_batch=1, gpus_per_node=16)
    assert est.memory_bytes is not None
    m6 = models.ModelConfig("toy", 4, 768, 12, 6, 3072, 1000, 1e8, "test")
    est = evaluate(m6, Layout(tp=4), seq_len=64, global_batch=1)
    assert any("KV heads" in p for p in est.problems)


def test_published_llama3_memory_terms_add_up():
    pub = planner.published("llama3_405b_8k_16384")
    est = evaluate(models.model(pub.model), pub.layout, gpu=pub.gpu, seq_len=pub.seq_len,
                   global_batch=pub.global_batch)
    assert est.memory_bytes == sum(est.memory.values())
    assert est.microbatches == 16
    # weights of the heaviest rank: its layers' shards plus what it holds of embedding/head
    assert est.memory["weights"] > 2 * 7 * LLAMA.params_per_layer // 8
    assert est.step_time == pytest.approx(
        est.time["compute"] + est.time["pipeline_bubble"] + est.time["dp_exposed"]
        + est.time["optimizer"])


def test_memory_monotone_in_zero_and_recompute():
    mem = [_ev(Layout(tp=8, pp=16, dp=128, zero=z, recompute="full")).memory_bytes
           for z in zero.STAGES]
    assert mem == sorted(mem, reverse=True) and len(set(mem)) == 4
    rc = [_ev(Layout(tp=8, pp=16, dp=128, zero=1, recompute=r)).memory["activations"]
          for r in planner.RECOMPUTE]
    assert rc == sorted(rc, reverse=True)


def test_bubble_shrinks_with_interleaving_and_vanishes_without_pp():
    b = [_ev(Layout(tp=8, pp=16, dp=128, virtual=v, zero=1, recompute="selective"))
         .time["pipeline_bubble"] for v in (1, 2, 4)]
    assert b[0] > b[1] > b[2] > 0
    flat = _ev(Layout(tp=8, pp=1, dp=2048, zero=3, recompute="selective"))
    assert flat.time["pipeline_bubble"] == 0


def test_plan_returns_fitting_layouts_fastest_first():
    m = models.model("llama3_8b")
    got = plan(m, 64, seq_len=4096, global_batch=256, top=5)
    assert 1 <= len(got) <= 5 and all(e.fits and e.layout.gpus == 64 for e in got)
    times = [e.step_time for e in got]
    assert times == sorted(times)
    # the best is at least as fast as a hand-picked layout that fits
    hand = evaluate(m, Layout(tp=8, pp=1, dp=8, zero=1, recompute="full"), seq_len=4096,
                    global_batch=256)
    assert hand.fits and got[0].step_time <= hand.step_time


@pytest.mark.parametrize("call, message", [
    (lambda: Layout(tp=0), "tp=0 must be an int >= 1"),
    (lambda: Layout(zero=4), "zero=4"),
    (lambda: Layout(recompute="some"), "recompute='some'"),
    (lambda: Layout(virtual=2), "needs a pipeline"),
    (lambda: Layout(microbatch_size=0), "microbatch_size=0"),
    (lambda: Layout(tp=2).coords(2), "rank=2 is not in 0..1"),
    (lambda: Layout(tp=2).rank(tp=2), "tp=2 is not in 0..1"),
    (lambda: Layout().degree("ep"), "axis='ep'"),
    (lambda: layers_per_chunk(4, 7), "use at most 6 chunks"),
    (lambda: _ev(Layout(tp=8, pp=16, dp=128), gpus=8192), "not 8192"),
    (lambda: _ev(Layout(tp=8), mfu=0), "mfu=0"),
    (lambda: _ev(Layout(tp=8), seq_len=0), "seq_len=0"),
    (lambda: evaluate("llama", Layout(), seq_len=1, global_batch=1), "ModelConfig"),
    (lambda: _ev(Layout(tp=8), gpu="h900"), "unknown GPU"),
    (lambda: plan(LLAMA, 8, seq_len=8192, global_batch=8), "fits no layout"),
    (lambda: plan(LLAMA, 131, seq_len=8192, global_batch=1, top=1), "divisibility rules"),
    (lambda: plan(LLAMA, 8, seq_len=8192, global_batch=8, top=0), "top=0"),
    (lambda: planner.published("gpt5"), "unknown published layout"),
])
def test_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize("pp, m, v", [(4, 40, 1), (4, 29, 1), (8, 72, 2), (3, 60, 4), (16, 128, 4)])
def test_pipeline_extrapolation_equals_full_simulation(pp, m, v):
    from tpp.planner import estimate

    stages = pp * v
    t_f = tuple(1.0 + 0.1 * (c % 3) for c in range(stages))  # uneven stages
    t_b = tuple(2.0 + 0.3 * (c % 2) for c in range(stages))
    full = estimate._simulate(pp, m, v, t_f, t_b, 0.05)
    fast = estimate._pipeline(pp, m, v, t_f, t_b, 0.05)
    assert fast[0] == pytest.approx(full[0], rel=1e-12)
    assert fast[1] == pytest.approx(full[1], rel=1e-12)
    assert fast[2] == estimate._held(pp, m, v)[0]


@settings(max_examples=25, deadline=None)
@given(pp=st.integers(2, 6), groups=st.integers(1, 4), v=st.integers(1, 3),
       seed=st.integers(0, 10**6))
def test_held_activations_depend_on_the_order_not_the_durations(pp, groups, v, seed):
    # _held reads the peaks from one unit-cost simulation; a simulation at random costs (and
    # random chunk sizes, zero-layer end chunks included) must hold exactly the same
    import random

    from tpp.pipeline import schedule, simulate
    from tpp.planner import estimate

    rng = random.Random(seed)
    m, stages = groups * pp, pp * v
    chunks = tuple(rng.randint(0, 3) for _ in range(stages))
    sched = schedule("1f1b" if v == 1 else "interleaved", pp, m, v)
    res = simulate(sched, t_f=[rng.uniform(0.1, 3) for _ in range(stages)],
                   t_b=[rng.uniform(0.1, 5) for _ in range(stages)],
                   p2p_latency=rng.uniform(0, 1))
    inflight, held = estimate._held(pp, m, v, chunks)
    assert inflight == res.peak_inflight
    assert held == res.peak_activation_bytes(list(chunks))


@settings(max_examples=30, deadline=None)
@given(pp=st.integers(2, 8), k=st.integers(2, 6), v=st.sampled_from([1, 2, 3, 4, 8]),
       seed=st.integers(0, 10**6))
def test_held_activations_stop_changing_past_two_groups(pp, k, v, seed):
    # the planner simulates min(M, 2P) microbatches for the peaks (_held_microbatches)
    import random

    from tpp.planner import estimate

    rng = random.Random(seed)
    chunks = tuple(rng.randint(0, 3) for _ in range(pp * v))
    assert estimate._held_microbatches(pp, k * pp) == 2 * pp
    assert (estimate._held.__wrapped__(pp, k * pp, v, chunks)
            == estimate._held.__wrapped__(pp, 2 * pp, v, chunks))


# -- issue 18: compute model, published runs, HSDP ------------------------------------------


def test_every_published_run_predicted_within_the_issue_targets():
    rows = planner.compare_published()
    assert len(rows) >= 20
    med, worst = planner.error_summary(rows)
    assert med <= 0.10 and worst <= 0.25, (med, worst)
    # the flat model the issue replaces was far off on the same runs
    fmed, _ = planner.error_summary(planner.compare_published(mfu=0.4))
    assert fmed > 2 * med
    assert not any(r.published.holdout for r in rows)


def test_holdout_runs_are_megatrons_h100_table_and_reported_apart():
    rows = planner.compare_published(holdout=True)
    assert [r.published.key for r in rows] == list(planner.HOLDOUT) and len(rows) == 9
    assert all(r.published.holdout and "f2e5db40" in r.published.source for r in rows)
    # the table's TFLOP/s are Megatron's num_floating_point_operations at that commit:
    # 12 B s L h^2 (2 + s/h + 4 + V / (2 L h)) for MHA, GELU d_ff = 4h (re-derived here)
    for r in rows:
        m, p = models.model(r.published.model), r.published
        B, s, L, h, V = p.global_batch, p.seq_len, m.n_layers, m.d_model, m.vocab_size
        mlm = 12 * B * s * L * h * h * ((1 + 1 + s / h) + 4 + V / (2 * L * h))
        assert r.estimate.model_flops_per_step == pytest.approx(mlm, rel=1e-9)
        # the table's MFU column from its TFLOP/s column, at the H100's 989 TFLOP/s
        mfu = int(p.reported.split(", ")[1].split("%")[0])
        assert abs(mlm / (r.measured * p.gpus * 989.4e12) * 100 - mfu) < 1.0
    med, worst = planner.error_summary(rows)
    assert med <= 0.10, med  # reported in chapter 14 whatever it is; the median is the target
    # the README says the table ran with --tp-comm-overlap: the records carry it
    assert all(r.published.tp_comm_overlap for r in rows)


def test_tp_comm_overlap_is_the_overlap_modules_decomposed_tp():
    from tpp import hardware
    from tpp.data_parallel.overlap import NCCL_SM_SLOWDOWN
    from tpp.planner.exposed import tp_layer_times

    nv = hardware.link("nvlink4")
    f, b, cf, cb = 1e-3, 2e-3, 4e-4, 8e-4
    assert tp_layer_times(f, b, cf, cb, 8, nv, False) == pytest.approx((f + cf, b + cb))
    of, ob = tp_layer_times(f, b, cf, cb, 8, nv, True)
    for t, c, o in ((f, cf, of), (b, cb, ob)):
        # hidden behind all chunks but the last, which stays exposed; the compute that ran
        # beside the traffic slowed by the overlap module's contention
        assert max(t, c) < o < t + c
        # (fluid: the compute loses NCCL_SM_SLOWDOWN of each second a transfer runs)
        assert o == pytest.approx(t + c / 8 + 7 / 8 * c * NCCL_SM_SLOWDOWN, rel=1e-9)


def test_evaluate_published_is_what_compare_published_evaluates():
    pub = planner.published("megatron_h100_70b")
    (row,) = planner.compare_published([pub.key])
    assert planner.evaluate_published(pub).step_time == row.estimate.step_time
    # its source's flags reach the estimate: without --tp-comm-overlap the step is longer
    assert planner.evaluate_published(pub, tp_comm_overlap=False).step_time > row.predicted
    with pytest.raises(ValueError, match="tpp.planner.published"):
        planner.evaluate_published("megatron_h100_70b")


def test_tp_comm_overlap_in_evaluate():
    m = models.model("megatron_h100_32b")
    lay = Layout(tp=8, pp=1, dp=48, zero=1, recompute="none", sp=True)
    kw = dict(seq_len=4096, global_batch=1536)
    blocking = evaluate(m, lay, **kw)
    overlapped = evaluate(m, lay, tp_comm_overlap=True, **kw)
    assert overlapped.step_time < blocking.step_time
    assert overlapped.memory_bytes == blocking.memory_bytes
    no_sp = evaluate(m, Layout(tp=8, dp=48, zero=1, sp=False), tp_comm_overlap=True, **kw)
    assert not no_sp.fits and "sequence parallelism" in no_sp.problems[0]
    with pytest.raises(ValueError, match="tp_comm_overlap"):
        evaluate(m, lay, tp_comm_overlap=1, **kw)

#: The one published run the planner still declares "does not fit" (see chapter 14): Llama 3
#: 405B on 8,192 GPUs, M = 32 microbatches per replica, rank 1 holds 141 one-layer chunks in
#: flight (Megatron's warm-up 2 (P - r - 1) + (v - 1) N + 1 at N = P = 16, v = 8).
_NOT_FITTING = ("llama3_405b_8k_8192",)


def test_every_other_published_run_fits():
    rows = planner.compare_published([k for k in planner.PUBLISHED if k not in _NOT_FITTING])
    assert len(rows) == len(planner.PUBLISHED) - 1  # the hold-out runs included
    assert all(r.estimate.fits for r in rows), [r.published.key for r in rows
                                                if not r.estimate.fits]
    # with Megatron's 5 % allowance the two 16,384-GPU Llama 3 runs need more than the
    # 80e9-byte label and fit only because the capacity is what the CUDA runtime reports
    # (hardware.GPU.capacity); without it (the default, no measurement cited) they fit anyway
    from tpp.costs import memory as cmem

    l3 = [planner.published(r.published.key) for r in rows
          if r.published.key.startswith("llama3")]
    assert len(l3) == 2
    for pub in l3:
        e5 = planner.evaluate_published(pub, fragmentation=cmem.MEGATRON_OVERHEAD)
        assert 80e9 < e5.memory_bytes <= e5.capacity
        assert planner.evaluate_published(pub).memory_bytes < e5.memory_bytes


@pytest.mark.xfail(strict=True, reason="issue 18 not met for one run: Llama 3 405B on 8,192 "
                   "GPUs (M = 32) needs 85.5 GB > 84.9 GB with N = P and microbatch 1, with no "
                   "fragmentation allowance and ZeRO-2's unsharded fp32 unit gradient (1.6 GB) "
                   "counted; stage outputs are already not counted and the paper does not "
                   "state N; see chapter 14 'What the planner cannot explain'")
def test_llama3_8192_gpu_run_fits():
    (row,) = planner.compare_published(list(_NOT_FITTING))
    assert row.estimate.fits, row.estimate.explain()


def test_llama3_inflight_bytes_are_the_layers_saved_tensors_only():
    # Dubey et al. 2024 (Sec. 3.3.2) free each stage's input and output tensors once unused
    # (Megatron's deallocate_output_tensor): the planner's activations are the held layers' own
    # saved tensors, no boundary copy on top (the received input is the first layer's saved
    # input); the held layers re-derived from Megatron's warm-up 2 (P - r - 1) + (v - 1) N + 1
    from tpp.costs import memory as cmem

    pub = planner.published("llama3_405b_8k_8192")
    est = planner.evaluate_published(pub)
    lay, r = pub.layout, est.heaviest_rank
    chunks = min(2 * (lay.pp - r - 1) + (lay.virtual - 1) * lay.pp + 1,
                 est.microbatches * lay.virtual)
    per_layer = sum(cmem.model_activation_terms(LLAMA, pub.seq_len, 1, lay.tp, True,
                                                "none").values())
    assert est.memory["activations"] == chunks * est.layers[r] // lay.virtual * per_layer


def test_zero2_counts_the_running_units_unsharded_gradient():
    # FSDP without resharding (ZeRO-2) reduce-scatters each unit's gradient after its backward:
    # the unit's full gradient exists until then, as ZeRO-3's gather buffer counts it
    pub = planner.published("llama3_405b_8k_16384")
    est = planner.evaluate_published(pub)
    lay, r = pub.layout, est.heaviest_rank
    params = est.memory["weights"] // 2  # bf16 weights; rank 1 holds layers only
    shard = -(-params // (lay.dp * lay.cp)) * pub.grad_bytes
    assert est.memory["gradients"] == shard + params // est.layers[r] * pub.grad_bytes
    one = planner.evaluate_published(pub, layout=dataclasses.replace(lay, dp=1),
                                     global_batch=pub.global_batch // lay.dp)
    assert one.memory["gradients"] == 4 * one.memory["weights"] // 2  # DP = 1: nothing to shard


def test_llama3_recipe_reaches_the_estimate():
    # the published recipe's fp32 gradients (Dubey et al. 2024, Sec. 3.3.2) are what the
    # comparison evaluates: twice the bf16 gradient bytes, the rest unchanged
    key = "llama3_405b_8k_8192"
    pub = planner.published(key)
    assert pub.grad_bytes == 4 and pub.layout.recompute == "none" and pub.layout.zero == 2
    fp32 = planner.compare_published([key])[0].estimate.memory
    bf16 = planner.compare_published([key], grad_bytes=2)[0].estimate.memory
    assert fp32["gradients"] == 2 * bf16["gradients"] > 0
    assert fp32["activations"] == bf16["activations"]


def test_llama3_first_and_last_ranks_hold_one_layer_fewer():
    # Sec. 3.3.2: one Transformer layer fewer on the first and the last stage (126 layers on
    # 16 stages: 7 + 14 x 8 + 7)
    est = planner.compare_published(["llama3_405b_8k_16384"])[0].estimate
    assert est.layers[0] == est.layers[-1] == est.layers[1] - 1
    assert sum(est.layers) == models.model("llama3_405b").n_layers


def test_narayanan_measured_step_time_reproduces_the_papers_percent_of_peak():
    # Table 1's last column (% of the A100's 312 TFLOP/s) from its TFLOP/s column: checks the
    # conversion to seconds per step against a number the conversion does not use
    for key, pub in planner.PUBLISHED.items():
        if not key.startswith("narayanan"):
            continue
        m = models.model(pub.model)
        B, s, L, h, V = pub.global_batch, pub.seq_len, m.n_layers, m.d_model, m.vocab_size
        flops = 96 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))
        pct = int(pub.reported.split(", ")[1].split("%")[0])
        got = flops / (pub.measured_step_time(0.0) * pub.gpus * 312e12)
        assert abs(100 * got - pct) < 1.0, (key, got, pct)


def test_korthikanti_selective_recompute_predicted_faster_than_full():
    rows = {r.published.key: r for r in planner.compare_published(
        [k for k in planner.PUBLISHED if k.startswith("korthikanti")])}
    for n in ("22b", "175b", "530b", "1t"):
        full, sel = rows[f"korthikanti2022_{n}_full"], rows[f"korthikanti2022_{n}_selective"]
        assert sel.predicted < full.predicted and sel.measured < full.measured


def test_mfu_override_is_the_flat_model():
    from tpp.costs import flops as cf

    m = models.model("llama3_8b")
    est = evaluate(m, Layout(), seq_len=2048, global_batch=4, mfu=0.5, gpus_per_node=8)
    per_seq = (m.n_layers * cf.training_flops_per_layer(m, 1, 2048)
               + 3 * 2 * 2048 * m.d_model * m.vocab_size)
    assert est.time["compute"] == pytest.approx(4 * per_seq / (0.5 * 989.4e12))


def test_hsdp_shards_inside_the_node_and_replicates_across():
    m = models.model("llama3_8b")
    kw_ev = dict(seq_len=4096, global_batch=64)
    fsdp = evaluate(m, Layout(dp=32, zero=3, recompute="full"), **kw_ev)
    hsdp = evaluate(m, Layout(dp=32, zero=3, hsdp=True, recompute="full"), **kw_ev)
    ddp = evaluate(m, Layout(dp=32, zero=0, recompute="full"), **kw_ev)
    # states: sharded 8 ways (one node), not 32
    assert hsdp.memory["optimizer_states"] == zero.model_state_terms(m.params, 8, 3)[
        "optimizer_states"]
    assert fsdp.memory_bytes < hsdp.memory_bytes < ddp.memory_bytes
    # its per-microbatch gathers stay on NVLink: less traffic time than FSDP over the network
    assert hsdp.time["dp_total"] < fsdp.time["dp_total"]
    assert str(Layout(dp=32, zero=3, hsdp=True)).count("HSDP") == 1


def test_dp_cost_extrapolation_equals_the_full_timeline():
    from tpp.planner import exposed

    link = planner.estimate.hardware.link("ib_ndr")
    for stage in (2, 3):
        args = ([1e-2] * 4, [2e-2] * 4)
        fast = exposed.dp_cost(*args, 9, stage, 64, [50_000_000] * 4, link, "nic")
        lk = ("nic", link.bus_bandwidth, link.latency)
        full = exposed._run(tuple(args[0]), tuple(args[1]), 9, stage, 64, (50_000_000,) * 4,
                            lk, True)
        assert fast == pytest.approx(full, rel=1e-6)


def test_search_can_pick_hsdp_and_the_search_space_includes_it():
    m = models.model("llama3_8b")
    cands = planner.candidate_layouts(m, 64, seq_len=4096, global_batch=256)
    assert any(c.hsdp for c in cands) and all(c.zero == 3 for c in cands if c.hsdp)


@pytest.mark.parametrize("call, message", [
    (lambda: Layout(dp=8, zero=1, hsdp=True), "set zero=3"),
    (lambda: Layout(sp=1), "True or False"),
    (lambda: _ev(Layout(tp=8), attention="sdpa"), "attention='sdpa'"),
    (lambda: _ev(Layout(tp=8), mfu=1.5), "mfu=1.5"),
    (lambda: planner.compare_published(["gpt5"]), "unknown published run"),
    (lambda: planner.error_summary([]), "no comparisons"),
])
def test_new_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_sp_off_lifts_the_token_divisibility_rule():
    m = models.model("llama3_8b")
    with_sp = evaluate(m, Layout(tp=8), seq_len=1020, global_batch=1)
    assert any("sequence parallelism needs TP=8" in p for p in with_sp.problems)
    without = evaluate(m, Layout(tp=8, sp=False), seq_len=1020, global_batch=1)
    assert not any("sequence parallelism" in p for p in without.problems)
    assert without.step_time is not None


def test_plan_forwards_memory_options_to_evaluate():
    m = models.model("llama3_8b")
    kw = dict(seq_len=4096, global_batch=64, top=1, zeros=(0,), hsdps=(False,))
    got = plan(m, 8, evaluate_kw=dict(moment_dtype="bf16", master_weights=False), **kw)[0]
    p_rank = got.memory["weights"] // 2  # bf16 weights, no sharding at ZeRO-0
    assert got.memory["optimizer_states"] == zero.adam_state_bytes("bf16", False) * p_rank
    assert zero.adam_state_bytes("bf16", False) < zero.adam_state_bytes()


def test_capacity_is_what_the_cuda_runtime_reports_where_cited():
    from tpp import hardware
    h100, h200 = hardware.gpu("h100_sxm"), hardware.gpu("h200_sxm")
    # 79.11 GiB printed by PyTorch's OOM message (cudaMemGetInfo), more than the 80e9 label
    assert h100.capacity == h100.runtime_memory > h100.memory == 80 * 10**9
    assert abs(h100.capacity / 2**30 - 79.11) < 0.005
    assert "cudaMemGetInfo" in h100.runtime_memory_source
    assert h200.runtime_memory == 0 and h200.capacity == h200.memory  # no cited figure


def test_memory_first_stops_before_the_dp_timeline_and_explains():
    est = _ev(Layout(tp=8, pp=1, dp=1), global_batch=1, memory_first=True)
    assert est.step_time is None and not est.fits
    assert "GB a process can allocate on a H100 SXM 80GB" in est.explain()
