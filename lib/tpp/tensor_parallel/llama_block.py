"""A transformer layer in any of the recipes the memory model knows: SwiGLU or GELU, flash or
eager attention, MHA or GQA, RMSNorm or LayerNorm, with or without dropout; under TP and TP + SP.

The layer (pre-norm; ``drop`` only when ``dropout_p`` is not None)::

    h   = x + drop(Attention(Norm1(x)))
    out = h + drop(MLP(Norm2(h)))        MLP = (silu(. W1) * (. W3)) W2   or   gelu(. W1) W2

Llama 2/3 is ``mlp="swiglu", attention="flash", norm="rmsnorm", dropout_p=None`` with
``n_kv_heads < n_heads``; the GPT layer of Korthikanti et al. 2022 is ``mlp="gelu",
attention="eager", norm="layernorm", dropout_p=0.1`` (then this block keeps exactly what
:class:`tpp.tensor_parallel.block.ShardedTransformerBlock` keeps).

* :class:`LlamaBlock`: the unsharded reference, built from the library's eager
  :class:`~tpp.tensor_parallel.attention.Attention` and :class:`~tpp.tensor_parallel.mlp.MLP`.
* :class:`ShardedLlamaBlock`: the same collectives as ``ShardedTransformerBlock`` (f/g, or
  all-gather / reduce-scatter under SP, with the projection inputs re-gathered in backward);
  ``attention="flash"`` runs :mod:`.flash_attention` on every rank (Q, K, V, O and the fp32
  log-sum-exp kept; the dropout mask regenerated), ``"eager"`` the sharded attention of
  :mod:`.attention` (the softmax kept, or recomputed under ``recompute="selective"``).

Every rank records the tensors it keeps for backward; :meth:`ShardedLlamaBlock.saved_bytes`
counts them (2 bytes per activation, 1 per mask element, 4 per log-sum-exp element) and the
tests compare the count with :func:`tpp.costs.memory.activation_terms_per_layer`.
"""

from __future__ import annotations

import numpy as np

from tpp.collectives import ProcessGroup, spmd

from .activations import gelu, gelu_grad, silu, silu_grad
from .attention import Attention, ShardedAttention, attention_split, init_attention_weights
from .block import RECOMPUTE, ShardedTransformerBlock
from .dropout import dropout_backward, dropout_forward, dropout_mask
from .flash_attention import flash_partial_backward, flash_partial_forward
from .layernorm import layernorm_backward, layernorm_forward
from .linear import linear_backward
from .mlp import MLP
from .rmsnorm import rmsnorm_backward, rmsnorm_forward
from .sharding import check_divisible, shard_columns, shard_rows, tp_group

__all__ = ["init_llama_block_weights", "LlamaBlock", "ShardedLlamaBlock"]

MLPS = ("swiglu", "gelu")
ATTENTIONS = ("flash", "eager")
NORMS = ("rmsnorm", "layernorm")


def init_llama_block_weights(d: int, n_heads: int, n_kv_heads: int | None = None,
                             d_ff: int | None = None, mlp: str = "swiglu",
                             norm: str = "rmsnorm", seed: int = 0) -> dict[str, np.ndarray]:
    """Random float64 weights: wq, wk, wv, wo, w1, w2 (+ w3 for SwiGLU), ln1_g, ln2_g
    (+ ln1_b, ln2_b for LayerNorm). ``d_ff`` defaults to 4d."""
    _check_choice(mlp=mlp, norm=norm)
    d_ff = 4 * d if d_ff is None else d_ff
    w = init_attention_weights(d, n_heads, n_kv_heads, seed=seed)
    rng = np.random.default_rng([seed, 2])
    w["w1"] = rng.standard_normal((d, d_ff)) / np.sqrt(d)
    w["w2"] = rng.standard_normal((d_ff, d)) / np.sqrt(d_ff)
    if mlp == "swiglu":
        w["w3"] = rng.standard_normal((d, d_ff)) / np.sqrt(d)
    for ln in ("ln1", "ln2"):
        w[f"{ln}_g"] = 1.0 + 0.1 * rng.standard_normal(d)
        if norm == "layernorm":
            w[f"{ln}_b"] = 0.1 * rng.standard_normal(d)
    return w


def _check_choice(mlp: str = "swiglu", attention: str = "flash", norm: str = "rmsnorm") -> None:
    if mlp not in MLPS:
        raise ValueError(f"mlp={mlp!r}: use 'swiglu' (Llama) or 'gelu' (GPT)")
    if attention not in ATTENTIONS:
        raise ValueError(f"attention={attention!r}: use 'flash' (no s x s kept) or 'eager'")
    if norm not in NORMS:
        raise ValueError(f"norm={norm!r}: use 'rmsnorm' (Llama) or 'layernorm' (GPT)")


def _weight_keys(mlp: str, norm: str) -> tuple[str, ...]:
    keys = ["ln1_g", "wq", "wk", "wv", "wo", "ln2_g", "w1", "w2"]
    keys += ["w3"] if mlp == "swiglu" else []
    keys += ["ln1_b", "ln2_b"] if norm == "layernorm" else []
    return tuple(keys)


def _check_weights(weights: dict, mlp: str, norm: str) -> dict[str, np.ndarray]:
    keys = _weight_keys(mlp, norm)
    missing = [k for k in keys if k not in weights]
    if missing:
        raise ValueError(f"weights lack {missing} for mlp={mlp!r}, norm={norm!r}: use "
                         "init_llama_block_weights with the same mlp and norm")
    w = {k: np.asarray(weights[k], dtype=np.float64) for k in keys}
    d = w["wq"].shape[0]
    if w["w1"].ndim != 2 or w["w1"].shape[0] != d or w["w2"].shape != w["w1"].shape[::-1]:
        raise ValueError(f"w1 must be (d, d_ff) and w2 (d_ff, d) with d={d}; got "
                         f"{w['w1'].shape} and {w['w2'].shape}")
    if mlp == "swiglu" and w["w3"].shape != w["w1"].shape:
        raise ValueError(f"w3 must have w1's shape {w['w1'].shape}, got {w['w3'].shape}")
    return w


def _check_p(p: float | None) -> float | None:
    if p is not None and not 0.0 <= p < 1.0:
        raise ValueError(f"dropout_p={p!r} must be None (no dropout, as Llama) or a float in "
                         "[0, 1) (0 keeps every element but still stores the masks)")
    return None if p is None else float(p)


class _Norms:
    """Norm1/Norm2 of the block (RMSNorm or LayerNorm) over the weights dict."""

    def _norm(self, i: int, x: np.ndarray) -> np.ndarray:
        g = self.w[f"ln{i}_g"]
        if self.norm == "rmsnorm":
            return rmsnorm_forward(x, g, self.eps)
        return layernorm_forward(x, g, self.w[f"ln{i}_b"], self.eps)

    def _norm_backward(self, i: int, x: np.ndarray, dy: np.ndarray
                       ) -> tuple[np.ndarray, list[np.ndarray]]:
        g = self.w[f"ln{i}_g"]
        if self.norm == "rmsnorm":
            dx, dg = rmsnorm_backward(x, g, dy, self.eps)
            return dx, [dg]
        dx, dg, db = layernorm_backward(x, g, dy, self.eps)
        return dx, [dg, db]

    def _norm_keys(self, i: int) -> list[str]:
        return [f"ln{i}_g"] + ([f"ln{i}_b"] if self.norm == "layernorm" else [])


class LlamaBlock(_Norms):
    """The unsharded reference layer (eager attention: flash computes the same function)."""

    def __init__(self, weights: dict, n_heads: int, n_kv_heads: int | None = None, *,
                 mlp: str = "swiglu", norm: str = "rmsnorm", dropout_p: float | None = None,
                 seed: int = 0, layer: int = 0, causal: bool = True, eps: float = 1e-5) -> None:
        _check_choice(mlp=mlp, norm=norm)
        self.mlp_kind, self.norm = mlp, norm
        self.w = _check_weights(weights, mlp, norm)
        self.p, self.seed, self.layer, self.eps = _check_p(dropout_p), seed, layer, eps
        self.d = self.w["wq"].shape[0]
        self.attn = Attention(self.w["wq"], self.w["wk"], self.w["wv"], self.w["wo"], n_heads,
                              n_kv_heads, causal=causal, dropout_p=self.p, seed=seed,
                              layer=layer)
        self.mlp = MLP(self.w["w1"], self.w["w2"], activation=mlp, w3=self.w.get("w3"))
        self.grads: dict[str, np.ndarray] = {}

    def _drop(self, x, site):
        if self.p is None:
            return x, None
        m = dropout_mask(x.shape, self.p, self.seed, site, self.layer)
        return dropout_forward(x, m, self.p), m

    def forward(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        z, m_attn = self._drop(self.attn.forward(self._norm(1, x)), "attention")
        h = x + z
        z2, m_mlp = self._drop(self.mlp.forward(self._norm(2, h)), "mlp")
        self._cache = (x, h, m_attn, m_mlp)
        return h + z2

    def backward(self, dy: np.ndarray) -> np.ndarray:
        x, h, m_attn, m_mlp = self._cache
        dy = np.asarray(dy, dtype=np.float64)
        d2 = dy if m_mlp is None else dropout_backward(dy, m_mlp, self.p)
        dh_n, g2 = self._norm_backward(2, h, self.mlp.backward(d2))
        dh = dy + dh_n
        d1 = dh if m_attn is None else dropout_backward(dh, m_attn, self.p)
        dx_n, g1 = self._norm_backward(1, x, self.attn.backward(d1))
        self.grads = {**dict(zip(self._norm_keys(1), g1, strict=True)), **self.attn.grads,
                      **dict(zip(self._norm_keys(2), g2, strict=True)), **self.mlp.grads}
        return dh + dx_n


class ShardedLlamaBlock(_Norms, ShardedTransformerBlock):
    """The layer over ``tp`` simulated ranks, with or without sequence parallelism.

    Same interface as :class:`~tpp.tensor_parallel.block.ShardedTransformerBlock` (``forward``,
    ``backward``, ``*_shards``, ``saved_tensors``, ``saved_bytes``, ``group``, ``grads``),
    plus the recipe: ``mlp``, ``attention``, ``norm``, ``dropout_p`` (None: no dropout, no
    masks). ``recompute="selective"`` recomputes the eager softmax (flash keeps none anyway);
    ``"full"`` keeps only the layer input.
    """

    def __init__(self, weights: dict, tp: int, n_heads: int, n_kv_heads: int | None = None, *,
                 mlp: str = "swiglu", attention: str = "flash", norm: str = "rmsnorm",
                 dropout_p: float | None = None, sequence_parallel: bool = False,
                 recompute: str = "none", replicate_kv: bool = False, seed: int = 0,
                 layer: int = 0, causal: bool = True, eps: float = 1e-5, regather: bool = True,
                 group: ProcessGroup | None = None) -> None:
        _check_choice(mlp, attention, norm)
        self.mlp_kind, self.attention, self.norm = mlp, attention, norm
        self.w = _check_weights(weights, mlp, norm)
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
            layer=layer, recompute_core=(recompute == "selective" and attention == "eager"))
        self.w1_shards = shard_columns(self.w["w1"], tp, name="d_ff")
        self.w3_shards = (shard_columns(self.w["w3"], tp, name="d_ff") if mlp == "swiglu"
                          else None)
        self.w2_shards = shard_rows(self.w["w2"], tp, name="d_ff")
        self.saved: list[dict[str, np.ndarray]] = []
        self.grads: dict[str, np.ndarray] = {}
        self.shard_grads: dict[str, list[np.ndarray]] = {}
        self._state: list[dict] | None = None

    # -- dropout -------------------------------------------------------------------------------
    def _masks(self, site: str, shape: tuple[int, ...]) -> list[np.ndarray | None]:
        if self.p is None:
            return [None] * self.tp
        return ShardedTransformerBlock._masks(self, site, shape)

    def _drop(self, x, m):
        return x if m is None else dropout_forward(x, m, self.p)

    def _drop_backward(self, dy, m):
        return dy if m is None else dropout_backward(dy, m, self.p)

    # -- attention (flash or eager), without f and g ---------------------------------------------
    def _attn_forward(self, xs: list[np.ndarray]) -> list[np.ndarray]:
        if self.attention == "eager":
            return self.attn.forward_partial(xs)
        s, b, _ = xs[0].shape
        masks = self.attn._masks(s, b)
        outs = spmd(flash_partial_forward, self.tp,
                    [(x, self.attn.ranks[r], masks[r]) for r, x in enumerate(xs)],
                    group=self.group)
        self.attn.saved = [keep for _, keep in outs]
        self.attn._meta = (s, b)
        return [z for z, _ in outs]

    def _attn_backward(self, dzs: list[np.ndarray], xs: list[np.ndarray] | None
                       ) -> list[np.ndarray]:
        if self.attention == "eager":
            return self.attn.backward_partial(dzs, xs)
        masks = self.attn._masks(*self.attn._meta)   # regenerated, never stored
        xs = [None] * self.tp if xs is None else xs
        kv = self.attn._kv_comms()
        args = [(dz, self.attn.ranks[r], self.attn.saved[r], masks[r], xs[r], kv[r])
                for r, dz in enumerate(dzs)]
        return self.attn._collect(spmd(flash_partial_backward, self.tp, args, group=self.group))

    # -- forward -------------------------------------------------------------------------------
    def _forward(self, xs: list[np.ndarray], keep_gathered: bool = False
                 ) -> tuple[list[np.ndarray], list[dict]]:
        t = self.tp
        s_full = xs[0].shape[0] * (t if self.sp else 1)
        full_shape = (s_full,) + xs[0].shape[1:]
        m_attn, m_mlp = self._masks("attention", full_shape), self._masks("mlp", full_shape)
        a = [self._norm(1, x) for x in xs]
        z = self._leave(self._attn_forward(self._enter(a)))
        h = [x + self._drop(zr, m) for x, zr, m in zip(xs, z, m_attn, strict=True)]
        c = [self._norm(2, hr) for hr in h]
        c_full = self._enter(c)
        h1 = [cr @ w1 for cr, w1 in zip(c_full, self.w1_shards, strict=True)]
        if self.mlp_kind == "swiglu":
            h3 = [cr @ w3 for cr, w3 in zip(c_full, self.w3_shards, strict=True)]
            g = [silu(u) * v for u, v in zip(h1, h3, strict=True)]
        else:
            g = [gelu(u) for u in h1]
        z2 = self._leave([gr @ w2 for gr, w2 in zip(g, self.w2_shards, strict=True)])
        out = [hr + self._drop(zr, m) for hr, zr, m in zip(h, z2, m_mlp, strict=True)]
        keep_gathered = keep_gathered or not self.sp or not self.regather
        state = []
        for r in range(t):
            st = {"ln1_input": xs[r], "ln2_input": h[r],
                  "fc1_input": c_full[r] if keep_gathered else c[r], "fc2_input": g[r]}
            if self.mlp_kind == "swiglu":
                st.update(gate_input=h1[r], up_output=h3[r])
            else:
                st["gelu_input"] = h1[r]
            if self.p is not None:
                st.update(attn_dropout_mask=m_attn[r], mlp_dropout_mask=m_mlp[r])
            if not keep_gathered:  # SP: keep only this rank's shard of the projection input
                self.attn.saved[r]["qkv_input"] = a[r]
            state.append(st)
        return out, state

    # -- backward ------------------------------------------------------------------------------
    def backward_shards(self, dys: list[np.ndarray]) -> list[np.ndarray]:
        """Per-rank output gradients -> per-rank input gradients; fills ``grads``."""
        if self._state is None:
            raise ValueError("call forward before backward")
        t = self.tp
        if self.recompute == "full":  # the forward again, with its collectives
            _, state = self._forward(self._xs, keep_gathered=True)
        else:
            state = self._state
        sp_shards = self.sp and self.regather and self.recompute != "full"
        dz2 = self._leave_backward([self._drop_backward(dy, st.get("mlp_dropout_mask"))
                                    for dy, st in zip(dys, state, strict=True)])
        c_full = [st["fc1_input"] for st in state]
        if sp_shards:
            c_full = self.group.all_gather(c_full, axis=0, tag="sp.regather")
        dw1, dw2, dw3, dc = [], [], [], []
        for r in range(t):
            st = state[r]
            dg, dw = linear_backward(st["fc2_input"], self.w2_shards[r], dz2[r])
            dw2.append(dw)
            if self.mlp_kind == "swiglu":
                u, v = st["gate_input"], st["up_output"]
                dcr, dw = linear_backward(c_full[r], self.w1_shards[r], dg * v * silu_grad(u))
                dc3, dw_3 = linear_backward(c_full[r], self.w3_shards[r], dg * silu(u))
                dcr = dcr + dc3
                dw3.append(dw_3)
            else:
                dcr, dw = linear_backward(c_full[r], self.w1_shards[r],
                                          dg * gelu_grad(st["gelu_input"]))
            dw1.append(dw)
            dc.append(dcr)
        dc = self._enter_backward(dc)
        dh, n2 = [], []
        for r in range(t):
            dln, grads = self._norm_backward(2, state[r]["ln2_input"], dc[r])
            dh.append(dys[r] + dln)
            n2.append(grads)
        dz = self._leave_backward([self._drop_backward(dhr, st.get("attn_dropout_mask"))
                                   for dhr, st in zip(dh, state, strict=True)])
        a_full = None
        if sp_shards:
            a_full = self.group.all_gather([sv["qkv_input"] for sv in self.attn.saved], axis=0,
                                           tag="sp.regather")
        da = self._enter_backward(self._attn_backward(dz, a_full))
        dxs, n1 = [], []
        for r in range(t):
            x = state[r].get("ln1_input", self._xs[r])
            dln, grads = self._norm_backward(1, x, da[r])
            dxs.append(dh[r] + dln)
            n1.append(grads)
        ln = [np.concatenate(n1[r] + n2[r]) for r in range(t)]
        if self.sp:  # each rank saw only its slice of the tokens: sum the partial norm grads
            ln = self.group.all_reduce(ln, tag="sp.layernorm_grads")
        keys, d = self._norm_keys(1) + self._norm_keys(2), self.d
        norm_grads = {k: ln[0][i * d:(i + 1) * d] for i, k in enumerate(keys)}
        self.shard_grads = {"w1": dw1, "w2": dw2} | ({"w3": dw3} if dw3 else {})
        self.grads = {**norm_grads, **self.attn.grads, "w1": np.concatenate(dw1, axis=1),
                      "w2": np.concatenate(dw2, axis=0)}
        if dw3:
            self.grads["w3"] = np.concatenate(dw3, axis=1)
        return dxs

    # -- accounting ----------------------------------------------------------------------------
    def saved_bytes(self, rank: int = 0, act_bytes: int = 2, mask_bytes: int = 1,
                    lse_bytes: int = 4) -> dict[str, int]:
        """Bytes of each kept tensor: ``act_bytes`` per activation, ``mask_bytes`` per dropout
        mask element, ``lse_bytes`` per log-sum-exp element (fp32 in FlashAttention)."""
        def size(k: str) -> int:
            if k.endswith("mask"):
                return mask_bytes
            return lse_bytes if k == "softmax_lse" else act_bytes
        return {k: v.size * size(k) for k, v in self.saved_tensors(rank).items()}

