"""Per-student parameters: each learner's graded questions use numbers drawn from their id.

A master opts in with one setup cell tagged ``parameters`` that reads::

    STUDENT_ID = "your-id"  # your id on the learning platform: your numbers depend on it
    PARAMETERS = {"P": [4, 8], "M": [16, 32]}
    P, M = draw(STUDENT_ID, "ex07_bubble", PARAMETERS).values()

The learner sets ``STUDENT_ID`` and gets their own ``P`` and ``M``. When grading, the grader
rewrites the ``STUDENT_ID = ...`` line with the id taken from the submission's folder or file
name (whatever the learner typed there is ignored), and computes the master's answers for that
student's parameters (cached per parameter set, :mod:`tpp.grading.reference`). So the answer a
classmate got — or the one on the public site — is wrong for you, unless your draw is the same.
"""

from __future__ import annotations

import ast
import hashlib
import re
from typing import Any

TAG = "parameters"
ID_LINE = re.compile(r"^STUDENT_ID\s*=.*$", re.MULTILINE)
PLACEHOLDER = "your-id"  # the exercise's STUDENT_ID before the learner sets it


def draw(
    student_id: str,
    assignment: str,
    choices: dict[str, list[Any]],
    defaults: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The parameters of ``student_id``: for each name, one of its choices (deterministic).

    For the placeholder id :data:`PLACEHOLDER`, the self-study ``defaults`` (the numbers the
    exercise's text uses) when given. The grader never grades with the placeholder: it takes
    the submission's id instead (:func:`tpp.grading.submission.parameters_id`)."""
    if not isinstance(student_id, str) or not student_id.strip():
        raise ValueError("STUDENT_ID must be your id as a non-empty string, e.g. 'ab123'")
    if defaults is not None and student_id.strip() == PLACEHOLDER:
        if set(defaults) != set(choices):
            raise ValueError(f"DEFAULTS {sorted(defaults)} must name the same parameters as "
                             f"PARAMETERS {sorted(choices)}")  # fmt: skip
        return {name: defaults[name] for name in choices}
    out = {}
    for name, options in choices.items():
        if not options:
            raise ValueError(f"parameter {name!r} has no choices: give it a non-empty list")
        digest = hashlib.sha256(f"{assignment}\0{student_id.strip()}\0{name}".encode()).digest()
        out[name] = options[int.from_bytes(digest[:8], "big") % len(options)]
    return out


def literal_of(source: str, name: str) -> Any:
    """The literal value assigned to ``name`` at the top level of ``source`` (None if absent)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == name):
            try:
                return ast.literal_eval(node.value)
            except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
                return None
    return None


def choices_of(source: str) -> dict[str, list[Any]] | None:
    """The literal ``PARAMETERS = {...}`` of a parameters cell (None if absent)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "PARAMETERS"):  # fmt: skip
            value = ast.literal_eval(node.value)
            if isinstance(value, dict):
                return value
    return None


def with_student(source: str, student_id: str) -> str:
    """The parameters cell with ``STUDENT_ID`` set to ``student_id`` (a safe literal)."""
    if not ID_LINE.search(source):
        raise ValueError("a parameters cell must assign STUDENT_ID = ... on a line of its own")
    return ID_LINE.sub(lambda _m: f"STUDENT_ID = {student_id!r}", source, count=1)


def notebook_id(nb: dict[str, Any], cell_ids: set[str]) -> str | None:
    """The id a learner's notebook draws its parameters with — the one rule ``tpp check`` and
    ``tpp grade`` share: ``metadata.tpp.student`` (stamped at release by ``tpp assign
    --roster``), else the literal ``STUDENT_ID`` of its parameters cell (the cell with one of
    ``cell_ids`` or tagged ``parameters``) unless it is still :data:`PLACEHOLDER`; else None."""
    meta = nb.get("metadata")
    tpp = meta.get("tpp") if isinstance(meta, dict) else None
    stamped = tpp.get("student") if isinstance(tpp, dict) else None
    if isinstance(stamped, str) and stamped.strip():
        return stamped.strip()[:200]
    for c in nb.get("cells", []):
        if not isinstance(c, dict) or c.get("cell_type") != "code":
            continue
        cm = c.get("metadata")
        tags = cm.get("tags") if isinstance(cm, dict) else None
        if c.get("id") in cell_ids or (isinstance(tags, list) and TAG in tags):
            src = c.get("source", "")
            src = "".join(x for x in src if isinstance(x, str)) if isinstance(src, list) else src
            value = literal_of(src, "STUDENT_ID") if isinstance(src, str) else None
            if isinstance(value, str) and value.strip() and value.strip() != PLACEHOLDER:
                return value.strip()[:200]
            return None
    return None
