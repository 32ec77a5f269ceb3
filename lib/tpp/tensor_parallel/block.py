"""A transformer layer under TP and under TP + sequence parallelism, with explicit backward.

The layer of Korthikanti et al. 2022 (Sec. 4.1, Fig. 4), pre-LayerNorm GPT style::

    h   = x + dropout(Attention(LN1(x)))
    out = h + dropout(MLP(LN2(h)))          MLP = GELU(. W1) W2

* :class:`TransformerBlock`: the unsharded reference (``Attention`` + core-lib ``MLP``).
* :class:`ShardedTransformerBlock` with ``sequence_parallel=False`` (Megatron TP): LN, dropout
  and residual are replicated on every rank; f / g all-reduces around attention and MLP.
* ``sequence_parallel=True`` (Korthikanti Sec. 4.2.2): LN, dropout and residual work on the
  rank's ``s/t`` slice of the sequence; an all-gather enters each TP region and a
  reduce-scatter leaves it (:mod:`.sequence`). The projections' inputs are kept as sequence
  shards and all-gathered again in backward (ledger tag ``"sp.regather"``;
  ``regather=False`` keeps the gathered tensors instead). LayerNorm weight gradients are
  partial sums over the shards and are all-reduced (tag ``"sp.layernorm_grads"``).

Every rank records the tensors it keeps for backward in :attr:`ShardedTransformerBlock.saved`;
:meth:`~ShardedTransformerBlock.saved_bytes` counts them in the paper's accounting (2 bytes per
activation, 1 byte per dropout-mask element), which the tests compare with
:func:`tpp.costs.memory.activation_terms_per_layer` and Korthikanti's closed forms.
``recompute``: "none"; "selective" (the softmax, its mask and output are recomputed);
"full" (only the layer input is kept; the forward, with its collectives, runs again in backward).
"""

from __future__ import annotations

import numpy as np

from tpp.collectives import ProcessGroup

from .activations import gelu, gelu_grad
from .attention import Attention, ShardedAttention, attention_split, init_attention_weights
from .dropout import dropout_backward, dropout_forward, dropout_mask
from .layernorm import layernorm_backward, layernorm_forward
from .linear import linear_backward
from .mlp import MLP
from .operators import copy_to_tp_region_backward, reduce_from_tp_region
from .sequence import (
    gather_from_sequence_parallel_region,
    gather_from_sequence_parallel_region_backward,
    reduce_scatter_to_sequence_parallel_region,
    reduce_scatter_to_sequence_parallel_region_backward,
    split_sequence,
)
from .sharding import check_divisible, shard_columns, shard_rows, tp_group

__all__ = ["WEIGHT_KEYS", "init_block_weights", "TransformerBlock", "ShardedTransformerBlock"]

WEIGHT_KEYS = ("ln1_g", "ln1_b", "wq", "wk", "wv", "wo", "ln2_g", "ln2_b", "w1", "w2")
RECOMPUTE = ("none", "selective", "full")


def init_block_weights(d: int, n_heads: int, n_kv_heads: int | None = None,
                       d_ff: int | None = None, seed: int = 0) -> dict[str, np.ndarray]:
    """Random float64 weights of one layer (``d_ff`` defaults to 4d, as in the paper)."""
    d_ff = 4 * d if d_ff is None else d_ff
    w = init_attention_weights(d, n_heads, n_kv_heads, seed=seed)
    rng = np.random.default_rng([seed, 1])
    w["w1"] = rng.standard_normal((d, d_ff)) / np.sqrt(d)
    w["w2"] = rng.standard_normal((d_ff, d)) / np.sqrt(d_ff)
    for ln in ("ln1", "ln2"):
        w[f"{ln}_g"] = 1.0 + 0.1 * rng.standard_normal(d)
        w[f"{ln}_b"] = 0.1 * rng.standard_normal(d)
    return w


def _check_block_weights(weights: dict) -> dict[str, np.ndarray]:
    missing = [k for k in WEIGHT_KEYS if k not in weights]
    if missing:
        raise ValueError(f"weights lack {missing}: pass a dict with keys {list(WEIGHT_KEYS)} "
                         "(see init_block_weights)")
    w = {k: np.asarray(weights[k], dtype=np.float64) for k in WEIGHT_KEYS}
    d = w["wq"].shape[0]
    if w["w1"].ndim != 2 or w["w1"].shape[0] != d or w["w2"].shape != w["w1"].shape[::-1]:
        raise ValueError(f"w1 must be (d, d_ff) and w2 (d_ff, d) with d={d}; got "
                         f"{w['w1'].shape} and {w['w2'].shape}")
    for k in ("ln1_g", "ln1_b", "ln2_g", "ln2_b"):
        if w[k].shape != (d,):
            raise ValueError(f"{k} must have shape ({d},), got {w[k].shape}")
    return w


def _check_p(p: float) -> float:
    if p is None or not 0.0 <= p < 1.0:
        raise ValueError(f"dropout_p={p!r} must be a float in [0, 1) (0 keeps every element "
                         "but still stores the masks the paper counts)")
    return float(p)


def _as_sbd(x: np.ndarray, d: int) -> tuple[np.ndarray, bool]:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim not in (2, 3) or x.shape[-1] != d:
        raise ValueError(f"x has shape {x.shape}: pass (s, {d}) or (s, b, {d}) (sequence first)")
    return (x[:, None, :], True) if x.ndim == 2 else (x, False)


class TransformerBlock:
    """The unsharded reference layer: ``forward``, ``backward`` and full ``grads``."""

    def __init__(self, weights: dict, n_heads: int, n_kv_heads: int | None = None, *,
                 dropout_p: float = 0.1, seed: int = 0, layer: int = 0, causal: bool = True,
                 eps: float = 1e-5) -> None:
        self.w = _check_block_weights(weights)
        self.p, self.seed, self.layer, self.eps = _check_p(dropout_p), seed, layer, eps
        self.d = self.w["wq"].shape[0]
        self.attn = Attention(self.w["wq"], self.w["wk"], self.w["wv"], self.w["wo"], n_heads,
                              n_kv_heads, causal=causal, dropout_p=self.p, seed=seed,
                              layer=layer)
        self.mlp = MLP(self.w["w1"], self.w["w2"], activation="gelu")
        self.grads: dict[str, np.ndarray] = {}
        self._cache: tuple | None = None

    def forward(self, x: np.ndarray) -> np.ndarray:
        x3, squeeze = _as_sbd(x, self.d)
        m_attn = dropout_mask(x3.shape, self.p, self.seed, "attention", self.layer)
        m_mlp = dropout_mask(x3.shape, self.p, self.seed, "mlp", self.layer)
        a = layernorm_forward(x3, self.w["ln1_g"], self.w["ln1_b"], self.eps)
        h = x3 + dropout_forward(self.attn.forward(a), m_attn, self.p)
        c = layernorm_forward(h, self.w["ln2_g"], self.w["ln2_b"], self.eps)
        out = h + dropout_forward(self.mlp.forward(c), m_mlp, self.p)
        self._cache = (x3, h, m_attn, m_mlp, squeeze)
        return out[:, 0, :] if squeeze else out

    def backward(self, dy: np.ndarray) -> np.ndarray:
        if self._cache is None:
            raise ValueError("call forward before backward")
        x3, h, m_attn, m_mlp, squeeze = self._cache
        dy = np.asarray(dy, dtype=np.float64)
        dy = dy[:, None, :] if squeeze else dy
        if dy.shape != x3.shape:
            raise ValueError(f"dy has shape {dy.shape}: pass the gradient of forward's output")
        dc = self.mlp.backward(dropout_backward(dy, m_mlp, self.p))
        dh_ln, g2, b2 = layernorm_backward(h, self.w["ln2_g"], dc, self.eps)
        dh = dy + dh_ln
        da = self.attn.backward(dropout_backward(dh, m_attn, self.p))
        dx_ln, g1, b1 = layernorm_backward(x3, self.w["ln1_g"], da, self.eps)
        dx = dh + dx_ln
        self.grads = {"ln1_g": g1, "ln1_b": b1, **self.attn.grads, "ln2_g": g2, "ln2_b": b2,
                      "w1": self.mlp.grads["w1"], "w2": self.mlp.grads["w2"]}
        return dx[:, 0, :] if squeeze else dx


class ShardedTransformerBlock:
    """The layer over ``tp`` simulated ranks, with or without sequence parallelism.

    ``forward(x)`` takes the full input (s, b, d) or (s, d) and returns the full output
    (under SP, the input is split along the sequence and the output shards are concatenated
    only for the caller's convenience: no collective, no ledger entry). ``forward_shards`` /
    ``backward_shards`` work on the per-rank lists a real model would pass between layers.

    Attributes: ``group`` (ledger), ``attn`` (:class:`ShardedAttention`), ``saved`` (per rank,
    name -> kept array), ``grads`` (full gradients), ``shard_grads`` ("w1", "w2").
    """

    def __init__(self, weights: dict, tp: int, n_heads: int, n_kv_heads: int | None = None, *,
                 sequence_parallel: bool = False, recompute: str = "none",
                 replicate_kv: bool = False, dropout_p: float = 0.1, seed: int = 0,
                 layer: int = 0, causal: bool = True, eps: float = 1e-5,
                 regather: bool = True, group: ProcessGroup | None = None) -> None:
        self.w = _check_block_weights(weights)
        if recompute not in RECOMPUTE:
            raise ValueError(f"recompute={recompute!r}: use one of {', '.join(RECOMPUTE)}")
        n_kv = n_heads if n_kv_heads is None else n_kv_heads
        attention_split(n_heads, n_kv, tp, replicate_kv)
        self.d, self.d_ff = self.w["w1"].shape
        check_divisible(self.d_ff, tp, "d_ff")
        self.tp, self.sp, self.recompute, self.regather = tp, sequence_parallel, recompute, regather
        self.p, self.seed, self.layer, self.eps = _check_p(dropout_p), seed, layer, eps
        self.group = tp_group(group, tp, sequence_parallel)
        self.attn = ShardedAttention(
            self.w["wq"], self.w["wk"], self.w["wv"], self.w["wo"], tp, n_heads, n_kv,
            causal=causal, replicate_kv=replicate_kv, group=group, dropout_p=self.p, seed=seed,
            layer=layer, recompute_core=(recompute == "selective"))
        self.w1_shards = shard_columns(self.w["w1"], tp, name="d_ff")
        self.w2_shards = shard_rows(self.w["w2"], tp, name="d_ff")
        self.saved: list[dict[str, np.ndarray]] = []
        self.grads: dict[str, np.ndarray] = {}
        self.shard_grads: dict[str, list[np.ndarray]] = {}
        self._state: list[dict] | None = None

    # -- collectives at the TP-region boundaries --------------------------------------------
    def _enter(self, xs):   # replicated (TP) or sequence shards (SP) -> full sequence per rank
        return gather_from_sequence_parallel_region(xs, self.group) if self.sp else xs

    def _enter_backward(self, dxs):
        if self.sp:
            return gather_from_sequence_parallel_region_backward(dxs, self.group)
        return copy_to_tp_region_backward(dxs, self.group)

    def _leave(self, zs):
        if self.sp:
            return reduce_scatter_to_sequence_parallel_region(zs, self.group)
        return reduce_from_tp_region(zs, self.group)

    def _leave_backward(self, dys):
        if self.sp:
            return reduce_scatter_to_sequence_parallel_region_backward(dys, self.group)
        return [dy.copy() for dy in dys]  # g backward: identity

    def _masks(self, site: str, shape: tuple[int, ...]) -> list[np.ndarray]:
        full = dropout_mask(shape, self.p, self.seed, site, self.layer)
        return split_sequence(full, self.tp) if self.sp else [full] * self.tp

    # -- forward -------------------------------------------------------------------------------
    def _forward(self, xs: list[np.ndarray], keep_gathered: bool = False
                 ) -> tuple[list[np.ndarray], list[dict]]:
        w, t = self.w, self.tp
        s_full = xs[0].shape[0] * (t if self.sp else 1)
        full_shape = (s_full,) + xs[0].shape[1:]
        m_attn, m_mlp = self._masks("attention", full_shape), self._masks("mlp", full_shape)
        a = [layernorm_forward(x, w["ln1_g"], w["ln1_b"], self.eps) for x in xs]
        a_full = self._enter(a)
        z = self._leave(self.attn.forward_partial(a_full))
        h = [x + dropout_forward(zr, m, self.p) for x, zr, m in zip(xs, z, m_attn, strict=True)]
        c = [layernorm_forward(hr, w["ln2_g"], w["ln2_b"], self.eps) for hr in h]
        c_full = self._enter(c)
        h1 = [cr @ w1 for cr, w1 in zip(c_full, self.w1_shards, strict=True)]
        g1 = [gelu(u) for u in h1]
        z2 = self._leave([gr @ w2 for gr, w2 in zip(g1, self.w2_shards, strict=True)])
        out = [hr + dropout_forward(zr, m, self.p) for hr, zr, m in zip(h, z2, m_mlp, strict=True)]
        keep_gathered = keep_gathered or not self.sp or not self.regather
        state = []
        for r in range(t):
            st = {"ln1_input": xs[r], "attn_dropout_mask": m_attn[r], "ln2_input": h[r],
                  "fc1_input": c_full[r] if keep_gathered else c[r],
                  "gelu_input": h1[r], "fc2_input": g1[r], "mlp_dropout_mask": m_mlp[r]}
            if not keep_gathered:  # SP: keep only this rank's shard of the projection input
                self.attn.saved[r]["qkv_input"] = a[r]
            state.append(st)
        return out, state

    def forward_shards(self, xs: list[np.ndarray]) -> list[np.ndarray]:
        """Per-rank inputs (full sequence under TP, the rank's slice under SP) -> outputs."""
        if len(xs) != self.tp:
            raise ValueError(f"forward_shards got {len(xs)} arrays for TP={self.tp}")
        xs = [np.asarray(x, dtype=np.float64) for x in xs]
        out, state = self._forward(xs)
        if self.recompute == "full":
            self._state = [{"layer_input": x} for x in xs]
            self.attn.saved = []
        else:
            self._state = state
        self._xs = xs
        return out

    def forward(self, x: np.ndarray) -> np.ndarray:
        """Full input -> full output (see the class docstring)."""
        x3, squeeze = _as_sbd(x, self.d)
        xs = split_sequence(x3, self.tp) if self.sp else [x3.copy() for _ in range(self.tp)]
        outs = self.forward_shards(xs)
        self._squeeze = squeeze
        y = np.concatenate(outs, axis=0) if self.sp else outs[0]
        return y[:, 0, :] if squeeze else y

    # -- backward ------------------------------------------------------------------------------
    def backward_shards(self, dys: list[np.ndarray]) -> list[np.ndarray]:
        """Per-rank output gradients -> per-rank input gradients; fills ``grads``."""
        if self._state is None:
            raise ValueError("call forward before backward")
        w, t = self.w, self.tp
        if self.recompute == "full":  # run the forward again (with its collectives), keeping
            _, state = self._forward(self._xs, keep_gathered=True)  # the gathered inputs
        else:
            state = self._state
        sp_shards = self.sp and self.regather and self.recompute != "full"
        # MLP
        dz2 = [dropout_backward(dy, st["mlp_dropout_mask"], self.p)
               for dy, st in zip(dys, state, strict=True)]
        dz2 = self._leave_backward(dz2)
        dw2, dh1 = [], []
        for r in range(t):
            dg, dw = linear_backward(state[r]["fc2_input"], self.w2_shards[r], dz2[r])
            dw2.append(dw)
            dh1.append(dg * gelu_grad(state[r]["gelu_input"]))
        c_full = [st["fc1_input"] for st in state]
        if sp_shards:
            c_full = self.group.all_gather(c_full, axis=0, tag="sp.regather")
        dw1, dc = [], []
        for r in range(t):
            dcr, dw = linear_backward(c_full[r], self.w1_shards[r], dh1[r])
            dw1.append(dw)
            dc.append(dcr)
        dc = self._enter_backward(dc)
        dh, g2, b2 = [], [], []
        for r in range(t):
            dln, dg, db = layernorm_backward(state[r]["ln2_input"], w["ln2_g"], dc[r], self.eps)
            dh.append(dys[r] + dln)
            g2.append(dg)
            b2.append(db)
        # attention
        dz = [dropout_backward(dhr, st["attn_dropout_mask"], self.p)
              for dhr, st in zip(dh, state, strict=True)]
        dz = self._leave_backward(dz)
        a_full = None
        if sp_shards:
            a_full = self.group.all_gather([sv["qkv_input"] for sv in self.attn.saved], axis=0,
                                           tag="sp.regather")
        da = self._enter_backward(self.attn.backward_partial(dz, a_full))
        dxs, g1, b1 = [], [], []
        for r in range(t):
            x = state[r].get("ln1_input", self._xs[r])
            dln, dg, db = layernorm_backward(x, w["ln1_g"], da[r], self.eps)
            dxs.append(dh[r] + dln)
            g1.append(dg)
            b1.append(db)
        ln = [np.concatenate([g1[r], b1[r], g2[r], b2[r]]) for r in range(t)]
        if self.sp:  # each rank saw only its slice of the tokens: sum the partial LN grads
            ln = self.group.all_reduce(ln, tag="sp.layernorm_grads")
        d = self.d
        self.shard_grads = {"w1": dw1, "w2": dw2}
        self.grads = {"ln1_g": ln[0][:d], "ln1_b": ln[0][d:2 * d], **self.attn.grads,
                      "ln2_g": ln[0][2 * d:3 * d], "ln2_b": ln[0][3 * d:],
                      "w1": np.concatenate(dw1, axis=1), "w2": np.concatenate(dw2, axis=0)}
        return dxs

    def backward(self, dy: np.ndarray) -> np.ndarray:
        """Full output gradient -> full input gradient (split / concatenated as in forward)."""
        if self._state is None:
            raise ValueError("call forward before backward")
        dy = np.asarray(dy, dtype=np.float64)
        dy3 = dy[:, None, :] if self._squeeze else dy
        dys = split_sequence(dy3, self.tp) if self.sp else [dy3.copy() for _ in range(self.tp)]
        dxs = self.backward_shards(dys)
        dx = np.concatenate(dxs, axis=0) if self.sp else dxs[0]
        return dx[:, 0, :] if self._squeeze else dx

    # -- accounting ----------------------------------------------------------------------------
    def saved_tensors(self, rank: int = 0) -> dict[str, np.ndarray]:
        """The arrays ``rank`` keeps for backward after forward (the block's and attention's)."""
        if self._state is None:
            raise ValueError("call forward first: nothing is saved yet")
        out = dict(self._state[rank])
        if self.attn.saved:
            out.update(self.attn.saved[rank])
        return out

    def saved_bytes(self, rank: int = 0, act_bytes: int = 2, mask_bytes: int = 1
                    ) -> dict[str, int]:
        """Bytes of each kept tensor in Korthikanti et al.'s accounting (2-byte activations,
        1-byte dropout masks); compare with :func:`tpp.costs.memory.activation_terms_per_layer`.
        """
        return {k: v.size * (mask_bytes if k.endswith("mask") else act_bytes)
                for k, v in self.saved_tensors(rank).items()}
