"""Column- and row-parallel linear layers with explicit forward and backward (no autograd).

Convention: row vectors, ``y = x @ W`` with ``W`` of shape (d_in, d_out) (Shoeybi et al. 2019,
section 3 writes the same split as "column" / "row" of A in Y = XA).

* Column-parallel: W = [W_0 | ... | W_{T-1}] split along d_out. Rank r computes
  ``y_r = x @ W_r`` (its slice of the output columns); backward ``dx_r = dy_r @ W_r^T`` is a
  PARTIAL input gradient (the f operator sums them) and ``dW_r = x^T @ dy_r``.
* Row-parallel: W split along d_in; rank r holds the matching slice x_r of the input and
  computes the PARTIAL output ``z_r = x_r @ W_r`` (the g operator sums them); backward
  ``dx_r = dy @ W_r^T`` and ``dW_r = x_r^T @ dy`` need no communication.

Unlike Megatron-LM's classes, these layers do not call f or g themselves: :class:`ShardedMLP`
places f and g explicitly, so the reader sees every collective.
Inputs may have any leading dimensions (..., d_in); weight gradients sum over them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .sharding import check_tp, shard_columns, shard_rows, unshard

__all__ = ["ColumnParallelLinear", "RowParallelLinear", "linear_backward"]


def _as_weight(w: np.ndarray, name: str) -> np.ndarray:
    w = np.asarray(w, dtype=np.float64)
    if w.ndim != 2:
        raise ValueError(f"{name} must be a 2-d matrix (d_in, d_out), got shape {w.shape}")
    return w


def linear_backward(x: np.ndarray, w: np.ndarray, dy: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Backward of ``y = x @ w``: returns ``(dx, dw) = (dy @ w^T, x^T @ dy)``, summed over
    leading (token) dimensions for dw."""
    dx = dy @ w.T
    dw = x.reshape(-1, x.shape[-1]).T @ dy.reshape(-1, dy.shape[-1])
    return dx, dw


def _per_rank(xs, tp: int, what: str) -> list[np.ndarray]:
    if isinstance(xs, np.ndarray):
        return [np.asarray(xs, dtype=np.float64)] * tp
    xs = list(xs)
    if len(xs) != tp:
        raise ValueError(f"{what} got {len(xs)} arrays for TP={tp}: pass one array per rank")
    return [np.asarray(x, dtype=np.float64) for x in xs]


def _shards_backward(
    xs: list[np.ndarray], shards: list[np.ndarray], dys: list[np.ndarray], output: str
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per-rank :func:`linear_backward` of ``y_r = x_r @ W_r``: returns ``(dxs, dWs)``.

    ``output`` names rank r's output in the error message ("the local output", "the output")."""
    dxs, grads = [], []
    for x, w, dy in zip(xs, shards, dys, strict=True):
        expected = x.shape[:-1] + (w.shape[1],)
        if dy.shape != expected:
            raise ValueError(
                f"dy has shape {dy.shape} but {output} has shape {expected}: pass the gradient "
                "of forward's output"
            )
        dx, dw = linear_backward(x, w, dy)
        dxs.append(dx)
        grads.append(dw)
    return dxs, grads


class ColumnParallelLinear:
    """``y = x @ W`` with W split along its output axis over ``tp`` ranks.

    Args:
        w: full weight (d_in, d_out); d_out must be divisible by tp.
        tp: tensor-parallel degree.
        name: name of the split dimension in error messages (e.g. "d_ff").
    """

    def __init__(self, w: np.ndarray, tp: int, name: str = "d_out", weight_name: str = "W"
                 ) -> None:
        self.tp = check_tp(tp)
        w = _as_weight(w, weight_name)
        self.weight_name = weight_name
        self.d_in, self.d_out = w.shape
        self.shards = shard_columns(w, self.tp, name=name)
        self.shard_grads: list[np.ndarray] | None = None
        self._xs: list[np.ndarray] | None = None

    def forward(self, xs: np.ndarray | Sequence[np.ndarray]) -> list[np.ndarray]:
        """Rank r: ``y_r = x_r @ W_r``, shape (..., d_out/tp). ``xs``: the (replicated) input,
        one array per rank or one array used on every rank. No communication."""
        xs = _per_rank(xs, self.tp, "ColumnParallelLinear.forward")
        for x in xs:
            if x.ndim < 1 or x.shape[-1] != self.d_in:
                raise ValueError(
                    f"input has shape {x.shape} but {self.weight_name} has d_in={self.d_in} "
                    f"rows: pass x of shape (..., {self.d_in})"
                )
        self._xs = xs
        return [x @ w for x, w in zip(xs, self.shards, strict=True)]

    def backward(self, dys: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Rank r: ``dW_r = x_r^T dy_r`` (stored in :attr:`shard_grads`) and returns the
        PARTIAL ``dx_r = dy_r @ W_r^T``; their sum over ranks (f's all-reduce) is dx."""
        if self._xs is None:
            raise ValueError("call forward before backward")
        dys = _per_rank(dys, self.tp, "ColumnParallelLinear.backward")
        dxs, self.shard_grads = _shards_backward(self._xs, self.shards, dys, "the local output")
        return dxs

    @property
    def weight(self) -> np.ndarray:
        """The full weight, reassembled from the shards."""
        return unshard(self.shards, axis=1)

    @property
    def grad(self) -> np.ndarray:
        """The full weight gradient, reassembled from the shards' gradients."""
        if self.shard_grads is None:
            raise ValueError("call backward before reading grad")
        return unshard(self.shard_grads, axis=1)


class RowParallelLinear:
    """``z = x @ W`` with W split along its input axis; rank r holds x_r = x[..., slice r].

    forward returns the PARTIAL sums z_r (g all-reduces them); backward needs no communication.
    """

    def __init__(self, w: np.ndarray, tp: int, name: str = "d_in", weight_name: str = "W"
                 ) -> None:
        self.tp = check_tp(tp)
        w = _as_weight(w, weight_name)
        self.weight_name = weight_name
        self.d_in, self.d_out = w.shape
        self.shards = shard_rows(w, self.tp, name=name)
        self.shard_grads: list[np.ndarray] | None = None
        self._xs: list[np.ndarray] | None = None

    def forward(self, xs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Rank r: ``z_r = x_r @ W_r`` of shape (..., d_out): a partial sum, sum_r z_r = x @ W."""
        if isinstance(xs, np.ndarray):
            raise ValueError(
                "RowParallelLinear.forward takes the per-rank input shards (a list of "
                f"{self.tp} arrays): split x along its last axis first"
            )
        xs = _per_rank(xs, self.tp, "RowParallelLinear.forward")
        k = self.d_in // self.tp
        for r, x in enumerate(xs):
            if x.ndim < 1 or x.shape[-1] != k:
                raise ValueError(
                    f"rank {r}'s input has shape {x.shape} but its {self.weight_name} shard has "
                    f"{k} rows: pass x_r of shape (..., {k})"
                )
        self._xs = xs
        return [x @ w for x, w in zip(xs, self.shards, strict=True)]

    def backward(self, dys: np.ndarray | Sequence[np.ndarray]) -> list[np.ndarray]:
        """Rank r: ``dW_r = x_r^T dy`` (in :attr:`shard_grads`); returns ``dx_r = dy @ W_r^T``
        (rank r's slice of dx; no communication)."""
        if self._xs is None:
            raise ValueError("call forward before backward")
        dys = _per_rank(dys, self.tp, "RowParallelLinear.backward")
        dxs, self.shard_grads = _shards_backward(self._xs, self.shards, dys, "the output")
        return dxs

    @property
    def weight(self) -> np.ndarray:
        """The full weight, reassembled from the shards."""
        return unshard(self.shards, axis=0)

    @property
    def grad(self) -> np.ndarray:
        """The full weight gradient, reassembled from the shards' gradients."""
        if self.shard_grads is None:
            raise ValueError("call backward before reading grad")
        return unshard(self.shard_grads, axis=0)
