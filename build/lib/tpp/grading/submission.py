"""Read a submitted notebook defensively and rebuild it from the master.

Only the *answer cells* are taken from a submission, matched to the master's answer cells by
cell id, falling back to the tag ``answer`` + ``metadata.tpp.question`` (k-th with k-th). Every
other cell — setup, public checks, hidden checks — comes from the master, so deleting, editing,
re-tagging (``raises-exception``, ``skip-execution``) or re-ordering check cells changes nothing.
After the last cell of each question a grader cell serialises that question's answers.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpp.grading import params as _params
from tpp.grading.compare import SchemaError, read_regular
from tpp.grading.notebook import Master, source_text
from tpp.grading.serialise import serialiser_source

_KINDS = {
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a device",
    stat.S_IFBLK: "a device",
    stat.S_IFDIR: "a folder",
}

MAX_SUBMISSION_BYTES = 50_000_000
MISSING_STUB = 'raise NotImplementedError("this answer cell is missing from the submission")\n'


class Rejected(Exception):
    """A submission that cannot be run: ``status`` and a short ``reason``."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class GradeCell:
    """A cell of the rebuilt notebook: its source, kind, question and master cell id."""

    source: str
    kind: str  # setup | answer | check | hidden | serialise
    question: str | None
    master_id: str | None


@dataclass(frozen=True)
class Rebuilt:
    """The rebuilt notebook: cells, where each question's answers are written, and the nonce."""

    cells: list[GradeCell]
    answer_files: dict[str, Path]
    nonce: str
    missing: tuple[str, ...]  # master answer-cell ids the submission lacks


def read_notebook(path: Path) -> dict[str, Any]:
    """Parse a submission as a notebook dict, or raise :class:`Rejected` (invalid-notebook).

    Only a regular file is read (``lstat``, ``O_NOFOLLOW``, ``O_NONBLOCK``): a symbolic link,
    FIFO, socket or device is rejected without being opened for reading.
    """
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise Rejected("invalid-notebook", f"cannot read it ({type(exc).__name__})") from None
    if not stat.S_ISREG(st.st_mode):
        kind = _KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")
        raise Rejected("invalid-notebook", f"not a regular file: {kind}")
    try:
        raw = read_regular(path, MAX_SUBMISSION_BYTES)
    except SchemaError as exc:
        raise Rejected("invalid-notebook", str(exc)) from None
    except OSError as exc:
        raise Rejected("invalid-notebook", f"cannot read it ({type(exc).__name__})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Rejected("invalid-notebook", "not UTF-8 text (is it a notebook?)") from None
    try:
        nb = json.loads(text)
    except RecursionError:
        raise Rejected("invalid-notebook", "JSON nested too deeply") from None
    except ValueError as exc:
        raise Rejected("invalid-notebook", f"not valid JSON ({str(exc)[:80]})") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise Rejected("invalid-notebook", "JSON but not a Jupyter notebook (no 'cells' list)")
    if "nbformat" in nb and nb["nbformat"] != 4:
        raise Rejected(
            "invalid-notebook", f"nbformat {nb['nbformat']!r} notebook; expected version 4"
        )
    return nb


def submitted_assignment(nb: dict[str, Any]) -> str | None:
    """The ``metadata.tpp.assignment`` a notebook claims, if any."""
    meta = nb.get("metadata")
    tpp = meta.get("tpp") if isinstance(meta, dict) else None
    value = tpp.get("assignment") if isinstance(tpp, dict) else None
    return value if isinstance(value, str) else None


def _code_cells(nb: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in nb["cells"] if isinstance(c, dict) and c.get("cell_type") == "code"]


def _tag_question(cell: dict[str, Any]) -> str | None:
    meta = cell.get("metadata")
    if not isinstance(meta, dict):
        return None
    tags = meta.get("tags")
    if not isinstance(tags, list) or "answer" not in [t for t in tags if isinstance(t, str)]:
        return None
    tpp = meta.get("tpp")
    q = tpp.get("question") if isinstance(tpp, dict) else None
    return q if isinstance(q, str) else None


def assigned_names(source: str) -> set[str]:
    """Names a cell's source assigns to (empty for source that does not parse)."""
    import ast

    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return set()
    return {
        n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }


def answer_sources(nb: dict[str, Any], master: Master) -> tuple[dict[str, str], list[str]]:
    """Master answer-cell id -> the submission's source for it (absent if not found), and
    warnings. A cell is found by id, else by tag; else an untagged code cell that assigns the
    variables the master's answer cell assigns is taken, with a warning."""
    code = _code_cells(nb)
    answer_ids = [c.id for c in master.cells if c.role == "answer"]
    by_id: dict[str, dict[str, Any]] = {}
    for c in code:
        cid = c.get("id")
        if isinstance(cid, str) and cid in answer_ids and cid not in by_id:
            by_id[cid] = c
    used = {id(c) for c in by_id.values()}
    found: dict[str, str] = {}
    warnings: list[str] = []
    for q in master.questions:
        fallback = [
            c
            for c in code
            if id(c) not in used and _tag_question(c) == q.id and c.get("id") not in answer_ids
        ]
        for mcell in master.cells_of(q.id, "answer"):
            cell = by_id.get(mcell.id)
            if cell is None and fallback:
                cell = fallback.pop(0)
            if cell is None:
                cell = _by_names(code, used, mcell.source, answer_ids)
                if cell is not None:
                    warnings.append(
                        f"{q.id}: the answer cell was not found by its id or tag; a cell "
                        "assigning the same variables was graded instead"
                    )
            if cell is None:
                continue
            used.add(id(cell))
            try:
                found[mcell.id] = source_text(cell.get("source", ""))
            except TypeError:
                continue
    return found, warnings


def _by_names(
    code: list[dict[str, Any]], used: set[int], master_source: str, answer_ids: list[str]
) -> dict[str, Any] | None:
    """The last unused, untagged code cell assigning every variable of ``master_source``."""
    want = assigned_names(master_source)
    want = {n for n in want if not n.startswith("_")}
    if not want:
        return None
    best = None
    for c in code:
        if id(c) in used or c.get("id") in answer_ids or _tag_question(c) is not None:
            continue
        try:
            names = assigned_names(source_text(c.get("source", "")))
        except TypeError:
            continue
        if want <= names:
            best = c
    return best


def parameters_of(master: Master, student: str | None) -> dict[str, Any] | None:
    """The per-student parameters of ``student`` for this master (None: no parameters cell)."""
    for c in master.cells:
        if c.cell_type == "code" and _params.TAG in c.tags:
            choices = _params.choices_of(c.source)
            if choices is None:
                return None
            return _params.draw(student or "master", master.assignment, choices)
    return None


def rebuild(
    master: Master, answers: dict[str, str], answers_dir: Path, student: str | None = None
) -> Rebuilt:
    """The notebook to run: the master's cells, the submission's answers, serialiser cells.

    With ``student``, the master's ``parameters`` cell gets that student's id.
    """
    nonce = secrets.token_hex(8)
    code = [c for c in master.cells if c.cell_type == "code"]
    last_of = {}
    for i, c in enumerate(code):
        if c.question:
            last_of[c.question] = i
    cells: list[GradeCell] = []
    files: dict[str, Path] = {}
    missing = []
    for i, c in enumerate(code):
        if c.role == "answer":
            if c.id in answers:
                src = answers[c.id]
            else:
                src = MISSING_STUB
                missing.append(c.id)
        else:
            src = c.source
            if _params.TAG in c.tags:  # the same id as parameters_of(master, student)
                src = _params.with_student(src, student if student is not None else "master")
        cells.append(GradeCell(src, c.role or "setup", c.question, c.id))
        for q in master.questions:
            if last_of.get(q.id) == i:
                path = answers_dir / f"answers-{nonce}-{q.id}.json"
                files[q.id] = path
                cells.append(
                    GradeCell(
                        serialiser_source(list(q.answers), q.id, str(path), nonce),
                        "serialise",
                        q.id,
                        None,
                    )
                )
    return Rebuilt(cells, files, nonce, tuple(missing))
