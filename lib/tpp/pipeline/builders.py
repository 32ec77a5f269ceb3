"""Schedule builders: naive, GPipe, 1F1B (PipeDream-Flush), interleaved 1F1B, ZB-H1, and the
registry of every builder (looped BFS, ZB1P in :mod:`tpp.pipeline.looped`; ZB-H2, ZB-V, DualPipeV
in :mod:`tpp.pipeline.v_shapes`; DualPipe in :mod:`tpp.pipeline.dualpipe`).

All indices are 0-based. Each builder returns a :class:`~tpp.pipeline.ir.Schedule` whose
``actions[r]`` is the order in which rank ``r`` executes its operations; the simulator then
derives the timing. Constraints are checked and broken rules raise ``ValueError`` saying what to
change.

* ``naive``: one microbatch at a time through the whole pipeline (F then B on every rank, the next
  microbatch only after the previous one). Efficiency 1/P.
* ``gpipe``: all M forwards, then all M backwards (Huang et al. 2019). Every rank holds the
  activations of all M microbatches at its peak.
* ``1f1b``: PipeDream-Flush (Narayanan et al. 2021, "Memory-efficient pipeline-parallel DNN
  training", the synchronous 1F1B of PipeDream 2019 with a flush): rank r runs
  ``min(P - r - 1, M)`` warm-up forwards, then alternates one forward / one backward, then drains
  the remaining backwards. Rank r holds at most ``min(P - r, M)`` microbatches.
* ``interleaved``: Megatron-LM's interleaved 1F1B (Narayanan et al. 2021, SC21, sec. 2.2.2) with v
  model chunks per rank (global stage s on rank s mod P); microbatches go through the chunks in
  groups of P, so M must be a multiple of P. Warm-up on rank r: ``min(2 (P - r - 1) + (v - 1) P,
  v M)`` chunk-forwards, PyTorch 2.13's ``ScheduleInterleaved1F1B`` order (Megatron-LM runs all
  v M forwards first when M = P; the makespan is the same).
* ``zb-h1``: zero-bubble H1 (Qi et al. 2024, sec. 2.1): the backward is split into I (input
  gradient, on the critical path) and W (weight gradient, deferred to fill the bubbles); same
  warm-up as 1F1B, so the number of microbatches whose F has run but whose I has not stays at
  most P - r.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import repeat
from operator import add

from tpp.pipeline.dualpipe import dualpipe
from tpp.pipeline.ir import Action, Schedule, no_gc
from tpp.pipeline.looped import _actions, _interleave, _run_of, looped_bfs, zb1p
from tpp.pipeline.rules import SCHEDULES, check_common
from tpp.pipeline.v_shapes import dualpipev, zb_h2, zbv

_check_common = check_common


def naive(ranks: int, microbatches: int, virtual: int = 1) -> Schedule:
    """One microbatch at a time: F and B of microbatch m on every rank before microbatch m + 1."""
    _check_common("naive", ranks, microbatches, virtual)
    actions = [
        [Action(r, k, m) for m in range(microbatches) for k in ("F", "B")] for r in range(ranks)
    ]
    return Schedule("naive", ranks, microbatches, 1, actions)


def gpipe(ranks: int, microbatches: int, virtual: int = 1) -> Schedule:
    """GPipe (Huang et al. 2019): all forwards 0..M-1, then all backwards 0..M-1, on every rank."""
    _check_common("gpipe", ranks, microbatches, virtual)
    mbs = range(microbatches)
    actions = [_run_of(r, "F", mbs) + _run_of(r, "B", mbs) for r in range(ranks)]
    return Schedule("gpipe", ranks, microbatches, 1, actions)


def one_f_one_b(ranks: int, microbatches: int, virtual: int = 1) -> Schedule:
    """1F1B with flush (PipeDream-Flush): warm-up ``w_r = min(P - r - 1, M)`` forwards, then
    alternate F(w_r + k), B(k), then the last ``w_r`` backwards."""
    _check_common("1f1b", ranks, microbatches, virtual)
    return Schedule("1f1b", ranks, microbatches, 1, _one_f_one_b_rows(ranks, microbatches))


def _one_f_one_b_rows(P: int, M: int) -> list[list[Action]]:
    rows = []
    mbs = range(M)
    for r in range(P):
        warm = min(P - r - 1, M)
        fwd, bwd = _run_of(r, "F", mbs), _run_of(r, "B", mbs)
        rows.append(fwd[:warm] + _interleave(fwd[warm:], bwd[:M - warm]) + bwd[M - warm:])
    return rows


def _multiples_hint(m: int, p: int) -> str:
    lo, hi = (m // p) * p, (m // p + 1) * p
    return f"M = {hi} or {lo}" if lo > 0 else f"M = {hi}"


def interleaved(ranks: int, microbatches: int, virtual: int = 2) -> Schedule:
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
    fwd_base = [c * P for c in chunk_of]
    bwd_base = [(v - 1 - c) * P for c in chunk_of]
    rows = []
    with no_gc():
        for r in range(P):
            fwd = _actions(list(map(add, fwd_base, repeat(r))), "F", mb_of)
            bwd = _actions(list(map(add, bwd_base, repeat(r))), "B", mb_of)
            warm = min(2 * (P - r - 1) + (v - 1) * P, total)
            row = fwd[:warm]
            row += _interleave(fwd[warm:], bwd[:total - warm])
            row += bwd[total - warm:]
            rows.append(row)
    return Schedule("interleaved", P, M, v, rows)


def zb_h1(ranks: int, microbatches: int, virtual: int = 1) -> Schedule:
    """ZB-H1 (Qi et al. 2024, sec. 2.1): 1F1B with the backward split into I and W.

    Rank r: ``w_r = min(P - r - 1, M)`` warm-up forwards; then for k = 0..M-1 the pattern
    F(w_r + k) (while forwards remain), I(k), and W(k - r) once k >= r: rank r defers its weight
    gradients by r microbatches, so the last rank finishes the input-gradient chain early and
    runs P - 1 deferred W's while the last input gradients travel up to rank 0. Activations held
    (F started, W not done) stay at most ``min(P, M)`` on every rank, 1F1B's peak on rank 0.
    """
    _check_common("zb-h1", ranks, microbatches, virtual)
    P, M = ranks, microbatches
    rows = []
    for r in range(P):
        warm = min(P - r - 1, M)
        lag = r
        row = [Action(r, "F", m) for m in range(warm)]
        next_w = 0
        for k in range(M):
            if warm + k < M:
                row.append(Action(r, "F", warm + k))
            row.append(Action(r, "I", k))
            if k >= lag:
                row.append(Action(r, "W", next_w))
                next_w += 1
        row.extend(Action(r, "W", m) for m in range(next_w, M))
        rows.append(row)
    return Schedule("zb-h1", P, M, 1, rows)


def _registry() -> dict[str, Callable[..., Schedule]]:
    return {"naive": naive, "gpipe": gpipe, "1f1b": one_f_one_b, "interleaved": interleaved,
            "zb-h1": zb_h1, "looped-bfs": looped_bfs, "zb1p": zb1p, "zb-h2": zb_h2, "zbv": zbv,
            "dualpipev": dualpipev, "dualpipe": dualpipe}


BUILDERS: dict[str, Callable[..., Schedule]] = {}


def schedule(name: str, ranks: int, microbatches: int, virtual: int = 1) -> Schedule:
    """Build the named schedule for P = ``ranks``, M = ``microbatches``, v = ``virtual``.

    Names: ``naive``, ``gpipe``, ``1f1b``, ``interleaved``, ``zb-h1``, ``looped-bfs``,
    ``zb1p``, ``zb-h2``, ``zbv``, ``dualpipev``, ``dualpipe`` (``zb_h1``, ``zbh1``, ``1F1B``,
    ``zb-v`` ... are accepted too). Microbatches and stages are 0-based.
    """
    if not BUILDERS:
        BUILDERS.update(_registry())
    key = str(name).lower().replace("_", "-")
    key = {"zbh1": "zb-h1", "zbh2": "zb-h2", "zb-v": "zbv", "pipedream-flush": "1f1b",
           "interleaved-1f1b": "interleaved", "interleaved-zb": "zb1p",
           "interleaved-zero-bubble": "zb1p", "loopedbfs": "looped-bfs",
           "dualpipe-v": "dualpipev"}.get(key, key)
    if key not in BUILDERS:
        raise ValueError(f"unknown schedule {name!r}: use one of {', '.join(SCHEDULES)}")
    with no_gc():
        return BUILDERS[key](ranks, microbatches, virtual)
