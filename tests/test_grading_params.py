"""The same exercise for the learner and the grader (issue 20): self-study defaults are what
the text says; ``tpp check`` draws the numbers with the id ``tpp grade`` will use; an id that is
not the submission's is a visible warning."""

from __future__ import annotations

import json
import re
from fractions import Fraction
from pathlib import Path

import pytest
from tpp.grading.grade import GradeOptions, grade_folder
from tpp.grading.notebook import parse_master
from tpp.grading.params import PLACEHOLDER, draw, notebook_id
from tpp.grading.selfcheck import check_notebook
from tpp.grading.submission import parameters_of

REPO = Path(__file__).resolve().parents[1]
MASTER = REPO / "solutions" / "ex07_bubble.ipynb"
EXERCISE = REPO / "exercises" / "ex07_bubble.ipynb"
CHOICES = {"P": [4, 8], "M": [16, 24, 32]}


def test_the_self_study_defaults_are_what_the_text_says():
    master = parse_master(MASTER)
    text = " ".join(c.source for c in master.cells if c.cell_type == "markdown")
    said = re.search(r"self-study defaults\s*\(\$P = (\d+)\$, \$M = (\d+)\$\)", text)
    assert said, "the text no longer states the self-study defaults"
    want = {"P": int(said.group(1)), "M": int(said.group(2))}
    assert parameters_of(master, PLACEHOLDER) == want
    assert draw(PLACEHOLDER, "ex07_bubble", CHOICES, want) == want
    with pytest.raises(ValueError, match="same parameters"):
        draw(PLACEHOLDER, "ex07_bubble", CHOICES, {"P": 8})


def test_the_notebook_id_rule():
    cell = {"cell_type": "code", "id": "p", "metadata": {"tags": ["parameters"]},
            "source": 'STUDENT_ID = "ab123"\n'}  # fmt: skip
    assert notebook_id({"cells": [cell]}, {"p"}) == "ab123"
    assert notebook_id({"cells": [dict(cell, source=f"STUDENT_ID = '{PLACEHOLDER}'")]}, {"p"}) \
        is None  # fmt: skip
    stamped = {"cells": [cell], "metadata": {"tpp": {"student": "zz9"}}}
    assert notebook_id(stamped, {"p"}) == "zz9"


def _other_id() -> tuple[str, dict]:
    defaults = {"P": 8, "M": 32}
    for k in range(200):
        got = draw(f"s{k}", "ex07_bubble", CHOICES)
        if got != defaults:
            return f"s{k}", got
    raise AssertionError("every id draws the defaults")


@pytest.mark.slow
def test_check_and_grade_use_the_same_numbers(tmp_path, bwrap):
    sid, p = _other_id()
    nb = json.loads(EXERCISE.read_text())
    for c in nb["cells"]:
        if "parameters" in c.get("metadata", {}).get("tags", []):
            src = "".join(c["source"])
            c["source"] = re.sub(r'STUDENT_ID = "[^"]*"', f'STUDENT_ID = "{sid}"', src)
        meta = c.get("metadata", {})
        if "answer" in meta.get("tags", []) and meta.get("tpp", {}).get("question") == "q1":
            # q1: the GPipe bubble (P - 1) / (M + P - 1), chapter 07
            v = Fraction(p["P"] - 1, p["M"] + p["P"] - 1)
            c["source"] = f"bubble_p8_m32 = Fraction({v.numerator}, {v.denominator})\n"
    mine = tmp_path / "mine.ipynb"
    mine.write_text(json.dumps(nb))
    report = check_notebook(mine, course=REPO)
    assert report.student_id == sid and "STUDENT_ID" not in " ".join(report.problems)
    subs = tmp_path / "subs"
    lms = subs / "Ann Lee_4711_assignsubmission_file"  # the LMS folder is not the typed id
    lms.mkdir(parents=True)
    (lms / "ex07_bubble.ipynb").write_text(json.dumps(nb))
    summary = grade_folder(subs, tmp_path / "out", solutions=REPO / "solutions",
                           assignment="ex07_bubble", options=GradeOptions(timeout=60))
    (row,) = summary.rows
    assert row["questions"]["q1"]["result"] == "correct", row
    assert row["parameters_id"] == sid
    assert any("not the submission's id" in w for w in row["warnings"])
    blank = tmp_path / "blank.ipynb"
    blank.write_text(EXERCISE.read_text())
    assert not check_notebook(blank, course=REPO).ok  # STUDENT_ID not set: not "ready"
