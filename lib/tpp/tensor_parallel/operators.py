"""Megatron's conjugate operators f and g (Shoeybi et al. 2019, section 3, Fig. 3).

Each operator has an explicit ``forward`` and ``backward``; the collectives run on a
:class:`~tpp.collectives.ProcessGroup`, so its ledger shows where each one sits (tags
``"f.backward"`` and ``"g.forward"``). Per-rank data is a list with one array per rank.

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

from tpp.collectives import ProcessGroup

__all__ = [
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


def copy_to_tp_region(x: np.ndarray | Sequence[np.ndarray], group: ProcessGroup
                      ) -> list[np.ndarray]:
    """f forward: identity. Every rank gets (a copy of) the same x; no communication."""
    return _replicate(x, group, "copy_to_tp_region")


def copy_to_tp_region_backward(dxs: Sequence[np.ndarray], group: ProcessGroup
                               ) -> list[np.ndarray]:
    """f backward: all-reduce (sum) of the ranks' partial input gradients dx_r."""
    return group.all_reduce(_replicate(list(dxs), group, "f.backward"), tag="f.backward")


def reduce_from_tp_region(zs: Sequence[np.ndarray], group: ProcessGroup) -> list[np.ndarray]:
    """g forward: all-reduce (sum) of the ranks' partial outputs z_r."""
    return group.all_reduce(_replicate(list(zs), group, "g.forward"), tag="g.forward")


def reduce_from_tp_region_backward(dy: np.ndarray | Sequence[np.ndarray], group: ProcessGroup
                                   ) -> list[np.ndarray]:
    """g backward: identity. Every rank gets (a copy of) dy; no communication."""
    return _replicate(dy, group, "reduce_from_tp_region_backward")


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
