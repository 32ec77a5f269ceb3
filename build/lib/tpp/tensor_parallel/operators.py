"""Megatron's conjugate operators f and g (Shoeybi et al. 2019, section 3, Fig. 3).

The operators are written ONCE, as the program of one rank on a communicator
(:class:`~tpp.collectives.Communicator`): :func:`f_forward`, :func:`f_backward`,
:func:`g_forward`, :func:`g_backward`. They run unchanged on simulated ranks
(:func:`tpp.collectives.spmd`) and on ``torch.distributed`` (:func:`tpp.distributed.spmd`).
The list-of-arrays functions below (one array per rank, a
:class:`~tpp.collectives.ProcessGroup` whose ledger shows where each collective sits, tags
``"f.backward"`` and ``"g.forward"``) run those per-rank programs on simulated ranks.

================================  ======================  ======================
operator (Megatron mappings.py)   forward                 backward
================================  ======================  ======================
f = copy_to_tp_region             identity (copy x)       all-reduce (sum) of dx
g = reduce_from_tp_region         all-reduce (sum)        identity (copy dy)
================================  ======================  ======================

Why: if y_t = x on every rank t and L depends on all y_t, the chain rule gives
dL/dx = sum_t dL/dy_t (see :func:`tpp.symbolic.collectives.copy_backward_is_sum`), so the
backward of a copy is a sum; conversely the backward of y = sum_t z_t is dL/dz_t = dL/dy, a copy.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tpp.collectives import Communicator, ProcessGroup, spmd

__all__ = [
    "f_backward",
    "f_forward",
    "g_backward",
    "g_forward",
    "CopyToTP",
    "ReduceFromTP",
    "copy_to_tp_region",
    "copy_to_tp_region_backward",
    "reduce_from_tp_region",
    "reduce_from_tp_region_backward",
]


def _replicate(x: np.ndarray | Sequence[np.ndarray], group: ProcessGroup, what: str
               ) -> list[np.ndarray]:
    """One float64 copy per rank: a single array is replicated, a list is checked and copied."""
    if isinstance(x, np.ndarray):
        x = np.asarray(x, dtype=np.float64)
        return [x.copy() for _ in range(group.size)]
    if len(x) != group.size:
        raise ValueError(
            f"{what} got {len(x)} arrays for TP={group.size}: pass one array per rank "
            "or a single array to replicate"
        )
    xs = [np.asarray(a, dtype=np.float64) for a in x]
    for r, a in enumerate(xs[1:], start=1):
        if a.shape != xs[0].shape:
            raise ValueError(
                f"{what}: rank {r} has shape {a.shape} but rank 0 has shape {xs[0].shape}: "
                "every rank must hold the same shape"
            )
    return [a.copy() for a in xs]


# ---------------------------------------------------------------- the per-rank operators
def f_forward(x: np.ndarray, comm: Communicator) -> np.ndarray:
    """f forward (Megatron ``copy_to_tensor_model_parallel_region``): identity."""
    return x


def f_backward(dx: np.ndarray, comm: Communicator) -> np.ndarray:
    """f backward: all-reduce (sum) of this rank's partial input gradient."""
    return comm.all_reduce(dx, tag="f.backward")


def g_forward(z: np.ndarray, comm: Communicator) -> np.ndarray:
    """g forward (Megatron ``reduce_from_tensor_model_parallel_region``): all-reduce."""
    return comm.all_reduce(z, tag="g.forward")


def g_backward(dy: np.ndarray, comm: Communicator) -> np.ndarray:
    """g backward: identity."""
    return dy


def _on_ranks(op, xs: list[np.ndarray], group: ProcessGroup) -> list[np.ndarray]:
    """Run the per-rank operator ``op`` on the simulated ranks of ``group``."""
    return spmd(op, group.size, [(x,) for x in xs], group=group)


# ---------------------------------------------------------------- the list-of-arrays API
def copy_to_tp_region(x: np.ndarray | Sequence[np.ndarray], group: ProcessGroup
                      ) -> list[np.ndarray]:
    """f forward: identity. Every rank gets (a copy of) the same x; no communication."""
    return _on_ranks(f_forward, _replicate(x, group, "copy_to_tp_region"), group)


def copy_to_tp_region_backward(dxs: Sequence[np.ndarray], group: ProcessGroup
                               ) -> list[np.ndarray]:
    """f backward: all-reduce (sum) of the ranks' partial input gradients dx_r."""
    return _on_ranks(f_backward, _replicate(list(dxs), group, "f.backward"), group)


def reduce_from_tp_region(zs: Sequence[np.ndarray], group: ProcessGroup) -> list[np.ndarray]:
    """g forward: all-reduce (sum) of the ranks' partial outputs z_r."""
    return _on_ranks(g_forward, _replicate(list(zs), group, "g.forward"), group)


def reduce_from_tp_region_backward(dy: np.ndarray | Sequence[np.ndarray], group: ProcessGroup
                                   ) -> list[np.ndarray]:
    """g backward: identity. Every rank gets (a copy of) dy; no communication."""
    return _on_ranks(g_backward, _replicate(dy, group, "reduce_from_tp_region_backward"), group)


class CopyToTP:
    """The operator f: identity forward, all-reduce backward."""

    def __init__(self, group: ProcessGroup) -> None:
        self.group = group

    def forward(self, x: np.ndarray | Sequence[np.ndarray]) -> list[np.ndarray]:
        """Identity: returns one copy of x per rank."""
        return copy_to_tp_region(x, self.group)

    def backward(self, dxs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """All-reduce of the per-rank gradients (one ledger entry tagged ``f.backward``)."""
        return copy_to_tp_region_backward(dxs, self.group)


class ReduceFromTP:
    """The operator g: all-reduce forward, identity backward."""

    def __init__(self, group: ProcessGroup) -> None:
        self.group = group

    def forward(self, zs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """All-reduce of the per-rank partial sums (one ledger entry tagged ``g.forward``)."""
        return reduce_from_tp_region(zs, self.group)

    def backward(self, dy: np.ndarray | Sequence[np.ndarray]) -> list[np.ndarray]:
        """Identity: returns one copy of dy per rank."""
        return reduce_from_tp_region_backward(dy, self.group)
