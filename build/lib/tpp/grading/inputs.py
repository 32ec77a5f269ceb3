"""Find the submissions to grade: a folder of notebooks, one subfolder per student, or a zip.

Learning platforms export either one file per student (``ann.ipynb``) or one folder per
student (``Ann Lee_4711_assignsubmission_file/…/notebook.ipynb``), often zipped. Each becomes
one :class:`Item`: the student id (the file's stem or the folder's name, NFC-normalised), what
was submitted, and the path to read — or a reason it cannot be read. Nothing is followed:
symbolic links, FIFOs, sockets and devices become items with a reason (one gradebook row each).
Ids that collide after normalisation get a suffix; every id gets a safe file name of its own
for its row and feedback files (:func:`safe_name`).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import tempfile
import unicodedata
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

MAX_ZIP_MEMBER = 50_000_000
MAX_ZIP_MEMBERS = 20_000
_KINDS = {stat.S_IFLNK: "a symbolic link", stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket",
          stat.S_IFCHR: "a device", stat.S_IFBLK: "a device"}  # fmt: skip


@dataclass(frozen=True)
class Item:
    """One student's submission: id, what was submitted (for the row), path or a reason."""

    student: str
    file: str
    path: Path | None
    reason: str = ""
    warning: str = ""


def safe_name(student: str) -> str:
    """A file name for ``student``'s row: short, portable, and unique per id."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", student).strip("._")[:60] or "student"
    return f"{stem}-{hashlib.sha256(student.encode('utf-8', 'surrogatepass')).hexdigest()[:10]}"


def _norm(name: str) -> str:
    name = unicodedata.normalize("NFC", name.encode("utf-8", "replace").decode("utf-8"))
    return "".join(ch if ch.isprintable() else "?" for ch in name)[:200] or "?"


def _is_nb(name: str) -> bool:
    return name.lower().endswith(".ipynb") and not name.startswith(".")


def _pick(candidates: list[tuple[str, Path]], assignment: str | None) -> tuple[str, Path, str]:
    """One notebook of a student's folder: the one named after the assignment, else the newest."""
    if len(candidates) == 1:
        return (*candidates[0], "")
    named = [c for c in candidates if assignment and assignment in c[0]]
    if len(named) == 1:
        chosen = named[0]
    else:
        chosen = max(candidates, key=lambda c: (os.lstat(c[1]).st_mtime, c[0]))
    return (*chosen, f"{len(candidates)} notebooks in the folder; graded {_norm(chosen[0])!r}")


def _from_folder(folder: Path, assignment: str | None) -> list[Item]:
    items: list[Item] = []
    with os.scandir(folder) as it:
        entries = sorted(it, key=lambda e: e.name)
    for e in entries:
        if e.name.startswith("."):
            continue
        try:
            st = os.lstat(e.path)
        except OSError as exc:
            items.append(Item(_norm(Path(e.name).stem), _norm(e.name), None,
                              f"cannot read it ({type(exc).__name__})"))  # fmt: skip
            continue
        kind = stat.S_IFMT(st.st_mode)
        if _is_nb(e.name):
            student = _norm(e.name[: -len(".ipynb")])
            if kind == stat.S_IFREG:
                items.append(Item(student, _norm(e.name), Path(e.path)))
            else:
                why = _KINDS.get(kind, "a folder" if kind == stat.S_IFDIR else "not a file")
                items.append(Item(student, _norm(e.name), None, f"not a regular file: {why}"))
        elif kind == stat.S_IFDIR:
            items.append(_from_student_folder(Path(e.path), _norm(e.name), assignment))
        elif kind == stat.S_IFLNK:
            items.append(Item(_norm(e.name), _norm(e.name), None,
                              "not a regular file: a symbolic link"))  # fmt: skip
    return items


def _from_student_folder(folder: Path, student: str, assignment: str | None) -> Item:
    """An LMS student folder: its notebooks (nested folders searched, links never followed)."""
    found: list[tuple[str, Path]] = []
    odd = ""
    for root, dirs, files in os.walk(folder, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))[:50]
        for f in sorted(files):
            if not _is_nb(f):
                continue
            p = Path(root) / f
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                found.append((str(p.relative_to(folder)), p))
            else:
                odd = odd or f"not a regular file: {_KINDS.get(stat.S_IFMT(st.st_mode), '?')}"
        if len(found) > 50:
            break
    if not found:
        return Item(student, student + "/", None, odd or "no .ipynb notebook in the folder")
    name, path, warning = _pick(found, assignment)
    return Item(student, _norm(f"{student}/{name}"), path, warning=warning)


def _from_zip(archive: Path, into: Path, assignment: str | None) -> list[Item]:
    """Notebooks of a zip export, each extracted to its own numbered file (names never used)."""
    try:
        zf = zipfile.ZipFile(archive)
    except (OSError, zipfile.BadZipFile) as exc:
        raise ValueError(f"{archive} is not a readable zip archive ({exc})") from None
    with zf:
        infos = zf.infolist()
        if len(infos) > MAX_ZIP_MEMBERS:
            raise ValueError(f"{archive} has more than {MAX_ZIP_MEMBERS} entries")
        members = []
        for info in infos:
            parts = [p for p in PurePosixPath(info.filename.replace("\\", "/")).parts
                     if p not in ("", ".", "/")]  # fmt: skip
            mode = info.external_attr >> 16
            if info.is_dir() or not parts or not _is_nb(parts[-1]) or ".." in parts:
                continue
            if any(p.startswith(".") or p == "__MACOSX" for p in parts):
                continue
            members.append((parts, info, stat.S_ISLNK(mode)))
        tops = {m[0][0] for m in members if len(m[0]) > 1}
        if len(tops) == 1 and all(len(m[0]) > 2 for m in members):  # one wrapping folder
            members = [(m[0][1:], m[1], m[2]) for m in members]
        by_student: dict[str, list[tuple[str, zipfile.ZipInfo, bool]]] = {}
        for parts, info, link in members:
            student = _norm(parts[0] if len(parts) > 1 else parts[0][: -len(".ipynb")])
            by_student.setdefault(student, []).append(("/".join(parts), info, link))
        items = []
        for k, (student, entries) in enumerate(sorted(by_student.items())):
            ok = [(n, i) for n, i, link in entries if not link]
            if not ok:
                items.append(Item(student, _norm(entries[0][0]), None,
                                  "not a regular file: a symbolic link"))  # fmt: skip
                continue
            named = [e for e in ok if assignment and assignment in e[0]]
            name, info = named[0] if len(named) == 1 else max(ok, key=lambda e: e[1].date_time)
            warning = f"{len(ok)} notebooks; graded {_norm(name)!r}" if len(ok) > 1 else ""
            if info.file_size > MAX_ZIP_MEMBER:
                items.append(Item(student, _norm(name), None, "larger than 50 MB"))
                continue
            dest = into / f"{k:05d}.ipynb"
            fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as out, zf.open(info) as src:
                data = src.read(MAX_ZIP_MEMBER + 1)
                if len(data) > MAX_ZIP_MEMBER:
                    items.append(Item(student, _norm(name), None, "larger than 50 MB"))
                    continue
                out.write(data)
            items.append(Item(student, _norm(name), dest, warning=warning))
    return items


def _dedupe(items: list[Item]) -> list[Item]:
    """Ids that collide (after NFC normalisation, case-insensitively) get ' (2)', ' (3)'…"""
    seen: dict[str, int] = {}
    out = []
    for it in items:
        key = unicodedata.normalize("NFKC", it.student).casefold()
        n = seen.get(key, 0) + 1
        seen[key] = n
        if n > 1:
            it = Item(f"{it.student} ({n})", it.file, it.path, it.reason,
                      it.warning or "another submission has the same id")  # fmt: skip
        out.append(it)
    return out


def collect(submissions: Path, assignment: str | None = None) -> tuple[list[Item], Path | None]:
    """The items to grade, and a private temporary folder to delete afterwards (zip input).

    Raises ``ValueError`` if nothing gradable is there.
    """
    tmp: Path | None = None
    try:
        st = os.lstat(submissions)
    except OSError:
        raise FileNotFoundError(
            f"no folder or zip {submissions}: pass the submissions folder or the LMS's zip"
        ) from None
    if stat.S_ISREG(st.st_mode) and submissions.suffix.lower() == ".zip":
        tmp = Path(tempfile.mkdtemp(prefix="tpp-unzip-"))
        try:
            items = _from_zip(submissions, tmp, assignment)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    elif stat.S_ISDIR(st.st_mode):
        items = _from_folder(submissions, assignment)
    else:
        raise ValueError(f"{submissions} is neither a folder nor a .zip archive")
    if all(it.path is None and "no .ipynb" in it.reason for it in items):
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        raise ValueError(
            f"nothing to grade in {submissions}: expected *.ipynb files, one folder per "
            "student holding a notebook, or a .zip of either (as learning platforms export)"
        )
    return _dedupe(items), tmp
