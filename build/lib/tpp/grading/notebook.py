"""The exercise-notebook format: parse and validate a master notebook from ``solutions/``.

A master carries notebook metadata ``tpp`` =
``{"assignment", "title", "chapter", "questions": [{"id", "points", "answers", "rtol", "atol"}]}``
and code cells whose ``metadata.tags`` give their role:

- ``answer``: the learner's cell; solution code between ``# BEGIN SOLUTION`` / ``# END SOLUTION``;
- ``check``: a public check shown to the learner;
- ``hidden``: a hidden check, removed from ``exercises/``;
- no role tag: a setup cell, run for everyone.

Role cells carry ``metadata.tpp = {"question": "q1"}``. See ``chapters/instructors.md``.
"""

from __future__ import annotations

import hashlib
import json
import keyword
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROLES = ("answer", "check", "hidden")
BEGIN_RE = re.compile(r"^(?P<indent>[ \t]*)#+\s*BEGIN SOLUTION\s*$")
END_RE = re.compile(r"^[ \t]*#+\s*END SOLUTION\s*$")
DEFAULT_RTOL = 1e-9
DEFAULT_ATOL = 1e-12


class MasterError(ValueError):
    """A master notebook does not follow the format; the message lists every problem."""


@dataclass(frozen=True)
class Question:
    """One graded question: its id, points, the answer variable names and tolerances."""

    id: str
    points: float
    answers: tuple[str, ...]
    rtol: float = DEFAULT_RTOL
    atol: float = DEFAULT_ATOL

    def public(self) -> dict[str, Any]:
        """The part of the question the learner may see (written into ``exercises/``)."""
        return {"id": self.id, "points": self.points, "answers": list(self.answers)}


@dataclass(frozen=True)
class Cell:
    """A master cell: its id, type, source (a string), role and question (or None)."""

    id: str
    cell_type: str
    source: str
    role: str | None
    question: str | None
    tags: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)
    attachments: dict[str, Any] | None = None


@dataclass(frozen=True)
class Master:
    """A validated master notebook."""

    path: Path
    assignment: str
    title: str
    chapter: str
    questions: tuple[Question, ...]
    cells: tuple[Cell, ...]
    sha256: str

    @property
    def max_points(self) -> float:
        return sum(q.points for q in self.questions)

    def question(self, qid: str) -> Question:
        for q in self.questions:
            if q.id == qid:
                return q
        raise KeyError(qid)

    def cells_of(self, qid: str, role: str) -> list[Cell]:
        return [c for c in self.cells if c.question == qid and c.role == role]


def source_text(source: Any) -> str:
    """A cell source as one string (nbformat allows a list of lines)."""
    if isinstance(source, str):
        return source
    if isinstance(source, list) and all(isinstance(s, str) for s in source):
        return "".join(source)
    raise TypeError("cell source must be a string or a list of strings")


def cell_role(tags: list[str] | tuple[str, ...]) -> list[str]:
    """The role tags (answer / check / hidden) among a cell's tags."""
    return [t for t in tags if t in ROLES]


def solution_blocks(source: str) -> list[tuple[int, int, str]]:
    """The ``(begin_line, end_line, indent)`` of each BEGIN/END SOLUTION block (0-based lines).

    Raises ``ValueError`` naming the line when markers are unbalanced or nested.
    """
    blocks: list[tuple[int, int, str]] = []
    open_at: int | None = None
    indent = ""
    for i, line in enumerate(source.split("\n")):
        m = BEGIN_RE.match(line)
        if m:
            if open_at is not None:
                raise ValueError(
                    f"line {i + 1}: '# BEGIN SOLUTION' inside another block opened on line "
                    f"{open_at + 1}: close it with '# END SOLUTION' first"
                )
            open_at, indent = i, m.group("indent")
        elif END_RE.match(line):
            if open_at is None:
                raise ValueError(
                    f"line {i + 1}: '# END SOLUTION' without a '# BEGIN SOLUTION' before it"
                )
            blocks.append((open_at, i, indent))
            open_at = None
    if open_at is not None:
        raise ValueError(
            f"line {open_at + 1}: '# BEGIN SOLUTION' is never closed: add '# END SOLUTION'"
        )
    return blocks


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _parse_questions(meta: Any, problems: list[str]) -> list[Question]:
    questions: list[Question] = []
    if not isinstance(meta, list) or not meta:
        problems.append("metadata tpp.questions must be a non-empty list of questions")
        return questions
    seen_ids: set[str] = set()
    seen_answers: dict[str, str] = {}
    for k, q in enumerate(meta):
        where = f"tpp.questions[{k}]"
        if not isinstance(q, dict):
            problems.append(f"{where} must be an object with id, points, answers")
            continue
        qid = q.get("id")
        if not isinstance(qid, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", qid):
            problems.append(f"{where}: id must be a short string like 'q1' (got {qid!r})")
            continue
        if qid in seen_ids:
            problems.append(
                f"{where}: duplicate question id {qid!r}: give each question its own id"
            )
            continue
        seen_ids.add(qid)
        points = q.get("points")
        if not _number(points) or points <= 0:
            problems.append(f"question {qid}: points must be a positive number (got {points!r})")
            continue
        answers = q.get("answers")
        if (
            not isinstance(answers, list)
            or not answers
            or not all(isinstance(a, str) and a.isidentifier() for a in answers)
            or any(keyword.iskeyword(a) for a in answers)
        ):
            problems.append(
                f"question {qid}: answers must be a non-empty list of variable names "
                f"(got {answers!r})"
            )
            continue
        ok = True
        for a in answers:
            if a in seen_answers:
                problems.append(
                    f"question {qid}: duplicate answer name {a!r} (also in question "
                    f"{seen_answers[a]}): answer names must be unique across the notebook"
                )
                ok = False
            seen_answers[a] = qid
        tol = {}
        for key, default in (("rtol", DEFAULT_RTOL), ("atol", DEFAULT_ATOL)):
            val = q.get(key, default)
            if not _number(val) or val < 0:
                problems.append(f"question {qid}: {key} must be a number >= 0 (got {val!r})")
                ok = False
            tol[key] = float(val) if _number(val) else default
        unknown = set(q) - {"id", "points", "answers", "rtol", "atol"}
        if unknown:
            problems.append(
                f"question {qid}: unknown keys {sorted(unknown)}: allowed are id, points, "
                "answers, rtol, atol"
            )
            ok = False
        if ok:
            questions.append(Question(qid, points, tuple(answers), tol["rtol"], tol["atol"]))
    return questions


def parse_master(path: str | Path, data: bytes | None = None) -> Master:
    """Read and validate a master notebook; raise :class:`MasterError` listing all problems."""
    path = Path(path)
    raw = path.read_bytes() if data is None else data
    try:
        nb = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise MasterError(f"{path}: not valid JSON ({exc}): re-save it from JupyterLab") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise MasterError(f"{path}: not a Jupyter notebook (no 'cells' list)")
    problems: list[str] = []
    if nb.get("nbformat") != 4:
        problems.append(f"nbformat must be 4 (got {nb.get('nbformat')!r})")
    meta = (nb.get("metadata") or {}).get("tpp")
    if not isinstance(meta, dict):
        raise MasterError(
            f"{path}: notebook metadata has no 'tpp' object: add "
            '{"tpp": {"assignment": ..., "questions": [...]}} (see chapters/instructors.md)'
        )
    assignment = meta.get("assignment")
    if assignment != path.stem:
        problems.append(
            f"metadata tpp.assignment must equal the file name {path.stem!r} (got {assignment!r})"
        )
    for key in ("title", "chapter"):
        if not isinstance(meta.get(key, ""), str):
            problems.append(f"metadata tpp.{key} must be a string")
    unknown = set(meta) - {"assignment", "title", "chapter", "questions"}
    if unknown:
        problems.append(
            f"metadata tpp has unknown keys {sorted(unknown)}: allowed are assignment, title, "
            "chapter, questions"
        )
    questions = _parse_questions(meta.get("questions"), problems)
    qids = {q.id for q in questions}

    cells: list[Cell] = []
    seen_cell_ids: set[str] = set()
    for i, c in enumerate(nb["cells"]):
        where = f"cell {i}"
        if not isinstance(c, dict):
            problems.append(f"{where}: not an object")
            continue
        cid = c.get("id")
        if not isinstance(cid, str) or not cid:
            problems.append(
                f"{where}: has no id: save the notebook with nbformat >= 4.5 (JupyterLab does)"
            )
            continue
        where = f"cell {i} (id {cid})"
        if cid in seen_cell_ids:
            problems.append(f"{where}: duplicate cell id: give each cell its own id")
            continue
        seen_cell_ids.add(cid)
        ctype = c.get("cell_type")
        if ctype not in ("code", "markdown", "raw"):
            problems.append(f"{where}: unknown cell_type {ctype!r}")
            continue
        try:
            src = source_text(c.get("source", ""))
        except TypeError as exc:
            problems.append(f"{where}: {exc}")
            continue
        cmeta = c.get("metadata") or {}
        tags = cmeta.get("tags") or []
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            problems.append(f"{where}: metadata.tags must be a list of strings")
            continue
        roles = cell_role(tags)
        role: str | None = None
        question: str | None = None
        if roles and ctype != "code":
            problems.append(f"{where}: tags {roles} are only allowed on code cells")
            continue
        if len(roles) > 1:
            problems.append(f"{where}: a cell has one role; it is tagged {roles}")
            continue
        if roles:
            role = roles[0]
            tmeta = cmeta.get("tpp")
            question = tmeta.get("question") if isinstance(tmeta, dict) else None
            if question not in qids:
                problems.append(
                    f"{where}: {role} cell names question {question!r}, which is not in "
                    f"metadata tpp.questions {sorted(qids)}: set metadata.tpp.question"
                )
                continue
        if ctype == "code":
            try:
                blocks = solution_blocks(src)
            except ValueError as exc:
                problems.append(f"{where}: {exc}")
                continue
            if role == "answer" and not blocks:
                problems.append(
                    f"{where}: answer cell of {question} has no '# BEGIN SOLUTION' / "
                    "'# END SOLUTION' block: put the solution code between them"
                )
                continue
            if role != "answer" and blocks:
                problems.append(
                    f"{where}: '# BEGIN SOLUTION' outside an answer cell would leak the "
                    "solution: tag the cell 'answer' or remove the markers"
                )
                continue
        cells.append(
            Cell(
                id=cid,
                cell_type=ctype,
                source=src,
                role=role,
                question=question,
                tags=tuple(tags),
                metadata=cmeta,
                attachments=c.get("attachments"),
            )
        )
    for q in questions:
        if not any(c.role == "answer" and c.question == q.id for c in cells):
            problems.append(f"question {q.id} has no answer cell: tag one code cell 'answer'")
    if problems:
        raise MasterError(f"{path}: " + "; ".join(problems))
    return Master(
        path=path,
        assignment=assignment,
        title=meta.get("title", ""),
        chapter=meta.get("chapter", ""),
        questions=tuple(questions),
        cells=tuple(cells),
        sha256=hashlib.sha256(raw).hexdigest(),
    )


def find_masters(solutions: str | Path) -> list[Path]:
    """The master notebooks of a ``solutions/`` folder, sorted by name."""
    return sorted(p for p in Path(solutions).glob("*.ipynb") if p.is_file())
