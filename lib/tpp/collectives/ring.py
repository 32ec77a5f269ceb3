"""The step-by-step algorithms behind the simulated collectives: chunks really move.

Each function takes the ranks' (already checked) arrays, one per rank, and returns
``(outputs, sent)``: one output array per rank and the bytes each rank sent, counted message by
message. :class:`~tpp.collectives.ProcessGroup` validates the inputs, calls these and records
the ledger. Ring algorithms after Patarasuk & Yuan 2009; all-to-all as a pairwise exchange;
broadcast as a chain.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .ledger import Transfer

__all__ = [
    "chain_broadcast",
    "pairwise_all_to_all",
    "ring_all_gather",
    "ring_all_reduce",
    "ring_reduce_scatter",
]

Reduce = Callable[[np.ndarray, np.ndarray], np.ndarray]


def ring_all_reduce(arrs: list[np.ndarray], reduce: Reduce,
                    trace: list[Transfer] | None = None) -> tuple[list[np.ndarray], list[int]]:
    """Ring all-reduce: a reduce-scatter phase then an all-gather phase, n-1 steps each.

    Each rank cuts its flattened array into n chunks (``np.array_split``, so sizes differ by at
    most one element).

    * Reduce-scatter phase, steps s = 0..n-2: rank r sends chunk (r - s) mod n to rank r+1,
      which reduces it into its own copy of that chunk. Afterwards rank r holds the fully
      reduced chunk (r + 1) mod n.
    * All-gather phase, steps s = 0..n-2: rank r sends chunk (r + 1 - s) mod n to rank r+1,
      which overwrites its copy.
    """
    n = len(arrs)
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
    return out, sent


def ring_reduce_scatter(arrs: list[np.ndarray], ax: int, reduce: Reduce,
                        trace: list[Transfer] | None = None
                        ) -> tuple[list[np.ndarray], list[int]]:
    """Ring reduce-scatter along axis ``ax`` (its length divisible by n, checked by the caller).

    Steps s = 0..n-2: rank r sends chunk (r - s - 1) mod n to rank r+1, which reduces it into
    its copy; after n-1 steps rank r holds the reduced chunk r.
    """
    n = len(arrs)
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
    return [chunks[r][r] for r in range(n)], sent


def ring_all_gather(arrs: list[np.ndarray], ax: int, trace: list[Transfer] | None = None
                    ) -> tuple[list[np.ndarray], list[int]]:
    """Ring all-gather along axis ``ax``: steps s = 0..n-2, rank r forwards chunk (r - s) mod n
    to rank r+1."""
    n = len(arrs)
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
    return out, sent


def pairwise_all_to_all(arrs: list[np.ndarray], ax: int) -> tuple[list[np.ndarray], list[int]]:
    """Rank r keeps slice r of its array and sends slice d to rank d directly."""
    n = len(arrs)
    pieces = [np.split(a, n, axis=ax) for a in arrs]
    out = [np.concatenate([pieces[src][r] for src in range(n)], axis=ax) for r in range(n)]
    sent = [sum(pieces[r][d].nbytes for d in range(n) if d != r) for r in range(n)]
    return out, sent


def pairwise_all_to_all_v(pieces: Sequence[Sequence[np.ndarray]]
                          ) -> tuple[list[list[np.ndarray]], list[int]]:
    """Variable sizes: rank r keeps ``pieces[r][r]`` and sends ``pieces[r][d]`` to rank d
    directly; rank d receives the list ``[pieces[0][d], ..., pieces[n-1][d]]``."""
    n = len(pieces)
    out = [[np.array(pieces[src][r], copy=True) for src in range(n)] for r in range(n)]
    sent = [sum(np.asarray(pieces[r][d]).nbytes for d in range(n) if d != r) for r in range(n)]
    return out, sent


def chain_broadcast(src: np.ndarray, root: int, n: int) -> tuple[list[np.ndarray], list[int]]:
    """Chain root -> root+1 -> ... -> root-1: every rank but the last of the chain sends M."""
    sent = [0] * n
    for k in range(n - 1):
        sent[(root + k) % n] += src.nbytes
    return [src.copy() for _ in range(n)], sent
