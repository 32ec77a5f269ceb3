"""Event simulator of a pipeline schedule with per-op costs and point-to-point transfers.

Each rank executes its list in order. An operation starts at the later of (a) the moment its rank
finishes the previous operation and (b) the moment each dependency is available, where a
dependency produced on another rank becomes available ``p2p_latency + activation_bytes /
p2p_bandwidth`` after it finished (no link contention is modelled). Because every rank's order is
fixed, this start time is the longest path into the operation in the DAG formed by the rank orders
and the dependencies; the simulator computes it in one pass over the actions (a rank blocked on a
missing dependency is woken when that dependency completes), O(number of actions) and with the
arithmetic of the inputs: pass ``int`` or ``fractions.Fraction`` costs and every time is exact.

Costs (``t_f``, ``t_b``, ``t_w``) are per **stage** (per model chunk with interleaving: a rank
with v chunks spends v * t_f on the forward of one microbatch), either one scalar for all stages
or a sequence of length S = P * v. ``t_b`` is the input-gradient time (op ``I``) and ``t_w`` the
weight-gradient time (op ``W``); a full backward ``B`` costs ``t_b + t_w``. With the default
``t_w = 0`` a B costs ``t_b``.

``recompute=True`` models activation re-materialisation as GPipe publishes it (Huang et al.
2019, sec. 2.2): the forward keeps only each stage's input, and the backward first re-runs the
stage's forward, so every B (or I) costs ``t_f`` more and the memory a rank holds is counted as
stored stage inputs plus one stage's activations while a backward runs
(:meth:`SimResult.activation_bytes_over_time`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from numbers import Real

from tpp.pipeline.ir import Action, Overlap, Schedule, no_gc
from tpp.pipeline.memory import ActivationMemory
from tpp.pipeline.structure import check_structure, describe_deadlock

Time = Real  # int, Fraction or float


def _exact(x: object) -> bool:
    return isinstance(x, int | Fraction) and not isinstance(x, bool)


def _ratio(a: Time, b: Time) -> Time:
    """a / b, exact (Fraction) when both are int or Fraction."""
    if _exact(a) and _exact(b):
        return Fraction(a) / Fraction(b)
    return a / b


def _per_stage(name: str, value: Time | Sequence[Time], stages: int) -> list[Time]:
    if isinstance(value, Sequence) and not isinstance(value, str):
        if len(value) != stages:
            raise ValueError(
                f"{name} has {len(value)} entries but the schedule has {stages} stages: give one "
                f"cost per global stage (P * v) or a single scalar"
            )
        values = list(value)
    else:
        values = [value] * stages
    for x in values:
        if not isinstance(x, Real) or isinstance(x, bool) or x < 0:
            raise ValueError(f"{name} must be a non-negative number (got {x!r})")
    return values


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
    and reported by :func:`~tpp.pipeline.structure.check_structure`'s precise diagnosis; a deadlock
    raises ``ValueError`` naming every stuck action and what it waits for. ``recompute``: each
    input-gradient backward (B or I) first re-runs its stage's forward (``+ t_f``)."""
    trace, cross, _busy, _free = _run(schedule, t_f, t_b, t_w, transfer, overlap, recompute)
    return trace.timeline(), cross


def _run(schedule: Schedule, t_f, t_b, t_w, transfer, overlap, recompute):
    """:func:`run_dependencies` plus ``busy[r]``, the sum of ``end - start`` over rank r's
    operations in its order (what :func:`simulate` reports), accumulated in the same pass, and
    ``free[r]``, the end of rank r's last operation. The timeline comes back as a
    :class:`_Trace` (each operation's start, the order the ranks ran in), built on demand.

    One pass over the actions; every action is looked up by ``s * M + m`` in flat lists, and
    ``wait[j]`` holds the ranks blocked on event j (F of j < SM, input gradient of j - SM)."""
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
    wait: list[list[int] | None] = [None] * (2 * SM)
    n_i = n_w = 0
    waiting_on: dict[int, str] = {}  # what an overlapped pair waits for (a plain action's
    # missing input is found again from the final state, :func:`_plain_waits`)
    ptr = [0] * P  # actions rank r has run: len(starts[r]), the index of its next one
    zero = 0 * cf[0]
    free: list[Time] = [zero] * P
    busy: list[Time] = [0 * transfer] * P
    starts: list[list[Time]] = [[] for _ in range(P)]  # rank r's starts, in its row's order
    runs: list[int] = []  # rank, first, end of each stretch a rank ran, flat
    stack = list(range(P - 1, -1, -1))
    actions = schedule.actions
    home, mirror = schedule.homes()
    home, mirror = home + [-1], mirror + [-1]  # rank of each stage; -1 past the last stage
    half = M if schedule.mirrored_from is None else schedule.mirrored_from
    last = S - 1
    overlap_t = Overlap
    has_overlap = [overlap_t in map(type, row) for row in actions]  # else no check per action
    # where (s, m) sits in the flat lists, per rank: s * M when rank r runs stage s (of a
    # microbatch before / from ``half``), else None (a misplaced action), and None for the
    # stage S past the last (a stage beyond is an IndexError; a negative one is checked)
    nothing = [None] * (S + 1)
    base_home = [[s * M if home[s] == r else None for s in range(S)] + [None]
                 for r in range(P)]
    base_mirror = ([[s * M if mirror[s] == r else None for s in range(S)] + [None]
                    for r in range(P)] if schedule.mirrored_from is not None
                   else [nothing] * P)  # no mirror: m >= half = M is out of range
    # whether the input of stage s's F (from s - 1) / of its backward (from s + 1) crosses
    # ranks: home[s - 1] != home[s] (the same with the mirror, which maps r to P - 1 - r)
    cross_in = [s > 0 and home[s - 1] != home[s] for s in range(S)]
    cross_out = [s < last and home[s + 1] != home[s] for s in range(S)]
    try:
        while stack:
            r = stack.pop()
            row = actions[r]
            t0 = free[r]
            b = busy[r]
            ov = has_overlap[r]
            lo = ptr[r]
            done = starts[r]
            append = done.append
            bh, bm = base_home[r], base_mirror[r]
            it = iter(row)
            it.__setstate__(lo)  # a list iterator resumes at index lo (islice would skip)
            for a in it:
                if ov and type(a) is overlap_t:
                    got = _overlap_step(a, r, t0, M, SM, last, half, home, mirror, end_f,
                                        end_x, transfer, cf, cb, overlap, wait, waiting_on)
                    if got is None:
                        break
                    start, end, woken = got
                    append(start)
                    b = b + (end - start)
                    t0 = end
                    if woken:
                        stack.extend(woken)
                    continue
                s, k, m = a
                if m < half:
                    idx = bh[s]
                    if idx is None or m < 0 or s < 0:
                        raise _Malformed
                else:
                    idx = bm[s]
                    if idx is None or m >= M or s < 0:
                        raise _Malformed
                idx += m
                start = t0
                if k == "F":
                    if end_f[idx] is not None:
                        raise _Malformed
                    if s:
                        d = end_f[idx - M]
                        if d is None:
                            w = wait[idx - M]  # r waits (woken in blocking order)
                            if w is None:
                                wait[idx - M] = [r]
                            else:
                                w.append(r)
                            break
                        if cross_in[s]:
                            d = d + transfer
                        if d > start:
                            start = d
                    end = start + cf[s]
                    end_f[idx] = end
                    woken = wait[idx]
                elif k == "W":
                    if done_w[idx]:
                        raise _Malformed
                    d = end_x[idx]
                    if d is None:
                        w = wait[idx + SM]  # r waits (woken in blocking order)
                        if w is None:
                            wait[idx + SM] = [r]
                        else:
                            w.append(r)
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
                        w = wait[idx]  # r waits (woken in blocking order)
                        if w is None:
                            wait[idx] = [r]
                        else:
                            w.append(r)
                        break
                    if d > start:
                        start = d
                    if s < last:
                        d = end_x[idx + M]
                        if d is None:
                            w = wait[idx + M + SM]  # r waits (woken in blocking order)
                            if w is None:
                                wait[idx + M + SM] = [r]
                            else:
                                w.append(r)
                            break
                        if cross_out[s]:
                            d = d + transfer
                        if d > start:
                            start = d
                    if k == "I":
                        end = start + ci[s]
                        n_i += 1
                    else:
                        end = start + cb[s]
                    end_x[idx] = end
                    woken = wait[idx + SM]
                else:
                    raise _Malformed
                append(start)
                b = b + (end - start)
                t0 = end
                if woken:  # an event completes once: its list is never read again
                    stack.extend(woken)
            i = len(done)
            if i > lo:
                runs += (r, lo, i)
            ptr[r] = i
            free[r] = t0
            busy[r] = b
    except (_Malformed, TypeError, ValueError, IndexError) as exc:
        check_structure(schedule)
        raise ValueError(f"malformed schedule {schedule.name!r}: {exc!r}") from exc
    if None in end_f or None in end_x or n_i != n_w:
        check_structure(schedule)
    stuck = {r: (actions[r][ptr[r]], _waits_for(
        waiting_on.get(r) if type(actions[r][ptr[r]]) is Overlap
        else _plain_waits(actions[r][ptr[r]], M, end_f))) for r in range(P)
             if ptr[r] < len(actions[r])}
    if stuck:
        check_structure(schedule)
        raise ValueError(describe_deadlock(schedule, stuck))
    trace = _Trace([row[:] for row in actions], starts, runs,
                   {"F": cf, "B": cb, "I": ci, "W": cw}, overlap)
    # every F of a stage s > 0 and every input gradient of a stage s < last ran once, each
    # over one cross-rank edge when cross_in[s] / cross_out[s] (for all M microbatches)
    cross = M * (sum(cross_in) + sum(cross_out))
    return trace, cross, busy, free


class _Trace:
    """What a simulation needs to list its timeline: each rank's actions (a copy of the rows)
    and the start of each, the stretches (rank, first, end; flat) of its row each rank ran, in
    the order the simulator ran them, and the costs. The end of an operation is its start plus
    its cost, the very sum the simulator computed (so every time is identical), and the
    timeline is only built when it is read (:attr:`SimResult.timeline`): the makespan, busy
    times and p2p counts a planner reads need none of its tuples."""

    __slots__ = ("rows", "starts", "runs", "costs", "overlap")

    def __init__(self, rows, starts, runs, costs, overlap):
        self.rows, self.starts, self.runs = rows, starts, runs
        self.costs, self.overlap = costs, overlap

    def timeline(self) -> list[tuple[int, Action | Overlap, Time, Time]]:
        """``(rank, action, start, end)`` of every operation in completion order."""
        out: list[tuple[int, Action | Overlap, Time, Time]] = []
        append = out.append
        costs, overlap = self.costs, self.overlap
        cf, cb = costs["F"], costs["B"]
        runs = self.runs
        for j in range(0, len(runs), 3):
            r, lo, hi = runs[j:j + 3]
            row, st = self.rows[r], self.starts[r]
            for i in range(lo, hi):
                a, t = row[i], st[i]
                if type(a) is Overlap:
                    (sf, _, _), (sb, _, _) = a
                    append((r, a, t, t + (cf[sf] + cb[sb] if overlap is None else overlap)))
                else:
                    append((r, a, t, t + costs[a[1]][a[0]]))
        return out


def _plain_waits(a: Action, M: int, end_f: list) -> tuple[int, str, int]:
    """The event a stuck (plain) action waits for: the first of its inputs not done, in the
    order :func:`_run` checks them (at a deadlock nothing more completes, so it is the one its
    rank last blocked on). ``X``: the input gradient, B or I."""
    s, k, m = a
    if k == "F":
        return (s - 1, "F", m)
    if k == "W":
        return (s, "I", m)
    return (s, "F", m) if end_f[s * M + m] is None else (s + 1, "X", m)


def _waits_for(event: tuple[int, str, int] | str | None) -> str:
    """The event a stuck rank waits for, in words (``X``: the input gradient, B or I)."""
    if event is None:
        return "?"
    if isinstance(event, str):
        return event
    s, k, m = event
    if k == "X":
        return f"the input gradient of stage {s} ({s}B{m} or {s}I{m})"
    return f"{s}{k}{m}"


def _block(wait: list, j: int, r: int) -> None:
    """Rank r waits for event j (woken, in blocking order, when j completes)."""
    if wait[j] is None:
        wait[j] = [r]
    else:
        wait[j].append(r)


class _Malformed(Exception):
    """Internal: the fast path met a structural error; the full check names it."""


def _overlap_step(a, r, t0, M, SM, last, half, home, mirror, end_f, end_x, transfer, cf, cb,
                  overlap, wait, waiting_on):
    """One overlapped F&B pair: it starts when the rank is free and both halves' inputs have
    arrived, and both halves end together after ``overlap`` (default: F's time + B's time).
    Returns ``(start, end, woken ranks)`` or ``None`` if it must wait."""
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
    start = t0
    if sf:
        d = end_f[fi - M]
        if d is None:
            _block(wait, fi - M, r)
            waiting_on[r] = f"{sf - 1}F{mf}"
            return None
        if hf[sf - 1] != r:
            d = d + transfer
        if d > start:
            start = d
    d = end_f[bi]
    if d is None:
        _block(wait, bi, r)
        waiting_on[r] = f"{sb}F{mb}"
        return None
    if d > start:
        start = d
    if sb < last:
        d = end_x[bi + M]
        if d is None:
            _block(wait, bi + M + SM, r)
            waiting_on[r] = f"the input gradient of stage {sb + 1} ({sb + 1}B{mb})"
            return None
        if hb[sb + 1] != r:
            d = d + transfer
        if d > start:
            start = d
    end = start + (cf[sf] + cb[sb] if overlap is None else overlap)
    end_f[fi] = end
    end_x[bi] = end
    woken, other = wait[fi], wait[bi + SM]
    wait[fi] = wait[bi + SM] = None
    if other:
        woken = other if woken is None else woken + other
    return start, end, woken


@dataclass
class SimResult(ActivationMemory):
    """Outcome of :func:`simulate`. Times are in the units of the costs given.

    * ``timeline``: ``(rank, action, start, end)`` for every operation;
    * ``makespan``: end of the last operation;
    * ``busy[r]``, ``idle[r] = makespan - busy[r]``;
    * ``bubble_fraction = 1 - sum(busy) / (P * makespan)``: idle share of total rank-time;
    * ``bubble_ratio = sum(idle) / sum(busy)``: bubble time relative to ideal compute time;
    * ``peak_inflight[r]``: the largest number of (stage, microbatch) activation sets rank r holds
      at once. A set is acquired when its F **starts** and released when its last backward piece
      **ends** (B; or W when the backward is split, since W still reads the stored input);
      releases at an instant are counted before acquisitions at the same instant. With
      interleaving a set is one chunk's activations (1/v of the rank's layers).
    * ``activation_bytes_over_time(rank, stage_bytes, input_bytes)`` and
      ``peak_activation_bytes(...)``: the same sets weighted in bytes; with ``recompute`` a set
      keeps only the stage's input and a rank also holds one stage's activations while a
      backward re-materialises them (Huang et al. 2019, sec. 2.3: O(N + (L/K)(N/M))).
    * ``p2p_messages``, ``p2p_bytes``: cross-rank transfers (activations forward, gradients
      backward), ``activation_bytes`` each.
    """

    schedule: Schedule
    trace: _Trace = field(repr=False, compare=False)
    makespan: Time
    busy: list[Time]
    p2p_messages: int
    p2p_bytes: int | float
    recompute: bool = False
    _inflight_cache: dict = field(default_factory=dict, repr=False)
    _timeline: list | None = field(default=None, repr=False, compare=False)

    @property
    def timeline(self) -> list[tuple[int, Action | Overlap, Time, Time]]:
        """``(rank, action, start, end)`` of every operation, in the order they completed
        (built from the trace on first reading, then kept)."""
        if self._timeline is None:
            self._timeline = self.trace.timeline()
        return self._timeline

    def _fields(self) -> tuple:  # what equality and the repr show, the timeline included
        return (("schedule", self.schedule), ("timeline", self.timeline),
                ("makespan", self.makespan), ("busy", self.busy),
                ("p2p_messages", self.p2p_messages), ("p2p_bytes", self.p2p_bytes),
                ("recompute", self.recompute))

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return (self._fields(), self._inflight_cache) == (other._fields(),
                                                          other._inflight_cache)

    def __repr__(self) -> str:
        return "SimResult(" + ", ".join(f"{k}={v!r}" for k, v in self._fields()) + ")"

    @property
    def ranks(self) -> int:
        return self.schedule.ranks

    @property
    def idle(self) -> list[Time]:
        return [self.makespan - b for b in self.busy]

    @property
    def bubble_fraction(self) -> Time:
        total = self.makespan * self.ranks
        if total == 0:
            return 0
        return 1 - _ratio(sum(self.busy), total)

    @property
    def bubble_ratio(self) -> Time:
        busy = sum(self.busy)
        if busy == 0:
            return 0
        return _ratio(self.makespan * self.ranks - busy, busy)

    def rank_timeline(self, rank: int) -> list[tuple[Action, Time, Time]]:
        """Rank ``rank``'s operations as ``(action, start, end)`` sorted by start."""
        rows = [(a, s, e) for r, a, s, e in self.timeline if r == rank]
        rows.sort(key=lambda x: x[1])
        return rows


def simulate(
    schedule: Schedule,
    t_f: Time | Sequence[Time] = 1.0,
    t_b: Time | Sequence[Time] = 2.0,
    t_w: Time | Sequence[Time] = 0,
    p2p_latency: Time = 0,
    p2p_bandwidth: Time | None = None,
    activation_bytes: int = 0,
    overlap: Time | None = None,
    recompute: bool = False,
) -> SimResult:
    """Simulate ``schedule``: every rank runs its actions in order, each as soon as its
    dependencies (plus the transfer time when they come from another rank) and its rank allow.

    ``t_f``, ``t_b``, ``t_w``: per-stage (per model chunk) times of F, I (input gradient) and W
    (weight gradient); B costs ``t_b + t_w``. ``p2p_latency`` (time) and ``p2p_bandwidth``
    (bytes per time unit; ``None`` means infinite) with ``activation_bytes`` per message give the
    transfer time ``p2p_latency + activation_bytes / p2p_bandwidth`` between ranks. Pass ints or
    Fractions for exact results. ``overlap`` is the time of one overlapped F&B pair
    (:class:`~tpp.pipeline.ir.Overlap`); ``None`` charges F's time plus B's time (no gain).
    ``recompute=True``: every backward (B or I) re-runs its stage's forward first, ``t_f``
    more (GPipe's re-materialisation, Huang et al. 2019, sec. 2.3; see the module docstring).
    Raises ``ValueError`` on an invalid schedule (see :func:`tpp.pipeline.validate`).
    """
    if overlap is not None and (not isinstance(overlap, Real) or isinstance(overlap, bool)
                                or overlap < 0):
        raise ValueError(f"overlap must be a non-negative number or None (got {overlap!r})")
    for name, x in (("p2p_latency", p2p_latency), ("activation_bytes", activation_bytes)):
        if not isinstance(x, Real) or isinstance(x, bool) or x < 0:
            raise ValueError(f"{name} must be a non-negative number (got {x!r})")
    transfer: Time = p2p_latency if p2p_latency != 0 else 0
    if p2p_bandwidth is not None:
        if not isinstance(p2p_bandwidth, Real) or not p2p_bandwidth > 0:
            raise ValueError(
                f"p2p_bandwidth must be > 0 bytes per time unit (got {p2p_bandwidth!r}): "
                f"use None for an infinitely fast link"
            )
        transfer = transfer + _ratio(activation_bytes, p2p_bandwidth)
    with no_gc():
        trace, cross, busy, free = _run(schedule, t_f, t_b, t_w, transfer, overlap,
                                        bool(recompute))
    makespan: Time = 0 * transfer  # the last end: each rank's ends never decrease
    for t in free:
        if t > makespan:
            makespan = t
    return SimResult(schedule, trace, makespan, busy, cross, cross * activation_bytes,
                     recompute=bool(recompute))
