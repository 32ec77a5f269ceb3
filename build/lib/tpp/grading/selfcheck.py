"""``tpp check NOTEBOOK``: what a learner runs before submitting an exercise notebook.

1. **Structure**: every answer cell of the assignment is present (matched by cell id, as the
   grader matches it) and still tagged ``answer`` with its question, so the grader will read it.
2. **Public checks**: the notebook is rebuilt the way the grader rebuilds it — the assignment's
   own cells (from ``exercises/``, or the master in ``solutions/``) with the learner's answer
   cells in place — and run in a fresh kernel; each check cell's OK line or failure message is
   reported per question.

It decides no points: the values are graded later, against inputs the learner does not see.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat

from tpp.grading.notebook import source_text


class CheckError(ValueError):
    """The notebook cannot be checked (not a notebook, unknown assignment): says what to do."""


@dataclass
class CheckResult:
    """One public check cell: its question, whether it passed, and the line it printed."""

    question: str
    passed: bool
    message: str


@dataclass
class Report:
    """What ``tpp check`` found: structural problems and the result of every public check."""

    assignment: str
    title: str
    reference: Path
    answer_cells: int = 0
    problems: list[str] = field(default_factory=list)
    checks: list[CheckResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and all(c.passed for c in self.checks)

    def describe(self) -> str:
        lines = [f"assignment {self.assignment}: {self.title}"]
        present = self.answer_cells - sum(1 for p in self.problems if p.startswith("missing"))
        lines.append(f"answer cells: {present} of {self.answer_cells} present")
        lines += [f"  ✗ {p}" for p in self.problems]
        for c in self.checks:
            mark = "" if c.passed else "✗ "
            lines.append(f"{mark}{c.message}")
        n_ok = sum(c.passed for c in self.checks)
        lines.append(f"{n_ok} of {len(self.checks)} public checks pass" + (
            "; every answer cell is in place: ready to submit (the values are graded later)"
            if self.ok else "; fix the lines marked ✗ before you submit"))
        return "\n".join(lines)


def _course_root(start: Path) -> Path | None:
    for d in (start, *start.parents):
        if (d / "exercises").is_dir() or (d / "solutions").is_dir():
            return d
    return None


def _reference(assignment: str, roots: list[Path]) -> tuple[dict[str, Any], Path]:
    """The assignment's learner notebook: ``exercises/NAME.ipynb``, else built from the master."""
    for root in roots:
        path = root / "exercises" / f"{assignment}.ipynb"
        if path.is_file():
            return json.loads(path.read_text(encoding="utf-8")), path
    for root in roots:
        path = root / "solutions" / f"{assignment}.ipynb"
        if path.is_file():
            from tpp.grading.assign import exercise_text
            from tpp.grading.notebook import parse_master

            return json.loads(exercise_text(parse_master(path))), path
    raise CheckError(
        f"no exercises/{assignment}.ipynb or solutions/{assignment}.ipynb found: run tpp check "
        "inside the course's folder (or pass --course DIR)"
    )


def _tags(cell: dict[str, Any]) -> list[str]:
    tags = cell.get("metadata", {}).get("tags", [])
    return [t for t in tags if isinstance(t, str)] if isinstance(tags, list) else []


def _question(cell: dict[str, Any]) -> str | None:
    tpp = cell.get("metadata", {}).get("tpp")
    q = tpp.get("question") if isinstance(tpp, dict) else None
    return q if isinstance(q, str) else None


def _match_answers(
    nb: dict[str, Any], ref: dict[str, Any], problems: list[str]
) -> dict[str, str]:
    """Reference answer-cell id -> the learner's source; problems appended as sentences."""
    ref_answers = [c for c in ref["cells"] if "answer" in _tags(c)]
    ref_ids = {c["id"] for c in ref_answers}
    code = [c for c in nb["cells"] if isinstance(c, dict) and c.get("cell_type") == "code"]
    by_id = {c.get("id"): c for c in code if c.get("id") in ref_ids}
    spare = [c for c in code if c.get("id") not in ref_ids and "answer" in _tags(c)]
    found: dict[str, str] = {}
    for rc in ref_answers:
        q = _question(rc)
        cell = by_id.get(rc["id"])
        if cell is None:
            alike = [c for c in spare if _question(c) == q]
            if alike:
                cell = alike[0]
                spare.remove(cell)
        if cell is None:
            problems.append(
                f"missing: the answer cell of {q} (cell id {rc['id']}) is not in the notebook; "
                f"the grader will count {q} as unanswered. Copy the cell back from the "
                "assignment's notebook"
            )
            continue
        if "answer" not in _tags(cell) or _question(cell) != q:
            problems.append(
                f"the answer cell of {q} (cell id {rc['id']}) lost its tag: give it the tag "
                f"'answer' and the metadata tpp.question = '{q}' (or copy the cell back)"
            )
        found[rc["id"]] = source_text(cell.get("source", ""))
    return found


def _outputs_text(cell: dict[str, Any]) -> tuple[str | None, list[str]]:
    """The error message of a cell (or None) and the lines it printed."""
    error = None
    printed: list[str] = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            value = out.get("evalue", "")
            error = value if out.get("ename") in ("CheckFailed", "AssertionError") and value \
                else f"{out.get('ename')}: {value}"
        elif out.get("output_type") == "stream":
            printed += source_text(out.get("text", "")).splitlines()
    return error, printed


def check_notebook(path: str | Path, course: str | Path | None = None,
                   timeout: float = 120) -> Report:
    """Check the structure of ``path`` and run its public checks (see the module docstring)."""
    path = Path(path)
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise CheckError(f"{path} is not a readable notebook: {exc}") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise CheckError(f"{path} is JSON but not a Jupyter notebook (no 'cells' list)")
    meta = nb.get("metadata", {}).get("tpp", {})
    assignment = meta.get("assignment") if isinstance(meta, dict) else None
    if not isinstance(assignment, str):
        raise CheckError(
            f"{path} has no metadata.tpp.assignment: is it one of the course's exercise "
            "notebooks? Start again from a copy of exercises/NAME.ipynb"
        )
    roots = [Path(course)] if course else [
        r for r in (_course_root(path.resolve().parent), _course_root(Path.cwd())) if r
    ]
    ref, ref_path = _reference(assignment, roots)
    report = Report(assignment, ref.get("metadata", {}).get("tpp", {}).get("title", ""),
                    ref_path)
    report.answer_cells = sum("answer" in _tags(c) for c in ref["cells"])
    answers = _match_answers(nb, ref, report.problems)

    run = nbformat.reads(json.dumps(ref), as_version=4)
    for cell in run.cells:
        if "answer" in _tags(cell):
            cell.source = answers.get(cell.get("id"), 'raise NotImplementedError("missing")')
    from nbclient import NotebookClient

    env_static = os.environ.get("TPP_STATIC")
    os.environ["TPP_STATIC"] = "1"
    try:
        NotebookClient(run, timeout=timeout, allow_errors=True, kernel_name="python3",
                       resources={"metadata": {"path": str(path.resolve().parent)}}).execute()
    finally:
        if env_static is None:
            os.environ.pop("TPP_STATIC", None)
        else:
            os.environ["TPP_STATIC"] = env_static
    for cell in run.cells:
        if cell.cell_type != "code" or "check" not in _tags(cell):
            continue
        q = _question(cell) or "?"
        error, printed = _outputs_text(cell)
        if error is not None:
            report.checks.append(CheckResult(q, False, f"{q}: {error}"))
        else:
            ok = [line for line in printed if "OK" in line]
            report.checks.append(CheckResult(q, True, ok[-1] if ok else f"{q}: check ran"))
    return report
