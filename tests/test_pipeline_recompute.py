"""GPipe with re-materialisation (Huang et al. 2019, sec. 2.3): every backward re-runs its
stage's forward; a rank stores only each stage's input plus one stage's activations."""

from __future__ import annotations

from fractions import Fraction as Fr

import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from tpp import pipeline as pp
from tpp.symbolic import pipeline as sym
from tpp.symbolic.pipeline import t_B, t_F, t_W

costs = st.fractions(min_value=Fr(1, 6), max_value=5, max_denominator=6)


def test_gpipe_recompute_hand_worked():
    # P=4, M=8, t_F=1, t_B=2: the fill/drain argument of chapter 07 with a backward of 2+1
    # gives (M + P - 1)(t_F + t_B + t_F) = 11 * 4
    res = pp.simulate(pp.schedule("gpipe", 4, 8), t_f=1, t_b=2, recompute=True)
    assert res.makespan == 44
    assert res.busy == [8 * (1 + 3)] * 4
    # 8 stored inputs of 1 byte + one stage's 100 bytes, on every rank
    assert res.peak_activation_bytes(100, 1) == [108] * 4
    plain = pp.simulate(pp.schedule("gpipe", 4, 8), t_f=1, t_b=2)
    assert plain.makespan == 33 and plain.peak_activation_bytes(100, 1) == [800] * 4


def test_one_f_one_b_memory_in_bytes():
    res = pp.simulate(pp.schedule("1f1b", 4, 8), t_f=1, t_b=2)
    assert res.peak_activation_bytes(100, 1) == [400, 300, 200, 100]


def test_recompute_with_split_backward_holds_stage_until_w():
    s = pp.Schedule.from_strings(["0F0 0I0 0W0"])
    res = pp.simulate(s, t_f=1, t_b=2, t_w=1, recompute=True)
    assert [(str(a), b, e) for a, b, e in res.rank_timeline(0)] == [
        ("0F0", 0, 1), ("0I0", 1, 4), ("0W0", 4, 5)]
    times, amounts = res.activation_bytes_over_time(0, 10, 1)
    assert list(zip(times, amounts, strict=True)) == [(0, 1), (1, 11), (5, 0)]


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(["gpipe", "1f1b", "zb-h1", "interleaved"]), st.integers(1, 8),
       st.integers(1, 4), costs, costs, costs)
def test_derived_makespan_equals_simulation_with_recompute(name, p, k, tf, tb, tw):
    v = 2 if name == "interleaved" else 1
    m = p * k if name == "interleaved" else k * 3
    sched = pp.schedule(name, p, m, virtual=v)
    if name != "zb-h1":
        tw = Fr(0)
    expr = sym.makespan_from_schedule(sched, t_F, t_B, t_W, recompute=True)
    got = sym.evaluate(expr, t_F=tf, t_B=tb, t_W=tw)
    res = pp.simulate(sched, t_f=tf, t_b=tb, t_w=tw, recompute=True)
    assert got == res.makespan
    busy = sym.busy_from_schedule(sched, t_F, t_B, t_W, recompute=True)
    assert [sym.evaluate(b, t_F=tf, t_B=tb, t_W=tw) for b in busy] == res.busy


@pytest.mark.parametrize("P_,M_", [(2, 1), (3, 5), (4, 8), (8, 4)])
def test_gpipe_recompute_memory_is_inputs_plus_one_stage(P_, M_):
    res = pp.simulate(pp.schedule("gpipe", P_, M_), t_f=Fr(1, 3), t_b=1, recompute=True)
    assert res.peak_activation_bytes(1000, 7) == [7 * M_ + 1000] * P_
    assert res.peak_inflight == [M_] * P_  # the count of sets does not change, their size does


def test_recompute_costs_one_forward_per_backward():
    sched = pp.schedule("gpipe", 4, 8)
    assert sp.expand(sym.makespan_from_schedule(sched, recompute=True)
                     - sym.makespan_from_schedule(sched)) == 11 * t_F


def test_bad_bytes_raise():
    res = pp.simulate(pp.schedule("gpipe", 2, 2), recompute=True)
    with pytest.raises(ValueError, match="non-negative number of bytes"):
        res.peak_activation_bytes(-1, 1)
