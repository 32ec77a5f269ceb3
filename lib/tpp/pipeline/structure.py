"""Static checks of a schedule's structure, and the message of a deadlock.

Placement (stage s on rank s mod P), index ranges, conservation (each (stage, microbatch) has
exactly one F and exactly one backward: B, or I and W). The simulator
(:mod:`tpp.pipeline.simulate`) calls these to explain what it cannot run;
:func:`tpp.pipeline.validate.validate` runs them and then the simulator's dependency pass. Kept
apart from both so that neither imports the other for a diagnosis.
"""

from __future__ import annotations

from tpp.pipeline.ir import KINDS, Action, Overlap, Schedule, parse_action

__all__ = ["check_structure", "describe_deadlock"]


def check_structure(schedule: Schedule) -> None:
    """Static checks: sizes, placement, ranges, and every (stage, microbatch) having exactly one F
    and exactly one backward (one B, or one I and one W). Raises ``ValueError``.

    A fast set-based pass accepts a correct schedule; only when it fails does the slower
    diagnosis run to name the offending action."""
    if _structure_ok(schedule):
        return
    _diagnose_structure(schedule)
    raise ValueError("invalid schedule (unclassified structural error)")  # pragma: no cover


def _structure_ok(schedule: Schedule) -> bool:
    P, M, v = schedule.ranks, schedule.microbatches, schedule.virtual
    if not all(isinstance(x, int) and x >= 1 for x in (P, M, v)):
        return False
    if len(schedule.actions) != P:
        return False
    S = P * v
    if not _placement_ok(schedule):
        return False
    for row in schedule.actions:
        for a in row:
            if type(a) is Overlap and (a.forward.kind != "F" or a.backward.kind != "B"):
                return False
    rows = schedule.compute_order()
    flat = [a for row in rows for a in row]
    if {type(a) for a in flat} - {Action}:
        return False
    if not flat:
        return False
    stages = [a[0] for a in flat]
    mbs = [a[2] for a in flat]
    if min(stages) < 0 or max(stages) >= S or min(mbs) < 0 or max(mbs) >= M:
        return False
    home, mirror = schedule.homes()
    half = M if schedule.mirrored_from is None else schedule.mirrored_from
    for r, row in enumerate(rows):
        if row and {(home if a[2] < half else mirror)[a[0]] for a in row} != {r}:
            return False
    unique = set(flat)
    if len(unique) != len(flat):
        return False
    by_kind: dict[str, set[tuple[int, int]]] = {k: set() for k in KINDS}
    for s, k, m in unique:
        if k not in by_kind:
            return False
        by_kind[k].add((s, m))
    SM = S * M
    if len(by_kind["F"]) != SM:
        return False
    if by_kind["I"] != by_kind["W"] or by_kind["B"] & by_kind["I"]:
        return False
    return len(by_kind["B"]) + len(by_kind["I"]) == SM


def _placement_ok(schedule: Schedule) -> bool:
    P, S = schedule.ranks, schedule.ranks * schedule.virtual
    sr, mf = schedule.stage_ranks, schedule.mirrored_from
    if sr is not None and (len(sr) != S or any(not 0 <= x < P for x in sr)):
        return False
    return mf is None or (isinstance(mf, int) and 0 <= mf <= schedule.microbatches)


def _diagnose_structure(schedule: Schedule) -> None:
    P, M, v = schedule.ranks, schedule.microbatches, schedule.virtual
    for label, value in (("ranks", P), ("microbatches", M), ("virtual", v)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"schedule.{label} must be an int >= 1 (got {value!r})")
    if len(schedule.actions) != P:
        raise ValueError(
            f"schedule has {len(schedule.actions)} rows of actions but ranks = {P}: "
            f"give one list per rank"
        )
    S = P * v
    if not _placement_ok(schedule):
        raise ValueError(
            f"stage_ranks must give a rank in 0..{P - 1} for each of the {S} stages and "
            f"mirrored_from must be in 0..{M} (got {schedule.stage_ranks!r}, "
            f"{schedule.mirrored_from!r})"
        )
    for r, row in enumerate(schedule.actions):
        for a in row:
            if type(a) is Overlap and (a.forward.kind != "F" or a.backward.kind != "B"):
                raise ValueError(f"rank {r}: overlapped pair {a} must be a forward and a full "
                                 f"backward, e.g. '3F5&4B1'")
    seen: dict[tuple[str, int, int], tuple[int, int]] = {}
    for r, row in enumerate(schedule.compute_order()):
        for i, a in enumerate(row):
            if not isinstance(a, Action) or a.kind not in KINDS:
                raise ValueError(f"rank {r} position {i}: {a!r} is not an Action with kind F/B/I/W")
            if not 0 <= a.stage < S:
                raise ValueError(
                    f"{a} on rank {r}: stage {a.stage} is outside 0..{S - 1} "
                    f"(P={P} ranks x v={v} virtual stages)"
                )
            if not 0 <= a.microbatch < M:
                raise ValueError(
                    f"{a} on rank {r}: microbatch {a.microbatch} is outside 0..{M - 1} "
                    f"(microbatches are 0-based, M={M})"
                )
            home = schedule.rank_of(a.stage, a.microbatch)
            if home != r:
                where = (f"{a.stage} mod {P} = {home}" if schedule.stage_ranks is None
                         and schedule.mirrored_from is None else f"{home}")
                raise ValueError(
                    f"{a} is on rank {r} but stage {a.stage} lives on rank {where}: "
                    f"move it there"
                )
            key = (a.kind, a.stage, a.microbatch)
            if key in seen:
                r0, i0 = seen[key]
                raise ValueError(
                    f"duplicate {a}: it appears at rank {r0} position {i0} and rank {r} "
                    f"position {i}: keep exactly one"
                )
            seen[key] = (r, i)
    missing: list[str] = []
    for s in range(S):
        for m in range(M):
            has = {k for k in KINDS if (k, s, m) in seen}
            if "F" not in has:
                missing.append(f"{s}F{m}")
            if "B" in has and ("I" in has or "W" in has):
                raise ValueError(
                    f"stage {s} microbatch {m} has both a full backward {s}B{m} and a split one "
                    f"({', '.join(f'{s}{k}{m}' for k in 'IW' if k in has)}): use B, or I and W"
                )
            if "B" not in has:
                if "I" in has and "W" not in has:
                    missing.append(f"{s}W{m}")
                elif "W" in has and "I" not in has:
                    missing.append(f"{s}I{m}")
                elif not has & {"I", "W"}:
                    missing.append(f"{s}B{m}")
    if missing:
        shown = ", ".join(missing[:8]) + (f", ... ({len(missing)} in all)" if len(missing) > 8
                                          else "")
        raise ValueError(
            f"missing actions: {shown}: every (stage, microbatch) needs one F and one backward "
            f"(B, or I and W)"
        )


def describe_deadlock(schedule: Schedule, stuck: dict[int, tuple[Action, str]]) -> str:
    """Message naming, for every rank that cannot proceed, its next action and what it waits for."""
    parts = []
    for r, (a, dep) in sorted(stuck.items()):
        later = ""
        try:
            if parse_action(dep) in schedule.actions[r]:
                later = f", which rank {r} runs later"
        except ValueError:
            pass
        parts.append(f"rank {r} stuck at {a} (waits for {dep}{later})")
    return (
        "deadlock: dependencies can never be satisfied in these orders; "
        + "; ".join(parts)
        + ": reorder so that each action comes after the actions it waits for"
    )
