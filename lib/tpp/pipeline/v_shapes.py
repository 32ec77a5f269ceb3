"""V-shaped placements: two chunks per rank, stage r and stage 2P - 1 - r on rank r, so that a
microbatch goes down the ranks and back up (Qi et al. 2024, sec. 6, "ZB-V"). The first and the
last stage share rank 0, which computes the loss and immediately starts the backward.

* ``zbv``: PyTorch 2.13's ``ScheduleZBVZeroBubble`` order (zero bubble when t_F = t_B = t_W);
* ``dualpipev``: PyTorch's ``ScheduleDualPipeV`` (DeepSeek's DualPipe cut in half): overlapped
  F&B pairs of the two chunks in the steady state;
* ``zb-h2``: ZB-H2 (Qi et al. 2024, sec. 2.2): one stage per rank, more warm-up forwards
  (``2 (P - r) - 1`` on rank r) to fill the wait for the first input gradient, then I, W, F.
"""

from __future__ import annotations

from collections import deque
from itertools import repeat

from tpp.pipeline.ir import Action, Overlap, Schedule, Step
from tpp.pipeline.looped import _interleave, _run_of
from tpp.pipeline.rules import check_common

_new = tuple.__new__  # Action(...) without the Python-level __new__ of a NamedTuple


def v_stage_ranks(P: int) -> tuple[int, ...]:
    """Rank of each of the 2P stages in a V: ``0, 1, ..., P-1, P-1, ..., 1, 0``."""
    return tuple(range(P)) + tuple(reversed(range(P)))


def _check_v(name: str, ranks: int, microbatches: int, virtual: int) -> None:
    check_common(name, ranks, microbatches, virtual)
    if virtual != 2:
        raise ValueError(f"{name} places exactly two chunks per rank in a V: use virtual=2 "
                         f"(got {virtual})")


def zbv(ranks: int, microbatches: int, virtual: int = 2) -> Schedule:
    """ZB-V in ``ScheduleZBVZeroBubble``'s order. Rank r: ``2 (P - r) - 1`` forwards of chunk 0,
    r pairs (F chunk 1, F chunk 0), P - r triples (F, I, W of chunk 1), the steady state
    (F, I, W of chunk 0 then of chunk 1), a cool-down of I's and the remaining W's. Built for
    ``max(M, 2P - 1)`` microbatches; the actions of microbatches >= M are dropped."""
    _check_v("zbv", ranks, microbatches, virtual)
    P, M = ranks, microbatches
    n = max(2 * P - 1, M)
    A = Action  # built as _new(A, (stage, kind, m)): no Python-level __new__ call per action
    rows: list[list[Step]] = []
    for r in range(P):
        c0, c1 = r, 2 * P - 1 - r
        f0 = f1 = b0 = b1 = 0
        ops: list[Action] = []
        for _ in range(2 * (P - r) - 1):
            ops.append(_new(A, (c0, "F", f0)))
            f0 += 1
        for _ in range(r):
            ops += [_new(A, (c1, "F", f1)), _new(A, (c0, "F", f0))]
            f1, f0 = f1 + 1, f0 + 1
        for _ in range(P - r):
            ops += [_new(A, (c1, "F", f1)), _new(A, (c1, "I", b1)), _new(A, (c1, "W", b1))]
            f1, b1 = f1 + 1, b1 + 1
        while f1 < f0 or f0 < n:
            if f0 < n:
                ops.append(_new(A, (c0, "F", f0)))
                f0 += 1
            ops += [_new(A, (c0, "I", b0)), _new(A, (c0, "W", b0))]
            ops += [_new(A, (c1, "F", f1)), _new(A, (c1, "I", b1)), _new(A, (c1, "W", b1))]
            b0, f1, b1 = b0 + 1, f1 + 1, b1 + 1
        w0, w1 = b0, b1
        for _ in range(r):
            ops += [_new(A, (c0, "I", b0)), _new(A, (c1, "I", b1))]
            b0, b1 = b0 + 1, b1 + 1
        for _ in range(P - r):
            ops += [_new(A, (c0, "I", b0)), _new(A, (c0, "W", w0))]
            b0, w0 = b0 + 1, w0 + 1
        ops += [_new(A, (c1, "W", m)) for m in range(w1, b1)]
        ops += [_new(A, (c0, "W", m)) for m in range(w0, b0)]
        rows.append(ops if n == M else [a for a in ops if a.microbatch < M])
    return Schedule("zbv", P, M, 2, rows, stage_ranks=v_stage_ranks(P))


def dualpipev(ranks: int, microbatches: int, virtual: int = 2) -> Schedule:
    """DualPipeV in ``ScheduleDualPipeV``'s order (needs M >= 2P). Rank r with chunks
    c0 = r, c1 = 2P - 1 - r runs DeepSeek's eight steps: warm-up forwards of c0, forwards of both
    chunks, zero-bubble backwards of c1 (I now, W later), the main loop of overlapped pairs
    (F c0 & B c1, F c1 & B c0; the bottom rank's first pair not overlapped), B c1 with a pair,
    backwards of both chunks switching to I/W half-way, and the remaining W's."""
    _check_v("dualpipev", ranks, microbatches, virtual)
    P, M = ranks, microbatches
    if M < 2 * P:
        raise ValueError(f"dualpipev needs at least as many microbatches as stages, M >= 2P = "
                         f"{2 * P} (got M={M}): use M={2 * P} or fewer ranks")
    rows: list[list[Step]] = []
    for r in range(P):
        c0, c1 = r, 2 * P - 1 - r
        nf = {c0: 0, c1: 0}
        nb = {c0: 0, c1: 0}
        wq: deque[Action] = deque()  # deferred W's, oldest first
        row: list[Step] = []

        def f(c: int, nf: dict = nf) -> Action:
            m = nf[c]
            nf[c] = m + 1
            return _new(Action, (c, "F", m))

        def b(c: int, split: bool = False, nb: dict = nb, wq: deque = wq) -> Action:
            m = nb[c]
            nb[c] = m + 1
            if split:
                wq.append(_new(Action, (c, "W", m)))
                return _new(Action, (c, "I", m))
            return _new(Action, (c, "B", m))

        def w(row: list = row, wq: deque = wq) -> None:
            if wq:
                row.append(wq.popleft())

        row.extend(f(c0) for _ in range(2 * (P - r - 1)))           # 1
        for _ in range(r + 1):                                      # 2
            row += [f(c0), f(c1)]
        for _ in range(P - r - 1):                                  # 3
            row.append(b(c1, split=True))
            w()
            row.append(f(c1))
        row += _main_loop(c0, c1, nf, nb, M - 2 * P + r + 1, r == P - 1)  # 4
        for _ in range(P - r - 1):                                  # 5
            row.append(b(c1))
            row.append(_new(Overlap, (f(c1), b(c0))))
        split = False
        for i in range(r + 1):                                      # 6
            if i == (r + 1) // 2 and r % 2 == 1:
                split = True
            row.append(b(c1, split))
            if i == (r + 1) // 2 and r % 2 == 0:
                split = True
            row.append(b(c0, split))
        for _ in range(P - r - 1):                                  # 7
            w()
            row.append(b(c0, split))
        for _ in range(r + 1):                                      # 8
            w()
        rows.append(row)
    return Schedule("dualpipev", P, M, 2, rows, stage_ranks=v_stage_ranks(P))


def _main_loop(c0: int, c1: int, nf: dict, nb: dict, n: int, bottom: bool) -> list[Step]:
    """DualPipeV's step 4 on the rank of chunks c0, c1: ``n`` times the pairs (F c0 & B c1),
    (F c1 & B c0), the next microbatches of each (counted on in ``nf``, ``nb``); on the bottom
    rank the first (F c0, B c1) is not overlapped. Built without a Python call per action."""
    if n <= 0:
        return []
    runs = {}
    for c, kind, count in ((c0, "F", nf), (c1, "B", nb), (c1, "F", nf), (c0, "B", nb)):
        runs[c, kind] = _run_of(c, kind, range(count[c], count[c] + n))
        count[c] += n
    down = list(map(_new, repeat(Overlap), zip(runs[c0, "F"], runs[c1, "B"], strict=True)))
    up = list(map(_new, repeat(Overlap), zip(runs[c1, "F"], runs[c0, "B"], strict=True)))
    if bottom:
        return [runs[c0, "F"][0], runs[c1, "B"][0], up[0], *_interleave(down[1:], up[1:])]
    return _interleave(down, up)


def zb_h2(ranks: int, microbatches: int, virtual: int = 1) -> Schedule:
    """ZB-H2 (Qi et al. 2024, sec. 2.2): rank r runs ``min(2 (P - r) - 1, M)`` warm-up forwards
    (they fill the wait for its first input gradient, at the price of up to 2P - 1 activation
    sets on rank 0), then repeats I(k), W (deferred by 2r microbatches), F(next); the deferred
    W's fill the tail while the last input gradients climb to rank 0."""
    check_common("zb-h2", ranks, microbatches, virtual)
    P, M = ranks, microbatches
    rows = []
    for r in range(P):
        warm = min(2 * (P - r) - 1, M)
        row = [Action(r, "F", m) for m in range(warm)]
        n_w = 0
        for k in range(M):
            row.append(Action(r, "I", k))
            if k >= 2 * r:
                row.append(Action(r, "W", n_w))
                n_w += 1
            if warm + k < M:
                row.append(Action(r, "F", warm + k))
        row += [Action(r, "W", m) for m in range(n_w, M)]
        rows.append(row)
    return Schedule("zb-h2", P, M, 1, rows)
