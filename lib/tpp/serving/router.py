"""A request router in front of DP replicas, and the prefix-cache hit rate it leaves them.

Each replica keeps the KV cache of recently seen prompt prefixes (an LRU cache of ``capacity``
prefixes, as vLLM's automatic prefix caching and SGLang's radix cache do at block granularity).
A request whose prefix is cached skips that part of its prefill. Requests draw their prefix
(a system prompt, a shared document, a conversation so far) from ``n_prefixes`` with Zipf
popularity. Two policies:

* ``"round_robin"``: request i goes to replica ``i mod R`` (load-balanced, cache-blind);
* ``"prefix_affinity"``: a prefix always goes to the same replica (``prefix mod R``), so each
  replica only needs to cache its ``1/R`` share of the prefixes.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from tpp.serving.inputs import check_choice, check_positive_ints

__all__ = ["RoutingResult", "simulate_router", "POLICIES"]

POLICIES = ("round_robin", "prefix_affinity")


@dataclass(frozen=True)
class RoutingResult:
    policy: str
    replicas: int
    hits: int
    requests: int
    load: tuple[int, ...]

    @property
    def hit_rate(self) -> float:
        return self.hits / self.requests

    @property
    def load_imbalance(self) -> float:
        """Busiest replica's requests over the mean (1.0 = perfectly balanced)."""
        return max(self.load) / (self.requests / self.replicas)


def simulate_router(policy: str, replicas: int = 4, requests: int = 20_000,
                    n_prefixes: int = 400, capacity: int = 100, zipf: float = 1.1,
                    seed: int = 0) -> RoutingResult:
    """Route ``requests`` over ``replicas``, each with an LRU cache of ``capacity`` prefixes."""
    check_choice("policy", policy, POLICIES)
    check_positive_ints(replicas=replicas, requests=requests, n_prefixes=n_prefixes,
                        capacity=capacity)
    if not zipf > 0:
        raise ValueError(f"zipf={zipf} must be > 0")
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, n_prefixes + 1) ** zipf
    prefixes = rng.choice(n_prefixes, size=requests, p=weights / weights.sum())
    caches: list[OrderedDict] = [OrderedDict() for _ in range(replicas)]
    load = [0] * replicas
    hits = 0
    for i, p in enumerate(prefixes):
        r = i % replicas if policy == "round_robin" else int(p) % replicas
        cache = caches[r]
        load[r] += 1
        if p in cache:
            hits += 1
            cache.move_to_end(p)
        else:
            cache[p] = True
            if len(cache) > capacity:
                cache.popitem(last=False)
    return RoutingResult(policy=policy, replicas=replicas, hits=hits, requests=requests,
                         load=tuple(load))
