"""Tensor-parallel self-attention (MHA and GQA) with explicit forward and backward.

Shoeybi et al. 2019, Sec. 3 (Fig. 3b): the heads are independent, so Q, K and V are
column-parallel *by head* and the output projection ``W_O`` is row-parallel; the only
communication is f before the projections (identity forward, all-reduce backward) and g after
``W_O`` (all-reduce forward, identity backward)::

    x -f-> [Q_r, K_r, V_r] = x W_{Q,K,V}[:, heads of rank r]
         -> O_r = softmax(Q_r K_r^T / sqrt(d_head) + causal) V_r      (per head, no comms)
         -> z_r = O_r W_O[heads of rank r, :] -g-> y = sum_r z_r     (ONE all-reduce)

Shapes (row vectors, sequence first as in Megatron-LM): ``x`` is (s, d) or (s, b, d);
``W_Q``: (d, n_heads d_head), ``W_K``, ``W_V``: (d, n_kv_heads d_head), ``W_O``:
(n_heads d_head, d). Query head ``i`` reads KV head ``i // (n_heads / n_kv_heads)``
(grouped-query attention, Ainslie et al. 2023; MHA is n_kv_heads = n_heads).

Splitting rules (checked by :func:`attention_split`):

* TP must divide n_heads;
* TP <= n_kv_heads: TP must divide n_kv_heads, each rank holds n_kv_heads / TP KV heads;
* TP > n_kv_heads: only with ``replicate_kv=True`` and TP a multiple of n_kv_heads; each KV head
  is then held by R = TP / n_kv_heads ranks (its weights, activations and KV cache are stored R
  times), and in training the R replicas' weight gradients are summed by an all-reduce among
  them (recorded in :attr:`ShardedAttention.kv_groups`).

The sharded layer exists once, as the program of one rank (:class:`AttentionRank` holds the
rank's shards; :func:`sharded_attention_forward` / :func:`sharded_attention_backward` call f
and g on a communicator). :class:`ShardedAttention` runs it on simulated ranks with
:func:`tpp.collectives.spmd`; :mod:`tpp.distributed` runs it on ``torch.distributed``.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from tpp.collectives import Communicator, ProcessGroup, SimulatedWorld, spmd
from tpp.hardware import bytes_per_element

from .attention_core import (
    AttentionSplit,
    _as_sbd,
    _check_weights,
    attention_core_backward,
    attention_core_forward,
    attention_split,
    init_attention_weights,
)
from .dropout import dropout_mask
from .linear import linear_backward
from .operators import CopyToTP, ReduceFromTP, f_backward, f_forward, g_backward, g_forward
from .sharding import tp_group

__all__ = [
    "AttentionSplit",
    "attention_split",
    "attention_core_forward",
    "attention_core_backward",
    "init_attention_weights",
    "Attention",
    "AttentionRank",
    "ShardedAttention",
    "attention_partial_backward",
    "attention_partial_forward",
    "sharded_attention_backward",
    "sharded_attention_forward",
]


# --------------------------------------------------------------------------------------------
# the unsharded reference
# --------------------------------------------------------------------------------------------
class Attention:
    """Unsharded (multi-head or grouped-query) causal self-attention, the reference.

    ``forward(x) -> y``, ``backward(dy) -> dx``, ``grads`` = {"wq", "wk", "wv", "wo"}.
    ``dropout_p``: None (no dropout) or p in [0, 1): dropout on the softmax output with the
    deterministic mask of :func:`tpp.tensor_parallel.dropout.dropout_mask` (``seed``, ``layer``).
    """

    def __init__(self, wq, wk, wv, wo, n_heads: int, n_kv_heads: int | None = None, *,
                 causal: bool = True, dropout_p: float | None = None, seed: int = 0,
                 layer: int = 0) -> None:
        n_kv = n_heads if n_kv_heads is None else n_kv_heads
        attention_split(n_heads, n_kv, 1)
        self.wq, self.wk, self.wv, self.wo, self.d, self.d_head = _check_weights(
            wq, wk, wv, wo, n_heads, n_kv)
        self.n_heads, self.n_kv_heads = n_heads, n_kv
        self.causal, self.dropout_p, self.seed, self.layer = causal, dropout_p, seed, layer
        self.kv_index = np.arange(n_heads) // (n_heads // n_kv)
        self.grads: dict[str, np.ndarray] = {}
        self._cache: tuple | None = None

    def forward(self, x: np.ndarray) -> np.ndarray:
        x3, squeeze = _as_sbd(x, self.d)
        s, b, _ = x3.shape
        dh = self.d_head
        q = (x3 @ self.wq).reshape(s, b, self.n_heads, dh)
        k = (x3 @ self.wk).reshape(s, b, self.n_kv_heads, dh)
        v = (x3 @ self.wv).reshape(s, b, self.n_kv_heads, dh)
        mask = None
        if self.dropout_p is not None:
            mask = dropout_mask((b, self.n_heads, s, s), self.dropout_p, self.seed, "softmax",
                                self.layer)
        o, probs, dropped = attention_core_forward(q, k, v, self.kv_index, self.causal, mask,
                                                   self.dropout_p or 0.0)
        o = o.reshape(s, b, self.n_heads * dh)
        self._cache = (x3, q, k, v, probs, dropped, mask, o, squeeze)
        y = o @ self.wo
        return y[:, 0, :] if squeeze else y

    def backward(self, dy: np.ndarray) -> np.ndarray:
        if self._cache is None:
            raise ValueError("call forward before backward")
        x3, q, k, v, probs, dropped, mask, o, squeeze = self._cache
        dy = np.asarray(dy, dtype=np.float64)
        dy3 = dy[:, None, :] if squeeze else dy
        if dy3.shape != x3.shape:
            raise ValueError(f"dy has shape {dy.shape}: pass the gradient of forward's output")
        s, b, _ = x3.shape
        do, dwo = linear_backward(o, self.wo, dy3)
        dq, dk, dv = attention_core_backward(do.reshape(q.shape), q, k, v, self.kv_index, probs,
                                             dropped, mask, self.dropout_p or 0.0)
        dx, dwq = linear_backward(x3, self.wq, dq.reshape(s, b, -1))
        dxk, dwk = linear_backward(x3, self.wk, dk.reshape(s, b, -1))
        dxv, dwv = linear_backward(x3, self.wv, dv.reshape(s, b, -1))
        self.grads = {"wq": dwq, "wk": dwk, "wv": dwv, "wo": dwo}
        dx = dx + dxk + dxv
        return dx[:, 0, :] if squeeze else dx


# --------------------------------------------------------------------------------------------
# the program of one rank
# --------------------------------------------------------------------------------------------
@dataclass
class AttentionRank:
    """What one rank holds: its weight shards (its query heads' columns of W_Q and rows of W_O,
    its KV heads' columns of W_K and W_V) and, for each of its query heads, the index of the KV
    head it reads among the rank's KV heads."""

    wq: np.ndarray
    wk: np.ndarray
    wv: np.ndarray
    wo: np.ndarray
    kv_index: np.ndarray
    d_head: int
    causal: bool = True
    dropout_p: float = 0.0
    recompute_core: bool = False


def attention_partial_forward(x: np.ndarray, shard: AttentionRank,
                              mask: np.ndarray | None = None, *, comm: Communicator | None = None
                              ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """One rank, no communication: the full-sequence input x (s, b, d) -> the PARTIAL output
    z_r (s, b, d) of the rank's heads, and the tensors it keeps for backward (name -> array).
    ``mask``: this rank's dropout keep-mask (b, heads of the rank, s, s) or None."""
    s, b, _ = x.shape
    dh, p = shard.d_head, shard.dropout_p
    q = (x @ shard.wq).reshape(s, b, -1, dh)
    k = (x @ shard.wk).reshape(s, b, -1, dh)
    v = (x @ shard.wv).reshape(s, b, -1, dh)
    o, probs, dropped = attention_core_forward(q, k, v, shard.kv_index, shard.causal, mask, p)
    o = o.reshape(s, b, -1)
    keep = {"qkv_input": x, "q": q, "k": k, "v": v}
    if not shard.recompute_core:
        keep["softmax_output"] = probs
        if mask is not None:
            keep["softmax_dropout_mask"] = mask
            keep["softmax_dropout_output"] = dropped
    keep["attn_proj_input"] = o
    return o @ shard.wo, keep


def attention_partial_backward(dz: np.ndarray, shard: AttentionRank, saved: dict[str, np.ndarray],
                               mask: np.ndarray | None = None, x: np.ndarray | None = None,
                               kv_comm: Communicator | None = None, *,
                               comm: Communicator | None = None
                               ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """One rank: dL/dz (s, b, d) -> its PARTIAL dL/dx and its weight-gradient shards.

    ``x``: the projection input when the caller did not keep it (sequence parallelism
    re-gathers it); ``mask``: the recomputed dropout mask (``recompute_core``). ``kv_comm``: with
    KV replication, the communicator among the ranks holding the same KV head; their K/V weight
    gradients are all-reduced there (tags ``kv_replica.wk``, ``kv_replica.wv``)."""
    s, b = dz.shape[:2]
    p = shard.dropout_p
    x = saved["qkv_input"] if x is None else x
    q, k, v, o = saved["q"], saved["k"], saved["v"], saved["attn_proj_input"]
    if shard.recompute_core:
        _, probs, dropped = attention_core_forward(q, k, v, shard.kv_index, shard.causal, mask, p)
    else:
        probs = saved["softmax_output"]
        mask = saved.get("softmax_dropout_mask")
        dropped = saved.get("softmax_dropout_output", probs)
    do, dwo = linear_backward(o, shard.wo, dz)
    dq, dk, dv = attention_core_backward(do.reshape(q.shape), q, k, v, shard.kv_index, probs,
                                         dropped, mask, p)
    dx, dwq = linear_backward(x, shard.wq, dq.reshape(s, b, -1))
    dxk, dwk = linear_backward(x, shard.wk, dk.reshape(s, b, -1))
    dxv, dwv = linear_backward(x, shard.wv, dv.reshape(s, b, -1))
    if kv_comm is not None:
        dwk = kv_comm.all_reduce(dwk, tag="kv_replica.wk")
        dwv = kv_comm.all_reduce(dwv, tag="kv_replica.wv")
    return dx + dxk + dxv, {"wq": dwq, "wk": dwk, "wv": dwv, "wo": dwo}


def sharded_attention_forward(x: np.ndarray, shard: AttentionRank,
                              mask: np.ndarray | None = None, *, comm: Communicator
                              ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Forward of tensor-parallel attention on one rank: f, the rank's heads, g.
    Returns ``(y, saved)``; one all-reduce (g) on ``comm``."""
    x = f_forward(x, comm)                            # f: identity
    z, saved = attention_partial_forward(x, shard, mask)
    return g_forward(z, comm), saved                  # g: ALL-REDUCE


def sharded_attention_backward(dy: np.ndarray, shard: AttentionRank, saved: dict[str, np.ndarray],
                               mask: np.ndarray | None = None,
                               kv_comm: Communicator | None = None, *, comm: Communicator
                               ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Backward on one rank: returns ``(dx, weight-gradient shards)``; one all-reduce (f)."""
    dz = g_backward(dy, comm)                         # g backward: identity
    dx, grads = attention_partial_backward(dz, shard, saved, mask, kv_comm=kv_comm)
    return f_backward(dx, comm), grads                # f backward: ALL-REDUCE


# --------------------------------------------------------------------------------------------
# the tensor-parallel version
# --------------------------------------------------------------------------------------------
class ShardedAttention:
    """Causal self-attention over ``tp`` simulated ranks, heads split, one all-reduce each way.

    Attributes:
        split: the :class:`AttentionSplit` (heads per rank, KV replicas).
        group: the :class:`~tpp.collectives.ProcessGroup` (f and g record on its ledger).
        shards: per-rank weight shards {"wq", "wk", "wv", "wo"}.
        kv_groups: with KV replication, one ProcessGroup per KV head (size = replicas) whose
            ledger records the all-reduce of the replicas' K/V weight gradients.
        saved: per rank, the tensors kept for backward (name -> array), see
            :meth:`saved_bytes`.
        grads: FULL weight gradients assembled from the shards (after backward).
        shard_grads: per-rank lists of the gradient shards.

    ``recompute_core=True`` keeps only Q, K, V and the projection input and recomputes the
    softmax (and its dropout) in backward (Korthikanti et al. 2022, selective recomputation).
    """

    def __init__(self, wq, wk, wv, wo, tp: int, n_heads: int, n_kv_heads: int | None = None, *,
                 causal: bool = True, replicate_kv: bool = False,
                 group: ProcessGroup | None = None, dropout_p: float | None = None,
                 seed: int = 0, layer: int = 0, recompute_core: bool = False) -> None:
        n_kv = n_heads if n_kv_heads is None else n_kv_heads
        self.split = attention_split(n_heads, n_kv, tp, replicate_kv)
        wq, wk, wv, wo, self.d, self.d_head = _check_weights(wq, wk, wv, wo, n_heads, n_kv)
        self.tp, self.n_heads, self.n_kv_heads = self.split.tp, n_heads, n_kv
        self.group = group = tp_group(group, self.tp)
        self.f, self.g = CopyToTP(group), ReduceFromTP(group)
        self.causal, self.dropout_p, self.seed, self.layer = causal, dropout_p, seed, layer
        self.recompute_core = recompute_core
        dh, sp_ = self.d_head, self.split

        def cols(heads: list[int]) -> np.ndarray:  # the weight columns of these heads
            return np.concatenate([np.arange(h * dh, (h + 1) * dh) for h in heads])

        self.shards = {"wq": [], "wk": [], "wv": [], "wo": []}
        self._kv_index: list[np.ndarray] = []
        group_size = n_heads // n_kv
        for r in range(self.tp):
            qh, kvh = sp_.q_heads(r), sp_.kv_heads(r)
            self.shards["wq"].append(wq[:, cols(qh)].copy())
            self.shards["wk"].append(wk[:, cols(kvh)].copy())
            self.shards["wv"].append(wv[:, cols(kvh)].copy())
            self.shards["wo"].append(wo[cols(qh), :].copy())
            self._kv_index.append(np.array(qh) // group_size - kvh[0])
        self.ranks = [AttentionRank(*(self.shards[k][r] for k in ("wq", "wk", "wv", "wo")),
                                    kv_index=self._kv_index[r], d_head=dh, causal=causal,
                                    dropout_p=dropout_p or 0.0, recompute_core=recompute_core)
                      for r in range(self.tp)]
        self.kv_groups = ([ProcessGroup(sp_.replicas, name=f"kv_head{j}") for j in range(n_kv)]
                          if sp_.replicas > 1 else [])
        self.saved: list[dict[str, np.ndarray]] = []
        self.grads: dict[str, np.ndarray] = {}
        self.shard_grads: dict[str, list[np.ndarray]] = {}
        self._meta: tuple | None = None

    # -- masks ---------------------------------------------------------------------------------
    def _masks(self, s: int, b: int) -> list[np.ndarray | None]:
        if self.dropout_p is None:
            return [None] * self.tp
        full = dropout_mask((b, self.n_heads, s, s), self.dropout_p, self.seed, "softmax",
                            self.layer)
        q = self.split.q_heads_per_rank
        return [full[:, r * q:(r + 1) * q].copy() for r in range(self.tp)]

    def _kv_comms(self) -> list[Communicator | None]:
        """Per rank: its communicator among the replicas of its KV head (None: no replicas)."""
        if not self.kv_groups:
            return [None] * self.tp
        R = self.split.replicas
        worlds = [SimulatedWorld(g) for g in self.kv_groups]
        return [worlds[r // R].communicator(r % R) for r in range(self.tp)]

    def _collect(self, outs: list[tuple[np.ndarray, dict]]) -> list[np.ndarray]:
        g = {key: [grads[key] for _, grads in outs] for key in ("wq", "wk", "wv", "wo")}
        self.shard_grads = g
        R = self.split.replicas
        self.grads = {
            "wq": np.concatenate(g["wq"], axis=1),
            "wk": np.concatenate(g["wk"][::R], axis=1),
            "wv": np.concatenate(g["wv"][::R], axis=1),
            "wo": np.concatenate(g["wo"], axis=0),
        }
        return [dx for dx, _ in outs]

    # -- the sharded part, without f and g (for the block's sequence-parallel operators) -------
    def forward_partial(self, xs: list[np.ndarray]) -> list[np.ndarray]:
        """Per rank: the full-sequence input x (s, b, d) -> PARTIAL output z_r (s, b, d).

        No communication (:func:`attention_partial_forward` on every rank); keeps the tensors
        needed by :meth:`backward_partial` in :attr:`saved`.
        """
        if len(xs) != self.tp:
            raise ValueError(f"forward_partial got {len(xs)} arrays for TP={self.tp}")
        s, b, _ = xs[0].shape
        masks = self._masks(s, b)
        outs = spmd(attention_partial_forward, self.tp,
                    [(x, self.ranks[r], masks[r]) for r, x in enumerate(xs)], group=self.group)
        self.saved = [keep for _, keep in outs]
        self._meta = (s, b)
        return [z for z, _ in outs]

    def backward_partial(self, dzs: list[np.ndarray], xs: list[np.ndarray] | None = None
                         ) -> list[np.ndarray]:
        """Per rank: dL/dz (s, b, d) -> PARTIAL dL/dx_r; fills ``grads`` and ``shard_grads``.

        ``xs``: the projection inputs when the caller did not keep them (sequence parallelism
        re-gathers them); by default the saved ``qkv_input``. With KV replication, the K/V
        weight gradients of the replicas of each KV head are all-reduced in :attr:`kv_groups`.
        """
        if self._meta is None:
            raise ValueError("call forward before backward")
        masks = self._masks(*self._meta) if self.recompute_core else [None] * self.tp
        xs = [None] * self.tp if xs is None else xs
        kv = self._kv_comms()
        args = [(dz, self.ranks[r], self.saved[r], masks[r], xs[r], kv[r])
                for r, dz in enumerate(dzs)]
        return self._collect(spmd(attention_partial_backward, self.tp, args, group=self.group))

    # -- with f and g --------------------------------------------------------------------------
    def forward(self, x: np.ndarray) -> np.ndarray:
        """The all-reduced output y, shape like x. Ledger: one all-reduce (g.forward)."""
        x3, squeeze = _as_sbd(x, self.d)
        s, b, _ = x3.shape
        masks = self._masks(s, b)
        outs = spmd(sharded_attention_forward, self.tp,
                    [(x3.copy(), self.ranks[r], masks[r]) for r in range(self.tp)],
                    group=self.group)
        self.saved = [keep for _, keep in outs]
        self._meta = (s, b)
        self._squeeze = squeeze
        self.outputs = [y for y, _ in outs]
        return self.outputs[0][:, 0, :] if squeeze else self.outputs[0]

    def backward(self, dy: np.ndarray) -> np.ndarray:
        """dL/dx, shape like x. Ledger: one all-reduce (f.backward)."""
        if self._meta is None:
            raise ValueError("call forward before backward")
        dy = np.asarray(dy, dtype=np.float64)
        dy3 = dy[:, None, :] if self._squeeze else dy
        s, b = self._meta
        if dy3.shape != (s, b, self.d):
            raise ValueError(f"dy has shape {dy.shape}: pass the gradient of forward's output")
        masks = self._masks(s, b) if self.recompute_core else [None] * self.tp
        kv = self._kv_comms()
        args = [(dy3.copy(), self.ranks[r], self.saved[r], masks[r], kv[r])
                for r in range(self.tp)]
        dx = self._collect(spmd(sharded_attention_backward, self.tp, args, group=self.group))[0]
        return dx[:, 0, :] if self._squeeze else dx

    # -- accounting ----------------------------------------------------------------------------
    def saved_bytes(self, rank: int = 0, act_bytes: int = 2, mask_bytes: int = 1
                    ) -> dict[str, int]:
        """Bytes of each tensor ``rank`` keeps for backward, in Korthikanti et al.'s accounting
        (``act_bytes`` per activation element, ``mask_bytes`` per dropout-mask element)."""
        if not self.saved:
            raise ValueError("call forward first: nothing is saved yet")
        return {k: v.size * (mask_bytes if k.endswith("mask") else act_bytes)
                for k, v in self.saved[rank].items()}

    def kv_replication(self, dtype: str = "bf16", tokens: int = 0) -> dict[str, int]:
        """The cost of the KV layout, in bytes of ``dtype``:

        * ``replicas``: ranks per KV head; ``kv_heads_per_rank``;
        * ``kv_weight_bytes_per_rank``: W_K and W_V bytes one rank holds;
        * ``kv_weight_bytes_extra``: bytes stored across all ranks beyond one copy;
        * ``kv_cache_bytes_per_token_per_rank`` and ``..._extra`` (K and V of one token);
        * ``kv_cache_bytes_per_rank`` for ``tokens`` cached tokens.
        """
        e = Fraction(bytes_per_element(dtype))
        kv_w = 2 * self.d * self.split.kv_heads_per_rank * self.d_head
        full_w = 2 * self.d * self.n_kv_heads * self.d_head
        per_tok = 2 * self.split.kv_heads_per_rank * self.d_head
        full_tok = 2 * self.n_kv_heads * self.d_head
        return {
            "replicas": self.split.replicas,
            "kv_heads_per_rank": self.split.kv_heads_per_rank,
            "kv_weight_bytes_per_rank": int(e * kv_w),
            "kv_weight_bytes_extra": int(e * (self.tp * kv_w - full_w)),
            "kv_cache_bytes_per_token_per_rank": int(e * per_tok),
            "kv_cache_bytes_per_token_extra": int(e * (self.tp * per_tok - full_tok)),
            "kv_cache_bytes_per_rank": int(e * per_tok * tokens),
        }
