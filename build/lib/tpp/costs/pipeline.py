"""Closed-form communication costs of pipeline parallelism (PP).

A pipeline with ``P`` ranks and ``v`` virtual stages per rank cuts the layer stack into
``v * P`` stages; stage ``s`` lives on rank ``s mod P`` (Narayanan et al. 2021, §2.2.2,
"Schedule with Interleaved Stages"). Consecutive stages then always sit on different ranks
(for ``P > 1``), so every one of the ``v * P - 1`` stage boundaries is a point-to-point
transfer: the forward sends the boundary activation, the backward sends its gradient, which
has the same shape.

The boundary tensor of one microbatch has ``b * s * h`` elements (microbatch size, sequence
length, hidden size; Narayanan et al. 2021, §4.1: "the size of which is bsh"). Everything
here is in **bytes** (ints) and **seconds** (floats); bandwidths in bytes per second
(GB/s = 1e9 bytes/s).

Equations (numbered as in chapter 11 of the course):

- (11.1) boundary bytes      ``A = b * s * h * e``  (``e`` bytes per element)
- (11.2) boundaries          ``n_bd = v * P - 1``
- (11.3) sends per step      ``2 * M * (v * P - 1)``  (forward activations + backward grads)
- (11.4) bytes per step      ``2 * M * (v * P - 1) * A``  (summed over all ranks)
- (11.5) bytes sent by rank  ``M * A * (2 v - [r = 0] - [r = P - 1])``
- (11.6) time on a link      ``t = alpha + A / beta``  (alpha-beta model)
- (11.7) overlap condition   ``alpha + A / beta <= t_chunk`` with ``t_chunk = t_stage / v``
"""

from __future__ import annotations

from fractions import Fraction

__all__ = [
    "boundary_activation_bytes",
    "stage_boundaries",
    "p2p_sends_per_step",
    "p2p_bytes_per_step",
    "p2p_bytes_sent_by_rank",
    "p2p_traffic_ratio",
    "p2p_time",
    "comm_to_compute_ratio",
    "hides_behind_compute",
    "min_bandwidth_to_hide",
]


def _check_positive_int(name: str, value: int, hint: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name}={value!r} must be an int: {hint}")
    if value < 1:
        raise ValueError(f"{name}={value} must be >= 1: {hint}")


def _check_positive(name: str, value: float, hint: str) -> None:
    if not value > 0:
        raise ValueError(f"{name}={value!r} must be > 0: {hint}")


def _check_pipeline(ranks: int, microbatches: int, virtual: int) -> None:
    _check_positive_int("ranks", ranks, "use at least one pipeline rank (P >= 1)")
    _check_positive_int("microbatches", microbatches, "use at least one microbatch (M >= 1)")
    _check_positive_int("virtual", virtual, "use v >= 1 virtual stages per rank (v=1: no "
                        "interleaving)")


def boundary_activation_bytes(
    microbatch_size: int, seq_len: int, hidden: int, bytes_per_element: int = 2
) -> int:
    """Bytes of one stage-boundary activation for one microbatch, eq. (11.1).

    ``A = b * s * h * e`` (Narayanan et al. 2021, §4.1: the tensor sent between
    consecutive pipeline stages has size ``bsh``); ``e = 2`` for bf16/fp16, 4 for fp32.
    The gradient sent back in the backward pass has the same shape, hence the same bytes.

    >>> boundary_activation_bytes(8, 4096, 4096, 2)
    268435456
    """
    _check_positive_int("microbatch_size", microbatch_size, "the microbatch holds >= 1 sequence")
    _check_positive_int("seq_len", seq_len, "the sequence holds >= 1 token")
    _check_positive_int("hidden", hidden, "the hidden size d must be >= 1")
    _check_positive_int("bytes_per_element", bytes_per_element,
                        "use 2 for bf16/fp16, 4 for fp32, 1 for fp8")
    return microbatch_size * seq_len * hidden * bytes_per_element


def stage_boundaries(ranks: int, virtual: int = 1) -> int:
    """Number of stage boundaries along the model, eq. (11.2): ``v * P - 1``.

    With stage ``s`` on rank ``s mod P`` (Narayanan et al. 2021, §2.2.2) every boundary
    joins two different ranks when ``P > 1``, so each is a point-to-point transfer. With
    ``P = 1`` there is nothing to send and the count is 0.
    """
    _check_pipeline(ranks, 1, virtual)
    if ranks == 1:
        return 0
    return virtual * ranks - 1


def p2p_sends_per_step(ranks: int, microbatches: int, virtual: int = 1) -> int:
    """Point-to-point sends in one training step, eq. (11.3): ``2 * M * (v * P - 1)``.

    Each of the ``M`` microbatches crosses every boundary once forward (activation) and once
    backward (gradient). Interleaving multiplies the count by ``(v P - 1) / (P - 1)``, which is
    *slightly more* than ``v`` (Narayanan et al. 2021, §2.2.2 state "v times more").
    """
    _check_pipeline(ranks, microbatches, virtual)
    return 2 * microbatches * stage_boundaries(ranks, virtual)


def p2p_bytes_per_step(
    ranks: int,
    microbatches: int,
    microbatch_size: int,
    seq_len: int,
    hidden: int,
    bytes_per_element: int = 2,
    virtual: int = 1,
) -> int:
    """Bytes sent point-to-point in one step, summed over all ranks, eq. (11.4).

    ``2 * M * (v * P - 1) * b * s * h * e``. For ``v = 1`` this is the ``2 (P - 1) M B T d``
    of the course's seed (times the bytes per element), a total over the whole pipeline:
    one rank sends at most ``2 M A`` (see :func:`p2p_bytes_sent_by_rank`).
    """
    a = boundary_activation_bytes(microbatch_size, seq_len, hidden, bytes_per_element)
    return p2p_sends_per_step(ranks, microbatches, virtual) * a


def p2p_bytes_sent_by_rank(
    rank: int,
    ranks: int,
    microbatches: int,
    activation_bytes: int,
    virtual: int = 1,
) -> int:
    """Bytes that rank ``r`` sends in one step, eq. (11.5).

    Rank ``r`` holds stages ``r, r + P, ..., r + (v - 1) P``. Each of its stages sends the
    activation forward unless it is the last stage ``v P - 1`` (on rank ``P - 1``) and sends
    the gradient backward unless it is stage 0 (on rank 0)::

        M * A * (2 v - [r = 0] - [r = P - 1])

    Summed over ranks this gives eq. (11.4).
    """
    _check_pipeline(ranks, microbatches, virtual)
    _check_positive_int("activation_bytes", activation_bytes,
                        "pass the boundary bytes b*s*h*e of one microbatch")
    if not (isinstance(rank, int) and 0 <= rank < ranks):
        raise ValueError(f"rank={rank!r} must be an int in [0, {ranks - 1}]: pick an existing rank")
    if ranks == 1:
        return 0
    tensors = 2 * virtual - (rank == 0) - (rank == ranks - 1)
    return microbatches * activation_bytes * tensors


def p2p_traffic_ratio(ranks: int, virtual: int) -> Fraction:
    """Traffic of interleaving relative to ``v = 1``: ``(v P - 1) / (P - 1)`` (exact).

    Tends to ``v`` for large ``P`` and always satisfies ``ratio >= v`` (equality for v = 1).
    """
    _check_pipeline(ranks, 1, virtual)
    if ranks < 2:
        raise ValueError(f"ranks={ranks}: a pipeline needs P >= 2 ranks to send anything")
    return Fraction(virtual * ranks - 1, ranks - 1)


def p2p_time(nbytes: int, bandwidth: float, latency: float = 0.0) -> float:
    """Seconds to send ``nbytes`` over one link, eq. (11.6): ``alpha + n / beta``.

    ``bandwidth`` (beta) in bytes/s in one direction, ``latency`` (alpha) in seconds.
    """
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
        raise ValueError(f"nbytes={nbytes!r} must be an int >= 0 (a byte count)")
    _check_positive("bandwidth", bandwidth, "give the link bandwidth in bytes/s (GB/s * 1e9)")
    if latency < 0:
        raise ValueError(f"latency={latency!r} must be >= 0 seconds")
    return latency + nbytes / bandwidth


def comm_to_compute_ratio(
    nbytes: int,
    bandwidth: float,
    stage_compute_s: float,
    virtual: int = 1,
    latency: float = 0.0,
) -> float:
    """Transfer time of one boundary over compute time of one chunk, eq. (11.7).

    A rank computing stage work ``t_stage`` per microbatch splits it into ``v`` chunks of
    ``t_stage / v`` each, and every chunk ends with a transfer of the same ``A`` bytes. The
    ratio ``(alpha + A / beta) / (t_stage / v)`` is ``<= 1`` when a transfer can hide behind
    the next chunk's compute (double buffering), and grows linearly in ``v``.
    """
    _check_pipeline(1, 1, virtual)
    _check_positive("stage_compute_s", stage_compute_s,
                    "give the compute time of one stage for one microbatch in seconds")
    return p2p_time(nbytes, bandwidth, latency) / (stage_compute_s / virtual)


def hides_behind_compute(
    nbytes: int,
    bandwidth: float,
    stage_compute_s: float,
    virtual: int = 1,
    latency: float = 0.0,
) -> bool:
    """True when eq. (11.7) holds: ``alpha + A / beta <= t_stage / v``."""
    return comm_to_compute_ratio(nbytes, bandwidth, stage_compute_s, virtual, latency) <= 1.0


def min_bandwidth_to_hide(
    nbytes: int, stage_compute_s: float, virtual: int = 1, latency: float = 0.0
) -> float:
    """Smallest bandwidth (bytes/s) for which eq. (11.7) holds: ``A / (t_stage / v - alpha)``.

    Raises ``ValueError`` when the latency alone exceeds the chunk time (no bandwidth helps).
    """
    _check_pipeline(1, 1, virtual)
    _check_positive("stage_compute_s", stage_compute_s,
                    "give the compute time of one stage for one microbatch in seconds")
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
        raise ValueError(f"nbytes={nbytes!r} must be an int >= 0 (a byte count)")
    if latency < 0:
        raise ValueError(f"latency={latency!r} must be >= 0 seconds")
    budget = stage_compute_s / virtual - latency
    if budget <= 0:
        raise ValueError(
            f"latency={latency} s >= chunk compute {stage_compute_s / virtual} s: "
            "lower v or use larger microbatches so a chunk outlasts the link latency"
        )
    return nbytes / budget
