"""Tests of tpp.data_parallel.overlap (the two-stream timeline) and tpp.symbolic.overlap (its
derivation)."""

from __future__ import annotations

import math

import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from tpp.collectives import alpha_beta_time
from tpp.data_parallel.overlap import (
    CPTraffic,
    DPTraffic,
    Link,
    Op,
    PPTraffic,
    TPTraffic,
    rank_schedule,
    run,
    sm_share,
    step_timeline,
)
from tpp.data_parallel.overlap.plots import gantt
from tpp.symbolic import overlap as so

NIC = Link("nic", 50e9, 5e-6)
NV = Link("nvlink", 450e9, 2e-6)
MS = 1e-3

times = st.lists(st.floats(0.1, 5.0), min_size=1, max_size=6)


@st.composite
def configs(draw):
    n = draw(st.integers(1, 6))
    tf = [draw(st.floats(0.05, 3.0)) * MS for _ in range(n)]
    tb = [draw(st.floats(0.1, 6.0)) * MS for _ in range(n)]
    m = draw(st.integers(1, 3))
    kw = {}
    if draw(st.booleans()):
        stage = draw(st.sampled_from([0, 1, 2, 3]))
        kw["dp"] = DPTraffic(stage, draw(st.sampled_from([2, 4, 64])),
                             draw(st.integers(1, 200)) * 1_000_000, NIC,
                             bucket_bytes=draw(st.integers(1, 300)) * 1_000_000,
                             overlap_grad_reduce=draw(st.booleans()),
                             overlap_param_gather=draw(st.booleans()),
                             prefetch=draw(st.integers(0, 2)),
                             optimizer_time=draw(st.floats(0, 2)) * MS)
    if draw(st.booleans()):
        kw["tp"] = TPTraffic(draw(st.floats(0, 1)) * MS, draw(st.floats(0, 2)) * MS, NV,
                             decomposed=draw(st.booleans()), steps=draw(st.integers(1, 4)))
    if draw(st.booleans()):
        kw["cp"] = CPTraffic(draw(st.floats(0, 1)) * MS, draw(st.floats(0, 2)) * MS, NV,
                             steps=draw(st.integers(1, 3)), share=draw(st.floats(0.1, 1)),
                             overlap=draw(st.booleans()))
    if draw(st.booleans()):
        # the PP sends share the NIC with DP half of the time, a link of their own otherwise
        link = NIC if draw(st.booleans()) else Link("pp_link", 25e9, 0.0)
        kw["pp"] = PPTraffic(draw(st.floats(0, 1)) * MS, draw(st.floats(0, 1)) * MS, link,
                             overlap=draw(st.booleans()))
    return tf, tb, m, kw, draw(st.sampled_from([0.0, 0.18, 0.5]))


def _all_compute(tf, tb, m, kw):
    opt = kw["dp"].optimizer_time if "dp" in kw else 0.0
    return m * (sum(tf) + sum(tb)) + opt


@settings(max_examples=120, deadline=None)
@given(configs())
def test_overlap_never_beats_compute_or_busiest_link(cfg):
    tf, tb, m, kw, c = cfg
    tl = step_timeline(tf, tb, microbatches=m, contention=c, **kw)
    assert tl.compute == pytest.approx(_all_compute(tf, tb, m, kw))
    assert tl.step_time >= tl.compute * (1 - 1e-9)
    for link, busy in tl.link_busy.items():
        assert tl.step_time >= busy * (1 - 1e-9), link
    # ... and never takes longer than doing everything one after the other
    serial = step_timeline(tf, tb, microbatches=m, contention=c, overlap=False, **kw)
    assert tl.step_time <= serial.step_time * (1 + 1e-9) or c > 0


@settings(max_examples=120, deadline=None)
@given(configs())
def test_without_overlap_the_step_is_the_sum(cfg):
    tf, tb, m, kw, c = cfg
    tl = step_timeline(tf, tb, microbatches=m, contention=c, overlap=False, **kw)
    every_comm = sum(e.op.duration for e in tl.events if e.stream != "compute")
    assert tl.step_time == pytest.approx(_all_compute(tf, tb, m, kw) + every_comm, rel=1e-9)
    assert sum(tl.exposed.values()) == pytest.approx(sum(tl.comm.values()), rel=1e-9, abs=1e-15)
    assert tl.contention == pytest.approx(0, abs=1e-12)


@settings(max_examples=120, deadline=None)
@given(configs())
def test_step_decomposes_into_compute_exposed_contention_idle(cfg):
    tf, tb, m, kw, c = cfg
    tl = step_timeline(tf, tb, microbatches=m, contention=c, **kw)
    parts = tl.compute + sum(tl.exposed.values()) + tl.contention + tl.idle
    assert parts == pytest.approx(tl.step_time, rel=1e-9)
    assert tl.idle == pytest.approx(0, abs=1e-12)  # no pipeline releases here
    if c == 0:
        assert tl.contention == pytest.approx(0, abs=1e-12)
    # every op ran once, on its stream, one at a time per stream
    by_stream: dict[str, list] = {}
    for e in tl.events:
        by_stream.setdefault(e.stream, []).append((e.start, e.end))
    for spans in by_stream.values():
        spans.sort()
        for (_, e0), (s1, _) in zip(spans, spans[1:], strict=False):
            assert s1 >= e0 - 1e-12


# -- the derivation ----------------------------------------------------------------------------

def test_derivation_regimes_meet_and_their_assumptions_hold():
    d = so.derive_bucketed_exposure()
    L, k, t_b, t_c, s, j = so.L, so.q, so.t_b, so.t_c, so.sigma, so.j
    # at the boundary (1 - sigma) t_c = k t_b the two regimes give the same step
    at = {t_c: k * t_b / (1 - s)}
    assert sp.simplify((d.step_compute_bound - d.step_link_bound).subs(at)) == 0
    # the compute-bound gap r_{j+1} - e_j is k t_b - (1 - sigma) t_c: >= 0 exactly in its regime
    assert sp.simplify(d.gap_compute_bound - (k * t_b - (1 - s) * t_c)) == 0
    # the link-bound gap e_{j-1} - r_j is (j - 1)((1 - sigma) t_c - k t_b)/(1 - sigma)
    assert sp.simplify(d.gap_link_bound - (j - 1) * ((1 - s) * t_c - k * t_b) / (1 - s)) == 0
    # without contention: exposed = max(t_c, B t_c - (B - 1) k t_b), B = L / k
    nb = L / k
    want = sp.Max(t_c, nb * t_c - (nb - 1) * k * t_b)
    for vals in ({L: 8, k: 2, t_b: 1, t_c: 1}, {L: 8, k: 2, t_b: 1, t_c: 3},
                 {L: 6, k: 3, t_b: 2, t_c: 7}):
        assert d.exposed.subs(s, 0).subs(vals) == want.subs(vals)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 12), st.integers(1, 4), st.floats(0.2, 4.0), st.floats(0.05, 10.0),
       st.sampled_from([0.0, 0.1, 0.18, 0.5]), st.sampled_from([2, 8, 64]))
def test_symbolic_exposure_equals_the_timeline(n_buckets, per_bucket, tb, tc, sigma, n):
    """exposed(L, k, t_b, t_c, sigma) from the recurrences == the simulated timeline."""
    n_layers = n_buckets * per_bucket
    layer_bytes = 10_000_000
    bucket = per_bucket * layer_bytes
    # a link on which one bucket's all-reduce takes tc ms: the bus factor from tpp.collectives
    beta = float(so.bucket_time(n, bucket, 0, 1)) / (tc * MS)
    link = Link("nic", beta, 0.0)
    assert alpha_beta_time("all_reduce", bucket, n, beta) == pytest.approx(tc * MS)
    tl = step_timeline([0.0] * n_layers, [tb * MS] * n_layers,
                       dp=DPTraffic(0, n, layer_bytes, link, bucket_bytes=bucket),
                       contention=sigma)
    sym = so.exposed_numeric(n_layers, per_bucket, tb * MS, tc * MS, sigma)
    assert tl.exposed_total == pytest.approx(sym, rel=1e-9)
    assert len([e for e in tl.events if e.kind == "dp_grad"]) == n_buckets


def test_bucket_time_is_the_alpha_beta_time():
    t = so.bucket_time(8, 25 * 2**20, 5e-6, 50e9)
    assert float(t) == pytest.approx(alpha_beta_time("all_reduce", 25 * 2**20, 8, 50e9, 5e-6))


# -- what the systems do -----------------------------------------------------------------------

def test_ddp_buckets_fill_in_reverse_layer_order():
    dp = DPTraffic(0, 8, [10, 30, 50, 20], NIC, bucket_bytes=40)
    # reverse order 20, 50, 30, 10: [20 + 20 of layer 2] [30 of layer 2 + 10 of 1] [20 of 1 +10]
    assert dp.buckets(4) == [(2, 40), (1, 40), (0, 30)]
    tl = step_timeline([0.0] * 4, [MS] * 4, dp=dp, contention=0.0)
    starts = [e.start for e in tl.events if e.kind == "dp_grad"]
    assert starts == sorted(starts)
    assert starts[0] == pytest.approx(2 * MS)  # ready after the backward of layers 3 and 2


def test_fsdp_prefetch_exposes_only_the_first_gather_and_last_reduce_scatter():
    L, tf, tb = 6, 2 * MS, 4 * MS
    dp = DPTraffic(3, 8, 20_000_000, NIC)
    t_ag = NIC.time("all_gather", 20_000_000, 8)
    t_rs = NIC.time("reduce_scatter", 20_000_000, 8)
    assert t_ag < tf and t_ag + t_rs < tb  # small enough to hide behind one layer
    tl = step_timeline([tf] * L, [tb] * L, dp=dp, contention=0.0)
    assert tl.exposed["dp_param"] == pytest.approx(t_ag)
    assert tl.exposed["dp_grad"] == pytest.approx(t_rs)
    # without prefetch every gather waits in front of its layer: 2 L gathers exposed
    nopf = step_timeline([tf] * L, [tb] * L, dp=DPTraffic(3, 8, 20_000_000, NIC, prefetch=0),
                         contention=0.0)
    assert nopf.exposed["dp_param"] == pytest.approx(2 * L * t_ag)


def test_distributed_optimizer_param_gather_hides_behind_the_next_forward():
    L, tf, tb = 8, 3 * MS, 6 * MS
    t_ag = NIC.time("all_gather", 20_000_000, 16)
    on = step_timeline([tf] * L, [tb] * L, microbatches=2, contention=0.0,
                       dp=DPTraffic(1, 16, 20_000_000, NIC))
    off = step_timeline([tf] * L, [tb] * L, microbatches=2, contention=0.0,
                        dp=DPTraffic(1, 16, 20_000_000, NIC, overlap_param_gather=False))
    assert off.exposed["dp_param"] == pytest.approx(L * t_ag)
    assert on.exposed["dp_param"] == pytest.approx(t_ag)  # only layer 0's gather waits
    assert on.step_time < off.step_time


def test_tp_blocks_unless_decomposed():
    L, tf, tb, cf, cb = 4, 2 * MS, 4 * MS, 0.4 * MS, 0.8 * MS
    blocking = step_timeline([tf] * L, [tb] * L, tp=TPTraffic(cf, cb, NV), contention=0.0)
    assert blocking.exposed["tp"] == pytest.approx(L * (cf + cb))
    dec = step_timeline([tf] * L, [tb] * L, tp=TPTraffic(cf, cb, NV, decomposed=True, steps=4),
                        contention=0.0)
    assert dec.exposed["tp"] == pytest.approx(L * (cf + cb) / 4)  # the last chunk's share


def test_dp_and_pp_on_one_nic_serialize():
    L, tf, tb = 2, 1 * MS, 2 * MS
    dp = DPTraffic(0, 8, 50_000_000, NIC, bucket_bytes=100_000_000)
    pp_same = PPTraffic(0, 3 * MS, NIC)
    pp_own = PPTraffic(0, 3 * MS, Link("pp_link", 50e9, 5e-6))
    same = step_timeline([tf] * L, [tb] * L, dp=dp, pp=pp_same, contention=0.0)
    own = step_timeline([tf] * L, [tb] * L, dp=dp, pp=pp_own, contention=0.0)
    t_ar = NIC.time("all_reduce", 100_000_000, 8)
    assert same.link_busy["nic"] == pytest.approx(t_ar + 3 * MS)
    assert same.step_time == pytest.approx(L * (tf + tb) + 3 * MS + t_ar)  # one after the other
    assert own.step_time == pytest.approx(L * (tf + tb) + max(3 * MS, t_ar))


def test_contention_stretches_the_overlapped_compute():
    dp = DPTraffic(0, 8, 10_000_000, NIC, bucket_bytes=10_000_000)
    tl = step_timeline([MS] * 4, [4 * MS] * 4, dp=dp, contention=0.25)
    t_ar = NIC.time("all_reduce", 10_000_000, 8)
    # three all-reduces run under a later layer's backward: each costs 0.25 of its time
    assert tl.contention == pytest.approx(3 * 0.25 * t_ar)
    assert tl.exposed["dp_grad"] == pytest.approx(t_ar)


def test_pipeline_releases_are_idle_time():
    from tpp.pipeline import schedule, simulate
    sim = simulate(schedule("1f1b", 4, 8), t_f=1.0 * MS, t_b=2.0 * MS)
    acts = rank_schedule(sim, 0)
    assert len(acts) == 16
    tl = step_timeline([0.5 * MS] * 2, [1.0 * MS] * 2, microbatches=8, schedule=acts,
                       contention=0.0)
    assert tl.step_time == pytest.approx(float(sim.makespan))
    assert tl.idle == pytest.approx(float(sim.makespan) - float(sim.busy[0]))


def test_default_contention_is_the_nccl_sm_share():
    from tpp.data_parallel.overlap import NCCL_SM_SLOWDOWN
    assert NCCL_SM_SLOWDOWN == pytest.approx(24 / 132)
    assert sm_share(16, 132) == sp.Rational(16, 132)


def test_gantt_draws_every_stream():
    import matplotlib
    matplotlib.use("Agg")
    tl = step_timeline([MS] * 2, [2 * MS] * 2, dp=DPTraffic(0, 8, 10_000_000, NIC),
                       tp=TPTraffic(0.1 * MS, 0.2 * MS, NV))
    ax = gantt(tl)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["compute", "nic", "nvlink"]
    assert ax.get_xlabel() == "time (ms)"


# -- every ValueError --------------------------------------------------------------------------

def _op(name="a", **kw):
    return Op(name, kw.pop("stream", "compute"), kw.pop("duration", 1.0), **kw)


@pytest.mark.parametrize("call, match", [
    (lambda: run([_op()], contention=1.0), r"contention=1.0 must be a number in \[0, 1\)"),
    (lambda: run([_op()], contention=True), "contention=True"),
    (lambda: run(["x"]), "ops must be tpp.data_parallel.overlap.Op"),
    (lambda: run([_op(), _op()]), "two ops are named 'a'"),
    (lambda: run([_op(duration=-1)]), "duration=-1"),
    (lambda: run([_op(release=-1)]), "release=-1"),
    (lambda: run([_op(deps=("z",))]), "depends on 'z', which is not in ops"),
    (lambda: run([_op("a", deps=("b",)), _op("b")]), "deadlock"),
    (lambda: Link("", 1e9), "link name ''"),
    (lambda: Link("compute", 1e9), "other than 'compute'"),
    (lambda: Link("x", 0), "bandwidth=0 must be a number > 0"),
    (lambda: Link("x", 1e9, -1), "latency=-1 must be a number >= 0"),
    (lambda: DPTraffic(4, 8, 1, NIC), "ZeRO stage=4"),
    (lambda: DPTraffic(0, 0, 1, NIC), "group_size=0 must be an int >= 1"),
    (lambda: DPTraffic(0, 8, 1, NIC, bucket_bytes=0), "bucket_bytes=0"),
    (lambda: DPTraffic(0, 8, 1, NIC, prefetch=-1), "prefetch=-1"),
    (lambda: DPTraffic(0, 8, 1, NIC, optimizer_time=-1), "optimizer_time=-1"),
    (lambda: DPTraffic(0, 8, 1, "nic"), "link must be a tpp.data_parallel.overlap.Link"),
    (lambda: DPTraffic(0, 8, -5, NIC), "layer_bytes=-5"),
    (lambda: DPTraffic(0, 8, [1, 2], NIC).bytes_of(3), "layer_bytes has 2 entries for 3"),
    (lambda: TPTraffic(-1, 0, NV), "forward=-1"),
    (lambda: TPTraffic(0, -1, NV), "backward=-1"),
    (lambda: TPTraffic(0, 0, NV, steps=0), "steps=0"),
    (lambda: TPTraffic(0, 0, "nv"), "link must be a tpp.data_parallel.overlap.Link"),
    (lambda: TPTraffic.from_shape(1, 8, 8, 1, NV), "tp=1 must be an int >= 2"),
    (lambda: CPTraffic(0, 0, NV, share=0), r"share=0 must be in \(0, 1\]"),
    (lambda: CPTraffic(0, 0, "nv"), "link must be a tpp.data_parallel.overlap.Link"),
    (lambda: CPTraffic(-1, 0, NV), "forward=-1"),
    (lambda: CPTraffic.from_kv_bytes(100, 1, NV), "cp=1 must be an int >= 2"),
    (lambda: PPTraffic(-1, 0, NIC), "send_forward=-1"),
    (lambda: PPTraffic(0, -1, NIC), "send_backward=-1"),
    (lambda: PPTraffic(0, 0, None), "link must be a tpp.data_parallel.overlap.Link"),
    (lambda: step_timeline(1.0, [1.0]), "t_fwd must be a sequence"),
    (lambda: step_timeline([], []), "t_fwd is empty"),
    (lambda: step_timeline([1.0], [-1.0]), "t_bwd holds -1.0"),
    (lambda: step_timeline([1.0], [1.0, 1.0]), "t_fwd has 1 layers and t_bwd 2"),
    (lambda: step_timeline([1.0], [1.0], microbatches=0), "microbatches=0"),
    (lambda: step_timeline([1.0], [1.0], tp=NIC),
     "tp must be a tpp.data_parallel.overlap.TPTraffic"),
    (lambda: step_timeline([1.0], [1.0], dp=DPTraffic(0, 2, 1, NIC),
                           pp=PPTraffic(0, 0, Link("nic", 1e9))), "two links are named 'nic'"),
    (lambda: step_timeline([1.0], [1.0], schedule=[("X", 0, 0.0)]), "schedule entry"),
    (lambda: step_timeline([1.0], [1.0], schedule=[("F", 1, 0.0)]), "microbatch must be"),
    (lambda: step_timeline([1.0], [1.0], schedule=[("F", 0, -1.0)]), "release must be"),
    (lambda: step_timeline([1.0], [1.0], schedule=[("B", 0, 0.0)]), "one F before one B"),
    (lambda: step_timeline([1.0], [1.0], schedule=[("F", 0, 0.0)]), "schedule has 1 actions"),
    (lambda: sm_share(0), "nccl_blocks=0"),
    (lambda: sm_share(200, 132), "fewer than the GPU's 132 SMs"),
    (lambda: so.exposed_numeric(5, 2, 1.0, 1.0), "layers_per_bucket=2 must divide"),
    (lambda: gantt("x"), "gantt takes the StepTimeline"),
    (lambda: run([_op()]).event("nope"), "no op named 'nope'"),
    (lambda: DPTraffic(0, 8, 1, NIC, bucket_bytes=True), "bucket_bytes=True"),
])
def test_every_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_rank_schedule_errors():
    from tpp.pipeline import schedule, simulate
    sim = simulate(schedule("1f1b", 2, 4), t_f=1.0, t_b=2.0)
    with pytest.raises(ValueError, match="rank 5 has no actions"):
        rank_schedule(sim, 5)
    inter = simulate(schedule("interleaved", 2, 4, 2), t_f=1.0, t_b=2.0)
    with pytest.raises(ValueError, match="one stage per rank"):
        rank_schedule(inter, 0)


def test_serial_total_is_finite_for_large_groups():
    tl = step_timeline([MS] * 3, [2 * MS] * 3, dp=DPTraffic(3, 1024, 10**8, NIC))
    assert math.isfinite(tl.step_time) and tl.comm["dp_param"] > 0


def test_cp_ring_hides_behind_attention_unless_blocking():
    L, tf, tb = 3, 2 * MS, 4 * MS
    cf, cb = 0.3 * MS, 0.6 * MS
    ring = step_timeline([tf] * L, [tb] * L, contention=0.0,
                         cp=CPTraffic(cf, cb, NV, steps=3, share=0.5))
    # each of the 3 ring steps (cf/3) is shorter than a quarter of the attention (tf/2/4)
    assert ring.exposed["cp"] == pytest.approx(0, abs=1e-12)
    assert ring.step_time == pytest.approx(L * (tf + tb))
    block = step_timeline([tf] * L, [tb] * L, contention=0.0,
                          cp=CPTraffic(cf, cb, NV, steps=3, share=0.5, overlap=False))
    assert block.exposed["cp"] == pytest.approx(L * (cf + cb))


def test_blocking_pp_sends_are_exposed_async_ones_are_not():
    L, m = 2, 3
    args = ([MS] * L, [2 * MS] * L)
    blocking = step_timeline(*args, microbatches=m, contention=0.0,
                             pp=PPTraffic(0.2 * MS, 0.3 * MS, NIC, overlap=False))
    assert blocking.exposed["pp"] == pytest.approx(m * 0.5 * MS)
    async_ = step_timeline(*args, microbatches=m, contention=0.0,
                           pp=PPTraffic(0.2 * MS, 0.3 * MS, NIC))
    assert async_.exposed["pp"] == pytest.approx(0.3 * MS)  # only the very last send waits


def test_fsdp_forward_derivation_regimes():
    d = so.derive_fsdp_forward_exposure()
    assert sp.simplify(d.gap_compute_bound - (so.t_f - so.t_g)) == 0
    assert sp.simplify(d.gap_link_bound - (so.t_g - so.t_f)) == 0


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 10), st.floats(0.2, 5.0), st.floats(0.2, 5.0), st.sampled_from([2, 16]))
def test_fsdp_forward_symbolic_equals_the_timeline(n_layers, tf, tg, n):
    """Exposed gathers of FSDP's forward (prefetch 1): derived == the timeline's forward."""
    layer_bytes = 10_000_000
    beta = layer_bytes * float(sp.Rational(n - 1, n)) / (tg * MS)   # all-gather takes tg ms
    link = Link("nic", beta, 0.0)
    assert link.time("all_gather", layer_bytes, n) == pytest.approx(tg * MS)
    tl = step_timeline([tf * MS] * n_layers, [MS] * n_layers, contention=0.0,
                       dp=DPTraffic(3, n, layer_bytes, link))
    end_forward = tl.run.event(f"F{n_layers - 1}.mb0").end
    sym = so.derive_fsdp_forward_exposure().exposed.subs(
        {so.L: n_layers, so.t_f: tf * MS, so.t_g: tg * MS})
    assert end_forward - n_layers * tf * MS == pytest.approx(float(sym), rel=1e-9)
