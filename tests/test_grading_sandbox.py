"""The OS sandbox and the grader's distrust, attack by attack (issue 13's classes).

One batch of the demo exercise (q1: 2 points, q2: 3 with a hidden probe, q3: 1) graded with
``-j 2``, every kernel in bubblewrap and the in-kernel guard OFF, so that what stops each
attack is the sandbox or the grader process itself, not the guard. Each test checks the exact
gradebook row; expected points follow from which answers the attack leaves right.
"""

from __future__ import annotations

import csv
import json
import os
import re
import unicodedata
from pathlib import Path

import pytest
from tpp.grading import sandbox
from tpp.grading.assign import exercise_text
from tpp.grading.example import CORRECT, submission, write_demo_master
from tpp.grading.grade import GradeOptions, grade_folder
from tpp.grading.inputs import safe_name
from tpp.grading.notebook import parse_master

pytestmark = pytest.mark.slow

FULL = {"q1": 2, "q2": 3, "q3": 1}
NO_Q1 = {"q1": 0, "q2": 3, "q3": 1}
LONG = "x" * 240
NFC, NFD = unicodedata.normalize("NFC", "Zoë"), unicodedata.normalize("NFD", "Zoë")


def test_the_sandbox_runs_here_when_ci_requires_it(bwrap):
    assert sandbox.probe() == ""


def _q1(src: str) -> dict[str, str]:
    return {**CORRECT, "a-q1": src}


def _q3(src: str) -> dict[str, str]:
    return {**CORRECT, "a-q3": src + CORRECT["a-q3"]}


# The kernel's shared folder (its cwd's parent) holds the answers folder a<hex>/ with
# answers-<nonce>-<q>.json: an attack there replaces q1's file after q1 was recorded.
_ANSWERS_Q1 = (
    "import glob, os\n"
    "_f = glob.glob(os.path.join(os.path.dirname(os.getcwd()), 'a*', 'answers-*-q1.json'))[0]\n"
    "os.unlink(_f)\n"
)


def _attacks(master: Path) -> dict[str, dict[str, str]]:
    m = str(master)
    return {
        "correct": CORRECT,
        # native code: a shared library written into the kernel's own folder and loaded
        "native_code": _q1(
            "import ctypes, shutil, _ctypes\n"
            "shutil.copy(_ctypes.__file__, 'evil.so')\n"
            "ctypes.CDLL('./evil.so')\n"
            "n_allreduce_fwd = 1\n"
        ),
        # the master, by its path and through the tpp package
        "read_master": _q1(f"_t = open({m!r}).read()\nn_allreduce_fwd = 1\n"),
        # other kernels: their folders, connection files and processes are invisible; no net
        "other_kernels": _q1(
            "import glob, os, socket\n"
            "_mine = glob.glob(os.path.dirname(os.getcwd()) + '/kernel-*.json')\n"
            "_all = glob.glob('/tmp/**/kernel-*.json', recursive=True)\n"
            "_procs = [p for p in os.listdir('/proc') if p.isdigit()]\n"
            "try:\n    socket.create_connection(('1.1.1.1', 80), timeout=1)\n    _net = 1\n"
            "except OSError:\n    _net = 0\n"
            "n_allreduce_fwd = 1 if (len(_all) == len(_mine) == 1 and len(_procs) < 6\n"
            "                        and _net == 0 and os.getuid() != 0) else 0\n"
        ),
        # file-system primitives: q1's answers file replaced by a FIFO, a symlink, a deep file
        "answers_fifo": _q3(_ANSWERS_Q1 + "os.mkfifo(_f)\n"),
        "answers_symlink": _q3(_ANSWERS_Q1 + f"os.symlink({m!r}, _f)\n"),
        "answers_deep": _q3(_ANSWERS_Q1 + "open(_f, 'w').write('[' * 100000)\n"),
        "answers_huge": _q3(_ANSWERS_Q1 + "open(_f, 'w').write(' ' * 6_000_000)\n"),
        # limits: hard = soft, and a process-count limit
        "raise_limit": _q1(
            "import resource\n"
            "resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY,) * 2)\n"
            "n_allreduce_fwd = 1\n"
        ),
        "fork_bomb": _q1(
            "import os, time\n_n = 0\n"
            "try:\n    for _ in range(300):\n        if os.fork() == 0:\n"
            "            time.sleep(120)\n            os._exit(0)\n        _n += 1\n"
            "except OSError:\n    pass\n"
            "n_allreduce_fwd = 1 if _n < 100 else 0\n"
        ),
        # a hidden check's source through In[], and a 5 MB message
        "history_leak": _q3(
            "_keys = ('ara' + 'nge(18', 'answ' + 'ers-')  # not in this cell's own source\n"
            "_src = [x for x in In if any(k in x for k in _keys)]\n"
            "raise ValueError(' '.join(_src) + 'y' * 5_000_000)\n"
        ),
    }


@pytest.fixture(scope="module")
def batch(tmp_path_factory, bwrap):
    root = tmp_path_factory.mktemp("sandbox")
    master = write_demo_master(root / "solutions")
    ex = json.loads(exercise_text(parse_master(master)))
    subs = root / "subs"
    subs.mkdir()
    for name, answers in _attacks(master).items():
        (subs / f"{name}.ipynb").write_text(json.dumps(submission(ex, answers)))
    # the submissions folder itself
    good = json.dumps(submission(ex, CORRECT))
    (subs / f"{LONG}.ipynb").write_text(good)
    (subs / f"{NFC}.ipynb").write_text(good)
    (subs / f"{NFD}.ipynb").write_text(good)
    os.mkfifo(subs / "fifo.ipynb")
    os.symlink(master, subs / "link_to_master.ipynb")
    blank = json.loads(exercise_text(parse_master(master)))
    (subs / "blank.ipynb").write_text(json.dumps(blank))
    untagged = submission(ex, CORRECT)
    for c in untagged["cells"]:
        if c.get("id") == "a-q1":
            c["id"], c["metadata"] = "mine", {}
    (subs / "untagged.ipynb").write_text(json.dumps(untagged))
    out = root / "results"
    summary = grade_folder(
        subs, out, solutions=root / "solutions",
        options=GradeOptions(timeout=8, workers=2, guard=False),
    )  # fmt: skip
    rows = {r["student"]: r for r in summary.rows}
    return {"rows": rows, "out": out, "root": root, "summary": summary}


def _expect(batch, name, status, points, reason=""):
    row = batch["rows"][name]
    assert (row["status"], row["points"], row["reason"]) == (status, points, reason), row
    with open(batch["out"] / "gradebook.csv", newline="") as fh:
        book = {r["student"]: r for r in csv.DictReader(fh)}
    line = book[name]
    assert [line[q] for q in ("q1", "q2", "q3")] == [str(points[q]) for q in ("q1", "q2", "q3")]
    assert (line["status"], line["reason"]) == (status, reason)
    return row


def test_graded_in_the_sandbox(batch):
    assert batch["summary"].sandboxed
    _expect(batch, "correct", "graded", FULL)


def test_native_code_in_the_noexec_folder_does_not_load(batch):
    row = _expect(batch, "native_code", "graded", NO_Q1)
    assert "the answer cell raised" in row["questions"]["q1"]["detail"], row  # no text echoed


def test_the_master_is_not_in_the_sandbox(batch):
    row = _expect(batch, "read_master", "graded", NO_Q1)
    assert "FileNotFoundError" in row["questions"]["q1"]["detail"], row


def test_other_kernels_processes_and_network_are_out_of_sight(batch):
    _expect(batch, "other_kernels", "graded", FULL)


@pytest.mark.parametrize(
    ("name", "why"),
    [("answers_fifo", "not a regular file"), ("answers_symlink", "OSError"),
     ("answers_deep", "nested too deeply"), ("answers_huge", "larger than")],
)  # fmt: skip
def test_a_tampered_answers_file_costs_only_that_question(batch, name, why):
    row = _expect(batch, name, "graded", NO_Q1)
    detail = row["questions"]["q1"]["detail"]
    assert row["questions"]["q1"]["result"] == "error" and (why in detail or why == "OSError")


def test_limits_cannot_be_raised_and_forks_are_bounded(batch):
    row = _expect(batch, "raise_limit", "graded", NO_Q1)
    assert "ValueError" in row["questions"]["q1"]["detail"]
    from tpp.grading import bounds

    if bounds.detect()[0]:  # cgroups (root): the whole sandbox's pids.max stopped it, and says so
        _expect(batch, "fork_bomb", "pids-limit", FULL,
                "the sandbox reached its limit of 64 processes and threads (--nproc)")
    else:  # RLIMIT_NPROC of the kernel's uid stopped it
        _expect(batch, "fork_bomb", "graded", FULL)


def test_no_hidden_source_and_no_huge_message_in_the_results(batch):
    row = _expect(batch, "history_leak", "graded", {"q1": 2, "q2": 3, "q3": 0})
    text = (batch["out"] / "results.json").read_text()
    fb = (batch["out"] / "feedback" / f"{safe_name('history_leak')}.md").read_text()
    assert "np.arange(18.0)" not in text + fb  # the hidden probe of q2
    assert "answers-" not in row["questions"]["q3"]["detail"]  # nor the serialiser cells
    assert len(text) < 300_000 and len(fb) < 5_000


def test_odd_names_get_their_own_rows_and_safe_files(batch):
    # a 240-character name: cut to 190, ended with "~" and a hash of the whole name (so two
    # long names equal in their first 200 characters keep apart)
    (long_id,) = [sid for sid in batch["rows"] if sid.startswith(LONG[:190])]
    assert len(long_id) == 201 and re.fullmatch(r"x{190}~[0-9a-f]{10}", long_id), long_id
    _expect(batch, long_id, "graded", FULL)
    assert len(safe_name(long_id)) <= 71
    assert (batch["out"] / "rows" / f"{safe_name(long_id)}.json").is_file()
    # the NFC and NFD spellings are one id: two rows, both duplicate-id, never a rename
    same = [r for r in batch["summary"].rows if r["student"] == NFC]
    assert [r["status"] for r in same] == ["duplicate-id"] * 2
    assert not [r for r in batch["summary"].rows if r["student"].startswith(f"{NFC} (")]


def test_fifos_and_links_in_the_folder_get_a_row(batch):
    _expect(batch, "fifo", "invalid-notebook", {"q1": 0, "q2": 0, "q3": 0},
            "not a regular file: a FIFO")  # fmt: skip
    _expect(batch, "link_to_master", "invalid-notebook", {"q1": 0, "q2": 0, "q3": 0},
            "not a regular file: a symbolic link")  # fmt: skip


def test_no_reference_values_in_the_results_folder(batch):
    assert not [p for p in batch["out"].rglob("*") if "reference" in p.name]
    assert not (batch["out"] / ".cache").exists()


def test_not_attempted_and_untagged_answers(batch):
    row = _expect(batch, "blank", "graded", {"q1": 0, "q2": 0, "q3": 0})
    assert {q["result"] for q in row["questions"].values()} == {"not-attempted"}
    row = _expect(batch, "untagged", "graded", FULL)
    assert row["warnings"] and "q1" in row["warnings"][0]
    fb = (batch["out"] / "feedback" / f"{safe_name('untagged')}.md").read_text()
    assert "warning: q1" in fb


def test_results_hold_no_answer_values_and_a_class_report(batch):
    results = json.loads((batch["out"] / "results.json").read_text())
    by = {r["student"]: r for r in results["students"]}
    assert not [r for r in results["students"] if "submitted" in r]
    kept = json.loads((batch["out"] / "rows" / f"{safe_name('correct')}.json").read_text())
    assert kept["submitted"] == {}  # right values are not kept even in the instructor's rows
    md = (batch["out"] / "class-report.md").read_text()
    with open(batch["out"] / "class-report.csv", newline="") as fh:
        report = {r["question"]: r for r in csv.DictReader(fh)}
    n_q3_right = sum(1 for r in by.values() if r["questions"]["q3"]["result"] == "correct")
    assert report["q3"]["correct"] == str(n_q3_right)
    assert "| q3 |" in md
