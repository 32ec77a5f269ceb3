"""Attention the way FlashAttention stores it: no ``s x s`` tensor kept for backward.

Dao et al. 2022 (FlashAttention, arXiv:2205.14135), Alg. 2 (forward) and Alg. 4 (backward with
dropout): the forward keeps the output ``O`` and, per query row, the log-sum-exp of the scaled
scores ``L = m + log(l)`` (fp32, one number per row and head); the backward recomputes
``P = exp(S - L)`` from Q, K and L, and uses ``D = rowsum(dO * O)``::

    S = Q K^T / sqrt(dh) (+ causal mask),  P = exp(S - L),  P_d = Z * P / (1 - p)
    dV = P_d^T dO,  dP = Z * (dO V^T) / (1 - p),  dS = P * (dP - D) / sqrt(dh)
    dQ = dS K,  dK = dS^T Q

``Z`` is the dropout keep-mask, which FlashAttention regenerates from the RNG state in the
backward instead of storing (Sec. 3.1, "we only need to store the pseudo-random number generator
state"): here it is drawn again from :func:`tpp.tensor_parallel.dropout.dropout_mask`. Tiling
changes neither what is kept nor the result, so the kernel is written untiled.

Per rank, the tensors kept are ``qkv_input``, ``q``, ``k``, ``v``, ``attn_proj_input`` (O) and
``softmax_lse`` (b, heads of the rank, s): the keys of
:func:`tpp.costs.memory.activation_terms_per_layer` with ``attention="flash"``.
"""

from __future__ import annotations

import numpy as np

from tpp.collectives import Communicator

from .attention import AttentionRank
from .linear import linear_backward

__all__ = ["flash_attention_forward", "flash_attention_backward",
           "flash_partial_forward", "flash_partial_backward"]


def _scores(q, k, kv_index, causal):
    dh = q.shape[-1]
    scores = np.einsum("sbhd,tbhd->bhst", q, k[:, :, kv_index]) / np.sqrt(dh)
    if causal:
        s = q.shape[0]
        scores = np.where(np.tril(np.ones((s, s), dtype=bool)), scores, -np.inf)
    return scores


def flash_attention_forward(q: np.ndarray, k: np.ndarray, v: np.ndarray, kv_index: np.ndarray,
                            causal: bool = True, mask: np.ndarray | None = None, p: float = 0.0
                            ) -> tuple[np.ndarray, np.ndarray]:
    """``(O, L)``: output (s, b, hq, dh) and log-sum-exp (b, hq, s). Shapes as
    :func:`tpp.tensor_parallel.attention_core.attention_core_forward`; nothing (s, s) returned."""
    scores = _scores(q, k, kv_index, causal)
    m = scores.max(-1, keepdims=True)
    lse = (m + np.log(np.exp(scores - m).sum(-1, keepdims=True)))[..., 0]
    probs = np.exp(scores - lse[..., None])
    if mask is not None:
        probs = probs * mask / (1.0 - p)
    return np.einsum("bhst,tbhd->sbhd", probs, v[:, :, kv_index]), lse


def flash_attention_backward(do: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                             o: np.ndarray, lse: np.ndarray, kv_index: np.ndarray,
                             causal: bool = True, mask: np.ndarray | None = None, p: float = 0.0
                             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(dQ, dK, dV)`` from what the forward kept (Alg. 4 of Dao et al. 2022, untiled)."""
    dh = q.shape[-1]
    n_kv = k.shape[2]
    onehot = np.zeros((len(kv_index), n_kv))
    onehot[np.arange(len(kv_index)), kv_index] = 1.0
    probs = np.exp(_scores(q, k, kv_index, causal) - lse[..., None])   # recomputed
    dropped = probs if mask is None else probs * mask / (1.0 - p)
    vr, kr = v[:, :, kv_index], k[:, :, kv_index]
    dvr = np.einsum("bhst,sbhd->tbhd", dropped, do)
    dprobs = np.einsum("sbhd,tbhd->bhst", do, vr)
    if mask is not None:
        dprobs = dprobs * mask / (1.0 - p)
    big_d = np.einsum("sbhd,sbhd->bhs", do, o)[..., None]             # rowsum(dO * O)
    ds = probs * (dprobs - big_d) / np.sqrt(dh)
    dq = np.einsum("bhst,tbhd->sbhd", ds, kr)
    dkr = np.einsum("bhst,sbhd->tbhd", ds, q)
    return (dq, np.einsum("tbhd,hk->tbkd", dkr, onehot),
            np.einsum("tbhd,hk->tbkd", dvr, onehot))


def flash_partial_forward(x: np.ndarray, shard: AttentionRank, mask: np.ndarray | None = None,
                          *, comm: Communicator | None = None
                          ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """One rank: full-sequence input x (s, b, d) -> PARTIAL output of its heads, and what it
    keeps (see the module docstring). Same contract as
    :func:`tpp.tensor_parallel.attention.attention_partial_forward`."""
    s, b, _ = x.shape
    dh = shard.d_head
    q = (x @ shard.wq).reshape(s, b, -1, dh)
    k = (x @ shard.wk).reshape(s, b, -1, dh)
    v = (x @ shard.wv).reshape(s, b, -1, dh)
    o, lse = flash_attention_forward(q, k, v, shard.kv_index, shard.causal, mask,
                                     shard.dropout_p)
    o = o.reshape(s, b, -1)
    keep = {"qkv_input": x, "q": q, "k": k, "v": v, "softmax_lse": lse, "attn_proj_input": o}
    return o @ shard.wo, keep


def flash_partial_backward(dz: np.ndarray, shard: AttentionRank, saved: dict[str, np.ndarray],
                           mask: np.ndarray | None = None, x: np.ndarray | None = None,
                           kv_comm: Communicator | None = None, *,
                           comm: Communicator | None = None
                           ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """One rank: dL/dz -> PARTIAL dL/dx and weight-gradient shards. ``mask``: the dropout mask
    regenerated (never saved); ``x``: the re-gathered projection input under SP; ``kv_comm``:
    the replicas of this rank's KV head (their K/V weight gradients are all-reduced)."""
    s, b = dz.shape[:2]
    x = saved["qkv_input"] if x is None else x
    q, k, v, o = saved["q"], saved["k"], saved["v"], saved["attn_proj_input"]
    do, dwo = linear_backward(o, shard.wo, dz)
    dq, dk, dv = flash_attention_backward(do.reshape(q.shape), q, k, v, o.reshape(q.shape),
                                          saved["softmax_lse"], shard.kv_index, shard.causal,
                                          mask, shard.dropout_p)
    dx, dwq = linear_backward(x, shard.wq, dq.reshape(s, b, -1))
    dxk, dwk = linear_backward(x, shard.wk, dk.reshape(s, b, -1))
    dxv, dwv = linear_backward(x, shard.wv, dv.reshape(s, b, -1))
    if kv_comm is not None:
        dwk = kv_comm.all_reduce(dwk, tag="kv_replica.wk")
        dwv = kv_comm.all_reduce(dwv, tag="kv_replica.wv")
    return dx + dxk + dxv, {"wq": dwq, "wk": dwk, "wv": dwv, "wo": dwo}
