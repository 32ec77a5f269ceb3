"""Backward pass of ring attention (:func:`tpp.context_parallel.ring.ring_attention`).

Per block, the gradient of attention with the saved log-sum-exp ``L = m + log l`` of each query
row (FlashAttention, Dao et al. 2022, Alg. 4; Ring Attention, Liu et al. 2023, Sec. 3)::

    P  = exp(Q K^T / sqrt(d) - L)            (the forward's probabilities, rebuilt per block)
    dV += P^T dO,     dP = dO V^T,     D = rowsum(dO * O)
    dS = P * (dP - D)
    dQ += dS K / sqrt(d),     dK += dS^T Q / sqrt(d)

Queries, ``dO``, ``O`` and ``L`` stay on their rank; each K/V block travels the ring together
with its gradient accumulator ``(dK, dV)``. After ``cp - 1`` hops every rank has met every
block, and one last hop brings each accumulator home to the block's owner: ``cp - 1`` sends
of K/V and ``cp`` sends of ``(dK, dV)``, each ``2 (s/cp) h_kv d`` elements, per rank.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tpp.collectives import CollectiveRecord, ProcessGroup
from tpp.context_parallel.attention import (
    _check_int,
    _check_qkv,
    _expand_kv,
    _group,
    _pair_mask,
    _visible,
    rank_chunks,
    rank_positions,
)
from tpp.context_parallel.ring import ring_attention

__all__ = ["RingAttentionGrads", "ring_attention_backward"]


@dataclass
class RingAttentionGrads:
    """``dq``, ``dk``, ``dv`` in sequence order (shapes of ``q``, ``k``, ``v``) and the ledger
    of the backward pass alone."""

    dq: np.ndarray
    dk: np.ndarray
    dv: np.ndarray
    ledger: list[CollectiveRecord]

    def bytes_sent_per_rank(self) -> tuple[int, ...]:
        n = max((len(r.bytes_sent_per_rank) for r in self.ledger), default=1)
        totals = [0] * n
        for rec in self.ledger:
            for r, b in enumerate(rec.bytes_sent_per_rank):
                totals[r] += b
        return tuple(totals)


def ring_attention_backward(q, k, v, do, cp: int, causal: bool = True,
                            layout: str = "contiguous",
                            group: ProcessGroup | None = None) -> RingAttentionGrads:
    """Gradients of ``sum(ring_attention(q, k, v).output * do)`` with respect to q, k, v,
    computed rank by rank with K/V and their gradient accumulators travelling the ring."""
    q, k, v = _check_qkv(q, k, v)
    do = np.asarray(do, dtype=np.float64)
    if do.shape != q.shape:
        raise ValueError(f"do has shape {do.shape}: pass the output's gradient, shape {q.shape}")
    cp = _check_int(cp, "cp")
    s, h, d = q.shape
    g = h // k.shape[1]
    chunks = rank_chunks(s, cp, layout)
    pos = rank_positions(s, cp, layout)
    grp = _group(group, cp, "cp")
    start = len(grp.ledger)
    fwd = ring_attention(q, k, v, cp, causal, layout)       # what the forward keeps:
    out, lse = fwd.output, fwd.lse                          # O and L, per query row
    delta = (do * out).sum(axis=-1)                          # D, (s, h)
    dq = np.zeros_like(q)
    # a travelling block: (K/V of the owner's tokens, their dK/dV accumulator, chunks)
    blocks = [(np.stack([k[p], v[p]]), np.zeros((2, len(p)) + k.shape[1:]), chunks[r])
              for r, p in enumerate(pos)]
    for t in range(cp):
        for r in range(cp):
            kv, dkv, kchunks = blocks[r]
            qoff = 0
            for qr in chunks[r]:
                rows = pos[r][qoff:qoff + len(qr)]
                koff = 0
                for kr in kchunks:
                    if _visible(qr, kr, causal):
                        ks = slice(koff, koff + len(kr))
                        ke, ve = _expand_kv(kv[0, ks], h), _expand_kv(kv[1, ks], h)
                        sc = np.einsum("qhd,khd->qhk", q[rows], ke) / np.sqrt(d)
                        p = np.exp(sc - lse[rows][..., None])
                        mask = _pair_mask(qr, kr, causal)
                        if mask is not None:
                            p = np.where(mask[:, None, :], p, 0.0)
                        dv_e = np.einsum("qhk,qhd->khd", p, do[rows])
                        dp = np.einsum("qhd,khd->qhk", do[rows], ve)
                        ds = p * (dp - delta[rows][..., None])
                        dq[rows] += np.einsum("qhk,khd->qhd", ds, ke) / np.sqrt(d)
                        dk_e = np.einsum("qhk,qhd->khd", ds, q[rows]) / np.sqrt(d)
                        # GQA: a K/V head's gradient sums over the query heads that read it
                        dkv[0, ks] += dk_e.reshape(len(kr), -1, g, d).sum(axis=2)
                        dkv[1, ks] += dv_e.reshape(len(kr), -1, g, d).sum(axis=2)
                    koff += len(kr)
                qoff += len(qr)
        if t < cp - 1:      # K/V and the accumulators move on together
            prev = [(r - 1) % cp for r in range(cp)]
            blocks = [(grp.send(blocks[p][0], p, r, tag=f"ring.kv.bwd.{t}"),
                       grp.send(blocks[p][1], p, r, tag=f"ring.dkv.{t}"),
                       blocks[p][2]) for r, p in enumerate(prev)]
    # rank r now holds the block of rank r + 1: one last hop brings each accumulator home
    home = [blocks[(r - 1) % cp][1] if cp == 1 else
            grp.send(blocks[(r - 1) % cp][1], (r - 1) % cp, r, tag="ring.dkv.home")
            for r in range(cp)]
    dk, dv = np.zeros_like(k), np.zeros_like(v)
    for r in range(cp):
        dk[pos[r]], dv[pos[r]] = home[r][0], home[r][1]
    return RingAttentionGrads(dq, dk, dv, list(grp.ledger[start:]))
