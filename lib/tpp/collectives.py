"""A simulated process group of N ranks over numpy arrays, with a ledger of every collective.

Each rank's data is one numpy array; a collective takes a list with one array per rank and
returns a list with one array per rank. The ring algorithms really move chunks between
neighbouring ranks, step by step, so the bytes in the ledger are counted, not assumed.

Closed forms (Patarasuk & Yuan 2009; NCCL tests' "bus bandwidth" definitions), with ``n`` ranks
and a payload of ``M`` bytes:

=================  ==================  ==========  =========================
op                 bytes sent per rank  ring steps  bus factor (busbw/algbw)
=================  ==================  ==========  =========================
``all_reduce``     2 (n-1)/n * M        2 (n-1)     2 (n-1)/n
``reduce_scatter`` (n-1)/n * M          n-1         (n-1)/n
``all_gather``     (n-1)/n * M          n-1         (n-1)/n
``all_to_all``     (n-1)/n * M          n-1         (n-1)/n
``broadcast``      M (all but one rank) n-1         1
``send``           M (the sender)       1           1
=================  ==================  ==========  =========================

``M`` is one rank's input for all_reduce, reduce_scatter, all_to_all and broadcast, and the
gathered *output* for all_gather (so that all-reduce = reduce-scatter + all-gather on the same M).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

__all__ = [
    "OPS",
    "REDUCE_OPS",
    "CollectiveRecord",
    "ProcessGroup",
    "Transfer",
    "alpha_beta_time",
    "bus_factor",
    "ring_bytes_per_rank",
    "ring_steps",
]

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


def bus_factor(op: str, n: int) -> Fraction:
    """Exact bus-bandwidth factor of a collective over ``n`` ranks, as a Fraction.

    NCCL tests define bus bandwidth = algorithm bandwidth x factor, where algbw = M / t and the
    factor is the share of the payload ``M`` each rank must send on the busiest link of a ring
    (NCCL tests, PERFORMANCE.md; Patarasuk & Yuan 2009)::

        all_reduce                          2 (n-1) / n
        reduce_scatter, all_gather, all_to_all  (n-1) / n
        broadcast, send                     1

    ``n = 1`` gives 0 for the first four (nothing moves); broadcast and send keep NCCL's
    definition 1 (:func:`ring_bytes_per_rank` returns 0 for a group of one).
    """
    name = _normalise_op(op)
    n = _check_n(n)
    if name == "all_reduce":
        return Fraction(2 * (n - 1), n)
    if name in ("reduce_scatter", "all_gather", "all_to_all"):
        return Fraction(n - 1, n)
    return Fraction(1)


def ring_steps(op: str, n: int) -> int:
    """Number of sequential communication steps of the ring algorithm over ``n`` ranks.

    all_reduce: 2 (n-1) (reduce-scatter phase then all-gather phase, n-1 steps each);
    reduce_scatter, all_gather, all_to_all, broadcast (chain): n-1; send: 1 (0 when n = 1).
    Each step pays the latency alpha once in :func:`alpha_beta_time`.
    """
    name = _normalise_op(op)
    n = _check_n(n)
    if n == 1:
        return 0
    if name == "all_reduce":
        return 2 * (n - 1)
    if name == "send":
        return 1
    return n - 1


def _check_payload(payload_bytes: int) -> int:
    if isinstance(payload_bytes, bool) or not isinstance(payload_bytes, (int, np.integer)):
        raise ValueError(
            f"payload_bytes={payload_bytes!r} must be an integer number of bytes: "
            "pass e.g. array.nbytes"
        )
    if payload_bytes < 0:
        raise ValueError(f"payload_bytes={payload_bytes} is negative: pass a size >= 0 in bytes")
    return int(payload_bytes)


def ring_bytes_per_rank(op: str, payload_bytes: int, n: int) -> int:
    """Bytes each rank sends under the ring algorithm: ``bus_factor(op, n) * payload_bytes``.

    all_reduce: 2 (n-1)/n * M; reduce_scatter / all_gather / all_to_all: (n-1)/n * M;
    broadcast and send: M (sent by every rank of the chain but the last, or by the sender);
    0 for a group of one. Exact when ``n`` divides ``M``; otherwise the chunks are uneven, the
    per-rank counts differ by a few elements, and this returns the ceiling of the exact value
    (the *mean* over ranks of the ledger's counts equals the exact Fraction).
    """
    payload = _check_payload(payload_bytes)
    n = _check_n(n)
    if n == 1:
        return 0
    return math.ceil(bus_factor(op, n) * payload)


def alpha_beta_time(
    op: str, payload_bytes: int, n: int, bandwidth: float, latency: float = 0.0
) -> float:
    """Time in seconds of a ring collective under the alpha-beta model (Hockney; Thakur 2005).

        t = steps(op, n) * alpha + bus_factor(op, n) * M / B

    with ``alpha = latency`` in seconds per step, ``M = payload_bytes`` and ``B = bandwidth`` in
    bytes/s *per direction* of one link (e.g. H100 NVLink 4: 450e9, not the 900 GB/s
    bidirectional total). All-reduce: ``2 (n-1) alpha + 2 (n-1)/n * M / B``. A group of one
    takes 0 s.
    """
    payload = _check_payload(payload_bytes)
    n = _check_n(n)
    name = _normalise_op(op)
    if not bandwidth > 0:
        raise ValueError(
            f"bandwidth={bandwidth!r} must be > 0 bytes/s per direction: e.g. 450e9 for NVLink 4"
        )
    if not latency >= 0:
        raise ValueError(f"latency={latency!r} must be >= 0 seconds per step")
    if n == 1:
        return 0.0
    return float(
        ring_steps(name, n) * float(latency) + float(bus_factor(name, n)) * payload / bandwidth
    )


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
    def _check_arrays(self, arrays: Sequence[np.ndarray], op: str) -> list[np.ndarray]:
        if isinstance(arrays, np.ndarray) or not isinstance(arrays, Sequence):
            raise ValueError(
                f"{op} expects a list with one array per rank ({self.size} arrays), got "
                f"{type(arrays).__name__}: wrap the arrays in a list"
            )
        if len(arrays) != self.size:
            raise ValueError(
                f"{op} got {len(arrays)} arrays for a group of size {self.size}: pass exactly "
                f"one array per rank ({self.size})"
            )
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
        reduce = self._reducer(op)
        n = self.size
        shape, dtype = arrs[0].shape, arrs[0].dtype
        item = dtype.itemsize
        chunks = [[c.copy() for c in np.array_split(a.ravel(), n)] for a in arrs]
        sent = [0] * n
        for phase in ("reduce_scatter", "all_gather"):
            for s in range(n - 1):
                # all ranks send at once: collect the messages, then deliver them
                msgs = []
                for r in range(n):
                    c = (r - s) % n if phase == "reduce_scatter" else (r + 1 - s) % n
                    msgs.append((r, (r + 1) % n, c, chunks[r][c].copy()))
                for src, dst, c, data in msgs:
                    if phase == "reduce_scatter":
                        chunks[dst][c] = reduce(chunks[dst][c], data)
                    else:
                        chunks[dst][c] = data
                    sent[src] += data.size * item
                    if trace is not None:
                        trace.append(Transfer(phase, s, src, dst, c, data.size * item))
        out = [np.concatenate(ch).reshape(shape).astype(dtype, copy=False) for ch in chunks]
        self._record("all_reduce", arrs[0].nbytes, sent, ring_steps("all_reduce", n), "ring", tag)
        return out

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
        n = self.size
        ax = self._check_axis(axis, arrs[0].ndim, "reduce_scatter")
        length = arrs[0].shape[ax]
        if length % n:
            raise ValueError(
                f"reduce_scatter: axis {ax} has length {length}, not divisible by the group size "
                f"{n}: pad that axis to a multiple of {n} or use a group size that divides "
                f"{length}"
            )
        item = arrs[0].dtype.itemsize
        chunks = [[c.copy() for c in np.split(a, n, axis=ax)] for a in arrs]
        sent = [0] * n
        for s in range(n - 1):
            msgs = [(r, (r + 1) % n, (r - s - 1) % n) for r in range(n)]
            msgs = [(src, dst, c, chunks[src][c].copy()) for src, dst, c in msgs]
            for src, dst, c, data in msgs:
                chunks[dst][c] = reduce(chunks[dst][c], data)
                sent[src] += data.size * item
                if trace is not None:
                    trace.append(Transfer("reduce_scatter", s, src, dst, c, data.size * item))
        out = [chunks[r][r] for r in range(n)]
        self._record(
            "reduce_scatter", arrs[0].nbytes, sent, ring_steps("reduce_scatter", n), "ring", tag
        )
        return out

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
        n = self.size
        ax = self._check_axis(axis, arrs[0].ndim, "all_gather")
        item = arrs[0].dtype.itemsize
        held: list[dict[int, np.ndarray]] = [{r: arrs[r].copy()} for r in range(n)]
        sent = [0] * n
        for s in range(n - 1):
            msgs = [(r, (r + 1) % n, (r - s) % n) for r in range(n)]
            msgs = [(src, dst, c, held[src][c]) for src, dst, c in msgs]
            for src, dst, c, data in msgs:
                held[dst][c] = data.copy()
                sent[src] += data.size * item
                if trace is not None:
                    trace.append(Transfer("all_gather", s, src, dst, c, data.size * item))
        out = [np.concatenate([held[r][c] for c in range(n)], axis=ax) for r in range(n)]
        self._record(
            "all_gather", n * arrs[0].nbytes, sent, ring_steps("all_gather", n), "ring", tag
        )
        return out

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
        n = self.size
        ax = self._check_axis(axis, arrs[0].ndim, "all_to_all")
        length = arrs[0].shape[ax]
        if length % n:
            raise ValueError(
                f"all_to_all: axis {ax} has length {length}, not divisible by the group size "
                f"{n}: pad that axis to a multiple of {n}"
            )
        pieces = [np.split(a, n, axis=ax) for a in arrs]
        out = [np.concatenate([pieces[src][r] for src in range(n)], axis=ax) for r in range(n)]
        sent = [sum(pieces[r][d].nbytes for d in range(n) if d != r) for r in range(n)]
        self._record(
            "all_to_all", arrs[0].nbytes, sent, ring_steps("all_to_all", n), "pairwise", tag
        )
        return out

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
        if isinstance(arrays, np.ndarray) or not isinstance(arrays, Sequence):
            raise ValueError(
                f"broadcast expects a list with one entry per rank ({self.size}): wrap the "
                "arrays in a list"
            )
        if len(arrays) != self.size:
            raise ValueError(
                f"broadcast got {len(arrays)} arrays for a group of size {self.size}: pass "
                f"exactly one entry per rank ({self.size}; non-root entries may be None)"
            )
        n = self.size
        if isinstance(root, bool) or not isinstance(root, (int, np.integer)) or not 0 <= root < n:
            raise ValueError(f"broadcast: root={root!r} is not a rank of this group: use 0..{n-1}")
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
        sent = [0] * n
        for k in range(n - 1):  # chain root -> root+1 -> ... -> root-1
            sent[(root + k) % n] += src.nbytes
        self._record("broadcast", src.nbytes, sent, ring_steps("broadcast", n), "chain", tag)
        return [src.copy() for _ in range(n)]

    # ------------------------------------------------------------------ point-to-point
    def send(self, array: np.ndarray, src: int, dst: int, *, tag: str = "") -> np.ndarray:
        """Send ``array`` from rank ``src`` to rank ``dst``; returns what ``dst`` receives.

        Recorded as op ``"send"``: ``src`` sends M = array.nbytes bytes in one step.
        """
        n = self.size
        for name, r in (("src", src), ("dst", dst)):
            if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or not 0 <= r < n:
                raise ValueError(f"send: {name}={r!r} is not a rank of this group: use 0..{n-1}")
        if src == dst:
            raise ValueError(f"send: src and dst are both rank {src}: send to a different rank")
        a = np.asarray(array)
        sent = [0] * n
        sent[src] = a.nbytes
        self._record("send", a.nbytes, sent, 1, "p2p", tag)
        return a.copy()

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
