"""``tpp grade`` on a folder: re-runs, ``--force``, interruption, the CLI (-j 2), CPU limits."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
from tpp.grading.assign import exercise_text
from tpp.grading.example import CORRECT, WRONG, submission, write_demo_master
from tpp.grading.grade import GradeOptions, grade_folder, infer_assignment
from tpp.grading.inputs import safe_name
from tpp.grading.notebook import MasterError, parse_master

pytestmark = pytest.mark.slow


@pytest.fixture
def course(tmp_path):
    sol = tmp_path / "solutions"
    master = write_demo_master(sol)
    ex = json.loads(exercise_text(parse_master(master)))
    subs = tmp_path / "subs"
    subs.mkdir()
    half = dict(CORRECT, **{"a-q1": WRONG["a-q1"]})
    for name, answers in (("ann", CORRECT), ("ben", WRONG), ("cat", half)):
        (subs / f"{name}.ipynb").write_text(json.dumps(submission(ex, answers)))
    return {"root": tmp_path, "sol": sol, "subs": subs, "ex": ex, "out": tmp_path / "out"}


def _grade(course, **kw):
    return grade_folder(
        course["subs"], course["out"], solutions=course["sol"],
        options=GradeOptions(timeout=10, **kw),
    )  # fmt: skip


def test_rerun_skips_graded_students_regrades_changed_ones_and_force(course):
    first = _grade(course)
    assert sorted(first.graded_now) == ["ann", "ben", "cat"] and not first.skipped
    assert {r["student"]: r["total"] for r in first.rows} == {"ann": 6, "ben": 0, "cat": 4}

    second = _grade(course)
    assert second.graded_now == [] and sorted(second.skipped) == ["ann", "ben", "cat"]
    assert second.rows == first.rows

    # ben resubmits a correct notebook: only ben is graded again
    (course["subs"] / "ben.ipynb").write_text(json.dumps(submission(course["ex"], CORRECT)))
    third = _grade(course)
    assert third.graded_now == ["ben"]
    assert {r["student"]: r["total"] for r in third.rows} == {"ann": 6, "ben": 6, "cat": 4}

    forced = _grade(course, force=True)
    assert sorted(forced.graded_now) == ["ann", "ben", "cat"]


def test_an_interrupted_run_loses_nothing_already_graded(course):
    seen: list[str] = []

    def stop_after_first(line: str) -> None:
        seen.append(line)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        grade_folder(
            course["subs"], course["out"], solutions=course["sol"],
            options=GradeOptions(timeout=10), progress=stop_after_first,
        )  # fmt: skip
    assert len(seen) == 1
    first = seen[0].split("] ")[1].split(":")[0]
    assert (course["out"] / "rows" / f"{safe_name(first)}.json").is_file()
    with open(course["out"] / "gradebook.csv", newline="") as fh:
        assert [r["student"] for r in csv.DictReader(fh)] == [first]

    rest = _grade(course)
    assert rest.skipped == [first]
    assert sorted(rest.graded_now + rest.skipped) == ["ann", "ben", "cat"]


def test_cpu_time_limit_kills_the_kernel_and_costs_only_its_question(course):
    busy = dict(CORRECT, **{"a-q2": "while True:\n    pass\n"})
    alone = course["root"] / "busy"
    alone.mkdir()
    (alone / "dan.ipynb").write_text(json.dumps(submission(course["ex"], busy)))
    summary = grade_folder(
        alone, course["out"], solutions=course["sol"],
        options=GradeOptions(timeout=60, cpu_seconds=3),
    )  # fmt: skip
    row = next(r for r in summary.rows if r["student"] == "dan")
    assert (row["status"], row["points"]) == ("kernel-died", {"q1": 2, "q2": 0, "q3": 1})
    assert row["reason"] == (
        "the kernel was killed by SIGKILL (CPU-time or memory limit) in answer cell of q2"
    )


def test_a_master_that_fails_its_own_checks_is_refused(course):
    nb = json.loads((course["sol"] / "ex00_demo.ipynb").read_text())
    for c in nb["cells"]:
        if c["id"] == "a-q1":
            c["source"] = "# BEGIN SOLUTION\nn_allreduce_fwd = 'one'\n# END SOLUTION"
    (course["sol"] / "ex00_demo.ipynb").write_text(json.dumps(nb))
    with pytest.raises(MasterError, match="the master fails in the grader.*c-q1"):
        _grade(course)


def test_assignment_is_inferred_from_the_notebooks(course):
    assert infer_assignment(course["subs"], course["sol"]) == "ex00_demo"
    empty = course["root"] / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="nothing to grade in"):
        infer_assignment(empty, course["sol"])
    unknown = course["root"] / "unknown"
    unknown.mkdir()
    (unknown / "x.ipynb").write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4}))
    with pytest.raises(ValueError, match="pass --assignment"):
        infer_assignment(unknown, course["sol"])


def test_cli_end_to_end(course):
    tpp = Path(sys.executable).with_name("tpp")
    proc = subprocess.run(
        [str(tpp), "grade", str(course["subs"]), "--out", str(course["out"]), "-j", "2",
         "--timeout", "10", "--solutions", str(course["sol"])],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "3 submissions (3 graded)" in proc.stdout
    with open(course["out"] / "gradebook.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["student"], r["total"], r["status"]) for r in rows] == [
        ("ann", "6", "graded"), ("ben", "0", "graded"), ("cat", "4", "graded"),
    ]  # fmt: skip
    bad = subprocess.run(
        [str(tpp), "grade", str(course["root"] / "nowhere"), "--out", str(course["out"]),
         "--solutions", str(course["sol"]), "--assignment", "ex00_demo"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2 and "no folder" in bad.stderr


def test_cli_passes_the_guard_switch_to_the_grader(course, monkeypatch):
    from tpp import cli
    from tpp.grading import grade as grade_mod

    seen = []

    def fake_grade_folder(*args, **kwargs):
        seen.append(kwargs["options"].guard)
        raise ValueError("stop here")

    monkeypatch.setattr(grade_mod, "grade_folder", fake_grade_folder)
    base = ["grade", str(course["subs"]), "--out", str(course["out"]),
            "--solutions", str(course["sol"])]  # fmt: skip
    assert cli.main(base) == 2 and cli.main([*base, "--no-guard"]) == 2
    assert seen == [True, False]


def test_a_submission_that_kills_its_grading_process_costs_only_itself(course):
    killer = dict(CORRECT, **{"a-q1": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n"})
    bob = json.dumps(submission(course["ex"], killer))
    # with the guard, and without it in the sandbox, nothing dies: bob is graded alone (the
    # others' rows are at stake only where the worker dies, the last run)
    alone = course["root"] / "bob"
    alone.mkdir()
    (alone / "bob.ipynb").write_text(bob)

    def grade_bob(**kw):
        return grade_folder(alone, course["root"] / "out-bob", solutions=course["sol"],
                            options=GradeOptions(timeout=10, **kw)).rows  # fmt: skip

    # the kernel's guard refuses to signal another process: bob loses q1 (2 points) only
    (row,) = grade_bob()
    assert (row["student"], row["status"], row["total"]) == ("bob", "graded", 4), row
    assert "does not allow signalling other processes" in row["questions"]["q1"]["detail"]
    # without the guard, in the sandbox: the grading process is out of the kernel's sight
    # (its own PID namespace), so the kill only ends bob's kernel
    (row,) = grade_bob(guard=False, force=True)
    assert (row["status"], row["total"]) == ("graded", 4), row
    # without guard and sandbox the worker dies: only bob's row is lost, as a grader error
    (course["subs"] / "bob.ipynb").write_text(bob)
    summary = _grade(course, workers=2, guard=False, sandbox=False)
    rows = {r["student"]: (r["status"], r["total"]) for r in summary.rows}
    assert rows == {
        "ann": ("graded", 6), "ben": ("graded", 0), "cat": ("graded", 4),
        "bob": ("grader-error", 0),
    }  # fmt: skip
    bob = next(r for r in summary.rows if r["student"] == "bob")
    assert bob["reason"] == "the process grading it was killed (BrokenProcessPool)"
