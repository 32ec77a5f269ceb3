"""Validation of a schedule: placement, conservation (each F and backward exactly once) and
that the dependencies can be satisfied in the given per-rank orders (no deadlock).

Dependencies (0-based global stage s, microbatch m, S stages):

* ``F(s, m)`` needs ``F(s-1, m)`` (the activation from the previous stage), for s > 0;
* ``B(s, m)`` and ``I(s, m)`` need ``F(s, m)`` (the stored activations) and the input-gradient of
  stage s+1 (``B(s+1, m)`` or ``I(s+1, m)``), for s < S - 1;
* ``W(s, m)`` needs ``I(s, m)``.
"""

from __future__ import annotations

from collections import defaultdict

from tpp.pipeline.ir import Action, Overlap, Schedule, expand
from tpp.pipeline.simulate import run_dependencies
from tpp.pipeline.structure import check_structure, describe_deadlock

__all__ = ["validate", "dependencies", "check_structure", "describe_deadlock"]


def validate(schedule: Schedule) -> Schedule:
    """Check ``schedule`` and return it unchanged; raise ``ValueError`` with a precise message.

    Checks placement (stage s on rank s mod P), index ranges, conservation (each (stage,
    microbatch) has exactly one F and exactly one backward: B, or I and W) and that the
    dependencies can be satisfied in the per-rank orders; a deadlock names the stuck actions.
    """
    check_structure(schedule)
    run_dependencies(schedule, 0, 0, 0, 0)
    return schedule


def dependencies(action: Action | Overlap, schedule: Schedule) -> list[Action]:
    """The actions ``action`` waits for (see the module docstring), in the compact IR.

    For a backward of stage s < S-1 the upstream input-gradient is given as ``B`` or ``I``
    depending on which one the schedule contains.
    """
    if type(action) is Overlap:
        return [d for half in action for d in dependencies(half, schedule)]
    S = schedule.stages
    s, k, m = action
    kinds: dict[tuple[int, int], set[str]] = defaultdict(set)
    for row in schedule.actions:
        for a in expand(row):
            kinds[(a.stage, a.microbatch)].add(a.kind)
    if k == "F":
        return [Action(s - 1, "F", m)] if s > 0 else []
    if k == "W":
        return [Action(s, "I", m)]
    deps = [Action(s, "F", m)]
    if s < S - 1:
        down = "I" if "I" in kinds[(s + 1, m)] else "B"
        deps.append(Action(s + 1, down, m))
    return deps
