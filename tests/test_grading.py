"""Adversarial suite for ``tpp grade``: every bad submission gets exactly the row it deserves.

All submissions are built in ``tmp_path`` from the demo master of :mod:`tpp.grading.example`
(q1: 2 points, q2: 3 points with a hidden probe, q3: 1 point) and graded once per run, in three
batches at once (see :func:`_grade_batch`); each test then checks one row. Expected
points are derived by hand from which answers are right, not from running the grader.
"""

from __future__ import annotations

import csv
import fcntl
import json
import math
import multiprocessing
import os
import shutil
import time
from pathlib import Path

import psutil
import pytest
from tpp.grading.assign import exercise_text
from tpp.grading.example import CORRECT, WRONG, submission, write_demo_master
from tpp.grading.grade import GradeOptions, grade_folder
from tpp.grading.inputs import safe_name
from tpp.grading.notebook import parse_master
from tpp.grading.run import startup_wait

pytestmark = pytest.mark.slow

TIMEOUT = 15.0  # per cell; legit cells must finish on a loaded 2-core CI machine
# The submissions that wait out their cell timeout (a loop: twice, its check and its hidden probe
# both call it, burning a core) are graded in a batch of their own with a shorter one, scaled by
# the machine's load like the grader's start-up waits: their other cells are the demo's few lines
# (no import but numpy's: ~0.2 s of CPU), and the rest never waits for a timeout: TIMEOUT.
SHORT_TIMEOUT = float(math.ceil(startup_wait(3)))
SHORT = ("loop", "stubborn_loop", "memory_filled")
SHORT_MEMORY_MB = 512  # memory_filled fills the cap (twice: its retry): a small one is quick
# Submissions that need what the kernel's guard and sandbox forbid (writing outside the kernel's
# folder, starting processes): graded with both off, to test the grader's other defences (what
# is left with --unsandboxed --no-guard). The sandbox's own attacks: test_grading_sandbox.py.
UNGUARDED = ("kernel_lost_once", "child_process", "daemon")
FULL = {"q1": 2, "q2": 3, "q3": 1}
ZERO = {"q1": 0, "q2": 0, "q3": 0}


def _with(**answers: str) -> dict[str, str]:
    """CORRECT answers with some answer cells replaced (keys q1/q2/q3)."""
    out = dict(CORRECT)
    for q, src in answers.items():
        out[f"a-{q}"] = src
    return out


def _drop(nb: dict, pred) -> dict:
    nb["cells"] = [c for c in nb["cells"] if not pred(c)]
    return nb


def _tags(c: dict) -> list[str]:
    return c.get("metadata", {}).get("tags", [])


def _build(folder: Path, ex: dict, pid_file: Path) -> dict[str, object]:
    """name -> notebook dict, or bytes/str for raw files, or None for a directory."""
    def sub(answers: dict[str, str]) -> dict:
        return submission(ex, answers)

    subs: dict[str, object] = {
        "correct": sub(CORRECT),
        "half": sub(_with(q1=WRONG["a-q1"])),
        "wrong": sub(WRONG),
        "blank": json.loads(json.dumps(ex)),
        # check cells deleted, or edited + re-tagged so that nbmake/nbgrader would skip them
        "checks_deleted": _drop(sub(WRONG), lambda c: "check" in _tags(c)),
        "checks_retagged": sub(WRONG),
        "reordered": sub(CORRECT),
        "ids_changed": sub(CORRECT),
        # objects that claim equality with anything
        "eq_override": sub(
            _with(
                q1="class _Yes(int):\n    def __eq__(self, other):\n        return True\n"
                "    __hash__ = int.__hash__\nn_allreduce_fwd = _Yes(5)\n",
                q3="class _F(Fraction):\n    __eq__ = lambda self, other: True\n"
                "bubble_fraction = _F(1, 2)\n",
            )
        ),
        # patching the checker's tools inside the kernel
        "builtins_patched": sub(
            {
                **WRONG,
                "a-q2": "import builtins\nbuiltins.all = lambda iterable: True\n"
                + WRONG["a-q2"],
            }
        ),
        "tpp_patched": sub(
            {
                **WRONG,
                "a-q1": "import tpp.grading.compare as _c, tpp.grading.rows as _g\n"
                "_c.equal = _g.equal = lambda *a, **k: (True, '')\nn_allreduce_fwd = 3\n",
            }
        ),
        "json_patched": sub(
            _with(q1="import json\njson.dumps = lambda *a, **k: '{}'\nn_allreduce_fwd = 1\n")
        ),
        "os_write_patched": sub(
            _with(q1="import os\nos.write = lambda fd, b: len(b)\nn_allreduce_fwd = 1\n")
        ),
        "input_transformer": sub(
            _with(
                q1="get_ipython().input_transformers_cleanup.append(lambda lines: ['pass\\n'])\n"
                "n_allreduce_fwd = 1\n"
            )
        ),
        "traceback_off": sub(
            {
                **WRONG,
                "a-q1": "import sys\nget_ipython().showtraceback = lambda *a, **k: None\n"
                "sys.excepthook = lambda *a: None\nn_allreduce_fwd = 2\n",
            }
        ),
        # leaving the kernel
        "sys_exit": sub(_with(q1="import sys\nsys.exit(0)\n")),
        "os_exit": sub(_with(q2="import os\nos._exit(3)\n")),
        # the kernel dies once, as if the machine lost it: retried, no points lost
        "kernel_lost_once": sub(
            _with(
                q2="import os, pathlib\n"  # the kernel's folder outlives the kernel
                "_m = pathlib.Path.cwd().parent / 'lost.marker'\n"
                "if not _m.exists():\n    _m.touch()\n    os._exit(9)\n" + CORRECT["a-q2"]
            )
        ),
        "loop": sub(_with(q2="def shard_columns(w, tp):\n    while True:\n        pass\n")),
        "stubborn_loop": sub(
            _with(
                q2="import time\nwhile True:\n    try:\n        time.sleep(0.05)\n"
                "    except KeyboardInterrupt:\n        pass\n"
            )
        ),
        "print_20mb": sub(_with(q1="print('x' * 20_000_000)\nn_allreduce_fwd = 1\n")),
        "stdin": sub(_with(q1="n_allreduce_fwd = int(input('how many? '))\n")),
        "memory_bomb": sub(
            _with(q1="import numpy as np\n_big = np.ones(1 << 40)\nn_allreduce_fwd = 1\n")
        ),
        "child_process": sub(
            _with(
                q1="import subprocess\n_p = subprocess.Popen(['sleep', '300'])\n"
                f"open({str(pid_file)!r}, 'w').write(str(_p.pid))\nn_allreduce_fwd = 1\n"
            )
        ),
        # fills the kernel's address space and keeps it: the next questions need a new kernel
        "memory_filled": sub(
            _with(
                q1="_hog = []\nfor _n in (26, 20, 14, 10):\n    try:\n        while True:\n"
                "            _hog.append(bytearray(1 << _n))\n    except MemoryError:\n"
                "        pass\nraise MemoryError('full')\n"
            )
        ),
        # the same, deterministically: every later cell of this kernel raises MemoryError
        "memory_error_sticky": sub(
            _with(
                q1="get_ipython().input_transformers_cleanup.append(\n"
                "    lambda lines: ['raise MemoryError(\"still full\")\\n'])\n"
                "raise MemoryError('full')\n"
            )
        ),
        # a daemon: double fork, new session, outlives the kernel unless adopted and killed
        "daemon": sub(
            _with(
                q1="import os, time\n"
                "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
                f"        _f = open({str(pid_file.with_name('daemon.pid'))!r}, 'w')\n"
                "        _f.write(str(os.getpid()))\n        _f.close()\n"
                "        time.sleep(300)\n    os._exit(0)\n"
                "os.wait()\ntime.sleep(0.5)\nn_allreduce_fwd = 1\n"
            )
        ),
        # the probe variable preset by the answer, then the hidden probe made to fail
        "hidden_probe_sabotaged": sub(
            _with(
                q2="def shard_columns(w, tp):\n    if w.shape == (3, 6):\n"
                "        raise RuntimeError('not on inputs I have not seen')\n"
                "    return np.split(w, tp, axis=1)\n"
                "_probe_q2 = [p.tolist() for p in np.split(np.arange(18.0).reshape(3, 6), 3, 1)]\n"
            )
        ),
        # values that are not what the reference is
        "huge_answer": sub(_with(q1="n_allreduce_fwd = list(range(2_000_000))\n")),
        "nan_answer": sub(_with(q3="bubble_fraction = float('nan')\n")),
        "float_for_fraction": sub(_with(q3="bubble_fraction = 3 / 35\n")),
        "numpy_scalar": sub(_with(q1="import numpy as np\nn_allreduce_fwd = np.int64(1)\n")),
        # structure
        "missing_one": _drop(sub(CORRECT), lambda c: c.get("id") == "a-q3"),
        "no_answers": _drop(sub(CORRECT), lambda c: "answer" in _tags(c)),
        "bad_source": sub(CORRECT),
        "other_assignment": sub(CORRECT),
        "not_json": "this is { not json",
        "empty": "",
        "json_not_notebook": '{"hello": 1}',
        "json_list": "[1, 2, 3]",
        "binary": bytes(range(256)) * 4,
        "nbformat3": '{"nbformat": 3, "nbformat_minor": 0, "cells": []}',
        "a_directory": None,
        "=HYPERLINK(1)": sub(CORRECT),
    }
    nb = subs["checks_retagged"]
    for c in nb["cells"]:
        if "check" in _tags(c):
            c["metadata"]["tags"] = ["raises-exception", "skip-execution"]
            c["source"] = "pass"
    subs["reordered"]["cells"].reverse()
    for c in subs["ids_changed"]["cells"]:
        c["id"] = "copied-" + c["id"]
    next(c for c in subs["bad_source"]["cells"] if c.get("id") == "a-q2")["source"] = 123
    subs["other_assignment"]["metadata"]["tpp"]["assignment"] = "ex07_bubble"

    folder.mkdir(parents=True)
    (folder.parent / "subs_unguarded").mkdir()
    (folder.parent / "subs_short").mkdir()
    for name, content in subs.items():
        where = ("subs_unguarded" if name in UNGUARDED else "subs_short" if name in SHORT
                 else folder.name)  # fmt: skip
        path = folder.parent / where / f"{name}.ipynb"
        if content is None:
            path.mkdir()
        elif isinstance(content, bytes):
            path.write_bytes(content)
        elif isinstance(content, str):
            path.write_text(content)
        else:
            path.write_text(json.dumps(content))
    return subs


def _grade_batch(root: Path) -> None:
    """The three batches at once: the short one (two workers: it mostly waits for its
    timeouts) and the unguarded one (one worker, three submissions) each in a process of its
    own (the grader's kernel clients are not thread-safe), the main one here, two workers."""
    master_path = write_demo_master(root / "solutions")
    ex = json.loads(exercise_text(parse_master(master_path)))
    _build(root / "subs", ex, root / "child.pid")

    def options(subs: str) -> dict[str, object]:
        return {"solutions": root / "solutions", "assignment": "ex00_demo", "options": {
            "subs": GradeOptions(timeout=TIMEOUT, workers=2),
            "subs_short": GradeOptions(timeout=SHORT_TIMEOUT, workers=2,
                                       memory_mb=SHORT_MEMORY_MB),
            "subs_unguarded": GradeOptions(timeout=TIMEOUT, guard=False, sandbox=False),
        }[subs]}  # fmt: skip

    ctx = multiprocessing.get_context("spawn")
    others = {subs: ctx.Process(target=grade_folder, args=(root / subs, root / out),
                                kwargs=options(subs))
              for subs, out in (("subs_short", "results_short"),
                                ("subs_unguarded", "results_unguarded"))}  # fmt: skip
    for p in others.values():
        p.start()
    try:
        grade_folder(root / "subs", root / "results", **options("subs"))
    finally:
        for p in others.values():
            p.join()
    failed = {subs: p.exitcode for subs, p in others.items() if p.exitcode != 0}
    assert not failed, f"grading these batches failed (folder: exit code): {failed}"
    (root / "done").touch()


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    """Grade the batch once per test session, even when pytest-xdist splits this module."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # workers' temp dirs share this session's parent
        base = base.parent
    shared = base / "tpp-grading-batch"
    with open(base / "tpp-grading-batch.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not (shared / "done").exists():
                shutil.rmtree(shared, ignore_errors=True)
                shared.mkdir()
                _grade_batch(shared)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    rows = {}
    for out in ("results", "results_short", "results_unguarded"):
        results = json.loads((shared / out / "results.json").read_text())
        rows.update({r["student"]: r for r in results["students"]})
    return {
        "root": shared,
        "out": shared / "results",
        "rows": rows,
        "pid_file": shared / "child.pid",
    }


def _row(batch, name):
    return batch["rows"][name]


def _expect(batch, name, status, points, reason=""):
    row = _row(batch, name)
    assert (row["status"], row["points"], row["reason"]) == (status, points, reason), row
    assert row["total"] == sum(points.values())
    assert row["max"] == 6


# --- one row per submission, always -------------------------------------------------------


def test_every_file_gets_exactly_one_row(batch):
    files = sorted(p.stem for p in (batch["root"] / "subs").glob("*.ipynb"))
    assert sorted(set(batch["rows"]) - set(UNGUARDED) - set(SHORT)) == files
    with open(batch["out"] / "gradebook.csv", newline="") as fh:
        table = list(csv.DictReader(fh))
    assert len(table) == len(files)
    assert list(table[0]) == ["student", "q1", "q2", "q3", "total", "max", "status", "reason",
                              "file", "warnings"]  # fmt: skip
    results = json.loads((batch["out"] / "results.json").read_text())
    assert len(results["students"]) == len(files) and results["max"] == 6
    for name in files:
        assert (batch["out"] / "feedback" / f"{safe_name(name)}.md").is_file()


# --- correct, partial, wrong, blank ---------------------------------------------------------


def test_correct_submission_gets_full_marks(batch):
    _expect(batch, "correct", "graded", FULL)


def test_half_right_submission_gets_exactly_the_right_points(batch):
    # q1 wrong (2 points lost), q2 and q3 right: 3 + 1
    _expect(batch, "half", "graded", {"q1": 0, "q2": 3, "q3": 1})


def test_wrong_and_blank_get_nothing_and_blank_fails_every_check(batch):
    _expect(batch, "wrong", "graded", ZERO)
    _expect(batch, "blank", "graded", ZERO)
    for q in _row(batch, "blank")["questions"].values():
        assert q["checks"] and not any(c["passed"] for c in q["checks"])


# --- the official checks cannot be removed or disabled --------------------------------------


@pytest.mark.parametrize("name", ["checks_deleted", "checks_retagged"])
def test_deleted_or_retagged_checks_change_nothing(batch, name):
    _expect(batch, name, "graded", ZERO)
    # the official q2 check still ran, and failed on the wrong axis
    q2 = _row(batch, name)["questions"]["q2"]["checks"]
    assert q2[0] == {
        "kind": "public",
        "k": 1,
        "passed": False,
        "message": "AssertionError: each shard keeps every row",
    }


@pytest.mark.parametrize("name", ["reordered", "ids_changed"])
def test_answers_are_found_by_id_or_by_tag_whatever_the_order(batch, name):
    _expect(batch, name, "graded", FULL)


# --- no false credit from code that cheats -----------------------------------------------------


def test_objects_equal_to_everything_are_rejected(batch):
    _expect(batch, "eq_override", "graded", {"q1": 0, "q2": 3, "q3": 0})
    detail = _row(batch, "eq_override")["questions"]["q1"]["detail"]
    assert "is not a plain value" in detail


def test_patched_builtins_fool_the_public_check_but_not_the_grader(batch):
    _expect(batch, "builtins_patched", "graded", ZERO)
    # all() patched: the public q2 check "passes" in the kernel, yet no points
    assert _row(batch, "builtins_patched")["questions"]["q2"]["checks"][0]["passed"]
    assert _row(batch, "wrong")["questions"]["q2"]["checks"][0]["passed"] is False


def test_monkeypatching_tpp_in_the_kernel_has_no_effect(batch):
    _expect(batch, "tpp_patched", "graded", ZERO)


def test_patched_json_breaks_only_the_students_own_kernel(batch):
    # json.dumps faked: the kernel's own messages become garbage -> the kernel is stopped
    _expect(
        batch,
        "json_patched",
        "kernel-died",
        {"q1": 0, "q2": 3, "q3": 1},
        "the kernel broke the Jupyter protocol in answer cell of q1",
    )


def test_patched_kernel_io_only_loses_the_student_points(batch):
    # os.write faked: the grader's answer files cannot be written -> no answers, no points
    _expect(batch, "os_write_patched", "graded", ZERO)
    # an input transformer blanks every later cell, grader cells included -> nothing recorded
    _expect(batch, "input_transformer", "graded", ZERO)
    q3 = _row(batch, "input_transformer")["questions"]["q3"]
    assert q3["result"] == "error" and "answers not recorded" in q3["detail"]


def test_traceback_display_off_does_not_hide_failures(batch):
    _expect(batch, "traceback_off", "graded", ZERO)
    q2 = _row(batch, "traceback_off")["questions"]["q2"]["checks"][0]
    assert not q2["passed"]


# --- leaving the kernel, hanging, flooding, stdin, memory ---------------------------------------


def test_sys_exit_is_an_ordinary_error(batch):
    _expect(batch, "sys_exit", "graded", {"q1": 0, "q2": 3, "q3": 1})


def test_os_exit_kills_the_kernel_and_costs_only_its_question(batch):
    # the kernel is restarted, q1's cells replayed, and q3 still runs
    _expect(
        batch,
        "os_exit",
        "kernel-died",
        {"q1": 2, "q2": 0, "q3": 1},
        "the kernel exited with code 3 in answer cell of q2",
    )
    assert _row(batch, "os_exit")["questions"]["q2"]["result"] == "kernel-died"


def test_a_kernel_lost_once_is_retried_at_no_cost(batch):
    _expect(batch, "kernel_lost_once", "graded", FULL)


def test_infinite_loop_costs_only_its_question(batch):
    _expect(
        batch, "loop", "timeout", {"q1": 2, "q2": 0, "q3": 1},
        f"a cell of q2 exceeded {SHORT_TIMEOUT:g} s",
    )


def test_loop_that_ignores_interrupts_is_killed_and_costs_only_its_question(batch):
    _expect(
        batch,
        "stubborn_loop",
        "timeout",
        {"q1": 2, "q2": 0, "q3": 1},
        f"a cell of q2 exceeded {SHORT_TIMEOUT:g} s; the kernel ignored the interrupt and was "
        "restarted",
    )


def test_20_mb_of_output_is_truncated_not_stored(batch):
    # one 20 MB stream message is over the 16 MiB cap: dropped unread, and the row says so
    _expect(batch, "print_20mb", "message-too-large", FULL,
            "the kernel sent a message over 16 MiB (--max-message-mb); it was dropped")
    assert (batch["out"] / "rows" / f"{safe_name('print_20mb')}.json").stat().st_size < 50_000
    assert (batch["out"] / "results.json").stat().st_size < 1_000_000


def test_reading_stdin_fails_at_once(batch):
    _expect(batch, "stdin", "graded", {"q1": 0, "q2": 3, "q3": 1})


def test_memory_limit_turns_a_huge_allocation_into_an_error(batch):
    _expect(batch, "memory_bomb", "graded", {"q1": 0, "q2": 3, "q3": 1})


def _assert_gone(pid: int, what: str) -> None:
    """Fail (and clean up) unless process ``pid`` has exited within 10 s."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.2)
    os.kill(pid, 9)
    pytest.fail(f"the student's {what} survived grading")


def test_processes_started_by_the_student_are_killed(batch):
    _expect(batch, "child_process", "graded", FULL)
    pid = int(batch["pid_file"].read_text())
    _assert_gone(pid, "child process")


def test_a_kernel_left_without_memory_costs_only_its_question(batch):
    row = _row(batch, "memory_filled")
    assert row["points"] == {"q1": 0, "q2": 3, "q3": 1}, row
    # depending on the machine the full kernel errors at once or hangs (then: timeout); under
    # a cgroup (root) the filled pages are resident: the OOM killer ends it at the bound
    assert row["status"] in ("graded", "timeout", "memory-limit"), row
    _expect(batch, "memory_error_sticky", "graded", {"q1": 0, "q2": 3, "q3": 1})


def test_daemons_that_leave_the_kernels_session_are_killed(batch):
    _expect(batch, "daemon", "graded", FULL)
    pid = int(batch["pid_file"].with_name("daemon.pid").read_text())
    _assert_gone(pid, "daemon")


def test_a_failed_hidden_probe_earns_nothing_even_with_the_value_preset(batch):
    _expect(batch, "hidden_probe_sabotaged", "graded", {"q1": 2, "q2": 0, "q3": 1})
    q2 = _row(batch, "hidden_probe_sabotaged")["questions"]["q2"]
    assert (q2["result"], q2["detail"]) == ("incorrect", "a hidden check failed")


# --- values --------------------------------------------------------------------------------------


def test_unreadable_or_inexact_values_get_no_points(batch):
    _expect(batch, "huge_answer", "graded", {"q1": 0, "q2": 3, "q3": 1})
    assert "too large" in _row(batch, "huge_answer")["questions"]["q1"]["detail"]
    _expect(batch, "nan_answer", "graded", {"q1": 2, "q2": 3, "q3": 0})
    _expect(batch, "float_for_fraction", "graded", {"q1": 2, "q2": 3, "q3": 0})
    assert "fractions.Fraction" in _row(batch, "float_for_fraction")["questions"]["q3"]["detail"]


def test_numpy_scalar_is_a_plain_value(batch):
    _expect(batch, "numpy_scalar", "graded", FULL)


# --- files that are not a submission of this assignment ----------------------------------------


def test_missing_answer_cells(batch):
    _expect(batch, "missing_one", "missing-answers", {"q1": 2, "q2": 3, "q3": 0},
            "no answer cell for q3")
    _expect(batch, "bad_source", "missing-answers", {"q1": 2, "q2": 0, "q3": 1},
            "no answer cell for q2")
    _expect(batch, "no_answers", "missing-answers", ZERO,
            "no answer cell of ex00_demo found in the notebook")


@pytest.mark.parametrize(
    "name, reason",
    [
        ("not_json", "not valid JSON (Expecting value: line 1 column 1 (char 0))"),
        ("empty", "not valid JSON (Expecting value: line 1 column 1 (char 0))"),
        ("json_not_notebook", "JSON but not a Jupyter notebook (no 'cells' list)"),
        ("json_list", "JSON but not a Jupyter notebook (no 'cells' list)"),
        ("binary", "not UTF-8 text (is it a notebook?)"),
        ("nbformat3", "nbformat 3 notebook; expected version 4"),
        ("a_directory", "not a regular file: a folder"),
    ],
)
def test_invalid_files_become_rows(batch, name, reason):
    _expect(batch, name, "invalid-notebook", ZERO, reason)


def test_notebook_of_another_assignment(batch):
    _expect(batch, "other_assignment", "wrong-assignment", ZERO,
            "notebook of assignment 'ex07_bubble', not 'ex00_demo'")


# --- outputs -------------------------------------------------------------------------------------


def test_gradebook_is_spreadsheet_safe_and_matches_results(batch):
    with open(batch["out"] / "gradebook.csv", newline="") as fh:
        table = {r["student"]: r for r in csv.DictReader(fh)}
    assert "'=HYPERLINK(1)" in table
    assert table["half"] == {
        "student": "half", "q1": "0", "q2": "3", "q3": "1", "total": "4", "max": "6",
        "status": "graded", "reason": "", "file": "half.ipynb", "warnings": "",
    }  # fmt: skip
    assert table["os_exit"]["status"] == "kernel-died"


def test_feedback_names_public_checks_and_hides_hidden_ones(batch):
    text = (batch["out"] / "feedback" / f"{safe_name('wrong')}.md").read_text()
    assert "**Total: 0 / 6 points.**" in text
    assert "public check 1 failed: `AssertionError: each shard keeps every row`" in text
    assert "hidden check 1 failed" in text
    # nothing of the hidden cell leaks: not its source, not its variable, not its input
    for secret in ("_probe_q2", "np.arange(18.0)", "h-q2"):
        assert secret not in text
    good = (batch["out"] / "feedback" / f"{safe_name('correct')}.md").read_text()
    assert "failed" not in good and "**Total: 6 / 6 points.**" in good
