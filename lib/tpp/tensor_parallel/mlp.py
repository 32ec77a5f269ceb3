"""The transformer MLP, unsharded (:class:`MLP`) and tensor-parallel (:class:`ShardedMLP`).

Row vectors; x has shape (..., d); W1, W3: (d, d_ff); W2: (d_ff, d).

* GELU MLP:   ``y = gelu(x W1) W2``
* SwiGLU MLP: ``y = (silu(x W1) * (x W3)) W2``   (Shazeer 2020, eq. for FFN_SwiGLU)

Tensor-parallel version over T ranks (Shoeybi et al. 2019, section 3, Fig. 3a): W1 and W3
column-sharded, W2 row-sharded, so rank r computes its d_ff/T slice of the hidden activation
with no communication and a partial output z_r; one all-reduce sums them::

    forward:  x -f-> x (every rank) -> h_r = x W1_r [, x W3_r] -> a_r = act(h_r)
              -> z_r = a_r W2_r -g-> y = sum_r z_r          (g: ONE all-reduce)
    backward: dy -g^T-> dy (every rank, identity) -> dW2_r = a_r^T dy, da_r = dy W2_r^T
              -> dh_r = da_r * act'(h_r) -> dW1_r = x^T dh_r, dx_r = dh_r W1_r^T [+ ...]
              -f^T-> dx = sum_r dx_r                        (f: ONE all-reduce)
"""

from __future__ import annotations

import numpy as np

from tpp.collectives import ProcessGroup

from .activations import gelu, gelu_grad, silu, silu_grad
from .linear import ColumnParallelLinear, RowParallelLinear, linear_backward
from .operators import CopyToTP, ReduceFromTP
from .sharding import check_divisible, check_tp

__all__ = ["ACTIVATIONS", "MLP", "ShardedMLP"]

ACTIVATIONS = ("gelu", "swiglu")


def _check_weights(w1, w2, activation, w3):
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}: use 'gelu' or 'swiglu'")
    w1 = np.asarray(w1, dtype=np.float64)
    w2 = np.asarray(w2, dtype=np.float64)
    if w1.ndim != 2:
        raise ValueError(f"W1 must be 2-d (d, d_ff), got shape {w1.shape}")
    if w2.ndim != 2:
        raise ValueError(f"W2 must be 2-d (d_ff, d), got shape {w2.shape}")
    d, d_ff = w1.shape
    if w2.shape != (d_ff, d):
        raise ValueError(
            f"W2 has shape {w2.shape} but W1 has shape {w1.shape}: W2 must be (d_ff, d) = "
            f"({d_ff}, {d})"
        )
    if activation == "swiglu":
        if w3 is None:
            raise ValueError(
                "activation='swiglu' needs the gate weight w3 (d, d_ff): pass w3=..., or use "
                "activation='gelu'"
            )
        w3 = np.asarray(w3, dtype=np.float64)
        if w3.shape != w1.shape:
            raise ValueError(
                f"W3 has shape {w3.shape} but W1 has shape {w1.shape}: W3 must be (d, d_ff) = "
                f"({d}, {d_ff})"
            )
    elif w3 is not None:
        raise ValueError(
            "w3 is only used by activation='swiglu': drop w3 or set activation='swiglu'"
        )
    return w1, w2, w3, d, d_ff


def _check_x(x, d: int) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim < 1 or x.shape[-1] != d:
        raise ValueError(f"x has shape {x.shape} but the model width is d={d}: pass x of shape "
                         f"(n_tokens, {d})")
    return x


class MLP:
    """Unsharded reference MLP with explicit forward/backward; same interface as ShardedMLP."""

    def __init__(self, w1, w2, activation: str = "gelu", w3=None) -> None:
        self.w1, self.w2, self.w3, self.d, self.d_ff = _check_weights(w1, w2, activation, w3)
        self.activation = activation
        self.grads: dict[str, np.ndarray] = {}
        self._cache: tuple | None = None

    def forward(self, x: np.ndarray) -> np.ndarray:
        """``y = act(x W1 [, x W3]) W2``, shape like x."""
        x = _check_x(x, self.d)
        h1 = x @ self.w1
        if self.activation == "swiglu":
            h3 = x @ self.w3
            a = silu(h1) * h3
        else:
            h3 = None
            a = gelu(h1)
        self._cache = (x, h1, h3, a)
        return a @ self.w2

    def backward(self, dy: np.ndarray) -> np.ndarray:
        """Returns dL/dx given dy = dL/dy; fills :attr:`grads` ("w1", "w2"[, "w3"])."""
        if self._cache is None:
            raise ValueError("call forward before backward")
        x, h1, h3, a = self._cache
        dy = np.asarray(dy, dtype=np.float64)
        if dy.shape != x.shape:
            raise ValueError(f"dy has shape {dy.shape} but y has shape {x.shape}: pass dL/dy")
        da, dw2 = linear_backward(a, self.w2, dy)
        self.grads = {"w2": dw2}
        if self.activation == "swiglu":
            dh1 = da * h3 * silu_grad(h1)
            dh3 = da * silu(h1)
            dx, self.grads["w1"] = linear_backward(x, self.w1, dh1)
            dx3, self.grads["w3"] = linear_backward(x, self.w3, dh3)
            dx = dx + dx3
        else:
            dh1 = da * gelu_grad(h1)
            dx, self.grads["w1"] = linear_backward(x, self.w1, dh1)
        return dx


class ShardedMLP:
    """Tensor-parallel MLP over ``tp`` simulated ranks: W1 (and W3) column-parallel, W2
    row-parallel, f before the first matmul and g after the last (one all-reduce each way).

    Attributes:
        group: the :class:`~tpp.collectives.ProcessGroup` (its ledger lists the collectives).
        fc1, fc3: :class:`ColumnParallelLinear` for W1 and W3 (fc3 is None for GELU).
        fc2: :class:`RowParallelLinear` for W2.
        grads: FULL gradients assembled from the shards ("w1", "w2"[, "w3"]), after backward.
        shard_grads: per-rank lists of gradient shards, same keys.
    """

    def __init__(self, w1, w2, tp: int, activation: str = "gelu", w3=None,
                 group: ProcessGroup | None = None) -> None:
        tp = check_tp(tp)
        w1, w2, w3, d, d_ff = _check_weights(w1, w2, activation, w3)
        check_divisible(d_ff, tp, "d_ff")
        if group is None:
            group = ProcessGroup(tp, name=f"tp{tp}")
        elif group.size != tp:
            raise ValueError(
                f"group has size {group.size} but TP={tp}: pass a ProcessGroup of size {tp}"
            )
        self.tp, self.d, self.d_ff, self.activation = tp, d, d_ff, activation
        self.group = group
        self.f = CopyToTP(group)
        self.g = ReduceFromTP(group)
        self.fc1 = ColumnParallelLinear(w1, tp, name="d_ff", weight_name="W1")
        self.fc3 = (ColumnParallelLinear(w3, tp, name="d_ff", weight_name="W3")
                    if activation == "swiglu" else None)
        self.fc2 = RowParallelLinear(w2, tp, name="d_ff", weight_name="W2")
        self.grads: dict[str, np.ndarray] = {}
        self.shard_grads: dict[str, list[np.ndarray]] = {}
        self._cache: tuple | None = None

    def forward(self, x: np.ndarray) -> np.ndarray:
        """The all-reduced output y (shape like x). One all-reduce (g) on the ledger."""
        x = _check_x(x, self.d)
        xs = self.f.forward(x)                      # f: identity, x on every rank
        h1 = self.fc1.forward(xs)                   # local, (.., d_ff/T)
        if self.fc3 is not None:
            h3 = self.fc3.forward(xs)
            a = [silu(u) * v for u, v in zip(h1, h3, strict=True)]
        else:
            h3 = None
            a = [gelu(u) for u in h1]
        zs = self.fc2.forward(a)                    # partial sums, (.., d)
        ys = self.g.forward(zs)                     # g: ALL-REDUCE
        self._cache = (x, h1, h3)
        self.outputs = ys
        return ys[0]

    def backward(self, dy: np.ndarray) -> np.ndarray:
        """dL/dx (shape like x); fills grads/shard_grads. One all-reduce (f's backward)."""
        if self._cache is None:
            raise ValueError("call forward before backward")
        x, h1, h3 = self._cache
        dy = np.asarray(dy, dtype=np.float64)
        if dy.shape != x.shape:
            raise ValueError(f"dy has shape {dy.shape} but y has shape {x.shape}: pass dL/dy")
        dys = self.g.backward(dy)                   # g backward: identity
        da = self.fc2.backward(dys)                 # local
        if self.fc3 is not None:
            dh1 = [d * v * silu_grad(u) for d, u, v in zip(da, h1, h3, strict=True)]
            dh3 = [d * silu(u) for d, u in zip(da, h1, strict=True)]
            dx1 = self.fc1.backward(dh1)
            dx3 = self.fc3.backward(dh3)
            dxs = [p + q for p, q in zip(dx1, dx3, strict=True)]
        else:
            dh1 = [d * gelu_grad(u) for d, u in zip(da, h1, strict=True)]
            dxs = self.fc1.backward(dh1)            # PARTIAL dx_r
        dx = self.f.backward(dxs)                   # f backward: ALL-REDUCE
        self.shard_grads = {"w1": self.fc1.shard_grads, "w2": self.fc2.shard_grads}
        self.grads = {"w1": self.fc1.grad, "w2": self.fc2.grad}
        if self.fc3 is not None:
            self.shard_grads["w3"] = self.fc3.shard_grads
            self.grads["w3"] = self.fc3.grad
        return dx[0]
