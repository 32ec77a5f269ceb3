"""The pipeline simulator's and builders' code as it was before issue 22's speed-up (commit
f0a8fed), kept verbatim as the reference the fast paths are tested against
(tests/test_pipeline_fast.py) and timed against (bench/bench_pipeline.py)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from tpp.pipeline.builders import _check_common, _multiples_hint, _one_f_one_b_rows
from tpp.pipeline.ir import Action, Overlap, Schedule, no_gc
from tpp.pipeline.looped import rounds
from tpp.pipeline.simulate import _per_stage
from tpp.pipeline.validate import check_structure, describe_deadlock

Time = object


def run_dependencies(
    schedule: Schedule,
    t_f: Time | Sequence[Time],
    t_b: Time | Sequence[Time],
    t_w: Time | Sequence[Time],
    transfer: Time,
    overlap: Time | None = None,
    recompute: bool = False,
) -> tuple[list[tuple[int, Action | Overlap, Time, Time]], int]:
    """Core of the simulator: the timeline ``(rank, action, start, end)`` in completion order and
    the number of cross-rank dependency edges.

    Structural errors (misplaced, out-of-range, duplicate or missing actions) are detected inline
    and reported by :func:`~tpp.pipeline.validate.check_structure`'s precise diagnosis; a deadlock
    raises ``ValueError`` naming every stuck action and what it waits for. ``recompute``: each
    input-gradient backward (B or I) first re-runs its stage's forward (``+ t_f``)."""
    P, M, S = schedule.ranks, schedule.microbatches, schedule.stages
    if not (isinstance(P, int) and isinstance(M, int) and S >= 1 and M >= 1
            and len(schedule.actions) == P):
        check_structure(schedule)
    cf = _per_stage("t_f", t_f, S)
    ci = _per_stage("t_b", t_b, S)
    cw = _per_stage("t_w", t_w, S)
    if recompute:  # the backward re-runs the stage's forward first (Huang et al. 2019, 2.2)
        ci = [ci[s] + cf[s] for s in range(S)]
    cb = [ci[s] + cw[s] for s in range(S)]
    SM = S * M
    end_f: list[Time | None] = [None] * SM
    end_x: list[Time | None] = [None] * SM  # input gradient of (s, m) done: B or I
    done_w = [False] * SM
    n_i = n_w = 0
    waiters: dict[int, list[int]] = {}
    waiting_on: dict[int, str] = {}
    ptr = [0] * P
    free: list[Time] = [0 * cf[0]] * P
    timeline: list[tuple[int, Action, Time, Time]] = []
    append = timeline.append
    cross = 0
    stack = list(range(P - 1, -1, -1))
    actions = schedule.actions
    home, mirror = schedule.homes()
    home, mirror = home + [-1], mirror + [-1]  # rank of each stage; -1 past the last stage
    half = M if schedule.mirrored_from is None else schedule.mirrored_from
    last = S - 1
    try:
        while stack:
            r = stack.pop()
            row = actions[r]
            n = len(row)
            i = ptr[r]
            t0 = free[r]
            while i < n:
                a = row[i]
                if type(a) is Overlap:
                    got = _overlap_step(a, r, t0, M, SM, last, half, home, mirror, end_f,
                                        end_x, transfer, cf, cb, overlap, waiters, waiting_on)
                    if got is None:
                        break
                    start, end, woken, n_cross = got
                    cross += n_cross
                    append((r, a, start, end))
                    t0 = end
                    i += 1
                    if woken:
                        stack.extend(woken)
                    continue
                s, k, m = a
                hm = home if m < half else mirror
                if hm[s] != r or s < 0 or m < 0 or m >= M:
                    raise _Malformed
                idx = s * M + m
                start = t0
                if k == "F":
                    if end_f[idx] is not None:
                        raise _Malformed
                    if s:
                        d = end_f[idx - M]
                        if d is None:
                            waiters.setdefault(idx - M, []).append(r)
                            waiting_on[r] = f"{s - 1}F{m}"
                            break
                        if hm[s - 1] != r:
                            d = d + transfer
                            cross += 1
                        if d > start:
                            start = d
                    end = start + cf[s]
                    end_f[idx] = end
                    woken = waiters.pop(idx, None)
                elif k == "W":
                    if done_w[idx]:
                        raise _Malformed
                    d = end_x[idx]
                    if d is None:
                        waiters.setdefault(idx + SM, []).append(r)
                        waiting_on[r] = f"{s}I{m}"
                        break
                    if d > start:
                        start = d
                    end = start + cw[s]
                    done_w[idx] = True
                    n_w += 1
                    woken = None
                elif k == "B" or k == "I":
                    if end_x[idx] is not None:
                        raise _Malformed
                    d = end_f[idx]
                    if d is None:
                        waiters.setdefault(idx, []).append(r)
                        waiting_on[r] = f"{s}F{m}"
                        break
                    if d > start:
                        start = d
                    if s < last:
                        d = end_x[idx + M]
                        if d is None:
                            waiters.setdefault(idx + M + SM, []).append(r)
                            waiting_on[r] = (f"the input gradient of stage {s + 1} "
                                             f"({s + 1}B{m} or {s + 1}I{m})")
                            break
                        if hm[s + 1] != r:
                            d = d + transfer
                            cross += 1
                        if d > start:
                            start = d
                    if k == "I":
                        end = start + ci[s]
                        n_i += 1
                    else:
                        end = start + cb[s]
                    end_x[idx] = end
                    woken = waiters.pop(idx + SM, None)
                else:
                    raise _Malformed
                append((r, a, start, end))
                t0 = end
                i += 1
                if woken:
                    stack.extend(woken)
            ptr[r] = i
            free[r] = t0
    except (_Malformed, TypeError, ValueError, IndexError) as exc:
        check_structure(schedule)
        raise ValueError(f"malformed schedule {schedule.name!r}: {exc!r}") from exc
    if None in end_f or None in end_x or n_i != n_w:
        check_structure(schedule)
    stuck = {r: (actions[r][ptr[r]], waiting_on.get(r, "?")) for r in range(P)
             if ptr[r] < len(actions[r])}
    if stuck:
        check_structure(schedule)
        raise ValueError(describe_deadlock(schedule, stuck))
    return timeline, cross


class _Malformed(Exception):
    """Internal: the fast path met a structural error; the full check names it."""


def _overlap_step(a, r, t0, M, SM, last, half, home, mirror, end_f, end_x, transfer, cf, cb,
                  overlap, waiters, waiting_on):
    """One overlapped F&B pair: it starts when the rank is free and both halves' inputs have
    arrived, and both halves end together after ``overlap`` (default: F's time + B's time).
    Returns ``(start, end, woken ranks, cross-rank edges)`` or ``None`` if it must wait."""
    (sf, kf, mf), (sb, kb, mb) = a
    if kf != "F" or kb != "B" or not (0 <= mf < M and 0 <= mb < M):
        raise _Malformed
    hf = home if mf < half else mirror
    hb = home if mb < half else mirror
    if hf[sf] != r or hb[sb] != r:
        raise _Malformed
    fi, bi = sf * M + mf, sb * M + mb
    if end_f[fi] is not None or end_x[bi] is not None:
        raise _Malformed
    start, cross = t0, 0
    if sf:
        d = end_f[fi - M]
        if d is None:
            waiters.setdefault(fi - M, []).append(r)
            waiting_on[r] = f"{sf - 1}F{mf}"
            return None
        if hf[sf - 1] != r:
            d, cross = d + transfer, cross + 1
        if d > start:
            start = d
    d = end_f[bi]
    if d is None:
        waiters.setdefault(bi, []).append(r)
        waiting_on[r] = f"{sb}F{mb}"
        return None
    if d > start:
        start = d
    if sb < last:
        d = end_x[bi + M]
        if d is None:
            waiters.setdefault(bi + M + SM, []).append(r)
            waiting_on[r] = f"the input gradient of stage {sb + 1} ({sb + 1}B{mb})"
            return None
        if hb[sb + 1] != r:
            d, cross = d + transfer, cross + 1
        if d > start:
            start = d
    end = start + (cf[sf] + cb[sb] if overlap is None else overlap)
    end_f[fi] = end
    end_x[bi] = end
    woken = waiters.pop(fi, None)
    other = waiters.pop(bi + SM, None)
    if other:
        woken = other if woken is None else woken + other
    return start, end, woken, cross



def one_f_one_b_ops(P: int, v: int, M: int, r: int, warmup: int, per_round: int,
                    zero_bubble: bool) -> list[Action]:
    """Rank r's order: ``warmup`` chunk-forwards, then one forward and one backward (and, with
    ``zero_bubble``, one W once r backwards have run), then the remaining backwards (and W's).
    Forward k visits local chunk ``(k // per_round) mod v``; backward k (counted from the end of
    the warm-up) visits the chunks in reverse."""
    total = v * M

    def fwd_stage(k: int) -> int:
        return ((k // per_round) % v) * P + r

    def bwd_stage(k: int) -> int:
        return (v - 1 - ((k - warmup) // per_round) % v) * P + r

    nxt: dict[str, defaultdict[int, int]] = {k: defaultdict(int) for k in "FBW"}

    def take(kind: str, stage: int) -> int:
        m = nxt[kind][stage]
        nxt[kind][stage] = m + 1
        return m

    back = "I" if zero_bubble else "B"
    ops: list[Action] = []
    bwd_ids: list[int] = []
    n_w = 0
    for k in range(total + warmup):  # warm-up, steady (F + B), cool-down (B only)
        if k < total:
            s = fwd_stage(k)
            ops.append(Action(s, "F", take("F", s)))
        if k < warmup:
            continue
        s = bwd_stage(k)
        ops.append(Action(s, back, take("B", s)))
        bwd_ids.append(k)
        if zero_bubble and k - warmup >= r:
            s = bwd_stage(bwd_ids[n_w])
            ops.append(Action(s, "W", take("W", s)))
            n_w += 1
    while zero_bubble and n_w < len(bwd_ids):
        s = bwd_stage(bwd_ids[n_w])
        ops.append(Action(s, "W", take("W", s)))
        n_w += 1
    return ops



def interleaved_reference(ranks: int, microbatches: int, virtual: int = 2) -> Schedule:
    """Megatron's interleaved 1F1B (Narayanan et al. 2021, SC21): v chunks per rank.

    Rank r owns global stages ``r, r + P, ..., r + (v-1) P``. Its k-th chunk-forward is microbatch
    ``(k // (P v)) P + k mod P`` on local chunk ``(k mod P v) // P``; backwards visit the chunks in
    reverse. Warm-up is ``min(2 (P - r - 1) + (v - 1) P, v M)`` chunk-forwards (all ``v M`` when
    M = P), then one forward / one backward, then the remaining backwards. With v = 1 this is
    plain 1F1B. Requires M to be a multiple of P (Megatron's rule).
    """
    _check_common("interleaved", ranks, microbatches, virtual)
    P, M, v = ranks, microbatches, virtual
    if M % P != 0:
        raise ValueError(
            f"interleaved 1F1B needs microbatches ({M}) to be a multiple of ranks ({P}): "
            f"use {_multiples_hint(M, P)}"
        )
    if v == 1:
        return Schedule("interleaved", P, M, 1, _one_f_one_b_rows(P, M))
    total = v * M
    group = P * v
    # k-th chunk-op of a rank: local chunk (k mod P v) // P, microbatch (k // P v) P + k mod P
    chunk_of = [(k % group) // P for k in range(total)]
    mb_of = [(k // group) * P + k % P for k in range(total)]
    rows = []
    with no_gc():
        for r in range(P):
            fwd = [Action(c * P + r, "F", m) for c, m in zip(chunk_of, mb_of, strict=True)]
            bwd = [Action((v - 1 - c) * P + r, "B", m)
                   for c, m in zip(chunk_of, mb_of, strict=True)]
            warm = min(2 * (P - r - 1) + (v - 1) * P, total)
            row = fwd[:warm]
            for k in range(total - warm):
                row.append(fwd[warm + k])
                row.append(bwd[k])
            row.extend(bwd[total - warm:])
            rows.append(row)
    return Schedule("interleaved", P, M, v, rows)




def zb1p_reference(P: int, M: int, v: int) -> Schedule:
    """ZB1P as built before the speed-up."""
    per_round = rounds(P, M, "zb1p")
    rows = [one_f_one_b_ops(P, v, M, r, min((v - 1) * per_round + (P - 1 - r), v * M),
                            per_round, True) for r in range(P)]
    return Schedule("zb1p", P, M, v, rows)


def interleaved_pytorch_reference(P: int, M: int, v: int) -> Schedule:
    per_round = rounds(P, M, "interleaved")
    rows = [one_f_one_b_ops(P, v, M, r, min((v - 1) * per_round + 2 * (P - 1 - r), v * M),
                            per_round, False) for r in range(P)]
    return Schedule("interleaved", P, M, v, rows)


def simulate_reference(schedule, t_f=1.0, t_b=2.0, t_w=0, transfer=0, overlap=None,
                       recompute=False):
    """(timeline, cross, makespan, busy) the way simulate() computed them before."""
    with no_gc():
        timeline, cross = run_dependencies(schedule, t_f, t_b, t_w, transfer, overlap, recompute)
    zero = 0 * transfer
    busy = [zero] * schedule.ranks
    makespan = zero
    for r, _a, s, e in timeline:
        busy[r] = busy[r] + (e - s)
        if e > makespan:
            makespan = e
    return timeline, cross, makespan, busy
