"""``tpp assign``: exercises generated from masters, drift detection, master validation."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from tpp.cli import main
from tpp.grading.assign import assign, check, exercise_text, stub_source
from tpp.grading.example import demo_master, write_demo_master
from tpp.grading.notebook import MasterError, parse_master, solution_blocks

REPO = Path(__file__).resolve().parents[1]


def _write(folder: Path, nb: dict, name: str = "ex00_demo") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    return path


# --- the stub -----------------------------------------------------------------------------


def test_stub_keeps_code_outside_the_block_and_the_block_indentation():
    src = "def f(x):\n    y = 1\n    # BEGIN SOLUTION\n    return x + y\n    # END SOLUTION\n"
    expected = "def f(x):\n    y = 1\n    # YOUR CODE HERE\n    raise NotImplementedError()\n"
    assert stub_source(src) == expected


def test_stub_replaces_every_block_and_nothing_else():
    src = (
        "a = 1\n# BEGIN SOLUTION\nb = 2\n# END SOLUTION\n"
        "c = 3\n  # BEGIN SOLUTION\nd\n  # END SOLUTION"
    )
    out = stub_source(src).split("\n")
    assert out == [
        "a = 1",
        "# YOUR CODE HERE",
        "raise NotImplementedError()",
        "c = 3",
        "  # YOUR CODE HERE",
        "  raise NotImplementedError()",
    ]


@pytest.mark.parametrize(
    "src, match",
    [
        ("# BEGIN SOLUTION\nx = 1\n", "never closed"),
        ("x = 1\n# END SOLUTION\n", "without a '# BEGIN SOLUTION'"),
        ("# BEGIN SOLUTION\n# BEGIN SOLUTION\n# END SOLUTION\n", "inside another block"),
    ],
)
def test_unbalanced_markers_are_rejected_with_the_line(src, match):
    with pytest.raises(ValueError, match=match):
        solution_blocks(src)


# --- the generated exercise -----------------------------------------------------------------


def test_exercise_has_no_solution_no_hidden_cell_and_minimal_metadata(tmp_path):
    master = parse_master(write_demo_master(tmp_path / "solutions"))
    text = exercise_text(master)
    nb = json.loads(text)
    sources = ["".join(c["source"]) for c in nb["cells"]]
    joined = "\n".join(sources)
    # the solutions and the hidden probe are gone
    assert "np.split(w, tp, axis=1)" not in joined
    assert "Fraction(4 - 1, 32 + 4 - 1)" not in joined
    assert "_probe_q2" not in joined
    assert "hidden" not in text
    # the def line outside the block stays for the learner
    assert "def shard_columns(w, tp):\n    # YOUR CODE HERE\n    raise NotImplementedError()" in (
        joined
    )
    # ids kept and in the master's order, hidden cell dropped
    master_ids = [c.id for c in master.cells if c.role != "hidden"]
    assert [c["id"] for c in nb["cells"]] == master_ids
    # outputs cleared; metadata: only what the learner needs, no tolerances
    for c in nb["cells"]:
        if c["cell_type"] == "code":
            assert c["outputs"] == [] and c["execution_count"] is None
    assert set(nb["metadata"]) == {"kernelspec", "language_info", "tpp"}
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    assert nb["metadata"]["tpp"]["questions"] == [
        {"id": "q1", "points": 2, "answers": ["n_allreduce_fwd"]},
        {"id": "q2", "points": 3, "answers": ["_probe_q2"]},
        {"id": "q3", "points": 1, "answers": ["bubble_fraction"]},
    ]
    nbformat.validate(nbformat.reads(text, as_version=4))


def test_generation_is_deterministic_and_ignores_master_outputs(tmp_path):
    nb = demo_master()
    a = exercise_text(parse_master(_write(tmp_path / "a", nb)))
    for c in nb.cells:
        if c.cell_type == "code":
            c.outputs = [nbformat.v4.new_output("stream", name="stdout", text="secret 42\n")]
            c.execution_count = 7
    nb.metadata["widgets"] = {"state": "x"}
    b = exercise_text(parse_master(_write(tmp_path / "b", nb)))
    assert a == b
    assert "secret 42" not in b


# --- drift ------------------------------------------------------------------------------------


def test_check_names_stale_missing_and_extra_files(tmp_path, capsys):
    sol, ex = tmp_path / "solutions", tmp_path / "exercises"
    write_demo_master(sol)
    nb2 = demo_master()
    nb2.metadata["tpp"]["assignment"] = "ex01_other"
    _write(sol, nb2, "ex01_other")
    assert set(check(sol, ex).missing) == {"ex00_demo.ipynb", "ex01_other.ipynb"}
    assign(sol, ex)
    assert not check(sol, ex)
    assert main(["assign", "--check", "--solutions", str(sol), "--exercises", str(ex)]) == 0

    # a hand edit, an unknown notebook and a deleted one are all reported by name
    edited = ex / "ex00_demo.ipynb"
    edited.write_text(edited.read_text().replace("YOUR CODE HERE", "my answer"))
    (ex / "ex09_stray.ipynb").write_text("{}")
    (ex / "ex01_other.ipynb").unlink()
    drift = check(sol, ex)
    assert drift.stale == ("ex00_demo.ipynb",)
    assert drift.missing == ("ex01_other.ipynb",)
    assert drift.extra == ("ex09_stray.ipynb",)
    capsys.readouterr()
    assert main(["assign", "--check", "--solutions", str(sol), "--exercises", str(ex)]) == 1
    err = capsys.readouterr().err
    assert "ex00_demo.ipynb" in err and "ex01_other.ipynb" in err and "ex09_stray.ipynb" in err

    # regenerating repairs all three
    assign(sol, ex)
    assert not check(sol, ex)
    assert not (ex / "ex09_stray.ipynb").exists()


def test_master_change_makes_exercise_stale(tmp_path):
    sol, ex = tmp_path / "solutions", tmp_path / "exercises"
    nb = demo_master()
    _write(sol, nb)
    assign(sol, ex)
    nb.cells[0].source += "\nA new sentence in the prompt."
    _write(sol, nb)
    assert check(sol, ex).stale == ("ex00_demo.ipynb",)


# --- validation of masters -------------------------------------------------------------------


def _broken(tmp_path: Path, edit) -> Path:
    nb = demo_master()
    edit(nb)
    return _write(tmp_path / "solutions", nb)


def _cell(nb, cid):
    return next(c for c in nb.cells if c.id == cid)


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda nb: _cell(nb, "c-q1").metadata.update(tpp={"question": "q9"}), "'q9'.*not in"),
        (lambda nb: _cell(nb, "a-q3").update(source="bubble_fraction = 1"), "no '# BEGIN"),
        (
            lambda nb: nb.metadata.tpp.questions[2].update(answers=["n_allreduce_fwd"]),
            "duplicate answer name 'n_allreduce_fwd'",
        ),
        (
            lambda nb: nb.metadata.tpp.questions[1].update(id="q1"),
            "duplicate question id 'q1'",
        ),
        (lambda nb: nb.metadata.tpp.update(assignment="ex07"), "must equal the file name"),
        (
            lambda nb: _cell(nb, "setup").update(source="# BEGIN SOLUTION\nx=1\n# END SOLUTION"),
            "outside an answer cell",
        ),
        (lambda nb: _cell(nb, "a-q1").metadata.update(tags=["answer", "check"]), "one role"),
        (lambda nb: nb.metadata.tpp.questions[0].update(points=0), "positive number"),
        (lambda nb: nb.metadata.tpp.questions[0].update(answers=["not valid"]), "variable names"),
        (lambda nb: nb.cells.remove(_cell(nb, "a-q3")), "q3 has no answer cell"),
        (lambda nb: _cell(nb, "setup").pop("id"), "has no id"),
    ],
)
def test_invalid_master_is_rejected_with_a_message_that_says_what_to_change(
    tmp_path, edit, match
):
    path = _broken(tmp_path, edit)
    with pytest.raises(MasterError, match=match):
        parse_master(path)


def test_cli_reports_an_invalid_master_and_writes_nothing(tmp_path, capsys):
    path = _broken(tmp_path, lambda nb: _cell(nb, "c-q1").metadata.update(tpp={"question": "x"}))
    ex = tmp_path / "exercises"
    assert main(["assign", "--solutions", str(path.parent), "--exercises", str(ex)]) == 2
    assert "c-q1" in capsys.readouterr().err
    assert not list(ex.glob("*.ipynb"))


# --- the real course ---------------------------------------------------------------------------


def test_repository_exercises_are_up_to_date():
    """exercises/ is exactly what `tpp assign` generates from solutions/ (run `tpp assign`)."""
    drift = check(REPO / "solutions", REPO / "exercises")
    assert not drift, "exercises/ is out of date, run `tpp assign`:\n" + drift.describe()


def test_assign_roster_stamps_each_students_id_for_check_and_grade(tmp_path):
    """tpp assign --roster: each student's notebook carries their id (metadata and
    STUDENT_ID), which is the id both tpp check and tpp grade draw the numbers with."""
    import json as _json

    from tpp.cli import main as _main
    from tpp.grading.inputs import safe_name
    from tpp.grading.params import notebook_id

    roster = tmp_path / "roster.csv"
    roster.write_text("name,id\nAnn Lee,al4711\nBen Ode,bo4712\n")
    repo = Path(__file__).resolve().parents[1]
    out = tmp_path / "released"
    assert _main(["assign", "--solutions", str(repo / "solutions"), "--roster", str(roster),
                  "--out", str(out)]) == 0  # fmt: skip
    for sid in ("al4711", "bo4712"):
        nb = _json.loads((out / "ex07_bubble" / f"{safe_name(sid)}.ipynb").read_text())
        assert nb["metadata"]["tpp"]["student"] == sid
        assert notebook_id(nb, set()) == sid
        assert f"STUDENT_ID = {sid!r}" in "".join(
            "".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    roster.write_text("id\nal4711\nal4711\n")
    assert _main(["assign", "--solutions", str(repo / "solutions"), "--roster", str(roster),
                  "--out", str(out)]) == 2  # fmt: skip
