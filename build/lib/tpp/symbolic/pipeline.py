"""SymPy derivations of pipeline makespans and bubbles, from each schedule's critical path.

Conventions (the literature uses both; we always say which):

* **bubble fraction** (idle share of total rank-time): ``1 - busy / (P * makespan)``, e.g.
  GPipe's ``(P-1)/(M+P-1)`` (Huang et al. 2019);
* **bubble ratio** (bubble time relative to ideal compute time): ``idle / busy``, e.g.
  ``(P-1)/M`` for GPipe/1F1B and ``(P-1)/(v M)`` for interleaved 1F1B (Narayanan et al. 2021,
  SC21, sec. 2.2).

Costs are per stage: ``t_F`` forward, ``t_B`` backward (for ``zb-h1`` only its input-gradient
part, ``t_W`` the weight-gradient part). With interleaving, ``t_F`` and ``t_B`` are per model
chunk (a rank's whole share of the model costs ``v t_F`` forward), which is the simulator's
convention (:func:`tpp.pipeline.simulate`). Each makespan is the length of a critical path written
as segments ``(what, time)``; the tests check them against the simulator exactly.
"""

from __future__ import annotations

from fractions import Fraction
from functools import cache

import sympy as sp

P, M, v = sp.symbols("P M v", positive=True, integer=True)
t_F, t_B, t_W = sp.symbols("t_F t_B t_W", nonnegative=True)
t_FB = sp.Symbol("t_FB", nonnegative=True)  # one overlapped F&B pair (DualPipe's "F&B")

SYMBOLS = {"P": P, "M": M, "v": v, "t_F": t_F, "t_B": t_B, "t_W": t_W, "t_FB": t_FB}


def _key(name: str) -> str:
    key = name.lower().replace("_", "-")
    if key not in ("naive", "gpipe", "1f1b", "interleaved", "zb-h1"):
        raise ValueError(
            f"unknown schedule {name!r}: use one of naive, gpipe, 1f1b, interleaved, zb-h1"
        )
    return key


def critical_path(name: str) -> list[tuple[str, sp.Expr]]:
    """Segments of a critical path of schedule ``name`` (uniform costs, free transfers).

    * naive: M times the trip of one microbatch, P forwards then P backwards.
    * gpipe: fill (microbatch 0 through stages 0..P-2), the last stage's M forwards and
      M backwards back to back, drain (backward of microbatch M-1 through stages P-2..0).
    * 1f1b: the same fill and drain around the last stage, which alternates F and B for M
      microbatches without waiting (its next forward is ready before its backward ends).
    * interleaved: fill through the P-1 first stages, then the last rank runs all of its
      v M chunk-forwards and v M chunk-backwards without a gap, then drain through P-1 stages.
    * zb-h1 (valid for M >= P): the longest of three paths, each a lower bound that some rank
      meets. (a) Through the last rank: fill, its M forwards, M input-gradients and the M - P
      weight-gradients it runs before its last I (it defers P - 1 of them), the last input
      gradient up P - 1 ranks, and rank 0's final W. (b) Rank 0: its head wait of P - 1
      input-gradient times (nothing can fill it: no I has run yet), then all its own
      M (t_F + t_B + t_W) of work. (c) The last rank: the fill, then all its work without a gap.
      Segments are labelled (a), (b), (c); :func:`makespan` takes their ``Max``.
      For M < P see :func:`zb_h1_critical_paths_any_m`.
    """
    key = _key(name)
    if key == "naive":
        return [("M trips of one microbatch: P forwards", M * P * t_F),
                ("... and P backwards", M * P * t_B)]
    if key == "gpipe":
        return [("fill: microbatch 0 through stages 0..P-2", (P - 1) * t_F),
                ("last stage: M forwards", M * t_F),
                ("last stage: M backwards", M * t_B),
                ("drain: backward of microbatch M-1 through stages P-2..0", (P - 1) * t_B)]
    if key == "1f1b":
        return [("fill: microbatch 0 through stages 0..P-2", (P - 1) * t_F),
                ("last stage: M forward/backward pairs, no gap", M * (t_F + t_B)),
                ("drain: backward of microbatch M-1 through stages P-2..0", (P - 1) * t_B)]
    if key == "interleaved":
        return [("fill: microbatch 0 through stages 0..P-2", (P - 1) * t_F),
                ("last rank: v M chunk forward/backward pairs, no gap", v * M * (t_F + t_B)),
                ("drain: backward of microbatch M-1 through stages P-2..0", (P - 1) * t_B)]
    return [("(a) fill: microbatch 0 through stages 0..P-2", (P - 1) * t_F),
            ("(a) last rank: M forwards and M input-gradients", M * (t_F + t_B)),
            ("(a) last rank: the M-P weight-gradients not deferred", (M - P) * t_W),
            ("(a) last input gradient up P-1 ranks", (P - 1) * t_B),
            ("(a) rank 0's last weight-gradient", t_W),
            ("(b) rank 0: head wait for its first input gradient", (P - 1) * t_B),
            ("(b) rank 0: all its work", M * (t_F + t_B + t_W)),
            ("(c) fill: microbatch 0 through stages 0..P-2", (P - 1) * t_F),
            ("(c) last rank: all its work, no gap", M * (t_F + t_B + t_W))]


@cache
def makespan(name: str) -> sp.Expr:
    """Makespan of schedule ``name``: the sum of its critical-path segments (see
    :func:`critical_path`); for zb-h1 the ``Max`` of its three paths, written as the common
    work ``M (t_F + t_B + t_W)`` plus ``(P - 1) Max(...)`` of the per-path excesses."""
    segments = critical_path(name)
    if _key(name) != "zb-h1":
        return sp.factor(sp.expand(sum(t for _, t in segments)))
    work = M * (t_F + t_B + t_W)
    excess = []
    for path in ("(a)", "(b)", "(c)"):
        length = sum(t for label, t in segments if label.startswith(path))
        excess.append(sp.factor(sp.expand((length - work) / (P - 1))))
    return work + (P - 1) * sp.Max(*excess)


@cache
def busy_per_rank(name: str) -> sp.Expr:
    """Compute time of one rank: M (t_F + t_B) (+ M t_W for zb-h1; v M chunks if interleaved)."""
    key = _key(name)
    if key == "interleaved":
        return v * M * (t_F + t_B)
    if key == "zb-h1":
        return M * (t_F + t_B + t_W)
    return M * (t_F + t_B)


@cache
def bubble_time(name: str) -> sp.Expr:
    """Idle time of one rank (the same on every rank for these schedules): makespan - busy."""
    return sp.simplify(makespan(name) - busy_per_rank(name))


@cache
def bubble_fraction(name: str) -> sp.Expr:
    """Idle share of total rank-time, ``1 - P busy / (P makespan)`` (GPipe's convention)."""
    return sp.factor(sp.simplify(1 - busy_per_rank(name) / makespan(name)))


@cache
def bubble_ratio(name: str) -> sp.Expr:
    """Bubble time relative to ideal compute time, ``idle / busy`` (Megatron's convention)."""
    return sp.factor(sp.simplify(bubble_time(name) / busy_per_rank(name)))


def seed1_interleaved_bubble() -> sp.Expr:
    """The interleaved bubble **as stated in the TP/PP lecture, sec. 3.4**: (1/v) (P-1)/(M+P-1).

    It is neither convention: the share of rank-time is (P-1)/(v M + P - 1) and the ratio to
    ideal time is (P-1)/(v M); kept here so that the chapters can compare it with both.
    """
    return (P - 1) / (v * (M + P - 1))


def evaluate(expr: sp.Expr, **values: int | Fraction) -> int | Fraction:
    """Substitute ``P=..., M=..., t_F=...`` (names of :data:`SYMBOLS`) and return an exact
    ``int`` or ``Fraction`` (floats are refused: use Fractions for exact comparisons)."""
    subs = {}
    for k, x in values.items():
        if k not in SYMBOLS:
            raise ValueError(f"unknown symbol {k!r}: use one of {', '.join(SYMBOLS)}")
        if isinstance(x, float):
            raise ValueError(f"{k}={x!r} is a float: pass an int or fractions.Fraction")
        subs[SYMBOLS[k]] = sp.Rational(x.numerator, x.denominator) if isinstance(
            x, Fraction) else sp.Integer(x)
    out = sp.sympify(expr.xreplace(subs))
    if not out.is_Rational:
        missing = sorted(str(s) for s in out.free_symbols)
        raise ValueError(f"expression still depends on {', '.join(missing)}: give their values")
    return int(out) if out.is_Integer else Fraction(int(out.p), int(out.q))


def zb_h1_critical_paths_any_m() -> list[tuple[str, sp.Expr]]:
    """The three critical paths of ZB-H1 for **every** M >= 1 (:func:`critical_path` assumes
    M >= P). With fewer microbatches than ranks, rank r still defers its W's by r microbatches, so
    the paths change where M and P meet:

    * (a) fill, the last rank's M forwards and M input-gradients, the ``max(M - P, 0)``
      weight-gradients it runs before its last I, the last input gradient up P - 1 ranks, rank
      0's final W;
    * (b) rank 0: its first input gradient arrives after ``max(M, P) t_F + (P - 1) t_B`` (its M
      forwards, or microbatch 0's trip through all P stages when M < P); then all its
      ``M (t_B + t_W)`` of backward work without a gap;
    * (c) fill, the last rank's M forwards and M input-gradients, the last input gradient climbs
      ``max(P - M, 0)`` ranks to rank ``min(M, P) - 1``, which then runs its M deferred W's.

    For M >= P they are the paths (a), (b), (c) of :func:`critical_path`; the tests check
    ``Max`` of the three against the simulator for P <= 16, M <= 64.
    """
    K = sp.Max(M, P)
    return [("(a) fill, last rank's M forward/input-gradient pairs", (M + P - 1) * t_F + M * t_B),
            ("(a) weight-gradients the last rank runs before its last I", sp.Max(M - P, 0) * t_W),
            ("(a) last input gradient up P-1 ranks, rank 0's last W", (P - 1) * t_B + t_W),
            ("(b) rank 0: its first input gradient arrives", K * t_F + (P - 1) * t_B),
            ("(b) rank 0: all its backward work", M * (t_B + t_W)),
            ("(c) fill, last rank's M forward/input-gradient pairs", (M + P - 1) * t_F + M * t_B),
            ("(c) last input gradient up to rank min(M, P)-1", sp.Max(P - M, 0) * t_B),
            ("(c) that rank's M deferred weight-gradients", M * t_W)]


def zb_h1_makespan_any_m() -> sp.Expr:
    """ZB-H1's makespan for every M >= 1: the ``Max`` of the three paths of
    :func:`zb_h1_critical_paths_any_m`. Equals :func:`makespan` ("zb-h1") when M >= P."""
    segs = zb_h1_critical_paths_any_m()
    return sp.Max(*(sum(t for label, t in segs if label.startswith(path))
                    for path in ("(a)", "(b)", "(c)")))


def qi2023_zb_h1_bubble_time() -> sp.Expr:
    """ZB-H1's per-rank bubble as stated by Qi et al. 2024, sec. 2.1: (P-1)(t_F + t_B - t_W).

    It agrees with :func:`bubble_time` ("zb-h1"), ``(P-1) Max(t_F + t_B - t_W, t_B, t_F)``,
    exactly when t_W <= min(t_F, t_B); otherwise rank 0's unfillable head wait (P-1) t_B or the
    last rank's fill (P-1) t_F is longer.
    """
    return (P - 1) * (t_F + t_B - t_W)


# --- the makespan derived from a schedule's dependency graph -----------------------------------

_BASIS = ("F", "I", "W", "O")  # coordinates of a linear form: counts of t_F, t_B, t_W, overlap


def _cost_vector(step: object) -> tuple[int, int, int, int]:
    kind = step.kind
    if kind == "F":
        return (1, 0, 0, 0)
    if kind == "I":
        return (0, 1, 0, 0)
    if kind == "W":
        return (0, 0, 1, 0)
    if kind == "B":
        return (0, 1, 1, 0)
    return (0, 0, 0, 1)  # an overlapped F&B pair


def _prune(forms: set[tuple[int, ...]]) -> frozenset[tuple[int, ...]]:
    """Keep the forms no other form dominates coefficient-wise (exact for costs >= 0)."""
    if len(forms) <= 1:
        return frozenset(forms)
    ordered = sorted(forms, key=sum, reverse=True)
    kept: list[tuple[int, ...]] = []
    for f in ordered:
        f0, f1, f2, f3 = f
        for g0, g1, g2, g3 in kept:
            if g0 >= f0 and g1 >= f1 and g2 >= f2 and g3 >= f3:
                break
        else:
            kept.append(f)
    return frozenset(kept)


def makespan_forms(schedule: object, zero: tuple[bool, ...] = (False,) * 4,
                   pair_is_sum: bool = False, recompute: bool = False) -> frozenset:
    """The makespan of ``schedule`` as a set of linear forms over (t_F, t_B, t_W, overlap):
    the longest path into every action, each kept as the coefficient vectors that are not
    dominated. ``zero[i]`` drops coordinate i (a cost that is exactly 0); ``pair_is_sum``
    charges an overlapped pair t_F + t_B + t_W (fewer coordinates, smaller fronts);
    ``recompute`` adds one t_F to every B and I (and to a pair charged as a sum; a pair with
    its own ``overlap`` time keeps it, as in the simulator)."""
    from tpp.pipeline.ir import Overlap
    from tpp.pipeline.simulate import run_dependencies

    # the simulator's processing order is a topological order of the dependency graph
    timeline, _ = run_dependencies(schedule, 1, 1, 1, 0, None)
    M, S = schedule.microbatches, schedule.stages
    end_f: dict[int, frozenset] = {}
    end_x: dict[int, frozenset] = {}
    last_on: dict[int, frozenset] = {}
    empty = frozenset({(0, 0, 0, 0)})
    overall: set[tuple[int, ...]] = set()

    def cost(step: object) -> tuple[int, ...]:
        vec = _cost_vector(step)
        if pair_is_sum and vec[3]:
            vec = (1 + recompute, 1, 1, 0)
        elif recompute and step.kind in ("B", "I"):
            vec = (vec[0] + 1, *vec[1:])
        return tuple(0 if z else c for c, z in zip(vec, zero, strict=True))

    for r, step, _s, _e in timeline:
        halves = step.expand() if type(step) is Overlap else (step,)
        preds: set[tuple[int, ...]] = set(last_on.get(r, empty))
        for s, k, m in halves:
            idx = s * M + m
            if k == "F" and s:
                preds |= end_f[idx - M]
            elif k in ("B", "I"):
                preds |= end_f[idx]
                if s < S - 1:
                    preds |= end_x[idx + M]
            elif k == "W":
                preds |= end_x[idx]
        c = cost(step)
        ends = _prune({tuple(a + b for a, b in zip(f, c, strict=True)) for f in preds})
        for s, k, m in halves:
            if k == "F":
                end_f[s * M + m] = ends
            elif k in ("B", "I"):
                end_x[s * M + m] = ends
        last_on[r] = ends
        overall |= ends
    return _prune(overall)


def makespan_from_schedule(schedule: object, t_f: sp.Expr = t_F, t_b: sp.Expr = t_B,
                           t_w: sp.Expr = 0, overlap: sp.Expr | None = None,
                           recompute: bool = False) -> sp.Expr:
    """Exact makespan of ``schedule`` (free transfers) as a SymPy expression in the costs.

    Derived from the schedule's dependency graph, not from a hand-written critical path: each
    action ends at its cost plus the latest end among its predecessors (the previous action on
    its rank and the actions it waits for, :func:`tpp.pipeline.dependencies`). An end time is kept
    as the set of linear forms in (t_F, t_B, t_W, overlap) that no other form dominates
    coefficient-wise, so the result is ``Max`` of a few forms and equals
    :func:`tpp.pipeline.simulate`'s makespan for any non-negative costs substituted.

    ``t_f``, ``t_b``, ``t_w``: the costs of F, I (input gradient) and W; B costs ``t_b + t_w``;
    ``overlap`` is the time of an overlapped F&B pair (default ``t_f + t_b + t_w``).
    ``recompute``: every backward re-runs its stage's forward first and costs ``t_f`` more
    (GPipe's re-materialisation, Huang et al. 2019, sec. 2.3), as in :func:`tpp.pipeline.simulate`.
    """
    costs = [sp.sympify(t_f), sp.sympify(t_b), sp.sympify(t_w)]
    pair = costs[0] + costs[1] + costs[2] if overlap is None else sp.sympify(overlap)
    costs.append(pair)
    zero = tuple(c == 0 for c in costs)
    forms = makespan_forms(schedule, zero, pair_is_sum=overlap is None, recompute=recompute)
    exprs = [sp.expand(sum(n * c for n, c in zip(f, costs, strict=True)))
             for f in sorted(forms, reverse=True)]
    exprs = list(dict.fromkeys(exprs))  # forms can coincide once a cost is substituted
    if len(exprs) == 1:
        return exprs[0]
    # no form is dominated coefficient-wise by another; SymPy's pairwise simplification under
    # the symbols' assumptions would find little more and is slow for many forms, so skip it
    return sp.Max(*exprs, evaluate=False)


def busy_from_schedule(schedule: object, t_f: sp.Expr = t_F, t_b: sp.Expr = t_B,
                       t_w: sp.Expr = 0, overlap: sp.Expr | None = None,
                       recompute: bool = False) -> list[sp.Expr]:
    """Compute time of each rank: the sum of its actions' costs (same cost rules as
    :func:`makespan_from_schedule`, including ``recompute``)."""
    t_x = t_b + t_f if recompute else t_b  # an input-gradient backward
    pair = t_f + t_x + t_w if overlap is None else overlap
    per_kind = {"F": t_f, "I": t_x, "W": t_w, "B": t_x + t_w, "F&B": pair}
    return [sp.expand(sum((per_kind[a.kind] for a in row), sp.Integer(0)))
            for row in schedule.actions]


def bubble_fraction_from_schedule(schedule: object, **costs: sp.Expr) -> sp.Expr:
    """Idle share of total rank-time, ``1 - sum(busy) / (P makespan)``, from the schedule."""
    span = makespan_from_schedule(schedule, **costs)
    busy = sum(busy_from_schedule(schedule, **costs))
    return 1 - busy / (schedule.ranks * span)
