"""``tpp check NOTEBOOK``: the learner's pre-submission check, on ex07 (answers of every type).

The blank exercise fails every check; the master's answers pass with an OK line per question;
answers of the types the grader accepts (SymPy rationals, NumPy integers, 133.0-style floats)
pass; a wrong type in q1 is one sentence and does not break q2's check; a deleted or untagged
answer cell is reported with what to do.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tpp.cli import main
from tpp.grading.selfcheck import CheckError, check_notebook

REPO = Path(__file__).resolve().parents[1]
EXERCISE = REPO / "exercises" / "ex07_bubble.ipynb"
MASTER = REPO / "solutions" / "ex07_bubble.ipynb"

pytestmark = pytest.mark.slow


def _id_drawing_the_defaults() -> str:
    """An id whose numbers are the self-study ones (P=8, M=32) that GOOD answers for."""
    from tpp.grading.params import draw

    for k in range(500):
        if draw(f"s{k}", "ex07_bubble", {"P": [4, 8], "M": [16, 24, 32]}) == {"P": 8, "M": 32}:
            return f"s{k}"
    raise AssertionError("no id draws P=8, M=32")


def _with_answers(tmp_path: Path, name: str, answers: dict[str, str]) -> Path:
    """The blank ex07 with STUDENT_ID set and the answer cells of the given questions replaced."""
    import re

    nb = json.loads(EXERCISE.read_text())
    for cell in nb["cells"]:
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            cell["source"] = re.sub(r'STUDENT_ID = "[^"]*"',
                                    f'STUDENT_ID = "{_id_drawing_the_defaults()}"',
                                    "".join(cell["source"]))  # fmt: skip
    for cell in nb["cells"]:
        q = cell.get("metadata", {}).get("tpp", {}).get("question")
        if "answer" in cell.get("metadata", {}).get("tags", []) and q in answers:
            cell["source"] = answers[q]
    path = tmp_path / f"{name}.ipynb"
    path.write_text(json.dumps(nb))
    return path


GOOD = {
    "q1": "import sympy\nbubble_p8_m32 = sympy.Rational(7, 39)\n",
    "q2": "bubble_p8_m32_v4 = Fraction(7, 135)\n",
    "q3": "formula_choice = ' b '\n",
    "q4": "import numpy as np\nbubble_ratio_p8_m32_v4 = np.float64(7 / 128)\n",
    "q5": "import numpy as np\nmin_m_5pct = np.int64(133)\n",
    "q6": "min_m_5pct_v2 = 72.0\n",
}


def test_blank_exercise_fails_every_check(tmp_path, capsys):
    path = tmp_path / "blank.ipynb"
    path.write_bytes(EXERCISE.read_bytes())
    assert main(["check", "--course", str(REPO), str(path)]) == 1
    out = capsys.readouterr().out
    assert out.count("✗ q") == 6 and "0 of 6 public checks pass" in out


def test_master_answers_pass_with_an_ok_line_per_question(tmp_path, capsys):
    import re

    path = tmp_path / "mine.ipynb"  # the master, its STUDENT_ID set (else not ready)
    path.write_text(re.sub(r'STUDENT_ID = \\"your-id\\"',
                           f'STUDENT_ID = \\"{_id_drawing_the_defaults()}\\"',
                           MASTER.read_text()))  # fmt: skip
    assert "your-id" not in path.read_text().split("PLACEHOLDER")[0]
    assert main(["check", "--course", str(REPO), str(path)]) == 0
    out = capsys.readouterr().out
    for q in ("q1", "q2", "q3", "q4", "q5", "q6"):
        assert f"{q}: format OK" in out
    assert "ready to submit" in out


def test_answers_of_every_accepted_type_pass(tmp_path):
    report = check_notebook(_with_answers(tmp_path, "types", GOOD), course=REPO)
    assert report.ok, report.describe()


def test_a_wrong_type_is_a_message_and_other_checks_stand_alone(tmp_path):
    answers = dict(GOOD, q1="bubble_p8_m32 = '7/39'\n")
    report = check_notebook(_with_answers(tmp_path, "string", answers), course=REPO)
    by_q = {c.question: c for c in report.checks}
    assert not by_q["q1"].passed
    assert by_q["q1"].message == "q1: bubble_p8_m32 (a share of the rank-time; with M = 32 >> " \
        "P - 1 most of the time is busy) must be a number, not str"
    assert all(by_q[q].passed for q in ("q2", "q3", "q4", "q5", "q6")), report.describe()


def test_missing_and_untagged_answer_cells_are_reported(tmp_path):
    nb = json.loads(_with_answers(tmp_path, "base", GOOD).read_text())
    cells = []
    for cell in nb["cells"]:
        q = cell.get("metadata", {}).get("tpp", {}).get("question")
        is_answer = "answer" in cell.get("metadata", {}).get("tags", [])
        if is_answer and q == "q3":
            continue                      # deleted
        if is_answer and q == "q2":
            cell["metadata"]["tags"] = []  # untagged
        cells.append(cell)
    nb["cells"] = cells
    path = tmp_path / "broken.ipynb"
    path.write_text(json.dumps(nb))
    report = check_notebook(path, course=REPO)
    assert not report.ok
    text = report.describe()
    assert "missing: the answer cell of q3" in text
    assert "the answer cell of q2" in text and "lost its tag" in text


def test_not_an_exercise_notebook_says_what_to_do(tmp_path):
    path = tmp_path / "other.ipynb"
    path.write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    with pytest.raises(CheckError, match="no metadata.tpp.assignment"):
        check_notebook(path, course=REPO)
