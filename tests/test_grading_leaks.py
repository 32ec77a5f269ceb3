"""Nothing hidden leaves the grader (issue 20): feedback and results carry only the grader's own
words, never text the submission made (a class's ``__qualname__``, an exception's message), and
results.json holds no answer values."""

from __future__ import annotations

import json

import pytest
from tpp.grading.assign import exercise_text
from tpp.grading.compare import safe_why
from tpp.grading.example import CORRECT, submission, write_demo_master
from tpp.grading.grade import GradeOptions, grade_folder
from tpp.grading.notebook import parse_master
from tpp.grading.rows import safe_type

MARK = "LEAKMARK"  # stands for a hidden cell's source the submission captured


def test_only_builtin_type_names_and_the_serialisers_own_messages_pass():
    assert safe_type("ValueError") == "ValueError"
    assert MARK not in safe_type(f"Evil_{MARK}")
    assert "own class" in safe_type("np.arange(18.0)")
    assert safe_why("ValueError: integer too large") == "ValueError: integer too large"
    assert MARK not in safe_why(f"ValueError: type x.{MARK} is not a plain value (int)")
    assert MARK not in safe_why(f"{MARK}: anything")


@pytest.mark.slow
def test_submission_text_never_reaches_feedback_or_results(tmp_path, bwrap):
    master = write_demo_master(tmp_path / "solutions")
    ex = json.loads(exercise_text(parse_master(master)))
    evil = dict(CORRECT)
    evil["a-q1"] = (  # a value whose class name carries the captured text
        f"class C:\n    pass\nC.__qualname__ = C.__name__ = 'x {MARK}1 np.arange(18.0)'\n"
        "n_allreduce_fwd = C()\n"
    )
    evil["a-q2"] = (  # the public check calls it: its exception's message carries the text
        f"class {MARK}Error(Exception):\n    pass\n"
        f"def shard_columns(w, tp):\n    raise {MARK}Error('{MARK}2 secret probe')\n"
    )
    evil["a-q3"] = f"raise ValueError('{MARK}3 secret')\n"
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "eve.ipynb").write_text(json.dumps(submission(ex, evil)))
    (subs / "ann.ipynb").write_text(json.dumps(submission(ex, CORRECT)))
    out = tmp_path / "out"
    summary = grade_folder(subs, out, solutions=tmp_path / "solutions",
                           options=GradeOptions(timeout=15))  # fmt: skip
    assert {r["student"]: r["total"] for r in summary.rows}["ann"] == 6
    texts = [p.read_text() for p in (out / "feedback").iterdir()]
    texts.append((out / "results.json").read_text())
    texts.append((out / "gradebook.csv").read_text())
    assert not [t for t in texts if MARK in t]
    results = json.loads((out / "results.json").read_text())
    assert not [r for r in results["students"] if r.get("submitted")]
