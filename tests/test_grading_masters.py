"""The real masters in ``solutions/`` through the grader.

For every master: its own solution notebook, submitted as is, gets full marks; the blank
exercise generated from it gets 0 on every question, and every public check cell fails on it
(a check that cannot fail is a defect).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tpp.grading.assign import exercise_text
from tpp.grading.grade import GradeOptions, grade_folder
from tpp.grading.inputs import safe_name
from tpp.grading.notebook import find_masters, parse_master

REPO = Path(__file__).resolve().parents[1]
MASTERS = find_masters(REPO / "solutions")

pytestmark = pytest.mark.slow


@pytest.mark.skipif(not MASTERS, reason="no master notebook in solutions/ yet")
@pytest.mark.parametrize("master_path", MASTERS, ids=[p.stem for p in MASTERS])
def test_master_gets_full_marks_and_blank_exercise_gets_nothing(tmp_path, master_path):
    master = parse_master(master_path)
    subs = tmp_path / master.assignment
    subs.mkdir()
    (subs / "solution.ipynb").write_bytes(master_path.read_bytes())
    (subs / "blank.ipynb").write_text(exercise_text(master))
    summary = grade_folder(
        subs, tmp_path / "out", solutions=REPO / "solutions",
        options=GradeOptions(timeout=60),
    )  # fmt: skip
    rows = {r["student"]: r for r in summary.rows}

    solution = rows["solution"]
    assert (solution["status"], solution["total"]) == ("graded", master.max_points), solution
    for q in master.questions:
        info = solution["questions"][q.id]
        assert info["result"] == "correct", (q.id, info)
        assert all(c["passed"] for c in info["checks"]), (q.id, info["checks"])

    blank = rows["blank"]
    assert blank["status"] == "graded" and blank["total"] == 0, blank
    for q in master.questions:
        info = blank["questions"][q.id]
        assert info["points"] == 0 and info["result"] != "correct", (q.id, info)
        public = [c for c in info["checks"] if c["kind"] == "public"]
        assert public, f"{q.id} has no public check cell"
        failed = [c for c in public if not c["passed"]]
        assert failed == public, f"{q.id}: a public check passes on the blank exercise"
    # the feedback of the blank names the public failures and nothing hidden
    text = (tmp_path / "out" / "feedback" / f"{safe_name('blank')}.md").read_text()
    assert "public check 1 failed" in text
    hidden_sources = [c.source for c in master.cells if c.role == "hidden"]
    for src in hidden_sources:
        assert src.strip() not in text
    json.loads((tmp_path / "out" / "results.json").read_text())


EX02 = REPO / "solutions" / "ex02_column_row.ipynb"
EX02_CHEATS = {
    # never shards: the unsharded MLP, cut into equal pieces that the all-reduce sums back
    "unsharded": "def column_row_mlp(x, w1, w2, group):\n"
    "    y = MLP(w1, w2, activation='gelu').forward(x)\n"
    "    return group.all_reduce([y / group.size for _ in range(group.size)])\n",
    # reduces zeros for the ledger's sake and returns the unsharded output
    "fake_collective": "def column_row_mlp(x, w1, w2, group):\n"
    "    y = MLP(w1, w2, activation='gelu').forward(x)\n"
    "    group.all_reduce([np.zeros_like(y) for _ in range(group.size)])\n"
    "    return [y.copy() for _ in range(group.size)]\n",
    # a correct solution written differently from the master (np.split by hand)
    "honest_np_split": "def column_row_mlp(x, w1, w2, group):\n"
    "    cols = np.split(w1, group.size, axis=1)\n"
    "    rows = np.split(w2, group.size, axis=0)\n"
    "    return group.all_reduce([gelu(x @ a) @ b for a, b in zip(cols, rows)])\n",
}


@pytest.mark.skipif(not EX02.exists(), reason="no ex02 master")
def test_ex02_q1_needs_real_sharding_not_an_unsharded_output(tmp_path):
    master = parse_master(EX02)
    blank = json.loads(exercise_text(master))
    subs = tmp_path / master.assignment
    subs.mkdir()
    for name, source in EX02_CHEATS.items():
        nb = json.loads(json.dumps(blank))
        for cell in nb["cells"]:
            if cell.get("id") == "ex02-03":
                cell["source"] = source
        (subs / f"{name}.ipynb").write_text(json.dumps(nb))
    summary = grade_folder(
        subs, tmp_path / "out", solutions=REPO / "solutions", options=GradeOptions(timeout=60)
    )
    q1 = {r["student"]: r["questions"]["q1"] for r in summary.rows}
    assert (q1["unsharded"]["points"], q1["unsharded"]["result"]) == (0, "incorrect")
    assert (q1["fake_collective"]["points"], q1["fake_collective"]["result"]) == (0, "incorrect")
    assert (q1["honest_np_split"]["points"], q1["honest_np_split"]["result"]) == (3, "correct")
