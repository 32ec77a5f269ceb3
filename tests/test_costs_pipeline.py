"""Tests of tpp.costs.pipeline: PP communication closed forms against brute-force counting."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tpp.costs import pipeline as ppc


def _brute_force_sends(ranks: int, microbatches: int, virtual: int) -> dict[int, int]:
    """Walk every microbatch through v*P stages (stage s on rank s mod P), forward then
    backward, and count the tensors each rank sends to a *different* rank."""
    sent = {r: 0 for r in range(ranks)}
    n_stages = virtual * ranks
    for _ in range(microbatches):
        for s in range(n_stages - 1):  # forward: stage s -> s + 1
            if s % ranks != (s + 1) % ranks:
                sent[s % ranks] += 1
        for s in range(n_stages - 1, 0, -1):  # backward: stage s -> s - 1
            if s % ranks != (s - 1) % ranks:
                sent[s % ranks] += 1
    return sent


def test_boundary_bytes_seed_example_hand_computed():
    # Seed 1 §3.5: B=8, T=4096, d=4096, bf16. 8 * 4096 * 4096 = 2**3 * 2**12 * 2**12 = 2**27
    # elements, times 2 bytes = 2**28 bytes = 256 MiB = 268.435456 MB (not "1 GB").
    a = ppc.boundary_activation_bytes(8, 4096, 4096, 2)
    assert a == 2**28
    assert a == 268_435_456
    assert a / 2**30 == 0.25


def test_p2p_time_hand_computed():
    # 2**28 bytes at 25 GB/s: 268435456 / 25e9 = 0.01073741824 s (~10.7 ms, not ~40 ms).
    assert ppc.p2p_time(2**28, 25e9) == pytest.approx(0.01073741824, rel=1e-15)
    assert ppc.p2p_time(1000, 1e9, latency=5e-6) == pytest.approx(5e-6 + 1e-6, rel=1e-12)


@given(
    ranks=st.integers(1, 16),
    microbatches=st.integers(1, 64),
    virtual=st.integers(1, 4),
)
def test_sends_and_bytes_match_brute_force(ranks, microbatches, virtual):
    sent = _brute_force_sends(ranks, microbatches, virtual)
    assert ppc.p2p_sends_per_step(ranks, microbatches, virtual) == sum(sent.values())
    a = 1000
    for r in range(ranks):
        assert ppc.p2p_bytes_sent_by_rank(r, ranks, microbatches, a, virtual) == sent[r] * a
    # total bytes with a real boundary tensor
    total = ppc.p2p_bytes_per_step(ranks, microbatches, 2, 16, 8, 2, virtual)
    assert total == sum(sent.values()) * 2 * 16 * 8 * 2


@given(ranks=st.integers(2, 64), virtual=st.integers(1, 8))
def test_traffic_ratio_at_least_v(ranks, virtual):
    ratio = ppc.p2p_traffic_ratio(ranks, virtual)
    assert isinstance(ratio, Fraction)
    assert ratio == Fraction(ppc.stage_boundaries(ranks, virtual), ppc.stage_boundaries(ranks, 1))
    assert ratio >= virtual
    assert (ratio == virtual) == (virtual == 1)


def test_seed_section5_volume_is_a_pipeline_total():
    # Seed 1 §5: PP volume ~ 2 (P - 1) M B T d. Our total (v = 1) equals it times bytes/elt;
    # the busiest rank sends only 2 M B T d e, a factor (P - 1) less.
    P, M, B, T, d, e = 8, 32, 8, 4096, 4096, 2
    total = ppc.p2p_bytes_per_step(P, M, B, T, d, e)
    assert total == 2 * (P - 1) * M * B * T * d * e
    a = ppc.boundary_activation_bytes(B, T, d, e)
    per_rank = [ppc.p2p_bytes_sent_by_rank(r, P, M, a) for r in range(P)]
    assert max(per_rank) == 2 * M * a
    assert sum(per_rank) == total


def test_overlap_condition_scales_with_v():
    a = 2**28
    # 10.7 ms transfer vs 100 ms of stage compute: hides for v=1..9, not for v=10.
    t = ppc.p2p_time(a, 25e9)
    for v in range(1, 10):
        assert ppc.hides_behind_compute(a, 25e9, 0.1, virtual=v)
        assert ppc.comm_to_compute_ratio(a, 25e9, 0.1, virtual=v) == pytest.approx(t * v / 0.1)
    assert not ppc.hides_behind_compute(a, 25e9, 0.1, virtual=10)
    bw = ppc.min_bandwidth_to_hide(a, 0.1, virtual=4, latency=1e-5)
    assert ppc.p2p_time(a, bw, 1e-5) == pytest.approx(0.1 / 4, rel=1e-12)


def test_single_rank_sends_nothing():
    assert ppc.stage_boundaries(1, 1) == 0
    assert ppc.p2p_sends_per_step(1, 8) == 0
    assert ppc.p2p_bytes_sent_by_rank(0, 1, 8, 100) == 0


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: ppc.boundary_activation_bytes(0, 4096, 4096), "microbatch_size"),
        (lambda: ppc.boundary_activation_bytes(8, 4096, 4096, 2.5), "bytes_per_element"),
        (lambda: ppc.stage_boundaries(0), "ranks.*at least one"),
        (lambda: ppc.p2p_sends_per_step(4, 0), "microbatches"),
        (lambda: ppc.p2p_sends_per_step(4, 8, virtual=0), "virtual.*v >= 1"),
        (lambda: ppc.p2p_bytes_sent_by_rank(4, 4, 8, 100), "rank=4.*\\[0, 3\\]"),
        (lambda: ppc.p2p_traffic_ratio(1, 2), "P >= 2"),
        (lambda: ppc.p2p_time(100, 0.0), "bandwidth.*bytes/s"),
        (lambda: ppc.p2p_time(-1, 1e9), "nbytes"),
        (lambda: ppc.p2p_time(100, 1e9, latency=-1.0), "latency"),
        (lambda: ppc.comm_to_compute_ratio(100, 1e9, 0.0), "stage_compute_s"),
        (lambda: ppc.min_bandwidth_to_hide(100, 1e-3, virtual=4, latency=1e-3), "lower v"),
    ],
)
def test_invalid_configurations_name_the_fix(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@settings(max_examples=40, deadline=None)
@given(
    ranks=st.integers(2, 6),
    groups=st.integers(1, 4),
    virtual=st.integers(1, 3),
    name=st.sampled_from(["gpipe", "1f1b", "interleaved", "zb-h1"]),
)
def test_closed_forms_match_the_event_simulator(ranks, groups, virtual, name):
    # A different algorithm: the simulator counts every cross-rank dependency it resolves.
    from tpp import pipeline as pp

    microbatches = groups * ranks
    v = virtual if name == "interleaved" else 1
    res = pp.simulate(pp.schedule(name, ranks, microbatches, virtual=v), activation_bytes=7)
    assert res.p2p_messages == ppc.p2p_sends_per_step(ranks, microbatches, v)
    assert res.p2p_bytes == 7 * ppc.p2p_sends_per_step(ranks, microbatches, v)
    last = res.schedule.stages - 1
    sent = [0] * ranks
    for rank, act, _start, _end in res.timeline:
        if (act.kind == "F" and act.stage < last) or (act.kind in "BI" and act.stage > 0):
            sent[rank] += 7
    assert sent == [ppc.p2p_bytes_sent_by_rank(r, ranks, microbatches, 7, v) for r in range(ranks)]
