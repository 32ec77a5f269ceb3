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

The sharded MLP exists once, as the program of one rank: :func:`sharded_mlp_forward` and
:func:`sharded_mlp_backward` (a communicator ``comm``, this rank's shards). :class:`ShardedMLP`
runs them on simulated ranks (:func:`tpp.collectives.spmd`); :mod:`tpp.distributed` runs the
same functions on ``torch.distributed`` processes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np

from tpp.collectives import Communicator, ProcessGroup, spmd

from .activations import gelu, gelu_grad, silu, silu_grad
from .linear import ColumnParallelLinear, RowParallelLinear, linear_backward
from .operators import CopyToTP, ReduceFromTP, f_backward, f_forward, g_backward, g_forward
from .sequence import (
    gather_from_sp_backward,
    gather_from_sp_forward,
    reduce_scatter_to_sp_backward,
    reduce_scatter_to_sp_forward,
)
from .sharding import check_divisible, check_tp, tp_group, unshard

__all__ = ["ACTIVATIONS", "MLP", "MLP_VARIANTS", "MLPRankCache", "ShardedMLP",
           "sharded_mlp_backward", "sharded_mlp_forward"]

ACTIVATIONS = ("gelu", "swiglu")
#: The correct operators and chapter 03's two negative controls.
MLP_VARIANTS = ("correct", "no f", "all-reduce both ways")


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



# --------------------------------------------------------------------------------------------
# the program of one rank
# --------------------------------------------------------------------------------------------
@dataclass
class MLPRankCache:
    """What one rank keeps from forward for backward (its shards and activations)."""

    x: np.ndarray
    h1: np.ndarray
    h3: np.ndarray | None
    a: np.ndarray
    w1: np.ndarray
    w2: np.ndarray
    w3: np.ndarray | None
    variant: str
    sequence_parallel: bool = False


def sharded_mlp_forward(x: np.ndarray, w1: np.ndarray, w2: np.ndarray,
                        w3: np.ndarray | None = None, *, comm: Communicator,
                        variant: str = "correct", sequence_parallel: bool = False
                        ) -> tuple[np.ndarray, MLPRankCache]:
    """Forward of the tensor-parallel MLP on one rank: returns ``(y, cache)``.

    ``w1`` (and ``w3``, SwiGLU) are this rank's column shards (d, d_ff/T), ``w2`` its row shard
    (d_ff/T, d). One all-reduce (g) on ``comm``. ``variant`` is ``"correct"`` or one of chapter
    03's negative controls (``"no f"``, ``"all-reduce both ways"``), which differ in backward.
    ``sequence_parallel=True`` (Korthikanti et al. 2022, Sec. 4.2.2): ``x`` is this rank's
    slice of the sequence (axis 0); an all-gather replaces f and a reduce-scatter replaces g,
    so ``y`` is this rank's slice of the output.
    """
    if variant not in MLP_VARIANTS:
        raise ValueError(f"unknown variant {variant!r}: use one of {MLP_VARIANTS}")
    if sequence_parallel and variant != "correct":
        raise ValueError("the negative controls exist without sequence parallelism only: "
                         "pass sequence_parallel=False or variant='correct'")
    if sequence_parallel:
        x = gather_from_sp_forward(x, comm)     # enter: all-gather
    else:
        x = f_forward(x, comm)                  # f: identity
    h1 = x @ w1                                 # column-parallel: d_ff/T slice
    if w3 is not None:
        h3 = x @ w3
        a = silu(h1) * h3                       # SwiGLU
    else:
        h3 = None
        a = gelu(h1)
    z = a @ w2                                  # row-parallel: a PARTIAL sum of y
    if sequence_parallel:
        y = reduce_scatter_to_sp_forward(z, comm)  # leave: reduce-scatter
    else:
        y = g_forward(z, comm)                  # g: ALL-REDUCE
    cache = MLPRankCache(x, h1, h3, a, w1, w2, w3, variant, sequence_parallel)
    return y, cache


def sharded_mlp_backward(dy: np.ndarray, cache: MLPRankCache, *, comm: Communicator
                         ) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray]:
    """Backward on one rank: returns ``(dx, shard_grads, dx_partial)``.

    One all-reduce (f's backward) for the correct operators; none for ``"no f"`` (dx is then
    this rank's partial); two for ``"all-reduce both ways"`` (g's backward also all-reduces).
    """
    c = cache
    if c.sequence_parallel:
        dy = reduce_scatter_to_sp_backward(dy, comm)
    elif c.variant == "all-reduce both ways":
        dy = comm.all_reduce(dy, tag="g.backward (wrong)")   # sums T equal copies
    else:
        dy = g_backward(dy, comm)               # g backward: identity
    da, dw2 = linear_backward(c.a, c.w2, dy)    # local
    grads = {"w2": dw2}
    if c.w3 is not None:
        dh1 = da * c.h3 * silu_grad(c.h1)
        dh3 = da * silu(c.h1)
        dx1, grads["w1"] = linear_backward(c.x, c.w1, dh1)
        dx3, grads["w3"] = linear_backward(c.x, c.w3, dh3)
        dx_partial = dx1 + dx3
    else:
        dh1 = da * gelu_grad(c.h1)
        dx_partial, grads["w1"] = linear_backward(c.x, c.w1, dh1)   # PARTIAL dx_r
    if c.sequence_parallel:
        dx = gather_from_sp_backward(dx_partial, comm)
    else:
        dx = dx_partial if c.variant == "no f" else f_backward(dx_partial, comm)  # f: ALL-REDUCE
    return dx, grads, dx_partial


class ShardedMLP:
    """Tensor-parallel MLP over ``tp`` simulated ranks: W1 (and W3) column-parallel, W2
    row-parallel, f before the first matmul and g after the last (one all-reduce each way).

    A thin wrapper: forward and backward run :func:`sharded_mlp_forward` and
    :func:`sharded_mlp_backward` on every rank with :func:`tpp.collectives.spmd`.

    Attributes:
        group: the :class:`~tpp.collectives.ProcessGroup` (its ledger lists the collectives).
        fc1, fc3: :class:`ColumnParallelLinear` for W1 and W3 (fc3 is None for GELU); they hold
            the shards.
        fc2: :class:`RowParallelLinear` for W2.
        outputs: after forward, the output as each rank holds it.
        grads: FULL gradients assembled from the shards ("w1", "w2"[, "w3"]), after backward.
        shard_grads: per-rank lists of gradient shards, same keys.
    """

    def __init__(self, w1, w2, tp: int, activation: str = "gelu", w3=None,
                 group: ProcessGroup | None = None, variant: str = "correct") -> None:
        tp = check_tp(tp)
        w1, w2, w3, d, d_ff = _check_weights(w1, w2, activation, w3)
        check_divisible(d_ff, tp, "d_ff")
        if variant not in MLP_VARIANTS:
            raise ValueError(f"unknown variant {variant!r}: use one of {MLP_VARIANTS}")
        group = tp_group(group, tp)
        self.tp, self.d, self.d_ff, self.activation = tp, d, d_ff, activation
        self.variant = variant
        self.group = group
        self.f = CopyToTP(group)
        self.g = ReduceFromTP(group)
        self.fc1 = ColumnParallelLinear(w1, tp, name="d_ff", weight_name="W1")
        self.fc3 = (ColumnParallelLinear(w3, tp, name="d_ff", weight_name="W3")
                    if activation == "swiglu" else None)
        self.fc2 = RowParallelLinear(w2, tp, name="d_ff", weight_name="W2")
        self.grads: dict[str, np.ndarray] = {}
        self.shard_grads: dict[str, list[np.ndarray]] = {}
        self.outputs: list[np.ndarray] = []
        self._cache: list[MLPRankCache] | None = None

    def rank_args(self, x: np.ndarray) -> list[tuple]:
        """The positional arguments of :func:`sharded_mlp_forward` for each rank."""
        w3s = self.fc3.shards if self.fc3 is not None else [None] * self.tp
        return [(x, self.fc1.shards[r], self.fc2.shards[r], w3s[r]) for r in range(self.tp)]

    def forward(self, x: np.ndarray) -> np.ndarray:
        """The all-reduced output y (shape like x). One all-reduce (g) on the ledger."""
        x = _check_x(x, self.d)
        fwd = partial(sharded_mlp_forward, variant=self.variant)
        outs = spmd(fwd, self.tp, self.rank_args(x), group=self.group)
        self.outputs = [y for y, _ in outs]
        self._cache = [c for _, c in outs]
        return self.outputs[0]

    def backward(self, dy: np.ndarray) -> np.ndarray:
        """dL/dx (shape like x); fills grads/shard_grads. One all-reduce (f's backward)."""
        if self._cache is None:
            raise ValueError("call forward before backward")
        x = self._cache[0].x
        dy = np.asarray(dy, dtype=np.float64)
        if dy.shape != x.shape:
            raise ValueError(f"dy has shape {dy.shape} but y has shape {x.shape}: pass dL/dy")
        outs = spmd(sharded_mlp_backward, self.tp, [(dy, c) for c in self._cache],
                    group=self.group)
        self.dx_partials = [p for _, _, p in outs]
        keys = ("w1", "w2") + (("w3",) if self.fc3 is not None else ())
        layers = {"w1": self.fc1, "w2": self.fc2, "w3": self.fc3}
        for k in keys:
            layers[k].shard_grads = [g[k] for _, g, _ in outs]
        self.shard_grads = {k: layers[k].shard_grads for k in keys}
        self.grads = {k: unshard(self.shard_grads[k], axis=0 if k == "w2" else 1) for k in keys}
        return outs[0][0]
