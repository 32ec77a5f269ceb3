"""The master's reference values: run through the grading pipeline, cached outside the results.

The cache lives in the instructor's user cache folder (``$TPP_GRADE_CACHE``, else
``$XDG_CACHE_HOME/tpp/grade``, else ``~/.cache/tpp/grade``, mode 0700), never in the results
folder: the results folder can be shared with students, and no kernel ever sees the cache (it
is outside the sandbox). Per-student parameters (see :mod:`tpp.grading.params`) give one
reference per parameter set, cached by the parameters' hash.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import os
import platform
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import Any

from tpp.grading import bounds
from tpp.grading.compare import SchemaError, load_record, safe_type
from tpp.grading.limits import Limits
from tpp.grading.notebook import Master, MasterError
from tpp.grading.run import RunOutcome, run_cells
from tpp.grading.submission import Rebuilt, parameters_of, rebuild

GRADER_VERSION = "3"
# The master is trusted: a reference run that timed out (a slow setup cell on a busy machine)
# is run again with the per-cell timeout, the start-up wait and the budget doubled, at most
# MASTER_TRIES runs in all and never past MASTER_TIMEOUT_CAP_S per cell. Only the master's
# runs: the students' limits never change.
MASTER_TRIES = 3
MASTER_TIMEOUT_CAP_S = 600.0
_LOG = logging.getLogger("tpp.grading")
# the limits a reference was computed under (a master that imports numpy at 2 GiB may fail at
# 600 MiB): part of the cache key, so that a run at other limits recomputes (or refuses)
KEY_LIMITS = ("timeout", "memory_mb", "cpu_seconds", "file_mb", "output_bytes", "guard",
              "sandbox", "nproc", "disk_mb", "cgroup")  # fmt: skip


def default_cache_dir() -> Path:
    """Where reference values are cached: outside any results folder, private to the user."""
    env = os.environ.get("TPP_GRADE_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tpp" / "grade"


@functools.lru_cache(maxsize=1)
def _library_hash() -> str:
    """A hash of the ``tpp`` sources: the reference depends on the library the master uses."""
    import tpp

    h = hashlib.sha256()
    root = Path(tpp.__file__).parent
    for p in sorted(root.rglob("*.py")):
        h.update(str(p.relative_to(root)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def _versions() -> str:
    """Versions of the libraries a master's values depend on (numpy, sympy, the tpp package)."""
    from importlib import metadata

    out = []
    for name in ("numpy", "sympy", "tpp"):
        try:
            out.append(f"{name}={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            out.append(f"{name}=-")
    return ",".join(out)


def reference_key(
    master: Master, params: dict[str, Any] | None = None, limits: Limits | None = None
) -> str:
    """Content hash deciding whether a cached reference is still valid: the master's bytes,
    the ``tpp`` sources, the library versions, the Python version, the student's parameters
    and the limits (:data:`KEY_LIMITS`) it was computed under."""
    h = hashlib.sha256()
    lim = {k: getattr(limits, k, None) for k in KEY_LIMITS} if limits is not None else {}
    parts = (GRADER_VERSION, master.sha256, _library_hash(), platform.python_version(),
             _versions(), json.dumps(params or {}, sort_keys=True),
             json.dumps(lim, sort_keys=True, default=str))  # fmt: skip
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def run_rebuilt(
    master: Master, answers: dict[str, str], limits: Limits, student: str | None = None
) -> tuple[Rebuilt, RunOutcome, dict[str, dict[str, Any] | str]]:
    """Rebuild, run in a fresh kernel, read each question's serialised answers (or an error).

    The kernel's folder ``tpp-grade-*`` holds ``work/`` (its private working folder) and the
    answers folder; it is deleted afterwards.
    """
    tmp = Path(tempfile.mkdtemp(prefix="tpp-grade-"))
    mounted = bounds.mount_tmpfs(tmp, limits.disk_mb)  # the kernel's files: never the host disk
    try:
        work = tmp / "work"
        work.mkdir()
        answers_dir = tmp / f"a{secrets.token_hex(6)}"  # not guessable from the kernel's cwd
        answers_dir.mkdir()
        rebuilt = rebuild(master, answers, answers_dir, student)
        outcome = run_cells(
            [c.source for c in rebuilt.cells],
            work,
            limits,
            groups=[c.question for c in rebuilt.cells],
            replayable=[c.kind != "serialise" for c in rebuilt.cells],
            private=[c.kind in ("hidden", "serialise") for c in rebuilt.cells],
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
                why = f"{cell.status}: {safe_type(cell.ename)}" if cell.ename else cell.status
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
        if mounted:
            bounds.unmount(tmp)
        shutil.rmtree(tmp, ignore_errors=True)


def _master_problems(
    master: Master, rebuilt: Rebuilt, outcome: RunOutcome, records: dict[str, Any]
) -> tuple[list[str], dict[str, dict[str, Any]], bool]:
    """What went wrong in one reference run, the values read, and whether it was only time
    (a cell ``timeout``, a kernel killed after one, the budget): the machine, not the master."""
    problems: list[str] = []
    timed_out = bool(outcome.hung or outcome.over_budget)
    if outcome.died or outcome.hung or outcome.over_budget:
        problems.append(outcome.reason)
    for cell, res in zip(rebuilt.cells, outcome.cells, strict=True):
        if res.status == "timeout":
            timed_out = True
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
    return problems, ref, timed_out


def master_limits(limits: Limits, attempt: int) -> Limits:
    """The limits of the master's reference run number ``attempt`` (0 first): per-cell timeout,
    start-up wait and budget times ``2**attempt``, the timeout capped at
    :data:`MASTER_TIMEOUT_CAP_S` (never below the configured one)."""
    k = 2**attempt
    timeout = max(limits.timeout, min(limits.timeout * k, MASTER_TIMEOUT_CAP_S))
    return dataclasses.replace(limits, timeout=timeout, startup_timeout=limits.startup_timeout * k,
                               budget_s=limits.budget_s * k)  # fmt: skip


def compute_reference(
    master: Master, limits: Limits, student: str | None = None, notes: list[str] | None = None
) -> dict[str, dict[str, Any]]:
    """Run the master through the grading pipeline; its values are the reference.

    Raises :class:`MasterError` if any cell of the master fails or an answer is not a plain
    value: a master must pass all its own checks. A run that failed only for time (a cell
    timed out, the budget ran out: a busy machine) is run again under :func:`master_limits`,
    at most :data:`MASTER_TRIES` runs; each retry is logged and appended to ``notes`` (the
    run's summary says so). The students' runs keep ``limits``.
    """
    answers = {c.id: c.source for c in master.cells if c.role == "answer"}
    for attempt in range(MASTER_TRIES):
        run_limits = master_limits(limits, attempt)
        rebuilt, outcome, records = run_rebuilt(master, answers, run_limits, student)
        problems, ref, timed_out = _master_problems(master, rebuilt, outcome, records)
        if not problems:
            return ref
        last = attempt + 1 == MASTER_TRIES or master_limits(limits, attempt + 1) == run_limits
        if not timed_out or last:
            break
        note = (f"the master's reference run{f' for {student!r}' if student else ''} timed out "
                f"at a per-cell timeout of {run_limits.timeout:g} s (a busy machine): run again "
                f"at {master_limits(limits, attempt + 1).timeout:g} s; the students' timeout "
                f"stays {limits.timeout:g} s")  # fmt: skip
        _LOG.warning("%s: %s", master.path, note)
        if notes is not None:
            notes.append(note)
    tries = (f" (after {attempt + 1} runs, the last at a per-cell timeout of "
             f"{run_limits.timeout:g} s)")
    raise MasterError(f"{master.path}: the master fails in the grader"
                      f"{tries if attempt else ''}: " + "; ".join(problems))  # fmt: skip


def _atomic_write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


def load_reference(
    master: Master,
    limits: Limits,
    cache_dir: Path | None = None,
    student: str | None = None,
    notes: list[str] | None = None,
) -> dict[str, Any]:
    """The master's reference values for ``student``'s parameters (if the master has any),
    cached in ``cache_dir`` by content hash (of ``limits``: a retry's longer timeout is not
    part of the key). Retries of the master's run are appended to ``notes``."""
    cache_dir = cache_dir if cache_dir is not None else default_cache_dir()
    key = reference_key(master, parameters_of(master, student), limits)
    path = cache_dir / f"reference-{key[:32]}.json"
    try:
        with open(path, "rb", opener=lambda p, f: os.open(p, f | os.O_NOFOLLOW)) as fh:
            cached = json.loads(fh.read(20_000_000))
        if cached.get("key") == key:
            return cached["values"]
    except (ValueError, OSError, AttributeError):
        pass
    values = compute_reference(master, limits, student, notes)
    try:
        _atomic_write_private(path, json.dumps({"key": key, "values": values}, sort_keys=True))
    except OSError:
        pass  # an unwritable cache only costs time
    return values
