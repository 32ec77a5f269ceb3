"""Closed forms of ring collectives: bus factor, ring steps, bytes per rank, alpha-beta time.

Patarasuk & Yuan 2009; NCCL tests' "bus bandwidth" definitions (PERFORMANCE.md). The
simulated :class:`~tpp.collectives.ProcessGroup` counts the same quantities while it moves the
chunks; the tests check that the two agree.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from .ledger import _check_n, _normalise_op

__all__ = ["alpha_beta_time", "bus_factor", "ring_bytes_per_rank", "ring_steps"]


def bus_factor(op: str, n: int) -> Fraction:
    """Exact bus-bandwidth factor of a collective over ``n`` ranks, as a Fraction.

    NCCL tests define bus bandwidth = algorithm bandwidth x factor, where algbw = M / t and the
    factor is the share of the payload ``M`` each rank must send on the busiest link of a ring
    (NCCL tests, PERFORMANCE.md; Patarasuk & Yuan 2009)::

        all_reduce                          2 (n-1) / n
        reduce_scatter, all_gather, all_to_all  (n-1) / n
        broadcast, send                     1

    ``n = 1`` gives 0 for the first four (nothing moves); broadcast and send keep NCCL's
    definition 1 (:func:`ring_bytes_per_rank` returns 0 for a group of one).
    """
    name = _normalise_op(op)
    n = _check_n(n)
    if name == "all_reduce":
        return Fraction(2 * (n - 1), n)
    if name in ("reduce_scatter", "all_gather", "all_to_all"):
        return Fraction(n - 1, n)
    return Fraction(1)


def ring_steps(op: str, n: int) -> int:
    """Number of sequential communication steps of the ring algorithm over ``n`` ranks.

    all_reduce: 2 (n-1) (reduce-scatter phase then all-gather phase, n-1 steps each);
    reduce_scatter, all_gather, all_to_all, broadcast (chain): n-1; send: 1 (0 when n = 1).
    Each step pays the latency alpha once in :func:`alpha_beta_time`.
    """
    name = _normalise_op(op)
    n = _check_n(n)
    if n == 1:
        return 0
    if name == "all_reduce":
        return 2 * (n - 1)
    if name == "send":
        return 1
    return n - 1


def _check_payload(payload_bytes: int) -> int:
    if isinstance(payload_bytes, bool) or not isinstance(payload_bytes, (int, np.integer)):
        raise ValueError(
            f"payload_bytes={payload_bytes!r} must be an integer number of bytes: "
            "pass e.g. array.nbytes"
        )
    if payload_bytes < 0:
        raise ValueError(f"payload_bytes={payload_bytes} is negative: pass a size >= 0 in bytes")
    return int(payload_bytes)


def ring_bytes_per_rank(op: str, payload_bytes: int, n: int) -> int:
    """Bytes each rank sends under the ring algorithm: ``bus_factor(op, n) * payload_bytes``.

    all_reduce: 2 (n-1)/n * M; reduce_scatter / all_gather / all_to_all: (n-1)/n * M;
    broadcast and send: M (sent by every rank of the chain but the last, or by the sender);
    0 for a group of one. Exact when ``n`` divides ``M``; otherwise the chunks are uneven, the
    per-rank counts differ by a few elements, and this returns the ceiling of the exact value
    (the *mean* over ranks of the ledger's counts equals the exact Fraction).
    """
    payload = _check_payload(payload_bytes)
    n = _check_n(n)
    if n == 1:
        return 0
    return math.ceil(bus_factor(op, n) * payload)


def alpha_beta_time(
    op: str, payload_bytes: int, n: int, bandwidth: float, latency: float = 0.0
) -> float:
    """Time in seconds of a ring collective under the alpha-beta model (Hockney; Thakur 2005).

        t = steps(op, n) * alpha + bus_factor(op, n) * M / B

    with ``alpha = latency`` in seconds per step, ``M = payload_bytes`` and ``B = bandwidth`` in
    bytes/s *per direction* of one link (e.g. H100 NVLink 4: 450e9, not the 900 GB/s
    bidirectional total). All-reduce: ``2 (n-1) alpha + 2 (n-1)/n * M / B``. A group of one
    takes 0 s.
    """
    payload = _check_payload(payload_bytes)
    n = _check_n(n)
    name = _normalise_op(op)
    if not bandwidth > 0:
        raise ValueError(
            f"bandwidth={bandwidth!r} must be > 0 bytes/s per direction: e.g. 450e9 for NVLink 4"
        )
    if not latency >= 0:
        raise ValueError(f"latency={latency!r} must be >= 0 seconds per step")
    if n == 1:
        return 0.0
    return float(
        ring_steps(name, n) * float(latency) + float(bus_factor(name, n)) * payload / bandwidth
    )
