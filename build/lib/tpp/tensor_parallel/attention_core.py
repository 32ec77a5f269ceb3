"""The pieces of tensor-parallel attention that hold no layer state: how the heads are split
over ranks (:func:`attention_split`, the GQA divisibility rules), the per-head core
``softmax(Q K^T / sqrt(d_head) + causal) V`` with its backward, and weight initialisation.
:mod:`.attention` builds the reference and the sharded layer from them (and re-exports them).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .dropout import dropout_backward, dropout_forward
from .sharding import check_tp

__all__ = [
    "AttentionSplit",
    "attention_core_backward",
    "attention_core_forward",
    "attention_split",
    "init_attention_weights",
]


# --------------------------------------------------------------------------------------------
# the split
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AttentionSplit:
    """How ``n_heads`` query and ``n_kv_heads`` KV heads are laid out over ``tp`` ranks."""

    tp: int
    n_heads: int
    n_kv_heads: int
    q_heads_per_rank: int
    kv_heads_per_rank: int
    replicas: int  # ranks holding each KV head (1 = no replication)

    def q_heads(self, rank: int) -> list[int]:
        """Global indices of the query heads of ``rank``."""
        q = self.q_heads_per_rank
        return list(range(rank * q, (rank + 1) * q))

    def kv_heads(self, rank: int) -> list[int]:
        """Global indices of the KV heads ``rank`` holds."""
        if self.replicas > 1:
            return [rank // self.replicas]
        k = self.kv_heads_per_rank
        return list(range(rank * k, (rank + 1) * k))


def attention_split(n_heads: int, n_kv_heads: int, tp: int,
                    replicate_kv: bool = False) -> AttentionSplit:
    """Check that ``tp`` ranks can share the heads, and say how; ValueError says what to change.

    >>> attention_split(64, 8, 16)
    Traceback (most recent call last):
    ...
    ValueError: TP=16 must divide n_kv_heads=8: lower TP to 8 or pass replicate_kv=True
    """
    tp = check_tp(tp)
    for name, v in (("n_heads", n_heads), ("n_kv_heads", n_kv_heads)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name}={v!r} must be a positive integer")
    if n_heads % n_kv_heads:
        raise ValueError(f"n_heads={n_heads} must be a multiple of n_kv_heads={n_kv_heads} "
                         "(each KV head serves a whole group of query heads)")
    if n_heads % tp:
        divisors = [t for t in range(1, n_heads + 1) if n_heads % t == 0 and t < tp]
        raise ValueError(f"TP={tp} must divide n_heads={n_heads}: lower TP to {divisors[-1]} "
                         f"(a divisor of {n_heads})")
    if tp <= n_kv_heads:
        if n_kv_heads % tp:
            raise ValueError(f"TP={tp} must divide n_kv_heads={n_kv_heads}: choose TP among the "
                             f"divisors of {n_kv_heads}")
        return AttentionSplit(tp, n_heads, n_kv_heads, n_heads // tp, n_kv_heads // tp, 1)
    if tp % n_kv_heads:
        raise ValueError(f"TP={tp} exceeds n_kv_heads={n_kv_heads} and is not a multiple of it, "
                         f"so KV heads cannot be replicated evenly: use TP={n_kv_heads} or a "
                         f"multiple of {n_kv_heads}")
    if not replicate_kv:
        raise ValueError(f"TP={tp} must divide n_kv_heads={n_kv_heads}: lower TP to "
                         f"{n_kv_heads} or pass replicate_kv=True")
    return AttentionSplit(tp, n_heads, n_kv_heads, n_heads // tp, 1, tp // n_kv_heads)


# --------------------------------------------------------------------------------------------
# the per-head core: softmax(Q K^T / sqrt(d_head) + causal) V
# --------------------------------------------------------------------------------------------
def _onehot(kv_index: np.ndarray, n_kv: int) -> np.ndarray:
    m = np.zeros((len(kv_index), n_kv))
    m[np.arange(len(kv_index)), kv_index] = 1.0
    return m


def attention_core_forward(q: np.ndarray, k: np.ndarray, v: np.ndarray, kv_index: np.ndarray,
                           causal: bool = True, mask: np.ndarray | None = None,
                           p: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-head attention. ``q``: (s, b, hq, dh); ``k``, ``v``: (s, b, hk, dh); query head ``i``
    uses KV head ``kv_index[i]``. ``mask``: dropout keep-mask (b, hq, s, s) or None.

    Returns ``(o, probs, dropped)``: o (s, b, hq, dh), the softmax output (b, hq, s, s) and the
    dropout output (the same array as ``probs`` when ``mask`` is None).
    """
    dh = q.shape[-1]
    kr, vr = k[:, :, kv_index], v[:, :, kv_index]
    scores = np.einsum("sbhd,tbhd->bhst", q, kr) / np.sqrt(dh)
    if causal:
        s = q.shape[0]
        scores = np.where(np.tril(np.ones((s, s), dtype=bool)), scores, -np.inf)
    scores = scores - scores.max(-1, keepdims=True)
    e = np.exp(scores)
    probs = e / e.sum(-1, keepdims=True)
    dropped = probs if mask is None else dropout_forward(probs, mask, p)
    o = np.einsum("bhst,tbhd->sbhd", dropped, vr)
    return o, probs, dropped


def attention_core_backward(do: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                            kv_index: np.ndarray, probs: np.ndarray, dropped: np.ndarray,
                            mask: np.ndarray | None = None, p: float = 0.0
                            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Backward of :func:`attention_core_forward`: returns ``(dq, dk, dv)``.

    ``dV = P_d^T dO``; ``dP_d = dO V^T``; through dropout; softmax:
    ``dS = P * (dP - rowsum(dP * P))``; ``dQ = dS K / sqrt(dh)``, ``dK = dS^T Q / sqrt(dh)``;
    the gradients of a KV head shared by a group of query heads are summed over the group.
    """
    dh = q.shape[-1]
    n_kv = k.shape[2]
    onehot = _onehot(kv_index, n_kv)
    kr, vr = k[:, :, kv_index], v[:, :, kv_index]
    d_dropped = np.einsum("sbhd,tbhd->bhst", do, vr)
    dvr = np.einsum("bhst,sbhd->tbhd", dropped, do)
    dprobs = d_dropped if mask is None else dropout_backward(d_dropped, mask, p)
    ds = probs * (dprobs - (dprobs * probs).sum(-1, keepdims=True)) / np.sqrt(dh)
    dq = np.einsum("bhst,tbhd->sbhd", ds, kr)
    dkr = np.einsum("bhst,sbhd->tbhd", ds, q)
    dk = np.einsum("tbhd,hk->tbkd", dkr, onehot)
    dv = np.einsum("tbhd,hk->tbkd", dvr, onehot)
    return dq, dk, dv


def init_attention_weights(d: int, n_heads: int, n_kv_heads: int | None = None,
                           d_head: int | None = None, seed: int = 0) -> dict[str, np.ndarray]:
    """Random weights ``{"wq", "wk", "wv", "wo"}`` (float64, scaled by 1/sqrt(fan-in))."""
    n_kv = n_heads if n_kv_heads is None else n_kv_heads
    if d_head is None:
        if d % n_heads:
            raise ValueError(f"d={d} must be divisible by n_heads={n_heads}, or pass d_head")
        d_head = d // n_heads
    rng = np.random.default_rng(seed)
    return {
        "wq": rng.standard_normal((d, n_heads * d_head)) / np.sqrt(d),
        "wk": rng.standard_normal((d, n_kv * d_head)) / np.sqrt(d),
        "wv": rng.standard_normal((d, n_kv * d_head)) / np.sqrt(d),
        "wo": rng.standard_normal((n_heads * d_head, d)) / np.sqrt(n_heads * d_head),
    }


def _check_weights(wq, wk, wv, wo, n_heads: int, n_kv_heads: int):
    wq, wk, wv, wo = (np.asarray(w, dtype=np.float64) for w in (wq, wk, wv, wo))
    for name, w in (("wq", wq), ("wk", wk), ("wv", wv), ("wo", wo)):
        if w.ndim != 2:
            raise ValueError(f"{name} must be a 2-d matrix, got shape {w.shape}")
    d = wq.shape[0]
    if wq.shape[1] % n_heads:
        raise ValueError(f"wq has {wq.shape[1]} columns, not a multiple of n_heads={n_heads}: "
                         "wq must be (d, n_heads * d_head)")
    dh = wq.shape[1] // n_heads
    for name, w in (("wk", wk), ("wv", wv)):
        if w.shape != (d, n_kv_heads * dh):
            raise ValueError(f"{name} has shape {w.shape}: it must be (d, n_kv_heads * d_head) = "
                             f"({d}, {n_kv_heads * dh})")
    if wo.shape != (n_heads * dh, d):
        raise ValueError(f"wo has shape {wo.shape}: it must be (n_heads * d_head, d) = "
                         f"({n_heads * dh}, {d})")
    return wq, wk, wv, wo, d, dh


def _as_sbd(x: np.ndarray, d: int) -> tuple[np.ndarray, bool]:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim not in (2, 3) or x.shape[-1] != d:
        raise ValueError(f"x has shape {x.shape}: pass (s, {d}) or (s, b, {d}) (sequence first)")
    return (x[:, None, :], True) if x.ndim == 2 else (x, False)
