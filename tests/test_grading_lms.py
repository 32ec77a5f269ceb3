"""LMS-shaped input (a folder per student, a zip of them), the refusal to grade without the
sandbox, and per-student parameters (ex07: each student's answer is right only for them)."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from fractions import Fraction
from pathlib import Path

import pytest
from tpp.grading import sandbox
from tpp.grading.assign import exercise_text
from tpp.grading.example import CORRECT, WRONG, submission, write_demo_master
from tpp.grading.grade import GradeOptions, grade_folder
from tpp.grading.inputs import collect
from tpp.grading.notebook import parse_master
from tpp.grading.params import draw

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def demo(tmp_path):
    master = write_demo_master(tmp_path / "solutions")
    ex = json.loads(exercise_text(parse_master(master)))
    return {"sol": tmp_path / "solutions", "ex": ex, "root": tmp_path}


def _lms_folder(root: Path, ex: dict) -> Path:
    """Moodle-like export: one folder per student, the notebook somewhere inside."""
    subs = root / "export"
    for student, answers in (("Ann Lee_4711_assignsubmission_file", CORRECT),
                             ("Ben Ode_4712_assignsubmission_file", WRONG)):  # fmt: skip
        d = subs / student / "work"
        d.mkdir(parents=True)
        (d / "ex00_demo.ipynb").write_text(json.dumps(submission(ex, answers)))
    (subs / "Cy Empty_4713_assignsubmission_file").mkdir()
    return subs


def test_collect_reads_folders_per_student_and_zips(demo):
    subs = _lms_folder(demo["root"], demo["ex"])
    items, tmp = collect(subs)
    assert tmp is None
    by = {it.student: it for it in items}
    assert sorted(by) == ["Ann Lee_4711_assignsubmission_file",
                          "Ben Ode_4712_assignsubmission_file",
                          "Cy Empty_4713_assignsubmission_file"]  # fmt: skip
    assert by["Cy Empty_4713_assignsubmission_file"].path is None
    archive = demo["root"] / "export.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for p in sorted(subs.rglob("*.ipynb")):
            zf.write(p, "export/" + str(p.relative_to(subs)))
        zf.writestr("export/../../evil.ipynb", "{}")  # a path escaping the folder: a row, unread
    items, tmp = collect(archive)
    try:
        graded = [it for it in items if it.path is not None]
        assert sorted(it.student for it in graded) == ["Ann Lee_4711_assignsubmission_file",
                                                        "Ben Ode_4712_assignsubmission_file"]
        assert all(it.path.parent == tmp for it in graded)
        escaping = [it for it in items if it.path is None]
        assert [(it.student, it.status) for it in escaping] == [
            ("export/../../evil.ipynb", "unreadable-archive")]  # never extracted, never Ann's
        assert not (tmp.parent / "evil.ipynb").exists()
    finally:
        import shutil

        shutil.rmtree(tmp)
    assert not tmp.exists()


def test_nothing_gradable_is_an_error_not_an_empty_gradebook(demo, tmp_path):
    empty = tmp_path / "empty"
    (empty / "notes").mkdir(parents=True)
    (empty / "readme.txt").write_text("hi")
    with pytest.raises(ValueError, match="nothing to grade in"):
        collect(empty)
    res = subprocess.run(
        [sys.executable, "-m", "tpp.cli", "grade", str(empty), "--out", str(tmp_path / "o"),
         "--solutions", str(demo["sol"]), "--assignment", "ex00_demo"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 2 and "nothing to grade in" in res.stderr, res.stderr


def test_without_a_sandbox_grading_for_credit_is_refused(monkeypatch):
    sandbox.probe.cache_clear()
    monkeypatch.setattr(sandbox, "probe", lambda: "bwrap is not installed")
    with pytest.raises(ValueError, match="--unsandboxed"):
        GradeOptions().limits()
    assert GradeOptions(allow_unsandboxed=True).limits().sandbox is False


def test_solutions_are_found_from_the_course_root_wherever_grade_runs(tmp_path):
    res = subprocess.run(
        [sys.executable, "-m", "tpp.cli", "grade", str(tmp_path / "none"),
         "--out", str(tmp_path / "o")],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    # solutions/ of the course tpp belongs to was found: the error is about the submissions
    assert res.returncode == 2 and "no folder or zip" in res.stderr, res.stderr


@pytest.mark.slow
def test_grading_an_lms_zip(demo, bwrap):
    subs = _lms_folder(demo["root"], demo["ex"])
    archive = demo["root"] / "ex00_demo.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for p in sorted(subs.rglob("*.ipynb")):
            zf.write(p, str(p.relative_to(subs)))
    out = demo["root"] / "out"
    summary = grade_folder(archive, out, solutions=demo["sol"],
                           options=GradeOptions(timeout=10, workers=2))  # fmt: skip
    rows = {r["student"]: (r["status"], r["total"]) for r in summary.rows}
    assert rows == {"Ann Lee_4711_assignsubmission_file": ("graded", 6),
                    "Ben Ode_4712_assignsubmission_file": ("graded", 0)}  # fmt: skip


def _ids_with_different_parameters() -> tuple[str, str, dict, dict]:
    choices = {"P": [4, 8], "M": [16, 24, 32]}
    first = draw("student-a", "ex07_bubble", choices)
    for k in range(100):
        other = draw(f"student-{k}", "ex07_bubble", choices)
        if (other["P"], other["M"]) != (first["P"], first["M"]):
            return "student-a", f"student-{k}", first, other
    raise AssertionError("no two ids with different parameters")


@pytest.mark.slow
def test_per_student_parameters_each_answer_is_right_only_for_its_student(tmp_path, bwrap):
    a, b, pa, pb = _ids_with_different_parameters()
    master = parse_master(REPO / "solutions" / "ex07_bubble.ipynb")
    blank = json.loads(exercise_text(master))

    def with_q1(value: Fraction) -> dict:
        nb = json.loads(json.dumps(blank))
        for c in nb["cells"]:
            if c.get("id") == "4bf69215":  # q1's answer cell
                c["source"] = f"bubble_p8_m32 = Fraction({value.numerator}, {value.denominator})"
        return nb

    def gpipe_bubble(p: dict) -> Fraction:  # (P - 1) / (M + P - 1), chapter 07
        return Fraction(p["P"] - 1, p["M"] + p["P"] - 1)

    subs = tmp_path / "subs"
    (subs / a).mkdir(parents=True)
    (subs / b).mkdir()
    (subs / a / "ex07_bubble.ipynb").write_text(json.dumps(with_q1(gpipe_bubble(pa))))
    (subs / b / "ex07_bubble.ipynb").write_text(json.dumps(with_q1(gpipe_bubble(pa))))
    out = tmp_path / "out"
    summary = grade_folder(subs, out, solutions=REPO / "solutions", assignment="ex07_bubble",
                           options=GradeOptions(timeout=30, workers=2))  # fmt: skip
    q1 = {r["student"]: r["questions"]["q1"]["result"] for r in summary.rows}
    assert q1 == {a: "correct", b: "incorrect"}  # b copied a's answer
    (subs / b / "ex07_bubble.ipynb").write_text(json.dumps(with_q1(gpipe_bubble(pb))))
    summary = grade_folder(subs, out, solutions=REPO / "solutions", assignment="ex07_bubble",
                           options=GradeOptions(timeout=30, workers=2))  # fmt: skip
    q1 = {r["student"]: r["questions"]["q1"]["result"] for r in summary.rows}
    assert q1 == {a: "correct", b: "correct"}  # b's own answer


@pytest.mark.slow
def test_a_constant_stub_earns_nothing_even_with_the_right_number(tmp_path, bwrap):
    """ex06 q6: the crossover is right, but ``step_time`` is a stub returning 0.0 (the
    learner copied the number): the hidden probe at unseen inputs takes the points away."""
    master = parse_master(REPO / "solutions" / "ex06_tp_cost.ipynb")
    nb = json.loads((REPO / "solutions" / "ex06_tp_cost.ipynb").read_text())
    (cell,) = [c for c in nb["cells"] if c.get("id") == "c019-67ec72ce"]
    cell["source"] = "".join(cell["source"]) + (
        "\n\ndef step_time(N, batch, bandwidth):\n    return 0.0\n"
    )
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "stub.ipynb").write_text(json.dumps(nb))
    summary = grade_folder(subs, tmp_path / "out", solutions=REPO / "solutions",
                           options=GradeOptions(timeout=60))  # fmt: skip
    (row,) = summary.rows
    q6 = row["questions"]["q6"]
    assert (q6["result"], q6["points"]) == ("incorrect", 0), q6
    assert row["total"] == master.max_points - master.question("q6").points
