"""Sequence parallelism's conjugate operators (Korthikanti et al. 2022, Sec. 4.2.2, Fig. 5).

Outside the tensor-parallel matmuls (LayerNorm, dropout, residual), each rank holds only its
``s / t`` slice of the sequence (axis 0, sequence first). Entering a TP region needs the whole
sequence (an all-gather), leaving it needs the sum of the partial outputs, but only the rank's
own slice of it (a reduce-scatter). Each operator's backward is the other collective:

==============================================  =======================  =====================
operator (Megatron-LM ``mappings.py``)          forward                  backward
==============================================  =======================  =====================
g  = gather_from_sequence_parallel_region        all-gather (axis 0)      reduce-scatter
g- = reduce_scatter_to_sequence_parallel_region  reduce-scatter (axis 0)  all-gather
scatter_to_sequence_parallel_region              split (no comms)         all-gather
==============================================  =======================  =====================

The operators are written ONCE, as the program of one rank on a communicator, like f and g
(:mod:`.operators`): :func:`gather_from_sp_forward` and its backward
:func:`gather_from_sp_backward`, :func:`reduce_scatter_to_sp_forward` and
:func:`reduce_scatter_to_sp_backward`, :func:`scatter_to_sp_backward`. The per-rank MLP
(:func:`tpp.tensor_parallel.mlp.sharded_mlp_forward`) calls them; the list-of-arrays functions
below (one array per rank, a :class:`~tpp.collectives.ProcessGroup`) run them on simulated ranks.

Since all-reduce = reduce-scatter + all-gather, the pair moves exactly the bytes of TP's
all-reduce (bus factors ``(t-1)/t + (t-1)/t = 2(t-1)/t``): the ledger shows it.
Ledger tags: ``"sp.all_gather"``, ``"sp.all_gather.backward"``, ``"sp.reduce_scatter"``,
``"sp.reduce_scatter.backward"``, ``"sp.scatter.backward"``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tpp.collectives import Communicator, ProcessGroup, spmd

__all__ = [
    "gather_from_sp_forward",
    "gather_from_sp_backward",
    "reduce_scatter_to_sp_forward",
    "reduce_scatter_to_sp_backward",
    "scatter_to_sp_backward",
    "split_sequence",
    "gather_from_sequence_parallel_region",
    "gather_from_sequence_parallel_region_backward",
    "reduce_scatter_to_sequence_parallel_region",
    "reduce_scatter_to_sequence_parallel_region_backward",
    "scatter_to_sequence_parallel_region",
    "scatter_to_sequence_parallel_region_backward",
    "GatherFromSP",
    "ReduceScatterToSP",
    "ScatterToSP",
]


def _check_list(xs: Sequence[np.ndarray], group: ProcessGroup, what: str) -> list[np.ndarray]:
    if isinstance(xs, np.ndarray) or len(xs) != group.size:
        n = 1 if isinstance(xs, np.ndarray) else len(xs)
        raise ValueError(f"{what} got {n} array(s) for TP={group.size}: pass one array per rank")
    return [np.asarray(x, dtype=np.float64) for x in xs]


# ---------------------------------------------------------------- the per-rank operators
def gather_from_sp_forward(x: np.ndarray, comm: Communicator) -> np.ndarray:
    """Enter a TP region under SP: all-gather this rank's sequence slice (axis 0)."""
    return comm.all_gather(x, axis=0, tag="sp.all_gather")


def gather_from_sp_backward(dy: np.ndarray, comm: Communicator) -> np.ndarray:
    """Backward of the all-gather: reduce-scatter the full-sequence gradient (axis 0)."""
    return comm.reduce_scatter(dy, axis=0, tag="sp.all_gather.backward")


def reduce_scatter_to_sp_forward(z: np.ndarray, comm: Communicator) -> np.ndarray:
    """Leave a TP region under SP: reduce-scatter the partial output; keep this rank's slice."""
    return comm.reduce_scatter(z, axis=0, tag="sp.reduce_scatter")


def reduce_scatter_to_sp_backward(dy: np.ndarray, comm: Communicator) -> np.ndarray:
    """Backward of the reduce-scatter: all-gather the gradient slices."""
    return comm.all_gather(dy, axis=0, tag="sp.reduce_scatter.backward")


def scatter_to_sp_backward(dy: np.ndarray, comm: Communicator) -> np.ndarray:
    """Backward of the split into sequence slices: all-gather the gradient slices."""
    return comm.all_gather(dy, axis=0, tag="sp.scatter.backward")


def _on_ranks(op, xs: list[np.ndarray], group: ProcessGroup) -> list[np.ndarray]:
    """Run the per-rank operator ``op`` on the simulated ranks of ``group``."""
    return spmd(op, group.size, [(x,) for x in xs], group=group)


# ---------------------------------------------------------------- the list-of-arrays API
def split_sequence(x: np.ndarray, tp: int) -> list[np.ndarray]:
    """Rank r's slice ``x[r s/t : (r+1) s/t]`` of the sequence axis (axis 0); s % t == 0."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim < 1 or x.shape[0] % tp:
        raise ValueError(f"sequence length s={x.shape[0] if x.ndim else None} must be divisible "
                         f"by TP={tp} for sequence parallelism: pad the sequence or change TP")
    return [c.copy() for c in np.split(x, tp, axis=0)]


def gather_from_sequence_parallel_region(xs: Sequence[np.ndarray], group: ProcessGroup
                                         ) -> list[np.ndarray]:
    """Forward: all-gather the sequence shards (axis 0); every rank gets the full sequence."""
    return _on_ranks(gather_from_sp_forward, _check_list(xs, group, "sp all-gather"), group)


def gather_from_sequence_parallel_region_backward(dys: Sequence[np.ndarray],
                                                  group: ProcessGroup) -> list[np.ndarray]:
    """Backward of the all-gather: reduce-scatter (sum the ranks' full-sequence gradients,
    keep rank r's slice)."""
    dys = _check_list(dys, group, "sp all-gather backward")
    return _on_ranks(gather_from_sp_backward, dys, group)


def reduce_scatter_to_sequence_parallel_region(zs: Sequence[np.ndarray], group: ProcessGroup
                                                ) -> list[np.ndarray]:
    """Forward: reduce-scatter the partial outputs; rank r gets its slice of the sum."""
    zs = _check_list(zs, group, "sp reduce-scatter")
    return _on_ranks(reduce_scatter_to_sp_forward, zs, group)


def reduce_scatter_to_sequence_parallel_region_backward(dys: Sequence[np.ndarray],
                                                        group: ProcessGroup) -> list[np.ndarray]:
    """Backward of the reduce-scatter: all-gather the gradient shards."""
    dys = _check_list(dys, group, "sp reduce-scatter backward")
    return _on_ranks(reduce_scatter_to_sp_backward, dys, group)


def scatter_to_sequence_parallel_region(x: np.ndarray, group: ProcessGroup) -> list[np.ndarray]:
    """Forward: split a replicated tensor along the sequence (no communication)."""
    return split_sequence(x, group.size)


def scatter_to_sequence_parallel_region_backward(dys: Sequence[np.ndarray],
                                                 group: ProcessGroup) -> list[np.ndarray]:
    """Backward of the split: all-gather the gradient shards."""
    dys = _check_list(dys, group, "sp scatter backward")
    return _on_ranks(scatter_to_sp_backward, dys, group)


class GatherFromSP:
    """All-gather forward / reduce-scatter backward (enters a TP region under SP)."""

    def __init__(self, group: ProcessGroup) -> None:
        self.group = group

    def forward(self, xs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return gather_from_sequence_parallel_region(xs, self.group)

    def backward(self, dys: Sequence[np.ndarray]) -> list[np.ndarray]:
        return gather_from_sequence_parallel_region_backward(dys, self.group)


class ReduceScatterToSP:
    """Reduce-scatter forward / all-gather backward (leaves a TP region under SP)."""

    def __init__(self, group: ProcessGroup) -> None:
        self.group = group

    def forward(self, zs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return reduce_scatter_to_sequence_parallel_region(zs, self.group)

    def backward(self, dys: Sequence[np.ndarray]) -> list[np.ndarray]:
        return reduce_scatter_to_sequence_parallel_region_backward(dys, self.group)


class ScatterToSP:
    """Split forward / all-gather backward (enters the sequence-parallel region)."""

    def __init__(self, group: ProcessGroup) -> None:
        self.group = group

    def forward(self, x: np.ndarray) -> list[np.ndarray]:
        return scatter_to_sequence_parallel_region(x, self.group)

    def backward(self, dys: Sequence[np.ndarray]) -> list[np.ndarray]:
        return scatter_to_sequence_parallel_region_backward(dys, self.group)
