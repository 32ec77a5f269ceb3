"""The new builders (looped BFS, ZB1P, ZB-H2, ZB-V, DualPipeV, DualPipe), the overlapped F&B
action, the makespan derived from the dependency graph, and the Chrome trace export."""

from __future__ import annotations

import json
from fractions import Fraction as Fr

import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from tpp import pipeline as pp
from tpp.pipeline.ir import Overlap
from tpp.symbolic import pipeline as sym
from tpp.symbolic.pipeline import t_B, t_F, t_FB, t_W

NEW = ("looped-bfs", "zb1p", "zb-h2", "zbv", "dualpipev", "dualpipe")
costs = st.fractions(min_value=Fr(1, 6), max_value=5, max_denominator=6)


def _grid_point(name: str, data: st.DataObject) -> tuple[int, int, int]:
    """A configuration the builder accepts, P <= 16, M <= 64, v <= 4."""
    if name == "dualpipe":
        P = 2 * data.draw(st.integers(1, 8))
        return P, 2 * data.draw(st.integers(P, 32)), 1
    if name in ("zbv", "dualpipev"):
        # the V-shapes' fronts grow fast (ZB-V at P=16, M=64 keeps 706 forms, ~20 s): P <= 8 here
        P = data.draw(st.integers(1, 8))
        lo = 2 * P if name == "dualpipev" else 1
        return P, data.draw(st.integers(lo, 64)), 2
    P = data.draw(st.integers(1, 16))
    v = 1 if name == "zb-h2" else data.draw(st.integers(1, 4))
    M = data.draw(st.integers(1, 64))
    if name == "zb1p" and M % max(1, M // P):
        M = P * max(1, M // P)
    return P, M, v


@settings(max_examples=12, deadline=None)
@given(st.sampled_from(NEW), st.data(), costs, costs, costs, costs)
def test_every_builder_validates_and_graph_makespan_equals_simulation(name, data, tf, tb, tw,
                                                                      tfb):
    """P <= 16, M <= 64, v <= 4: the forms derived from the dependency graph give the simulated
    makespan exactly (numbers substituted in every form, the largest taken)."""
    P, M, v = _grid_point(name, data)
    s = pp.validate(pp.schedule(name, P, M, v))
    r = pp.simulate(s, t_f=tf, t_b=tb, t_w=tw, overlap=tfb)
    forms = sym.makespan_forms(s)
    assert max(f[0] * tf + f[1] * tb + f[2] * tw + f[3] * tfb for f in forms) == r.makespan


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(NEW), st.integers(1, 3), costs, costs, costs, costs)
def test_makespan_from_schedule_equals_simulation(name, k, tf, tb, tw, tfb):
    """The SymPy expression (P up to 6) equals simulate() and so does the bubble fraction."""
    P = 2 * k if name == "dualpipe" else k + (k > 1)
    M = 2 * P + 2 * k if name in ("dualpipe", "dualpipev") else 3 * P
    v = 1 if name in ("zb-h2", "dualpipe") else 2
    s = pp.schedule(name, P, M, v)
    r = pp.simulate(s, t_f=tf, t_b=tb, t_w=tw, overlap=tfb)
    span = sym.makespan_from_schedule(s, t_F, t_B, t_W, t_FB)
    vals = {"t_F": tf, "t_B": tb, "t_W": tw, "t_FB": tfb}
    assert sym.evaluate(span, **vals) == r.makespan
    bubble = sym.bubble_fraction_from_schedule(s, t_f=t_F, t_b=t_B, t_w=t_W, overlap=t_FB)
    assert sym.evaluate(bubble, **vals) == r.bubble_fraction


@pytest.mark.parametrize("name", ["gpipe", "1f1b", "interleaved", "zb-h1", "naive"])
def test_graph_makespan_equals_the_critical_path_closed_forms(name):
    """Derived from the schedule for concrete P, M, it matches the closed forms in P and M."""
    for P in (1, 2, 3, 5) if name != "zb-h1" else (1, 2, 3):
        for k in (1, 2):
            M, v = P * k, (2 if name == "interleaved" else 1)
            s = pp.schedule(name, P, M, v)
            tw = t_W if name == "zb-h1" else 0
            derived = sym.makespan_from_schedule(s, t_F, t_B, tw)
            closed = sym.makespan(name).subs({sym.P: P, sym.M: M, sym.v: v})
            for vals in ({t_F: 1, t_B: 2, t_W: 1}, {t_F: 3, t_B: 1, t_W: 2},
                         {t_F: 2, t_B: 5, t_W: 7}):
                assert derived.subs(vals) == closed.subs(vals), (name, P, M, vals)


def test_graph_makespan_is_small_and_exact():
    s = pp.schedule("1f1b", 4, 8)
    span = sym.makespan_from_schedule(s, t_F, t_B)
    assert sp.expand(span - 11 * (t_F + t_B)) == 0  # one linear form, no Max
    zb = sym.makespan_from_schedule(pp.schedule("zb-h1", 4, 8), t_F, t_B, t_W)
    # ten forms none of which dominates another coefficient-wise; their Max is ZB-H1's
    # 8 (t_F + t_B + t_W) + 3 Max(t_F + t_B - t_W, t_B, t_F)
    assert isinstance(zb, sp.Max) and len(zb.args) == 10
    closed = sym.makespan("zb-h1").subs({sym.P: 4, sym.M: 8})
    for vals in ({t_F: 1, t_B: 2, t_W: 1}, {t_F: 3, t_B: 1, t_W: 2}, {t_F: 2, t_B: 5, t_W: 7}):
        assert zb.subs(vals) == closed.subs(vals)


def test_overlap_action_prints_and_parses():
    s = pp.schedule("dualpipev", 2, 4, 2)
    pairs = [a for row in s.actions for a in row if type(a) is Overlap]
    assert pairs and all(pp.parse_action(str(a)) == a for a in pairs)
    assert str(pp.parse_action("3F5&4B1")) == "3F5&4B1"
    rebuilt = pp.Schedule.from_strings([" ".join(map(str, row)) for row in s.actions])
    rebuilt.stage_ranks = s.stage_ranks
    assert pp.simulate(rebuilt, 1, 2, 1).makespan == pp.simulate(s, 1, 2, 1).makespan
    with pytest.raises(ValueError, match="forward and a full backward"):
        pp.validate(pp.Schedule("x", 1, 2, 1, [[pp.parse_action("0F0"),
                                                 Overlap(pp.parse_action("0F1"),
                                                         pp.parse_action("0I0")),
                                                 pp.parse_action("0W0"),
                                                 pp.parse_action("0B1")]]))


def test_overlap_cost_is_charged_once():
    s = pp.schedule("dualpipev", 4, 16, 2)
    slow = pp.simulate(s, t_f=1, t_b=2, t_w=1)
    fast = pp.simulate(s, t_f=1, t_b=2, t_w=1, overlap=3)
    assert fast.makespan < slow.makespan
    n_pairs = sum(type(a) is Overlap for a in s.actions[0])
    assert sum(fast.busy) == sum(slow.busy) - sum(
        type(a) is Overlap for row in s.actions for a in row) * (1 + 3 - 3)
    assert n_pairs > 0


def test_v_placement_and_mirror():
    s = pp.schedule("zbv", 3, 6, 2)
    assert [s.rank_of(st) for st in range(6)] == [0, 1, 2, 2, 1, 0]
    d = pp.schedule("dualpipe", 4, 8)
    assert d.rank_of(0, 0) == 0 and d.rank_of(0, 4) == 3 and d.mirrored_from == 4
    bad = pp.Schedule("x", 2, 1, 1, [["1F0", "1B0"], ["0F0", "0B0"]])
    bad.actions = [[pp.parse_action(a) for a in row] for row in bad.actions]
    with pytest.raises(ValueError, match="1F0 is on rank 0 but stage 1 lives on rank"):
        pp.validate(bad)


def test_builder_errors_say_what_to_change():
    with pytest.raises(ValueError, match="use virtual=2"):
        pp.schedule("zbv", 4, 8, 3)
    with pytest.raises(ValueError, match=r"dualpipe needs an even number .* use P=4, M=8"):
        pp.schedule("dualpipe", 3, 8)
    with pytest.raises(ValueError, match="use M = 8"):
        pp.schedule("zb1p", 4, 9, 2)
    with pytest.raises(ValueError, match="virtual must be 1"):
        pp.schedule("zb-h2", 4, 8, 2)


def test_known_peaks_and_bubbles():
    """Memory of each schedule, from the simulated timeline (activation sets held)."""
    assert max(pp.simulate(pp.schedule("zb-h2", 6, 24), 1, 1, 1).peak_inflight) == 11
    assert max(pp.simulate(pp.schedule("zb-h1", 6, 24), 1, 1, 1).peak_inflight) == 6
    r = pp.simulate(pp.schedule("zbv", 4, 16, 2), 1, 1, 1)
    assert max(r.peak_inflight) == 2 * 4  # ZB-V holds 2P chunk-activations, 1F1B's P stages


def test_chrome_trace(tmp_path):
    r = pp.simulate(pp.schedule("dualpipev", 2, 4, 2), t_f=1, t_b=2, t_w=1, overlap=2)
    trace = pp.chrome_trace(r)
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == len(r.timeline)
    assert {e["tid"] for e in xs} == {0, 1}
    assert any("&" in e["name"] for e in xs)
    assert max(e["ts"] + e["dur"] for e in xs) == float(r.makespan) * 1000
    path = pp.write_chrome_trace(r, tmp_path / "t.json")
    assert json.loads(path.read_text()) == trace
    with pytest.raises(ValueError, match="microseconds_per_unit must be > 0"):
        pp.chrome_trace(r, 0)
