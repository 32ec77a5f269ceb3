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


def draw(student_id: str, assignment: str, choices: dict[str, list[Any]]) -> dict[str, Any]:
    """The parameters of ``student_id``: for each name, one of its choices (deterministic)."""
    if not isinstance(student_id, str) or not student_id.strip():
        raise ValueError("STUDENT_ID must be your id as a non-empty string, e.g. 'ab123'")
    out = {}
    for name, options in choices.items():
        if not options:
            raise ValueError(f"parameter {name!r} has no choices: give it a non-empty list")
        digest = hashlib.sha256(f"{assignment}\0{student_id.strip()}\0{name}".encode()).digest()
        out[name] = options[int.from_bytes(digest[:8], "big") % len(options)]
    return out


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
