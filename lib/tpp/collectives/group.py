"""The simulated process group: ``size`` ranks in one process, a ledger of every collective.

Each rank's data is one numpy array; a collective takes a list with one array per rank and
returns a list with one array per rank. The algorithms of :mod:`.ring` really move chunks
between neighbouring ranks, step by step, so the bytes in the ledger are counted, not assumed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .closed_forms import ring_steps
from .ledger import REDUCE_OPS, CollectiveRecord, Transfer
from .ring import (
    chain_broadcast,
    pairwise_all_to_all,
    pairwise_all_to_all_v,
    ring_all_gather,
    ring_all_reduce,
    ring_reduce_scatter,
)

__all__ = ["ProcessGroup", "group_of_size"]


class ProcessGroup:
    """``size`` simulated ranks; every collective is appended to :attr:`ledger`.

    Collectives take a sequence of exactly ``size`` arrays (rank r's data at index r), all of
    the same shape and dtype, and return a new list of arrays (inputs are never modified).
    Pass ``trace=[]`` to a ring collective to receive the list of :class:`Transfer` messages.
    """

    def __init__(self, size: int, name: str = "group") -> None:
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
            raise ValueError(
                f"ProcessGroup size={size!r} must be a positive integer: use size >= 1 "
                "(the number of ranks)"
            )
        self.size = int(size)
        self.name = name
        self.ledger: list[CollectiveRecord] = []

    def __repr__(self) -> str:
        return f"ProcessGroup(size={self.size}, name={self.name!r}, ledger={len(self.ledger)})"

    # ------------------------------------------------------------------ helpers
    def _check_list(self, arrays: Sequence, op: str, hint: str = "") -> None:
        """``arrays`` must be a list (not an array) with one entry per rank."""
        if isinstance(arrays, np.ndarray) or not isinstance(arrays, Sequence):
            raise ValueError(
                f"{op} expects a list with one array per rank ({self.size} arrays), got "
                f"{type(arrays).__name__}: wrap the arrays in a list"
            )
        if len(arrays) != self.size:
            raise ValueError(
                f"{op} got {len(arrays)} arrays for a group of size {self.size}: pass exactly "
                f"one array per rank ({self.size}{hint})"
            )

    def _check_rank(self, op: str, name: str, r: object) -> int:
        """``r`` must be a rank of this group (an int in ``0 .. size-1``)."""
        if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or not 0 <= r < self.size:
            raise ValueError(f"{op}: {name}={r!r} is not a rank of this group: "
                             f"use 0..{self.size - 1}")
        return int(r)

    def _check_arrays(self, arrays: Sequence[np.ndarray], op: str) -> list[np.ndarray]:
        self._check_list(arrays, op)
        arrs = [np.asarray(a) for a in arrays]
        ref = arrs[0]
        for r, a in enumerate(arrs[1:], start=1):
            if a.shape != ref.shape:
                raise ValueError(
                    f"{op}: rank {r} has shape {a.shape} but rank 0 has shape {ref.shape}: "
                    "every rank must pass an array of the same shape"
                )
            if a.dtype != ref.dtype:
                raise ValueError(
                    f"{op}: rank {r} has dtype {a.dtype} but rank 0 has dtype {ref.dtype}: "
                    "cast every rank's array to the same dtype"
                )
        return arrs

    @staticmethod
    def _reducer(op: str):
        if op not in REDUCE_OPS:
            raise ValueError(f"unknown reduction op {op!r}: use one of {', '.join(REDUCE_OPS)}")
        return REDUCE_OPS[op]

    def _recorded(self, op: str, payload: int, result, algorithm: str, tag: str,
                  steps: int | None = None) -> list[np.ndarray]:
        """Append ``op``'s record (``steps`` default: :func:`ring_steps` of ``op``) and return the
        outputs of ``result = (outputs, bytes sent per rank)``."""
        out, sent = result
        self._record(op, payload, sent, ring_steps(op, self.size) if steps is None else steps,
                     algorithm, tag)
        return out

    def _record(self, op, payload, sent, steps, algorithm, tag) -> None:
        self.ledger.append(
            CollectiveRecord(
                op=op,
                group_size=self.size,
                payload_bytes=int(payload),
                bytes_sent_per_rank=tuple(int(b) for b in sent),
                steps=int(steps),
                algorithm=algorithm if self.size > 1 else "none",
                tag=tag,
            )
        )

    def _check_split_axis(self, arrs: list[np.ndarray], axis: int, op: str) -> int:
        """``axis`` must be an axis of the arrays whose length the group size divides."""
        n = self.size
        ax = self._check_axis(axis, arrs[0].ndim, op)
        length = arrs[0].shape[ax]
        if length % n:
            raise ValueError(
                f"{op}: axis {ax} has length {length}, not divisible by the group size "
                f"{n}: pad that axis to a multiple of {n} or use a group size that divides "
                f"{length}"
            )
        return ax

    def _check_axis(self, axis: int, ndim: int, op: str) -> int:
        if ndim == 0:
            raise ValueError(f"{op} needs arrays with at least one axis: pass 1-d or larger arrays")
        if not -ndim <= axis < ndim:
            raise ValueError(
                f"{op}: axis={axis} is out of range for arrays with {ndim} dimensions: "
                f"use -{ndim} <= axis < {ndim}"
            )
        return axis % ndim

    # ------------------------------------------------------------------ ring all-reduce
    def all_reduce(
        self,
        arrays: Sequence[np.ndarray],
        op: str = "sum",
        *,
        tag: str = "",
        trace: list[Transfer] | None = None,
    ) -> list[np.ndarray]:
        """Every rank gets the element-wise reduction (default: sum) of all ranks' arrays.

        Ring algorithm (Patarasuk & Yuan 2009). Each rank cuts its flattened array into n
        chunks (``np.array_split``, so sizes differ by at most one element).

        * Reduce-scatter phase, steps s = 0..n-2: rank r sends chunk (r - s) mod n to rank
          r+1, which reduces it into its own copy of that chunk. Afterwards rank r holds the
          fully reduced chunk (r + 1) mod n.
        * All-gather phase, steps s = 0..n-2: rank r sends chunk (r + 1 - s) mod n to rank
          r+1, which overwrites its copy.

        Each rank sends 2 (n-1) chunks, i.e. 2 (n-1)/n * M bytes when n divides the element
        count; in general the ranks' counts sum to exactly 2 (n-1) M. Every rank ends with a
        bit-identical result (the all-gather phase copies the same reduced chunks).
        """
        arrs = self._check_arrays(arrays, "all_reduce")
        return self._recorded("all_reduce", arrs[0].nbytes,
                              ring_all_reduce(arrs, self._reducer(op), trace), "ring", tag)

    # ------------------------------------------------------------------ reduce-scatter
    def reduce_scatter(
        self,
        arrays: Sequence[np.ndarray],
        axis: int = 0,
        op: str = "sum",
        *,
        tag: str = "",
        trace: list[Transfer] | None = None,
    ) -> list[np.ndarray]:
        """Rank r gets the r-th of n equal slices (along ``axis``) of the reduction of all arrays.

        Ring: steps s = 0..n-2, rank r sends chunk (r - s - 1) mod n to rank r+1, which
        reduces it into its copy; after n-1 steps rank r holds the reduced chunk r. Each rank
        sends (n-1) chunks = (n-1)/n * M bytes, M = one rank's input. The axis length must be
        divisible by n.
        """
        arrs = self._check_arrays(arrays, "reduce_scatter")
        reduce = self._reducer(op)
        ax = self._check_split_axis(arrs, axis, "reduce_scatter")
        return self._recorded("reduce_scatter", arrs[0].nbytes,
                              ring_reduce_scatter(arrs, ax, reduce, trace), "ring", tag)

    # ------------------------------------------------------------------ all-gather
    def all_gather(
        self,
        arrays: Sequence[np.ndarray],
        axis: int = 0,
        *,
        tag: str = "",
        trace: list[Transfer] | None = None,
    ) -> list[np.ndarray]:
        """Every rank gets the concatenation along ``axis`` of all ranks' arrays (rank order).

        Ring: steps s = 0..n-2, rank r forwards chunk (r - s) mod n to rank r+1. Each rank
        sends (n-1) shards = (n-1)/n * M bytes where M is the gathered OUTPUT's size
        (the ledger's ``payload_bytes`` is that output size).
        """
        arrs = self._check_arrays(arrays, "all_gather")
        ax = self._check_axis(axis, arrs[0].ndim, "all_gather")
        return self._recorded("all_gather", self.size * arrs[0].nbytes,
                              ring_all_gather(arrs, ax, trace), "ring", tag)

    # ------------------------------------------------------------------ all-to-all
    def all_to_all(
        self, arrays: Sequence[np.ndarray], axis: int = 0, *, tag: str = ""
    ) -> list[np.ndarray]:
        """Rank r gets, concatenated along ``axis`` in source-rank order, slice r of every rank.

        Each rank keeps one of its n slices and sends the other n-1 directly:
        (n-1)/n * M bytes per rank, M = one rank's input. Recorded with n-1 steps
        (one per peer, as in a pairwise exchange).
        """
        arrs = self._check_arrays(arrays, "all_to_all")
        ax = self._check_split_axis(arrs, axis, "all_to_all")
        return self._recorded("all_to_all", arrs[0].nbytes, pairwise_all_to_all(arrs, ax),
                              "pairwise", tag)

    def all_to_all_v(
        self, pieces: Sequence[Sequence[np.ndarray]], *, tag: str = ""
    ) -> list[list[np.ndarray]]:
        """Variable-size all-to-all: rank ``r`` sends ``pieces[r][j]`` (any shape) to rank ``j``.

        Returns ``received`` with ``received[j][r] = pieces[r][j]`` (copies). Each rank sends
        its pieces for the other ranks directly, as in :meth:`all_to_all`: recorded as an
        ``all_to_all`` with ``n - 1`` steps (``algorithm="pairwise-v"``), the bytes each rank
        sent to the others counted; ``payload_bytes`` is the largest rank's input (the sum of
        its pieces). What MoE's dispatch and combine use (:mod:`tpp.expert_parallel`).
        """
        n = self.size
        if (isinstance(pieces, np.ndarray) or not isinstance(pieces, Sequence)
                or len(pieces) != n or any(isinstance(p, np.ndarray)
                                           or not isinstance(p, Sequence) or len(p) != n
                                           for p in pieces)):
            raise ValueError(f"all_to_all_v needs {n} lists of {n} arrays (one per destination)")
        payload = max(sum(np.asarray(a).nbytes for a in p) for p in pieces)
        return self._recorded("all_to_all", payload, pairwise_all_to_all_v(pieces),
                              "pairwise-v", tag)

    # ------------------------------------------------------------------ broadcast
    def broadcast(
        self, arrays: Sequence[np.ndarray | None], root: int = 0, *, tag: str = ""
    ) -> list[np.ndarray]:
        """Every rank gets a copy of rank ``root``'s array.

        ``arrays`` has one entry per rank; only root's is used (the others may be ``None`` or
        buffers of the same shape and dtype). Chain algorithm: root sends to root+1, which
        forwards to root+2, ... (n-1 steps); every rank but the last of the chain sends M bytes,
        so the busiest link carries M (bus factor 1).
        """
        self._check_list(arrays, "broadcast", "; non-root entries may be None")
        root = self._check_rank("broadcast", "root", root)
        if arrays[root] is None:
            raise ValueError(f"broadcast: root rank {root} passed None: give the root an array")
        src = np.asarray(arrays[root])
        for r, a in enumerate(arrays):
            if a is None or r == root:
                continue
            a = np.asarray(a)
            if a.shape != src.shape or a.dtype != src.dtype:
                raise ValueError(
                    f"broadcast: rank {r} passed shape {a.shape} dtype {a.dtype} but root rank "
                    f"{root} has shape {src.shape} dtype {src.dtype}: pass None or a buffer of "
                    "the root's shape and dtype"
                )
        return self._recorded("broadcast", src.nbytes, chain_broadcast(src, root, self.size),
                              "chain", tag)

    # ------------------------------------------------------------------ point-to-point
    def send(self, array: np.ndarray, src: int, dst: int, *, tag: str = "") -> np.ndarray:
        """Send ``array`` from rank ``src`` to rank ``dst``; returns what ``dst`` receives.

        Recorded as op ``"send"``: ``src`` sends M = array.nbytes bytes in one step.
        """
        src = self._check_rank("send", "src", src)
        dst = self._check_rank("send", "dst", dst)
        if src == dst:
            raise ValueError(f"send: src and dst are both rank {src}: send to a different rank")
        a = np.asarray(array)
        sent = [0] * self.size
        sent[src] = a.nbytes
        return self._recorded("send", a.nbytes, (a.copy(), sent), "p2p", tag, steps=1)

    recv = send  # a matched send/recv pair is one call in a simulation

    # ------------------------------------------------------------------ ledger helpers
    def ledger_bytes_per_rank(self) -> tuple[int, ...]:
        """Total bytes each rank sent over the whole ledger."""
        totals = [0] * self.size
        for rec in self.ledger:
            for r, b in enumerate(rec.bytes_sent_per_rank):
                totals[r] += b
        return tuple(totals)

    def clear_ledger(self) -> None:
        """Forget all recorded collectives."""
        self.ledger.clear()


def group_of_size(group: ProcessGroup | None, size: int, *, label: str, name: str) -> ProcessGroup:
    """``group`` if given (it must be a :class:`ProcessGroup` of ``size`` ranks), else a new
    group of ``size`` ranks named ``name``; ``label`` names the degree in the message (``TP``,
    ``cp``, ``ep``, ``size``). Every layer that takes an optional group resolves it here."""
    if group is None:
        return ProcessGroup(size, name=name)
    if not isinstance(group, ProcessGroup):
        raise ValueError(f"group must be a ProcessGroup of size {label}={size}, got "
                         f"{type(group).__name__}: pass one or None")
    if group.size != size:
        raise ValueError(f"group has size {group.size} but {label}={size}: pass a ProcessGroup "
                         f"of size {size} or None")
    return group
