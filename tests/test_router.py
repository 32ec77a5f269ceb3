"""The prefix-affinity router (tpp.serving.router)."""

import pytest
from tpp.serving import router as R


def test_affinity_raises_the_hit_rate_and_costs_balance():
    rr = R.simulate_router("round_robin")
    pa = R.simulate_router("prefix_affinity")
    assert pa.hit_rate > rr.hit_rate + 0.1
    assert rr.load_imbalance == 1.0 and pa.load_imbalance > 1.1
    assert sum(pa.load) == pa.requests


def test_one_replica_policies_agree_and_a_big_cache_always_hits():
    a = R.simulate_router("round_robin", replicas=1)
    b = R.simulate_router("prefix_affinity", replicas=1)
    assert a.hits == b.hits
    full = R.simulate_router("round_robin", replicas=2, n_prefixes=50, capacity=50)
    assert full.requests - full.hits <= 2 * 50  # only the first sight of each prefix misses


def test_bad_policy():
    with pytest.raises(ValueError, match="policy='random'"):
        R.simulate_router("random")
