"""All-reduce algorithms: bytes each GPU sends and sequential steps, by name.

The ring (Patarasuk & Yuan 2009) is what :mod:`tpp.collectives` simulates and what the
alpha-beta formulas of the course use. It is *one* algorithm, and its model is a bound that fits
large messages: each GPU sends ``2(n-1)/n`` of the payload, the least any algorithm that moves
every byte over the GPUs' own links can send, but in ``2(n-1)`` sequential steps, each paying a
latency. Collective libraries choose among several algorithms per call (NCCL: ring, tree,
NVLS, CollNet; serving engines: one-shot and two-shot all-reduces for small messages):

===========  ===========================  ===============  ======================================
algorithm    bytes one GPU sends          steps            where it is used
===========  ===========================  ===============  ======================================
ring         ``2 (n-1)/n * M``            ``2 (n-1)``      NCCL, large messages (the bound)
tree         ``2 M`` (``M`` at n = 2)     ``2 ceil(log2 n)``  NCCL's double binary tree: the
                                                          half of ``M`` on each tree goes up
                                                          (reduce) and down (broadcast); an
                                                          interior node sends 3/2 M on one
                                                          tree, a leaf M/2 on the other
nvls         ``M``                        ``2``            NVLink SHARP (NVSwitch reduces in the
                                                          switch): each GPU pushes its payload
                                                          once and receives the result by
                                                          multicast, about half the ring's bytes
one_shot     ``(n-1) M``                  ``1``            each GPU writes its whole payload to
                                                          every peer and reduces locally: one
                                                          step, many bytes (small messages)
two_shot     ``2 (n-1)/n * M``            ``2``            reduce-scatter then all-gather by
                                                          direct peer writes (all peers at once)
===========  ===========================  ===============  ======================================

Time of one all-reduce: ``steps * alpha + bytes_sent / beta``, with ``beta`` the bandwidth per
direction of the GPU's link (bytes/s) and ``alpha`` the latency per step (s). These are models:
the step latency and the achievable bandwidth differ by algorithm and protocol in practice
(NCCL's LL/LL128/Simple), and NVLS needs an NVSwitch with SHARP (H100 NVLink 4 and later).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from tpp.collectives import bus_factor, ring_steps

__all__ = ["ALGORITHMS", "AllReduceCost", "all_reduce_cost", "all_reduce_time",
           "fastest_all_reduce"]

#: Algorithm names accepted by :func:`all_reduce_cost` (and by ``algorithm=`` in
#: :mod:`tpp.costs.tp` and :func:`tpp.serving.decode_step`).
ALGORITHMS = ("ring", "tree", "nvls", "one_shot", "two_shot")


@dataclass(frozen=True)
class AllReduceCost:
    """One all-reduce of ``payload_bytes`` over ``n`` GPUs under ``algorithm``."""

    algorithm: str
    n: int
    payload_bytes: int
    bytes_sent_per_rank: Fraction
    steps: int

    def time(self, bandwidth: float, latency: float = 0.0) -> float:
        """``steps * latency + bytes_sent_per_rank / bandwidth`` (seconds)."""
        if not bandwidth > 0:
            raise ValueError(f"bandwidth={bandwidth!r} must be > 0 bytes/s per direction")
        if latency < 0:
            raise ValueError(f"latency={latency!r} must be >= 0 s per step")
        return float(self.steps * latency + self.bytes_sent_per_rank / Fraction(bandwidth))


def check_algorithm(algorithm: str) -> str:
    """Return ``algorithm`` if it is one of :data:`ALGORITHMS`, else raise ValueError."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm={algorithm!r} is unknown: use one of {', '.join(ALGORITHMS)}")
    return algorithm


def all_reduce_cost(payload_bytes: int, n: int, algorithm: str = "ring") -> AllReduceCost:
    """Bytes one GPU sends and sequential steps of an all-reduce (see the module's table).

    ``payload_bytes``: the size ``M`` of the tensor every rank contributes; ``n``: ranks.
    A group of one moves nothing in no steps, whatever the algorithm.
    """
    check_algorithm(algorithm)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n={n!r} must be a positive int (ranks in the group)")
    if isinstance(payload_bytes, bool) or not isinstance(payload_bytes, int) or payload_bytes < 0:
        raise ValueError(f"payload_bytes={payload_bytes!r} must be an int >= 0")
    m = Fraction(payload_bytes)
    if n == 1:
        sent, steps = Fraction(0), 0
    elif algorithm == "ring":
        sent, steps = Fraction(bus_factor("all_reduce", n)) * m, ring_steps("all_reduce", n)
    elif algorithm == "tree":
        sent, steps = (m if n == 2 else 2 * m), 2 * math.ceil(math.log2(n))
    elif algorithm == "nvls":
        sent, steps = m, 2
    elif algorithm == "one_shot":
        sent, steps = (n - 1) * m, 1
    else:  # two_shot
        sent, steps = Fraction(2 * (n - 1), n) * m, 2
    return AllReduceCost(algorithm, n, payload_bytes, sent, steps)


def all_reduce_time(payload_bytes: int, n: int, bandwidth: float, latency: float = 0.0,
                    algorithm: str = "ring") -> float:
    """Seconds of one all-reduce: ``steps * latency + bytes_sent / bandwidth``."""
    return all_reduce_cost(payload_bytes, n, algorithm).time(bandwidth, latency)


def fastest_all_reduce(payload_bytes: int, n: int, bandwidth: float, latency: float,
                       algorithms: tuple[str, ...] = ("ring", "tree", "one_shot", "two_shot"),
                       ) -> str:
    """The algorithm with the shortest modelled time (the first listed on ties).

    NVLS is left out by default because it needs NVSwitch hardware; pass it in ``algorithms``.
    """
    if not algorithms:
        raise ValueError("algorithms is empty: pass at least one of " + ", ".join(ALGORITHMS))
    times = {a: all_reduce_time(payload_bytes, n, bandwidth, latency, a) for a in algorithms}
    return min(algorithms, key=lambda a: times[a])
