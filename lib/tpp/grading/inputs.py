"""Find the submissions to grade: a folder of notebooks, one subfolder per student, or a zip.

Learning platforms export either one file per student (``ann.ipynb``) or one folder per
student (``Ann Lee_4711_assignsubmission_file/…/notebook.ipynb``), often zipped. Every entry
of the submissions folder (or every top-level entry of the zip) becomes exactly one
:class:`Item` — one gradebook row — whatever its name or kind: the student id (the file's stem
or the folder's name, NFC-normalised, never renamed), what was submitted, and the path to read
or the status and reason it cannot be graded:

- ``not-a-notebook``: a file that is not ``.ipynb`` (``.html``, ``.pdf``, a nested zip), or a
  student folder that holds files but no notebook;
- ``invalid-notebook``: a symbolic link, FIFO, socket or device (nothing is followed);
- ``unreadable-archive``: a zip member that is corrupt, password-protected or compressed with a
  method Python cannot read (Deflate64);
- ``duplicate-id``: two entries whose ids are equal after NFC normalisation (``Zoë`` typed two
  ways, ``ann.ipynb`` next to a folder ``ann/``): none of them is graded, each gets a row;
- ``missing-answers``: an empty student folder.

Ids that differ only in case or Unicode compatibility form (``ann`` and ``Ann``) are kept as
they are — each student keeps their own parameters — and each row says so in its warnings.
Hidden entries (names starting with ``.``) and ``__MACOSX`` are skipped. A zip whose entries
all sit in one top folder holding several entries (``zip -r submissions.zip submissions/``) is
read through that folder. Student folders are searched to :data:`MAX_DEPTH` levels.
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
import zlib
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

MAX_ZIP_MEMBER = 50_000_000
MAX_ZIP_MEMBERS = 20_000
MAX_DEPTH = 20  # folder levels searched inside a student's folder
MAX_FOLDER_ENTRIES = 5_000  # entries looked at inside a student's folder
_KINDS = {stat.S_IFLNK: "a symbolic link", stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket",
          stat.S_IFCHR: "a device", stat.S_IFBLK: "a device"}  # fmt: skip
_SKIP = {"__MACOSX"}


@dataclass(frozen=True)
class Item:
    """One row to be: student id, what was submitted, the path to grade, or status + reason."""

    student: str
    file: str
    path: Path | None
    reason: str = ""
    warnings: tuple[str, ...] = ()
    status: str = ""  # the row's status when ``path`` is None
    key: str = ""  # unique key of the row (default: the student id)

    @property
    def row_key(self) -> str:
        return self.key or self.student


def safe_name(student: str) -> str:
    """A file name for ``student``'s row: short, portable, and unique per id."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", student).strip("._")[:60] or "student"
    return f"{stem}-{hashlib.sha256(student.encode('utf-8', 'surrogatepass')).hexdigest()[:10]}"


MAX_ID_CHARS = 200


def _escape(ch: str) -> str:
    if ch == "\\":
        return "\\\\"
    if ch.isprintable():
        return ch
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _norm(name: str) -> str:
    """A file name as an id: NFC-normalised, each character that is not printable (a newline,
    an escape, a byte that is not UTF-8, a direction override) written as its code (``\\x0a``,
    ``\\udcff``, ``\\u202e``) and a backslash doubled, so that two names never give one id
    (``a?b``, ``a<newline>b`` and ``a<tab>b`` were all ``a?b``: a crafted name made another
    student's submission a ``duplicate-id``); longer than :data:`MAX_ID_CHARS`, cut and ended
    with a hash of the whole name."""
    out = "".join(_escape(ch) for ch in unicodedata.normalize("NFC", name))
    if len(out) > MAX_ID_CHARS:
        digest = hashlib.sha256(out.encode("utf-8")).hexdigest()[:10]
        out = f"{out[:MAX_ID_CHARS - 10]}~{digest}"  # one longer than any uncut id
    return out or "?"


def _is_nb(name: str) -> bool:
    return name.lower().endswith(".ipynb")


def _hidden(name: str) -> bool:
    return name.startswith(".") or name in _SKIP


def _student_of_file(name: str) -> tuple[str, tuple[str, ...]]:
    """The id of a top-level file: its stem (the whole name if the stem is blank)."""
    stem = name[: -len(".ipynb")] if _is_nb(name) else (Path(name).stem or name)
    if stem.strip():
        return _norm(stem), ()
    return _norm(name), (f"the file name {_norm(name)!r} has no id before its extension: "
                         "the whole name is the id",)  # fmt: skip


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
        if _hidden(e.name):
            continue
        student, warn = _student_of_file(e.name)
        try:
            st = os.lstat(e.path)
        except OSError as exc:
            why = f"cannot read it ({type(exc).__name__})"
            items.append(Item(student, _norm(e.name), None, why, warn, "invalid-notebook"))
            continue
        kind = stat.S_IFMT(st.st_mode)
        if kind == stat.S_IFDIR and not _is_nb(e.name):
            items.append(_from_student_folder(Path(e.path), _norm(e.name), assignment))
        elif kind != stat.S_IFREG:
            why = _KINDS.get(kind, "a folder" if kind == stat.S_IFDIR else "not a file")
            items.append(Item(student, _norm(e.name), None, f"not a regular file: {why}", warn,
                              "invalid-notebook"))  # fmt: skip
        elif _is_nb(e.name):
            items.append(Item(student, _norm(e.name), Path(e.path), warnings=warn))
        else:
            items.append(Item(student, _norm(e.name), None, _not_nb_reason(e.name), warn,
                              "not-a-notebook"))  # fmt: skip
    return items


def _not_nb_reason(name: str) -> str:
    ext = Path(name).suffix.lower() or "(no extension)"
    return f"not a notebook: a {ext} file was submitted, not the .ipynb (File > Download)"


def _walk(folder: Path) -> tuple[list[tuple[str, Path, int]], bool]:
    """Files under ``folder`` (relative name, path, file type), iteratively, links not followed,
    to :data:`MAX_DEPTH` levels and :data:`MAX_FOLDER_ENTRIES` entries; and whether it stopped."""
    out: list[tuple[str, Path, int]] = []
    stack: list[tuple[Path, int]] = [(folder, 0)]
    seen, cut = 0, False
    while stack:
        d, depth = stack.pop()
        try:
            with os.scandir(d) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            continue
        for e in entries:
            seen += 1
            if seen > MAX_FOLDER_ENTRIES:
                return out, True
            if _hidden(e.name):
                continue
            try:
                kind = stat.S_IFMT(os.lstat(e.path).st_mode)
            except OSError:
                continue
            if kind == stat.S_IFDIR:
                if depth + 1 >= MAX_DEPTH:
                    cut = True
                else:
                    stack.append((Path(e.path), depth + 1))
            else:
                out.append((str(Path(e.path).relative_to(folder)), Path(e.path), kind))
    return out, cut


def _from_student_folder(folder: Path, student: str, assignment: str | None) -> Item:
    """An LMS student folder: its notebooks (nested folders searched, links never followed)."""
    files, cut = _walk(folder)
    warn = (f"folders deeper than {MAX_DEPTH} levels (or beyond {MAX_FOLDER_ENTRIES} entries) "
            "were not searched",) if cut else ()  # fmt: skip
    found = [(n, p) for n, p, k in files if _is_nb(n) and k == stat.S_IFREG]
    if not found:
        odd = [k for n, _, k in files if _is_nb(n)]
        if odd:
            return Item(student, student + "/", None,
                        f"not a regular file: {_KINDS.get(odd[0], '?')}", warn, "invalid-notebook")
        if files:
            names = ", ".join(_norm(n) for n, _, _ in files[:3])
            return Item(student, student + "/", None,
                        f"no .ipynb notebook in the folder (it holds {names})", warn,
                        "not-a-notebook")  # fmt: skip
        return Item(student, student + "/", None, "no .ipynb notebook in the folder", warn,
                    "missing-answers")  # fmt: skip
    name, path, warning = _pick(found, assignment)
    return Item(student, _norm(f"{student}/{name}"), path,
                warnings=(*warn, *([warning] if warning else [])))  # fmt: skip


def _member_problem(info: zipfile.ZipInfo) -> str:
    if info.flag_bits & 0x1:
        return "the zip member is password-protected: ask for it unencrypted"
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2,
                                  zipfile.ZIP_LZMA):  # fmt: skip
        return (f"the zip member uses compression method {info.compress_type} (e.g. Deflate64), "
                "which cannot be read: ask for a plain zip")  # fmt: skip
    if info.file_size > MAX_ZIP_MEMBER:
        return f"larger than {MAX_ZIP_MEMBER // 1_000_000} MB"
    return ""


def _extract(zf: zipfile.ZipFile, info: zipfile.ZipInfo, dest: Path) -> str:
    """Extract one member to ``dest``; "" or why it cannot be read."""
    why = _member_problem(info)
    if why:
        return why
    try:
        with zf.open(info) as src:
            data = src.read(MAX_ZIP_MEMBER + 1)
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError) as exc:
        return f"the zip member is corrupt ({type(exc).__name__})"
    except (RuntimeError, NotImplementedError) as exc:
        return f"the zip member cannot be read ({type(exc).__name__})"
    if len(data) > MAX_ZIP_MEMBER:
        return f"larger than {MAX_ZIP_MEMBER // 1_000_000} MB"
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    return ""


def _from_zip(archive: Path, into: Path, assignment: str | None) -> list[Item]:
    """The rows of a zip export; notebooks extracted to numbered files (names never used)."""
    try:
        zf = zipfile.ZipFile(archive)
        infos = zf.infolist()
    except (OSError, zipfile.BadZipFile, ValueError, EOFError, NotImplementedError) as exc:
        raise ValueError(f"{archive} is not a readable zip archive ({exc})") from None
    with zf:
        if len(infos) > MAX_ZIP_MEMBERS:
            raise ValueError(f"{archive} has more than {MAX_ZIP_MEMBERS} entries")
        members = []
        escaping: list[zipfile.ZipInfo] = []  # a path with "..": a row of its own, never used
        for info in infos:
            parts = [p for p in PurePosixPath(info.filename.replace("\\", "/")).parts
                     if p not in ("", ".", "/")]  # fmt: skip
            if ".." in parts and not info.is_dir():
                escaping.append(info)
                continue
            if info.is_dir() or not parts or any(_hidden(p) for p in parts):
                continue
            members.append((parts, info, stat.S_ISLNK(info.external_attr >> 16)))
        note: tuple[str, ...] = ()
        tops = {m[0][0] for m in members}
        if len(tops) == 1 and all(len(m[0]) > 1 for m in members):
            inner = {m[0][1] for m in members}
            if len(inner) > 1:  # one wrapping folder (zip -r subs.zip subs/): look through it
                members = [(m[0][1:], m[1], m[2]) for m in members]
                note = (f"read through the zip's single top folder {_norm(next(iter(tops)))!r}",)
        groups: dict[tuple[str, bool], list] = defaultdict(list)
        for parts, info, link in members:
            groups[(parts[0], len(parts) > 1)].append(("/".join(parts), info, link))
        items = []
        for k, ((top, is_dir), entries) in enumerate(sorted(groups.items())):
            student, warn = (_norm(top), ()) if is_dir else _student_of_file(top)
            warn = (*note, *warn)
            nbs = [(n, i) for n, i, link in entries if _is_nb(n) and not link]
            if not nbs:
                if any(_is_nb(n) for n, _, _ in entries):
                    items.append(Item(student, _norm(entries[0][0]), None,
                                      "not a regular file: a symbolic link", warn,
                                      "invalid-notebook"))  # fmt: skip
                elif is_dir:
                    names = ", ".join(_norm(n) for n, _, _ in entries[:3])
                    items.append(Item(student, student + "/", None,
                                      f"no .ipynb notebook in the folder (it holds {names})",
                                      warn, "not-a-notebook"))  # fmt: skip
                else:
                    items.append(Item(student, _norm(top), None, _not_nb_reason(top), warn,
                                      "not-a-notebook"))  # fmt: skip
                continue
            named = [e for e in nbs if assignment and assignment in e[0]]
            name, info = named[0] if len(named) == 1 else max(nbs, key=lambda e: e[1].date_time)
            if len(nbs) > 1:
                warn = (*warn, f"{len(nbs)} notebooks; graded {_norm(name)!r}")
            dest = into / f"{k:05d}.ipynb"
            why = _extract(zf, info, dest)
            if why:
                status = "invalid-notebook" if why.startswith("larger") else "unreadable-archive"
                items.append(Item(student, _norm(name), None, why, warn, status))
            else:
                items.append(Item(student, _norm(name), dest, warnings=warn))
        for info in escaping:  # the whole member path is its id: never another student's
            items.append(Item(_norm(info.filename), _norm(info.filename), None,
                              "the zip member's path leaves the archive ('..'): not extracted",
                              (), "unreadable-archive"))  # fmt: skip
    return items


def _dedupe(items: list[Item]) -> list[Item]:
    """Equal ids: each a ``duplicate-id`` row; ids equal up to case/NFKC: a warning each."""
    exact: dict[str, list[Item]] = defaultdict(list)
    for it in items:
        exact[it.student].append(it)
    loose: dict[str, set[str]] = defaultdict(set)
    for sid in exact:
        loose[unicodedata.normalize("NFKC", sid).casefold()].add(sid)
    out = []
    nth: dict[str, int] = defaultdict(int)
    for it in items:
        same = exact[it.student]
        alike = sorted(loose[unicodedata.normalize("NFKC", it.student).casefold()] - {it.student})
        if alike:
            it = replace(it, warnings=(*it.warnings,
                         f"another submission's id differs only in case or Unicode form: "
                         f"{', '.join(repr(a) for a in alike[:3])} (each keeps its own id)"))
        if len(same) > 1:
            files = ", ".join(repr(s.file) for s in same[:4])
            nth[it.student] += 1
            key = f"{it.student} [{it.file}] #{nth[it.student]}"
            it = replace(it, path=None, status="duplicate-id", key=key,
                         reason=f"{len(same)} submissions have this id ({files}): none was "
                         "graded; keep one and grade again")  # fmt: skip
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
    if all(it.path is None and it.status in ("not-a-notebook", "missing-answers")
           for it in items):  # fmt: skip
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        raise ValueError(
            f"nothing to grade in {submissions}: expected *.ipynb files, one folder per "
            "student holding a notebook, or a .zip of either (as learning platforms export)"
        )
    return _dedupe(items), tmp
