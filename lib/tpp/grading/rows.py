"""Grade one submission into a row: per-question result, points, checks, submitted values.

Each question's ``result`` is one of :data:`RESULTS`; :data:`WORDING` is the one sentence the
feedback uses for it. The row never contains a hidden cell's source: hidden checks are reported
by number only, and they run without being stored in the kernel's input history (``In``).
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tpp.grading.compare import _describe, equal, safe_type
from tpp.grading.notebook import Master
from tpp.grading.submission import (
    Rejected,
    answer_sources,
    assigned_names,
    parameters_id,
    read_notebook,
    submitted_assignment,
)

if TYPE_CHECKING:
    from tpp.grading.limits import Limits

RESULTS = ("correct", "incorrect", "not-attempted", "missing", "error", "timeout",
           "kernel-died", "not-run")  # fmt: skip
WORDING = {
    "correct": "correct",
    "incorrect": "answered, but the value is wrong",
    "not-attempted": "not attempted: the answer cell is still the blank exercise",
    "missing": "the answer cell was not found in the submission",
    "error": "the answer could not be recorded: the code raised an error",
    "timeout": "a cell ran longer than the time limit",
    "kernel-died": "the kernel died (a resource limit, or the code ended the process)",
    "not-run": "not run: an earlier failure stopped the notebook",
}
DETAIL_CHARS = 300


def clip(text: str, limit: int = DETAIL_CHARS) -> str:
    """At most ``limit`` characters of student-controlled text, one line."""
    text = " ".join(str(text)[: limit * 4].split())
    return text[:limit] + ("…" if len(text) > limit else "")


def show_value(v: dict[str, Any], limit: int = 80) -> str:
    """A short text for a serialised value (for results.json and the class report)."""
    t = v.get("t")
    if t in ("int", "float", "bool", "str"):
        return clip(repr(v["v"]), limit)
    if t == "frac":
        return f"{v['n']}/{v['d']}"
    if t == "none":
        return "None"
    if t == "missing":
        return "(not defined)"
    if t == "error":
        return clip(f"(error: {v.get('why', '')})", limit)
    return _describe(v)


_GUARD_WHAT = ("reading", "writing", "opening the directory", "listing", "starting processes",
               "ctypes", "creating links", "signalling other processes", "importing",
               "changing the grader's guard")  # tpp.grading.guard's refusals  # fmt: skip
_GUARD_RE = re.compile(
    r"the grader does not allow ({}|[A-Za-z_]{{1,20}}(?:\.[A-Za-z_]{{1,20}}){{1,3}})"
    r"(?::? ([A-Za-z_]{{1,20}}(?:\.[A-Za-z_]{{1,20}}){{0,3}}))?".format(
        "|".join(re.escape(w) for w in _GUARD_WHAT))
)


def guard_words(message: str) -> str:
    """": the grader does not allow <what>[: <event>]" when ``message`` is one of the guard's
    refusals (its fixed words and an audit event's dotted name only, no path), else ""."""
    m = _GUARD_RE.match(str(message))
    if not m:
        return ""
    return f": the grader does not allow {m.group(1)}" + (f": {m.group(2)}" if m.group(2) else "")


def _literals(source: str) -> set[str]:
    """The string constants of a master cell's source (its own messages)."""
    import ast

    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set()
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
            and isinstance(n.value, str)}  # fmt: skip


def _check_message(res: Any, source: str) -> str:
    """A failed public check's message: its exception's (built-in) type, and its text only when
    that text is one of the check cell's own string constants — never text the submission
    made (an exception's message or class name can carry anything, even a hidden cell's
    source captured by an audit hook)."""
    kind = safe_type(res.ename)
    text = str(res.evalue)
    return f"{kind}: {text}" if text and text in _literals(source) else kind


def question_entry(points: float, max_points: float, result: str, detail: str = "",
                   checks: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One question of a row."""
    return {"points": points, "max": max_points, "result": result, "detail": clip(detail),
            "checks": checks or []}  # fmt: skip


def make_row(student: str, file: str, master: Master, status: str, reason: str,
             questions: dict[str, dict[str, Any]] | None = None, *,
             warnings: list[str] | None = None, parameters_id: str | None = None,
             submitted: dict[str, dict[str, str]] | None = None) -> dict[str, Any]:
    """The one constructor of a row. Without ``questions`` every question is ``not-run`` with
    0 points and ``reason`` as its detail (a submission that was never run)."""
    if questions is None:
        questions = {q.id: question_entry(0, q.points, "not-run", reason)
                     for q in master.questions}  # fmt: skip
    points = {qid: v["points"] for qid, v in questions.items()}
    row = {
        "student": student,
        "file": file,
        "assignment": master.assignment,
        "status": status,
        "reason": clip(reason),
        "points": points,
        "total": sum(points.values()),
        "max": master.max_points,
        "warnings": [clip(w) for w in warnings or []],
        "submitted": submitted or {},
        "questions": questions,
    }
    if parameters_id is not None:
        row["parameters_id"] = parameters_id
    return row


# A bound of the sandbox that was hit names the row's status (tpp.grading.bounds): the most
# telling first. The other questions keep their points.
BOUND_WORDS = {
    "memory-limit": "the sandbox reached its memory limit of {memory_mb} MiB (--memory-mb)",
    "pids-limit": "the sandbox reached its limit of {nproc} processes and threads (--nproc)",
    "disk-limit": "the kernel's shared folder reached {disk_mb} MiB (--disk-mb)",
    "message-too-large": "the kernel sent a message over {max_message_mb} MiB "
                         "(--max-message-mb); it was dropped",
}


def grade_submission(
    path: Path,
    master: Master,
    reference: dict[str, Any] | Any,
    limits: Limits,
    student: str | None = None,
    file: str | None = None,
) -> dict[str, Any]:
    """Grade one submission file into a row (never raises for a bad submission).

    ``reference`` is the master's values, or a callable ``student -> values`` (per-student
    parameters, :mod:`tpp.grading.params`).
    """
    student = student if student is not None else path.stem
    file = file if file is not None else path.name
    start = time.monotonic()
    try:
        row = _grade(path, student, file, master, reference, limits)
    except Rejected as rej:
        row = make_row(student, file, master, rej.status, rej.reason)
    except OSError as exc:
        row = make_row(student, file, master, "invalid-notebook",
                        f"cannot read the file ({type(exc).__name__})")  # fmt: skip
    except Exception as exc:  # a grader bug must become a row, not a crash
        row = make_row(student, file, master, "grader-error",
                        f"{type(exc).__name__}: {str(exc)[:200]}")  # fmt: skip
    row["duration_s"] = round(time.monotonic() - start, 3)
    return row


def _not_attempted(master: Master, answers: dict[str, str], qid: str) -> bool:
    from tpp.grading.assign import stub_source  # nbformat: imported only when grading

    cells = master.cells_of(qid, "answer")
    return bool(cells) and all(
        " ".join(answers.get(c.id, "").split()) == " ".join(stub_source(c.source).split())
        for c in cells
    )


def _grade(
    path: Path, student: str, file: str, master: Master, reference: Any, limits: Limits
) -> dict[str, Any]:
    nb = read_notebook(path, int(limits.max_notebook_mb * 1_000_000), limits.max_cells,
                       limits.max_source_chars)  # fmt: skip
    claimed = submitted_assignment(nb)
    if claimed is not None and claimed != master.assignment:
        raise Rejected(
            "wrong-assignment",
            f"notebook of assignment {claimed[:60]!r}, not {master.assignment!r}",
        )
    answers, warnings = answer_sources(nb, master)
    if not answers:
        raise Rejected(
            "missing-answers", f"no answer cell of {master.assignment} found in the notebook"
        )
    from tpp.grading.reference import run_rebuilt  # the kernel machinery, only when grading

    pid, id_warnings = parameters_id(nb, master, student)
    warnings = [*id_warnings, *warnings]
    if callable(reference):
        reference = reference(pid)
    rebuilt, outcome, records = run_rebuilt(master, answers, limits, pid)

    questions: dict[str, Any] = {}
    submitted: dict[str, dict[str, str]] = {}
    timeouts: list[str] = []
    missing_q: list[str] = []
    for q in master.questions:
        idx = [i for i, c in enumerate(rebuilt.cells) if c.question == q.id]
        kinds = {i: rebuilt.cells[i].kind for i in idx}
        statuses = {i: outcome.cells[i].status for i in idx}
        checks = []
        k_pub = k_hid = 0
        hidden_names: dict[int, set[str]] = {}
        for i in idx:
            res = outcome.cells[i]
            if kinds[i] == "check":
                k_pub += 1
                msg = _check_message(res, rebuilt.cells[i].source) if res.status == "error" \
                    else ""  # fmt: skip
                if res.status in ("timeout", "died", "not-run"):
                    msg = {"timeout": "timed out", "died": "the kernel died"}.get(
                        res.status, "not run"
                    )
                checks.append({"kind": "public", "k": k_pub, "passed": res.status == "ok",
                               "message": clip(msg)})  # fmt: skip
            elif kinds[i] == "hidden":
                k_hid += 1
                hidden_names[k_hid] = assigned_names(rebuilt.cells[i].source) & set(q.answers)
                checks.append({"kind": "hidden", "k": k_hid, "passed": res.status == "ok"})
        answer_missing = any(c.id in rebuilt.missing for c in master.cells_of(q.id, "answer"))
        rec = records[q.id]
        wrong: dict[str, str] = {}
        if isinstance(rec, dict):
            submitted[q.id] = {n: show_value(v) for n, v in rec.items()}
            for name in q.answers:
                ok, why = equal(rec[name], reference[q.id][name], q.rtol, q.atol)
                if not ok:
                    wrong[name] = why
        for chk in checks:
            if chk["kind"] == "hidden" and any(n in wrong for n in hidden_names[chk["k"]]):
                chk["passed"] = False
        # A hidden cell computes the graded value: if it raised, the value is not its result
        # (e.g. a probe variable preset by the answer cell, then the probe made to fail).
        hidden_failed = any(c["kind"] == "hidden" and not c["passed"] for c in checks)
        if isinstance(rec, dict) and hidden_failed and not wrong:
            wrong["_hidden"] = "a hidden check failed"
        if any(outcome.cells[i].ename == "message-too-large" for i in idx):
            result = "timeout"
            detail = BOUND_WORDS["message-too-large"].format(max_message_mb=limits.max_message_mb)
            timeouts.append(q.id)
        elif any(outcome.cells[i].ename == "budget" for i in idx):
            result = "timeout"  # its wait was the rest of the budget, not the per-cell timeout
            detail = f"the submission's time budget of {limits.budget_s:g} s ran out in this cell"
            timeouts.append(q.id)
        elif any(s == "timeout" for s in statuses.values()):
            result, detail = "timeout", f"a cell exceeded {limits.timeout:g} s"
            timeouts.append(q.id)
        elif any(s == "died" for s in statuses.values()):
            result, detail = "kernel-died", outcome.reason
        elif answer_missing:
            result, detail = "missing", ""
            missing_q.append(q.id)
        elif _not_attempted(master, answers, q.id):
            result, detail = "not-attempted", ""
        elif getattr(outcome, "over_budget", False) and any(
            kinds[i] == "serialise" and statuses[i] == "not-run" for i in idx
        ):  # the run's time ran out (a busy machine included) before this question: honest
            result, detail = "timeout", outcome.reason
            timeouts.append(q.id)
        elif isinstance(rec, str):
            if any(kinds[i] == "serialise" and statuses[i] == "not-run" for i in idx):
                result, detail = "not-run", outcome.reason
            else:
                result, detail = "error", rec
        elif wrong:
            hidden_only = {"_hidden", *set().union(*hidden_names.values())}
            shown = [f"{n}: {w}" for n, w in wrong.items() if n not in hidden_only]
            result = "incorrect"
            detail = "; ".join(shown) if shown else "a hidden check failed"
        else:
            result, detail = "correct", ""
        raised = [
            outcome.cells[i]
            for i in idx
            if kinds[i] == "answer" and outcome.cells[i].status == "error"
        ]
        if raised and result in ("incorrect", "error"):  # e.g. what the guard refused
            detail = f"the answer cell raised {safe_type(raised[0].ename)}" + (
                guard_words(raised[0].evalue)) + (
                "; " + detail if detail else ""
            )
        points = q.points if result == "correct" else 0
        if result != "incorrect":  # the right values are never kept; wrong ones for the report
            submitted.pop(q.id, None)
        questions[q.id] = question_entry(points, q.points, result, detail, checks)

    where = ""
    for cell, res in zip(rebuilt.cells, outcome.cells, strict=True):
        if res.status in ("died", "timeout") and not where:
            where = f" in {cell.kind} cell of {cell.question or 'the setup'}"
    setup = [(c, r) for c, r in zip(rebuilt.cells, outcome.cells, strict=True)
             if c.kind == "setup" and r.status == "error"]  # fmt: skip
    if setup:  # the master's own cell failed: the environment (a limit, an import), not a score
        cell, res = setup[0]
        status = "setup-failed"
        reason = (f"setup cell {cell.master_id} raised {safe_type(res.ename)}: the grading "
                  "environment failed (a limit, a missing library); fix it and grade again")
    elif getattr(outcome, "exceeded", None):
        status = next(b for b in BOUND_WORDS if b in outcome.exceeded)
        reason = BOUND_WORDS[status].format(memory_mb=limits.memory_mb, nproc=limits.nproc,
                                            max_message_mb=limits.max_message_mb,
                                            disk_mb=limits.disk_mb) + where
    elif outcome.died:
        status = "kernel-died"
        reason = outcome.reason + where
    elif getattr(outcome, "over_budget", False):
        status, reason = "timeout", outcome.reason
    elif timeouts or outcome.hung:
        status = "timeout"
        reason = f"a cell of {', '.join(timeouts)} exceeded {limits.timeout:g} s" + (
            "; the kernel ignored the interrupt and was restarted" if outcome.hung else ""
        )
    elif missing_q:
        status = "missing-answers"
        reason = f"no answer cell for {', '.join(missing_q)}"
    else:
        status, reason = "graded", ""
    return make_row(student, file, master, status, reason, questions, warnings=warnings,
                    parameters_id=pid, submitted=submitted)
