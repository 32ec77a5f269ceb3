"""``tpp grade``: grade a folder (or zip) of submissions into rows, feedback and reports.

One row per submission, always. A row's ``status`` is one of

- ``graded``: ran to the end; per-question points;
- ``missing-answers``: some (or all) answer cells were not found; those questions get 0;
- ``timeout``: a cell exceeded the per-cell timeout (that question gets 0, the others count),
  or the submission's wall-clock budget ran out
  (a kernel that ignores the interrupt is killed and restarted, see :mod:`tpp.grading.run`);
- ``kernel-died``: the kernel died twice in the same question (``os._exit``, a resource limit,
  garbled messages; it is retried once); that question gets 0, the others count;
- ``invalid-notebook``: not a regular file, not UTF-8, not JSON, not a notebook;
- ``not-a-notebook``, ``unreadable-archive``, ``duplicate-id``: see :mod:`tpp.grading.inputs`
  (every entry of the submissions gets exactly one row);
- ``too-large``: over the notebook size, cell count or source length caps (before parsing);
- ``setup-failed``: a setup cell of the master raised (the environment, not the answers);
- ``memory-limit``, ``pids-limit``: the sandbox's cgroup bound (``--memory-mb``, ``--nproc``)
  was hit, forked children included (:mod:`tpp.grading.bounds`); the other questions count;
- ``disk-limit``: without root the kernel's shared folder is on the host disk, bounded by a
  watchdog (:class:`tpp.grading.bounds.DiskWatch`): it reached ``--disk-mb``;
- ``message-too-large``: a kernel message over ``--max-message-mb`` was dropped;
- ``wrong-assignment``: the notebook says it belongs to another assignment;
- ``grader-error``: a bug in the grader (reported, never hidden).

The pieces: :mod:`tpp.grading.inputs` (what to grade), :mod:`tpp.grading.reference` (the
master's values, cached outside the results), :mod:`tpp.grading.rows` (one submission),
:mod:`tpp.grading.report` (what is written), :mod:`tpp.grading.sandbox` (the kernel's box).
Results are written incrementally: ``rows/<id>.json`` as soon as a student is graded, then the
aggregate files, so an interrupted run loses nothing already graded, and a re-run skips
students whose submission and reference are unchanged (unless ``force``).
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import hashlib
import json
import multiprocessing
import shutil
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpp.grading import bounds, sandbox
from tpp.grading.inputs import Item, collect, safe_name
from tpp.grading.limits import Limits
from tpp.grading.notebook import Master, find_masters, parse_master
from tpp.grading.reference import (  # noqa: F401 - re-exported
    compute_reference,
    load_reference,
    reference_key,
)
from tpp.grading.report import atomic_write, feedback_markdown, fmt, write_outputs
from tpp.grading.rows import clip, grade_submission, make_row
from tpp.grading.submission import (
    Rejected,
    parameters_of,
    read_notebook,
    submitted_assignment,
)

STATUSES = (
    "graded",
    "missing-answers",
    "timeout",
    "kernel-died",
    "invalid-notebook",
    "not-a-notebook",
    "unreadable-archive",
    "duplicate-id",
    "wrong-assignment",
    "setup-failed",
    "too-large",
    "memory-limit",
    "pids-limit",
    "disk-limit",
    "message-too-large",
    "grader-error",
)
# rows that a re-run grades again (never reused as "already graded")
RETRY = ("grader-error", "setup-failed")


@dataclass(frozen=True)
class GradeOptions:
    """Options of a grading run (see ``tpp grade --help``)."""

    timeout: float = 30.0
    workers: int = 1
    force: bool = False
    memory_mb: int = 2048
    cpu_seconds: int = 120
    guard: bool = True  # run kernels under tpp.grading.guard (see chapters/instructors.md)
    sandbox: bool = True  # run kernels in bubblewrap (tpp.grading.sandbox)
    allow_unsandboxed: bool = False  # grade without the sandbox where bwrap cannot run
    cache_dir: Path | None = None  # reference cache (default: the user's cache folder)
    budget_s: float = 600.0  # wall-clock seconds per submission (restarts, replays included)
    disk_mb: int = 256  # each writable filesystem of a kernel
    nproc: int = 64  # processes + threads of a sandbox
    cpus: float = 1.0  # CPU cores of a sandbox (cgroup quota)
    max_message_mb: int = 16  # largest kernel message the grader accepts
    max_notebook_mb: float = 10.0  # largest submission file
    max_cells: int = 2_000  # most cells per submission
    max_source_chars: int = 200_000  # longest cell source
    cgroups: bool = True  # bound each sandbox with a cgroup where the machine gives one

    def limits(self) -> Limits:
        if self.timeout <= 0:
            raise ValueError(f"timeout={self.timeout} must be > 0 seconds: pass --timeout 30")
        if self.workers < 1:
            raise ValueError(f"-j {self.workers} must be >= 1: pass -j 1 or more")
        use_box = self.sandbox
        if use_box and sandbox.probe():
            if not self.allow_unsandboxed:
                raise ValueError(
                    f"no OS sandbox for the kernels: {sandbox.probe()}. Install bubblewrap "
                    "(Debian: apt-get install bubblewrap), or pass --unsandboxed to grade with "
                    "the in-kernel guard only (not for credit: see the instructors' page)"
                )
            use_box = False
        for name in ("budget_s", "disk_mb", "nproc", "cpus", "max_message_mb", "max_notebook_mb",
                     "max_cells", "max_source_chars", "memory_mb", "cpu_seconds"):  # fmt: skip
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}={getattr(self, name)} must be > 0: pass "
                                 f"--{name.replace('_', '-').removesuffix('-s')} with a positive "
                                 "value (see tpp grade --help)")  # fmt: skip
        if self.memory_mb < bounds.MIN_MEMORY_MB:
            raise ValueError(f"memory_mb={self.memory_mb}: a kernel with numpy needs about "
                             f"{bounds.MIN_MEMORY_MB} MiB to start (address space): pass "
                             f"--memory-mb {bounds.MIN_MEMORY_MB} or more")  # fmt: skip
        cgroup = bounds.detect()[0] if self.cgroups and use_box else ""
        if cgroup and self.nproc <= bounds.START_TASKS:
            raise ValueError(f"nproc={self.nproc} counts threads too, and a kernel starts with "
                             f"{bounds.START_TASKS}: pass --nproc 32 or more")  # fmt: skip
        return Limits(
            timeout=self.timeout,
            memory_mb=self.memory_mb,
            cpu_seconds=self.cpu_seconds,
            guard=self.guard,
            sandbox=use_box,
            budget_s=self.budget_s,
            disk_mb=self.disk_mb,
            nproc=self.nproc,
            cpus=self.cpus,
            cgroup=cgroup,
            max_message_mb=self.max_message_mb,
            max_notebook_mb=self.max_notebook_mb,
            max_cells=self.max_cells,
            max_source_chars=self.max_source_chars,
        )


@dataclass
class Summary:
    """What a grading run did."""

    assignment: str
    rows: list[dict[str, Any]]
    graded_now: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    seconds: float = 0.0
    sandboxed: bool = True
    write_errors: list[str] = field(default_factory=list)  # results that could not be written
    bounded: str = ""  # why the sandbox is bounded per process only ("" when by a cgroup)
    notes: list[str] = field(default_factory=list)  # e.g. the master's run retried (load)

    def describe(self) -> str:
        counts = Counter(r["status"] for r in self.rows)
        per = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        warned = sum(1 for r in self.rows if r.get("warnings"))
        rate = len(self.graded_now) / self.seconds * 60 if self.seconds and self.graded_now else 0
        return (
            f"{self.assignment}: {len(self.rows)} submissions ({per}); graded "
            f"{len(self.graded_now)} in {self.seconds:.1f} s ({rate:.1f}/min), "
            f"skipped {len(self.skipped)} already graded"
            + (f"; {warned} with warnings (gradebook column 'warnings')" if warned else "")
            + (f"; RESULTS NOT WRITTEN for {len(self.write_errors)} ({self.write_errors[0]})"
               if self.write_errors else "")
            + ("" if self.sandboxed else "; WITHOUT the OS sandbox (not for credit)")
            + (f"; {self.bounded}" if self.bounded else "")
            + "".join(f"; {n}" for n in self.notes)
        )


def infer_assignment(submissions: Path | list[Item], solutions: Path) -> str:
    """The assignment a folder of submissions is for: its name, else the notebooks' metadata."""
    names = {p.stem for p in find_masters(solutions)}
    if isinstance(submissions, Path):
        if Path(submissions.name).stem in names:
            return Path(submissions.name).stem
        items, tmp = collect(submissions)
        try:
            return infer_assignment(items, solutions)
        finally:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
    votes: Counter[str] = Counter()
    for it in submissions:
        if it.path is None:
            continue
        try:
            claimed = submitted_assignment(read_notebook(it.path))
        except Rejected:
            continue
        if claimed in names:
            votes[claimed] += 1
    if not votes:
        raise ValueError(
            "cannot tell which assignment the submissions are for: pass --assignment "
            f"(one of {sorted(names)})"
        )
    return votes.most_common(1)[0][0]


def _sha256_file(path: Path | None) -> str:
    if path is None:
        return ""
    h = hashlib.sha256()
    try:
        from tpp.grading.compare import read_regular

        h.update(read_regular(path, 60_000_000))
    except (OSError, ValueError):
        return ""
    return h.hexdigest()


class _References:
    """The master's reference values per student (one per parameter set, cached)."""

    def __init__(self, master: Master, limits: Limits, cache_dir: Path | None) -> None:
        self.master, self.limits, self.cache_dir = master, limits, cache_dir
        self.per_student = parameters_of(master, "x") is not None
        self.notes: list[str] = []  # the master's reference runs that had to be retried
        # without parameters one reference for all, computed (or read) before grading starts
        self.base = (None if self.per_student
                     else load_reference(master, limits, cache_dir, notes=self.notes))  # fmt: skip

    def __call__(self, student: str) -> dict[str, Any]:
        if self.base is not None:
            return self.base
        return load_reference(self.master, self.limits, self.cache_dir, student, self.notes)

    def key(self, student: str) -> str:
        try:
            return reference_key(self.master, parameters_of(self.master, student), self.limits)
        except ValueError:  # an id no parameters can be drawn for: its row says why
            return ""


def _grade_item(item: Item, master: Master, refs: _References) -> dict[str, Any]:
    if item.path is None:
        row = make_row(item.student, item.file, master, item.status or "invalid-notebook",
                        item.reason)  # fmt: skip
    else:
        row = grade_submission(item.path, master, refs, refs.limits, item.student, item.file)
    row["warnings"] = [clip(w) for w in item.warnings] + list(row.get("warnings", []))
    row["input_warnings"] = len(item.warnings)
    return row


def _worker(args: tuple[Item, str, Limits, Path | None]) -> dict[str, Any]:
    item, master_path, limits, cache_dir = args
    master = parse_master(Path(master_path))
    refs = _References(master, limits, cache_dir)
    row = _grade_item(item, master, refs)
    if refs.notes:  # for the summary of the grading process (popped there, never written)
        row["_notes"] = refs.notes
    return row


def grade_folder(
    submissions: Path,
    out: Path,
    *,
    solutions: Path,
    assignment: str | None = None,
    options: GradeOptions | None = None,
    progress: Callable[[str], Any] | None = None,
) -> Summary:
    """Grade every submission of ``submissions`` (folder or zip) into ``out``."""
    options = options or GradeOptions()
    limits = options.limits()
    items, tmp = collect(submissions, assignment)
    try:
        name = assignment or infer_assignment(items, solutions)
        master_path = solutions / f"{name}.ipynb"
        if not master_path.is_file():
            raise FileNotFoundError(f"no master {master_path}: check --assignment / --solutions")
        master = parse_master(master_path)
        if out.resolve() == submissions.resolve():
            raise ValueError("--out must differ from the submissions folder")
        for d in (solutions.resolve(), submissions.resolve()):
            if out.resolve() == d or d in out.resolve().parents:
                raise ValueError(f"--out must not be inside {d}: pick a folder of its own")
        return _grade_items(items, out, master, master_path, solutions, limits, options,
                            progress)  # fmt: skip
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _grade_items(
    items: list[Item], out: Path, master: Master, master_path: Path, solutions: Path,
    limits: Limits, options: GradeOptions, progress: Callable[[str], Any] | None,
) -> Summary:  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    # the kernels' guard (second layer) keeps submitted code out of the masters and results
    protect = {str(p.resolve()) for p in (solutions, master_path.parent, out)}
    limits = dataclasses.replace(limits, protect=(*limits.protect, *sorted(protect)))
    # groups left by a grader killed outright (SIGKILL): their processes are gone too
    swept = bounds.sweep(limits.cgroup) if limits.cgroup else []
    refs = _References(master, limits, options.cache_dir)
    if progress:
        for note in refs.notes:
            progress(f"note: {note}")

    started = time.monotonic()
    rows: dict[str, dict[str, Any]] = {}
    todo: list[Item] = []
    summary = Summary(master.assignment, [], sandboxed=limits.sandbox,
                      bounded="" if limits.cgroup else bounds.describe(options.cgroups))
    if swept:
        summary.notes.append(f"removed {len(swept)} stale cgroup(s) of a grader that was killed")
    for it in items:
        row_path = out / "rows" / f"{safe_name(it.row_key)}.json"
        if not options.force and row_path.exists():  # grader errors are always retried
            try:
                row = json.loads(row_path.read_text())
                if (
                    row.get("submission_sha256") == _sha256_file(it.path)
                    and row.get("reference_key") == refs.key(row.get("parameters_id", it.student))
                    and row.get("guard", False) == limits.guard  # graded as protected now
                    and row.get("sandbox", False) == limits.sandbox
                    and row.get("status") not in RETRY
                    and row.get("file") == it.file
                ):
                    own = row.get("warnings", [])[int(row.get("input_warnings", 0)):]
                    row["warnings"] = [clip(w) for w in it.warnings] + own  # siblings may differ
                    row["input_warnings"] = len(it.warnings)
                    rows[it.row_key] = row
                    summary.skipped.append(it.row_key)
                    continue
            except (ValueError, OSError):
                pass
        todo.append(it)

    def finish(it: Item, row: dict[str, Any]) -> None:
        for note in [*refs.notes, *row.pop("_notes", [])]:
            if note not in summary.notes:
                summary.notes.append(note)
        row["submission_sha256"] = _sha256_file(it.path)
        row["guard"] = limits.guard
        row["sandbox"] = limits.sandbox
        row["reference_key"] = refs.key(row.get("parameters_id", it.student))
        rows[it.row_key] = row
        summary.graded_now.append(it.row_key)
        safe = safe_name(it.row_key)
        try:  # a full disk costs this run its files, never the batch (and nothing is reused)
            atomic_write(out / "rows" / f"{safe}.json", json.dumps(row, indent=1, sort_keys=True))
            atomic_write(out / "feedback" / f"{safe}.md", feedback_markdown(row, master))
            write_outputs(out, list(rows.values()), master)
        except OSError as exc:
            summary.write_errors.append(f"{it.row_key[:60]}: {type(exc).__name__}: {exc}"[:200])
        if progress:
            progress(
                f"[{len(summary.graded_now)}/{len(todo)}] {it.student[:60]}: {row['status']} "
                f"{fmt(row['total'])}/{fmt(row['max'])} ({row.get('duration_s', 0):.1f} s)"
            )

    def failed(it: Item, why: str) -> dict[str, Any]:
        return make_row(it.student, it.file, master, "grader-error", why)

    if options.workers == 1 or len(todo) <= 1:
        for it in todo:
            finish(it, _grade_item(it, master, refs))
    else:
        ctx = multiprocessing.get_context("spawn")
        job = {it.row_key: (it, str(master_path), limits, options.cache_dir) for it in todo}
        with cf.ProcessPoolExecutor(max_workers=options.workers, mp_context=ctx) as pool:
            futures = {pool.submit(_worker, job[it.row_key]): it for it in todo}
            broken: list[Item] = []
            for fut in cf.as_completed(futures):
                it = futures[fut]
                try:
                    row = fut.result()
                except cf.process.BrokenProcessPool:
                    broken.append(it)
                    continue
                except Exception as exc:  # a crashed worker is a row
                    row = failed(it, f"worker failed: {str(exc)[:200]}")
                finish(it, row)
        # A killed worker breaks the pool: every submission still pending fails with it.
        # Regrade those one by one, each in a worker of its own, so that only the submission
        # that killed its worker gets an error row.
        for it in sorted(broken, key=lambda i: i.row_key):
            with cf.ProcessPoolExecutor(max_workers=1, mp_context=ctx) as solo:
                try:
                    row = solo.submit(_worker, job[it.row_key]).result()
                except Exception as exc:
                    row = failed(it, f"the process grading it was killed ({type(exc).__name__})")
            finish(it, row)
    try:
        for it in items:  # feedback for skipped rows too, in case it was deleted
            fb = out / "feedback" / f"{safe_name(it.row_key)}.md"
            if not fb.exists():
                atomic_write(fb, feedback_markdown(rows[it.row_key], master))
        write_outputs(out, list(rows.values()), master)
    except OSError as exc:
        summary.write_errors.append(f"results: {type(exc).__name__}: {exc}"[:200])
    summary.notes.extend(n for n in refs.notes if n not in summary.notes)
    summary.rows = sorted(rows.values(), key=lambda r: (r["student"], r["file"]))
    summary.seconds = time.monotonic() - started
    return summary
