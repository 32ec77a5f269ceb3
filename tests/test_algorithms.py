"""tpp.costs.algorithms: bytes and steps of ring, tree, NVLS, one-shot and two-shot all-reduces,
and the ``algorithm`` parameter threaded through tpp.costs.tp and tpp.serving."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from tpp import serving
from tpp.collectives import ProcessGroup
from tpp.costs import algorithms as alg
from tpp.costs import tp as tp_costs


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_ring_matches_the_simulated_ring(n):
    """The ring entry is what the simulator's ring all-reduce really sends, in its steps."""
    grp = ProcessGroup(n)
    grp.all_reduce([np.ones(n * 6) for _ in range(n)])
    rec = grp.ledger[-1]
    cost = alg.all_reduce_cost(rec.payload_bytes, n, "ring")
    assert cost.bytes_sent_per_rank == Fraction(sum(rec.bytes_sent_per_rank), n)
    assert cost.steps == rec.steps


def test_byte_counts_and_steps_of_each_algorithm():
    m, n = 8 * 2**20, 8
    cost = {a: alg.all_reduce_cost(m, n, a) for a in alg.ALGORITHMS}
    assert cost["ring"].bytes_sent_per_rank == Fraction(7, 4) * m and cost["ring"].steps == 14
    assert cost["tree"].bytes_sent_per_rank == 2 * m and cost["tree"].steps == 6
    assert cost["nvls"].bytes_sent_per_rank == m and cost["nvls"].steps == 2
    assert cost["one_shot"].bytes_sent_per_rank == 7 * m and cost["one_shot"].steps == 1
    assert cost["two_shot"].bytes_sent_per_rank == cost["ring"].bytes_sent_per_rank
    assert cost["two_shot"].steps == 2
    # NVLS: about half the ring's bytes per GPU (4/7 at n = 8, -> 1/2 as n grows)
    assert cost["nvls"].bytes_sent_per_rank / cost["ring"].bytes_sent_per_rank == Fraction(4, 7)
    assert alg.all_reduce_cost(m, 1, "one_shot").bytes_sent_per_rank == 0
    assert alg.all_reduce_cost(m, 2, "tree").bytes_sent_per_rank == m
    assert alg.all_reduce_cost(m, 5, "tree").steps == 2 * math.ceil(math.log2(5))


def test_ring_is_a_large_message_bound():
    """Small messages: latency decides and one step wins; large: the ring's bytes win (NVLS,
    with in-switch reduction, beats it where the hardware has it)."""
    bw, lat = 450e9, 2e-6
    assert alg.fastest_all_reduce(64 * 1024, 8, bw, lat) == "one_shot"
    assert alg.fastest_all_reduce(2**30, 8, bw, lat) in ("ring", "two_shot")
    assert alg.fastest_all_reduce(2**30, 8, bw, lat, algorithms=alg.ALGORITHMS) == "nvls"
    ring_t = alg.all_reduce_time(2**30, 8, bw, lat, "ring")
    assert ring_t == pytest.approx(14 * lat + 1.75 * 2**30 / bw)


def test_bad_algorithm_and_sizes_say_what_to_change():
    with pytest.raises(ValueError, match="use one of ring, tree, nvls, one_shot, two_shot"):
        alg.all_reduce_cost(10, 4, "butterfly")
    with pytest.raises(ValueError, match="positive int"):
        alg.all_reduce_cost(10, 0)
    with pytest.raises(ValueError, match="bandwidth"):
        alg.all_reduce_time(10, 4, 0.0)
    with pytest.raises(ValueError, match="pass sp=False or algorithm='ring'"):
        tp_costs.tp_bytes_sent_per_rank(1, 8, 16, 4, sp=True, algorithm="nvls")


def test_tp_costs_take_the_algorithm():
    b, s, h, t = 8, 4096, 4096, 8
    p = tp_costs.tp_payload_bytes(b, s, h)
    ring = tp_costs.tp_bytes_sent_per_rank(b, s, h, t)
    assert ring == 4 * Fraction(7, 4) * p                     # default unchanged: the ring
    assert tp_costs.tp_bytes_sent_per_rank(b, s, h, t, algorithm="nvls") == 4 * p
    lat, bw = 5e-6, 450e9
    t_one = tp_costs.tp_comm_time(b, s, h, t, bw, lat, algorithm="one_shot")
    assert t_one == pytest.approx(4 * (lat + 7 * p / bw))
    est = tp_costs.tp_training_layer_time(b, s, h, t, 1e12, 1e15, bw, algorithm="nvls")
    assert est.comm == pytest.approx(4 * p / bw)


def test_decode_step_takes_the_algorithm():
    ring = serving.decode_step("llama2_70b", 8, 16, latency=2e-6)
    one = serving.decode_step("llama2_70b", 8, 16, latency=2e-6, algorithm="one_shot")
    nvls = serving.decode_step("llama2_70b", 8, 16, latency=2e-6, algorithm="nvls")
    n_ar = ring.allreduces_per_step
    assert ring.allreduce_latency_time == pytest.approx(n_ar * 14 * 2e-6)
    assert one.allreduce_latency_time == pytest.approx(n_ar * 1 * 2e-6)
    assert one.allreduce_sent_per_gpu == n_ar * 7 * ring.allreduce_payload_bytes
    assert nvls.allreduce_sent_per_gpu == n_ar * ring.allreduce_payload_bytes
    assert one.assumptions["algorithm"] == "one_shot"
    # at batch 16 the payload is small: the one-shot all-reduce makes the step faster
    assert one.step_time < ring.step_time
    with pytest.raises(ValueError, match="ring=False"):
        serving.decode_step("llama2_70b", 8, 16, ring=False, algorithm="tree")
