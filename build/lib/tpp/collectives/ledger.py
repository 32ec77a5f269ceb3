"""The ledger of a process group: operation names and one record per collective call.

A :class:`CollectiveRecord` is what :class:`~tpp.collectives.ProcessGroup` appends for every
collective (op, group size, payload bytes ``M``, bytes each rank sent, ring steps, tag); a
:class:`Transfer` is one message of a ring step, for callers that ask for a trace.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["OPS", "REDUCE_OPS", "CollectiveRecord", "Transfer"]

#: Collective names accepted by :func:`bus_factor`, :func:`ring_steps`, ... (``-`` may replace
#: ``_``; case is ignored).
OPS: tuple[str, ...] = (
    "all_reduce",
    "reduce_scatter",
    "all_gather",
    "all_to_all",
    "broadcast",
    "send",
)

#: Element-wise reductions accepted by :meth:`ProcessGroup.all_reduce` and ``reduce_scatter``.
REDUCE_OPS = {
    "sum": np.add,
    "prod": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
}


def _normalise_op(op: str) -> str:
    if not isinstance(op, str):
        raise ValueError(f"op must be a string, got {op!r}: use one of {', '.join(OPS)}")
    name = op.strip().lower().replace("-", "_")
    if name == "allreduce":
        name = "all_reduce"
    if name not in OPS:
        raise ValueError(f"unknown op {op!r}: use one of {', '.join(OPS)}")
    return name


def _check_n(n: int, what: str = "n") -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(
            f"{what}={n!r} must be a positive integer number of ranks: use {what} >= 1"
        )
    return int(n)


@dataclass(frozen=True)
class CollectiveRecord:
    """One entry of a :class:`ProcessGroup`'s ledger.

    Attributes:
        op: the collective (``"all_reduce"``, ``"reduce_scatter"``, ``"all_gather"``,
            ``"broadcast"``, ``"all_to_all"``, ``"send"``).
        group_size: number of ranks ``n``.
        payload_bytes: ``M`` in bytes: ONE rank's input array for all_reduce, reduce_scatter,
            all_to_all, broadcast and send; the gathered OUTPUT (n times one rank's input) for
            all_gather.
        bytes_sent_per_rank: bytes each rank actually sent, counted while the chunks moved.
        steps: sequential communication steps (each costs one latency alpha).
        algorithm: ``"ring"``, ``"chain"`` (broadcast), ``"p2p"`` (send) or ``"none"`` (n = 1).
        tag: free text naming the caller, e.g. ``"g.forward"``, so the ledger shows where the
            collective sits in a layer.
    """

    op: str
    group_size: int
    payload_bytes: int
    bytes_sent_per_rank: tuple[int, ...]
    steps: int
    algorithm: str
    tag: str = ""

    @property
    def total_bytes(self) -> int:
        """Sum of the bytes sent by all ranks."""
        return sum(self.bytes_sent_per_rank)


@dataclass(frozen=True)
class Transfer:
    """One message of a ring step: rank ``src`` sends chunk ``chunk`` (``nbytes``) to ``dst``."""

    phase: str
    step: int
    src: int
    dst: int
    chunk: int
    nbytes: int
