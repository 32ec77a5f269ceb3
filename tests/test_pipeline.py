"""Tests of tpp.pipeline's IR, builders and validator.

Expected values come from the definitions written out here (counts of actions, the 1F1B warm-up
rule), never from running the code under test.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tpp import pipeline as pp
from tpp.pipeline import Action, Schedule, parse_action

NAMES = ["naive", "gpipe", "1f1b", "zb-h1"]


@st.composite
def configs(draw, names=("naive", "gpipe", "1f1b", "interleaved", "zb-h1")):
    name = draw(st.sampled_from(names))
    P = draw(st.integers(1, 16))
    if name == "interleaved":
        v = draw(st.integers(1, 4))
        M = P * draw(st.integers(1, 64 // P))
    else:
        v = 1
        M = draw(st.integers(1, 64))
    return name, P, M, v


# --- IR ---------------------------------------------------------------------------------------

def test_action_compact_form_round_trips():
    a = Action(5, "B", 3)
    assert str(a) == "5B3"
    assert parse_action("5B3") == a
    assert parse_action(" 12W40 ") == Action(12, "W", 40)
    assert str(parse_action("0F1")) == "0F1"


@pytest.mark.parametrize("bad", ["F1", "0X1", "0F", "", "a0F1"])
def test_parse_action_rejects_garbage(bad):
    with pytest.raises(ValueError, match="<stage><kind><microbatch>"):
        parse_action(bad)


def test_from_strings_infers_sizes():
    s = Schedule.from_strings(["0F0 0F1 0B0 0B1", "1F0 1B0 1F1 1B1"])
    assert (s.ranks, s.microbatches, s.virtual, s.stages) == (2, 2, 1, 2)
    assert s.to_strings()[1] == ["1F0", "1B0", "1F1", "1B1"]
    pp.validate(s)
    s2 = Schedule.from_strings("0F0 2F0 2B0 0B0\n1F0 3F0 3B0 1B0")
    assert (s2.ranks, s2.virtual, s2.stages) == (2, 2, 4)
    pp.validate(s2)


def test_schedule_str_lists_each_rank():
    text = str(pp.schedule("1f1b", 2, 2))
    assert "rank 0:" in text and "rank 1:" in text and "0F0" in text


# --- builders ---------------------------------------------------------------------------------

def test_1f1b_orders_written_out_for_p4_m6():
    s = pp.schedule("1f1b", 4, 6)
    assert s.to_strings()[0] == ("0F0 0F1 0F2 0F3 0B0 0F4 0B1 0F5 0B2 0B3 0B4 0B5").split()
    assert s.to_strings()[3] == ("3F0 3B0 3F1 3B1 3F2 3B2 3F3 3B3 3F4 3B4 3F5 3B5").split()


def test_gpipe_and_naive_orders():
    assert pp.schedule("gpipe", 2, 3).to_strings()[1] == "1F0 1F1 1F2 1B0 1B1 1B2".split()
    assert pp.schedule("naive", 2, 2).to_strings()[0] == "0F0 0B0 0F1 0B1".split()


def test_interleaved_places_stage_s_on_rank_s_mod_p():
    s = pp.schedule("interleaved", 4, 8, virtual=3)
    assert s.stages == 12
    for r, row in enumerate(s.actions):
        assert {a.stage for a in row} == {r, r + 4, r + 8}
    # first P forwards on rank 0 go through chunk 0, the next P through chunk 1 (Megatron order)
    assert [str(a) for a in s.actions[0][:8]] == "0F0 0F1 0F2 0F3 4F0 4F1 4F2 4F3".split()


def test_zb_h1_splits_backward():
    s = pp.schedule("zb-h1", 3, 4)
    kinds = Counter(a.kind for row in s.actions for a in row)
    assert kinds == {"F": 12, "I": 12, "W": 12}


@settings(max_examples=60, deadline=None)
@given(configs())
def test_every_builder_conserves_actions_and_validates(cfg):
    name, P, M, v = cfg
    s = pp.schedule(name, P, M, v)
    assert (s.ranks, s.microbatches, s.virtual) == (P, M, v)
    counts = Counter((a.stage, a.kind, a.microbatch) for row in s.actions for a in row)
    back = ("I", "W") if name == "zb-h1" else ("B",)
    expected = {(st_, k, m): 1 for st_ in range(P * v) for m in range(M) for k in ("F", *back)}
    assert counts == expected
    for r, row in enumerate(s.actions):
        assert all(a.stage % P == r for a in row)
    assert pp.validate(s) is s


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 16), st.integers(1, 64))
def test_1f1b_warmup_rule(P, M):
    s = pp.schedule("1f1b", P, M)
    for r, row in enumerate(s.actions):
        first_b = next(i for i, a in enumerate(row) if a.kind == "B")
        # warm-up forwards plus the first steady forward (if any forward remains)
        assert first_b == min(P - r - 1, M) + (1 if P - r - 1 < M else 0)


def test_interleaved_divisibility_message():
    with pytest.raises(ValueError, match=r"microbatches \(6\) to be a multiple of ranks \(4\): "
                                         r"use M = 8 or 4"):
        pp.schedule("interleaved", 4, 6, virtual=2)
    with pytest.raises(ValueError, match="use M = 4"):
        pp.schedule("interleaved", 4, 3, virtual=2)


@pytest.mark.parametrize("name", NAMES)
def test_virtual_only_for_interleaved(name):
    with pytest.raises(ValueError, match="virtual must be 1.*interleaved"):
        pp.schedule(name, 4, 8, virtual=2)


@pytest.mark.parametrize(
    "args, match",
    [(("pipedream", 4, 8), "unknown schedule.*1f1b"),
     (("1f1b", 0, 8), "ranks must be >= 1"),
     (("1f1b", 4, 0), "microbatches must be >= 1"),
     (("gpipe", 4.0, 8), "ranks must be an int"),
     (("interleaved", 4, 8, 0), "virtual must be >= 1")],
)
def test_builder_argument_errors(args, match):
    with pytest.raises(ValueError, match=match):
        pp.schedule(*args)


def test_schedule_name_aliases():
    assert pp.schedule("ZB_H1", 2, 2).name == "zb-h1"
    assert pp.schedule("1F1B", 2, 2).name == "1f1b"


# --- validator: each invalid variant and its message -------------------------------------------

GOOD = ["0F0 0F1 0B0 0B1", "1F0 1B0 1F1 1B1"]


def _sched(rows, **kw):
    return Schedule.from_strings(rows, **kw)


def test_valid_hand_written_schedule_passes():
    pp.validate(_sched(GOOD))


@pytest.mark.parametrize(
    "rows, match",
    [
        (["0F0 0B0 0B1", "1F0 1B0 1F1 1B1"], r"missing actions: 0F1"),
        (["0F0 0F1 0B0", "1F0 1B0 1F1 1B1"], r"missing actions: 0B1"),
        (["0F0 0F1 0B0 0B1 0F1", "1F0 1B0 1F1 1B1"], r"duplicate 0F1.*rank 0 position 1"),
        (["0F0 0F1 0B0 0B1 1F0", "1B0 1F1 1B1"], r"1F0 is on rank 0 but stage 1 lives on rank"),
        (["0F0 0F1 0B0 0B1", "1F0 1B0 1F1 1B1 1F2"], r"microbatch 2 is outside 0..1"),
        (["0F0 0F1 0B0 0I1 0W1 0B1", "1F0 1B0 1F1 1B1"], r"both a full backward 0B1"),
        (["0F0 0F1 0B0 0I1", "1F0 1B0 1F1 1B1"], r"missing actions: 0W1"),
        (["0F0 0F1 0B0 0W1", "1F0 1B0 1F1 1B1"], r"missing actions: 0I1"),
    ],
)
def test_invalid_structure_messages(rows, match):
    with pytest.raises(ValueError, match=match):
        pp.validate(_sched(rows, microbatches=2, virtual=1))


def test_stage_out_of_range():
    with pytest.raises(ValueError, match=r"stage 2 is outside 0..1"):
        pp.validate(_sched(["0F0 0B0 2F0", "1F0 1B0"], virtual=1))


def test_wrong_number_of_rows():
    s = _sched(GOOD)
    s.ranks = 3
    with pytest.raises(ValueError, match="2 rows of actions but ranks = 3"):
        pp.validate(s)


def test_deadlock_on_one_rank_names_the_action():
    # rank 0 wants the backward of microbatch 0 before running its forward
    with pytest.raises(ValueError, match=r"deadlock.*rank 0 stuck at 0B0 \(waits for 0F0, "
                                         r"which rank 0 runs later\)"):
        pp.validate(_sched(["0B0 0F0", "1F0 1B0"]))


def test_cross_rank_deadlock_names_every_stuck_action():
    rows = ["0F0 0B0 0F1 0B1", "1F1 1F0 1B0 1B1"]
    with pytest.raises(ValueError) as info:
        pp.validate(_sched(rows))
    msg = str(info.value)
    assert "deadlock" in msg
    assert "rank 0 stuck at 0B0" in msg and "1B0" in msg
    assert "rank 1 stuck at 1F1 (waits for 0F1)" in msg


def test_weight_gradient_before_input_gradient_deadlocks():
    rows = ["0F0 0W0 0I0", "1F0 1I0 1W0"]
    with pytest.raises(ValueError, match=r"rank 0 stuck at 0W0 \(waits for 0I0, which"):
        pp.validate(_sched(rows))


def test_simulate_refuses_invalid_schedule():
    with pytest.raises(ValueError, match="missing actions"):
        pp.simulate(_sched(["0F0 0F1 0B0", "1F0 1B0 1F1 1B1"], microbatches=2))


def test_dependencies_listed():
    s = pp.schedule("zb-h1", 3, 2)
    assert [str(a) for a in pp.dependencies(Action(1, "I", 0), s)] == ["1F0", "2I0"]
    assert [str(a) for a in pp.dependencies(Action(1, "W", 0), s)] == ["1I0"]
    assert [str(a) for a in pp.dependencies(Action(0, "F", 1), s)] == []
    s = pp.schedule("1f1b", 3, 2)
    assert [str(a) for a in pp.dependencies(Action(1, "B", 1), s)] == ["1F1", "2B1"]


# --- validator: properties over corrupted builder outputs ------------------------------------

@settings(max_examples=40, deadline=None)
@given(configs(), st.data())
def test_deleting_any_action_is_named(cfg, data):
    name, P, M, v = cfg
    s = pp.schedule(name, P, M, v)
    r = data.draw(st.integers(0, P - 1))
    i = data.draw(st.integers(0, len(s.actions[r]) - 1))
    gone = s.actions[r].pop(i)
    with pytest.raises(ValueError, match=rf"missing actions: {gone}(:|$)"):
        pp.validate(s)


@settings(max_examples=40, deadline=None)
@given(configs(), st.data())
def test_duplicating_any_action_is_named(cfg, data):
    name, P, M, v = cfg
    s = pp.schedule(name, P, M, v)
    r = data.draw(st.integers(0, P - 1))
    a = data.draw(st.sampled_from(s.actions[r]))
    s.actions[r].append(a)
    with pytest.raises(ValueError, match=rf"duplicate {a}:"):
        pp.validate(s)


@settings(max_examples=40, deadline=None)
@given(configs(), st.data())
def test_reversed_rank_deadlocks(cfg, data):
    # a reversed list starts with a backward (B or W) whose F (or I) comes later on that rank
    name, P, M, v = cfg
    s = pp.schedule(name, P, M, v)
    r = data.draw(st.integers(0, P - 1))
    first = s.actions[r][-1]
    s.actions[r].reverse()
    with pytest.raises(ValueError, match=rf"deadlock.*rank {r} stuck at {first} \(waits for "):
        pp.validate(s)
