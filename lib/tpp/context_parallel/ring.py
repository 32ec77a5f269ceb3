"""Ring attention (Liu, Zaharia & Abbeel 2023, Sec. 3): queries stay, K/V blocks travel a ring.

Each rank holds ``s / cp`` tokens of Q, K and V; K/V blocks travel around a ring of ranks, one
hop per step (``cp - 1`` sends of a K/V block per rank), and every rank folds each visible block
into its running partial with :func:`tpp.context_parallel.attention.online_softmax_merge`. The
output is ``acc / l``: exactly softmax(QK^T/sqrt(d)) V. The backward is
:mod:`tpp.context_parallel.backward`.
"""

from __future__ import annotations

import numpy as np

from tpp.collectives import ProcessGroup
from tpp.context_parallel.attention import (
    AttentionPartial,
    ContextParallelResult,
    _check_int,
    _check_qkv,
    _group,
    _pair_mask,
    _visible,
    block_partial,
    finalize,
    online_softmax_merge,
    rank_chunks,
    rank_positions,
)

__all__ = ["ring_attention"]

def ring_attention(q, k, v, cp: int, causal: bool = True, layout: str = "contiguous",
                   group: ProcessGroup | None = None) -> ContextParallelResult:
    """Exact attention with the sequence split over ``cp`` ranks, K/V passed around a ring.

    Step ``t = 0 .. cp-1``: rank ``r`` holds the K/V block that rank ``(r - t) mod cp`` started
    with; it folds every visible (query chunk, key chunk) pair into its running partial with
    :func:`online_softmax_merge`, then (for ``t < cp-1``) sends the block to rank ``r+1``.
    Each rank sends ``cp - 1`` K/V blocks of ``2 (s/cp) n_kv d_head`` elements
    (:func:`tpp.costs.context_parallel.ring_attention_bytes_per_rank`); the sends are recorded
    as ``send`` records tagged ``ring.kv`` on ``group``.
    """
    q, k, v = _check_qkv(q, k, v)
    cp = _check_int(cp, "cp")
    s = q.shape[0]
    chunks = rank_chunks(s, cp, layout)
    pos = rank_positions(s, cp, layout)
    g = _group(group, cp, "cp")
    start = len(g.ledger)
    # rank r's block: its K and V stacked, with the chunk ranges it covers
    blocks = [(np.stack([k[p], v[p]]), chunks[r]) for r, p in enumerate(pos)]
    state: list[list[AttentionPartial | None]] = [[None] * len(chunks[r]) for r in range(cp)]
    work = [0] * cp
    for t in range(cp):
        for r in range(cp):
            kv, kchunks = blocks[r]
            qoff = 0
            for a, qr in enumerate(chunks[r]):
                qa = q[pos[r][qoff:qoff + len(qr)]]
                koff = 0
                for kr in kchunks:
                    if _visible(qr, kr, causal):
                        mask = _pair_mask(qr, kr, causal)
                        part = block_partial(qa, kv[0, koff:koff + len(kr)],
                                             kv[1, koff:koff + len(kr)], mask)
                        n = len(qr) * len(kr) if mask is None else int(mask.sum())
                        work[r] += n * q.shape[1]
                        old = state[r][a]
                        state[r][a] = part if old is None else online_softmax_merge(old, part)
                    koff += len(kr)
                qoff += len(qr)
        if t < cp - 1:  # every rank passes its block one hop around the ring, all at once
            blocks = [(g.send(blocks[(r - 1) % cp][0], (r - 1) % cp, r, tag=f"ring.kv.{t}"),
                       blocks[(r - 1) % cp][1]) for r in range(cp)]
    shards = [np.concatenate([finalize(p) for p in state[r]]) for r in range(cp)]
    out, lse = np.empty_like(q), np.empty(q.shape[:2])
    for r in range(cp):
        out[pos[r]] = shards[r]
        lse[pos[r]] = np.concatenate([p.m + np.log(p.l) for p in state[r]])
    return ContextParallelResult(out, shards, list(g.ledger[start:]), tuple(work), pos, lse)
