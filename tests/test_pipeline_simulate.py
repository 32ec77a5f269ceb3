"""Tests of tpp.pipeline.simulate: exact makespans and bubbles against closed forms derived by
hand, an independent fixed-point simulator, peak in-flight activations, p2p accounting, plots.
"""

from __future__ import annotations

from fractions import Fraction as Fr

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tpp import pipeline as pp
from tpp.pipeline import Schedule

costs = st.fractions(min_value=0, max_value=5, max_denominator=6)
pos_costs = st.fractions(min_value=Fr(1, 6), max_value=5, max_denominator=6)
PM = st.tuples(st.integers(1, 16), st.integers(1, 64))


def _hand_makespan(name, P, M, v, tf, tb, tw):
    """Closed forms worked out by hand (B costs tb + tw; zb-h1 needs M >= P)."""
    tB = tb + tw
    if name == "naive":
        return M * P * (tf + tB)
    if name in ("gpipe", "1f1b"):
        return (M + P - 1) * (tf + tB)
    if name == "interleaved":
        return (v * M + P - 1) * (tf + tB)
    return M * (tf + tb + tw) + (P - 1) * max(tf + tb - tw, tb, tf)


@settings(max_examples=50, deadline=None)
@given(st.sampled_from(["naive", "gpipe", "1f1b"]), PM, pos_costs, costs, costs)
def test_makespan_and_bubble_exact(name, pm, tf, tb, tw):
    P, M = pm
    r = pp.simulate(pp.schedule(name, P, M), t_f=tf, t_b=tb, t_w=tw)
    T = _hand_makespan(name, P, M, 1, tf, tb, tw)
    assert r.makespan == T
    assert isinstance(r.makespan, Fr | int)
    busy = M * (tf + tb + tw)
    assert r.busy == [busy] * P
    assert r.idle == [T - busy] * P
    if name == "naive":
        assert r.bubble_fraction == Fr(P - 1, P)
        assert r.bubble_ratio == P - 1
    else:
        assert r.bubble_fraction == Fr(P - 1, M + P - 1)
        assert r.bubble_ratio == Fr(P - 1, M)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 16), st.integers(1, 4), st.data(), pos_costs, costs)
def test_interleaved_bubble_exact(P, v, data, tf, tb):
    M = P * data.draw(st.integers(1, 64 // P))
    r = pp.simulate(pp.schedule("interleaved", P, M, v), t_f=tf, t_b=tb)
    assert r.makespan == (v * M + P - 1) * (tf + tb)
    assert r.bubble_fraction == Fr(P - 1, v * M + P - 1)
    assert r.bubble_ratio == Fr(P - 1, v * M)
    # Narayanan et al. 2021: bubble time (P-1)(t_f + t_b)/v with per-rank costs v t_F, v t_B
    assert r.idle[0] == Fr(P - 1) * (v * tf + v * tb) / v


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 16), st.integers(0, 48), costs, costs, costs)
def test_zb_h1_bubble_exact(P, extra, tf, tb, tw):
    M = P + extra
    if tf + tb + tw == 0:
        tb = Fr(1)
    r = pp.simulate(pp.schedule("zb-h1", P, M), t_f=tf, t_b=tb, t_w=tw)
    # longest of: rank 0's head wait (P-1) tb, the last rank's fill (P-1) tf, and the path
    # through the last rank's deferred W's (P-1)(tf + tb - tw), on top of the work M(tf+tb+tw)
    T = M * (tf + tb + tw) + (P - 1) * max(tf + tb - tw, tb, tf)
    assert r.makespan == T
    assert r.bubble_fraction == 1 - Fr(M * (tf + tb + tw)) / T
    if tw <= min(tf, tb):  # Qi et al. 2023's statement of the ZB-H1 bubble
        assert r.idle[0] == (P - 1) * (tf + tb - tw)


@settings(max_examples=50, deadline=None)
@given(PM, costs, costs, costs)
def test_zb_h1_bubble_exact_for_every_m(pm, tf, tb, tw):
    # any M, also M < P: the three paths, with K = max(M, P) (rank 0's wait for its first input
    # gradient) and the last input gradient climbing max(P - M, 0) ranks to the rank that runs
    # M deferred W's; for M >= P this is the formula of the test above
    P, M = pm
    if tf + tb + tw == 0:
        tb = Fr(1)
    r = pp.simulate(pp.schedule("zb-h1", P, M), t_f=tf, t_b=tb, t_w=tw)
    K = max(M, P)
    T = max((M + P - 1) * (tf + tb) + max(M - P + 1, 1) * tw,
            K * tf + (M + P - 1) * tb + M * tw,
            (M + P - 1) * tf + K * tb + M * tw)
    assert r.makespan == T
    assert r.bubble_fraction == 1 - Fr(M * (tf + tb + tw)) / T


def test_zb_h1_beats_1f1b_with_equal_costs():
    one = pp.simulate(pp.schedule("1f1b", 4, 8), t_f=1, t_b=2)  # B = I + W
    zb = pp.simulate(pp.schedule("zb-h1", 4, 8), t_f=1, t_b=1, t_w=1)
    assert one.idle[0] == 3 * 3 and zb.idle[0] == 3 * 1  # (P-1)(tF+tB+tW) vs (P-1)(tF+tB-tW)


@settings(max_examples=40, deadline=None)
@given(PM)
def test_peak_inflight_rules(pm):
    P, M = pm
    assert pp.simulate(pp.schedule("1f1b", P, M), 1, 2).peak_inflight == [
        min(P - r, M) for r in range(P)]
    assert pp.simulate(pp.schedule("gpipe", P, M), 1, 2).peak_inflight == [M] * P
    assert pp.simulate(pp.schedule("naive", P, M), 1, 2).peak_inflight == [1] * P
    zb = pp.simulate(pp.schedule("zb-h1", P, M), 1, 1, 1)
    assert zb.peak_inflight_until("I") == [min(P - r, M) for r in range(P)]
    assert zb.peak_inflight == [min(P, M)] * P


def test_inflight_over_time_1f1b_rank0_hand_trace():
    # P=2, M=3, t_f=1, t_b=2, worked by hand. rank 1 runs 1F0 1B0 1F1 1B1 1F2 1B2 at
    # [1,2] [2,4] [4,5] [5,7] [7,8] [8,10]; rank 0 runs 0F0 0F1 0B0 0F2 0B1 0B2 at
    # [0,1] [1,2] [4,6] [6,7] [7,9] [10,12] (each backward waits for rank 1's).
    r = pp.simulate(pp.schedule("1f1b", 2, 3), t_f=1, t_b=2)
    spans = {str(a): (s, e) for _, a, s, e in r.timeline}
    assert spans["0B0"] == (4, 6) and spans["0F2"] == (6, 7)
    assert spans["0B1"] == (7, 9) and spans["0B2"] == (10, 12)
    assert spans["1F2"] == (7, 8) and spans["1B2"] == (8, 10)
    times, counts = r.inflight_over_time(0)
    # +1 at 0 and 1; at 6 0B0 frees one and 0F2 takes one; 0B1 frees at 9, 0B2 at 12
    assert list(zip(times, counts, strict=True)) == [(0, 1), (1, 2), (6, 2), (9, 1), (12, 0)]
    assert r.makespan == 12 == (3 + 2 - 1) * 3


def _fixed_point(schedule: Schedule, tf, tb, tw, xfer):
    """Independent reference: relax start times to a fixed point (Bellman-Ford on the DAG)."""
    P, S = schedule.ranks, schedule.stages
    kinds = {(a.stage, a.microbatch, a.kind) for row in schedule.actions for a in row}
    cost = {"F": tf, "B": tb + tw, "I": tb, "W": tw}
    end = {}
    for _ in range(schedule.num_actions + 1):
        changed = False
        for r, row in enumerate(schedule.actions):
            t = 0
            for a in row:
                deps = []
                if a.kind == "F" and a.stage > 0:
                    deps.append((a.stage - 1, a.microbatch, "F"))
                if a.kind in "BI":
                    deps.append((a.stage, a.microbatch, "F"))
                    if a.stage < S - 1:
                        k = "I" if (a.stage + 1, a.microbatch, "I") in kinds else "B"
                        deps.append((a.stage + 1, a.microbatch, k))
                if a.kind == "W":
                    deps.append((a.stage, a.microbatch, "I"))
                for d in deps:
                    de = end.get(d, 0) + (xfer if d[0] % P != r else 0)
                    t = max(t, de)
                e = t + cost[a.kind]
                key = (a.stage, a.microbatch, a.kind)
                if end.get(key) != e:
                    end[key] = e
                    changed = True
                t = e
        if not changed:
            return max(end.values())
    raise AssertionError("no fixed point")


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["naive", "gpipe", "1f1b", "interleaved", "zb-h1"]),
       st.integers(1, 5), st.integers(1, 3), st.integers(1, 8), pos_costs, costs, costs, costs)
def test_event_simulator_matches_fixed_point(name, P, v, k, tf, tb, tw, lat):
    if name != "interleaved":
        v = 1
    M = P * k if name == "interleaved" else k
    s = pp.schedule(name, P, M, v)
    r = pp.simulate(s, t_f=tf, t_b=tb, t_w=tw, p2p_latency=lat)
    assert r.makespan == _fixed_point(s, tf, tb, tw, lat)


def test_p2p_latency_and_bytes_gpipe():
    P, M, L = 4, 6, Fr(1, 3)
    r = pp.simulate(pp.schedule("gpipe", P, M), t_f=1, t_b=2, p2p_latency=L,
                    p2p_bandwidth=1000, activation_bytes=500)
    # every boundary crossing costs L + 500/1000; fill and drain each cross P-1 boundaries
    assert r.makespan == (M + P - 1) * 3 + 2 * (P - 1) * (L + Fr(1, 2))
    assert r.p2p_messages == 2 * (P - 1) * M
    assert r.p2p_bytes == 2 * (P - 1) * M * 500


def test_p2p_messages_interleaved_v_times_more():
    P, M, v = 4, 8, 3
    r = pp.simulate(pp.schedule("interleaved", P, M, v), activation_bytes=7)
    assert r.p2p_messages == 2 * (v * P - 1) * M
    assert r.p2p_bytes == 7 * 2 * (v * P - 1) * M


def test_single_rank_has_no_p2p_and_no_bubble():
    r = pp.simulate(pp.schedule("interleaved", 1, 3, 2), t_f=1, t_b=1, p2p_latency=5)
    assert r.p2p_messages == 0 and r.bubble_fraction == 0 and r.makespan == 12


def test_per_stage_costs():
    r = pp.simulate(pp.schedule("gpipe", 2, 1), t_f=[1, 3], t_b=[2, 5])
    assert r.makespan == 1 + 3 + 5 + 2


@pytest.mark.parametrize(
    "kwargs, match",
    [({"t_f": [1, 2, 3]}, "has 3 entries but the schedule has 2 stages"),
     ({"t_f": -1}, "t_f must be a non-negative number"),
     ({"p2p_bandwidth": 0}, "p2p_bandwidth must be > 0"),
     ({"p2p_latency": -1}, "p2p_latency must be a non-negative")],
)
def test_simulate_argument_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        pp.simulate(pp.schedule("1f1b", 2, 2), **kwargs)


def test_float_defaults_work():
    r = pp.simulate(pp.schedule("1f1b", 4, 8))
    assert r.makespan == pytest.approx(11 * 3.0)
    assert r.bubble_fraction == pytest.approx(3 / 11)


def test_plots_draw(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    r = pp.simulate(pp.schedule("zb-h1", 3, 4), 1, 1, 1)
    ax = pp.gantt(r)
    assert ax.get_xlabel() == "time (time units)"
    assert len(ax.patches) == r.schedule.num_actions
    texts = {t.get_text() for t in ax.texts}
    assert {"0", "1", "2", "3"} <= texts
    ax2 = pp.memory_plot(r)
    assert "activations held" in ax2.get_ylabel()
    ax2.figure.savefig(tmp_path / "m.png")
    plt.close("all")


def test_timeline_is_the_run_even_when_read_after_the_schedule_changed():
    """The timeline is listed when first read (from each operation's start and cost): it is the
    run's, in completion order, even if the schedule's rows were edited after simulating."""
    s = pp.schedule("1f1b", 3, 4)
    r = pp.simulate(s, t_f=1, t_b=2, p2p_latency=Fr(1, 2))
    want = pp.simulate(pp.schedule("1f1b", 3, 4), t_f=1, t_b=2, p2p_latency=Fr(1, 2)).timeline
    s.actions[0].reverse()
    s.actions[1].clear()
    got = r.timeline
    assert got == want and got is r.timeline
    assert [e for _, _, _, e in got] == [st + (1 if a.kind == "F" else 2)
                                         for _, a, st, _ in got]
    assert sorted(str(a) for _, a, _, _ in got) == sorted(
        str(a) for row in pp.schedule("1f1b", 3, 4).actions for a in row)
    assert r.makespan == max(e for _, _, _, e in got)
