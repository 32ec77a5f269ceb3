"""Looped schedules (v chunks per rank, stage s on rank s mod P) in PyTorch 2.13's per-rank order.

* ``looped-bfs``: breadth-first (Lamy-Poirier 2023, arXiv:2211.05953): every forward of the
  rank's first chunk, then of its next chunk, ...; then the backwards chunk by chunk in reverse,
  microbatches in reverse order (``torch.distributed.pipelining.ScheduleLoopedBFS``).
* ``interleaved``: Megatron's interleaved 1F1B (Narayanan et al. 2021, SC21, sec. 2.2) in the order
  of ``ScheduleInterleaved1F1B``: warm-up ``min((v - 1) P + 2 (P - 1 - r), v M)`` chunk-forwards.
* ``zb1p``: interleaved zero bubble (Qi et al. 2024, sec. 3; PyTorch's
  ``ScheduleInterleavedZeroBubble``): warm-up ``min((v - 1) P + (P - 1 - r), v M)``, the backward
  split into I and W, rank r running its first W after r input gradients and then one W per I.

Microbatches go through the chunks in rounds of ``M / max(1, M // P)`` (PyTorch's rule; M must be
a multiple of the number of rounds ``max(1, M // P)``).
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import repeat

from tpp.pipeline.ir import Action, Schedule
from tpp.pipeline.rules import check_common


def rounds(P: int, M: int, name: str) -> int:
    """Microbatches per round, ``M / max(1, M // P)``; raises if M is not a multiple of the
    number of rounds (PyTorch's rule for interleaved schedules)."""
    n_rounds = max(1, M // P)
    if M % n_rounds:
        ok = [m for m in range(max(1, M - P), M + P + 1) if m % max(1, m // P) == 0]
        near = min(ok, key=lambda m: (abs(m - M), m))
        raise ValueError(
            f"{name} needs microbatches ({M}) to be a multiple of the number of rounds "
            f"max(1, M // P) = {n_rounds}: use M = {near} (or a multiple of P = {P})"
        )
    return M // n_rounds


def one_f_one_b_ops(P: int, v: int, M: int, r: int, warmup: int, per_round: int,
                    zero_bubble: bool) -> list[Action]:
    """Rank r's order: ``warmup`` chunk-forwards, then one forward and one backward (and, with
    ``zero_bubble``, one W once r backwards have run), then the remaining backwards (and W's).
    Forward k visits local chunk ``(k // per_round) mod v``; backward k (counted from the end of
    the warm-up) visits the chunks in reverse.

    Each chunk sees its microbatches in order, so forward k is microbatch
    ``(k // (v P')) P' + k mod P'`` (P' = ``per_round``), backward k likewise, and the j-th W
    repeats the j-th backward's stage and microbatch; the row is then cut from these three
    sequences with slices (no per-action bookkeeping)."""
    total = v * M
    fwd_stage = [((k // per_round) % v) * P + r for k in range(total)]
    bwd_stage = [(v - 1 - (k // per_round) % v) * P + r for k in range(total)]
    mb = [(k // (per_round * v)) * per_round + k % per_round for k in range(total)]
    f = _actions(fwd_stage, "F", mb)
    back = _actions(bwd_stage, "I" if zero_bubble else "B", mb)
    steady = total - warmup  # backwards that run beside a forward
    ops: list[Action] = f[:warmup]
    if not zero_bubble:
        ops += _interleave(f[warmup:], back[:steady])
        ops += back[steady:]
        return ops
    w = _actions(bwd_stage, "W", mb)
    lag = min(r, steady)
    ops += _interleave(f[warmup:warmup + lag], back[:lag])
    ops += _interleave(f[warmup + lag:], back[lag:steady], w[:steady - lag])
    lag = min(max(r, steady), total)  # cool-down: backwards alone until r have run, then
    ops += back[steady:lag]           # one backward and one W
    if lag < total:
        ops += _interleave(back[lag:], w[lag - r:total - r])
    ops += w[max(0, total - r):]
    return ops


_new_tuple = tuple.__new__


def _actions(stages: list[int], kind: str, microbatches: list[int]) -> list[Action]:
    """``[Action(s, kind, m) for s, m in zip(stages, microbatches)]``, built without a Python
    call per action."""
    return list(map(_new_tuple, repeat(Action), zip(stages, repeat(kind), microbatches)))


def _run_of(stage: int, kind: str, microbatches: range) -> list[Action]:
    """``[Action(stage, kind, m) for m in microbatches]``, built without a Python call per
    action."""
    return list(map(_new_tuple, repeat(Action),
                    zip(repeat(stage), repeat(kind), microbatches)))


def _interleave(*seqs: list[Action]) -> list[Action]:
    """``a0, b0, c0, a1, b1, c1, ...`` from equally long lists."""
    out: list[Action] = [None] * sum(map(len, seqs))  # type: ignore[list-item]
    n = len(seqs)
    for j, seq in enumerate(seqs):
        out[j::n] = seq
    return out


def _build(name: str, P: int, M: int, v: int, warm: Callable[[int, int], int],
           zero_bubble: bool) -> Schedule:
    per_round = rounds(P, M, name)
    rows = [one_f_one_b_ops(P, v, M, r, min(warm(r, per_round), v * M), per_round, zero_bubble)
            for r in range(P)]
    return Schedule(name, P, M, v, rows)


def interleaved_pytorch(P: int, M: int, v: int) -> Schedule:
    """Interleaved 1F1B in ``ScheduleInterleaved1F1B``'s order (warm-up ``(v - 1) P' + 2 (P - 1
    - r)`` with P' microbatches per round)."""
    return _build("interleaved", P, M, v, lambda r, pr: (v - 1) * pr + 2 * (P - 1 - r), False)


def zb1p(ranks: int, microbatches: int, virtual: int = 2) -> Schedule:
    """ZB1P, interleaved zero bubble (Qi et al. 2024; ``ScheduleInterleavedZeroBubble``):
    warm-up ``(v - 1) P' + (P - 1 - r)`` chunk-forwards, then F, I and (after r I's) W."""
    check_common("zb1p", ranks, microbatches, virtual)
    P, M, v = ranks, microbatches, virtual
    return _build("zb1p", P, M, v, lambda r, pr: (v - 1) * pr + (P - 1 - r), True)


def looped_bfs(ranks: int, microbatches: int, virtual: int = 2) -> Schedule:
    """Looped BFS (``ScheduleLoopedBFS``): rank r runs F of all M microbatches on chunk 0, then
    on chunk 1, ...; then B chunk by chunk from the last, microbatches M-1 down to 0."""
    check_common("looped-bfs", ranks, microbatches, virtual)
    P, M, v = ranks, microbatches, virtual
    rows = []
    mbs, back = range(M), range(M - 1, -1, -1)
    for r in range(P):
        stages = range(r, P * v, P)
        row: list[Action] = []
        for s in stages:
            row += _run_of(s, "F", mbs)
        for s in reversed(stages):
            row += _run_of(s, "B", back)
        rows.append(row)
    return Schedule("looped-bfs", P, M, v, rows)
