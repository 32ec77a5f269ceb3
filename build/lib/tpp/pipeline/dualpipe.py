"""DeepSeek's bidirectional DualPipe and its V-shaped half, DualPipeV (DeepSeek-AI 2024,
"DeepSeek-V3 Technical Report", sec. 3.2.1; github.com/deepseek-ai/DualPipe).

**DualPipe** (P even, M even, M >= 2P): every rank holds two copies of the model's stage
parameters, stage ``r`` for microbatches fed in at rank 0 (the first half, ``m < M/2``) and stage
``P - 1 - r`` for microbatches fed in at rank P - 1 (``m >= M/2``; the schedule's
``mirrored_from``). Each rank runs the eight steps of DeepSeek's reference implementation:
warm-up forwards of its own direction, forwards of both directions, zero-bubble backwards (I,
then W later), the main loop of overlapped F&B pairs (one microbatch's forward with another's
backward, of opposite directions), and a drain that again splits backwards into I and W.

**DualPipeV** (PyTorch's ``ScheduleDualPipeV``): the same idea cut in half, P ranks and 2P
stages placed in a V (rank r holds stages r and 2P - 1 - r), every microbatch down and back up.
"""

from __future__ import annotations

from collections import deque

from tpp.pipeline.ir import Action, Overlap, Schedule, Step


def _check(name: str, P: int, M: int, virtual: int, need_v: int) -> None:
    for label, value in (("ranks", P), ("microbatches", M), ("virtual", virtual)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{label} must be an int >= 1 (got {value!r})")
    if virtual != need_v:
        raise ValueError(f"{name} places {need_v} stage(s) per rank, so virtual must be "
                         f"{need_v} (got {virtual})")


def dualpipe(ranks: int, microbatches: int, virtual: int = 1) -> Schedule:
    """DualPipe for P = ``ranks`` (even) and M = ``microbatches`` (even, >= 2P), M/2 fed from
    each end. Overlapped pairs are :class:`~tpp.pipeline.ir.Overlap` actions."""
    _check("dualpipe", ranks, microbatches, virtual, 1)
    P, M = ranks, microbatches
    if P % 2 or M % 2 or M < 2 * P:
        raise ValueError(
            f"dualpipe needs an even number of ranks and an even number of microbatches "
            f"M >= 2P (got P={P}, M={M}): use P={P + P % 2}, M={max(2 * (P + P % 2), M + M % 2)}"
        )
    half_m, nh = M // 2, P // 2
    rows: list[list[Step]] = []
    for r in range(P):
        h = min(r, P - 1 - r)
        second = int(r >= nh)
        middle = r in (nh - 1, nh)
        count = {"F": [0, 0], "B": [0, 0]}
        wq: deque[Action] = deque()
        row: list[Step] = []

        def nxt(kind: str, phase: int, r: int = r, second: int = second,
                count: dict = count) -> tuple[int, int]:
            d = phase ^ second  # direction: 0 = fed in at rank 0, 1 = fed in at rank P-1
            i = count[kind][d]
            count[kind][d] += 1
            return (r if d == 0 else P - 1 - r), (i if d == 0 else half_m + i)

        def fwd(phase: int, row: list = row, nxt=nxt) -> Action:
            s, m = nxt("F", phase)
            return Action(s, "F", m)

        def bwd(phase: int, zb: bool = False, nxt=nxt, wq: deque = wq) -> Action:
            s, m = nxt("B", phase)
            if zb:
                wq.append(Action(s, "W", m))
                return Action(s, "I", m)
            return Action(s, "B", m)

        row.extend(fwd(0) for _ in range(2 * (nh - h - 1)))          # 1: nF0
        for _ in range(h + 1):                                       # 2: nF0F1
            row.append(fwd(0))
            row.append(fwd(1))
        for _ in range(nh - h - 1):                                  # 3: nB1W1F1
            row.append(bwd(1, zb=True))
            row.append(wq.popleft())
            row.append(fwd(1))
        for i in range(half_m - P + h + 1):                          # 4: nF0B1F1B0
            if i == 0 and middle:  # not overlapped, to shrink the bubble (DeepSeek's note)
                row.append(fwd(0))
                row.append(bwd(1))
            else:
                row.append(Overlap(fwd(0), bwd(1)))
            row.append(Overlap(fwd(1), bwd(0)))
        for _ in range(nh - h - 1):                                  # 5: nB1F1B0
            row.append(bwd(1))
            row.append(Overlap(fwd(1), bwd(0)))
        zb = False
        for i in range(h + 1):                                       # 6: nB1B0
            if i == (h + 1) // 2 and h % 2 == 1:
                zb = True
            row.append(bwd(1, zb))
            if i == (h + 1) // 2 and h % 2 == 0:
                zb = True
            row.append(bwd(0, zb))
        for _ in range(nh - h - 1):                                  # 7: nWB0
            row.append(wq.popleft())
            row.append(bwd(0, zb=True))
        row.extend(wq.popleft() for _ in range(h + 1))               # 8: nW
        assert not wq
        rows.append(row)
    return Schedule("dualpipe", P, M, 1, rows, mirrored_from=half_m)
