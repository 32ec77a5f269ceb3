"""Caches that know what they depend on, a setup cell that fails, a disk that fills (issue 20)."""

from __future__ import annotations

import dataclasses
import errno
import json

import pytest
from tpp.grading import grade as grade_mod
from tpp.grading.assign import exercise_text
from tpp.grading.example import CORRECT, submission, write_demo_master
from tpp.grading.grade import GradeOptions, grade_folder
from tpp.grading.notebook import parse_master
from tpp.grading.reference import load_reference, reference_key
from tpp.grading.rows import grade_submission
from tpp.grading.run import Limits


@pytest.fixture
def demo(tmp_path):
    master = write_demo_master(tmp_path / "solutions")
    ex = json.loads(exercise_text(parse_master(master)))
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "ann.ipynb").write_text(json.dumps(submission(ex, CORRECT)))
    return {"master": master, "sol": tmp_path / "solutions", "subs": subs, "root": tmp_path}


def test_the_reference_key_depends_on_the_limits_not_on_the_folders(demo):
    m = parse_master(demo["master"])
    base = Limits()
    key = reference_key(m, None, base)
    for change in ({"memory_mb": 600}, {"cpu_seconds": 5}, {"timeout": 3.0}, {"guard": False},
                   {"sandbox": False}, {"nproc": 8}):  # fmt: skip
        assert reference_key(m, None, dataclasses.replace(base, **change)) != key, change
    assert reference_key(m, None, dataclasses.replace(base, protect=("/x",))) == key
    assert reference_key(m, {"P": 4}, base) != key


@pytest.mark.slow
def test_a_setup_cell_that_raises_flags_the_row(demo, bwrap):
    limits = Limits(timeout=15)
    good = parse_master(demo["master"])
    reference = load_reference(good, limits, demo["root"] / "cache")
    nb = json.loads(demo["master"].read_text())
    for c in nb["cells"]:
        if c.get("id") == "setup":
            c["source"] = "import numpy as np\nraise ImportError('numpy failed to load')\n"
    broken = demo["root"] / "broken" / "ex00_demo.ipynb"
    broken.parent.mkdir()
    broken.write_text(json.dumps(nb))
    row = grade_submission(demo["subs"] / "ann.ipynb", parse_master(broken), reference, limits)
    assert row["status"] == "setup-failed", row
    assert "setup" in row["reason"] and "ImportError" in row["reason"]


@pytest.mark.slow
def test_a_full_disk_never_crashes_the_batch_and_is_never_reused(demo, bwrap, monkeypatch):
    real = grade_mod.atomic_write

    def full(path, text):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(grade_mod, "atomic_write", full)
    monkeypatch.setattr(grade_mod, "write_outputs", lambda *a: full(None, None))
    out = demo["root"] / "out"
    opts = GradeOptions(timeout=15, cache_dir=demo["root"] / "cache")
    first = grade_folder(demo["subs"], out, solutions=demo["sol"], options=opts)
    assert first.write_errors and "RESULTS NOT WRITTEN" in first.describe()
    assert [r["status"] for r in first.rows] == ["graded"]
    monkeypatch.setattr(grade_mod, "atomic_write", real)
    monkeypatch.undo()
    second = grade_folder(demo["subs"], out, solutions=demo["sol"], options=opts)
    assert second.graded_now == ["ann"] and not second.skipped and not second.write_errors
