"""What ring attention and Ulysses share: layouts, checks, the reference and the online softmax.

Layouts (which tokens a rank holds): ``"contiguous"`` gives rank ``i`` tokens
``[i s/cp, (i+1) s/cp)``; ``"zigzag"`` cuts the sequence into ``2 cp`` chunks and gives rank ``i``
chunks ``i`` and ``2 cp - 1 - i`` (Megatron-LM's context parallelism; Llama 3, Sec. 3.3.2), which
balances causal work. Closed forms of the bytes and the work are in
:mod:`tpp.costs.context_parallel`.

The blockwise online softmax (Milakov & Gimelshein 2018; FlashAttention, Dao et al. 2022,
Alg. 1): a partial over some keys keeps, per query and head, a running max ``m``, a running
denominator ``l = sum exp(score - m)`` and an unnormalised numerator ``acc = sum exp(score - m) v``;
:func:`online_softmax_merge` folds two partials, :func:`finalize` divides.

Arrays are ``(seq, heads, d_head)``; K and V may have fewer heads than Q (GQA: query head ``j``
reads K/V head ``j // (n_heads // n_kv_heads)``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tpp.collectives import CollectiveRecord, ProcessGroup, group_of_size

__all__ = [
    "LAYOUTS",
    "AttentionPartial",
    "ContextParallelResult",
    "attention_reference",
    "block_partial",
    "online_softmax_merge",
    "finalize",
    "rank_chunks",
    "rank_positions",
]

LAYOUTS = ("contiguous", "zigzag")


# ----------------------------------------------------------------------------- validation
def _check_int(value, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name}={value!r} must be an integer >= {minimum}")
    return int(value)


def _check_qkv(q, k, v) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    for name, a in (("q", q), ("k", k), ("v", v)):
        if a.ndim != 3:
            raise ValueError(
                f"{name} has shape {a.shape}: pass a 3-d array (seq, heads, d_head)"
            )
    if k.shape != v.shape:
        raise ValueError(f"k has shape {k.shape} but v has shape {v.shape}: give them one shape")
    if q.shape[0] != k.shape[0] or q.shape[2] != k.shape[2]:
        raise ValueError(
            f"q {q.shape} and k {k.shape} must agree on seq and d_head: "
            "pass (seq, heads, d_head) arrays of one sequence"
        )
    if q.shape[0] < 1 or q.shape[2] < 1 or k.shape[1] < 1:
        raise ValueError("seq, heads and d_head must be >= 1")
    if q.shape[1] % k.shape[1]:
        raise ValueError(
            f"n_heads={q.shape[1]} is not a multiple of n_kv_heads={k.shape[1]}: "
            "GQA needs every K/V head shared by the same number of query heads"
        )
    return q, k, v


def _check_layout(layout: str) -> str:
    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r}: use one of {', '.join(LAYOUTS)}")
    return layout


def rank_chunks(seq: int, cp: int, layout: str = "contiguous") -> list[list[range]]:
    """The token ranges rank ``i`` holds, for each rank (in sequence order within a rank).

    contiguous: ``[range(i c, (i+1) c)]`` with ``c = seq / cp``;
    zigzag: ``[chunk i, chunk 2 cp - 1 - i]`` of ``2 cp`` chunks of ``seq / (2 cp)`` tokens.
    """
    seq = _check_int(seq, "seq")
    cp = _check_int(cp, "cp")
    _check_layout(layout)
    if layout == "contiguous":
        if seq % cp:
            raise ValueError(
                f"seq={seq} is not divisible by cp={cp}: pad the sequence to a multiple of {cp}"
                " or choose a cp that divides it"
            )
        c = seq // cp
        return [[range(i * c, (i + 1) * c)] for i in range(cp)]
    if seq % (2 * cp):
        raise ValueError(
            f"seq={seq} is not divisible by 2*cp={2 * cp} (zigzag cuts 2*cp chunks): pad the "
            f"sequence to a multiple of {2 * cp} or use layout='contiguous'"
        )
    c = seq // (2 * cp)
    chunk = [range(j * c, (j + 1) * c) for j in range(2 * cp)]
    return [[chunk[i], chunk[2 * cp - 1 - i]] for i in range(cp)]


def rank_positions(seq: int, cp: int, layout: str = "contiguous") -> list[np.ndarray]:
    """Token positions of each rank: the concatenation of :func:`rank_chunks`."""
    return [np.concatenate([np.arange(r.start, r.stop) for r in chunks])
            for chunks in rank_chunks(seq, cp, layout)]


# ----------------------------------------------------------------------------- the reference
def _expand_kv(k: np.ndarray, n_heads: int) -> np.ndarray:
    """Repeat K/V heads so that query head j reads K/V head j // group (GQA)."""
    return np.repeat(k, n_heads // k.shape[1], axis=1)


def attention_reference(q, k, v, causal: bool = True) -> np.ndarray:
    """softmax(Q K^T / sqrt(d_head), causal mask) V for one sequence, every head at once."""
    q, k, v = _check_qkv(q, k, v)
    s, h, d = q.shape
    ke, ve = _expand_kv(k, h), _expand_kv(v, h)
    scores = np.einsum("qhd,khd->hqk", q, ke) / np.sqrt(d)
    if causal:
        scores = np.where(np.tril(np.ones((s, s), dtype=bool)), scores, -np.inf)
    scores -= scores.max(axis=-1, keepdims=True)
    p = np.exp(scores)
    p /= p.sum(axis=-1, keepdims=True)
    return np.einsum("hqk,khd->qhd", p, ve)


# ----------------------------------------------------------------------------- online softmax
@dataclass(frozen=True)
class AttentionPartial:
    """Attention of some queries over a subset of the keys, in online-softmax form.

    ``m`` (queries, heads): the largest score seen; ``l`` (queries, heads): ``sum exp(s - m)``;
    ``acc`` (queries, heads, d_head): ``sum exp(s - m) v``. The output is ``acc / l``.
    """

    m: np.ndarray
    l: np.ndarray  # noqa: E741 - the paper's name
    acc: np.ndarray


def block_partial(q, k, v, mask: np.ndarray | None = None) -> AttentionPartial:
    """Partial of queries ``q`` (cq, h, d) over one key block ``k``, ``v`` (ck, h_kv, d).

    ``mask`` (cq, ck), True where a query may see a key; every query must see at least one key
    of the block (fully masked blocks are skipped by the caller, not computed).
    """
    h, d = q.shape[1], q.shape[2]
    scores = np.einsum("qhd,khd->qhk", q, _expand_kv(k, h)) / np.sqrt(d)
    if mask is not None:
        scores = np.where(mask[:, None, :], scores, -np.inf)
    m = scores.max(axis=-1)
    p = np.exp(scores - m[..., None])
    return AttentionPartial(m, p.sum(axis=-1), np.einsum("qhk,khd->qhd", p, _expand_kv(v, h)))


def online_softmax_merge(a: AttentionPartial, b: AttentionPartial) -> AttentionPartial:
    """Merge two partials over disjoint key sets into the partial over their union.

        m = max(m_a, m_b),  l = e^(m_a - m) l_a + e^(m_b - m) l_b,
        acc = e^(m_a - m) acc_a + e^(m_b - m) acc_b

    (FlashAttention, Dao et al. 2022, Alg. 1 lines 10-12; exact: any common shift m cancels in
    acc / l, the max only keeps the exponentials <= 1.)
    """
    m = np.maximum(a.m, b.m)
    sa, sb = np.exp(a.m - m), np.exp(b.m - m)
    return AttentionPartial(m, sa * a.l + sb * b.l, sa[..., None] * a.acc + sb[..., None] * b.acc)


def finalize(p: AttentionPartial) -> np.ndarray:
    """The attention output ``acc / l`` of a partial over all the keys a query may see."""
    return p.acc / p.l[..., None]


# ----------------------------------------------------------------------------- results
@dataclass
class ContextParallelResult:
    """What a context-parallel attention returns.

    ``output`` (seq, heads, d_head) in sequence order (gathered from the ranks' shards, for
    comparison with :func:`attention_reference`); ``shards``: each rank's output for its own
    tokens; ``ledger``: the group's records; ``work_per_rank``: query-key scores each rank
    computed, one per (query, key, head) (causally masked pairs are not counted, fully masked
    blocks are skipped);
    ``positions``: each rank's token positions; ``lse`` (seq, heads): the log-sum-exp
    ``m + log l`` of each query row, which a backward pass keeps (ring attention only).
    """

    output: np.ndarray
    shards: list[np.ndarray]
    ledger: list[CollectiveRecord]
    work_per_rank: tuple[int, ...]
    positions: list[np.ndarray] = field(repr=False)
    lse: np.ndarray | None = field(default=None, repr=False)

    def bytes_sent_per_rank(self) -> tuple[int, ...]:
        """Bytes each rank sent over the whole ledger."""
        totals = [0] * len(self.work_per_rank)
        for rec in self.ledger:
            for r, b in enumerate(rec.bytes_sent_per_rank):
                totals[r] += b
        return tuple(totals)


def _group(group: ProcessGroup | None, cp: int, name: str) -> ProcessGroup:
    return group_of_size(group, cp, label="cp", name=name)


def _pair_mask(qr: range, kr: range, causal: bool) -> np.ndarray | None:
    """None = every pair visible; an array = the causal mask of a diagonal sub-block."""
    if not causal or kr.stop - 1 <= qr.start:
        return None
    qp, kp = np.arange(qr.start, qr.stop), np.arange(kr.start, kr.stop)
    return kp[None, :] <= qp[:, None]


def _visible(qr: range, kr: range, causal: bool) -> bool:
    return not causal or kr.start <= qr.stop - 1
