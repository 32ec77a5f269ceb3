"""Closed forms of context parallelism: work per rank, bytes and time of ring attention and
of Ulysses (simulated exactly by :mod:`tpp.context_parallel`).

Notation: sequence ``s``, CP degree ``cp``, query heads ``h``, K/V heads ``h_kv``, head size
``d``, ``e`` bytes per element.

* Ring attention (Liu et al. 2023, Sec. 3): each rank sends ``cp - 1`` K/V blocks of
  ``2 (s/cp) h_kv d`` elements: ``2 (cp-1) (s/cp) h_kv d e`` bytes per attention layer
  (forward). Step ``t`` sends while step ``t`` computes, so the transfer hides when a block's
  compute ``4 c_q c_k h d / F`` outlasts its send ``2 c_k h_kv d e / B``. Under a causal mask
  with the zig-zag split every step computes half a block (either the rank's two query chunks
  against the first half of the arriving K/V, or its second query chunk against all of it:
  ``c^2 / 2`` pairs per head, ``c = s/cp``), so the same send needs blocks twice as long to hide.
* Ulysses (Jacobs et al. 2023, Sec. 3.1): four all-to-alls (Q, K, V, output), each rank sending
  the all-to-all factor ``(cp-1)/cp`` (:func:`tpp.collectives.bus_factor`) of its shard:
  ``(cp-1)/cp (s/cp) d e (2 h + 2 h_kv)`` bytes.
* Work (query-key scores, one per head): causal contiguous rank ``i`` computes
  ``h (i c^2 + c (c+1)/2)`` with ``c = s/cp``; zigzag (chunks of ``c = s/(2 cp)``) gives every
  rank ``h ((2 cp - 1) c^2 + c (c + 1))``.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from tpp.collectives import bus_factor
from tpp.hardware import bytes_per_element

__all__ = [
    "attention_work_per_rank",
    "ring_attention_bytes_per_rank",
    "ring_attention_backward_bytes_per_rank",
    "ulysses_bytes_per_rank",
    "RingAttentionTime",
    "ring_attention_time",
    "ring_overlap_min_block",
]


def _pos(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}={value!r} must be a positive int")
    return value


def _check_seq(s: int, cp: int, layout: str) -> int:
    _pos(s, "s")
    _pos(cp, "cp")
    if layout not in ("contiguous", "zigzag"):
        raise ValueError(f"layout={layout!r}: use 'contiguous' or 'zigzag'")
    parts = cp if layout == "contiguous" else 2 * cp
    if s % parts:
        raise ValueError(
            f"s={s} is not divisible by {parts} ({layout} layout, cp={cp}): pad the sequence "
            f"to a multiple of {parts}"
        )
    return s // parts


def attention_work_per_rank(s: int, cp: int, n_heads: int = 1, causal: bool = True,
                            layout: str = "contiguous") -> tuple[int, ...]:
    """Query-key scores each rank of ring attention computes (masked pairs not counted)."""
    c = _check_seq(s, cp, layout)
    h = _pos(n_heads, "n_heads")
    if not causal:
        return tuple(h * (s // cp) * s for _ in range(cp))
    if layout == "contiguous":
        return tuple(h * (i * c * c + c * (c + 1) // 2) for i in range(cp))
    return tuple(h * ((2 * cp - 1) * c * c + c * (c + 1)) for _ in range(cp))


def ring_attention_bytes_per_rank(s: int, n_kv_heads: int, d_head: int, cp: int,
                                  dtype: str = "bf16") -> Fraction:
    """Bytes one rank sends in one ring-attention forward: ``2 (cp-1) (s/cp) h_kv d e``."""
    for name, val in (("s", s), ("n_kv_heads", n_kv_heads), ("d_head", d_head), ("cp", cp)):
        _pos(val, name)
    if s % cp:
        raise ValueError(f"s={s} is not divisible by cp={cp}: pad the sequence to a multiple")
    e = Fraction(bytes_per_element(dtype))
    return (cp - 1) * 2 * Fraction(s, cp) * n_kv_heads * d_head * e


def ring_attention_backward_bytes_per_rank(s: int, n_kv_heads: int, d_head: int, cp: int,
                                           dtype: str = "bf16") -> Fraction:
    """Bytes one rank sends in one ring-attention backward: ``cp - 1`` K/V blocks and ``cp``
    (dK, dV) accumulators (the last hop brings them home), ``(2 cp - 1) 2 (s/cp) h_kv d e``;
    0 when ``cp = 1`` (:mod:`tpp.context_parallel.backward`)."""
    fwd = ring_attention_bytes_per_rank(s, n_kv_heads, d_head, cp, dtype)
    return fwd * Fraction(2 * cp - 1, cp - 1) if cp > 1 else fwd


def ulysses_bytes_per_rank(s: int, n_heads: int, n_kv_heads: int, d_head: int, cp: int,
                           dtype: str = "bf16") -> Fraction:
    """Bytes one rank sends in one Ulysses forward (Q, K, V and output all-to-alls)."""
    for name, val in (("s", s), ("n_heads", n_heads), ("n_kv_heads", n_kv_heads),
                      ("d_head", d_head), ("cp", cp)):
        _pos(val, name)
    if s % cp:
        raise ValueError(f"s={s} is not divisible by cp={cp}: pad the sequence to a multiple")
    if n_heads % cp or n_kv_heads % cp:
        raise ValueError(
            f"Ulysses needs n_heads={n_heads} and n_kv_heads={n_kv_heads} divisible by "
            f"cp={cp}: choose a cp that divides both or use ring attention"
        )
    e = Fraction(bytes_per_element(dtype))
    shard = Fraction(s, cp) * d_head * e
    return bus_factor("all_to_all", cp) * shard * (2 * n_heads + 2 * n_kv_heads)


@dataclass(frozen=True)
class RingAttentionTime:
    """Seconds of one ring-attention forward on one rank.

    ``compute_per_step``: one block's attention; ``comm_per_step``: one K/V block's send;
    ``total``: ``cp`` computes with each of the ``cp - 1`` sends overlapping the compute of the
    step it precedes, i.e. ``compute + (cp-1) max(compute, comm)``; ``exposed_comm``: what the
    overlap does not hide, ``total - cp * compute``.
    """

    cp: int
    compute_per_step: float
    comm_per_step: float
    total: float

    @property
    def exposed_comm(self) -> float:
        return self.total - self.cp * self.compute_per_step

    @property
    def hidden(self) -> bool:
        """True when every send hides behind a block's compute."""
        return self.comm_per_step <= self.compute_per_step


def ring_attention_time(s: int, n_heads: int, n_kv_heads: int, d_head: int, cp: int,
                        peak_flops: float, bandwidth: float, latency: float = 0.0,
                        mfu: float = 1.0, dtype: str = "bf16",
                        causal: bool = False) -> RingAttentionTime:
    """Time of one forward under the alpha-beta model with compute/communication overlap.

    A step computes ``W / cp`` query-key pairs, ``W`` the rank's work of
    :func:`attention_work_per_rank` (non-causal: ``c = s/cp`` queries against ``c`` keys, ``h c^2``
    pairs; ``causal=True``: the zig-zag split, about half of that), at ``4 d`` FLOPs per pair
    (QK^T and PV, two FLOPs per multiply-add) and ``peak_flops * mfu``; a send is
    ``alpha + 2 c h_kv d e / B``.
    """
    if not peak_flops > 0 or not bandwidth > 0:
        raise ValueError("peak_flops (FLOP/s) and bandwidth (bytes/s) must be > 0")
    if not 0 < mfu <= 1:
        raise ValueError(f"mfu={mfu} must be in (0, 1]")
    if latency < 0:
        raise ValueError(f"latency={latency!r} must be >= 0 s")
    sent = ring_attention_bytes_per_rank(s, n_kv_heads, d_head, cp, dtype)
    layout = "zigzag" if causal else "contiguous"
    work = attention_work_per_rank(s, cp, _pos(n_heads, "n_heads"), causal, layout)[0]
    compute = 4 * d_head * work / cp / (peak_flops * mfu)
    comm = float(latency + sent / (cp - 1) / Fraction(bandwidth)) if cp > 1 else 0.0
    return RingAttentionTime(cp, compute, comm, compute + (cp - 1) * max(compute, comm))


def ring_overlap_min_block(n_heads: int, n_kv_heads: int, peak_flops: float,
                           bandwidth: float, mfu: float = 1.0, dtype: str = "bf16",
                           causal: bool = False) -> float:
    """Smallest block length ``c`` (tokens per rank) at which a K/V send hides behind compute.

    ``4 c^2 h d / F >= 2 c h_kv d e / B``  <=>  ``c >= F e h_kv / (2 h B)`` with ``F`` the
    achieved FLOP/s (Liu et al. 2023, Sec. 3: block size >= FLOPs / bandwidth). ``causal=True``
    (zig-zag split): a step computes half a block, ``2 c^2 h d / F``, so ``c >= F e h_kv / (h B)``.
    """
    if not peak_flops > 0 or not bandwidth > 0 or not 0 < mfu <= 1:
        raise ValueError("peak_flops and bandwidth must be > 0 and mfu in (0, 1]")
    e = float(bytes_per_element(dtype))
    halves = 1 if causal else 2      # FLOPs per step 2 c^2 h d (causal half-block) or 4 c^2 h d
    return peak_flops * mfu * e * _pos(n_kv_heads, "n_kv_heads") / (
        halves * _pos(n_heads, "n_heads") * bandwidth)
