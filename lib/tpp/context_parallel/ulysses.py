"""Ulysses (Jacobs et al. 2023, DeepSpeed-Ulysses, Sec. 3): re-shard sequence -> heads and back.

An all-to-all re-shards Q, K, V from "my tokens, all heads" to "all tokens, my heads", every rank
runs ordinary attention on its heads, and a second all-to-all brings the output back to sequence
shards. Needs the number of heads (and of K/V heads) divisible by ``cp``.
"""

from __future__ import annotations

import numpy as np

from tpp.collectives import ProcessGroup
from tpp.context_parallel.attention import (
    ContextParallelResult,
    _check_int,
    _check_qkv,
    _group,
    attention_reference,
    rank_positions,
)

__all__ = ["ulysses_attention"]

def _seq_to_heads(x: list[np.ndarray], g: ProcessGroup, tag: str) -> list[np.ndarray]:
    """(c, h, d) sequence shards -> (s, h/cp, d) head shards, in the ranks' token order."""
    cp = g.size
    recv = g.all_to_all(x, axis=1, tag=tag)       # rank j: heads group j of every source
    c, h, d = x[0].shape
    return [r.reshape(c, cp, h // cp, d).transpose(1, 0, 2, 3).reshape(cp * c, h // cp, d)
            for r in recv]


def _heads_to_seq(y: list[np.ndarray], g: ProcessGroup, tag: str) -> list[np.ndarray]:
    """(s, h/cp, d) head shards -> (c, h, d) sequence shards (inverse of _seq_to_heads)."""
    cp = g.size
    s, hl, d = y[0].shape
    c = s // cp
    send = [a.reshape(cp, c, hl, d).transpose(1, 0, 2, 3).reshape(c, cp * hl, d) for a in y]
    return g.all_to_all(send, axis=1, tag=tag)


def ulysses_attention(q, k, v, cp: int, causal: bool = True, layout: str = "contiguous",
                      group: ProcessGroup | None = None) -> ContextParallelResult:
    """Exact attention by re-sharding from sequence to heads and back (DeepSpeed-Ulysses).

    Four all-to-alls on ``group``: Q, K, V (tags ``ulysses.q/k/v``) and the output
    (``ulysses.out``); each rank sends ``(cp-1)/cp`` of its input to each (the all-to-all bus
    factor of :func:`tpp.collectives.bus_factor`). ``n_heads`` and ``n_kv_heads`` must be
    divisible by ``cp``. Every rank computes all the causal pairs of its ``n_heads / cp`` heads,
    so the work (``n_heads / cp`` heads times all visible pairs) is balanced in either layout.
    """
    q, k, v = _check_qkv(q, k, v)
    cp = _check_int(cp, "cp")
    s, h, d = q.shape
    hkv = k.shape[1]
    if h % cp or hkv % cp:
        raise ValueError(
            f"Ulysses needs n_heads={h} and n_kv_heads={hkv} divisible by cp={cp}: choose a cp "
            "that divides both, replicate K/V heads up to a multiple of cp, or use "
            "ring_attention"
        )
    pos = rank_positions(s, cp, layout)
    g = _group(group, cp, "cp")
    start = len(g.ledger)
    qh = _seq_to_heads([q[p] for p in pos], g, "ulysses.q")
    kh = _seq_to_heads([k[p] for p in pos], g, "ulysses.k")
    vh = _seq_to_heads([v[p] for p in pos], g, "ulysses.v")
    order = np.concatenate(pos)          # the token position of each row after the re-shard
    inv = np.argsort(order)
    outs = []
    for r in range(cp):
        o = attention_reference(qh[r][inv], kh[r][inv], vh[r][inv], causal)
        outs.append(o[order])
    shards = _heads_to_seq(outs, g, "ulysses.out")
    out = np.empty_like(q)
    for r in range(cp):
        out[pos[r]] = shards[r]
    pairs = s * (s + 1) // 2 if causal else s * s
    work = tuple(pairs * (h // cp) for _ in range(cp))
    return ContextParallelResult(out, shards, list(g.ledger[start:]), work, pos)
