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


def read_notebook(
    path: Path,
    max_bytes: int = MAX_SUBMISSION_BYTES,
    max_cells: int | None = None,
    max_source_chars: int | None = None,
) -> dict[str, Any]:
    """Parse a submission as a notebook dict, or raise :class:`Rejected` (invalid-notebook,
    ``too-large``).

    Only a regular file is read (``lstat``, ``O_NOFOLLOW``, ``O_NONBLOCK``): a symbolic link,
    FIFO, socket or device is rejected without being opened for reading. The file's size is
    checked before it is read, the cell count and each cell's source length right after the
    JSON is decoded — before any cell is matched or parsed as Python.
    """
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise Rejected("invalid-notebook", f"cannot read it ({type(exc).__name__})") from None
    if not stat.S_ISREG(st.st_mode):
        kind = _KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")
        raise Rejected("invalid-notebook", f"not a regular file: {kind}")
    if st.st_size > max_bytes:
        raise Rejected("too-large", f"the file has {st.st_size / 1e6:.1f} MB, more than the "
                       f"{max_bytes / 1e6:g} MB allowed (--max-notebook-mb)")  # fmt: skip
    try:
        raw = read_regular(path, max_bytes)
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
    cells = nb["cells"]
    if max_cells is not None and len(cells) > max_cells:
        raise Rejected("too-large", f"{len(cells)} cells, more than the {max_cells} allowed "
                       "(--max-cells)")  # fmt: skip
    if max_source_chars is not None:
        for k, c in enumerate(cells):
            src = c.get("source") if isinstance(c, dict) else None
            n = len(src) if isinstance(src, str) else (
                sum(len(x) for x in src if isinstance(x, str)) if isinstance(src, list) else 0)
            if n > max_source_chars:
                raise Rejected("too-large", f"cell {k} has {n} characters of source, more than "
                               f"the {max_source_chars} allowed (--max-source-chars)")
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
    _NAMES.clear()
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
            except TypeError:  # a list of numbers, say: the cell is there, its source is not text
                warnings.append(f"{q.id}: the answer cell's source is not text (a string or a "
                                "list of strings): not run, graded as missing")  # fmt: skip
                continue
    _NAMES.clear()
    return found, warnings


_NAMES: dict[int, set[str]] = {}  # id(cell) -> assigned names, for one answer_sources call


def _by_names(
    code: list[dict[str, Any]], used: set[int], master_source: str, answer_ids: list[str]
) -> dict[str, Any] | None:
    """The last unused, untagged code cell assigning every variable of ``master_source``
    (each submitted cell is parsed at most once per submission)."""
    want = assigned_names(master_source)
    want = {n for n in want if not n.startswith("_")}
    if not want:
        return None
    best = None
    for c in code:
        if id(c) in used or c.get("id") in answer_ids or _tag_question(c) is not None:
            continue
        if id(c) not in _NAMES:
            try:
                src = source_text(c.get("source", ""))
            except TypeError:
                continue
            if not all(n in src for n in want):  # a cheap substring test before parsing
                continue
            _NAMES[id(c)] = assigned_names(src)
        names = _NAMES[id(c)]
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
            defaults = _params.literal_of(c.source, "DEFAULTS")
            return _params.draw(student or "master", master.assignment, choices,
                                defaults if isinstance(defaults, dict) else None)
    return None


def parameters_id(nb: dict[str, Any], master: Master, submission_id: str) -> tuple[str, list[str]]:
    """The id whose parameters grade this notebook, and warnings: the id stamped at release
    (``metadata.tpp.student``, ``tpp assign --roster``), else the ``STUDENT_ID`` the learner
    set in the notebook's parameters cell — exactly what ``tpp check`` uses — else (still the
    placeholder) the submission's id, with a warning. An id that is not part of the
    submission's id (file or LMS folder name) is a warning too."""
    if not any(_params.TAG in c.tags for c in master.cells if c.cell_type == "code"):
        return submission_id, []
    chosen = _params.notebook_id(nb, {c.id for c in master.cells if _params.TAG in c.tags})
    if chosen is None:
        return submission_id, [f"STUDENT_ID is not set in the notebook: graded with the "
                               f"parameters of the submission's id {submission_id[:60]!r}"]
    warnings = []
    if chosen.casefold() not in submission_id.casefold():
        warnings.append(f"the notebook's id {chosen[:60]!r} is not the submission's id "
                        f"{submission_id[:60]!r}: graded with {chosen[:60]!r}'s parameters")
    return chosen, warnings


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
