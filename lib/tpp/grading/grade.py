"""``tpp grade``: grade a folder of submissions into rows, feedback, results.json, gradebook.csv.

One row per submission, always. A row's ``status`` is one of

- ``graded``: ran to the end; per-question points;
- ``missing-answers``: some (or all) answer cells were not found; those questions get 0;
- ``timeout``: a cell exceeded the per-cell timeout; that question gets 0, the others count
  (a kernel that ignores the interrupt is killed and restarted, see :mod:`tpp.grading.run`);
- ``kernel-died``: the kernel died twice in the same question (``os._exit``, a resource limit,
  garbled messages; it is retried once); that question gets 0, the others count;
- ``invalid-notebook``: not a file, not UTF-8, not JSON, not a notebook;
- ``wrong-assignment``: the notebook says it belongs to another assignment;
- ``grader-error``: a bug in the grader (reported, never hidden).

Results are written incrementally: ``rows/<student>.json`` as soon as a student is graded, then
the aggregate files, so an interrupted run loses nothing already graded, and a re-run skips
students whose submission and reference are unchanged (unless ``force``).
"""

from __future__ import annotations

import ast
import concurrent.futures as cf
import csv
import dataclasses
import hashlib
import io
import json
import multiprocessing
import platform
import secrets
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpp.grading.compare import SchemaError, equal, load_record
from tpp.grading.notebook import Master, MasterError, find_masters, parse_master
from tpp.grading.run import Limits, RunOutcome, run_cells
from tpp.grading.submission import (
    Rebuilt,
    Rejected,
    answer_sources,
    read_notebook,
    rebuild,
    submitted_assignment,
)

GRADER_VERSION = "1"
STATUSES = (
    "graded",
    "missing-answers",
    "timeout",
    "kernel-died",
    "invalid-notebook",
    "wrong-assignment",
    "grader-error",
)


@dataclass(frozen=True)
class GradeOptions:
    """Options of a grading run (see ``tpp grade --help``)."""

    timeout: float = 30.0
    workers: int = 1
    force: bool = False
    memory_mb: int = 2048
    cpu_seconds: int = 120
    guard: bool = True  # run kernels under tpp.grading.guard (see chapters/instructors.md)

    def limits(self) -> Limits:
        if self.timeout <= 0:
            raise ValueError(f"timeout={self.timeout} must be > 0 seconds: pass --timeout 30")
        if self.workers < 1:
            raise ValueError(f"-j {self.workers} must be >= 1: pass -j 1 or more")
        return Limits(
            timeout=self.timeout,
            memory_mb=self.memory_mb,
            cpu_seconds=self.cpu_seconds,
            guard=self.guard,
        )


# --- reference values from the master --------------------------------------------------------


def _library_hash() -> str:
    """A hash of the ``tpp`` sources: the reference depends on the library the master uses."""
    import tpp

    h = hashlib.sha256()
    root = Path(tpp.__file__).parent
    for p in sorted(root.rglob("*.py")):
        h.update(str(p.relative_to(root)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def reference_key(master: Master) -> str:
    """Content hash deciding whether a cached reference is still valid."""
    h = hashlib.sha256()
    for part in (GRADER_VERSION, master.sha256, _library_hash(), platform.python_version()):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _run_rebuilt(master: Master, answers: dict[str, str], limits: Limits) -> tuple[
    Rebuilt, RunOutcome, dict[str, dict[str, Any] | str]
]:
    """Rebuild, run in a fresh kernel, read each question's serialised answers (or an error)."""
    tmp = Path(tempfile.mkdtemp(prefix="tpp-grade-"))
    try:
        work = tmp / "work"
        work.mkdir()
        answers_dir = tmp / f"a{secrets.token_hex(6)}"  # not guessable from the kernel's cwd
        answers_dir.mkdir()
        rebuilt = rebuild(master, answers, answers_dir)
        outcome = run_cells(
            [c.source for c in rebuilt.cells],
            work,
            limits,
            groups=[c.question for c in rebuilt.cells],
            replayable=[c.kind != "serialise" for c in rebuilt.cells],
        )
        records: dict[str, dict[str, Any] | str] = {}
        for q in master.questions:
            idx = next(
                i
                for i, c in enumerate(rebuilt.cells)
                if c.kind == "serialise" and c.question == q.id
            )
            cell = outcome.cells[idx]
            if cell.status != "ok":
                why = f"{cell.status}: {cell.ename}" if cell.ename else cell.status
                records[q.id] = f"answers not recorded ({why})"
                continue
            try:
                records[q.id] = load_record(
                    rebuilt.answer_files[q.id], rebuilt.nonce, q.id, list(q.answers)
                )
            except (OSError, SchemaError) as exc:
                records[q.id] = f"answers not recorded ({str(exc)[:100]})"
        return rebuilt, outcome, records
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def compute_reference(master: Master, limits: Limits) -> dict[str, dict[str, Any]]:
    """Run the master through the grading pipeline; its values are the reference.

    Raises :class:`MasterError` if any cell of the master fails or an answer is not a plain
    value: a master must pass all its own checks.
    """
    answers = {c.id: c.source for c in master.cells if c.role == "answer"}
    rebuilt, outcome, records = _run_rebuilt(master, answers, limits)
    problems = []
    if outcome.died or outcome.hung:
        problems.append(outcome.reason)
    for cell, res in zip(rebuilt.cells, outcome.cells, strict=True):
        if res.status not in ("ok",) and cell.kind != "serialise":
            problems.append(
                f"cell {cell.master_id} ({cell.kind} {cell.question or ''}) {res.status}"
                f"{': ' + res.ename + ': ' + res.evalue[:200] if res.ename else ''}"
            )
    ref: dict[str, dict[str, Any]] = {}
    for q in master.questions:
        rec = records[q.id]
        if isinstance(rec, str):
            problems.append(f"question {q.id}: {rec}")
            continue
        for name, value in rec.items():
            if value["t"] in ("missing", "error"):
                problems.append(
                    f"question {q.id}: answer {name!r} is "
                    f"{'not defined' if value['t'] == 'missing' else value.get('why')}"
                )
        ref[q.id] = rec
    if problems:
        raise MasterError(f"{master.path}: the master fails in the grader: " + "; ".join(problems))
    return ref


def load_reference(master: Master, limits: Limits, cache_dir: Path) -> dict[str, Any]:
    """The master's reference values, cached in ``cache_dir`` by content hash."""
    key = reference_key(master)
    path = cache_dir / f"reference-{master.assignment}.json"
    if path.exists():
        try:
            cached = json.loads(path.read_text())
            if cached.get("key") == key:
                return cached["values"]
        except (ValueError, OSError):
            pass
    values = compute_reference(master, limits)
    cache_dir.mkdir(parents=True, exist_ok=True)
    _atomic_write(path, json.dumps({"key": key, "values": values}, sort_keys=True))
    return values


# --- grading one submission ----------------------------------------------------------------


def _assigned_names(source: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {
        n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }


def _empty_row(student: str, path: Path, master: Master, status: str, reason: str) -> dict:
    return {
        "student": student,
        "file": path.name,
        "assignment": master.assignment,
        "status": status,
        "reason": reason,
        "points": {q.id: 0 for q in master.questions},
        "total": 0,
        "max": master.max_points,
        "questions": {
            q.id: {
                "points": 0,
                "max": q.points,
                "result": "not-run",
                "detail": reason,
                "checks": [],
            }
            for q in master.questions
        },
    }


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    except OSError:
        return ""
    return h.hexdigest()


def grade_submission(
    path: Path, master: Master, reference: dict[str, Any], limits: Limits
) -> dict[str, Any]:
    """Grade one submission file into a row (never raises for a bad submission)."""
    student = path.stem
    start = time.monotonic()
    try:
        row = _grade(path, student, master, reference, limits)
    except Rejected as rej:
        row = _empty_row(student, path, master, rej.status, rej.reason)
    except Exception as exc:  # a grader bug must become a row, not a crash
        row = _empty_row(
            student, path, master, "grader-error", f"{type(exc).__name__}: {str(exc)[:200]}"
        )
    row["duration_s"] = round(time.monotonic() - start, 3)
    return row


def _grade(
    path: Path, student: str, master: Master, reference: dict[str, Any], limits: Limits
) -> dict[str, Any]:
    nb = read_notebook(path)
    claimed = submitted_assignment(nb)
    if claimed is not None and claimed != master.assignment:
        raise Rejected(
            "wrong-assignment",
            f"notebook of assignment {claimed[:60]!r}, not {master.assignment!r}",
        )
    answers = answer_sources(nb, master)
    if not answers:
        raise Rejected(
            "missing-answers", f"no answer cell of {master.assignment} found in the notebook"
        )
    rebuilt, outcome, records = _run_rebuilt(master, answers, limits)

    questions: dict[str, Any] = {}
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
                msg = f"{res.ename}: {res.evalue}".strip(": ") if res.status == "error" else ""
                if res.status in ("timeout", "died", "not-run"):
                    msg = {"timeout": "timed out", "died": "the kernel died"}.get(
                        res.status, "not run"
                    )
                checks.append(
                    {"kind": "public", "k": k_pub, "passed": res.status == "ok", "message": msg}
                )
            elif kinds[i] == "hidden":
                k_hid += 1
                hidden_names[k_hid] = _assigned_names(rebuilt.cells[i].source) & set(q.answers)
                checks.append({"kind": "hidden", "k": k_hid, "passed": res.status == "ok"})
        answer_missing = any(
            c.id in rebuilt.missing for c in master.cells_of(q.id, "answer")
        )
        rec = records[q.id]
        wrong: dict[str, str] = {}
        if isinstance(rec, dict):
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
        if any(s == "timeout" for s in statuses.values()):
            result, detail = "timeout", f"a cell exceeded {limits.timeout:g} s"
            timeouts.append(q.id)
        elif any(s == "died" for s in statuses.values()):
            result, detail = "kernel-died", outcome.reason
        elif answer_missing:
            result, detail = "missing", "answer cell not found in the submission"
            missing_q.append(q.id)
        elif isinstance(rec, str):
            if any(kinds[i] == "serialise" and statuses[i] == "not-run" for i in idx):
                result, detail = "not-run", "not run: " + outcome.reason
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
            detail = f"the answer cell raised {raised[0].ename}: {raised[0].evalue}"[:220] + (
                "; " + detail if detail else ""
            )
        points = q.points if result == "correct" else 0
        questions[q.id] = {
            "points": points,
            "max": q.points,
            "result": result,
            "detail": detail[:300],
            "checks": checks,
        }

    where = ""
    for cell, res in zip(rebuilt.cells, outcome.cells, strict=True):
        if res.status in ("died", "timeout") and not where:
            where = f" in {cell.kind} cell of {cell.question or 'the setup'}"
    if outcome.died:
        status = "kernel-died"
        reason = outcome.reason + where
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
    points = {qid: v["points"] for qid, v in questions.items()}
    return {
        "student": student,
        "file": path.name,
        "assignment": master.assignment,
        "status": status,
        "reason": reason,
        "points": points,
        "total": sum(points.values()),
        "max": master.max_points,
        "questions": questions,
    }


# --- outputs: feedback, results.json, gradebook.csv -------------------------------------------


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _clean(text: str, limit: int = 300) -> str:
    """One line of student-controlled text, safe inside Markdown inline code."""
    text = " ".join(str(text).split()).replace("`", "'")
    return text[:limit] + ("…" if len(text) > limit else "")


def feedback_markdown(row: dict[str, Any], master: Master) -> str:
    """The student's feedback: per question, pass/fail, public check messages only."""
    lines = [
        f"# Feedback: {master.assignment} — {row['student']}",
        "",
        f"**Total: {_fmt(row['total'])} / {_fmt(row['max'])} points.** Status: {row['status']}"
        + (f" — {_clean(row['reason'])}" if row["reason"] else ""),
        "",
    ]
    for q in master.questions:
        info = row["questions"][q.id]
        lines.append(
            f"## {q.id}: {_fmt(info['points'])} / {_fmt(info['max'])} — {info['result']}"
        )
        if info["detail"] and info["result"] != "correct" and info["detail"] != row["reason"]:
            lines.append(f"- `{_clean(info['detail'])}`")
        for chk in info["checks"]:
            if chk["kind"] == "public":
                if chk["passed"]:
                    lines.append(f"- public check {chk['k']}: passed")
                else:
                    lines.append(
                        f"- public check {chk['k']} failed: `{_clean(chk['message'] or 'error')}`"
                    )
            elif not chk["passed"]:
                lines.append(f"- hidden check {chk['k']} failed")
        lines.append("")
    return "\n".join(lines)


def _csv_cell(value: Any) -> str:
    """Spreadsheet-safe text: a leading =, +, -, @ would be read as a formula."""
    text = str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def gradebook_csv(rows: list[dict[str, Any]], master: Master) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["student", *[q.id for q in master.questions], "total", "max", "status", "reason"])
    for r in rows:
        w.writerow(
            [
                _csv_cell(r["student"]),
                *[_fmt(r["points"][q.id]) for q in master.questions],
                _fmt(r["total"]),
                _fmt(r["max"]),
                r["status"],
                _csv_cell(_clean(r["reason"], 200)),
            ]
        )
    return out.getvalue()


def write_outputs(out: Path, rows: list[dict[str, Any]], master: Master) -> None:
    rows = sorted(rows, key=lambda r: r["student"])
    results = {
        "assignment": master.assignment,
        "title": master.title,
        "questions": [{"id": q.id, "points": q.points} for q in master.questions],
        "max": master.max_points,
        "students": rows,
    }
    _atomic_write(out / "results.json", json.dumps(results, indent=1, sort_keys=True))
    _atomic_write(out / "gradebook.csv", gradebook_csv(rows, master))


# --- the folder --------------------------------------------------------------------------------


@dataclass
class Summary:
    """What a grading run did."""

    assignment: str
    rows: list[dict[str, Any]]
    graded_now: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def describe(self) -> str:
        counts = Counter(r["status"] for r in self.rows)
        per = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        rate = len(self.graded_now) / self.seconds * 60 if self.seconds and self.graded_now else 0
        return (
            f"{self.assignment}: {len(self.rows)} submissions ({per}); graded "
            f"{len(self.graded_now)} in {self.seconds:.1f} s ({rate:.1f}/min), "
            f"skipped {len(self.skipped)} already graded"
        )


def infer_assignment(submissions: Path, solutions: Path) -> str:
    """The assignment a folder of submissions is for: its name, else the notebooks' metadata."""
    names = {p.stem for p in find_masters(solutions)}
    if submissions.name in names:
        return submissions.name
    votes: Counter[str] = Counter()
    for p in sorted(submissions.glob("*.ipynb")):
        try:
            claimed = submitted_assignment(read_notebook(p))
        except Rejected:
            continue
        if claimed in names:
            votes[claimed] += 1
    if not votes:
        raise ValueError(
            f"cannot tell which assignment {submissions} holds: pass --assignment "
            f"(one of {sorted(names)})"
        )
    return votes.most_common(1)[0][0]


def _worker(args: tuple[str, str, dict[str, Any], Limits]) -> dict[str, Any]:
    path, master_path, reference, limits = args
    master = parse_master(Path(master_path))
    return grade_submission(Path(path), master, reference, limits)


def grade_folder(
    submissions: Path,
    out: Path,
    *,
    solutions: Path,
    assignment: str | None = None,
    options: GradeOptions | None = None,
    progress: Callable[[str], Any] | None = None,
) -> Summary:
    """Grade every ``*.ipynb`` of ``submissions`` into ``out`` (see the module docstring)."""
    options = options or GradeOptions()
    limits = options.limits()
    if not submissions.is_dir():
        raise FileNotFoundError(f"no folder {submissions}: pass the folder of submissions")
    name = assignment or infer_assignment(submissions, solutions)
    master_path = solutions / f"{name}.ipynb"
    if not master_path.is_file():
        raise FileNotFoundError(f"no master {master_path}: check --assignment / --solutions")
    master = parse_master(master_path)
    if out.resolve() == submissions.resolve():
        raise ValueError("--out must differ from the submissions folder")
    out.mkdir(parents=True, exist_ok=True)
    # the kernels' guard must keep submitted code out of the masters and the results
    protect = {str(p.resolve()) for p in (solutions, master_path.parent, out)}
    limits = dataclasses.replace(limits, protect=(*limits.protect, *sorted(protect)))
    reference = load_reference(master, limits, out / ".cache")
    key = reference_key(master)

    started = time.monotonic()
    files = sorted(p for p in submissions.glob("*.ipynb"))
    rows: dict[str, dict[str, Any]] = {}
    todo: list[Path] = []
    summary = Summary(master.assignment, [])
    for p in files:
        row_path = out / "rows" / f"{p.stem}.json"
        if not options.force and row_path.exists():  # grader errors are always retried
            try:
                row = json.loads(row_path.read_text())
                if (
                    row.get("submission_sha256") == _sha256_file(p)
                    and row.get("reference_key") == key
                    and row.get("guard", False) == limits.guard  # graded as protected now
                    and row.get("status") != "grader-error"
                ):
                    rows[p.stem] = row
                    summary.skipped.append(p.stem)
                    continue
            except (ValueError, OSError):
                pass
        todo.append(p)

    def finish(p: Path, row: dict[str, Any]) -> None:
        row["submission_sha256"] = _sha256_file(p)
        row["guard"] = limits.guard
        row["reference_key"] = key
        _atomic_write(out / "rows" / f"{p.stem}.json", json.dumps(row, indent=1, sort_keys=True))
        _atomic_write(out / "feedback" / f"{p.stem}.md", feedback_markdown(row, master))
        rows[p.stem] = row
        summary.graded_now.append(p.stem)
        write_outputs(out, list(rows.values()), master)
        if progress:
            progress(
                f"[{len(summary.graded_now)}/{len(todo)}] {p.stem}: {row['status']} "
                f"{_fmt(row['total'])}/{_fmt(row['max'])} ({row.get('duration_s', 0):.1f} s)"
            )

    if options.workers == 1 or len(todo) <= 1:
        for p in todo:
            finish(p, grade_submission(p, master, reference, limits))
    else:
        ctx = multiprocessing.get_context("spawn")
        with cf.ProcessPoolExecutor(max_workers=options.workers, mp_context=ctx) as pool:
            futures = {
                pool.submit(_worker, (str(p), str(master_path), reference, limits)): p
                for p in todo
            }
            broken: list[Path] = []
            for fut in cf.as_completed(futures):
                p = futures[fut]
                try:
                    row = fut.result()
                except cf.process.BrokenProcessPool:
                    broken.append(p)
                    continue
                except Exception as exc:  # a crashed worker is a row
                    row = _empty_row(
                        p.stem, p, master, "grader-error", f"worker failed: {str(exc)[:200]}"
                    )
                finish(p, row)
        # A killed worker (a kernel can signal its parent) breaks the pool: every submission
        # still pending fails with it. Regrade those one by one, each in a worker of its own,
        # so that only the submission that killed its worker gets an error row.
        for p in sorted(broken):
            with cf.ProcessPoolExecutor(max_workers=1, mp_context=ctx) as solo:
                try:
                    row = solo.submit(
                        _worker, (str(p), str(master_path), reference, limits)
                    ).result()
                except Exception as exc:
                    row = _empty_row(
                        p.stem, p, master, "grader-error",
                        f"the process grading it was killed ({type(exc).__name__})",
                    )  # fmt: skip
            finish(p, row)
    for p in files:  # feedback for skipped rows too, in case it was deleted
        fb = out / "feedback" / f"{p.stem}.md"
        if not fb.exists():
            _atomic_write(fb, feedback_markdown(rows[p.stem], master))
    write_outputs(out, list(rows.values()), master)
    summary.rows = sorted(rows.values(), key=lambda r: r["student"])
    summary.seconds = time.monotonic() - started
    return summary
