"""The fast simulator and builders (issue 22) against the code they replaced, kept verbatim in
``tests/pipeline_reference.py``: same timeline (order, starts, ends), cross-rank edges, busy
times and makespan on random small schedules and costs, and the same per-rank orders."""

from __future__ import annotations

import random
from fractions import Fraction as Fr

import pipeline_reference as ref
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tpp import pipeline as pp
from tpp.pipeline.looped import interleaved_pytorch

fracs = st.fractions(min_value=0, max_value=4, max_denominator=4)
names = st.sampled_from(pp.SCHEDULES)


def _build(name: str, P: int, M: int, v: int) -> pp.Schedule | None:
    if name not in ("interleaved", "looped-bfs", "zb1p"):
        v = 2 if name in ("zbv", "dualpipev") else 1
    if name in ("dualpipev", "dualpipe"):
        M = max(M, 2 * P)
    if name == "interleaved":
        M = P * max(1, M // P)
    try:
        return pp.schedule(name, P, M, v)
    except ValueError:
        return None


@settings(max_examples=150, deadline=None)
@given(names, st.integers(1, 6), st.integers(1, 14), st.integers(1, 3), fracs, fracs, fracs,
       fracs, st.one_of(st.none(), fracs), st.booleans(), st.booleans())
def test_simulate_equals_reference(name, P, M, v, tf, tb, tw, transfer, overlap, recompute,
                                   per_stage):
    s = _build(name, P, M, v)
    if s is None:
        return
    if per_stage:  # different costs per stage, derived from the scalars
        tf = [tf + Fr(i, 3) for i in range(s.stages)]
        tb = [tb + Fr(i % 2) for i in range(s.stages)]
    res = pp.simulate(s, t_f=tf, t_b=tb, t_w=tw, p2p_latency=transfer, overlap=overlap,
                      recompute=recompute)
    timeline, cross, makespan, busy = ref.simulate_reference(s, tf, tb, tw, transfer, overlap,
                                                             recompute)
    assert res.timeline == timeline
    assert res.p2p_messages == cross
    assert res.makespan == makespan
    assert res.busy == busy


@pytest.mark.parametrize("seed", range(20))
def test_simulate_equals_reference_in_floats(seed):
    """Float costs: the same operations in the same order give bit-identical times."""
    rng = random.Random(seed)
    name = rng.choice(pp.SCHEDULES)
    s = _build(name, rng.randint(1, 6), rng.randint(1, 14), rng.randint(1, 3))
    if s is None:
        return
    tf, tb, tw, lat = (rng.random() for _ in range(4))
    res = pp.simulate(s, t_f=tf, t_b=tb, t_w=tw, p2p_latency=lat)
    timeline, cross, makespan, busy = ref.simulate_reference(s, tf, tb, tw, lat)
    assert res.timeline == timeline and res.busy == busy and res.makespan == makespan


def test_deadlock_message_unchanged():
    s = pp.Schedule.from_strings(["0F0 0B0", "1B0 1F0"])
    with pytest.raises(ValueError) as new:
        pp.simulate(s)
    with pytest.raises(ValueError) as old:
        ref.simulate_reference(s)
    assert str(new.value) == str(old.value)
    assert "rank 1 stuck at 1B0 (waits for 1F0, which rank 1 runs later)" in str(new.value)


@pytest.mark.parametrize("P", range(1, 7))
def test_looped_orders_equal_reference(P):
    for M in range(1, 3 * P + 2):
        for v in range(1, 4):
            try:
                old = ref.zb1p_reference(P, M, v)
            except ValueError:
                continue
            assert pp.zb1p(P, M, v).actions == old.actions
            assert (interleaved_pytorch(P, M, v).actions
                    == ref.interleaved_pytorch_reference(P, M, v).actions)
        if M % P == 0:
            for v in range(1, 4):
                assert pp.interleaved(P, M, v).actions == ref.interleaved_reference(P, M,
                                                                                    v).actions
