"""Even sharding of weights across TP ranks (rank r owns the r-th contiguous slice).

Uneven splits (``np.array_split``-style) are refused: every rank must hold the same shape, as in
Megatron-LM, so the split dimension must be divisible by the TP degree. :func:`tp_group` is the
group of ``TP`` ranks that hold the shards (every TP layer resolves its optional group there).
"""

from __future__ import annotations

import numpy as np

from tpp.collectives import ProcessGroup, group_of_size

__all__ = ["check_tp", "tp_group", "check_divisible", "shard", "shard_columns", "shard_rows",
           "unshard"]


def check_tp(tp: int) -> int:
    """Validate a tensor-parallel degree: a positive integer."""
    if isinstance(tp, bool) or not isinstance(tp, (int, np.integer)) or tp < 1:
        raise ValueError(f"TP={tp!r} must be a positive integer: use TP >= 1")
    return int(tp)


def tp_group(group: ProcessGroup | None, tp: int,
             sequence_parallel: bool = False) -> ProcessGroup:
    """The TP group of a layer: ``group`` if given (it must have ``tp`` ranks: "group has size
    ... but TP=..."), else a new one named ``tp{tp}`` (``tp{tp}_sp`` with sequence
    parallelism), :func:`tpp.collectives.group_of_size`."""
    return group_of_size(group, tp, label="TP",
                         name=f"tp{tp}" + ("_sp" if sequence_parallel else ""))


def check_divisible(size: int, tp: int, name: str) -> int:
    """Return ``size // tp``; raise ValueError naming ``name`` when tp does not divide size."""
    tp = check_tp(tp)
    if size % tp:
        raise ValueError(
            f"{name}={size} is not divisible by TP={tp}: choose a TP that divides {name}"
        )
    return size // tp


def shard(w: np.ndarray, tp: int, axis: int, name: str = "dim") -> list[np.ndarray]:
    """Split ``w`` along ``axis`` into ``tp`` equal contiguous shards (copies), rank order."""
    w = np.asarray(w, dtype=np.float64)
    check_divisible(w.shape[axis], tp, name)
    return [s.copy() for s in np.split(w, tp, axis=axis)]


def shard_columns(w: np.ndarray, tp: int, name: str = "d_ff") -> list[np.ndarray]:
    """Column-parallel split: the output (last) axis of ``w`` (shape (d_in, d_out))."""
    return shard(w, tp, axis=-1, name=name)


def shard_rows(w: np.ndarray, tp: int, name: str = "d_ff") -> list[np.ndarray]:
    """Row-parallel split: the input (first) axis of ``w`` (shape (d_in, d_out))."""
    return shard(w, tp, axis=0, name=name)


def unshard(shards: list[np.ndarray], axis: int) -> np.ndarray:
    """Concatenate shards back (the inverse of :func:`shard`)."""
    return np.concatenate(shards, axis=axis)
