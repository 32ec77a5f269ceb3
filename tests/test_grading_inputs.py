"""Every file in, one true row out (issue 20): odd names, kinds, zips and collisions."""

from __future__ import annotations

import csv
import json
import os
import struct
import unicodedata
import zipfile
from pathlib import Path

import pytest
from tpp.grading.assign import exercise_text
from tpp.grading.example import CORRECT, submission, write_demo_master
from tpp.grading.grade import GradeOptions, grade_folder
from tpp.grading.inputs import collect
from tpp.grading.notebook import parse_master

NFC = unicodedata.normalize("NFC", "Zoë")
NFD = unicodedata.normalize("NFD", "Zoë")


@pytest.fixture
def demo(tmp_path):
    master = write_demo_master(tmp_path / "solutions")
    ex = json.loads(exercise_text(parse_master(master)))
    return {"sol": tmp_path / "solutions", "good": json.dumps(submission(ex, CORRECT)),
            "root": tmp_path}  # fmt: skip


def _by(items):
    out = {}
    for it in items:
        out.setdefault(it.student, []).append(it)
    return out


def _patch(archive: Path, name: bytes, field: str, value: int) -> None:
    """Set a 2-byte field of member ``name`` in both zip headers: ``method`` (9: Deflate64)
    or ``flags`` (bit 0: encrypted), which zipfile cannot write itself."""
    data = bytearray(archive.read_bytes())
    local, central = {"method": (8, 10), "flags": (6, 8)}[field]
    for sig, off_method, off_len, head in ((b"PK\x03\x04", local, 26, 30),
                                           (b"PK\x01\x02", central, 28, 46)):
        at = 0
        while (at := data.find(sig, at)) >= 0:
            (n,) = struct.unpack_from("<H", data, at + off_len)
            if data[at + head : at + head + n] == name:
                struct.pack_into("<H", data, at + off_method, value)
            at += 4
    archive.write_bytes(bytes(data))


def _remove_deep(top: Path) -> None:
    """Delete a chain ``top/a/a/…`` without recursion (pytest's rmtree would recurse)."""
    if not top.exists():
        return
    while True:
        parent, fd = None, os.open(top, os.O_RDONLY)
        while "a" in os.listdir(fd):  # down to the deepest folder
            if parent is not None:
                os.close(parent)
            parent, fd = fd, os.open("a", os.O_RDONLY, dir_fd=fd)
        for name in os.listdir(fd):
            os.unlink(name, dir_fd=fd)
        os.close(fd)
        if parent is None:
            return
        os.rmdir("a", dir_fd=parent)
        os.close(parent)


def test_every_entry_of_a_folder_gets_exactly_one_row(demo):
    try:
        _every_entry(demo)
    finally:
        _remove_deep(demo["root"] / "subs" / "fay")


def _every_entry(demo):
    subs = demo["root"] / "subs"
    subs.mkdir()
    good = demo["good"]
    (subs / "ann.ipynb").write_text(good)
    (subs / "Ann.ipynb").write_text(good)
    (subs / "ann (2).ipynb").write_text(good)
    (subs / " .ipynb").write_text(good)
    (subs / "dan.html").write_text("<html></html>")
    (subs / f"{NFC}.ipynb").write_text(good)
    (subs / f"{NFD}.ipynb").write_text(good)
    (subs / "eve.ipynb").write_text(good)
    (subs / "eve").mkdir()
    (subs / "eve" / "nb.ipynb").write_text(good)
    deep = subs / "fay"
    deep.mkdir()
    fd = os.open(deep, os.O_RDONLY)
    for _ in range(1000):  # a folder 1000 deep: a row, not a RecursionError
        os.mkdir("a", dir_fd=fd)
        fd, old = os.open("a", os.O_RDONLY, dir_fd=fd), fd
        os.close(old)
    nb = os.open("nb.ipynb", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
    os.write(nb, good.encode())
    os.close(nb)
    os.close(fd)
    (subs / "gus").mkdir()
    (subs / "gus" / "report.pdf").write_text("%PDF")
    items, tmp = collect(subs)
    assert tmp is None
    by = _by(items)
    on_disk = [e for e in os.listdir(subs)]
    # NFC and NFD names are one id (two entries), eve is a file and a folder (two entries)
    assert len(items) == len(on_disk)
    assert [it.path is not None for it in by["ann"]] == [True]
    assert [it.path is not None for it in by["Ann"]] == [True]
    assert [it.path is not None for it in by["ann (2)"]] == [True]
    assert any("case" in w for w in by["ann"][0].warnings)
    assert {it.status for it in by[NFC]} == {"duplicate-id"} and len(by[NFC]) == 2
    assert {it.status for it in by["eve"]} == {"duplicate-id"} and len(by["eve"]) == 2
    assert len({it.row_key for it in items}) == len(items)
    assert by["dan"][0].status == "not-a-notebook"
    assert by["gus"][0].status == "not-a-notebook" and "report.pdf" in by["gus"][0].reason
    assert by[" .ipynb"][0].path is not None and by[" .ipynb"][0].warnings
    assert by["fay"][0].path is None and by["fay"][0].warnings  # not searched that deep


def test_zip_members_that_cannot_be_read_are_rows_and_one_top_folder_is_looked_through(demo):
    archive = demo["root"] / "submissions.zip"
    good = demo["good"]
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("submissions/ann.ipynb", good)
        zf.writestr("submissions/ben.ipynb", good)
        zf.writestr("submissions/cat.html", "<html/>")
        zf.writestr("submissions/dan.ipynb", good)  # corrupted below
        zf.writestr("submissions/eve.ipynb", good)  # password-protected below
        zf.writestr("submissions/fay.ipynb", good)  # Deflate64 below
        zf.writestr("submissions/ .ipynb", good)
    _patch(archive, b"submissions/fay.ipynb", "method", 9)
    _patch(archive, b"submissions/eve.ipynb", "flags", 1)
    data = bytearray(archive.read_bytes())
    at = data.find(b"PK\x03\x04", data.find(b"submissions/ben.ipynb") + 10)
    at = data.find(b"submissions/dan.ipynb", at) + len("submissions/dan.ipynb")
    data[at + 20 : at + 60] = b"\xff" * 40  # dan's compressed bytes
    archive.write_bytes(bytes(data))
    items, tmp = collect(archive)
    try:
        by = _by(items)
        assert sorted(by) == [" .ipynb", "ann", "ben", "cat", "dan", "eve", "fay"]
        assert by["ann"][0].path is not None and "top folder" in by["ann"][0].warnings[0]
        assert by["cat"][0].status == "not-a-notebook"
        for bad, word in (("dan", "corrupt"), ("eve", "password"), ("fay", "Deflate64")):
            assert by[bad][0].status == "unreadable-archive" and word in by[bad][0].reason, bad
    finally:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)


def test_a_zip_holding_one_lms_folder_keeps_its_id(demo):
    archive = demo["root"] / "one.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("Ann Lee_4711_assignsubmission_file/work/ex00_demo.ipynb", demo["good"])
    items, tmp = collect(archive)
    assert [it.student for it in items] == ["Ann Lee_4711_assignsubmission_file"]


@pytest.mark.slow
def test_grading_the_odd_folder_writes_one_row_per_entry_with_warnings(demo, bwrap):
    subs = demo["root"] / "subs"
    subs.mkdir()
    for name in ("ann", "Ann", " "):  # " .ipynb": its id is the whole name
        (subs / f"{name}.ipynb").write_text(demo["good"])
    (subs / "dan.html").write_text("<html/>")
    (subs / f"{NFC}.ipynb").write_text(demo["good"])
    (subs / f"{NFD}.ipynb").write_text(demo["good"])
    out = demo["root"] / "out"
    summary = grade_folder(subs, out, solutions=demo["sol"], options=GradeOptions(timeout=15))
    with open(out / "gradebook.csv", newline="") as fh:
        book = list(csv.DictReader(fh))
    assert len(book) == 6 == len(summary.rows)
    by = {(r["student"], r["file"]): r for r in book}
    full = str(parse_master(demo["sol"] / "ex00_demo.ipynb").max_points)
    ann = by[("ann", "ann.ipynb")]
    assert ann["total"] == full and "case" in ann["warnings"]
    assert by[("Ann", "Ann.ipynb")]["total"] == full
    assert by[(" .ipynb", ".ipynb")]["total"] == full
    assert by[("dan", "dan.html")]["status"] == "not-a-notebook"
    assert [r["status"] for r in book if r["student"] == NFC] == ["duplicate-id"] * 2
    assert "with warnings" in summary.describe()


def test_names_that_differ_only_in_unprintable_characters_keep_their_own_ids(demo):
    """Another attack of the family: every unprintable character of a name became "?", so a
    file named "ann<newline>.ipynb" made the honest "ann?.ipynb" a ``duplicate-id`` (neither
    graded), and so did names equal in their first 200 characters. Now unprintable characters
    are written as their codes and long names end with a hash: distinct names, distinct ids."""
    subs = demo["root"] / "subs"
    subs.mkdir()
    names = ["ann?", "ann\n", "ann\t", "ann\\x0a", "ann\x1b[31m", "x" * 210 + "a", "x" * 210 + "b"]
    for n in names:
        (subs / f"{n}.ipynb").write_text(demo["good"])
    items, _ = collect(subs)
    assert len(items) == len(names)
    assert not [it for it in items if it.status == "duplicate-id"], items
    ids = {it.student for it in items}
    assert len(ids) == len(names), sorted(ids)
    assert "ann?" in ids  # a printable name is kept as it is
    assert all(it.student.isprintable() and len(it.student) <= 201 for it in items)


def test_a_zip_member_whose_path_leaves_the_archive_is_a_row_not_a_silent_drop(demo):
    """Another attack of the family: a member named ``../ben.ipynb`` (or ``ann/../../x``) was
    skipped without a row (one file in, no row out). It is never extracted, and gets a row of
    its own under its whole path: never ``ben``'s id, so it cannot make ben a duplicate."""
    archive = demo["root"] / "subs.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("ben.ipynb", demo["good"])
        zf.writestr("../ben.ipynb", demo["good"])
        zf.writestr("ann/../../x.ipynb", demo["good"])
    items, tmp = collect(archive)
    try:
        by = _by(items)
        assert len(items) == 3, items
        assert by["ben"][0].path is not None and by["ben"][0].status == "", by["ben"]
        for name in ("../ben.ipynb", "ann/../../x.ipynb"):
            (it,) = by[name]
            assert it.status == "unreadable-archive" and "leaves the archive" in it.reason, it
        assert not (demo["root"] / "ben.ipynb").exists()  # nothing written beside the zip
    finally:
        if tmp is not None:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
