"""tpp.symbolic.pipeline: the SymPy critical-path makespans equal the simulator exactly over
sweeps, and reduce to the textbook forms written out here by hand."""

from __future__ import annotations

from fractions import Fraction as Fr

import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from tpp import pipeline as pp
from tpp.symbolic import pipeline as sym
from tpp.symbolic.pipeline import M, P, t_B, t_F, t_W, v

costs = st.fractions(min_value=Fr(1, 6), max_value=5, max_denominator=6)


def test_textbook_forms():
    assert sp.simplify(sym.makespan("gpipe") - (M + P - 1) * (t_F + t_B)) == 0
    assert sp.simplify(sym.makespan("1f1b") - (M + P - 1) * (t_F + t_B)) == 0
    assert sp.simplify(sym.bubble_fraction("gpipe") - (P - 1) / (M + P - 1)) == 0
    assert sp.simplify(sym.bubble_ratio("1f1b") - (P - 1) / M) == 0
    assert sp.simplify(sym.bubble_ratio("naive") - (P - 1)) == 0
    assert sp.simplify(sym.bubble_fraction("interleaved") - (P - 1) / (v * M + P - 1)) == 0
    assert sp.simplify(sym.bubble_ratio("interleaved") - (P - 1) / (v * M)) == 0
    # Narayanan et al. 2021: bubble time (P-1)(t_f + t_b)/v with per-rank costs t_f = v t_F
    assert sp.simplify(sym.bubble_time("interleaved") - (P - 1) * (v * t_F + v * t_B) / v) == 0


def test_zb_h1_agrees_with_qi2023_when_tw_le_min_tf_tb():
    d1, d2 = sp.symbols("d1 d2", nonnegative=True)
    case = {t_F: t_W + d1, t_B: t_W + d2}  # t_W <= min(t_F, t_B)
    bt = sym.bubble_time("zb-h1").subs(case)
    paper = sym.qi2023_zb_h1_bubble_time().subs(case)
    assert sp.simplify(bt - paper) == 0
    # otherwise the head wait (P-1) t_B or the fill (P-1) t_F dominates
    assert sp.simplify(sym.bubble_time("zb-h1").subs({t_F: 1, t_W: 2, t_B: 1}) - (P - 1)) == 0
    assert sp.simplify(sym.bubble_time("zb-h1").subs({t_F: 3, t_B: 1, t_W: 2}) - 3 * (P - 1)) == 0


def test_seed_interleaved_formula_matches_neither_convention():
    vals = {"P": 8, "M": 32, "v": 4}
    seed = sym.evaluate(sym.seed1_interleaved_bubble(), **vals)
    assert seed == Fr(7, 4 * 39)
    assert sym.evaluate(sym.bubble_fraction("interleaved"), **vals) == Fr(7, 135)
    assert sym.evaluate(sym.bubble_ratio("interleaved"), **vals) == Fr(7, 128)


def test_seed1_values():
    assert sym.evaluate(sym.bubble_fraction("gpipe"), P=8, M=32) == Fr(7, 39)  # seed: ~18%
    assert sym.evaluate(sym.bubble_fraction("gpipe"), P=8, M=8) == Fr(7, 15)  # seed: ~47%


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["naive", "gpipe", "1f1b", "interleaved"]), st.integers(1, 16),
       st.integers(1, 4), st.data(), costs, costs)
def test_symbolic_equals_simulation(name, p, vv, data, tf, tb):
    if name != "interleaved":
        vv = 1
        m = data.draw(st.integers(1, 64))
    else:
        m = p * data.draw(st.integers(1, 64 // p))
    r = pp.simulate(pp.schedule(name, p, m, vv), t_f=tf, t_b=tb)
    vals = {"P": p, "M": m, "v": vv, "t_F": tf, "t_B": tb}
    assert sym.evaluate(sym.makespan(name), **vals) == r.makespan
    assert sym.evaluate(sym.bubble_fraction(name), **vals) == r.bubble_fraction
    assert sym.evaluate(sym.bubble_ratio(name), **vals) == r.bubble_ratio


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 16), st.integers(0, 48), costs, costs, costs)
def test_symbolic_zb_h1_equals_simulation(p, extra, tf, tb, tw):
    m = p + extra
    r = pp.simulate(pp.schedule("zb-h1", p, m), t_f=tf, t_b=tb, t_w=tw)
    vals = {"P": p, "M": m, "t_F": tf, "t_B": tb, "t_W": tw}
    assert sym.evaluate(sym.makespan("zb-h1"), **vals) == r.makespan
    assert sym.evaluate(sym.bubble_fraction("zb-h1"), **vals) == r.bubble_fraction


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(["1f1b", "interleaved"]), st.integers(1, 8), st.integers(1, 4),
       st.integers(1, 4), costs, costs)
def test_last_rank_runs_without_gap(name, p, vv, k, tf, tb):
    """The critical path's middle segment: the last rank never waits once it has started."""
    if name != "interleaved":
        vv = 1
    r = pp.simulate(pp.schedule(name, p, p * k, vv), t_f=tf, t_b=tb)
    rows = r.rank_timeline(p - 1)
    assert rows[0][1] == (p - 1) * tf
    assert all(rows[i][2] == rows[i + 1][1] for i in range(len(rows) - 1))


def test_critical_path_segments_sum_to_makespan():
    segs = sym.critical_path("gpipe")
    assert len(segs) == 4 and all(isinstance(label, str) for label, _ in segs)
    assert sp.simplify(sum(t for _, t in segs) - sym.makespan("gpipe")) == 0


def test_errors():
    with pytest.raises(ValueError, match="unknown schedule 'dualpipe': use one of naive"):
        sym.makespan("dualpipe")
    with pytest.raises(ValueError, match="still depends on M, t_B, t_F: give their values"):
        sym.evaluate(sym.makespan("gpipe"), P=2)
    with pytest.raises(ValueError, match="t_F=1.0 is a float: pass an int or fractions.Fraction"):
        sym.evaluate(sym.makespan("gpipe"), P=2, M=2, t_F=1.0, t_B=1)
    with pytest.raises(ValueError, match="unknown symbol 'Q': use one of P, M"):
        sym.evaluate(sym.makespan("gpipe"), Q=2)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 16), st.integers(1, 64), st.sampled_from([Fr(0), Fr(1, 3), Fr(1), Fr(5)]),
       st.sampled_from([Fr(0), Fr(1, 2), Fr(1), Fr(3)]), st.sampled_from([Fr(0), Fr(1), Fr(4)]))
def test_symbolic_zb_h1_any_m_equals_simulation(p, m, tf, tb, tw):
    """Every M, including M < P where critical_path("zb-h1") does not apply."""
    if tf + tb + tw == 0:
        tb = Fr(1)
    r = pp.simulate(pp.schedule("zb-h1", p, m), t_f=tf, t_b=tb, t_w=tw)
    vals = {"P": p, "M": m, "t_F": tf, "t_B": tb, "t_W": tw}
    assert sym.evaluate(sym.zb_h1_makespan_any_m(), **vals) == r.makespan
    if m >= p:
        assert sym.evaluate(sym.makespan("zb-h1"), **vals) == r.makespan


def test_zb_h1_any_m_reduces_to_the_m_ge_p_form():
    d = sp.Symbol("d", nonnegative=True, integer=True)
    general = sym.zb_h1_makespan_any_m().subs(M, P + d)
    assert general.has(sp.Max)
    for vals in ({t_F: 1, t_B: 1, t_W: 1}, {t_F: 3, t_B: 1, t_W: 2}, {t_F: 1, t_B: 2, t_W: 5},
                 {t_F: 2, t_B: 3, t_W: 1}):
        for pv in (1, 2, 5):
            for dv in (0, 1, 7):
                sub = {**vals, P: pv, d: dv}
                assert general.subs(sub) == sym.makespan("zb-h1").subs({**sub, M: pv + dv})
    # with M < P, e.g. P = 4, M = 2, t_F = 5, t_B = 1, t_W = 3: path (c) is the longest,
    # 5 t_F + 4 t_B + 2 t_W = 35 (traced by hand on the simulator's timeline)
    assert sym.evaluate(sym.zb_h1_makespan_any_m(), P=4, M=2, t_F=5, t_B=1, t_W=3) == 35
    assert pp.simulate(pp.schedule("zb-h1", 4, 2), t_f=5, t_b=1, t_w=3).makespan == 35
